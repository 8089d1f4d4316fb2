"""The real sandbox: worker processes, their OS layers, deadlines, budgets and the protocol."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from programs import program

from spade_gym import (
    Budget,
    ContractError,
    EnvRuntimeError,
    SandboxClient,
    SandboxConfig,
    SandboxSetupError,
    SandboxTimeout,
    WorkerCrash,
)
from spade_gym.sandbox import LAYERS, call_many


def wait_gone(pid: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/stat") as f:
                if f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X"):
                    return True  # a zombie: dead, waiting to be reaped
        except (FileNotFoundError, ProcessLookupError):
            return True
        time.sleep(0.01)
    return False


def test_worker_reports_every_layer_and_the_layers_hold() -> None:
    with SandboxClient() as client:
        layers = client.start()
        assert set(layers) == set(LAYERS)
        assert layers["private_fds"] and layers["rlimits"]
        probe = client.call("probe")
    # What the probe attempted must be denied wherever the layer behind it is active.
    if layers["seccomp"]:
        assert set(probe) >= {"socket", "fork", "exec", "write_file", "read_file", "read_proc", "kill_parent"}
        for attempt, result in probe.items():
            assert result.startswith("denied"), (attempt, result)
    if layers["rlimits"]:  # RLIMIT_NPROC=0 stops fork even without seccomp
        assert probe["fork"].startswith("denied")
    assert not os.path.exists("/tmp/spade-probe-write")


def test_require_layers() -> None:
    with pytest.raises(ValueError, match="unknown sandbox layer"):
        SandboxConfig(require_layers=("teleport",))
    with SandboxClient() as client:
        layers = client.start()
    inactive = [name for name, value in layers.items() if value is False]
    config = SandboxConfig(require_layers=tuple(n for n in LAYERS if layers[n] is not False))
    with SandboxClient(config) as client:
        client.start()  # every active layer can be required
    if inactive:
        with (
            pytest.raises(SandboxSetupError, match="not active"),
            SandboxClient(SandboxConfig(require_layers=tuple(inactive))) as client,
        ):
            client.start()


def test_worker_does_not_inherit_host_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    from spade_gym.sandbox.client import Zygote

    monkeypatch.setenv("SPADE_TEST_SECRET", "hunter2")
    zygote = Zygote(hash_seed=None)  # started after the secret was set
    try:
        with open(f"/proc/{zygote.process.pid}/environ", "rb") as f:
            assert b"hunter2" not in f.read()
    finally:
        zygote.close()


def test_deadline_kills_the_worker_from_outside(fast_config: SandboxConfig) -> None:
    with SandboxClient(fast_config) as client:
        client.load(program(step="while True:\n    pass"))
        client.reset(0)
        pid = client.pid
        started = time.monotonic()
        with pytest.raises(SandboxTimeout, match=r"CPU budget of 0.5 s of step\(\)"):
            client.step("x")
        assert time.monotonic() - started < fast_config.call_timeout_s + 1.0
        assert not client.alive
        assert pid is not None and wait_gone(pid)
        with pytest.raises(WorkerCrash, match="not running"):
            client.step("x")


def test_budget_spans_calls() -> None:
    config = SandboxConfig(call_timeout_s=2.0)
    slow = program(step="n = 0\nfor i in range(300000):\n    n += i\nreturn 'o', 0.0, False, False, {}")
    with SandboxClient(config) as client:
        client.load(slow)
        budget = Budget(0.3, what="validation")
        client.reset(0, budget)
        with pytest.raises(SandboxTimeout, match="validation CPU budget"):
            for _ in range(1000):
                client.step("x", budget)
        assert budget.remaining <= 0.05


def _pause(pid: int, seconds: float | None) -> threading.Thread:
    """SIGSTOP ``pid`` now (as a loaded machine would leave it unscheduled); SIGCONT after ``seconds``."""
    os.kill(pid, signal.SIGSTOP)

    def resume() -> None:
        if seconds is not None:
            time.sleep(seconds)
            os.kill(pid, signal.SIGCONT)

    thread = threading.Thread(target=resume, daemon=True)
    thread.start()
    return thread


def test_a_worker_that_waits_for_the_cpu_is_not_timed_out(fast_config: SandboxConfig) -> None:
    # the call budget is CPU seconds of the worker: a worker left unscheduled for three times its
    # budget (a loaded machine) still answers, and the episode budget is charged its CPU time only
    source = program(step="n = 0\nfor i in range(2000):\n    n += i\nreturn str(n), 0.0, False, False, {}")
    with SandboxClient(fast_config) as client:
        client.load(source)
        budget = Budget(0.5, what="episode", wall_factor=fast_config.wall_factor)
        client.reset(0, budget)
        assert client.pid is not None
        resumer = _pause(client.pid, 3 * fast_config.call_timeout_s)
        started = time.monotonic()
        assert client.step("x", budget)[0] == str(sum(range(2000)))
        assert time.monotonic() - started >= 3 * fast_config.call_timeout_s
        resumer.join()
        assert budget.used < 0.5 and budget.wall_used >= 3 * fast_config.call_timeout_s


def test_a_stalled_worker_is_stopped_by_the_wall_clock_bound() -> None:
    config = SandboxConfig(call_timeout_s=0.5, wall_factor=3.0)
    with SandboxClient(config) as client:
        client.load(program())
        client.reset(0)
        pid = client.pid
        assert pid is not None
        _pause(pid, None)  # never resumed
        started = time.monotonic()
        with pytest.raises(SandboxTimeout, match=r"wall-clock bound of 1.5 s of step\(\) \(3x its CPU budget"):
            client.step("x")
        assert 1.5 <= time.monotonic() - started < 3.0
        assert not client.alive and wait_gone(pid)


def test_hash_seed_reaches_the_workers() -> None:
    source = program(reset="return str(hash('spade')), {}")

    def first_obs(seed: int) -> str:
        with SandboxClient(SandboxConfig(hash_seed=seed)) as client:
            client.load(source)
            return client.reset(0)[0]

    assert first_obs(1) == first_obs(1)
    assert first_obs(1) != first_obs(2)


def test_program_errors_keep_or_drop_the_worker_as_documented() -> None:
    source = program(step="if action == 'boom':\n    raise ValueError('no')\nreturn 'o', 0.5, False, False, {}")
    with SandboxClient() as client:
        client.load(source)
        client.reset(0)
        with pytest.raises(EnvRuntimeError, match="ValueError at line"):
            client.step("boom")
        assert client.alive  # an ordinary exception leaves the program usable
        assert client.step("ok")[1] == 0.5


def test_contract_is_checked_on_the_host_too() -> None:
    with SandboxClient() as client:
        client.load(program())
        client.reset(0)
        client.send("reset", {"seed": 0})
        sent = time.monotonic()  # a reset answer read as a step answer
        client._pending = ("step", sent, None, client._call_limits("step", sent, None))
        with pytest.raises(ContractError, match="must return"):
            client.receive()


def test_call_many_runs_workers_concurrently() -> None:
    busy = program(step="n = 0\nfor i in range(200000):\n    n += i\nreturn 'o', 0.0, False, False, {}")
    clients = [SandboxClient() for _ in range(4)]
    try:
        for client in clients:
            client.load(busy)
            client.reset(0)
        results = call_many(clients, "step", [{"action": "x"}] * 4)
        assert all(isinstance(r, tuple) and r[0] == "o" for r in results)
        clients[0].kill()
        results = call_many(clients, "step", [{"action": "x"}] * 4)
        assert isinstance(results[0], WorkerCrash) and all(isinstance(r, tuple) for r in results[1:])
    finally:
        for client in clients:
            client.kill()


def test_zygote_is_replaced_after_it_dies() -> None:
    from spade_gym.sandbox.client import Zygote

    with SandboxClient() as client:
        client.start()
    zygote = Zygote.get(None)
    zygote.process.kill()
    zygote.process.wait()
    with SandboxClient() as client:
        client.load(program())
        assert client.reset(3)[0] == "start 3"


def test_worker_dies_with_its_zygote() -> None:
    from spade_gym.sandbox.client import Zygote

    zygote = Zygote(hash_seed=12345)
    Zygote._instances[12345] = zygote
    client = SandboxClient(SandboxConfig(hash_seed=12345))
    try:
        client.start()
        pid = client.pid
        zygote.close()
        assert pid is not None and wait_gone(pid)
    finally:
        client.kill()
        Zygote._instances.pop(12345, None)


def test_send_has_a_deadline_when_the_worker_stops_reading(fast_config: SandboxConfig) -> None:
    with SandboxClient(fast_config) as client:
        client.load(program(step="while True:\n    pass"))
        client.reset(0)
        client.send("step", {"action": "x"})  # the worker is now stuck in step and reads nothing
        started = time.monotonic()
        with pytest.raises(SandboxTimeout, match="did not accept"):
            client.send("step", {"action": "y" * 500_000})  # larger than the pipe's buffer
        assert time.monotonic() - started < fast_config.call_timeout_s + 1.0
        assert not client.alive


def test_drop_root_can_be_required_only_where_it_applies() -> None:
    config = SandboxConfig(require_layers=("drop_root",))
    with SandboxClient(config) as client:
        if os.geteuid() == 0:
            assert client.start()["drop_root"] is True
        else:
            with pytest.raises(SandboxSetupError, match="drop_root"):
                client.start()
