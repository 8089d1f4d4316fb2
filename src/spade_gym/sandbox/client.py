"""Host side of the sandbox: start workers, call them with deadlines, turn failures into errors.

Deadlines are enforced from outside (SIGKILL of the worker's process group); responses are read as
size-capped frames and checked again against the output contract on this side.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import math
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any, NoReturn

from spade_gym.errors import (
    Category,
    ContractError,
    SandboxError,
    SandboxSetupError,
    SandboxTimeout,
    SpadeError,
    WorkerCrash,
    error_from_payload,
)
from spade_gym.sandbox.lockdown import LAYERS
from spade_gym.sandbox.protocol import (
    Limits,
    check_reset_result,
    check_spec,
    check_step_result,
    check_text,
    decode_body,
    encode_frame,
)

__all__ = ["SandboxConfig", "Budget", "ProgramSpec", "SandboxClient", "Zygote", "call_many"]

_HEADER_BYTES = 4
#: Default host-side cap on the actions of one episode (:attr:`SandboxConfig.max_turns`): above every
#: seed environment's own ``max_turns`` (the longest declares 160) and the 1000 of the longest valid test case,
#: far below the 100,000 a program may.
MAX_EPISODE_TURNS = 1000
#: Default UTF-8 bytes of observations and hints one episode may return (:attr:`SandboxConfig.max_episode_text_bytes`):
#: four observations of the largest size (1 MiB); a rollout of ``max_episodes`` episodes holds at most that many times it.
MAX_EPISODE_TEXT_BYTES = 4 << 20


@dataclass(frozen=True)
class SandboxConfig:
    """Limits and requirements of sandboxed workers.

    Attributes:
        call_timeout_s: CPU seconds the worker may spend on one call.
        start_timeout_s: deadline for a worker (and the first time its zygote) to start, seconds.
        episode_budget_s: CPU seconds the calls of one :class:`~spade_gym.env.SandboxedEnv`
            episode may spend in all.
        wall_factor: every CPU budget of ``s`` seconds also ends after ``wall_factor * s`` wall
            seconds, so machine load does not change a verdict but a stalled worker cannot hang.
        memory_bytes: address-space limit of a worker (``RLIMIT_AS``), bytes.
        cpu_seconds: CPU-time limit of a worker over its whole life (``RLIMIT_CPU``), seconds.
        max_print_bytes: ``print`` output allowed per call, bytes (more is ``OUTPUT_LIMIT``).
        max_action_chars: longest action passed to ``step``; longer ones are cut.
        recursion_limit: Python recursion limit in the worker.
        limits: sizes of observations, ``info`` and rewards (:class:`Limits`).
        hash_seed: ``PYTHONHASHSEED`` of the workers; ``None``: random per zygote.
        require_layers: :data:`~spade_gym.sandbox.lockdown.LAYERS` that must be active, else
            :class:`SandboxSetupError` (``drop_root`` is active only when the host runs as root).
        cpu_affinity: CPUs the workers are pinned to; ``None`` leaves them to the scheduler.
        max_turns: host-side cap on the actions of one :class:`~spade_gym.env.SandboxedEnv`
            episode, whatever ``max_turns`` the program declares (up to 100,000).
        max_episode_text_bytes: UTF-8 bytes of observations and hints one episode may return in
            all (what the host holds of it); more ends the episode as ``OUTPUT_LIMIT``.
    """

    call_timeout_s: float = 2.0
    start_timeout_s: float = 20.0
    episode_budget_s: float = 60.0
    wall_factor: float = 10.0
    memory_bytes: int = 1 << 30
    cpu_seconds: int = 600
    max_print_bytes: int = 64 << 10
    max_action_chars: int = 1 << 16
    recursion_limit: int = 1000
    limits: Limits = field(default_factory=Limits)
    hash_seed: int | None = None
    require_layers: tuple[str, ...] = ()
    cpu_affinity: tuple[int, ...] | None = None
    max_turns: int = MAX_EPISODE_TURNS
    max_episode_text_bytes: int = MAX_EPISODE_TEXT_BYTES

    def __post_init__(self) -> None:
        if isinstance(self.require_layers, str) or not isinstance(self.require_layers, (tuple, list)):
            raise TypeError(
                f"require_layers must be a tuple of layer names, e.g. ('seccomp',), not {self.require_layers!r}"
            )
        unknown = [name for name in self.require_layers if name not in LAYERS]
        if unknown:
            raise ValueError(f"unknown sandbox layer(s) {unknown}; known layers: {', '.join(LAYERS)}")
        for name in ("call_timeout_s", "start_timeout_s", "episode_budget_s"):
            value = getattr(self, name)
            if not (isinstance(value, (int, float)) and 0 < value < 1e6):
                raise ValueError(f"{name} must be a positive number of seconds below 1e6, got {value!r}")
        if not (isinstance(self.wall_factor, (int, float)) and 1 <= self.wall_factor <= 1000):
            raise ValueError(f"wall_factor must be a number in [1, 1000], got {self.wall_factor!r}")
        for name in (
            "memory_bytes",
            "cpu_seconds",
            "max_print_bytes",
            "max_action_chars",
            "recursion_limit",
            "max_turns",
            "max_episode_text_bytes",
        ):
            value = getattr(self, name)
            if not (isinstance(value, int) and value > 0):
                raise ValueError(f"{name} must be a positive int, got {value!r}")
        if self.hash_seed is not None and not 0 <= self.hash_seed <= 4294967295:
            raise ValueError(
                f"hash_seed must be None or an int in [0, 4294967295] (PYTHONHASHSEED), got {self.hash_seed!r}"
            )

    def worker_config(self) -> dict[str, Any]:
        """The JSON settings sent to a worker."""
        return {
            "memory_bytes": self.memory_bytes,
            "cpu_seconds": self.cpu_seconds,
            "max_print_bytes": self.max_print_bytes,
            "max_request_bytes": 4 * self.max_action_chars + self.limits.max_text_bytes + (1 << 20),
            "recursion_limit": self.recursion_limit,
            "limits": asdict(self.limits),
            "cpu_affinity": list(self.cpu_affinity) if self.cpu_affinity is not None else None,
        }

    @property
    def max_frame_bytes(self) -> int:
        """Largest response frame accepted, bytes (JSON escaping can expand text up to 6x)."""
        payload = 2 * self.limits.max_text_bytes + self.limits.max_info_bytes + self.max_print_bytes
        return 6 * payload + (1 << 16)


class Budget:
    """A total of worker CPU seconds that several calls draw on (an episode, a validation run).

    Args:
        seconds: the budget, CPU seconds.
        what: what it is the budget of, for messages ("episode", "validation").
        wall: the outer bound of ``wall_factor * seconds`` wall seconds counts time since creation
            (``True``) or only time spent in calls (``False``: thinking between steps is free).
    """

    def __init__(self, seconds: float, what: str = "episode", *, wall: bool = False, wall_factor: float = 10.0) -> None:
        self.seconds = seconds
        self.what = what
        self.wall = wall
        self.wall_seconds = seconds * wall_factor
        self.used = 0.0  # CPU seconds
        self.wall_used = 0.0  # wall seconds spent in calls
        self._started = time.monotonic()
        self._lock = threading.Lock()

    @property
    def remaining(self) -> float:
        """CPU seconds left (may be negative once exhausted)."""
        return self.seconds - self.used

    @property
    def wall_remaining(self) -> float:
        """Wall seconds left before the outer bound (may be negative)."""
        spent = time.monotonic() - self._started if self.wall else self.wall_used
        return self.wall_seconds - spent

    def exhausted(self) -> str | None:
        """``None`` while the budget lasts, else a sentence naming the limit that was reached."""
        if self.remaining <= 0:
            return f"the {self.what} CPU budget of {self.seconds:g} s is exhausted"
        if self.wall_remaining <= 0:
            return (
                f"the {self.what} wall-clock bound of {self.wall_seconds:g} s is exhausted "
                f"(after {self.used:.3g} of {self.seconds:g} CPU seconds)"
            )
        return None

    def charge(self, seconds: float, wall_seconds: float = 0.0) -> None:
        """Record CPU ``seconds`` and ``wall_seconds`` spent in a call (thread-safe)."""
        with self._lock:
            self.used += seconds
            self.wall_used += wall_seconds


class HostBudget:
    """CPU seconds the host's **own** threads may spend on one job (a validation, an audit, a
    novelty probe): decoding frames, hashing, the hint-leak check. Each thread working for the job
    calls :meth:`charge` (its first call sets its baseline); :attr:`used` sums over threads
    (``time.thread_time``, so other threads of the host, a trainer say, do not count).
    """

    def __init__(self, seconds: float, what: str) -> None:
        self.seconds = seconds
        self.what = what
        self.used = 0.0
        self._last: dict[int, float] = {}
        self._lock = threading.Lock()

    def charge(self) -> None:
        """Add the calling thread's CPU time since its last call (thread-safe)."""
        now, thread = time.thread_time(), threading.get_ident()
        with self._lock:
            last = self._last.get(thread)
            self._last[thread] = now
            if last is not None:
                self.used += max(now - last, 0.0)

    def exhausted(self) -> str | None:
        """Charge the calling thread; ``None`` while the budget lasts, else a sentence naming it."""
        self.charge()
        if self.used <= self.seconds:
            return None
        return f"the host's own work on the {self.what} used {self.used:.2f} s of CPU time; at most {self.seconds:g} s"


def _worker_cpu_seconds(pid: int | None) -> float | None:
    """CPU seconds (user + system) process ``pid`` has used, from ``/proc``; ``None`` if unreadable."""
    if pid is None:
        return None
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / _CLOCK_TICKS  # utime, stime (fields 14 and 15)
    except (OSError, IndexError, ValueError):
        return None


_CLOCK_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


@dataclass(frozen=True)
class ProgramSpec:
    """What a loaded program declares: ``name`` (CamelCase), ``setting``, ``max_turns``, ``tools``
    (OpenAI-style function schemas) and ``description`` (the ``Env`` docstring, whitespace folded)."""

    name: str
    setting: str
    max_turns: int
    tools: list[dict[str, Any]]
    description: str


class Zygote:
    """A clean interpreter that forks workers (:mod:`spade_gym.sandbox.zygote`), one per
    ``PYTHONHASHSEED`` and host process: use :meth:`get`. ``SandboxSetupError`` if it does not start."""

    _instances: dict[int | None, Zygote] = {}
    _class_lock = threading.Lock()

    def __init__(self, hash_seed: int | None, start_timeout_s: float = 20.0) -> None:
        self.owner_pid = os.getpid()
        self.lock = threading.Lock()
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        config = {
            "sys_path": [p for p in sys.path if p and os.path.isdir(p)],
            "package_dir": str(Path(__file__).resolve().parent.parent),
            "control_fd": child.fileno(),
        }
        env = {
            "PATH": os.defpath,
            "LC_ALL": "C.UTF-8",
            "PYTHONDONTWRITEBYTECODE": "1",
            "PYTHONHASHSEED": str(hash_seed if hash_seed is not None else int.from_bytes(os.urandom(4), "big")),
        }
        self.process = subprocess.Popen(  # noqa: S603 - our own interpreter and script
            [sys.executable, "-s", "-P", str(Path(__file__).with_name("zygote.py")), json.dumps(config)],
            env=env,
            pass_fds=(child.fileno(),),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            cwd="/",
            close_fds=True,
        )
        child.close()
        self.socket = parent
        self.socket.settimeout(start_timeout_s)
        try:
            ready = self.socket.recv(1 << 12)
        except (TimeoutError, OSError) as exc:
            self.close()
            raise SandboxSetupError(f"the sandbox zygote did not start within {start_timeout_s} s: {exc}") from None
        if not ready:
            code = self.process.wait(timeout=5)
            raise SandboxSetupError(f"the sandbox zygote exited during start-up (exit code {code})")

    @classmethod
    def get(cls, hash_seed: int | None, start_timeout_s: float = 20.0) -> Zygote:
        """Return the live zygote for ``hash_seed`` in this process, starting one if needed."""
        with cls._class_lock:
            zygote = cls._instances.get(hash_seed)
            if zygote is None or zygote.owner_pid != os.getpid() or zygote.process.poll() is not None:
                if zygote is not None and zygote.owner_pid == os.getpid():
                    zygote.close()
                zygote = cls(hash_seed, start_timeout_s)
                cls._instances[hash_seed] = zygote
            return zygote

    def fork(self, read_fd: int, write_fd: int, config: dict[str, Any], timeout_s: float) -> int:
        """Fork a worker serving on ``read_fd``/``write_fd``; its pid (``SandboxSetupError`` on no answer)."""
        with self.lock:
            self.socket.settimeout(timeout_s)
            try:
                socket.send_fds(self.socket, [json.dumps({"config": config}).encode()], [read_fd, write_fd])
                reply = self.socket.recv(1 << 12)
            except (TimeoutError, OSError) as exc:
                raise SandboxSetupError(f"the sandbox zygote did not fork a worker: {exc}") from None
        try:
            return int(json.loads(reply)["pid"])
        except (ValueError, KeyError, TypeError):
            raise SandboxSetupError(f"the sandbox zygote sent a malformed reply: {reply[:200]!r}") from None

    def close(self) -> None:
        """Stop the zygote (its workers receive SIGKILL through their parent-death signal)."""
        try:
            self.socket.close()
        finally:
            if self.process.poll() is None:
                self.process.kill()
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=5)

    @classmethod
    def close_all(cls) -> None:
        """Stop every zygote this process started."""
        with cls._class_lock:
            for zygote in cls._instances.values():
                if zygote.owner_pid == os.getpid():
                    zygote.close()
            cls._instances.clear()

    @classmethod
    def forget_in_child(cls) -> None:
        """After a fork of the host, the child must not share the parent's zygote control socket:
        forget the parent's zygotes (closing only the child's copy of each socket)."""
        for zygote in cls._instances.values():
            zygote.socket.close()  # the child's copy only; the parent's stays open
            zygote.process.returncode = 0  # owned by the parent: never wait for it here
        cls._instances.clear()
        cls._class_lock = threading.Lock()


atexit.register(Zygote.close_all)
os.register_at_fork(after_in_child=Zygote.forget_in_child)


class SandboxClient:
    """One worker process running one environment program instance; not thread-safe.

    Args:
        config: limits and requirements (default ``SandboxConfig()``).

    Attributes:
        layers: the worker's protection layers, ``{name: True | False | None}``.
        spec: the loaded program's :class:`ProgramSpec` (after :meth:`load`).
        last_printed: what the program printed in the last call (untrusted: show it escaped).
        last_cpu_s: CPU seconds of the last call; ``cpu_used_s``: of the worker in all.

    A program's fault raises a :class:`~spade_gym.errors.SandboxError` subclass; after a timeout,
    crash, violation or memory error the worker is gone (:attr:`alive`) and :meth:`load` must run again.
    """

    def __init__(self, config: SandboxConfig | None = None) -> None:
        self.config = config or SandboxConfig()
        self.layers: dict[str, bool | None] = {}
        self.spec: ProgramSpec | None = None
        self.last_printed = ""
        self.last_cpu_s = 0.0
        self.cpu_used_s = 0.0
        self.pid: int | None = None
        self._pidfd: int | None = None
        self._owner_pid = os.getpid()
        self._read_fd: int | None = None
        self._write_fd: int | None = None
        self._pending: tuple[str, float, Budget | None, _CallLimits] | None = None
        self._inbuf = bytearray()
        self._poller: Any = None

    # -- life cycle ---------------------------------------------------------------------------------
    @property
    def alive(self) -> bool:
        """Whether a worker is running and ready for calls."""
        return self.pid is not None

    def start(self) -> dict[str, bool | None]:
        """Fork and lock down a fresh worker (killing any previous one); return its layers.
        ``SandboxSetupError``: no worker could be started, or a required layer is inactive."""
        self.kill()
        zygote = Zygote.get(self.config.hash_seed, self.config.start_timeout_s)
        request_r, request_w = os.pipe()
        response_r, response_w = os.pipe()
        try:
            self.pid = zygote.fork(request_r, response_w, self.config.worker_config(), self.config.start_timeout_s)
        except SandboxSetupError:
            for fd in (request_r, request_w, response_r, response_w):
                os.close(fd)
            raise
        finally:
            if self.pid is not None:
                os.close(request_r)
                os.close(response_w)
        self._read_fd, self._write_fd = response_r, request_w
        os.set_blocking(request_w, False)  # writes wait with a deadline, never forever
        self._inbuf = bytearray()
        self._poller = select.poll()
        self._poller.register(response_r, select.POLLIN | select.POLLHUP | select.POLLERR)
        self.cpu_used_s = 0.0
        try:
            self._pidfd = os.pidfd_open(self.pid)  # kill by pidfd: immune to pid reuse
        except (OSError, AttributeError):
            self._pidfd = None
        try:
            now = time.monotonic()
            limit = self.config.start_timeout_s
            hello = self._read_response(_CallLimits(now, math.inf, now + limit, "start", self.config))
        except SandboxError as exc:
            raise self._killed(SandboxSetupError(f"the sandbox worker failed to start: {exc.message}")) from None
        layers = hello.get("layers") if isinstance(hello, dict) else None
        if not isinstance(layers, dict):
            raise self._killed(SandboxSetupError("the sandbox worker sent a malformed greeting"))
        self.layers = {name: layers.get(name) for name in LAYERS}
        missing = [name for name in self.config.require_layers if self.layers.get(name) is not True]
        if missing:
            self.kill()
            raise SandboxSetupError(
                f"required sandbox layer(s) not active on this machine: {', '.join(missing)} "
                f"(active: {', '.join(n for n, v in self.layers.items() if v) or 'none'})"
            )
        return self.layers

    def kill(self) -> None:
        """SIGKILL the worker's process group and close the pipes (only the pipes in a forked host)."""
        if self.pid is not None and os.getpid() == self._owner_pid:
            with contextlib.suppress(OSError):
                if self._pidfd is not None:
                    signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)
                else:
                    os.killpg(self.pid, signal.SIGKILL)
        for fd in (self._read_fd, self._write_fd, self._pidfd):
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self.pid = self._read_fd = self._write_fd = self._pidfd = None
        self._pending = None

    close = kill

    def __enter__(self) -> SandboxClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # interpreter shutdown
            self.kill()

    # -- calls ----------------------------------------------------------------------------------
    def load(self, source: str) -> ProgramSpec:
        """Start a fresh worker, load the program ``source`` in it, and return its :class:`ProgramSpec`."""
        self.start()
        value = self.call("load", {"source": source})
        spec = check_spec(value, self.config.limits)
        self.spec = ProgramSpec(**{f.name: spec[f.name] for f in fields(ProgramSpec)})
        return self.spec

    def reset(self, seed: int, budget: Budget | None = None) -> tuple[str, dict[str, Any]]:
        """Call ``Env.reset(seed)``; return ``(observation, info)``. ``ValueError``: a seed outside int64."""
        if isinstance(seed, bool) or not isinstance(seed, int) or not -(2**63) <= seed < 2**63:
            raise ValueError(
                f"seed must be an int in [-2**63, 2**63), got {seed if isinstance(seed, int) else type(seed).__name__}"
            )
        return self.call("reset", {"seed": int(seed)}, budget)

    def step(self, action: str, budget: Budget | None = None) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Call ``Env.step(action)``; return ``(observation, reward, terminated, truncated, info)``."""
        return self.call("step", {"action": action}, budget)

    def hint(self, budget: Budget | None = None) -> str:
        """Call ``Env.hint()``; return the privileged hint text."""
        return self.call("hint", None, budget)

    def oracle(self, budget: Budget | None = None) -> str:
        """Call ``Env.oracle()``; return the action a perfect agent takes now."""
        return self.call("oracle", None, budget)

    def call(self, op: str, args: dict[str, Any] | None = None, budget: Budget | None = None) -> Any:
        """Send one request and wait for its answer (see :meth:`send` and :meth:`receive`)."""
        self.send(op, args, budget)
        return self.receive()

    def _check_value(self, op: str, value: Any) -> Any:
        """The output contract, checked again on this side of the pipe."""
        limits = self.config.limits
        try:
            if op == "reset":
                return check_reset_result(value, limits, seq=list)
            if op == "step":
                return check_step_result(value, limits, seq=list)
            if op in ("hint", "oracle"):
                return check_text(value, f"{op}()", limits)
            return value
        except SandboxError:
            self.kill()
            raise

    def send(self, op: str, args: dict[str, Any] | None = None, budget: Budget | None = None) -> None:
        """Send a request without waiting (pair with :meth:`receive`). ``WorkerCrash``: no worker is
        running or the pipe is broken; ``SandboxTimeout``: ``budget`` is already exhausted."""
        if self._write_fd is None:
            raise WorkerCrash("the sandbox worker is not running; load the program again")
        if budget is not None and (why := budget.exhausted()):
            raise SandboxTimeout(why)
        sent = time.monotonic()
        limits = self._call_limits(op, sent, budget)
        try:
            self._write_within(encode_frame({"op": op, "args": args or {}}), limits, op)
        except BaseException:  # interrupted half-way (KeyboardInterrupt, a signal): the stream is unusable
            self.kill()
            raise
        self._pending = (op, sent, budget, limits)

    def _call_limits(self, op: str, sent: float, budget: Budget | None) -> _CallLimits:
        """The CPU budget and wall bound of one call: the per-call ones, or what ``budget`` has left."""
        config = self.config
        cpu_limit, wall_limit = config.call_timeout_s, config.call_timeout_s * config.wall_factor
        cpu_by = wall_by = None
        if budget is not None:
            if budget.remaining < cpu_limit:
                cpu_limit, cpu_by = max(budget.remaining, 0.0), budget
            if budget.wall_remaining < wall_limit:
                wall_limit, wall_by = max(budget.wall_remaining, 0.0), budget
        return _CallLimits(sent, cpu_limit, sent + wall_limit, op, config, cpu_by, wall_by)

    def _write_within(self, frame: bytes, limits: _CallLimits, op: str) -> None:
        fd = self._write_fd
        assert fd is not None
        view = memoryview(frame)
        poller = None
        while True:
            try:
                view = view[os.write(fd, view) :]
            except BlockingIOError:
                pass
            except OSError as exc:
                raise self._killed(WorkerCrash(f"the sandbox worker is gone ({exc.strerror or exc})")) from None
            if not view:
                return
            if poller is None:  # the pipe is full: wait for room, within the call's limits
                poller = select.poll()
                poller.register(fd, select.POLLOUT)
            try:
                self._wait(poller, limits)
            except SandboxTimeout as exc:
                raise SandboxTimeout(f"the sandbox worker did not accept the {op}() request: {exc.message}") from None

    def receive(self) -> Any:
        """The decoded answer to the last :meth:`send`, within its CPU budget and wall bound.
        ``SandboxTimeout``: a limit passed (the message names which; the worker was killed);
        ``WorkerCrash``: the worker died or broke the protocol; another ``SandboxError`` subclass:
        a fault the worker reported."""
        if self._pending is None:
            raise WorkerCrash("receive() without a request in flight")
        op, sent, budget, limits = self._pending  # the limits made when it was sent
        self._pending = None
        config = self.config
        self.last_cpu_s = 0.0
        try:
            response = self._read_response(limits)
        except SpadeError:
            if budget is not None:
                budget.charge(self.last_cpu_s, time.monotonic() - sent)
            raise
        except BaseException:  # interrupted (KeyboardInterrupt, a signal): a late answer would desync
            self.kill()
            raise
        if not isinstance(response, dict) or not isinstance(response.get("ok"), bool):
            raise self._killed(WorkerCrash("the sandbox worker sent a malformed response"))
        printed = response.get("printed")
        self.last_printed = printed[: config.max_print_bytes] if isinstance(printed, str) else ""
        cpu = response.get("cpu_s")
        self.last_cpu_s = float(cpu) if isinstance(cpu, (int, float)) and cpu >= 0 else 0.0
        total = response.get("cpu_total_s")
        self.cpu_used_s = float(total) if isinstance(total, (int, float)) else self.cpu_used_s + self.last_cpu_s
        if budget is not None:
            budget.charge(self.last_cpu_s, time.monotonic() - sent)
        if response["ok"]:
            return self._check_value(op, response.get("value"))
        error = error_from_payload(response.get("error"))
        if error.category in (Category.SANDBOX_DENIED, Category.MEMORY_LIMIT, Category.WORKER_CRASH) or op == "load":
            self.kill()  # the program's state can no longer be trusted
        raise error

    def _read_response(self, limits: _CallLimits) -> Any:
        assert self._read_fd is not None
        header = self._read_exact(_HEADER_BYTES, limits)
        length = int.from_bytes(header, "big")
        if length > self.config.max_frame_bytes:
            self.kill()
            raise ContractError(
                f"the sandbox worker sent a {length}-byte frame; the cap is {self.config.max_frame_bytes}",
                category=Category.OUTPUT_LIMIT,
            )
        body = self._read_exact(length, limits)
        if self._inbuf:  # one request, one frame: anything more breaks the protocol
            raise self._killed(WorkerCrash("the sandbox worker sent more than one frame for one request"))
        try:
            return decode_body(body)
        except WorkerCrash:
            self.kill()
            raise

    def _wait(self, poller: Any, limits: _CallLimits) -> None:
        """Wait until ``poller`` reports the pipe ready, or raise once a limit passes. ``/proc`` is read
        only after as many wall seconds as the CPU budget (a single-threaded worker cannot use more)."""
        cpu_start = self.cpu_used_s  # the worker's CPU total at its last answer; it idles in between
        while True:
            now = time.monotonic()
            wall_left = limits.wall_deadline - now
            used = now - limits.sent  # an upper bound of the worker's CPU seconds in this call
            if used >= limits.cpu_limit:
                measured = _worker_cpu_seconds(self.pid)
                if measured is not None:
                    used = measured - cpu_start
                if used >= limits.cpu_limit:
                    self._timed_out(limits.cpu_what(), used)
            if wall_left <= 0:
                self._timed_out(f"{limits.wall_what()} after {min(used, limits.cpu_limit):.3g} CPU seconds", used)
            if poller.poll(min(wall_left, max(limits.cpu_limit - used, 0.02)) * 1000):
                return

    def _killed(self, error: SpadeError) -> SpadeError:
        self.kill()
        return error

    def _timed_out(self, what: str, cpu_used: float) -> NoReturn:
        self.last_cpu_s = max(cpu_used, 0.0)
        raise self._killed(SandboxTimeout(f"the program ran past {what}; the worker was killed"))

    def _read_exact(self, n: int, limits: _CallLimits) -> bytes:
        fd, buffer = self._read_fd, self._inbuf
        assert fd is not None
        while len(buffer) < n:
            self._wait(self._poller, limits)
            try:
                chunk = os.read(fd, min(max(n - len(buffer), 1 << 16), 1 << 20))
            except OSError as exc:
                chunk, reason = b"", exc.strerror
            else:
                reason = "it exited or was killed (e.g. out of memory or CPU time)"
            if not chunk:
                raise self._killed(WorkerCrash(f"the sandbox worker died: {reason}"))
            buffer += chunk
        data = bytes(buffer[:n])
        del buffer[:n]
        return data


@dataclass(frozen=True)
class _CallLimits:
    """The limits of one wait; ``cpu_by``/``wall_by``: the :class:`Budget` that set each, if any."""

    sent: float
    cpu_limit: float
    wall_deadline: float
    op: str
    config: SandboxConfig
    cpu_by: Budget | None = None
    wall_by: Budget | None = None

    def cpu_what(self) -> str:
        if self.cpu_by is not None:
            return f"the {self.cpu_by.what} CPU budget of {self.cpu_by.seconds:g} s during {self.op}()"
        return f"the CPU budget of {self.config.call_timeout_s:g} s of {self.op}()"

    def wall_what(self) -> str:
        if self.op == "start":
            return f"the {self.config.start_timeout_s:g} s deadline of the worker's start"
        if self.wall_by is not None:
            return f"the {self.wall_by.what} wall-clock bound of {self.wall_by.wall_seconds:g} s during {self.op}()"
        c = self.config
        return (
            f"the wall-clock bound of {c.call_timeout_s * c.wall_factor:g} s of {self.op}() ({c.wall_factor:g}x its "
            "CPU budget; the machine may be overloaded, or the worker stalled)"
        )


def call_many(
    clients: list[SandboxClient],
    op: str,
    args: list[dict[str, Any] | None],
    budgets: list[Budget | None] | None = None,
) -> list[Any | SpadeError]:
    """Run ``op`` on many idle workers at once (one ``args`` and optional budget per client); per
    client the decoded value, or the :class:`SpadeError` it raised (not raised)."""
    if len(args) != len(clients) or (budgets is not None and len(budgets) != len(clients)):
        raise ValueError("call_many needs one args entry (and one budget, if given) per client")
    budgets = budgets or [None] * len(clients)
    results: list[Any | SpadeError] = [None] * len(clients)
    for i, client in enumerate(clients):
        try:
            client.send(op, args[i], budgets[i])
        except SpadeError as exc:
            results[i] = exc
    for i, client in enumerate(clients):
        if results[i] is None:  # sent
            try:
                results[i] = client.receive()
            except SpadeError as exc:
                results[i] = exc
    return results
