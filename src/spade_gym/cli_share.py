"""The commands that share environments and data: `spade export rollouts|registry|designs` and
`spade envs import`. Registered on :data:`spade_gym.cli_common.app` when :mod:`spade_gym.cli` imports this
module; the work is done by :mod:`spade_gym.export`. (`spade serve` is in
:mod:`spade_gym.integrations.commands`.)"""

from __future__ import annotations

import statistics
from pathlib import Path
from typing import Annotated

import typer

from spade_gym.cli_common import RegistryOption, app, envs_app, fail, load_cli_policy, open_registry, safe, say
from spade_gym.errors import SpadeError

export_app = typer.Typer(
    help="Share rollouts, registries and designs as JSONL files or dataset folders (a .jsonl path, or a folder "
    "that datasets.load_dataset reads and `hf upload --repo-type dataset` publishes).",
    no_args_is_help=True,
)
app.add_typer(export_app, name="export")
OutOption = Annotated[Path, typer.Option("--out", "-o", help="A .jsonl file, or a dataset folder (JSONL + card).")]


@export_app.command("rollouts")
def export_rollouts(
    env_ids: Annotated[list[str], typer.Argument(help="Gymnasium ids to play, e.g. spade/ArithmeticChain-v0.")],
    out: OutOption,
    registry: RegistryOption = None,
    policy: Annotated[str, typer.Option("--policy", "-p", help="The Agent: see `spade generate --help`.")] = "default",
    seeds: Annotated[int, typer.Option(help="Episodes per environment, at seeds first-seed ...", min=1)] = 8,
    first_seed: Annotated[int, typer.Option(help="The first episode seed.", min=0)] = 0,
    hint: Annotated[bool, typer.Option("--hint", help="Show the privileged hint in the first observation.")] = False,
) -> None:
    """Play episodes with a policy and write them: messages, actions, rewards, return, env id and seed."""
    from spade_gym import export
    from spade_gym.agent import Episode, rollout
    from spade_gym.registry.gymnasium import resolve_env_ids

    try:
        ids = resolve_env_ids(env_ids, registry)
        loaded = load_cli_policy(policy)
        episodes = [Episode(env_id, first_seed + k, hint) for env_id in ids for k in range(seeds)]
        trajectories, _ = rollout(episodes, loaded)
    except (SpadeError, ValueError) as exc:
        fail(f"{type(exc).__name__}: {safe(str(exc))}", 2)
    about = f"{len(trajectories)} episodes of {', '.join(ids)} played by {loaded.name} (spade export rollouts)."
    path = export.write_rows(export.rollout_rows(trajectories), out, name="rollouts", about=about)
    mean = statistics.fmean(t.episode_return for t in trajectories)
    say(f"wrote {len(trajectories)} episode(s), mean return {mean:.3f}, to {path}")


@export_app.command("registry")
def export_registry(
    out: OutOption,
    registry: RegistryOption = None,
    include_flagged: Annotated[bool, typer.Option(help="Also environments flagged for breaking the contract.")] = False,
) -> None:
    """Write a registry's environments (program and meta.json per row) to share it; load it with `spade envs import`."""
    from spade_gym import export

    reg = open_registry(registry)
    rows = export.registry_rows(reg, include_flagged=include_flagged)
    about = f"{len(rows)} SPADE environment programs with their meta.json; load with `spade envs import FOLDER -r REGISTRY`."
    say(f"wrote {len(rows)} environment(s) to {export.write_rows(rows, out, name='environments', about=about)}")


@export_app.command("designs")
def export_designs(
    run: Annotated[Path, typer.Argument(help="A self-play run folder, or its designs.jsonl.")],
    out: OutOption,
    min_reward: Annotated[float | None, typer.Option(help="Only accepted designs with at least this reward.")] = None,
) -> None:
    """Write a run's accepted designs as chat SFT data for the Designer (prompt, then the completion)."""
    from spade_gym import export

    try:
        rows, skipped = export.designer_sft_rows(run, min_reward=min_reward)
    except ValueError as exc:
        fail(safe(str(exc)), 2)
    about = f"{len(rows)} accepted Designer completions with their prompts (spade export designs)."
    path = export.write_rows(rows, out, name="designer_sft", about=about)
    left = ", ".join(f"{n} {why}" for why, n in skipped.items() if n)
    say(f"wrote {len(rows)} design(s) to {path}" + (f"; left out: {left}" if left else ""))


@envs_app.command("import")
def envs_import(
    source: Annotated[Path, typer.Argument(help="A dataset folder or .jsonl file written by `spade export registry`.")],
    registry: Annotated[Path, typer.Option("--registry", "-r", help="The registry to add to (created if missing).")],
    validate: Annotated[
        bool, typer.Option(help="Run every program through the validation gate (--no-validate: static check only).")
    ] = True,
) -> None:
    """Add the environments of an exported registry to a registry; exit status 1 if any was refused."""
    from spade_gym import export

    reg = open_registry(registry, create=True)
    try:
        outcomes = export.import_registry(source, reg, validate=validate)
    except (SpadeError, ValueError) as exc:
        fail(f"{type(exc).__name__}: {safe(str(exc))}", 2)
    for o in outcomes:
        say(f"{o.source_id}: {o.status}" + (f" as {o.env_id}" if o.env_id else f" ({safe(o.message, 300)})"))
    added = sum(o.status == "added" for o in outcomes)
    say(f"added {added} of {len(outcomes)} environment(s) to {reg.root}")
    if any(o.status == "refused" for o in outcomes):
        raise typer.Exit(1)
