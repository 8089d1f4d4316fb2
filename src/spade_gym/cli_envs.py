"""`spade envs list|measure|show|validate|add|play|rebuild-index`. Registered on
:data:`spade_gym.cli_common.envs_app` when :mod:`spade_gym.cli` imports this module (`spade envs import` is in
:mod:`spade_gym.cli_share`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.panel import Panel
from rich.progress import Progress, TimeElapsedColumn, track
from rich.table import Column, Table

from spade_gym.agent import AGENT_TEMPERATURE, AGENT_TOP_P
from spade_gym.cli_common import (
    RegistryOption,
    console,
    envs_app,
    fail,
    load_cli_policy,
    new_table,
    open_registry,
    report_table,
    safe,
)
from spade_gym.env import SandboxedEnv, escape_text
from spade_gym.errors import RegistryError, SpadeError
from spade_gym.files import read_lines
from spade_gym.regret import REGRET_EPISODES

if TYPE_CHECKING:
    from spade_gym.registry import EnvRecord, Registry


def _get_record(registry: Registry, env_id: str) -> EnvRecord:
    try:
        return registry.get(env_id)
    except RegistryError as exc:
        fail(safe(exc.message), 2)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


def _returns(record: EnvRecord) -> str:
    """``"hint / no hint"``: the measured mean returns of ``record``."""
    return f"{_fmt(record.stats.mean_return_hint)} / {_fmt(record.stats.mean_return_nohint)}"


def _print_problems(reg: Registry) -> None:
    for directory, message in reg.problems():
        console.print(f"[yellow]skipped {safe(directory)}: {safe(message)}[/yellow]")


@envs_app.command("list")
def envs_list(
    registry: RegistryOption = None,
    setting: Annotated[str | None, typer.Option(help="Only this setting: reasoning, tool_use or game.")] = None,
    markdown: Annotated[
        bool,
        typer.Option("--markdown", help="Print a Markdown table (id, setting, turns, measured returns, about)."),
    ] = False,
) -> None:
    """List the environments of a registry, with their measured returns and regret."""
    reg = open_registry(registry)
    if markdown:
        print(
            "| id | setting | max turns | return hint / no hint | regret | what it trains |\n|---|---|---:|---:|---:|---|"
        )
        for record in reg.records(setting=setting):
            about = escape_text(record.description.split("; ")[0].split(". ")[0].rstrip("."))
            about = (about if len(about) <= 110 else about[:107].rsplit(" ", 1)[0] + "...").replace("|", "\\|")
            print(
                f"| `{record.gym_id}` | {record.setting} | {record.max_turns} | {_returns(record)} "
                f"| {_fmt(record.stats.regret)} | {about} |"
            )
        return
    columns = ("id", "setting", "turns", "return hint / no hint", "regret", "episodes", "tags")
    table = new_table(f"Environments in {reg.root}", columns, overflow="fold")
    records = reg.records(setting=setting)
    for r in records:
        row = (r.env_id, r.setting, str(r.max_turns), _returns(r), _fmt(r.stats.regret), str(r.stats.episodes))
        table.add_row(*row, ", ".join(r.tags))
    console.print(table)
    console.print(f"{len(records)} environment(s); Gymnasium ids are spade/<id>.")
    _print_problems(reg)


@envs_app.command("measure")
def envs_measure(
    ids: Annotated[list[str] | None, typer.Argument(help="Environment ids to measure (default: all).")] = None,
    registry: RegistryOption = None,
    policy: Annotated[
        str, typer.Option("--policy", "-p", help="The Agent: see `spade generate --help`, or a self-play run folder.")
    ] = "default",
    k: Annotated[
        int, typer.Option("-k", help="Episodes with the hint and as many without, per environment.")
    ] = REGRET_EPISODES,
    seed: Annotated[
        int | None,
        typer.Option(help="First reset seed: the k seeds are seed .. seed+k-1 (default: k seeds drawn at random)."),
    ] = None,
    temperature: Annotated[
        float, typer.Option(help="The Agent's sampling temperature (> 0); default: spade_gym.agent.AGENT_TEMPERATURE.")
    ] = AGENT_TEMPERATURE,
    top_p: Annotated[
        float, typer.Option(help="The Agent's nucleus sampling mass in (0, 1]; default: spade_gym.agent.AGENT_TOP_P.")
    ] = AGENT_TOP_P,
    max_new_tokens: Annotated[int, typer.Option(help="Most tokens per agent turn.")] = 128,
    max_turns: Annotated[int | None, typer.Option(help="Cap on agent turns per episode.")] = None,
    max_episodes: Annotated[int, typer.Option(help="Most episodes (workers) alive at once.")] = 64,
    ladder: Annotated[
        bool,
        typer.Option(
            "--ladder",
            help="Instead: k no-hint episodes at every knob value of each environment's difficulty ladder "
            "(spade_gym.ladder), the success rates stored in meta.json's ladder.",
        ),
    ] = False,
) -> None:
    """Measure each environment's returns with and without the hint, and its regret, for a policy,
    and store them in its meta.json (shown by `spade envs list`); with --ladder, its no-hint
    success at every value of its difficulty knob.

    All environments' episodes are played in one batched rollout (one generate call per turn
    across every running episode), then, for those the hint helped, k more with the hint alone in a
    second one (the regret pays only what the hint adds beyond it). Shown: returns, success rates
    (return >= 0.99) with and without the hint, regret, format compliance (the share of agent turns
    with a parsable action) and errors. Stored fields: episodes, mean_return_hint,
    mean_return_nohint, regret and format_compliance.
    """
    from spade_gym.agent import RolloutConfig
    from spade_gym.policies import SamplingParams
    from spade_gym.regret import estimate_regrets
    from spade_gym.seeds import draw_seeds

    if registry is None:
        fail(
            "spade envs measure writes into the registry: name it with -r REGISTRY (or $SPADE_REGISTRY); "
            "the bundled seed library is measured with -r envs_registry in a source checkout",
            2,
        )
    reg = open_registry(registry)
    try:
        records = [reg.get(i) for i in ids] if ids else reg.records()
        sampling = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed)
        config = RolloutConfig(sampling=sampling, max_turns=max_turns, max_episodes=max_episodes)
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        agent = load_cli_policy(policy, run_folder=True)  # a run folder: its newest checkpoint
        seeds = draw_seeds(k, "measure") if seed is None else list(range(seed, seed + k))
        if ladder:
            _measure_ladders(records, agent, k, sampling, seeds[0], max_turns, max_episodes)
            return
        with Progress(*Progress.get_default_columns(), TimeElapsedColumn(), console=console) as bar:
            task = bar.add_task(f"{len(records)} environments", total=2 * k * len(records))
            estimates = estimate_regrets(
                [str(record.source_path) for record in records],
                agent,
                k,
                seeds,
                config=config,
                progress=lambda done, total: bar.update(task, completed=done, total=total),
            )
    except (SpadeError, ValueError) as exc:
        fail(f"{type(exc).__name__}: {safe(str(exc))}", 1)
    _show_measured(
        reg,
        records,
        estimates,
        f"Measured with {safe(agent.name)}, k={k}, seeds "
        f"{', '.join(map(str, seeds))}, temperature {temperature:g}, top_p {top_p:g}",
        k,
    )


def _show_measured(reg: Any, records: list[Any], estimates: list[Any], title: str, k: int) -> None:
    """Store each environment's measured returns, regret and format compliance in its meta.json and
    print them as a table, with the rollout's timing."""
    from spade_gym.agent import format_compliance

    table = new_table(
        title,
        ("id", "return hint / no hint", "success hint / no hint", "regret", "format compliance", "errors"),
    )
    for record, result in zip(records, estimates, strict=True):
        played = [*result.hint, *result.nohint, *result.hint_only]
        compliance = format_compliance(played)
        reg.update_stats(
            record.env_id,
            episodes=len(played),
            mean_return_hint=result.mean_hint,
            mean_return_nohint=result.mean_nohint,
            regret=result.regret,
            format_compliance=compliance,
        )
        table.add_row(
            record.env_id,
            f"{result.mean_hint:.2f} / {result.mean_nohint:.2f}",
            f"{sum(t.success for t in result.hint) / k:.2f} / {sum(t.success for t in result.nohint) / k:.2f}",
            f"{result.regret:.2f}",
            _fmt(compliance),
            str(result.errors),
        )
    console.print(table)
    stats = estimates[0].stats if estimates else None
    if stats is None:
        return
    console.print(
        f"{stats.episodes} episodes in {stats.total_s:.0f} s: generation {stats.generation_s:.0f} s in "
        f"{stats.generate_calls} generate calls, environments {stats.env_s:.1f} s; stored in each meta.json"
    )
    console.print(f"format compliance {_fmt(stats.format_compliance)} over {stats.turns} agent turns")


def _measure_ladders(
    records: list[Any], agent: Any, k: int, sampling: Any, seed: int, max_turns: int | None, max_episodes: int
) -> None:
    from spade_gym.ladder import ladder_line, measure_ladders

    with Progress(*Progress.get_default_columns(), TimeElapsedColumn(), console=console) as bar:
        task = bar.add_task(f"ladders of {len(records)} environments", total=None)
        ladders = measure_ladders(
            [r.path for r in records],
            agent,
            episodes=k,
            sampling=sampling,
            seed=seed,
            max_turns=max_turns,
            max_episodes=max_episodes,
            progress=lambda done, total: bar.update(task, completed=done, total=total),
        )
    for path, measured in ladders.items():
        console.print(f"{safe(path.name)}: {safe(ladder_line(measured))}", soft_wrap=True)
    console.print(f"{len(ladders)} ladders measured ({k} no-hint episodes per knob value); stored in each meta.json")


@envs_app.command("show")
def envs_show(
    env_id: Annotated[str, typer.Argument(help="Environment id, e.g. ArithmeticChain-v0.")],
    registry: RegistryOption = None,
    source: Annotated[bool, typer.Option(help="Print the program's source.")] = True,
) -> None:
    """Show one environment: its metadata, validation summary and source."""
    from rich.syntax import Syntax

    opened = open_registry(registry)
    record = _get_record(opened, env_id)
    rows = {
        "name": record.name,
        "version": str(record.version),
        "setting": record.setting,
        "max_turns": str(record.max_turns),
        "program id": record.program_id,
        "tags": ", ".join(record.tags),
        "parents": ", ".join(record.parents) or "-",
        "document": safe(str(record.document), 200) if record.document else "-",
        "episodes": str(record.stats.episodes),
        "return with / without hint": _returns(record),
        "regret": _fmt(record.stats.regret),
        "validation": (record.validation or {}).get("category", "-"),
        "description": safe(record.description),
        "path": str(record.path),
    }
    design = _design_line_of(opened.root, record.env_id)
    if design is not None:
        rows["design"] = design
    meta = Table("field", Column("value", overflow="fold"), show_header=False, title=record.gym_id)
    for key, value in rows.items():
        meta.add_row(key, value)
    console.print(meta)
    if source:
        console.print(Syntax(record.source_path.read_text(), "python", line_numbers=True))


def _design_line_of(registry_root: Path, env_id: str) -> str | None:
    """``"<designs.jsonl>, line N (iteration I)"`` that wrote ``env_id`` in a run folder's registry."""
    from spade_gym.trainer.run import DESIGNS_FILE, REGISTRY_DIR

    designs = registry_root.parent / DESIGNS_FILE
    if registry_root.name != REGISTRY_DIR or not designs.is_file():
        return None
    try:  # streamed: a line longer than any design writes (a damaged or hostile file) is skipped unread
        for number, line in read_lines(designs, MAX_DESIGN_LINE_BYTES):
            if line is None or f'"{env_id}"' not in line:
                continue
            try:
                entry = json.loads(line)
            except ValueError:
                continue
            if isinstance(entry, dict) and entry.get("env_id") == env_id:
                return f"{safe(str(designs))}, line {number} (iteration {safe(str(entry.get('iteration')), 20)})"
    except OSError:
        return None
    return None


#: Longest ``designs.jsonl`` line ``spade envs show`` reads: a design writes at most two texts of
#: ``DESIGN_TEXT_CHARS`` characters, its feedback and its figures.
MAX_DESIGN_LINE_BYTES = 1 << 20


@envs_app.command("validate")
def envs_validate(
    files: Annotated[list[Path], typer.Argument(help="Environment program files.")],
    registry: Annotated[
        Path | None, typer.Option("--registry", "-r", help="Check novelty against this registry.")
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print each report as one line of JSON (JSON Lines) instead of a table.")
    ] = False,
) -> None:
    """Run the validation gate on program files; exit status 1 if any is refused.

    Each report lists every check (static, load, contract, determinism, termination, feasibility,
    non_triviality, variety, novelty) with its result, and the feedback a model would get to repair
    the program.
    """
    from spade_gym.program import EnvProgram
    from spade_gym.validation import validate

    reg = open_registry(registry) if registry else None
    refused = 0
    for path in track(files, description="Validating", console=console, transient=True, disable=as_json):
        try:
            program = EnvProgram.from_file(path)
        except (OSError, SpadeError) as exc:
            console.print(f"[red]{safe(str(path))}: {safe(str(exc))}[/red]")
            refused += 1
            continue
        report = validate(program, registry=reg)
        refused += not report.accepted
        if as_json:
            print(json.dumps(report.to_dict(), ensure_ascii=False))
            continue
        console.print(report_table(str(path), report))
        if not report.accepted:
            console.print(Panel(safe(report.feedback()), title="feedback for the Designer"))
    if refused:
        raise typer.Exit(1)


@envs_app.command("add")
def envs_add(
    files: Annotated[list[Path], typer.Argument(help="Environment program files.")],
    registry: Annotated[Path, typer.Option("--registry", "-r", help="Registry folder (created if missing).")],
    tag: Annotated[
        list[str] | None, typer.Option("--tag", help="Tag to store with each environment (repeatable).")
    ] = None,
) -> None:
    """Validate program files and add the accepted ones to a registry; exit status 1 if any is refused."""
    from spade_gym.program import EnvProgram
    from spade_gym.stages import register_program

    reg = open_registry(registry, create=True)
    refused = 0
    for path in track(files, description="Adding", console=console, transient=True):
        report, record = register_program(EnvProgram.from_file(path), reg, tags=tuple(tag or ()))
        if record is None:
            refused += 1
            console.print(report_table(str(path), report))
        else:
            console.print(f"[green]added[/green] {safe(str(path))} as {record.gym_id}")
    if refused:
        raise typer.Exit(1)


@envs_app.command("play")
def envs_play(
    env_id: Annotated[str, typer.Argument(help="Environment id (or a program file).")],
    registry: RegistryOption = None,
    seed: Annotated[int, typer.Option(help="Episode seed.")] = 0,
    hint: Annotated[bool, typer.Option("--hint", help="Show the privileged hint before each action.")] = False,
) -> None:
    """Play an environment in the terminal: type an action per turn (end of input quits)."""
    path = Path(env_id)
    if not path.is_file():
        path = _get_record(open_registry(registry), env_id).source_path
    env = SandboxedEnv(path)
    try:
        obs, _ = env.reset(seed=seed)
        console.print(Panel(safe(obs), title=f"{env.name} (seed {seed}, up to {env.max_turns} turns)"))
        if env.tools:
            console.print(f"tools: {safe(json.dumps(env.tools), 2000)}")
        done = False
        while not done:
            if hint:
                console.print(f"[cyan]hint:[/cyan] {safe(env.hint())}")
            try:
                action = input("action> ")
            except EOFError:
                break
            obs, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            console.print(Panel(safe(obs), title=f"reward {reward:g}" + (" · episode over" if done else "")))
            if "sandbox_error" in info:
                console.print(f"[red]{safe(info['sandbox_error']['message'])}[/red]")
        console.print(f"return: {env.episode_return:g}")
    finally:
        env.close()


@envs_app.command("rebuild-index")
def envs_rebuild_index(registry: RegistryOption = None) -> None:
    """Rebuild a registry's index.sqlite from its folders (after corruption or manual edits)."""
    reg = open_registry(registry)
    count = reg.rebuild_index()
    console.print(f"re-indexed {count} environment(s) in {reg.root}")
    _print_problems(reg)
