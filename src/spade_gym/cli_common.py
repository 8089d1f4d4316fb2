"""What the ``spade`` command modules share: the typer ``app`` and ``envs_app`` they register on, the
console, :class:`PhaseProgress` and helpers. Nothing here imports a command module."""

from __future__ import annotations

import contextlib
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn

import typer
from rich.console import Console
from rich.markup import escape as escape_markup
from rich.progress import Progress, TimeElapsedColumn
from rich.table import Table

from spade_gym.env import escape_text
from spade_gym.errors import RegistryError

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


def load_cli_policy(spec: str, *, run_folder: bool = False) -> Any:
    """The policy ``spec`` names, loaded under a spinner; with ``run_folder``, ``spec`` may also be
    a self-play run folder (its newest checkpoint)."""
    folder = Path(spec)
    with console.status(f"loading {safe(spec)}", spinner="dots"):
        if run_folder and folder.is_dir() and (folder / "config.yaml").is_file():
            from spade_gym.trainer.selfplay import load_run_policy

            return load_run_policy(spec)
        if run_folder and folder.is_dir() and not (folder / "config.json").is_file():
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
