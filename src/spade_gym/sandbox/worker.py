"""The worker: runs one environment program instance behind the wire protocol.

Forked from the zygote, a worker locks itself down (:mod:`spade_gym.sandbox.lockdown`), sends a
``hello`` frame naming its active layers, then answers ``load``, ``reset``, ``step``, ``hint`` and
``oracle`` requests until its pipe closes, each with ``{"ok": true, "value", "printed", "cpu_s"}``
or ``{"ok": false, "error": {"type", "category", "message", "traceback"}, ...}``. Exceptions
become text here and are never shipped as objects.
"""

from __future__ import annotations

import linecache
import os
import resource
import sys
import time
import traceback
import unicodedata  # noqa: F401 - the parser imports it for non-ASCII names; no imports after lock-down
from typing import Any

from spade_gym.errors import Category, SandboxError
from spade_gym.sandbox import lockdown
from spade_gym.sandbox.policy import PROGRAM_FILENAME, GuardViolation, ProgramRuntime, compile_program
from spade_gym.sandbox.protocol import (
    Limits,
    check_reset_result,
    check_spec,
    check_step_result,
    check_text,
    encode_frame,
    read_frame_blocking,
    write_frame,
)

__all__ = ["serve", "ProgramHost", "WorkerConfig"]

_MAX_MESSAGE = 4000
_MAX_TRACEBACK = 6000


class _ContractFailure(Exception):
    def __init__(self, error: dict[str, str]) -> None:
        super().__init__(error["message"])
        self.error = error


def _clean(text: str) -> str:
    """``text`` as valid UTF-8 (lone surrogates replaced), so a response always serialises."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _error(type_name: str, category: str, message: str, tb: str = "") -> dict[str, str]:
    message, tb = _clean(message), _clean(tb)
    return {
        "type": type_name,
        "category": category,
        "message": message[:_MAX_MESSAGE],
        "traceback": tb[-_MAX_TRACEBACK:],
    }


def _safe_text(fn: Any, fallback: str) -> str:
    try:
        text = fn()
        return text if type(text) is str else fallback
    except BaseException:  # noqa: BLE001 - a program's __str__ may raise anything
        return fallback


def _program_frames(exc: BaseException) -> traceback.StackSummary:
    """The program's frames of ``exc``'s traceback (source cached: no file is read)."""
    frames = traceback.walk_tb(exc.__traceback__)
    return traceback.StackSummary.extract((f, n) for f, n in frames if f.f_code.co_filename == PROGRAM_FILENAME)


def _program_traceback(exc: BaseException) -> str:
    lines = traceback.format_list(_program_frames(exc))
    head = _safe_text(lambda: f"{type(exc).__name__}: {exc}", type(exc).__name__)
    return "".join(lines) + head[:_MAX_MESSAGE]


def _program_line(exc: BaseException) -> int | None:
    frames = _program_frames(exc)
    return frames[-1].lineno if frames else None


def _process_cpu_seconds() -> float:
    """CPU seconds this process has used so far (what ``RLIMIT_CPU`` counts)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class WorkerConfig:
    """Plain settings a worker receives from the host (a JSON object)."""

    def __init__(self, raw: dict[str, Any]) -> None:
        self.memory_bytes = int(raw.get("memory_bytes", 1 << 30))
        self.cpu_seconds = int(raw.get("cpu_seconds", 600))
        self.max_print_bytes = int(raw.get("max_print_bytes", 64 << 10))
        self.max_request_bytes = int(raw.get("max_request_bytes", 8 << 20))
        self.recursion_limit = int(raw.get("recursion_limit", 1000))
        self.limits = Limits(**raw.get("limits", {}))
        self.cpu_affinity = raw.get("cpu_affinity")


class ProgramHost:
    """One program instance and the calls on it; usable in-process (tests, benchmarks) too."""

    def __init__(self, max_print_bytes: int = 64 << 10, limits: Limits | None = None) -> None:
        self.runtime = ProgramRuntime(max_print_bytes=max_print_bytes)
        self.limits = limits or Limits()
        self.env: Any = None

    def handle(self, op: str, args: dict[str, Any]) -> dict[str, Any]:
        """Run one request and return the response dict (never raises for program faults)."""
        runtime = self.runtime
        runtime.begin_call()
        start = time.thread_time()  # precise; process_time() reads 0 for short calls under RLIMIT_CPU
        value = error = None
        try:
            value = self._dispatch(op, args)
        except _ContractFailure as failure:
            error = failure.error
        except GuardViolation as exc:
            if runtime.violation is None:  # raised by program code, not by a guard: a forgery
                message = f"the program raised a sandbox signal itself at line {_program_line(exc)}"
                error = _error("EnvRuntimeError", Category.ENV_EXCEPTION, message)
        except MemoryError:
            error = _error("ResourceLimitExceeded", Category.MEMORY_LIMIT, "the program ran out of memory")
        except RecursionError as exc:
            message = f"RecursionError: maximum recursion depth exceeded (line {_program_line(exc)})"
            error = _error("EnvRuntimeError", Category.ENV_EXCEPTION, message, _program_traceback(exc))
        except BaseException as exc:  # noqa: BLE001 - SystemExit, KeyboardInterrupt included
            raised = exc
            message = _safe_text(lambda: str(raised), "")[:_MAX_MESSAGE]
            line = _program_line(exc)
            where = f" at line {line}" if line else ""
            message = f"{type(exc).__name__}{where}: {message}" if message else f"{type(exc).__name__}{where}"
            error = _error("EnvRuntimeError", Category.ENV_EXCEPTION, message, _program_traceback(exc))
        violation = runtime.violation
        if violation is not None:  # reported even when the program swallowed it
            type_name = "ResourceLimitExceeded" if violation.category == Category.OUTPUT_LIMIT else "SandboxViolation"
            line = _program_line(violation)
            where = f"line {line}: " if line else ""
            value, error = None, _error(type_name, violation.category, where + violation.message)
        response: dict[str, Any] = {
            "printed": _clean(runtime.printed()),
            "cpu_s": round(time.thread_time() - start, 6),
            "cpu_total_s": round(_process_cpu_seconds(), 6),
        }
        response.update({"ok": True, "value": value} if error is None else {"ok": False, "error": error})
        return response

    def _dispatch(self, op: str, args: dict[str, Any]) -> Any:
        if op == "load":
            return self._load(args["source"])
        if op == "probe":
            return probe_layers()
        if self.env is None:
            raise _ContractFailure(_error("WorkerCrash", Category.WORKER_CRASH, f"{op} before load"))
        if op == "reset":
            seed = args["seed"]
            return list(self._checked(lambda: check_reset_result(self.env.reset(seed), self.limits)))
        if op == "step":
            action = args["action"]
            return list(self._checked(lambda: check_step_result(self.env.step(action), self.limits)))
        if op in ("hint", "oracle"):
            return self._checked(lambda: check_text(getattr(self.env, op)(), f"{op}()", self.limits))
        raise _ContractFailure(_error("WorkerCrash", Category.WORKER_CRASH, f"unknown request {op!r}"))

    def _checked(self, call: Any) -> Any:
        try:
            return call()
        except SandboxError as exc:  # raised by the contract checks, not by the program
            raise _ContractFailure(_error(type(exc).__name__, exc.category, exc.message)) from None

    def _load(self, source: str) -> dict[str, Any]:
        code, errors = compile_program(source)
        if code is None:
            raise _ContractFailure(
                _error(
                    "ProgramError", Category.COMPILE_REJECTED, "\n".join(f"restricted compiler: {e}" for e in errors)
                )
            )
        linecache.cache[PROGRAM_FILENAME] = (len(source), None, source.splitlines(True), PROGRAM_FILENAME)
        namespace = self.runtime.globals
        exec(code, namespace)  # noqa: S102 - restricted code, guarded globals
        cls = namespace.get("Env")
        if not isinstance(cls, type) or cls not in self.runtime.program_classes:
            message = "the module must define 'class Env' (a class statement)"
            raise _ContractFailure(_error("ProgramError", Category.COMPILE_REJECTED, message))
        self.env = cls()
        spec = {
            "name": getattr(cls, "name", None),
            "setting": getattr(cls, "setting", None),
            "max_turns": getattr(cls, "max_turns", None),
            "tools": getattr(cls, "tools", []),
            "description": " ".join((cls.__doc__ or "").split()),
        }
        return self._checked(lambda: check_spec(spec, self.limits))


def probe_layers() -> dict[str, str]:
    """Try, from worker code, what the OS layers must stop: ``{attempt: "denied: <error>" | "ALLOWED"}``.

    Used by the tests and ``spade doctor`` to show that the layers hold, not merely were requested.
    """
    import resource
    import socket

    results: dict[str, str] = {}

    def attempt(name: str, fn: Any) -> None:
        try:
            fn()
        except BaseException as exc:  # noqa: BLE001
            results[name] = f"denied: {type(exc).__name__}: {exc}"[:200]
        else:
            results[name] = "ALLOWED"

    def fork() -> None:
        pid = os.fork()
        if pid == 0:
            os._exit(0)

    def write_file() -> None:
        fd = os.open("/tmp/spade-probe-write", os.O_WRONLY | os.O_CREAT, 0o600)
        os.close(fd)
        os.unlink("/tmp/spade-probe-write")

    attempt("socket", lambda: socket.socket(socket.AF_INET, socket.SOCK_STREAM).close())
    attempt("fork", fork)
    attempt("exec", lambda: os.execv("/bin/true", ["/bin/true"]))
    attempt("write_file", write_file)
    attempt("write_stdout", lambda: os.write(1, b"x"))
    attempt("kill_parent", lambda: os.kill(os.getppid(), 0))
    attempt("read_file", lambda: os.close(os.open("/etc/hostname", os.O_RDONLY)))
    attempt("read_proc", lambda: os.close(os.open(f"/proc/{os.getppid()}/environ", os.O_RDONLY)))
    attempt("renice_parent", lambda: os.setpriority(os.PRIO_PROCESS, os.getppid(), 19))
    attempt("prlimit_parent", lambda: resource.prlimit(os.getppid(), resource.RLIMIT_NOFILE))
    return results


def serve(read_fd: int, write_fd: int, raw_config: dict[str, Any]) -> None:
    """Lock this process (the zygote's new child) down and serve until the pipe closes; then exit."""
    config = WorkerConfig(raw_config)
    lockdown.set_parent_death_signal()
    try:  # the zygote may have inherited a pinned host's affinity: unpinned means every CPU
        os.sched_setaffinity(0, config.cpu_affinity or range(os.cpu_count() or 1))
    except OSError:
        pass
    read_fd, write_fd = lockdown.move_protocol_fds(read_fd, write_fd)
    layers = lockdown.lock_down(config.memory_bytes, config.cpu_seconds, read_fd, write_fd)
    sys.setrecursionlimit(config.recursion_limit)
    host = ProgramHost(config.max_print_bytes, config.limits)
    write_frame(write_fd, encode_frame({"hello": True, "layers": layers}))
    while True:
        try:
            request = read_frame_blocking(read_fd, config.max_request_bytes)
        except (EOFError, OSError, ValueError):
            break
        if not isinstance(request, dict) or not isinstance(request.get("op"), str):
            break
        response = host.handle(request["op"], request.get("args") or {})
        try:
            frame = encode_frame(response)
        except Exception as exc:  # noqa: BLE001 - any value the program returned that JSON cannot carry
            message = f"response not serialisable ({type(exc).__name__}): {exc}"[:300]
            error = _error("ContractError", Category.PROTOCOL_ERROR, message)
            frame = encode_frame({"ok": False, "printed": "", "cpu_s": 0.0, "error": error})
        write_frame(write_fd, frame)
    os._exit(0)
