"""The ``spade`` command line (``spade --help`` lists its commands): `spade demo`, `doctor` and
`generate` here; the other commands live in cli_design, cli_train, cli_eval, cli_envs and cli_share,
which register on the app of :mod:`spade_gym.cli_common`, imported below in the order `--help` lists them."""

from __future__ import annotations

import importlib.metadata
import statistics
import time
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.panel import Panel
from rich.progress import track
from rich.table import Table

from spade_gym import cli_common
from spade_gym.cli_common import app, console, fail, load_cli_policy, new_table, safe
from spade_gym.env import SandboxedEnv
from spade_gym.errors import SpadeError, install_hint
from spade_gym.program import SUCCESS_RETURN
from spade_gym.sandbox import LAYERS, SandboxClient, SandboxConfig

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
        fail("No programs given and no examples/programs folder found.", 2)
    table = new_table(
        "Environment programs in the sandbox (mean return of the oracle and of an empty action)",
        ("program", "setting", "turns", "oracle", "empty", "µs/step", "verdict"),
    )
    failures = 0
    layers: dict[str, bool | None] = {}
    for path in track(paths, description="Playing programs", console=console, transient=True):
        try:
            env = SandboxedEnv(path, on_error="raise")
        except (SpadeError, OSError) as exc:
            failures += 1
            table.add_row(path.name, "-", "-", "-", "-", "-", f"[red]{safe(str(exc), 200)}[/red]")
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
            mean, low = statistics.mean(oracle_returns), min(oracle_returns)
            ok = low >= SUCCESS_RETURN and max(empty_returns) < SUCCESS_RETURN
            failures += not ok
            table.add_row(
                f"{env.name}\n[dim]{path.name}[/dim]",
                env.setting,
                str(env.max_turns),
                f"{mean:.2f}" + (f" (min {low:.2f})" if low < mean else ""),
                f"{max(empty_returns):.2f}",
                f"{statistics.median(step_times) * 1e6:.0f}",
                "[green]ok[/green]" if ok else "[red]fails[/red]",
            )
            console.print(Panel(safe(first_obs, 600), title=f"{env.name}: first observation, seed 0"))
        except SpadeError as exc:
            failures += 1
            table.add_row(path.name, "-", "-", "-", "-", "-", f"[red]{exc.category}: {safe(exc.message, 200)}[/red]")
        finally:
            env.close()
    console.print(table)
    if layers:  # known once a program's worker started
        active = [name for name in LAYERS if layers.get(name)]
        console.print(f"Sandbox layers active: {', '.join(active) or 'none'} (details: spade doctor)")
    else:
        console.print("No program was loaded, so no sandbox worker started (`spade doctor` shows its layers).")
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
        fail(f"Unknown layer(s): {', '.join(unknown)}. Known: {', '.join(LAYERS)}", 2)
    with SandboxClient(SandboxConfig()) as client:
        layers = client.start()
        probe = client.call("probe")
    table = new_table("Sandbox layers of a worker on this machine", ("layer", "state", "what it does"))
    for name in LAYERS:
        state = {True: "[green]active[/green]", None: "[yellow]n/a[/yellow]"}.get(
            layers.get(name), "[red]inactive[/red]"
        )
        table.add_row(name, state, _LAYER_DOC[name])
    console.print(table)
    probe_table = new_table("Probe: attempts from inside a worker", ("attempt", "result"))
    for attempt, result in probe.items():
        colour = "green" if str(result).startswith("denied") else "red"
        probe_table.add_row(attempt, f"[{colour}]{safe(str(result), 120)}[/{colour}]")
    console.print(probe_table)
    console.print(_backends_table())
    missing = [name for name in require if layers.get(name) is not True]
    if missing:
        fail(f"Required layer(s) not active: {', '.join(missing)}", 1)


def _backends_table() -> Table:
    """Which language-model backends this machine can run, without loading a model."""

    def version(dist: str) -> str | None:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None

    table = new_table("Language-model backends (load_policy)", ("backend", "state", "detail"))
    torch_version, transformers_version = version("torch"), version("transformers")
    if torch_version and transformers_version:
        import torch

        gpu = f"CUDA GPU: {torch.cuda.get_device_name(0)}" if torch.cuda.is_available() else "no CUDA GPU: runs on CPU"
        row = ("[green]ready[/green]", f"torch {torch_version}, transformers {transformers_version}; {gpu}")
    else:
        row = ("[red]missing[/red]", f"{install_hint('train')}; torch's CPU build first on CPU-only machines")
    table.add_row("transformers", *row)
    from spade_gym.errors import ModelNotFound
    from spade_gym.policies.embedded import EMBEDDED_NAME, cache_dir, embedded_gguf_path

    try:
        gguf = embedded_gguf_path()
        cached = [p for p in (cache_dir() / "models").glob(f"{gguf.stem}-*") if (p / "model.safetensors").is_file()]
        detail = f"cached in {cached[0]}" if cached else f"{gguf.name} found; converted on first use into {cache_dir()}"
        table.add_row(f"default ({EMBEDDED_NAME})", "[green]ready[/green]", safe(detail))
    except ModelNotFound as exc:
        table.add_row(f"default ({EMBEDDED_NAME})", "[red]missing[/red]", safe(exc.message))
    for backend, dist, note, install in (
        ("vllm:<id>", "vllm", "; needs an NVIDIA GPU", f"{install_hint('vllm')}; NVIDIA GPU"),
        ("openai:<model>@<url>", "openai", "", install_hint("openai")),
    ):
        found = version(dist)
        state = "[green]installed[/green]" if found else "[yellow]not installed[/yellow]"
        table.add_row(backend, state, safe(f"{dist} {found}{note}" if found else install))
    return table


@app.command()
def generate(
    prompt: Annotated[str, typer.Argument(help="The user message.")],
    policy: Annotated[
        str,
        typer.Option(
            "--policy",
            "-p",
            help="`default` (embedded model), a hub id or path, `vllm:ID` or `openai:MODEL@URL`.",
        ),
    ] = "default",
    system: Annotated[str | None, typer.Option("--system", help="A system message before the prompt.")] = None,
    n: Annotated[int, typer.Option("-n", help="Completions to sample (n > 1 needs --temperature > 0).")] = 1,
    temperature: Annotated[float, typer.Option(help="Sampling temperature; 0 is greedy.")] = 0.0,
    top_p: Annotated[float, typer.Option(help="Nucleus sampling mass in (0, 1].")] = 1.0,
    max_new_tokens: Annotated[int, typer.Option(help="Most tokens per completion.")] = 128,
    seed: Annotated[int | None, typer.Option(help="Sampler seed.")] = None,
) -> None:
    """Answer one chat prompt with a policy: text, finish reason, tokens and mean logprob per completion.

    A quick check that a backend works on this machine, e.g. `spade generate "What is 2 + 3?"`
    (the embedded model, offline) or `spade generate -p openai:my-model@http://localhost:8000/v1 "hi"`.
    """
    from spade_gym.policies import SamplingParams

    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    try:
        sampling = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, n=n, seed=seed)
    except ValueError as exc:
        fail(safe(str(exc)), 2)
    try:
        loaded = load_cli_policy(policy)
        started = time.perf_counter()
        with console.status("generating", spinner="dots"):
            completions = loaded.generate([messages], sampling)
        seconds = time.perf_counter() - started
    except (SpadeError, ValueError) as exc:
        fail(f"{type(exc).__name__}: {safe(str(exc))}", 1)
    for k, completion in enumerate(completions):
        logprobs = completion.logprobs or []
        mean = f"{statistics.fmean(logprobs):.3f}" if logprobs else "n/a"
        tokens = completion.num_tokens if completion.completion_token_ids is not None else "n/a"
        title = (
            f"completion {k + 1}/{len(completions)}: {completion.finish_reason}, {tokens} tokens, mean logprob {mean}"
        )
        console.print(Panel(safe(completion.text), title=title, title_align="left"))
    console.print(f"{safe(loaded.name)}: {len(completions)} completion(s) in {seconds:.1f} s")


if __name__ == "__main__":  # pragma: no cover - `python -m spade_gym.cli`: the module proper registers the commands
    from spade_gym.cli import app as spade_app

    spade_app()

# The command modules register their commands on `app` when imported, in the order `spade --help` lists them;
# imported as modules, so that importing one of them first works too
from spade_gym import cli_design, cli_train, cli_eval, cli_envs, cli_share  # noqa: E402,I001

_COMMAND_MODULES = (cli_common, cli_design, cli_train, cli_eval, cli_envs, cli_share)


def __getattr__(name: str) -> Any:
    """The shared helpers and the command modules' functions as attributes of this module
    (``from spade_gym.cli import design``)."""
    for module in _COMMAND_MODULES:
        if not name.startswith("_") and hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# The plugins of the entry point group spade_gym.commands (pyproject.toml) add theirs: `spade serve`
for _entry in importlib.metadata.entry_points(group="spade_gym.commands"):
    _entry.load()
