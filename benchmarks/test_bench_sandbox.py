"""Speed of the sandbox: one step's round trip, the cold start of an environment, many workers at once.

Every figure is reported, absolute and as a ratio to a baseline measured in the same run, never
asserted: the only asserts check that the benchmarked call did its job. Run with
``python -m pytest benchmarks -s --benchmark-columns=min,median,mean,max`` (see benchmarks/README.md).

Targets (on a 2-core machine): a sandboxed step's p50 below 150 us; a sandboxed
environment ready in below 100 ms once the zygote is warm.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from statistics import fmean, median
from typing import Any

import pytest
from programs import program

from spade_gym import EnvProgram, SandboxedEnv
from spade_gym.errors import SpadeError
from spade_gym.sandbox import LAYERS, SandboxClient, SandboxConfig, Zygote, call_many
from spade_gym.sandbox.worker import ProgramHost

ROOT = Path(__file__).resolve().parent.parent
ARITHMETIC = ROOT / "examples" / "programs" / "arithmetic_chain.py"

#: A step that costs next to nothing and never ends the episode: the round trip is all there is.
CHEAP = program(step="return 'obs', 0.0, False, False, {}", max_turns=100_000)
CHEAP_STEP = ["obs", 0.0, False, False, {}]

#: A step with a little work (a 2,000-iteration loop under the guards), for the concurrency figures.
WORK = program(
    step="""
        total = 0
        for i in range(2000):
            total += i
        return 'obs ' + str(total), 0.0, False, False, {}
    """,
    max_turns=100_000,
)
WORK_STEP = ["obs 1999000", 0.0, False, False, {}]

STEP_ROUNDS = 3000
STEP_WARMUP = 200
STEP_BLOCK = 300  # step rounds between blocks of baseline calls, and calls per block
FLEET = 64

CORES = sorted(os.sched_getaffinity(0))
#: Cores the pinned variants run on: the first and the last allowed one.
PIN_CORES = sorted({CORES[0], CORES[-1]})

#: A fresh interpreter importing what a worker needs: the cost of every start without a zygote.
INTERPRETER = [sys.executable, "-s", "-P", "-c", "import RestrictedPython, pyseccomp"]

#: An echo child for the bare pipe round trip: argv = read fd, write fd, core (-1: not pinned).
_ECHO = """\
import os, sys
r, w, cpu = (int(a) for a in sys.argv[1:4])
if cpu >= 0:
    os.sched_setaffinity(0, {cpu})
while True:
    b = os.read(r, 65536)
    if not b:
        break
    os.write(w, b)
"""
#: About the size of a step frame (request ~40 bytes, response ~80).
_PING = b"x" * 48


# ------------------------------------------------------------------------------------------------
# Measuring
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timing:
    """Seconds per call: median (p50), mean, min and how many calls were timed."""

    median: float
    mean: float
    min: float
    rounds: int

    @classmethod
    def of_samples(cls, samples: list[float]) -> Timing:
        return cls(median(samples), fmean(samples), min(samples), len(samples))

    @property
    def us(self) -> float:
        return self.median * 1e6

    @property
    def ms(self) -> float:
        return self.median * 1e3


def timed(fn: Callable[[], Any]) -> float:
    """Seconds one call of ``fn`` takes."""
    start = time.perf_counter_ns()
    fn()
    return (time.perf_counter_ns() - start) / 1e9


def sample(fn: Callable[[], Any], rounds: int, warmup: int = 0) -> Timing:
    """Time ``rounds`` calls of ``fn`` one by one (after ``warmup`` untimed ones)."""
    for _ in range(warmup):
        fn()
    return Timing.of_samples([timed(fn) for _ in range(rounds)])


def measured(benchmark: Any) -> Timing | None:
    """What pytest-benchmark measured; ``None`` under ``--benchmark-disable``."""
    if benchmark.stats is None:
        return None
    stats = benchmark.stats.stats
    return Timing(stats.median, stats.mean, stats.min, stats.rounds)


class Interleaved:
    """Baselines timed from ``pedantic``'s setup (which is not timed), between the benchmark's rounds.

    Measured along with the benchmarked call, a baseline drifts with it (clock speed, neighbours on
    a shared host), so the ratio of the two holds where separate runs would not. Calls of a few
    microseconds are interleaved in blocks (``every`` rounds, ``block`` timed calls after ``settle``
    untimed ones), so that neither side runs on caches the other has just evicted; slow calls once
    per round.

    Args:
        skip: leave out what runs in the first ``skip`` rounds (``pedantic``'s warm-up rounds).
        every: run the baselines every this many rounds.
        block: timed calls of each baseline each time.
        settle: untimed calls of each baseline before its timed ones.
        baselines: name -> a call to time.
    """

    def __init__(
        self, skip: int, every: int = 1, block: int = 1, settle: int = 0, **baselines: Callable[[], Any]
    ) -> None:
        self.skip, self.every, self.block, self.settle = skip, every, block, settle
        self.baselines = baselines
        self.samples: dict[str, list[float]] = {name: [] for name in baselines}
        self.rounds = 0

    def setup(self, then: Callable[[], Any] | None = None) -> Callable[[], Any]:
        """A ``pedantic`` setup: time the baselines when due, then return ``then()`` (the round's arguments)."""

        def setup() -> Any:
            self.rounds += 1
            if (self.rounds - 1) % self.every == 0:
                for name, fn in self.baselines.items():
                    for _ in range(self.settle):
                        fn()
                    elapsed = [timed(fn) for _ in range(self.block)]
                    if self.rounds > self.skip:
                        self.samples[name] += elapsed
            return then() if then is not None else None

        return setup

    def __getitem__(self, name: str) -> Timing | None:
        """The baseline's figures; ``None`` when nothing was kept (``--benchmark-disable``)."""
        samples = self.samples[name]
        return Timing.of_samples(samples) if samples else None


@contextmanager
def pinned_host(cpu: int | None) -> Iterator[None]:
    """Run the block with this process pinned to ``cpu`` (``None``: as it is); restore afterwards."""
    if cpu is None:
        yield
        return
    before = os.sched_getaffinity(0)
    os.sched_setaffinity(0, {cpu})
    try:
        yield
    finally:
        os.sched_setaffinity(0, before)


def cpus_of(pid: int | None) -> list[int] | None:
    """The CPUs process ``pid`` may run on, or ``None`` if that cannot be read."""
    try:
        return sorted(os.sched_getaffinity(pid)) if pid is not None else None
    except OSError:
        return None


class EchoChild:
    """A bare ``os.pipe`` echo in a child interpreter: the floor under any round trip."""

    def __init__(self, cpu: int | None) -> None:
        request_r, self.request_w = os.pipe()
        self.response_r, response_w = os.pipe()
        self.process = subprocess.Popen(  # noqa: S603 - our own interpreter
            [sys.executable, "-s", "-P", "-c", _ECHO, str(request_r), str(response_w), str(-1 if cpu is None else cpu)],
            pass_fds=(request_r, response_w),
        )
        os.close(request_r)
        os.close(response_w)
        self.round_trip()  # the child is up and (if asked) pinned

    def round_trip(self) -> bytes:
        os.write(self.request_w, _PING)
        return os.read(self.response_r, 65536)  # one small write is read back whole

    def close(self) -> None:
        os.close(self.request_w)
        self.process.wait(timeout=10)
        os.close(self.response_r)


@contextmanager
def echo_child(cpu: int | None) -> Iterator[EchoChild]:
    echo = EchoChild(cpu)
    try:
        yield echo
    finally:
        echo.close()


def pipe_modes() -> list[tuple[str, int | None, int | None]]:
    """``(name, host core, child core)`` of the pipe references on this machine."""
    last = CORES[-1]
    modes = [("same_core", last, last), ("unpinned", None, None)]
    if len(CORES) > 1:
        modes.insert(1, ("cross_core", CORES[0], last))
    return modes


def loaded_host(source: str) -> ProgramHost:
    """A ``ProgramHost`` in this process with ``source`` loaded and reset: the in-process baseline."""
    host = ProgramHost()
    assert host.handle("load", {"source": source})["ok"]
    assert host.handle("reset", {"seed": 0})["ok"]
    return host


def loaded_client(source: str, config: SandboxConfig | None = None) -> SandboxClient:
    client = SandboxClient(config)
    client.load(source)
    client.reset(0)
    return client


def spawn_interpreter() -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(INTERPRETER, check=True)


@dataclass(frozen=True)
class ColdStart:
    """Seconds of each phase of a cold start: b and c means over the same rounds, a a median of 3."""

    zygote: float  # (a) a fresh zygote: once per host process and hash seed
    start: float  # (b) fork from the warm zygote, lock down, hello
    load_call: float  # (c) compile, module body, Env()

    @property
    def total(self) -> float:  # (d) what SandboxClient().load costs with a warm zygote
        return self.start + self.load_call


@cache
def cold_start_phases(rounds: int = 15) -> ColdStart:
    """Where a cold start's time goes, measured once per run (a: 3 rounds; b, c: ``rounds``)."""
    zygotes = []
    for _ in range(3):
        begin = time.perf_counter()
        zygote = Zygote(hash_seed=4242)
        zygotes.append(time.perf_counter() - begin)
        zygote.close()
    starts, loads = [], []
    for _ in range(rounds + 2):
        client = SandboxClient()
        begin = time.perf_counter()
        client.start()
        started = time.perf_counter()
        client.call("load", {"source": CHEAP})
        loaded = time.perf_counter()
        client.kill()
        starts.append(started - begin)
        loads.append(loaded - started)
    return ColdStart(zygote=median(zygotes), start=fmean(starts[2:]), load_call=fmean(loads[2:]))


def us(t: Timing | None) -> str:
    return "n/a (benchmark disabled)" if t is None else f"p50 {t.median * 1e6:.1f} us (mean {t.mean * 1e6:.1f})"


def ms(t: Timing | None) -> str:
    return "n/a (benchmark disabled)" if t is None else f"p50 {t.median * 1e3:.1f} ms (mean {t.mean * 1e3:.1f})"


def figures(prefix: str, t: Timing | None, scale: float, unit: str) -> dict[str, float]:
    if t is None:
        return {}
    return {
        f"{prefix}_p50_{unit}": t.median * scale,
        f"{prefix}_mean_{unit}": t.mean * scale,
        f"{prefix}_min_{unit}": t.min * scale,
    }


def met(flag: bool) -> str:
    return "met" if flag else "NOT met"


# ------------------------------------------------------------------------------------------------
# 1. Round trip of one step
# ------------------------------------------------------------------------------------------------


def test_step_inprocess_baseline(benchmark: Any, report: Callable[..., None]) -> None:
    """The baseline: the program's step through ``ProgramHost`` in this process."""
    host = loaded_host(CHEAP)
    response = benchmark.pedantic(
        host.handle, args=("step", {"action": "x"}), rounds=STEP_ROUNDS, warmup_rounds=STEP_WARMUP
    )
    assert response["ok"] and response["value"] == CHEAP_STEP
    t = measured(benchmark)
    report(f"in-process step {us(t)}", **figures("inprocess", t, 1e6, "us"))


@pytest.mark.parametrize(("mode", "host_cpu", "child_cpu"), pipe_modes(), ids=[m[0] for m in pipe_modes()])
def test_pipe_round_trip_reference(
    benchmark: Any, report: Callable[..., None], mode: str, host_cpu: int | None, child_cpu: int | None
) -> None:
    """The floor: a bare os.pipe round trip to an echo child, 48 bytes each way."""
    with pinned_host(host_cpu), echo_child(child_cpu) as echo:
        echoed = benchmark.pedantic(echo.round_trip, rounds=STEP_ROUNDS, warmup_rounds=STEP_WARMUP)
    assert echoed == _PING
    t = measured(benchmark)
    report(
        f"bare pipe round trip ({mode}, host cpu {host_cpu}, child cpu {child_cpu}) {us(t)}",
        mode=mode,
        host_cpu=host_cpu,
        child_cpu=child_cpu,
        **figures("pipe", t, 1e6, "us"),
    )


def _benchmark_step(benchmark: Any, client: SandboxClient, echo: EchoChild) -> tuple[Timing | None, Interleaved]:
    """Benchmark ``client.step``; the in-process step and the pipe round trip in blocks between its rounds."""
    host = loaded_host(CHEAP)
    base = Interleaved(
        skip=STEP_WARMUP,
        every=STEP_BLOCK,
        block=STEP_BLOCK,
        settle=20,
        inprocess=lambda: host.handle("step", {"action": "x"}),
        pipe=echo.round_trip,
    )
    result = benchmark.pedantic(
        client.step, args=("x",), setup=base.setup(), rounds=STEP_ROUNDS, warmup_rounds=STEP_WARMUP
    )
    assert list(result) == CHEAP_STEP
    return measured(benchmark), base


def _step_figures(t: Timing | None, base: Interleaved, pipe_what: str) -> tuple[str, dict[str, Any]]:
    inprocess, pipe = base["inprocess"], base["pipe"]
    figs: dict[str, Any] = {
        **figures("sandbox", t, 1e6, "us"),
        **figures("inprocess", inprocess, 1e6, "us"),
        **figures(f"pipe_{pipe_what}", pipe, 1e6, "us"),
        "target_p50_us": 150.0,
    }
    if t is None or inprocess is None or pipe is None:
        return "n/a (benchmark disabled)", figs
    figs.update(
        ratio_vs_inprocess=t.median / inprocess.median,
        overhead_vs_inprocess_us=(t.median - inprocess.median) * 1e6,
        ratio_vs_pipe=t.median / pipe.median,
        meets_target=t.us < 150.0,
    )
    summary = (
        f"sandbox step {us(t)} = {figs['ratio_vs_inprocess']:.1f}x in-process ({inprocess.us:.1f} us), "
        f"{figs['ratio_vs_pipe']:.1f}x a bare pipe round trip {pipe_what.replace('_', '-')} ({pipe.us:.1f} us); "
        f"target p50 < 150 us: {met(figs['meets_target'])}"
    )
    return summary, figs


def test_step_sandbox_unpinned(benchmark: Any, report: Callable[..., None]) -> None:
    """One ``client.step`` round trip, host and worker left to the scheduler."""
    client = loaded_client(CHEAP)
    try:
        with echo_child(None) as echo:
            t, base = _benchmark_step(benchmark, client, echo)
        worker_cpus = cpus_of(client.pid)
    finally:
        client.kill()
    summary, figs = _step_figures(t, base, "unpinned")
    report(summary, worker_cpus=worker_cpus, **figs)


def _alternate(pinned: SandboxClient, unpinned: SandboxClient, cpu: int, blocks: int = 6, calls: int = 300) -> float:
    """p50 of pinned / p50 of unpinned steps, from alternating blocks of each (the host pinned or not)."""
    samples: dict[bool, list[float]] = {True: [], False: []}
    for _ in range(blocks):
        for is_pinned in (True, False):
            client = pinned if is_pinned else unpinned
            with pinned_host(cpu if is_pinned else None):
                for _ in range(20):  # settle after the migration
                    client.step("x")
                samples[is_pinned] += [timed(lambda c=client: c.step("x")) for _ in range(calls)]
    return median(samples[True]) / median(samples[False])


@pytest.mark.parametrize("cpu", PIN_CORES, ids=[f"cpu{c}" for c in PIN_CORES])
def test_step_sandbox_pinned(benchmark: Any, report: Callable[..., None], cpu: int) -> None:
    """One ``client.step`` round trip with host and worker pinned to the same core."""
    unpinned = loaded_client(CHEAP)  # started before pinning: its worker is free to move
    try:
        with pinned_host(cpu):
            pinned = loaded_client(CHEAP, SandboxConfig(cpu_affinity=(cpu,)))
        try:
            assert cpus_of(pinned.pid) in ([cpu], None), f"the worker may run on {cpus_of(pinned.pid)}, not on {cpu}"
            with pinned_host(cpu), echo_child(cpu) as echo:
                t, base = _benchmark_step(benchmark, pinned, echo)
            ratio = _alternate(pinned, unpinned, cpu) if t is not None else None
        finally:
            pinned.kill()
    finally:
        unpinned.kill()
    summary, figs = _step_figures(t, base, "same_core")
    if ratio is not None:
        figs["ratio_pinned_vs_unpinned"] = ratio
        summary += f"; pinned/unpinned p50 {ratio:.2f} (alternating blocks)"
    report(f"[cpu {cpu}] {summary}", cpu=cpu, **figs)


# ------------------------------------------------------------------------------------------------
# 2. Cold start of a sandboxed environment
# ------------------------------------------------------------------------------------------------


def test_cold_start_interpreter_baseline(benchmark: Any, report: Callable[..., None]) -> None:
    """The baseline: a fresh interpreter importing RestrictedPython and pyseccomp (no zygote)."""
    done = benchmark.pedantic(spawn_interpreter, rounds=10, warmup_rounds=1)
    assert done.returncode == 0
    t = measured(benchmark)
    report(f"fresh interpreter + imports {ms(t)}", **figures("interpreter", t, 1e3, "ms"))


def _vs_interpreter(t: Timing | None, base: Interleaved, what: str, target_ms: float | None) -> tuple[str, dict]:
    interpreter = base["interpreter"]
    figs: dict[str, Any] = figures("interpreter", interpreter, 1e3, "ms")
    if target_ms is not None:
        figs["target_ms"] = target_ms
    if t is None or interpreter is None:
        return f"{what} n/a (benchmark disabled)", figs
    figs["ratio_vs_interpreter"] = t.median / interpreter.median
    summary = (
        f"{what} {ms(t)} = {figs['ratio_vs_interpreter']:.2f}x a fresh interpreter + imports ({interpreter.ms:.1f} ms)"
    )
    if target_ms is not None:
        figs["meets_target"] = t.ms < target_ms
        summary += f"; target < {target_ms:g} ms: {met(figs['meets_target'])}"
    return summary, figs


def test_cold_start_zygote(benchmark: Any, report: Callable[..., None]) -> None:
    """(a) A fresh zygote: interpreter, worker imports, ready message; once per process and seed."""
    zygotes: list[Zygote] = []

    def make() -> Zygote:
        zygotes.append(Zygote(hash_seed=4242))
        return zygotes[-1]

    def close() -> None:
        zygote = zygotes.pop()
        assert zygote.process.poll() is None  # it started and is serving
        zygote.close()

    base = Interleaved(skip=1, interpreter=spawn_interpreter)
    try:
        benchmark.pedantic(make, setup=base.setup(), teardown=close, rounds=8, warmup_rounds=1)
    finally:
        for zygote in zygotes:  # left over when the benchmark is disabled (no teardown) or fails
            zygote.close()
    t = measured(benchmark)
    summary, figs = _vs_interpreter(t, base, "zygote start", None)
    report(summary, **figures("zygote", t, 1e3, "ms"), **figs)


@pytest.fixture()
def spawned() -> Iterator[list[SandboxClient]]:
    """Clients a benchmark creates; every one is killed at the end, whatever happened."""
    clients: list[SandboxClient] = []
    yield clients
    for client in clients:
        client.kill()


def _kill(client: SandboxClient) -> None:
    client.kill()


def _new_client(spawned: list[SandboxClient], *, started: bool) -> Callable[[], tuple[tuple[SandboxClient], dict]]:
    """The arguments of one round: a new client (started if asked), made outside the timed part."""

    def make() -> tuple[tuple[SandboxClient], dict[str, Any]]:
        spawned.append(SandboxClient())
        if started:
            spawned[-1].start()
        return (spawned[-1],), {}

    return make


def test_cold_start_fork(benchmark: Any, report: Callable[..., None], spawned: list[SandboxClient]) -> None:
    """(b) ``client.start()``: fork from the warm zygote, lock down, hello."""
    layers = benchmark.pedantic(
        lambda c: c.start(), setup=_new_client(spawned, started=False), teardown=_kill, rounds=20, warmup_rounds=2
    )
    assert set(layers) == set(LAYERS)
    t = measured(benchmark)
    phases = cold_start_phases()
    figs = figures("start", t, 1e3, "ms") | {"fraction_of_load": phases.start / phases.total}
    report(f"client.start() {ms(t)}; {figs['fraction_of_load']:.0%} of a warm load", **figs)


def test_cold_start_load_call(benchmark: Any, report: Callable[..., None], spawned: list[SandboxClient]) -> None:
    """(c) ``client.call("load")`` on a started worker: compile, module body, ``Env()``."""
    spec = benchmark.pedantic(
        lambda c: c.call("load", {"source": CHEAP}),
        setup=_new_client(spawned, started=True),
        teardown=_kill,
        rounds=20,
        warmup_rounds=2,
    )
    assert spec["name"] == "TestEnv"
    t = measured(benchmark)
    phases = cold_start_phases()
    figs = figures("load_call", t, 1e3, "ms") | {"fraction_of_load": phases.load_call / phases.total}
    report(f"client.call('load') {ms(t)}; {figs['fraction_of_load']:.0%} of a warm load", **figs)


def test_cold_start_load(benchmark: Any, report: Callable[..., None], spawned: list[SandboxClient]) -> None:
    """(d) ``SandboxClient().load(src)`` with a warm zygote, and where its time goes."""
    base = Interleaved(skip=2, interpreter=spawn_interpreter)
    spec = benchmark.pedantic(
        lambda c: c.load(CHEAP),
        setup=base.setup(_new_client(spawned, started=False)),
        teardown=_kill,
        rounds=20,
        warmup_rounds=2,
    )
    assert spec.name == "TestEnv"
    t = measured(benchmark)
    phases = cold_start_phases()
    summary, figs = _vs_interpreter(t, base, "warm load", 100.0)
    figs |= {
        "phase_zygote_ms": phases.zygote * 1e3,
        "phase_start_ms": phases.start * 1e3,
        "phase_load_call_ms": phases.load_call * 1e3,
        "fraction_start": phases.start / phases.total,
        "fraction_load_call": phases.load_call / phases.total,
        "zygote_vs_warm_load": phases.zygote / phases.total,
        "first_load_in_process_ms": (phases.zygote + phases.total) * 1e3,
    }
    summary += (
        f"; start {figs['fraction_start']:.0%} + load call {figs['fraction_load_call']:.0%}; "
        f"the one-off zygote start is {figs['zygote_vs_warm_load']:.1f}x a warm load"
    )
    report(summary, **figures("load", t, 1e3, "ms"), **figs)


def test_cold_start_sandboxed_env(benchmark: Any, report: Callable[..., None], spawned: list[SandboxClient]) -> None:
    """``SandboxedEnv(path)`` for examples/programs/arithmetic_chain.py: static check + load."""
    envs: list[SandboxedEnv] = []
    source = ARITHMETIC.read_text(encoding="utf-8")

    def make() -> SandboxedEnv:
        envs.append(SandboxedEnv(ARITHMETIC))
        return envs[-1]

    def close() -> None:
        env = envs.pop()
        assert env.name == "ArithmeticChain" and env.client.alive
        env.close()

    def load_in_sandbox() -> None:  # the second part alone: the sandbox load of the same source
        spawned.append(SandboxClient())
        spawned[-1].load(source)

    base = Interleaved(
        skip=1,
        interpreter=spawn_interpreter,
        static_check=lambda: EnvProgram.from_file(ARITHMETIC).check(),
        sandbox_load=load_in_sandbox,
    )
    try:
        benchmark.pedantic(make, setup=base.setup(), teardown=close, rounds=10, warmup_rounds=1)
    finally:
        for env in envs:  # left over when the benchmark is disabled (no teardown) or fails
            env.close()
    t = measured(benchmark)
    summary, figs = _vs_interpreter(t, base, "SandboxedEnv(arithmetic_chain.py)", 100.0)
    check, load = base["static_check"], base["sandbox_load"]
    figs |= figures("static_check", check, 1e3, "ms") | figures("sandbox_load", load, 1e3, "ms")
    if t is not None and check is not None and load is not None:
        figs.update(fraction_static_check=check.median / t.median, fraction_sandbox_load=load.median / t.median)
        summary += (
            f"; static check {check.ms:.1f} ms ({figs['fraction_static_check']:.0%}), "
            f"sandbox load {load.ms:.1f} ms ({figs['fraction_sandbox_load']:.0%})"
        )
    report(summary, **figures("sandboxed_env", t, 1e3, "ms"), **figs)


# ------------------------------------------------------------------------------------------------
# 3. Stepping 64 sandboxed environments
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fleet() -> Iterator[list[SandboxClient]]:
    """64 workers with the WORK program loaded and reset (started one by one, loaded at once)."""
    clients = [SandboxClient() for _ in range(FLEET)]
    try:
        for client in clients:
            client.start()
        for op, args in (("load", {"source": WORK}), ("reset", {"seed": 0})):
            answers = call_many(clients, op, [args] * FLEET)
            assert not [a for a in answers if isinstance(a, SpadeError)], answers
        yield clients
    finally:
        for client in clients:
            client.kill()


def _sequential(clients: list[SandboxClient]) -> list[Any]:
    return [client.step("x") for client in clients]


def _concurrent(clients: list[SandboxClient]) -> list[Any]:
    return call_many(clients, "step", [{"action": "x"}] * len(clients))


def _check_round(results: list[Any]) -> None:
    errors = [r for r in results if isinstance(r, SpadeError)]
    assert not errors, errors[:3]
    assert [list(r) for r in results] == [WORK_STEP] * FLEET


def _fleet_figures(t: Timing | None, work: Timing | None) -> dict[str, Any]:
    figs: dict[str, Any] = {"clients": FLEET, "cores": len(CORES)}
    if t is not None:
        figs.update(round_p50_ms=t.ms, round_mean_ms=t.mean * 1e3, steps_per_s=FLEET / t.median)
    if work is not None:
        ideal = work.median * FLEET / len(CORES)  # the in-process compute, spread over every core
        figs.update(inprocess_work_step_us=work.us, ideal_round_ms=ideal * 1e3, ideal_steps_per_s=FLEET / ideal)
    return figs


def test_step_64_sequential(benchmark: Any, report: Callable[..., None], fleet: list[SandboxClient]) -> None:
    """The baseline: 64 ``client.step`` calls one after another."""
    host = loaded_host(WORK)
    base = Interleaved(skip=2, work=lambda: host.handle("step", {"action": "x"}))
    results = benchmark.pedantic(_sequential, args=(fleet,), setup=base.setup(), rounds=30, warmup_rounds=2)
    _check_round(results)
    t = measured(benchmark)
    figs = _fleet_figures(t, base["work"])
    summary = "n/a (benchmark disabled)"
    if t is not None:
        summary = f"64 sequential steps: round {ms(t)}, {figs['steps_per_s']:,.0f} steps/s"
    report(summary, **figs)


def test_step_64_call_many(benchmark: Any, report: Callable[..., None], fleet: list[SandboxClient]) -> None:
    """``call_many`` over 64 workers: every request sent, then every answer collected."""
    host = loaded_host(WORK)
    base = Interleaved(skip=2, sequential=lambda: _sequential(fleet), work=lambda: host.handle("step", {"action": "x"}))
    results = benchmark.pedantic(_concurrent, args=(fleet,), setup=base.setup(), rounds=30, warmup_rounds=2)
    _check_round(results)
    t, sequential = measured(benchmark), base["sequential"]
    figs = _fleet_figures(t, base["work"])
    summary = "n/a (benchmark disabled)"
    if t is not None and sequential is not None:
        figs.update(
            sequential_round_p50_ms=sequential.ms,
            sequential_steps_per_s=FLEET / sequential.median,
            speedup_vs_sequential=sequential.median / t.median,
            efficiency_vs_ideal=figs["steps_per_s"] / figs["ideal_steps_per_s"],
        )
        summary = (
            f"call_many over 64: round {ms(t)}, {figs['steps_per_s']:,.0f} steps/s vs sequential "
            f"{figs['sequential_steps_per_s']:,.0f} steps/s: {figs['speedup_vs_sequential']:.2f}x on {len(CORES)} "
            f"cores ({figs['efficiency_vs_ideal']:.0%} of the in-process compute spread over every core)"
        )
    report(summary, **figs)
