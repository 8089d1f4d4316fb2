"""`spade eval` and `spade compare`: held-out suites (:mod:`spade_gym.evaluation`). Registered on
:data:`spade_gym.cli_common.app` when :mod:`spade_gym.cli` imports this module."""

from __future__ import annotations

import math
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import Progress, TimeElapsedColumn

from spade_gym.cli_common import app, console, fail, load_cli_policy, new_table, safe
from spade_gym.errors import SpadeError

if TYPE_CHECKING:
    from spade_gym.evaluation import SuiteResult


def _num(value: float, fmt: str = ".3f") -> str:
    return "n/a" if math.isnan(value) else format(value, fmt)


@app.command("eval")
def eval_(
    suites: Annotated[
        list[str],
        typer.Option(
            "--suite",
            "-s",
            help="A suite (repeatable): reasoning-gym[:task,...], tool-use, games, envs:Name,..., math:FILE, mc:FILE, code:FILE, "
            "bfcl:FILE.",
        ),
    ],
    policy: Annotated[
        str,
        typer.Option("--policy", "-p", help="'default', a Hugging Face id or local path, or a self-play run folder."),
    ] = "default",
    out: Annotated[Path | None, typer.Option("--out", "-o", help="Write the results (every item) as JSON.")] = None,
    items: Annotated[
        int | None,
        typer.Option(help="Items per reasoning-gym task (default 4) or episodes per environment (default 2)."),
    ] = None,
    limit: Annotated[int | None, typer.Option(help="Only the first N items of a file suite.")] = None,
    max_new_tokens: Annotated[int, typer.Option(help="Most new tokens per answer or turn.")] = 256,
    temperature: Annotated[float, typer.Option(help="Sampling temperature (0: greedy).")] = 0.0,
    seed: Annotated[int, typer.Option(help="Sampling seed and first episode seed.")] = 0,
    max_turns: Annotated[
        int | None, typer.Option(help="Cap on turns per episode (default: played to the end).")
    ] = None,
    registry: Annotated[
        Path | None,
        typer.Option(
            "--registry", "-r", help="Tool-use and game environments from this registry (default: the seed library)."
        ),
    ] = None,
    details: Annotated[bool, typer.Option(help="Also print the score per task or environment.")] = False,
) -> None:
    """Score a policy on held-out suites; print a table with 95% confidence intervals.

    Every item given is scored and counted: an unreadable benchmark line, an empty answer or a
    failing environment scores 0 and is reported, never skipped. reasoning-gym problems come from
    seeds training never uses, and tool-use and game episodes from seeds 2^40 and up.
    """
    from spade_gym.evaluation import save_results
    from spade_gym.evaluation.suites import SuiteOptions, load_suite
    from spade_gym.policies import SamplingParams

    try:
        for name, value in (("--items", items), ("--limit", limit), ("--max-turns", max_turns)):
            if value is not None and value < 1:
                raise ValueError(f"{name} must be >= 1, got {value}")
        if out is not None and out.is_dir():
            raise ValueError(f"--out {out} is a folder; give a file path for the JSON results")
        repeated = sorted({s for s in suites if suites.count(s) > 1})
        if repeated:
            raise ValueError(f"suite {', '.join(repeated)} given more than once")
        sampling = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
        options = SuiteOptions(
            sampling=sampling,
            items=items,
            limit=limit,
            seed=seed,
            max_turns=max_turns,
            registry=None if registry is None else str(registry),
        )
        loaded = [load_suite(spec, options) for spec in suites]  # bad names fail before the model loads
    except (SpadeError, ValueError, ImportError, OSError) as exc:
        fail(safe(str(exc)), 2)
    try:
        agent = load_cli_policy(policy, run_folder=True)
    except (SpadeError, ValueError, OSError) as exc:
        fail(f"{type(exc).__name__}: {safe(str(exc))}", 1)
    results, failed_suites = [], []
    with Progress(*Progress.get_default_columns(), TimeElapsedColumn(), console=console, transient=True) as bar:
        for suite in loaded:
            task = bar.add_task(suite.name, total=None)

            def advance(done: int, total: int, task: Any = task) -> None:
                bar.update(task, completed=done, total=total)

            try:
                results.append(suite.run(agent, progress=advance))
            except (SpadeError, ValueError, OSError) as exc:  # one suite's failure keeps the others' results
                failed_suites.append(suite.name)
                console.print(f"[red]suite {safe(suite.name)} failed: {type(exc).__name__}: {safe(str(exc))}[/red]")
    _show_eval(results, str(agent.name), details)
    if out is not None and results:
        save_results(results, out, extra={"policy": str(agent.name), "policy_spec": policy})
        console.print(f"results written to {safe(str(out))}")
    if failed_suites:
        raise typer.Exit(1)


def _show_eval(results: list[SuiteResult], agent_name: str, details: bool) -> None:
    """The score table; with ``details``, the score per task or environment; the items that failed."""
    columns = ("suite", "score", "95% CI", "items", "errors", "seconds")
    table = new_table(f"{safe(agent_name)} on held-out suites", columns, figures=True)
    for result in results:
        low, high = result.interval()
        table.add_row(
            safe(result.suite),
            f"{result.score:.3f}",
            f"[{low:.3f}, {high:.3f}]",
            str(result.n),
            str(result.errors),
            f"{result.seconds:.0f}",
        )
    console.print(table)
    for result in results:
        if details:
            key = "task" if result.suite.startswith("reasoning-gym") else "env"
            parts = result.by(key)
            if len(parts) > 1:
                console.print(
                    f"{safe(result.suite)}: " + ", ".join(f"{safe(k)} {v.score:.2f} ({v.n})" for k, v in parts.items())
                )
        failed = [r for r in result.items if r.error is not None]
        if failed:
            console.print(
                f"[yellow]{safe(result.suite)}: {len(failed)} of {result.n} items scored 0 because something "
                f"failed; first, {safe(failed[0].item_id)}: {safe(str(failed[0].error), 300)}[/yellow]"
            )


@app.command()
def compare(
    a: Annotated[Path, typer.Argument(help="Results of policy A (`spade eval --out`).")],
    b: Annotated[Path, typer.Argument(help="Results of policy B.")],
) -> None:
    """Print A - B per suite with a 95% confidence interval.

    Items scored by both (the same ids in the same order) are paired; otherwise the interval is
    the unpaired one. A difference whose interval excludes 0 is marked.
    """
    from spade_gym.evaluation import compare_results, load_results

    try:
        results_a, results_b = load_results(a), load_results(b)
    except (ValueError, OSError) as exc:
        fail(safe(str(exc)), 2)
    by_b = {r.suite: r for r in results_b}
    common = [r for r in results_a if r.suite in by_b]
    name_a = results_a[0].policy if results_a else "?"
    name_b = results_b[0].policy if results_b else "?"
    console.print(f"A = {safe(str(a))} ({safe(name_a)})\nB = {safe(str(b))} ({safe(name_b)})", soft_wrap=True)
    table = new_table(None, ("suite", "A", "B", "A - B", "95% CI", "items", "paired", ""), figures=True)
    notes = []
    for result in common:
        c = compare_results(result, by_b[result.suite])
        verdict = "A better" if c.low > 0 else "B better" if c.high < 0 else ""
        defined = not math.isnan(c.low)
        table.add_row(
            safe(c.suite),
            _num(c.score_a),
            _num(c.score_b),
            _num(c.difference, "+.3f"),
            f"[{c.low:+.3f}, {c.high:+.3f}]" if defined else "n/a",
            str(c.n),
            "yes" if c.paired else "no",
            verdict + (" (settings differ)" if c.config_differences and verdict else ""),
        )
        if c.config_differences:
            notes.append(f"{c.suite}: the two results were measured differently: {'; '.join(c.config_differences)}")
    console.print(table)
    for note in notes:
        console.print(f"[yellow]{safe(note)}[/yellow]", soft_wrap=True)
    only = sorted({r.suite for r in results_a} ^ {r.suite for r in results_b})
    if only:
        console.print(f"[yellow]in one file only (not compared): {safe(', '.join(only))}[/yellow]")
    if not common:
        fail("the two files share no suite", 1)
