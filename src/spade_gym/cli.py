"""The ``spade`` command.

``spade demo`` checks, loads and plays environment programs in the sandbox; ``spade doctor`` shows
which protection layers the sandbox has on this machine and proves them with a probe.
"""

from __future__ import annotations

import statistics
import time
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.panel import Panel
from rich.progress import track
from rich.table import Table

from spade_gym.env import SandboxedEnv, escape_text
from spade_gym.errors import SpadeError
from spade_gym.sandbox import LAYERS, SandboxClient, SandboxConfig

app = typer.Typer(
    help="spade_gym: SPADE self-play as Gymnasium environments. Environment programs written by a "
    "language model run in a locked-down sandbox; these commands check, play and inspect them.",
    no_args_is_help=True,
    add_completion=False,
)
console = Console()

_LAYER_DOC = {
    "private_fds": "protocol on private descriptors; stdin/stdout/stderr are /dev/null",
    "rlimits": "address space, CPU seconds, file size 0, no core files, few open files, no processes",
    "drop_root": "runs as nobody instead of root (n/a when not started as root)",
    "user_namespace": "unshared user namespace",
    "network_namespace": "unshared network namespace: no interfaces but loopback, down",
    "no_new_privs": "no privilege gain through exec (PR_SET_NO_NEW_PRIVS)",
    "seccomp": "default-deny seccomp filter: no files, sockets, processes, exec or signals to others",
}


def _default_programs() -> list[Path]:
    for base in (Path.cwd(), Path(__file__).resolve().parents[2]):
        folder = base / "examples" / "programs"
        if folder.is_dir():
            return sorted(folder.glob("*.py"))
    return []


@app.command()
def demo(
    programs: Annotated[
        list[Path] | None, typer.Argument(help="Environment program files (default: examples/programs/*.py).")
    ] = None,
    seeds: Annotated[int, typer.Option(min=1, help="Episodes per program, seeds 0..N-1.")] = 5,
) -> None:
    """Check, load and play environment programs in the sandbox.

    For each program: the static check, loading in a locked-down worker, episodes played with the
    program's own oracle (they must succeed) and with a trivial policy that always answers the empty
    string (it must not), and the time per step through the sandbox.
    """
    paths = list(programs or []) or _default_programs()
    if not paths:
        console.print("[red]No programs given and no examples/programs folder found.[/red]")
        raise typer.Exit(2)
    table = Table(title="Environment programs in the sandbox")
    for column in ("program", "setting", "turns", "oracle return", "empty-action return", "µs/step", "verdict"):
        table.add_column(column)
    failures = 0
    layers: dict[str, bool | None] = {}
    for path in track(paths, description="Playing programs", console=console, transient=True):
        try:
            env = SandboxedEnv(path, on_error="raise")
        except (SpadeError, OSError) as exc:
            failures += 1
            table.add_row(path.name, "-", "-", "-", "-", "-", f"[red]{escape_text(str(exc), 200)}[/red]")
            continue
        try:
            layers = env.client.layers
            oracle_returns: list[float] = []
            empty_returns: list[float] = []
            step_times: list[float] = []
            first_obs = env.reset(seed=0)[0]
            for seed in range(seeds):
                for policy, returns in (("oracle", oracle_returns), ("empty", empty_returns)):
                    env.reset(seed=seed)
                    done = False
                    while not done:
                        action = env.oracle() if policy == "oracle" else ""
                        started = time.perf_counter()
                        _obs, _reward, terminated, truncated, _info = env.step(action)
                        step_times.append(time.perf_counter() - started)
                        done = terminated or truncated
                    returns.append(env.episode_return)
            ok = min(oracle_returns) >= 0.99 and max(empty_returns) < 0.99
            failures += not ok
            table.add_row(
                f"{env.name}\n[dim]{path.name}[/dim]",
                env.setting,
                str(env.max_turns),
                f"{statistics.mean(oracle_returns):.2f} (min {min(oracle_returns):.2f})",
                f"{max(empty_returns):.2f}",
                f"{statistics.median(step_times) * 1e6:.0f}",
                "[green]ok[/green]" if ok else "[red]fails[/red]",
            )
            console.print(Panel(escape_text(first_obs, 600), title=f"{env.name}: first observation, seed 0"))
        except SpadeError as exc:
            failures += 1
            table.add_row(
                path.name, "-", "-", "-", "-", "-", f"[red]{exc.category}: {escape_text(exc.message, 200)}[/red]"
            )
        finally:
            env.close()
    console.print(table)
    active = [name for name in LAYERS if layers.get(name)]
    console.print(f"Sandbox layers active: {', '.join(active) or 'none'} (details: spade doctor)")
    if failures:
        raise typer.Exit(1)


@app.command()
def doctor(
    require: Annotated[
        list[str] | None,
        typer.Option("--require", help=f"Exit non-zero unless this layer is active (repeatable): {', '.join(LAYERS)}."),
    ] = None,
) -> None:
    """Show the sandbox's protection layers on this machine, and prove them with a probe.

    A worker is started exactly as for an environment; it reports which layers it could apply, then
    tries from inside what those layers must stop (a socket, fork, exec, reading and writing files,
    a write to stdout, signalling, renicing or reading the limits of its parent) and reports each
    result.
    """
    require = require or []
    unknown = [name for name in require if name not in LAYERS]
    if unknown:
        console.print(f"[red]Unknown layer(s): {', '.join(unknown)}. Known: {', '.join(LAYERS)}[/red]")
        raise typer.Exit(2)
    with SandboxClient(SandboxConfig()) as client:
        layers = client.start()
        probe = client.call("probe")
    table = Table(title="Sandbox layers of a worker on this machine")
    table.add_column("layer")
    table.add_column("state")
    table.add_column("what it does")
    for name in LAYERS:
        value = layers.get(name)
        state = (
            "[green]active[/green]" if value else ("[yellow]n/a[/yellow]" if value is None else "[red]inactive[/red]")
        )
        table.add_row(name, state, _LAYER_DOC[name])
    console.print(table)
    probe_table = Table(title="Probe: attempts from inside a worker")
    probe_table.add_column("attempt")
    probe_table.add_column("result")
    for attempt, result in probe.items():
        colour = "green" if str(result).startswith("denied") else "red"
        probe_table.add_row(attempt, f"[{colour}]{escape_text(str(result), 120)}[/{colour}]")
    console.print(probe_table)
    missing = [name for name in require if layers.get(name) is not True]
    if missing:
        console.print(f"[red]Required layer(s) not active: {', '.join(missing)}[/red]")
        raise typer.Exit(1)


if __name__ == "__main__":  # pragma: no cover
    app()
