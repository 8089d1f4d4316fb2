"""The ``spade`` command line (``spade --help`` lists its commands)."""

from __future__ import annotations

import contextlib
import importlib.metadata
import json
import math
import statistics
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, cast

import typer
from gymnasium import error as gym_error
from rich.console import Console
from rich.markup import escape as escape_markup
from rich.panel import Panel
from rich.progress import Progress, TimeElapsedColumn, track
from rich.table import Table

from spade_gym.agent import AGENT_MAX_NEW_TOKENS, AGENT_TEMPERATURE, AGENT_TOP_P
from spade_gym.designer import DESIGNER_TEMPERATURE, EDIT_MAX_NEW_TOKENS, WRITE_MAX_NEW_TOKENS
from spade_gym.env import SandboxedEnv, escape_text
from spade_gym.errors import RegistryError, SpadeError, install_hint
from spade_gym.files import read_lines
from spade_gym.memory import MemoryConfig
from spade_gym.program import SUCCESS_RETURN
from spade_gym.regret import REGRET_EPISODES
from spade_gym.sandbox import LAYERS, SandboxClient, SandboxConfig

if TYPE_CHECKING:
    from spade_gym.design_prompts import PromptVariant
    from spade_gym.registry import EnvRecord, Registry
    from spade_gym.validation import ValidationReport


def _safe(text: str, limit: int | None = None) -> str:
    """Untrusted text made inert for the terminal: control characters escaped, Rich markup too."""
    return escape_markup(escape_text(text, limit))


def _fail(message: str, code: int) -> NoReturn:
    """Print ``message`` (markup; untrusted parts already :func:`_safe`) in red and exit with ``code``."""
    console.print(f"[red]{message}[/red]")
    raise typer.Exit(code) from None


def _table(title: str | None, columns: Sequence[str], *, figures: bool = False, **style: Any) -> Table:
    """A table of these columns; ``figures``: the first one unwrapped, the others right-aligned."""
    table = Table(title=title)
    for n, column in enumerate(columns):
        if figures:
            style = {"justify": "right" if n else "left", "no_wrap": not n}
        table.add_column(column, **style)
    return table


def _say(line: str) -> None:
    """One line per message, whatever the width."""
    console.print(_safe(line), soft_wrap=True)


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


app = typer.Typer(
    help="spade_gym: SPADE self-play as Gymnasium environments. Environment programs written by a "
    "language model run in a locked-down sandbox; these commands check, play and inspect them, and try "
    "the language-model policies.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
)
# In a log file: no wrapping, and tables wide enough that paths and ids stay whole
console = Console(soft_wrap=True, width=200) if not Console().is_terminal else Console()
envs_app = typer.Typer(
    help="Environment registries: list, show, validate, add, import, measure, play and re-index environments.",
    no_args_is_help=True,
)
app.add_typer(envs_app, name="envs")


def _default_work_registry() -> Path:
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
        _fail("No programs given and no examples/programs folder found.", 2)
    table = _table(
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
            table.add_row(path.name, "-", "-", "-", "-", "-", f"[red]{_safe(str(exc), 200)}[/red]")
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
            console.print(Panel(_safe(first_obs, 600), title=f"{env.name}: first observation, seed 0"))
        except SpadeError as exc:
            failures += 1
            table.add_row(path.name, "-", "-", "-", "-", "-", f"[red]{exc.category}: {_safe(exc.message, 200)}[/red]")
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
        _fail(f"Unknown layer(s): {', '.join(unknown)}. Known: {', '.join(LAYERS)}", 2)
    with SandboxClient(SandboxConfig()) as client:
        layers = client.start()
        probe = client.call("probe")
    table = _table("Sandbox layers of a worker on this machine", ("layer", "state", "what it does"))
    for name in LAYERS:
        state = {True: "[green]active[/green]", None: "[yellow]n/a[/yellow]"}.get(
            layers.get(name), "[red]inactive[/red]"
        )
        table.add_row(name, state, _LAYER_DOC[name])
    console.print(table)
    probe_table = _table("Probe: attempts from inside a worker", ("attempt", "result"))
    for attempt, result in probe.items():
        colour = "green" if str(result).startswith("denied") else "red"
        probe_table.add_row(attempt, f"[{colour}]{_safe(str(result), 120)}[/{colour}]")
    console.print(probe_table)
    console.print(_backends_table())
    missing = [name for name in require if layers.get(name) is not True]
    if missing:
        _fail(f"Required layer(s) not active: {', '.join(missing)}", 1)


def _backends_table() -> Table:
    """Which language-model backends this machine can run, without loading a model."""
    import importlib.metadata
    import importlib.util

    def version(dist: str) -> str | None:
        try:
            return importlib.metadata.version(dist)
        except importlib.metadata.PackageNotFoundError:
            return None

    table = _table("Language-model backends (load_policy)", ("backend", "state", "detail"))
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
        table.add_row(f"default ({EMBEDDED_NAME})", "[green]ready[/green]", _safe(detail))
    except ModelNotFound as exc:
        table.add_row(f"default ({EMBEDDED_NAME})", "[red]missing[/red]", _safe(exc.message))
    for backend, dist, note, install in (
        ("vllm:<id>", "vllm", "; needs an NVIDIA GPU", f"{install_hint('vllm')}; NVIDIA GPU"),
        ("openai:<model>@<url>", "openai", "", install_hint("openai")),
    ):
        found = version(dist)
        state = "[green]installed[/green]" if found else "[yellow]not installed[/yellow]"
        table.add_row(backend, state, _safe(f"{dist} {found}{note}" if found else install))
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
        _fail(_safe(str(exc)), 2)
    try:
        with console.status(f"loading {_safe(policy)}", spinner="dots"):
            loaded = load_policy(policy)
        started = time.perf_counter()
        with console.status("generating", spinner="dots"):
            completions = loaded.generate([messages], sampling)
        seconds = time.perf_counter() - started
    except (SpadeError, ValueError) as exc:
        _fail(f"{type(exc).__name__}: {_safe(str(exc))}", 1)
    for k, completion in enumerate(completions):
        logprobs = completion.logprobs or []
        mean = f"{statistics.fmean(logprobs):.3f}" if logprobs else "n/a"
        tokens = completion.num_tokens if completion.completion_token_ids is not None else "n/a"
        title = (
            f"completion {k + 1}/{len(completions)}: {completion.finish_reason}, {tokens} tokens, mean logprob {mean}"
        )
        console.print(Panel(_safe(completion.text), title=title, title_align="left"))
    console.print(f"{_safe(loaded.name)}: {len(completions)} completion(s) in {seconds:.1f} s")


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
    from spade_gym.policies import SamplingParams, load_policy
    from spade_gym.registry.gymnasium import register_registry
    from spade_gym.regret import designer_reward, estimate_regret

    target = env_id
    if Path(env_id).is_file():
        target = str(Path(env_id).resolve())
    elif env_id.endswith(".py") or "/" in env_id.removeprefix("spade/"):
        _fail(f"{_safe(env_id)}: no such program file (and not an id like spade/Name-v0)", 2)
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
            _open_registry(registry).close()  # a clear message for a path that is not a registry
            register_registry(registry)
        if target.startswith("spade/"):
            import gymnasium

            gymnasium.spec(target)  # an unknown id fails here, before the model loads
        with console.status(f"loading {_safe(policy)}", spinner="dots"):
            agent = load_policy(policy)
        with Progress(*Progress.get_default_columns(), console=console, transient=True) as bar:
            task = bar.add_task(f"{_safe(env_id)}: {2 * k} episodes or more", total=2 * k)
            result = estimate_regret(
                target,
                agent,
                k,
                None if seed is None else list(range(seed, seed + k)),
                config=config,
                progress=lambda done, total: bar.update(task, completed=done, total=total),
            )
    except (SpadeError, ValueError) as exc:
        _fail(f"{type(exc).__name__}: {_safe(str(exc))}", 1)
    except gym_error.Error as exc:
        _fail(_safe(str(exc)), 2)
    reward = designer_reward(True, result)
    columns = ("arm", "mean return", "std. error", "successes")
    table = _table(f"Regret of {_safe(result.env_id)} for {_safe(agent.name)} (k={k})", columns)
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
        f"regret [bold]{result.regret:.3f}[/bold] ({_safe(result.reason)}); seeds {_safe(str(result.seeds))}; "
        f"Designer reward {reward.reward:.3f} ({reward.outcome}); {result.errors} environment error(s){timing}"
    )
    played = (*result.hint, *result.nohint, *result.hint_only)
    failed = [t for t in played if t.error]
    if failed:
        error = failed[0].error or {}
        console.print(
            f"[red]the environment failed in {len(failed)} of {len(played)} episodes (return 0); first, seed "
            f"{failed[0].seed}: {_safe(str(error.get('category')))}: {_safe(str(error.get('message')), 400)}[/red]"
        )
        if len(failed) == len(played):
            raise typer.Exit(1)


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
    registry: Annotated[
        Path | None,
        typer.Option(
            "--registry",
            "-r",
            help="Where accepted environments go, and the memory and novelty reference (created with the seed "
            "library, less the held-out environments, if new). Default: $SPADE_REGISTRY, else "
            f"{_default_work_registry()}.",
            envvar="SPADE_REGISTRY",
        ),
    ] = None,
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
    count: Annotated[
        int | None, typer.Option(help="Factory: write environments unattended until this many designs.")
    ] = None,
    hours: Annotated[float | None, typer.Option(help="Factory: ... or until this many hours of wall time.")] = None,
    group: Annotated[int, typer.Option(help="Factory: designs sampled per prompt (best-of-N).")] = 4,
    factory: Annotated[
        Path,
        typer.Option(help="Factory folder (its registry, designs.jsonl and factory.json); an existing one is resumed."),
    ] = Path("runs/factory"),
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
    if count is not None or hours is not None:
        from spade_gym.factory_cli import design_factory

        args = (agent, factory, registry, setting, mode, temperature, max_new_tokens, k, memory_k)
        design_factory(
            policy, *args, agent_max_new_tokens, agent_temperature, prompt_variant, count, hours, group, seed
        )
        return
    import random

    from rich.syntax import Syntax

    from spade_gym.agent import RolloutConfig
    from spade_gym.designer import MODES, DesignerConfig, auto_edit_probability, build_prompt
    from spade_gym.designer import design as run_design
    from spade_gym.documents import Document, load_documents, make_document
    from spade_gym.memory import EnvironmentMemory, pick_parent
    from spade_gym.policies import SamplingParams, load_policy
    from spade_gym.program import SETTINGS
    from spade_gym.registry.gymnasium import open_registry

    try:
        small = auto_edit_probability(policy) >= 0.5
        if mode == "auto":
            mode = "edit" if small else "write"
        if mode not in MODES:
            raise ValueError(f"--mode must be one of auto, {', '.join(MODES)}, got {mode!r}")
        if repairs is None:
            repairs = 0 if small else 2
        if max_new_tokens is None:
            max_new_tokens = EDIT_MAX_NEW_TOKENS if mode == "edit" else WRITE_MAX_NEW_TOKENS
        if setting is not None and setting not in SETTINGS:
            raise ValueError(f"--setting must be one of {', '.join(SETTINGS)}, got {setting!r}")
        config = DesignerConfig(
            k=k,
            rollout=RolloutConfig(
                sampling=SamplingParams(temperature=agent_temperature, max_new_tokens=agent_max_new_tokens)
            ),
            sampling=SamplingParams(temperature=temperature, max_new_tokens=max_new_tokens),
            edit_max_new_tokens=max_new_tokens if mode == "edit" else EDIT_MAX_NEW_TOKENS,
            memory=MemoryConfig(k=memory_k),
            prompt=cast("PromptVariant", prompt_variant),  # DesignerConfig refuses another
        )
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
        reg = open_registry(registry or _default_work_registry(), seed_library=True)
        rng = random.Random(seed)
        items = EnvironmentMemory(reg, config.memory).select(rng, setting=setting)
        prompt = build_prompt(
            doc,
            items,
            setting=setting,
            mode=mode,
            parent=pick_parent(items, rng) if mode == "edit" else None,
            variant=prompt_variant,
        )
        with console.status(f"loading {_safe(policy)}", spinner="dots"):
            designer = load_policy(policy)
            agent_policy = designer if agent in (None, policy) else load_policy(agent)
        source = prompt.document.source if prompt.document else None
        console.print(
            f"Designing an environment ({mode} mode, setting: {_safe(prompt.setting or 'any')}) from "
            f"{_safe(json.dumps(source) if source else 'no document')}; memory: "
            f"{_safe(', '.join(i.record.env_id for i in prompt.memory) or 'empty')}; registry {_safe(str(reg.root))}"
        )
        with console.status("the Designer is writing (each round: generate, validate, measure regret)", spinner="dots"):
            outcome = run_design(
                designer, prompt, registry=reg, agent=agent_policy, config=config, seed=seed, repairs=repairs
            )
    except (SpadeError, ValueError, OSError) as exc:
        _fail(f"{type(exc).__name__}: {_safe(str(exc))}", 2)
    for i, attempt in enumerate(outcome.attempts, 1):
        console.print(f"[yellow]round {i}: refused ({_safe(attempt['category'])}); the report was fed back[/yellow]")
    if outcome.source:
        console.print(Syntax(outcome.source, "python", line_numbers=True))
    else:
        console.print(Panel(_safe(outcome.completion, 4000) or "(empty)", title="completion (no program found)"))
    if outcome.note:
        console.print(f"[dim]{_safe(outcome.note)}[/dim]")
    console.print(_report_table(f"round {outcome.rounds}", outcome.report))
    console.print(Panel(_safe(outcome.feedback()), title="outcome"))
    console.print(
        f"time: generation {outcome.generation_s:.1f} s, validation {outcome.validation_s:.1f} s, "
        f"regret {outcome.regret_s:.1f} s"
    )
    if outcome.record is not None:
        console.print(
            f"registered as [bold]{_safe(outcome.record.gym_id)}[/bold] in {_safe(str(reg.root))} "
            f"(`spade envs show -r {_safe(str(reg.root))} {_safe(outcome.record.env_id)}`)"
        )
    if out is not None:
        data = outcome.info() | {"completion": outcome.completion, "source": outcome.source}
        data["provenance"] = prompt.provenance()
        out.write_text(json.dumps(data, ensure_ascii=False, indent=2))
        console.print(f"outcome written to {_safe(str(out))}")
    if outcome.record is None:
        console.print(f"nothing was registered in {_safe(str(reg.root))} (the design was refused)")
        raise typer.Exit(1)


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
        _fail(
            "give the run's configuration with --config FILE: examples/selfplay_cpu.yaml runs on 2 CPU "
            "cores; an empty file takes every default of --help-config (a GPU-sized run)",
            2,
        )
    cfg = _read_config(config, [*(overrides or []), *([f"run.out={out}"] if out is not None else [])])

    try:
        run = RunDir.create(cfg.run.out, cfg)
    except (SpadeError, OSError) as exc:  # e.g. an --out that cannot be created
        _fail(f"cannot create the run folder {_safe(str(cfg.run.out))}: {_safe(str(exc))}", 2)
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
        _fail(_safe(str(exc)), 1)
    if done is not None and done >= total - 1:
        console.print(f"{_safe(str(run_dir))} has finished all {total} iterations: nothing to resume")
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
        _fail("give the run's configuration with --config FILE (e.g. examples/selfplay_cpu.yaml)", 2)
    cfg = _read_config(config, overrides or [], check)
    progress = PhaseProgress(_say, prefix="cold start: ")
    try:
        with progress.bars:
            with progress.loading(f"loading the policy {cfg.policy.spec}"):
                policy = load_config_policy(cfg, cfg.policy.spec.removeprefix("vllm:"))
            result = run_warmstart(cfg, policy, say=_say, progress=progress)
    except SpadeError as exc:
        _fail(f"{type(exc).__name__}: {_safe(str(exc))}", 1)
    except KeyboardInterrupt:
        console.print("[yellow]interrupted: run the same command again to continue from the last saved step[/yellow]")
        raise typer.Exit(130) from None

    def loss(values: dict[str, float | None], role: str) -> str:
        value = values.get(role)
        return "-" if value is None else f"{value:.4f}"

    console.print(
        f"adapters: {_safe(str(result.adapter_path))} (hash {result.hash[:12]}{', cached' if result.cached else ''})"
    )
    console.print(
        f"data: {result.agent_samples} Agent samples from {len(result.envs)} environments, "
        f"{result.designer_samples} Designer samples; skipped {_safe(str(result.skipped or 'none'))}"
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
        _fail(_safe(str(exc)), 2)
    return cfg


def _existing_folder(path: Path) -> Path:
    from spade_gym.trainer.run import RunDirError

    if not path.exists():
        raise RunDirError(f"{path} does not exist")
    if not path.is_dir():
        raise RunDirError(f"{path} is a file, not a run folder")
    return path


def _run_selfplay(make: Any) -> None:
    from spade_gym.trainer.plot import plot_run

    progress = PhaseProgress(_say)
    loop = None
    try:
        with progress.bars:  # the cold start runs while the loop is made: its bars show too
            with progress.loading("loading the policy and the registry"):
                loop = make(_say, progress)
            start = loop.start
            total = loop.config.run.iterations
            _say(f"run folder {loop.run.path}: iterations {start}..{total - 1} of {total}")
            results = loop.train()
        loop.close()
    except SpadeError as exc:
        _fail(f"{type(exc).__name__}: {_safe(str(exc))}", 1)
    except KeyboardInterrupt:
        if loop is None:
            console.print("[yellow]interrupted while starting[/yellow]")
        else:
            loop.close()
            console.print(
                f"[yellow]interrupted: the iteration in progress is lost; continue with "
                f"`spade resume {_safe(str(loop.run.path))}`[/yellow]"
            )
        raise typer.Exit(130) from None
    from spade_gym.trainer.selfplay import what_moved

    plots = plot_run(loop.run.path)
    accepted = [env_id for r in results for env_id in r.accepted]
    console.print("what moved (first -> last iteration):")
    for line in what_moved(loop.run.read_metrics()):
        console.print(f"  {_safe(line)}")
    console.print(f"run folder: {_safe(str(loop.run.path))}")
    console.print(f"metrics: {_safe(str(loop.run.metrics_path))}; checkpoints: {_safe(str(loop.run.checkpoints_dir))}")
    if loop.run.designs_path.exists():
        console.print(f"designs (completions, programs, verdicts): {_safe(str(loop.run.designs_path))}")
    console.print(f"plots: {_safe(', '.join(str(p) for p in plots) or 'none')}")
    console.print(
        f"newly accepted environments ({len(accepted)}): {_safe(', '.join(accepted) or 'none')} "
        f"(`spade envs list -r {_safe(str(loop.run.registry_dir))}`)"
    )
    from spade_gym.evaluation.heldout import heldout_report
    from spade_gym.trainer.selfplay import designer_summary

    console.print(_safe(designer_summary(loop.run.read_metrics())), soft_wrap=True)

    for line in heldout_report(loop.run.path):  # the last lines, for scripts: "held-out success (unseen seeds): ..."
        console.print(_safe(line), soft_wrap=True)


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
        _fail(_safe(str(exc)), 2)
    for path in paths:
        console.print(_safe(str(path)))
    if (folder / DESIGNS_FILE).is_file():
        console.print(f"what the Designer wrote, and each verdict: {_safe(str(folder / DESIGNS_FILE))}")


def _num(value: float, fmt: str = ".3f") -> str:
    return "n/a" if math.isnan(value) else format(value, fmt)


def _load_eval_policy(spec: str) -> Any:
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
        _fail(_safe(str(exc)), 2)
    try:
        with console.status(f"loading {_safe(policy)}", spinner="dots"):
            agent = _load_eval_policy(policy)
    except (SpadeError, ValueError, OSError) as exc:
        _fail(f"{type(exc).__name__}: {_safe(str(exc))}", 1)
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
                console.print(f"[red]suite {_safe(suite.name)} failed: {type(exc).__name__}: {_safe(str(exc))}[/red]")
    columns = ("suite", "score", "95% CI", "items", "errors", "seconds")
    table = _table(f"{_safe(str(agent.name))} on held-out suites", columns, figures=True)
    for result in results:
        low, high = result.interval()
        table.add_row(
            _safe(result.suite),
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
                    f"{_safe(result.suite)}: "
                    + ", ".join(f"{_safe(k)} {v.score:.2f} ({v.n})" for k, v in parts.items())
                )
        failed = [r for r in result.items if r.error is not None]
        if failed:
            console.print(
                f"[yellow]{_safe(result.suite)}: {len(failed)} of {result.n} items scored 0 because something "
                f"failed; first, {_safe(failed[0].item_id)}: {_safe(str(failed[0].error), 300)}[/yellow]"
            )
    if out is not None and results:
        save_results(results, out, extra={"policy": str(agent.name), "policy_spec": policy})
        console.print(f"results written to {_safe(str(out))}")
    if failed_suites:
        raise typer.Exit(1)


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
        _fail(_safe(str(exc)), 2)
    by_b = {r.suite: r for r in results_b}
    common = [r for r in results_a if r.suite in by_b]
    name_a = results_a[0].policy if results_a else "?"
    name_b = results_b[0].policy if results_b else "?"
    console.print(f"A = {_safe(str(a))} ({_safe(name_a)})\nB = {_safe(str(b))} ({_safe(name_b)})", soft_wrap=True)
    table = _table(None, ("suite", "A", "B", "A - B", "95% CI", "items", "paired", ""), figures=True)
    notes = []
    for result in common:
        c = compare_results(result, by_b[result.suite])
        verdict = "A better" if c.low > 0 else "B better" if c.high < 0 else ""
        defined = not math.isnan(c.low)
        table.add_row(
            _safe(c.suite),
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
        console.print(f"[yellow]{_safe(note)}[/yellow]", soft_wrap=True)
    only = sorted({r.suite for r in results_a} ^ {r.suite for r in results_b})
    if only:
        console.print(f"[yellow]in one file only (not compared): {_safe(', '.join(only))}[/yellow]")
    if not common:
        _fail("the two files share no suite", 1)


def _open_registry(path: Path | None, *, create: bool = False) -> Registry:
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
            _fail(_safe(message), 2)
    for warning in caught:
        console.print(f"[yellow]{_safe(str(warning.message))}[/yellow]")
    return registry


def _get_record(registry: Registry, env_id: str) -> EnvRecord:
    try:
        return registry.get(env_id)
    except RegistryError as exc:
        _fail(_safe(exc.message), 2)


def _fmt(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}"


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
    reg = _open_registry(registry)
    if markdown:
        print(
            "| id | setting | max turns | return hint / no hint | regret | what it trains |\n|---|---|---:|---:|---:|---|"
        )
        for record in reg.records(setting=setting):
            about = escape_text(record.description.split("; ")[0].split(". ")[0].rstrip("."))
            about = (about if len(about) <= 110 else about[:107].rsplit(" ", 1)[0] + "...").replace("|", "\\|")
            stats = record.stats
            returns = f"{_fmt(stats.mean_return_hint)} / {_fmt(stats.mean_return_nohint)}"
            print(
                f"| `{record.gym_id}` | {record.setting} | {record.max_turns} | {returns} | {_fmt(stats.regret)} | {about} |"
            )
        return
    columns = ("id", "setting", "turns", "return hint / no hint", "regret", "episodes", "tags")
    table = _table(f"Environments in {reg.root}", columns, overflow="fold")
    records = reg.records(setting=setting)
    for record in records:
        stats = record.stats
        table.add_row(
            record.env_id,
            record.setting,
            str(record.max_turns),
            f"{_fmt(stats.mean_return_hint)} / {_fmt(stats.mean_return_nohint)}",
            _fmt(stats.regret),
            str(stats.episodes),
            ", ".join(record.tags),
        )
    console.print(table)
    console.print(f"{len(records)} environment(s); Gymnasium ids are spade/<id>.")
    for directory, message in reg.problems():
        console.print(f"[yellow]skipped {_safe(directory)}: {_safe(message)}[/yellow]")


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
        _fail(
            "spade envs measure writes into the registry: name it with -r REGISTRY (or $SPADE_REGISTRY); "
            "the bundled seed library is measured with -r envs_registry in a source checkout",
            2,
        )
    reg = _open_registry(registry)
    try:
        records = [reg.get(i) for i in ids] if ids else reg.records()
        sampling = SamplingParams(temperature=temperature, top_p=top_p, max_new_tokens=max_new_tokens, seed=seed)
        config = RolloutConfig(sampling=sampling, max_turns=max_turns, max_episodes=max_episodes)
        if k < 1:
            raise ValueError(f"k must be >= 1, got {k}")
        with console.status(f"loading {_safe(policy)}", spinner="dots"):
            agent = _load_eval_policy(policy)  # a run folder: its newest checkpoint
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
        _fail(f"{type(exc).__name__}: {_safe(str(exc))}", 1)
    _show_measured(
        reg,
        records,
        estimates,
        f"Measured with {_safe(agent.name)}, k={k}, seeds "
        f"{', '.join(map(str, seeds))}, temperature {temperature:g}, top_p {top_p:g}",
        k,
    )


def _show_measured(reg: Any, records: list[Any], estimates: list[Any], title: str, k: int) -> None:
    """Store each environment's measured returns, regret and format compliance in its meta.json and
    print them as a table, with the rollout's timing."""
    from spade_gym.agent import format_compliance

    table = _table(
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
        hinted, plain = result.hint, result.nohint
        table.add_row(
            record.env_id,
            f"{result.mean_hint:.2f} / {result.mean_nohint:.2f}",
            f"{sum(t.success for t in hinted) / k:.2f} / {sum(t.success for t in plain) / k:.2f}",
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
        console.print(f"{_safe(path.name)}: {_safe(ladder_line(measured))}", soft_wrap=True)
    console.print(f"{len(ladders)} ladders measured ({k} no-hint episodes per knob value); stored in each meta.json")


@envs_app.command("show")
def envs_show(
    env_id: Annotated[str, typer.Argument(help="Environment id, e.g. ArithmeticChain-v0.")],
    registry: RegistryOption = None,
    source: Annotated[bool, typer.Option(help="Print the program's source.")] = True,
) -> None:
    """Show one environment: its metadata, validation summary and source."""
    from rich.syntax import Syntax

    opened = _open_registry(registry)
    record = _get_record(opened, env_id)
    meta = Table(show_header=False, title=record.gym_id)
    meta.add_column("field")
    meta.add_column("value", overflow="fold")
    rows = {
        "name": record.name,
        "version": str(record.version),
        "setting": record.setting,
        "max_turns": str(record.max_turns),
        "program id": record.program_id,
        "tags": ", ".join(record.tags),
        "parents": ", ".join(record.parents) or "-",
        "document": _safe(str(record.document), 200) if record.document else "-",
        "episodes": str(record.stats.episodes),
        "return with / without hint": f"{_fmt(record.stats.mean_return_hint)} / {_fmt(record.stats.mean_return_nohint)}",
        "regret": _fmt(record.stats.regret),
        "validation": (record.validation or {}).get("category", "-"),
        "description": _safe(record.description),
        "path": str(record.path),
    }
    design = _design_line_of(opened.root, record.env_id)
    if design is not None:
        rows["design"] = design
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
                return f"{_safe(str(designs))}, line {number} (iteration {_safe(str(entry.get('iteration')), 20)})"
    except OSError:
        return None
    return None


#: Longest ``designs.jsonl`` line ``spade envs show`` reads: a design writes at most two texts of
#: ``DESIGN_TEXT_CHARS`` characters, its feedback and its figures.
MAX_DESIGN_LINE_BYTES = 1 << 20


def _report_table(path: str, report: ValidationReport) -> Table:
    verdict = "[green]accepted[/green]" if report.accepted else f"[red]refused: {report.category}[/red]"
    columns = ("check", "result", "category", "seconds", "details")
    table = _table(f"{_safe(path)}: {verdict} in {report.seconds:.2f} s", columns, overflow="fold")
    for check in report.checks:
        result = {True: "[green]pass[/green]", False: "[red]FAIL[/red]", None: "[dim]not run[/dim]"}[check.passed]
        table.add_row(check.name, result, check.category or "", f"{check.seconds:.3f}", _safe(check.message, 400))
    used = report.usage
    if used:  # what the validation used of its budgets (ValidationConfig, SandboxConfig)
        table.caption = (
            f"used: {used.get('worker_cpu_s', 0):.2f} s of the workers' CPU, {used.get('host_cpu_s', 0):.2f} s of "
            f"the host's, {used.get('episode_text_bytes', 0):,} bytes of observations in the largest episode, "
            f"{used.get('hint_bytes', 0):,}-byte hint"
        )
    return table


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

    reg = _open_registry(registry) if registry else None
    refused = 0
    for path in track(files, description="Validating", console=console, transient=True, disable=as_json):
        try:
            program = EnvProgram.from_file(path)
        except (OSError, SpadeError) as exc:
            console.print(f"[red]{_safe(str(path))}: {_safe(str(exc))}[/red]")
            refused += 1
            continue
        report = validate(program, registry=reg)
        refused += not report.accepted
        if as_json:
            print(json.dumps(report.to_dict(), ensure_ascii=False))
            continue
        console.print(_report_table(str(path), report))
        if not report.accepted:
            console.print(Panel(_safe(report.feedback()), title="feedback for the Designer"))
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

    reg = _open_registry(registry, create=True)
    refused = 0
    for path in track(files, description="Adding", console=console, transient=True):
        report, record = register_program(EnvProgram.from_file(path), reg, tags=tuple(tag or ()))
        if record is None:
            refused += 1
            console.print(_report_table(str(path), report))
        else:
            console.print(f"[green]added[/green] {_safe(str(path))} as {record.gym_id}")
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
        path = _get_record(_open_registry(registry), env_id).source_path
    env = SandboxedEnv(path)
    try:
        obs, _ = env.reset(seed=seed)
        console.print(Panel(_safe(obs), title=f"{env.name} (seed {seed}, up to {env.max_turns} turns)"))
        if env.tools:
            console.print(f"tools: {_safe(json.dumps(env.tools), 2000)}")
        done = False
        while not done:
            if hint:
                console.print(f"[cyan]hint:[/cyan] {_safe(env.hint())}")
            try:
                action = input("action> ")
            except EOFError:
                break
            obs, reward, terminated, truncated, info = env.step(action)
            done = terminated or truncated
            console.print(Panel(_safe(obs), title=f"reward {reward:g}" + (" · episode over" if done else "")))
            if "sandbox_error" in info:
                console.print(f"[red]{_safe(info['sandbox_error']['message'])}[/red]")
        console.print(f"return: {env.episode_return:g}")
    finally:
        env.close()


@envs_app.command("rebuild-index")
def envs_rebuild_index(registry: RegistryOption = None) -> None:
    """Rebuild a registry's index.sqlite from its folders (after corruption or manual edits)."""
    reg = _open_registry(registry)
    count = reg.rebuild_index()
    console.print(f"re-indexed {count} environment(s) in {reg.root}")
    for directory, message in reg.problems():
        console.print(f"[yellow]skipped {_safe(directory)}: {_safe(message)}[/yellow]")


# The helpers of this module that command modules elsewhere use (cli_share, integrations.commands).
fail, safe, say, open_registry = _fail, _safe, _say, _open_registry

# `spade export ...` and `spade envs import` (registered on `app` when imported)
from spade_gym import cli_share  # noqa: E402,F401


def _load_command_plugins() -> None:
    """Import the modules of the entry point group ``spade_gym.commands`` (pyproject.toml), which add
    their commands to :data:`app`: `spade serve` lives with its integration, outside the core."""
    for entry in importlib.metadata.entry_points(group="spade_gym.commands"):
        entry.load()


_load_command_plugins()

if __name__ == "__main__":  # pragma: no cover - `python -m spade_gym.cli`: the app cli_share added its commands to
    from spade_gym.cli import app as spade_app

    spade_app()
