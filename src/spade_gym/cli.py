"""The ``spade`` command line (``spade --help`` lists its commands): the app, `spade demo`, `doctor` and
`generate`, and the helpers the command modules share (:func:`safe`, :func:`fail`, :func:`say`,
:func:`new_table`, :func:`open_registry`, :func:`report_table`, :func:`load_eval_policy`). The other
commands live in cli_design, cli_train, cli_eval, cli_envs and cli_share, imported at the end."""

from __future__ import annotations

import contextlib
import importlib.metadata
import statistics
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape as escape_markup
from rich.panel import Panel
from rich.progress import Progress, TimeElapsedColumn, track
from rich.table import Table

from spade_gym.env import SandboxedEnv, escape_text
from spade_gym.errors import RegistryError, SpadeError, install_hint
from spade_gym.program import SUCCESS_RETURN
from spade_gym.sandbox import LAYERS, SandboxClient, SandboxConfig

if TYPE_CHECKING:
    from spade_gym.registry import Registry
    from spade_gym.validation import ValidationReport


def safe(text: str, limit: int | None = None) -> str:
    """Untrusted text made inert for the terminal: control characters escaped, Rich markup too."""
    return escape_markup(escape_text(text, limit))


def fail(message: str, code: int) -> NoReturn:
    """Print ``message`` (markup; untrusted parts already :func:`safe`) in red and exit with ``code``."""
    console.print(f"[red]{message}[/red]")
    raise typer.Exit(code) from None


def new_table(title: str | None, columns: Sequence[str], *, figures: bool = False, **style: Any) -> Table:
    """A table of these columns; ``figures``: the first one unwrapped, the others right-aligned."""
    table = Table(title=title)
    for n, column in enumerate(columns):
        if figures:
            style = {"justify": "right" if n else "left", "no_wrap": not n}
        table.add_column(column, **style)
    return table


def say(line: str) -> None:
    """One line per message, whatever the width."""
    console.print(safe(line), soft_wrap=True)


PROGRESS_LINE_EVERY_S = 60.0
"""With output to a file (no progress bars), a phase in progress prints a line at most this often."""


class PhaseProgress:
    """``progress(phase, done, total)`` for named phases: one Rich bar per phase on a terminal;
    otherwise timestamped lines when a phase starts and ends and, from a watcher thread, at least
    every :data:`PROGRESS_LINE_EVERY_S` seconds while it runs."""

    def __init__(self, say: Any, *, prefix: str = "") -> None:
        self.bars = Progress(*Progress.get_default_columns(), TimeElapsedColumn(), console=console, transient=True)
        self.say, self.prefix = say, prefix
        self.tasks: dict[str, Any] = {}
        self.last_line: dict[str, float] = {}
        self.running: dict[str, tuple[int, int, float]] = {}  # name -> (done, total, started)
        self.lock = threading.Lock()
        self.watcher: threading.Thread | None = None
        self.wake = threading.Event()  # a phase started: the watcher re-reads its interval

    def __call__(self, phase: str, done: int, total: int) -> None:
        name = self.prefix + phase
        if not console.is_terminal:
            now = time.monotonic()
            with self.lock:
                started = now if done == 0 or name not in self.running else self.running[name][2]
                if done >= total:
                    self.running.pop(name, None)
                else:
                    self.running[name] = (done, total, started)
                if done == 0 or done >= total or now - self.last_line.get(name, now) >= PROGRESS_LINE_EVERY_S:
                    self._line(name, done, total, started, now)
                if self.running and self.watcher is None:
                    self.watcher = threading.Thread(target=self._watch, name="spade-progress", daemon=True)
                    self.watcher.start()
                self.wake.set()
            return
        if name not in self.tasks:
            self.tasks[name] = self.bars.add_task(name, total=total)
        if done == 0:
            self.bars.reset(self.tasks[name], total=total)
        self.bars.update(self.tasks[name], completed=done, total=total)

    def _line(self, name: str, done: int, total: int, started: float, now: float) -> None:
        state = "started" if done == 0 and now == started else "done" if done >= total else "running"
        took = f", {now - started:.0f} s" if state != "started" else ""
        self.say(f"{time.strftime('%H:%M:%S')} {name}: {state} ({done}/{total}{took})")
        self.last_line[name] = now

    def _watch(self) -> None:
        """While a phase runs, print its state when it has been quiet for PROGRESS_LINE_EVERY_S."""
        while True:
            self.wake.wait(min(PROGRESS_LINE_EVERY_S, 1.0))
            self.wake.clear()
            now = time.monotonic()
            with self.lock:
                if not self.running:
                    self.watcher = None  # under the lock: the next phase starts a new watcher
                    return
                for name, (done, total, started) in list(self.running.items()):
                    if now - self.last_line.get(name, started) >= PROGRESS_LINE_EVERY_S:
                        self._line(name, done, total, started, now)

    @contextlib.contextmanager
    def loading(self, what: str) -> Iterator[None]:
        """A pulsing bar, or one line, while the block loads ``what``."""
        if not console.is_terminal:
            self.say(f"{time.strftime('%H:%M:%S')} {what}")
            yield
            return
        task = self.bars.add_task(what, total=None)
        yield
        self.bars.remove_task(task)


app: typer.Typer = typer.Typer(
    help="spade_gym: SPADE self-play as Gymnasium environments. Environment programs written by a "
    "language model run in a locked-down sandbox; these commands check, play and inspect them, and try "
    "the language-model policies.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
)
# In a log file: no wrapping, and tables wide enough that paths and ids stay whole
console: Console = Console(soft_wrap=True, width=200) if not Console().is_terminal else Console()
envs_app: typer.Typer = typer.Typer(
    help="Environment registries: list, show, validate, add, import, measure, play and re-index environments.",
    no_args_is_help=True,
)
app.add_typer(envs_app, name="envs")


def default_work_registry() -> Path:
    """Where `spade design` keeps its registry when none is named: the user data folder."""
    import platformdirs

    return Path(platformdirs.user_data_dir("spade_gym")) / "registry"


RegistryOption = Annotated[
    Path | None,
    typer.Option(
        "--registry",
        "-r",
        help="Registry folder (default: $SPADE_REGISTRY, else the bundled registry).",
        envvar="SPADE_REGISTRY",
    ),
]

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
    import importlib.metadata
    import importlib.util

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
    from spade_gym.policies import SamplingParams, load_policy

    messages = ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": prompt}]
    try:
        sampling = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, n=n, seed=seed)
    except ValueError as exc:
        fail(safe(str(exc)), 2)
    try:
        with console.status(f"loading {safe(policy)}", spinner="dots"):
            loaded = load_policy(policy)
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


def load_eval_policy(spec: str) -> Any:
    """A policy spec, or a self-play run folder (its newest checkpoint)."""
    folder = Path(spec)
    if folder.is_dir() and (folder / "config.yaml").is_file():
        from spade_gym.trainer.selfplay import load_run_policy

        return load_run_policy(spec)
    if folder.is_dir() and not (folder / "config.json").is_file():
        runs = sorted(p.name for p in folder.iterdir() if (p / "config.yaml").is_file())
        if runs:
            raise ValueError(
                f"{spec} holds run folders, not a model: pick one of {', '.join(runs)} (e.g. {folder / runs[0]})"
            )
    from spade_gym.policies import load_policy

    return load_policy(spec)


def open_registry(path: Path | None, *, create: bool = False) -> Registry:
    from spade_gym.registry import Registry
    from spade_gym.registry.gymnasium import bundled_registry_path

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            registry = Registry(path or bundled_registry_path(), create=create)
        except RegistryError as exc:
            message = exc.message.replace(
                "pass create=True to make a new registry there", "`spade envs add -r PATH FILE` creates one"
            )
            fail(safe(message), 2)
    for warning in caught:
        console.print(f"[yellow]{safe(str(warning.message))}[/yellow]")
    return registry


def report_table(path: str, report: ValidationReport) -> Table:
    verdict = "[green]accepted[/green]" if report.accepted else f"[red]refused: {report.category}[/red]"
    columns = ("check", "result", "category", "seconds", "details")
    table = new_table(f"{safe(path)}: {verdict} in {report.seconds:.2f} s", columns, overflow="fold")
    for check in report.checks:
        result = {True: "[green]pass[/green]", False: "[red]FAIL[/red]", None: "[dim]not run[/dim]"}[check.passed]
        table.add_row(check.name, result, check.category or "", f"{check.seconds:.3f}", safe(check.message, 400))
    used = report.usage
    if used:  # what the validation used of its budgets (ValidationConfig, SandboxConfig)
        table.caption = (
            f"used: {used.get('worker_cpu_s', 0):.2f} s of the workers' CPU, {used.get('host_cpu_s', 0):.2f} s of "
            f"the host's, {used.get('episode_text_bytes', 0):,} bytes of observations in the largest episode, "
            f"{used.get('hint_bytes', 0):,}-byte hint"
        )
    return table


def _load_command_plugins() -> None:
    """Import the modules of the entry point group ``spade_gym.commands`` (pyproject.toml), which add
    their commands to :data:`app`: `spade serve` lives with its integration, outside the core."""
    for entry in importlib.metadata.entry_points(group="spade_gym.commands"):
        entry.load()


if __name__ == "__main__":  # pragma: no cover - `python -m spade_gym.cli`: the module proper registers the commands
    from spade_gym.cli import app as spade_app

    spade_app()

# The command modules register their commands on `app` when imported, in the order `spade --help` lists them;
# imported as modules, so that importing one of them first works too
from spade_gym import cli_design, cli_train, cli_eval, cli_envs, cli_share  # noqa: E402,I001

_COMMAND_MODULES = (cli_design, cli_train, cli_eval, cli_envs, cli_share)


def __getattr__(name: str) -> Any:
    """The command modules' functions as attributes of this module (``from spade_gym.cli import design``)."""
    for module in _COMMAND_MODULES:
        if not name.startswith("_") and hasattr(module, name):
            return getattr(module, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


_load_command_plugins()
