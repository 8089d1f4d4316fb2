"""Speed of the sandbox: one step's round trip, the cold start of an environment, many workers at once.

Every figure is reported, absolute and as a ratio to a baseline measured in the same run, never
asserted: the only asserts check that the benchmarked call did its job. Run with
``python -m pytest benchmarks -s --benchmark-columns=min,median,mean,max`` (see README.md).

Targets (from the issue, on a 2-core machine): a sandboxed step's p50 below 150 us; a sandboxed
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


def sample(fn: Callable[[], Any], rounds: int, warmup: int = 0) -> Timing:
    """Time ``rounds`` calls of ``fn`` one by one (after ``warmup`` untimed ones)."""
    for _ in range(warmup):
        fn()
    samples = []
    for _ in range(rounds):
        start = time.perf_counter_ns()
        fn()
        samples.append((time.perf_counter_ns() - start) / 1e9)
    return Timing.of_samples(samples)


def measured(benchmark: Any) -> Timing | None:
    """What pytest-benchmark measured; ``None`` under ``--benchmark-disable``."""
    if benchmark.stats is None:
        return None
    stats = benchmark.stats.stats
    return Timing(stats.median, stats.mean, stats.min, stats.rounds)


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


def cpus_of(pid: int) -> set[int] | None:
    """The CPUs process ``pid`` may run on, or ``None`` if that cannot be read."""
    try:
        return os.sched_getaffinity(pid)
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


def pipe_modes() -> list[tuple[str, int | None, int | None]]:
    """``(name, host core, child core)`` of the pipe references on this machine."""
    last = CORES[-1]
    modes = [("same_core", last, last), ("unpinned", None, None)]
    if len(CORES) > 1:
        modes.insert(1, ("cross_core", CORES[0], last))
    return modes


@cache
def pipe_reference(host_cpu: int | None, child_cpu: int | None) -> Timing:
    """The bare pipe round trip, measured once per run for each placement."""
    with pinned_host(host_cpu):
        echo = EchoChild(child_cpu)
        try:
            return sample(echo.round_trip, STEP_ROUNDS, STEP_WARMUP)
        finally:
            echo.close()


@cache
def inprocess_step(source: str, rounds: int = STEP_ROUNDS, warmup: int = STEP_WARMUP) -> Timing:
    """``ProgramHost.handle("step")`` in this process: the same policy with no process boundary."""
    host = ProgramHost()
    assert host.handle("load", {"source": source})["ok"]
    assert host.handle("reset", {"seed": 0})["ok"]
    return sample(lambda: host.handle("step", {"action": "x"}), rounds, warmup)


@cache
def unpinned_sandbox_step() -> Timing:
    client = SandboxClient()
    try:
        client.load(CHEAP)
        client.reset(0)
        return sample(lambda: client.step("x"), STEP_ROUNDS, STEP_WARMUP)
    finally:
        client.kill()


@cache
def interpreter_spawn() -> Timing:
    return sample(lambda: subprocess.run(INTERPRETER, check=True), rounds=5, warmup=1)


@dataclass(frozen=True)
class ColdStart:
    """Mean seconds of each phase of a cold start (one-by-one rounds, phases timed in each)."""

    zygote: float  # (a) a fresh zygote: once per host process and hash seed
    start: float  # (b) fork from the warm zygote, lock down, hello
    load_call: float  # (c) compile, module body, Env()

    @property
    def total(self) -> float:  # (d) what SandboxClient().load costs with a warm zygote
        return self.start + self.load_call


@cache
def cold_start_phases(rounds: int = 15) -> ColdStart:
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


# ------------------------------------------------------------------------------------------------
# 1. Round trip of one step
# ------------------------------------------------------------------------------------------------


def test_step_inprocess_baseline(benchmark: Any, report: Callable[..., None]) -> None:
    """The baseline: the program's step through ``ProgramHost`` in this process."""
    host = ProgramHost()
    assert host.handle("load", {"source": CHEAP})["ok"]
    assert host.handle("reset", {"seed": 0})["ok"]
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
    with pinned_host(host_cpu):
        echo = EchoChild(child_cpu)
        try:
            echoed = benchmark.pedantic(echo.round_trip, rounds=STEP_ROUNDS, warmup_rounds=STEP_WARMUP)
        finally:
            echo.close()
    assert echoed == _PING
    t = measured(benchmark)
    report(
        f"bare pipe round trip ({mode}, host cpu {host_cpu}, child cpu {child_cpu}) {us(t)}",
        mode=mode,
        host_cpu=host_cpu,
        child_cpu=child_cpu,
        **figures("pipe", t, 1e6, "us"),
    )


def _step_report(t: Timing | None, *, pinned_to: int | None) -> tuple[str, dict[str, Any]]:
    base = inprocess_step(CHEAP)
    placement = (CORES[-1], CORES[-1]) if pinned_to is None else (pinned_to, pinned_to)
    pipe_same = pipe_reference(*placement)
    pipe_free = pipe_reference(None, None)
    figs: dict[str, Any] = {
        **figures("sandbox", t, 1e6, "us"),
        **figures("inprocess", base, 1e6, "us"),
        "pipe_same_core_p50_us": pipe_same.us,
        "pipe_unpinned_p50_us": pipe_free.us,
        "target_p50_us": 150.0,
    }
    if t is None:
        return "n/a (benchmark disabled)", figs
    figs.update(
        ratio_vs_inprocess=t.median / base.median,
        overhead_vs_inprocess_us=(t.median - base.median) * 1e6,
        ratio_vs_pipe_same_core=t.median / pipe_same.median,
        ratio_vs_pipe_unpinned=t.median / pipe_free.median,
        meets_target=t.us < 150.0,
    )
    summary = (
        f"sandbox step {us(t)} = {figs['ratio_vs_inprocess']:.1f}x in-process ({base.us:.1f} us); "
        f"bare pipe {pipe_same.us:.1f} us same-core / {pipe_free.us:.1f} us unpinned; "
        f"target p50 < 150 us: {'met' if figs['meets_target'] else 'NOT met'}"
    )
    return summary, figs


def test_step_sandbox_unpinned(benchmark: Any, report: Callable[..., None]) -> None:
    """One ``client.step`` round trip, host and worker left to the scheduler."""
    client = SandboxClient()
    try:
        client.load(CHEAP)
        client.reset(0)
        worker_cpus = cpus_of(client.pid)  # type: ignore[arg-type]
        result = benchmark.pedantic(client.step, args=("x",), rounds=STEP_ROUNDS, warmup_rounds=STEP_WARMUP)
    finally:
        client.kill()
    assert list(result) == CHEAP_STEP
    summary, figs = _step_report(measured(benchmark), pinned_to=None)
    report(summary, worker_cpus=sorted(worker_cpus) if worker_cpus is not None else None, **figs)


@pytest.mark.parametrize("cpu", PIN_CORES, ids=[f"cpu{c}" for c in PIN_CORES])
def test_step_sandbox_pinned(benchmark: Any, report: Callable[..., None], cpu: int) -> None:
    """One ``client.step`` round trip with host and worker pinned to the same core."""
    unpinned = unpinned_sandbox_step()  # measured before pinning (a fresh worker, unpinned)
    client = SandboxClient(SandboxConfig(cpu_affinity=(cpu,)))
    with pinned_host(cpu):
        try:
            client.load(CHEAP)
            client.reset(0)
            worker_cpus = cpus_of(client.pid)  # type: ignore[arg-type]
            result = benchmark.pedantic(client.step, args=("x",), rounds=STEP_ROUNDS, warmup_rounds=STEP_WARMUP)
        finally:
            client.kill()
    assert list(result) == CHEAP_STEP
    if worker_cpus is not None:
        assert worker_cpus == {cpu}, f"the worker runs on {worker_cpus}, not on cpu {cpu}"
    t = measured(benchmark)
    summary, figs = _step_report(t, pinned_to=cpu)
    figs["unpinned_p50_us"] = unpinned.us
    if t is not None:
        figs["ratio_pinned_vs_unpinned"] = t.median / unpinned.median
        summary += f"; pinned/unpinned {figs['ratio_pinned_vs_unpinned']:.2f} (unpinned {unpinned.us:.1f} us)"
    report(f"[cpu {cpu}] {summary}", cpu=cpu, **figs)


# ------------------------------------------------------------------------------------------------
# 2. Cold start of a sandboxed environment
# ------------------------------------------------------------------------------------------------


def test_cold_start_interpreter_baseline(benchmark: Any, report: Callable[..., None]) -> None:
    """The baseline: a fresh interpreter importing RestrictedPython and pyseccomp (no zygote)."""
    done = benchmark.pedantic(subprocess.run, args=(INTERPRETER,), kwargs={"check": True}, rounds=5, warmup_rounds=1)
    assert done.returncode == 0
    t = measured(benchmark)
    report(f"fresh interpreter + imports {ms(t)}", **figures("interpreter", t, 1e3, "ms"))


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

    try:
        benchmark.pedantic(make, teardown=close, rounds=5, warmup_rounds=1)
    finally:
        for zygote in zygotes:  # left over when the benchmark is disabled (no teardown) or fails
            zygote.close()
    t = measured(benchmark)
    base = interpreter_spawn()
    figs = figures("zygote", t, 1e3, "ms") | {"interpreter_p50_ms": base.ms}
    if t is not None:
        figs["ratio_vs_interpreter"] = t.median / base.median
    report(f"zygote start {ms(t)}; a bare interpreter + imports: {base.ms:.1f} ms", **figs)


@pytest.fixture()
def spawned() -> Iterator[list[SandboxClient]]:
    """Clients a benchmark creates; every one is killed at the end, whatever happened."""
    clients: list[SandboxClient] = []
    yield clients
    for client in clients:
        client.kill()


def _kill(client: SandboxClient) -> None:
    client.kill()


def _setup(spawned: list[SandboxClient], *, started: bool) -> Callable[[], tuple[tuple[SandboxClient], dict[str, Any]]]:
    """A pedantic ``setup``: a new client (started if asked), outside the timed part."""

    def setup() -> tuple[tuple[SandboxClient], dict[str, Any]]:
        spawned.append(SandboxClient())
        if started:
            spawned[-1].start()
        return (spawned[-1],), {}

    return setup


def test_cold_start_fork(benchmark: Any, report: Callable[..., None], spawned: list[SandboxClient]) -> None:
    """(b) ``client.start()``: fork from the warm zygote, lock down, hello."""
    layers = benchmark.pedantic(
        lambda c: c.start(), setup=_setup(spawned, started=False), teardown=_kill, rounds=20, warmup_rounds=2
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
        setup=_setup(spawned, started=True),
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
    spec = benchmark.pedantic(
        lambda c: c.load(CHEAP), setup=_setup(spawned, started=False), teardown=_kill, rounds=20, warmup_rounds=2
    )
    assert spec.name == "TestEnv"
    t = measured(benchmark)
    phases = cold_start_phases()
    base = interpreter_spawn()
    figs: dict[str, Any] = figures("load", t, 1e3, "ms") | {
        "target_ms": 100.0,
        "interpreter_p50_ms": base.ms,
        "phase_zygote_ms": phases.zygote * 1e3,
        "phase_start_ms": phases.start * 1e3,
        "phase_load_call_ms": phases.load_call * 1e3,
        "fraction_start": phases.start / phases.total,
        "fraction_load_call": phases.load_call / phases.total,
        "zygote_vs_warm_load": phases.zygote / phases.total,
        "first_load_in_process_ms": (phases.zygote + phases.total) * 1e3,
    }
    if t is None:
        report("n/a (benchmark disabled)", **figs)
        return
    figs.update(ratio_vs_interpreter=t.median / base.median, meets_target=t.ms < 100.0)
    report(
        f"warm load {ms(t)} = {figs['ratio_vs_interpreter']:.2f}x a fresh interpreter + imports ({base.ms:.1f} ms); "
        f"start {figs['fraction_start']:.0%} + load call {figs['fraction_load_call']:.0%}; "
        f"the one-off zygote start is {figs['zygote_vs_warm_load']:.1f}x a warm load; "
        f"target < 100 ms: {'met' if figs['meets_target'] else 'NOT met'}",
        **figs,
    )


def test_cold_start_sandboxed_env(benchmark: Any, report: Callable[..., None], spawned: list[SandboxClient]) -> None:
    """``SandboxedEnv(path)`` for examples/programs/arithmetic_chain.py: static check + load."""
    envs: list[SandboxedEnv] = []

    def make() -> SandboxedEnv:
        envs.append(SandboxedEnv(ARITHMETIC))
        return envs[-1]

    def close() -> None:
        env = envs.pop()
        assert env.name == "ArithmeticChain" and env.client.alive
        env.close()

    try:
        benchmark.pedantic(make, teardown=close, rounds=10, warmup_rounds=1)
    finally:
        for env in envs:  # left over when the benchmark is disabled (no teardown) or fails
            env.close()
    t = measured(benchmark)
    base = interpreter_spawn()
    # Where the time goes: the static check on the host, then the sandbox load of the same source.
    check = sample(lambda: EnvProgram.from_file(ARITHMETIC).check(), rounds=10, warmup=1)
    source = ARITHMETIC.read_text(encoding="utf-8")

    def load_in_sandbox() -> None:
        spawned.append(SandboxClient())
        spawned[-1].load(source)

    load = sample(load_in_sandbox, rounds=10, warmup=1)
    figs: dict[str, Any] = figures("sandboxed_env", t, 1e3, "ms") | {
        "target_ms": 100.0,
        "interpreter_p50_ms": base.ms,
        "static_check_p50_ms": check.ms,
        "sandbox_load_p50_ms": load.ms,
    }
    summary = "n/a (benchmark disabled)"
    if t is not None:
        figs.update(
            ratio_vs_interpreter=t.median / base.median,
            meets_target=t.ms < 100.0,
            fraction_static_check=check.median / t.median,
            fraction_sandbox_load=load.median / t.median,
        )
        summary = (
            f"SandboxedEnv(arithmetic_chain.py) {ms(t)} = {figs['ratio_vs_interpreter']:.2f}x a fresh interpreter "
            f"+ imports ({base.ms:.1f} ms); static check {check.ms:.1f} ms ({figs['fraction_static_check']:.0%}), "
            f"sandbox load {load.ms:.1f} ms ({figs['fraction_sandbox_load']:.0%}); "
            f"target < 100 ms: {'met' if figs['meets_target'] else 'NOT met'}"
        )
    report(summary, **figs)


# ------------------------------------------------------------------------------------------------
# 3. Stepping 64 sandboxed environments
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fleet() -> Iterator[list[SandboxClient]]:
    clients = [SandboxClient() for _ in range(FLEET)]
    try:
        for client in clients:
            client.start()
        loaded = call_many(clients, "load", [{"source": WORK}] * FLEET)
        assert not [r for r in loaded if isinstance(r, SpadeError)], loaded
        reset = call_many(clients, "reset", [{"seed": 0}] * FLEET)
        assert not [r for r in reset if isinstance(r, SpadeError)], reset
        yield clients
    finally:
        for client in clients:
            client.kill()


def _sequential(clients: list[SandboxClient]) -> list[Any]:
    return [client.step("x") for client in clients]


def _concurrent(clients: list[SandboxClient]) -> list[Any]:
    return call_many(clients, "step", [{"action": "x"}] * len(clients))


def _sequential_baseline(clients: list[SandboxClient]) -> Timing:
    return sample(lambda: _sequential(clients), rounds=30, warmup=2)


def _fleet_figures(t: Timing | None, clients: list[SandboxClient]) -> dict[str, Any]:
    work = inprocess_step(WORK, rounds=300, warmup=20)
    ideal = work.median * len(clients) / len(CORES)  # pure compute, spread over every core
    figs: dict[str, Any] = {
        "clients": len(clients),
        "cores": len(CORES),
        "inprocess_work_step_us": work.us,
        "ideal_round_ms": ideal * 1e3,
    }
    if t is not None:
        figs.update(
            round_p50_ms=t.ms,
            round_mean_ms=t.mean * 1e3,
            steps_per_s=len(clients) / t.median,
            ideal_steps_per_s=len(clients) / ideal,
        )
    return figs


def test_step_64_sequential(benchmark: Any, report: Callable[..., None], fleet: list[SandboxClient]) -> None:
    """The baseline: 64 ``client.step`` calls one after another."""
    results = benchmark.pedantic(_sequential, args=(fleet,), rounds=30, warmup_rounds=2)
    assert [list(r) for r in results] == [WORK_STEP] * FLEET
    t = measured(benchmark)
    figs = _fleet_figures(t, fleet)
    summary = "n/a (benchmark disabled)"
    if t is not None:
        summary = f"64 sequential steps: round {ms(t)}, {figs['steps_per_s']:,.0f} steps/s"
    report(summary, **figs)


def test_step_64_call_many(benchmark: Any, report: Callable[..., None], fleet: list[SandboxClient]) -> None:
    """``call_many`` over 64 workers: every request sent, then every answer collected."""
    sequential = _sequential_baseline(fleet)
    results = benchmark.pedantic(_concurrent, args=(fleet,), rounds=30, warmup_rounds=2)
    errors = [r for r in results if isinstance(r, SpadeError)]
    assert not errors, errors[:3]
    assert [list(r) for r in results] == [WORK_STEP] * FLEET
    t = measured(benchmark)
    figs = _fleet_figures(t, fleet) | {
        "sequential_round_p50_ms": sequential.ms,
        "sequential_steps_per_s": FLEET / sequential.median,
    }
    summary = "n/a (benchmark disabled)"
    if t is not None:
        figs["speedup_vs_sequential"] = sequential.median / t.median
        figs["efficiency_vs_ideal"] = figs["steps_per_s"] / figs["ideal_steps_per_s"]
        summary = (
            f"call_many over 64: round {ms(t)}, {figs['steps_per_s']:,.0f} steps/s vs sequential "
            f"{figs['sequential_steps_per_s']:,.0f} steps/s: {figs['speedup_vs_sequential']:.2f}x on {len(CORES)} cores "
            f"({figs['efficiency_vs_ideal']:.0%} of the compute-bound ideal)"
        )
    report(summary, **figs)
