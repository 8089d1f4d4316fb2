"""`spade selfplay`, `spade resume`, `spade warmstart` and `spade plot`. Registered on
:data:`spade_gym.cli_common.app` when :mod:`spade_gym.cli` imports this module."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from spade_gym.cli_common import PhaseProgress, app, console, fail, safe, say
from spade_gym.errors import SpadeError


@app.command()
def selfplay(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="The run's YAML configuration (see --help-config).")
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option("--set", "-s", help="Override one key, e.g. --set train.learning_rate=1e-4 (repeatable)."),
    ] = None,
    out: Annotated[Path | None, typer.Option("--out", "-o", help="The run folder (default: run.out).")] = None,
    help_config: Annotated[bool, typer.Option("--help-config", help="Print every configuration key and exit.")] = False,
) -> None:
    """Run SPADE self-play: the policy designs environments (rewarded with regret) and learns to solve them.

    Each iteration: the Designer writes G programs per prompt (validation, regret, registration) and
    its group gets one GRPO update; then the Agent takes `agent.updates_per_iteration` GRPO updates,
    each on episodes of environments drawn from the registry by prioritised replay. The run folder
    gets the config, the registry, metrics.jsonl, designs.jsonl (each design's completion, program
    and verdict), TensorBoard events, checkpoints (`spade resume RUN_DIR` continues a killed run)
    and plots.
    """
    from spade_gym.trainer.config import describe_config
    from spade_gym.trainer.run import RunDir

    if help_config:
        print(describe_config())
        return
    if config is None:
        fail(
            "give the run's configuration with --config FILE: examples/selfplay_cpu.yaml runs on 2 CPU "
            "cores; an empty file takes every default of --help-config (a GPU-sized run)",
            2,
        )
    cfg = _read_config(config, [*(overrides or []), *([f"run.out={out}"] if out is not None else [])])

    try:
        run = RunDir.create(cfg.run.out, cfg)
    except (SpadeError, OSError) as exc:  # e.g. an --out that cannot be created
        fail(f"cannot create the run folder {safe(str(cfg.run.out))}: {safe(str(exc))}", 2)
    _run_selfplay(lambda say, progress: _new_loop(cfg, run, say, progress))


def _new_loop(cfg: Any, run: Any, say: Any, progress: Any) -> Any:
    """Start a new run; a failed start removes the new run folder, so the same --out works again."""
    import shutil

    from spade_gym.trainer.selfplay import SelfPlay

    try:
        return SelfPlay(cfg, run, say=say, progress=progress)
    except BaseException:
        if not run.checkpoints() and not run.metrics_path.exists():
            shutil.rmtree(run.path, ignore_errors=True)
        raise


@app.command()
def resume(
    run_dir: Annotated[Path, typer.Argument(help="A run folder written by `spade selfplay`.")],
) -> None:
    """Continue a self-play run from its newest complete checkpoint (after a kill, at most the
    iteration in progress is lost)."""
    from spade_gym.trainer.run import RunDir
    from spade_gym.trainer.selfplay import SelfPlay

    try:
        run = RunDir.open(_existing_folder(run_dir))
        done, total = run.latest_iteration(), run.config.run.iterations
    except SpadeError as exc:
        fail(safe(str(exc)), 1)
    if done is not None and done >= total - 1:
        console.print(f"{safe(str(run_dir))} has finished all {total} iterations: nothing to resume")
        return
    _run_selfplay(lambda say, progress: SelfPlay.resume(run_dir, say=say, progress=progress))


@app.command()
def warmstart(
    config: Annotated[
        Path | None, typer.Option("--config", "-c", help="The run's YAML configuration (as for `spade selfplay`).")
    ] = None,
    overrides: Annotated[
        list[str] | None,
        typer.Option("--set", "-s", help="Override one key, e.g. --set warmstart.agent_steps=20 (repeatable)."),
    ] = None,
) -> None:
    """Run only the cold start of a self-play config: supervised steps on the oracle's actions (Agent) and
    the seed programs (Designer), cached by content hash; prints where the adapters are and the loss.

    `spade selfplay` with `warmstart.enabled: true` loads the same cached adapters before iteration 0;
    an interrupted run continues from its last saved step when run again.
    """
    from spade_gym.trainer.selfplay import check_lora, load_config_policy
    from spade_gym.trainer.warmstart import check_warmstart_config, run_warmstart

    def check(cfg: Any) -> None:
        if cfg.policy.lora is not None:
            check_lora(cfg.policy.lora)
        check_warmstart_config(cfg)

    if config is None:
        fail("give the run's configuration with --config FILE (e.g. examples/selfplay_cpu.yaml)", 2)
    cfg = _read_config(config, overrides or [], check)
    progress = PhaseProgress(say, prefix="cold start: ")
    try:
        with progress.bars:
            with progress.loading(f"loading the policy {cfg.policy.spec}"):
                policy = load_config_policy(cfg, cfg.policy.spec.removeprefix("vllm:"))
            result = run_warmstart(cfg, policy, say=say, progress=progress)
    except SpadeError as exc:
        fail(f"{type(exc).__name__}: {safe(str(exc))}", 1)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: run the same command again to continue from the last saved step[/yellow]")
        raise typer.Exit(130) from None

    def loss(values: dict[str, float | None], role: str) -> str:
        value = values.get(role)
        return "-" if value is None else f"{value:.4f}"

    console.print(
        f"adapters: {safe(str(result.adapter_path))} (hash {result.hash[:12]}{', cached' if result.cached else ''})"
    )
    console.print(
        f"data: {result.agent_samples} Agent samples from {len(result.envs)} environments, "
        f"{result.designer_samples} Designer samples; skipped {safe(str(result.skipped or 'none'))}"
    )
    console.print(
        f"train loss (nats per target token) before -> after: agent {loss(result.loss_before, 'agent')} -> "
        f"{loss(result.loss_after, 'agent')}, designer {loss(result.loss_before, 'designer')} -> "
        f"{loss(result.loss_after, 'designer')}"
    )
    console.print(
        f"{result.steps} steps ({result.steps_run} in this call), {result.wall_s:.0f} s; loss curve: "
        + " ".join(f"{v:.3f}" for v in result.losses)
    )


def _read_config(path: Path, overrides: Sequence[str], check: Any = None) -> Any:
    """The SelfPlayConfig of ``path`` with ``overrides``, passed to ``check``; exit status 2 when bad."""
    from spade_gym.trainer.config import SelfPlayConfig

    try:
        cfg = SelfPlayConfig.from_yaml(path).with_overrides(list(overrides))
        if check is not None:
            check(cfg)
    except (SpadeError, ValueError, OSError) as exc:
        fail(safe(str(exc)), 2)
    return cfg


def _existing_folder(path: Path) -> Path:
    from spade_gym.trainer.run import RunDirError

    if not path.exists():
        raise RunDirError(f"{path} does not exist")
    if not path.is_dir():
        raise RunDirError(f"{path} is a file, not a run folder")
    return path


def _run_selfplay(make: Any) -> None:
    """Make the loop with ``make(say, progress)``, train it, and print where its outputs are."""
    from spade_gym.evaluation.heldout import heldout_report
    from spade_gym.trainer.plot import plot_run
    from spade_gym.trainer.summary import designer_summary, what_moved

    progress = PhaseProgress(say)
    loop = None
    try:
        with progress.bars:  # the cold start runs while the loop is made: its bars show too
            with progress.loading("loading the policy and the registry"):
                loop = make(say, progress)
            start = loop.start
            total = loop.config.run.iterations
            say(f"run folder {loop.run.path}: iterations {start}..{total - 1} of {total}")
            results = loop.train()
        loop.close()
    except SpadeError as exc:
        fail(f"{type(exc).__name__}: {safe(str(exc))}", 1)
    except KeyboardInterrupt:
        if loop is None:
            console.print("[yellow]interrupted while starting[/yellow]")
        else:
            loop.close()
            console.print(
                f"[yellow]interrupted: the iteration in progress is lost; continue with "
                f"`spade resume {safe(str(loop.run.path))}`[/yellow]"
            )
        raise typer.Exit(130) from None
    plots = plot_run(loop.run.path)
    accepted = [env_id for r in results for env_id in r.accepted]
    metrics = loop.run.read_metrics()
    console.print("what moved (first -> last iteration):")
    for line in what_moved(metrics):
        console.print(f"  {safe(line)}")
    console.print(f"run folder: {safe(str(loop.run.path))}")
    console.print(f"metrics: {safe(str(loop.run.metrics_path))}; checkpoints: {safe(str(loop.run.checkpoints_dir))}")
    if loop.run.designs_path.exists():
        console.print(f"designs (completions, programs, verdicts): {safe(str(loop.run.designs_path))}")
    console.print(f"plots: {safe(', '.join(str(p) for p in plots) or 'none')}")
    console.print(
        f"newly accepted environments ({len(accepted)}): {safe(', '.join(accepted) or 'none')} "
        f"(`spade envs list -r {safe(str(loop.run.registry_dir))}`)"
    )
    console.print(safe(designer_summary(metrics)), soft_wrap=True)
    for line in heldout_report(loop.run.path):  # the last lines, for scripts: "held-out success (unseen seeds): ..."
        console.print(safe(line), soft_wrap=True)


@app.command()
def plot(run_dir: Annotated[Path, typer.Argument(help="A run folder written by `spade selfplay`.")]) -> None:
    """Draw a self-play run's curves (designer reward, acceptance, regret, returns, registry, time,
    tokens, training) as PNGs in RUN_DIR/plots."""
    from spade_gym.trainer.plot import plot_run
    from spade_gym.trainer.run import CONFIG_FILE, DESIGNS_FILE, METRICS_FILE, read_metrics

    try:
        folder = _existing_folder(run_dir)
        if not (folder / CONFIG_FILE).is_file():
            raise ValueError(f"{folder} is not a run folder: it has no {CONFIG_FILE}")
        if not read_metrics(folder / METRICS_FILE):
            raise ValueError(f"{folder} has no metrics yet (no iteration has finished): nothing to plot")
        paths = plot_run(folder)
    except (SpadeError, OSError, ValueError) as exc:
        fail(safe(str(exc)), 2)
    for path in paths:
        console.print(safe(str(path)))
    if (folder / DESIGNS_FILE).is_file():
        console.print(f"what the Designer wrote, and each verdict: {safe(str(folder / DESIGNS_FILE))}")
