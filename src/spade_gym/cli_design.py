"""`spade regret` and `spade design` (one environment, or with --count/--hours the factory of
:mod:`spade_gym.factory`). Registered on :data:`spade_gym.cli_common.app` when :mod:`spade_gym.cli` imports this module."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, cast

import typer
from gymnasium import error as gym_error
from rich.panel import Panel
from rich.progress import Progress

from spade_gym.agent import AGENT_MAX_NEW_TOKENS, AGENT_TEMPERATURE
from spade_gym.cli_common import app, console, default_work_registry, fail, new_table, open_registry, report_table, safe
from spade_gym.designer import DESIGNER_TEMPERATURE, EDIT_MAX_NEW_TOKENS, WRITE_MAX_NEW_TOKENS
from spade_gym.errors import SpadeError
from spade_gym.memory import MemoryConfig
from spade_gym.regret import REGRET_EPISODES

if TYPE_CHECKING:
    from spade_gym.design_prompts import PromptVariant
    from spade_gym.designer import DesignerConfig, DesignerPrompt, DesignOutcome
    from spade_gym.program import Setting
    from spade_gym.regret import RegretEstimate


@app.command()
def regret(
    env_id: Annotated[str, typer.Argument(help="A registered id (spade/Name-v0 or Name-v0) or a program file.")],
    policy: Annotated[str, typer.Option("--policy", "-p", help="The Agent: see `spade generate --help`.")] = "default",
    k: Annotated[
        int, typer.Option("-k", help="Episodes with the hint and as many without (same seeds).")
    ] = REGRET_EPISODES,
    seed: Annotated[
        int | None,
        typer.Option(help="First reset seed: the k seeds are seed .. seed+k-1 (default: k seeds drawn at random)."),
    ] = None,
    temperature: Annotated[
        float, typer.Option(help="The Agent's sampling temperature (> 0); default: spade_gym.agent.AGENT_TEMPERATURE.")
    ] = AGENT_TEMPERATURE,
    max_new_tokens: Annotated[int, typer.Option(help="Most tokens per agent turn.")] = AGENT_MAX_NEW_TOKENS,
    max_turns: Annotated[
        int | None, typer.Option(help="Cap on agent turns per episode (default: the environment's).")
    ] = None,
    registry: Annotated[
        Path | None,
        typer.Option(
            "--registry",
            "-r",
            help="Also look the id up in this registry (e.g. one `spade design` wrote to); default: "
            "$SPADE_REGISTRY and the bundled registry.",
        ),
    ] = None,
) -> None:
    """Estimate an environment's regret for a policy: what the hint adds to the return.

    Plays k episodes with the privileged hint appended to the first observation and k without, on
    the same seeds, in one batched rollout; when the hint helped, k more with the hint alone (another
    seed's observations in place of its own). Prints the arms' means with standard errors, the
    regret max(0, hint - max(no hint, hint alone)) and the Designer's reward for it.
    """
    from spade_gym.agent import RolloutConfig
    from spade_gym.cli_common import load_cli_policy
    from spade_gym.policies import SamplingParams
    from spade_gym.registry.gymnasium import register_registry
    from spade_gym.regret import estimate_regret

    target = env_id
    if Path(env_id).is_file():
        target = str(Path(env_id).resolve())
    elif env_id.endswith(".py") or "/" in env_id.removeprefix("spade/"):
        fail(f"{safe(env_id)}: no such program file (and not an id like spade/Name-v0)", 2)
    elif not env_id.startswith("spade/"):
        target = f"spade/{env_id}"
    try:
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        sampling = SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
        config = RolloutConfig(sampling=sampling, max_turns=max_turns)
        if sampling.greedy:
            raise ValueError("regret needs sampling: --temperature must be > 0")
        if registry is not None:
            open_registry(registry).close()  # a clear message for a path that is not a registry
            register_registry(registry)
        if target.startswith("spade/"):
            import gymnasium

            gymnasium.spec(target)  # an unknown id fails here, before the model loads
        agent = load_cli_policy(policy)
        with Progress(*Progress.get_default_columns(), console=console, transient=True) as bar:
            task = bar.add_task(f"{safe(env_id)}: {2 * k} episodes or more", total=2 * k)
            result = estimate_regret(
                target,
                agent,
                k,
                None if seed is None else list(range(seed, seed + k)),
                config=config,
                progress=lambda done, total: bar.update(task, completed=done, total=total),
            )
    except (SpadeError, ValueError) as exc:
        fail(f"{type(exc).__name__}: {safe(str(exc))}", 1)
    except gym_error.Error as exc:
        fail(safe(str(exc)), 2)
    _show_regret(result, agent.name, k)


def _show_regret(result: RegretEstimate, agent_name: str, k: int) -> None:
    """The arms' table and the regret line; exit status 1 when every episode failed."""
    from spade_gym.regret import designer_reward

    reward = designer_reward(True, result)
    columns = ("arm", "mean return", "std. error", "successes")
    table = new_table(f"Regret of {safe(result.env_id)} for {safe(agent_name)} (k={k})", columns)
    arms = [
        ("with hint", result.mean_hint, result.se_hint, result.hint),
        ("without hint", result.mean_nohint, result.se_nohint, result.nohint),
    ]
    if result.mean_hint_only is not None:
        arms.append(("hint alone", result.mean_hint_only, result.se_hint_only or 0.0, result.hint_only))
    for arm, mean, se, trajectories in arms:
        table.add_row(arm, f"{mean:.3f}", f"{se:.3f}", f"{sum(t.success for t in trajectories)}/{k}")
    console.print(table)
    stats = result.stats
    timing = (
        f" in {stats.total_s:.1f} s (generation {stats.generation_s:.1f} s, environments {stats.env_s:.2f} s, "
        f"{stats.generate_calls} generate calls)"
        if stats
        else ""
    )
    console.print(
        f"regret [bold]{result.regret:.3f}[/bold] ({safe(result.reason)}); seeds {safe(str(result.seeds))}; "
        f"Designer reward {reward.reward:.3f} ({reward.outcome}); {result.errors} environment error(s){timing}"
    )
    played = (*result.hint, *result.nohint, *result.hint_only)
    failed = [t for t in played if t.error]
    if failed:
        error = failed[0].error or {}
        console.print(
            f"[red]the environment failed in {len(failed)} of {len(played)} episodes (return 0); first, seed "
            f"{failed[0].seed}: {safe(str(error.get('category')))}: {safe(str(error.get('message')), 400)}[/red]"
        )
        if len(failed) == len(played):
            raise typer.Exit(1)


# Options of `spade design`
FactoryCount = Annotated[
    int | None, typer.Option(help="Factory: write environments unattended until this many designs.")
]
FactoryHours = Annotated[float | None, typer.Option(help="Factory: ... or until this many hours of wall time.")]
FactoryGroup = Annotated[int, typer.Option(help="Factory: designs sampled per prompt (best-of-N).")]
FactoryFolder = Annotated[
    Path,
    typer.Option(help="Factory folder (its registry, designs.jsonl and factory.json); an existing one is resumed."),
]
DesignRegistry = Annotated[
    Path | None,
    typer.Option(
        "--registry",
        "-r",
        help="Where accepted environments go, and the memory and novelty reference (created with the seed "
        "library, less the held-out environments, if new). Default: $SPADE_REGISTRY, else "
        f"{default_work_registry()}.",
        envvar="SPADE_REGISTRY",
    ),
]


@app.command()
def design(
    document: Annotated[
        Path | None,
        typer.Option(
            "--document",
            "-d",
            help="The grounding document: a text file (the whole file is the document), or a .jsonl/.parquet "
            "file or folder of documents (one is sampled). Default: a document of the built-in corpus.",
        ),
    ] = None,
    policy: Annotated[
        str, typer.Option("--policy", "-p", help="The Designer: see `spade generate --help`.")
    ] = "default",
    agent: Annotated[
        str | None, typer.Option(help="The Agent whose regret is measured (default: the Designer's policy).")
    ] = None,
    registry: DesignRegistry = None,
    setting: Annotated[
        str | None, typer.Option(help="Target setting: reasoning, tool_use or game (default: the Designer's choice).")
    ] = None,
    mode: Annotated[
        str,
        typer.Option(
            help="write: a new environment; edit: a variant of a memory environment (edit blocks); auto: edit for "
            "a small model (the embedded one, under 1.5B parameters by name, or on CPU), else write."
        ),
    ] = "auto",
    repairs: Annotated[
        int | None,
        typer.Option(
            help="Repair rounds that feed the validation report back (default: 0 for a small model, each round "
            "is minutes on a CPU; else 2)."
        ),
    ] = None,
    k: Annotated[int, typer.Option("-k", help="Regret episodes with the hint and as many without.")] = REGRET_EPISODES,
    memory_k: Annotated[int, typer.Option("--memory", help="Past environments shown in the prompt.")] = MemoryConfig.k,
    max_new_tokens: Annotated[
        int | None,
        typer.Option(
            help=f"Most tokens of the Designer's completion (default: {WRITE_MAX_NEW_TOKENS} in write mode, "
            f"{EDIT_MAX_NEW_TOKENS} in edit mode)."
        ),
    ] = None,
    agent_max_new_tokens: Annotated[int, typer.Option(help="Most tokens per agent turn.")] = AGENT_MAX_NEW_TOKENS,
    temperature: Annotated[
        float,
        typer.Option(
            help="The Designer's sampling temperature (0: greedy; default measured with the embedded model, "
            "spade_gym.designer.DESIGNER_TEMPERATURE). Larger models do well at 0.7-1.0."
        ),
    ] = DESIGNER_TEMPERATURE,
    agent_temperature: Annotated[
        float, typer.Option(help="The Agent's sampling temperature (> 0; default measured, see docs/learning.md).")
    ] = AGENT_TEMPERATURE,
    seed: Annotated[int, typer.Option(help="Seed of the memory choice and of both roles' sampling.")] = 0,
    out: Annotated[
        Path | None, typer.Option("--out", "-o", help="Write the whole outcome (report, regret, source) as JSON.")
    ] = None,
    prompt_variant: Annotated[
        str,
        typer.Option(
            "--prompt",
            help="Write-mode prompt: skeleton (the Env class to fill), example, examples, or fill (the host writes "
            "the skeleton, the model its holes; docs/designer.md).",
        ),
    ] = "skeleton",
    count: FactoryCount = None,
    hours: FactoryHours = None,
    group: FactoryGroup = 4,
    factory: FactoryFolder = Path("runs/factory"),
) -> None:
    """Write one environment with the Designer and print the program and its full report; or, with
    --count or --hours, run the environment factory.

    The Designer gets the environment contract, the document and its memory of past environments
    (from the registry), writes a program, and gets up to --repairs rounds with the validation
    report fed back. An accepted program's regret is measured with the Agent (k episodes with and k
    without the hint) and the environment is registered. Exit status 1 when no program was accepted.

    The factory (--count/--hours) samples --group designs per prompt, keeps what the gate accepts
    (new to the registry and to the prompt's examples), measures and registers it, prints a progress
    line per design and the validated new environments per hour; it resumes a stopped --factory folder.
    """
    factory_run = count is not None or hours is not None
    if factory_run and registry is not None:
        fail("--registry does not apply to the factory: its registry is <--factory>/registry", 2)
    sampling = (temperature, max_new_tokens, agent_temperature, agent_max_new_tokens)
    try:
        mode, config = _designer_config(policy, mode, setting, k, memory_k, prompt_variant, sampling, factory_run)
        if factory_run:
            return design_factory(policy, agent, factory, mode, config, count, hours, group, seed)
        outcome, prompt, root = _design_one(policy, agent, document, registry, setting, mode, repairs, config, seed)
    except (SpadeError, ValueError, OSError) as exc:
        fail(f"{type(exc).__name__}: {safe(str(exc))}", 2)
    _show_design(outcome, prompt, root, out)


def _is_small(policy: str) -> bool:
    """Whether `--mode auto` edits (and repairs default to 0) for this Designer."""
    from spade_gym.designer import auto_edit_probability

    return auto_edit_probability(policy) >= 0.5


def _designer_config(
    policy: str,
    mode: str,
    setting: str | None,
    k: int,
    memory_k: int,
    prompt_variant: str,
    sampling: tuple[float, int | None, float, int],
    factory: bool,
) -> tuple[str, DesignerConfig]:
    """The mode (auto resolved) and the design step of `spade design` and its factory; ValueError
    for a bad option. ``sampling``: the Designer's temperature (0: greedy) and new tokens (None: the
    mode's default), then the Agent's. Only the factory restricts the settings to ``setting``."""
    from spade_gym.agent import RolloutConfig
    from spade_gym.designer import MODES, DesignerConfig
    from spade_gym.policies import SamplingParams
    from spade_gym.policies.base import GREEDY_BELOW
    from spade_gym.program import SETTINGS

    if mode == "auto":
        mode = "edit" if _is_small(policy) else "write"
    if mode not in MODES:
        raise ValueError(f"--mode must be one of auto, {', '.join(MODES)}, got {mode!r}")
    if setting is not None and setting not in SETTINGS:
        raise ValueError(f"--setting must be one of {', '.join(SETTINGS)}, got {setting!r}")
    temperature, tokens, agent_temperature, agent_tokens = sampling
    if tokens is None:
        tokens = EDIT_MAX_NEW_TOKENS if mode == "edit" else WRITE_MAX_NEW_TOKENS
    return mode, DesignerConfig(
        k=k,
        rollout=RolloutConfig(sampling=SamplingParams(temperature=agent_temperature, max_new_tokens=agent_tokens)),
        temperature=temperature or GREEDY_BELOW / 2,
        max_new_tokens=tokens,
        edit_max_new_tokens=tokens if mode == "edit" else EDIT_MAX_NEW_TOKENS,
        memory_k=memory_k,
        settings=(cast("Setting", setting),) if setting and factory else SETTINGS,
        prompt=cast("PromptVariant", prompt_variant),  # DesignerConfig refuses another
    )


def _design_one(
    policy: str,
    agent: str | None,
    document: Path | None,
    registry: Path | None,
    setting: str | None,
    mode: str,
    repairs: int | None,
    config: DesignerConfig,
    seed: int,
) -> tuple[DesignOutcome, DesignerPrompt, Path]:
    """`spade design` without --count/--hours: one design, its prompt and the registry folder."""
    import random

    from spade_gym.cli_common import load_cli_policy
    from spade_gym.designer import build_prompt
    from spade_gym.designer import design as run_design
    from spade_gym.documents import Document, load_documents, make_document
    from spade_gym.memory import EnvironmentMemory, pick_parent
    from spade_gym.registry.gymnasium import open_registry as open_work_registry

    if repairs is None:
        repairs = 0 if _is_small(policy) else 2
    doc: Document | str
    if document is None or document.is_dir() or document.suffix.lower() in (".jsonl", ".parquet"):
        doc = load_documents(None if document is None else str(document), seed=seed).sample(1)[0]
    else:
        with open(document, "rb") as f:  # a document is capped at about 1024 tokens: 1 MB is plenty
            text = f.read(1 << 20).decode("utf-8", errors="replace")
        made = make_document(text, {"kind": "file", "path": str(document.resolve())}, title=document.name)
        if made is None:
            raise ValueError(f"{document}: no usable text in the document (empty, too short or binary)")
        doc = made
    reg = open_work_registry(registry or default_work_registry(), seed_library=True)
    rng = random.Random(seed)
    items = EnvironmentMemory(reg, config.memory).select(rng, setting=setting)
    prompt = build_prompt(
        doc,
        items,
        setting=setting,
        mode=mode,
        parent=pick_parent(items, rng) if mode == "edit" else None,
        variant=config.prompt,
    )
    designer = load_cli_policy(policy)
    agent_policy = designer if agent in (None, policy) else load_cli_policy(agent)
    source = prompt.document.source if prompt.document else None
    console.print(
        f"Designing an environment ({mode} mode, setting: {safe(prompt.setting or 'any')}) from "
        f"{safe(json.dumps(source) if source else 'no document')}; memory: "
        f"{safe(', '.join(i.record.env_id for i in prompt.memory) or 'empty')}; registry {safe(str(reg.root))}"
    )
    with console.status("the Designer is writing (each round: generate, validate, measure regret)", spinner="dots"):
        outcome = run_design(
            designer, prompt, registry=reg, agent=agent_policy, config=config, seed=seed, repairs=repairs
        )
    return outcome, prompt, reg.root


def _show_design(outcome: DesignOutcome, prompt: DesignerPrompt, root: Path, out: Path | None) -> None:
    """The program, its report and outcome; ``out``: the outcome as JSON. Exit status 1 when refused."""
    from rich.syntax import Syntax

    for i, attempt in enumerate(outcome.attempts, 1):
        console.print(f"[yellow]round {i}: refused ({safe(attempt['category'])}); the report was fed back[/yellow]")
    if outcome.source:
        console.print(Syntax(outcome.source, "python", line_numbers=True))
    else:
        console.print(Panel(safe(outcome.completion, 4000) or "(empty)", title="completion (no program found)"))
    if outcome.note:
        console.print(f"[dim]{safe(outcome.note)}[/dim]")
    console.print(report_table(f"round {outcome.rounds}", outcome.report))
    console.print(Panel(safe(outcome.feedback()), title="outcome"))
    console.print(
        f"time: generation {outcome.generation_s:.1f} s, validation {outcome.validation_s:.1f} s, "
        f"regret {outcome.regret_s:.1f} s"
    )
    if outcome.record is not None:
        console.print(
            f"registered as [bold]{safe(outcome.record.gym_id)}[/bold] in {safe(str(root))} "
            f"(`spade envs show -r {safe(str(root))} {safe(outcome.record.env_id)}`)"
        )
    if out is not None:
        data = outcome.info() | {"completion": outcome.completion, "source": outcome.source}
        data["provenance"] = prompt.provenance()
        out.write_text(json.dumps(data, ensure_ascii=False, indent=2))
        console.print(f"outcome written to {safe(str(out))}")
    if outcome.record is None:
        console.print(f"nothing was registered in {safe(str(root))} (the design was refused)")
        raise typer.Exit(1)


def design_factory(
    policy: str,
    agent: str | None,
    folder: Path,
    mode: str,
    designer_config: DesignerConfig,
    count: int | None,
    hours: float | None,
    group: int,
    seed: int,
) -> None:
    """`spade design --count/--hours`: the environment factory (spade_gym.factory), one progress line per design."""
    from spade_gym.cli_common import load_cli_policy
    from spade_gym.documents import load_documents
    from spade_gym.factory import FactoryConfig, FactorySummary, run_factory

    seconds = hours * 3600 if hours is not None else None
    config = FactoryConfig(designer=designer_config, group=group, mode=mode, count=count, seconds=seconds, seed=seed)
    documents = load_documents(None, seed=seed)
    designer = load_cli_policy(policy)

    def progress(summary: FactorySummary, line: dict[str, object]) -> None:
        console.print(
            f"{safe(summary.line())}; last: {safe(str(line['category']))} {safe(str(line['name'] or '-'))}",
            soft_wrap=True,
            highlight=False,
        )

    prompts = f"{designer_config.prompt} prompt, {group} designs per prompt"
    console.print(f"factory {safe(str(folder))}: {mode} mode, {prompts}")
    summary = run_factory(folder, designer, documents, config, agent=agent or "default", progress=progress)
    for what in ("valid", "accepted", "new"):
        rate, low, high = summary.rate(what)
        console.print(
            f"{what}: {getattr(summary, what)} of {summary.designs} ({rate:.2f}, 95% CI [{low:.2f}, {high:.2f}])"
        )
    console.print(
        f"validated new environments: {summary.new_per_hour:.1f} per hour, {summary.new_per_cpu_hour:.1f} per CPU-hour; "
        f"registry {safe(str(folder / 'registry'))}"
    )
