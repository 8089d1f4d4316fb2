"""`spade design --count N / --hours H`: the environment factory (:mod:`spade_gym.factory`) on the command line."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, cast

import typer
from rich.markup import escape as escape_markup

from spade_gym.cli import console
from spade_gym.designer import EDIT_MAX_NEW_TOKENS, WRITE_MAX_NEW_TOKENS
from spade_gym.env import escape_text
from spade_gym.errors import SpadeError
from spade_gym.memory import MemoryConfig

if TYPE_CHECKING:
    from spade_gym.design_prompts import PromptVariant

__all__ = ["design_factory"]


def _safe(text: str) -> str:
    """Untrusted text made inert for the terminal (as the rest of the CLI prints it)."""
    return escape_markup(escape_text(text))


def _fail(message: str, code: int) -> NoReturn:
    console.print(f"[red]{message}[/red]")
    raise typer.Exit(code) from None


def design_factory(
    policy: str,
    agent: str | None,
    folder: Path,
    registry: Path | None,
    setting: str | None,
    mode: str,
    temperature: float,
    max_new_tokens: int | None,
    k: int,
    memory_k: int,
    agent_max_new_tokens: int,
    agent_temperature: float,
    prompt_variant: str,
    count: int | None,
    hours: float | None,
    group: int,
    seed: int,
) -> None:
    """`spade design --count/--hours`: the environment factory (spade_gym.factory), one progress line per design."""
    from spade_gym.agent import RolloutConfig
    from spade_gym.designer import DesignerConfig, auto_edit_probability
    from spade_gym.documents import load_documents
    from spade_gym.factory import FactoryConfig, FactorySummary, run_factory
    from spade_gym.policies import SamplingParams, load_policy
    from spade_gym.program import SETTINGS

    if registry is not None:
        _fail("--registry does not apply to the factory: its registry is <--factory>/registry", 2)
    try:
        if mode == "auto":
            mode = "edit" if auto_edit_probability(policy) >= 0.5 else "write"
        if setting is not None and setting not in SETTINGS:
            raise ValueError(f"--setting must be one of {', '.join(SETTINGS)}, got {setting!r}")
        tokens = max_new_tokens or (EDIT_MAX_NEW_TOKENS if mode == "edit" else WRITE_MAX_NEW_TOKENS)
        designer_config = DesignerConfig(
            k=k,
            rollout=RolloutConfig(
                sampling=SamplingParams(temperature=agent_temperature, max_new_tokens=agent_max_new_tokens)
            ),
            sampling=SamplingParams(temperature=temperature, max_new_tokens=tokens),
            edit_max_new_tokens=tokens if mode == "edit" else EDIT_MAX_NEW_TOKENS,
            memory=MemoryConfig(k=memory_k),
            settings=(setting,) if setting else SETTINGS,
            prompt=cast("PromptVariant", prompt_variant),  # DesignerConfig refuses another
        )
        config = FactoryConfig(
            designer=designer_config,
            group=group,
            mode=mode,
            count=count,
            seconds=hours * 3600 if hours is not None else None,
            seed=seed,
        )
        documents = load_documents(None, seed=seed)
        with console.status(f"loading {_safe(policy)}", spinner="dots"):
            designer = load_policy(policy)

        def progress(summary: FactorySummary, line: dict[str, object]) -> None:
            console.print(
                f"{_safe(summary.line())}; last: {_safe(str(line['category']))} {_safe(str(line['name'] or '-'))}",
                soft_wrap=True,
                highlight=False,
            )

        console.print(f"factory {_safe(str(folder))}: {mode} mode, {prompt_variant} prompt, {group} designs per prompt")
        summary = run_factory(folder, designer, documents, config, agent=agent or "default", progress=progress)
    except (SpadeError, ValueError, OSError) as exc:
        _fail(f"{type(exc).__name__}: {_safe(str(exc))}", 2)
    for what in ("valid", "accepted", "new"):
        rate, low, high = summary.rate(what)
        console.print(
            f"{what}: {getattr(summary, what)} of {summary.designs} ({rate:.2f}, 95% CI [{low:.2f}, {high:.2f}])"
        )
    console.print(
        f"validated new environments: {summary.new_per_hour:.1f} per hour, {summary.new_per_cpu_hour:.1f} per CPU-hour; "
        f"registry {_safe(str(folder / 'registry'))}"
    )
