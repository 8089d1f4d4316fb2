"""The Ray backend of :func:`spade_gym.executor.make_executor` (the ``ray`` extra, imported lazily).

Validation runs as Ray tasks, retried ``max_retries`` times when a worker dies, then reported as
``WORKER_CRASH``. Environments live in a few host actors (one per node by default) that step many
sandboxes in parallel threads; a host that dies ends its episodes with ``WORKER_CRASH``, as a crashed
sandbox does. See docs/integrations.md, "Ray: scaling out".
"""

from __future__ import annotations

import contextlib
import itertools
import os
import socket
import threading
import warnings
from collections.abc import Sequence
from functools import partial
from typing import Any

from spade_gym import errors
from spade_gym.errors import Category, SpadeError, WorkerCrash, first_line, require
from spade_gym.program import EnvProgram
from spade_gym.sandbox import SandboxConfig
from spade_gym.validation import CHECKS, CheckResult, ValidationConfig, ValidationReport

__all__ = ["RayEnv", "RayExecutor", "crash_report"]

_FEATURE = "the Ray executor (spade_gym.ray_executor)"


def _ray() -> Any:
    return require("ray", "ray", _FEATURE)


def _validate_source(source: str, origin: str, config: ValidationConfig) -> ValidationReport:
    """The body of a validation task (runs on a Ray worker)."""
    from spade_gym.validation import validate

    return validate(EnvProgram(source, origin=origin), config)


def crash_report(program: EnvProgram, config: ValidationConfig, message: str) -> ValidationReport:
    """A rejected ``WORKER_CRASH`` report for a program whose validation died with its worker: its
    ``load`` check fails with ``message``, the later checks are not run."""
    checks = [CheckResult(name) for name in CHECKS]
    load = next(c for c in checks if c.name == "load")
    load.passed, load.category, load.message = False, Category.WORKER_CRASH, message
    return ValidationReport(
        program_id=program.id,
        accepted=False,
        category=Category.WORKER_CRASH,
        checks=checks,
        seeds=list(config.seeds),
        config=config.to_dict(),
    )


class _EnvHost:
    """A Ray actor holding sandboxed environments by integer key, stepped in parallel threads."""

    def __init__(self) -> None:
        self.envs: dict[int, Any] = {}
        self.keys = itertools.count()
        self.lock = threading.Lock()

    def open(self, spec: Any) -> tuple[bool, Any]:
        from spade_gym.agent import error_record, open_playable_env

        try:
            env = open_playable_env(spec)
        except Exception as exc:  # noqa: BLE001 - reported to the driver, which raises it there
            return False, error_record(exc)
        with self.lock:
            key = next(self.keys)
            self.envs[key] = env
        attributes = {name: getattr(env, name) for name in ("name", "setting", "max_turns", "tools", "description")}
        return True, (key, attributes)

    def call(self, key: int, method: str, kwargs: dict[str, Any]) -> tuple[bool, Any]:
        env = self.envs[key]
        try:
            return True, getattr(env, method)(**kwargs)
        except Exception as exc:  # noqa: BLE001 - reported to the driver, which raises it there
            from spade_gym.agent import error_record

            return False, error_record(exc)

    def close(self, key: int) -> None:
        with self.lock:
            env = self.envs.pop(key, None)
        if env is not None:
            env.close()


def _raise(record: dict[str, Any]) -> None:
    cls = getattr(errors, str(record.get("type")), None)
    if isinstance(cls, type) and issubclass(cls, SpadeError):
        raise cls(
            str(record.get("message", "")), category=record.get("category"), traceback=record.get("traceback", "")
        )
    raise SpadeError(
        f"{record.get('type')}: {record.get('message', '')}", category=record.get("category") or Category.ENV_EXCEPTION
    )


class RayEnv:
    """An environment in a Ray actor, with the :class:`~spade_gym.SandboxedEnv` interface that rollouts use.

    Raises:
        SpadeError: the program cannot be loaded (the same error as locally), or the host actor
            died (:class:`~spade_gym.WorkerCrash`).
    """

    def __init__(self, host: Any, spec: Any) -> None:
        self._ray, self._host = _ray(), host
        self._key: int | None = None
        self._pending: tuple[str, Any] | None = None
        self._last_obs = ""
        self._key, attributes = self._get(host.open.remote(spec))
        self.name: str = attributes["name"]
        self.setting: str = attributes["setting"]
        self.max_turns: int = attributes["max_turns"]
        self.tools: list[dict[str, Any]] = attributes["tools"]
        self.description: str = attributes["description"]

    def _get(self, ref: Any) -> Any:
        ray = self._ray
        try:
            ok, value = ray.get(ref)
        except ray.exceptions.RayActorError as exc:
            raise WorkerCrash(f"the Ray actor hosting the environment died: {first_line(exc)}") from None
        if not ok:
            _raise(value)
        return value

    def _call(self, method: str, **kwargs: Any) -> Any:
        return self._host.call.remote(self._key, method, kwargs)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """``(observation, info)``; SpadeError when the program fails in ``reset`` or the actor died."""
        self._pending = None
        obs, info = self._get(self._call("reset", seed=seed, options=options))
        self._last_obs = obs
        return obs, info

    def hint(self) -> str:
        """The program's privileged hint (see :meth:`SandboxedEnv.hint`)."""
        return str(self._get(self._call("hint")))

    def oracle(self) -> str:
        """The oracle's action (see :meth:`SandboxedEnv.oracle`)."""
        return str(self._get(self._call("oracle")))

    def send_step(self, action: Any) -> None:
        """Start ``step(action)`` without waiting (the next :meth:`step` with that action collects it); never raises."""
        if self._pending is None:
            try:
                self._pending = (str(action), self._call("step", action=action))
            except Exception:  # noqa: BLE001 - step() sends it again and reports the failure
                self._pending = None

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """``(observation, reward, terminated, truncated, info)``; never raises.

        A dead actor truncates the episode with ``info["sandbox_error"]`` of category ``WORKER_CRASH``.
        """
        pending, self._pending = self._pending, None
        try:
            ref = pending[1] if pending is not None and pending[0] == str(action) else self._call("step", action=action)
            obs, reward, terminated, truncated, info = self._get(ref)
        except SpadeError as exc:
            return self._last_obs, 0.0, False, True, {"sandbox_error": exc.to_dict()}
        except Exception as exc:  # noqa: BLE001 - Ray cannot reach the actor (e.g. Ray was shut down)
            crash = WorkerCrash(f"the Ray actor hosting the environment cannot be reached: {first_line(exc)}")
            return self._last_obs, 0.0, False, True, {"sandbox_error": crash.to_dict()}
        self._last_obs = obs
        return obs, reward, terminated, truncated, info

    def close(self) -> None:
        """Close the environment in its actor; safe to call more than once."""
        if self._key is not None:
            with contextlib.suppress(self._ray.exceptions.RayError):  # a dead host took its environments
                self._ray.get(self._host.close.remote(self._key))
            self._key = None


class _RayEnvFactory:
    """A zero-argument factory of :class:`RayEnv` carrying the episode's ``env_id``."""

    def __init__(self, executor: RayExecutor, spec: Any, env_id: str | None) -> None:
        self.executor, self.spec, self.env_id = executor, spec, env_id

    def __call__(self) -> RayEnv:
        return self.executor.open_env(self.spec)

    def __repr__(self) -> str:
        return f"RayEnv({self.env_id or self.spec!r:.60})"


def _portable(spec: Any) -> tuple[Any, str | None]:
    """``(spec, env_id)`` buildable elsewhere: a ``spade/`` id becomes its program's source, a path its program."""
    if isinstance(spec, str) and spec.startswith("spade/") and "\n" not in spec:
        import gymnasium

        env_spec = gymnasium.spec(spec)
        program = env_spec.kwargs.get("program")
        if env_spec.entry_point == "spade_gym.env:SandboxedEnv" and program is not None:
            source = EnvProgram.from_file(program) if isinstance(program, str) and "\n" not in program else program
            return source, spec
        return spec, spec
    if isinstance(spec, str) and "\n" not in spec and spec.endswith(".py"):
        return EnvProgram.from_file(spec), None  # a path: read here, not in the actor's working directory
    if isinstance(spec, EnvProgram | str) or callable(spec):
        return spec, None
    return EnvProgram.from_file(os.fspath(spec)), None  # a path


class RayExecutor:
    """Validation as Ray tasks and environments in Ray actors.

    Args:
        address: ``None`` starts a local Ray instance (or uses this process's), ``"auto"`` joins this
            node's cluster, ``"ray://<head>:10001"`` uses Ray Client.
        num_cpus: CPUs of a local instance started here (``None``: all).
        validation_cpus: CPUs per validation task (> 0).
        env_hosts: environment host actors (>= 1); ``None``: one per alive node.
        max_retries: reruns of a validation task whose worker died (>= 0).
        sandbox: sandbox settings of hosted environments.

    Raises:
        MissingDependency: Ray is not installed.
        ValueError: an argument out of range.
        ConnectionError: ``address`` cannot be reached (a silent ``host:port`` fails within 10 s).
    """

    kind = "ray"

    def __init__(
        self,
        address: str | None = None,
        *,
        num_cpus: int | None = None,
        validation_cpus: float = 1.0,
        env_hosts: int | None = None,
        max_retries: int = 1,
        sandbox: SandboxConfig | None = None,
    ) -> None:
        ray = _ray()
        if not validation_cpus > 0:
            raise ValueError(f"validation_cpus must be > 0, got {validation_cpus}")
        if env_hosts is not None and env_hosts < 1:
            raise ValueError(f"env_hosts must be >= 1 or None, got {env_hosts}")
        if max_retries < 0:
            raise ValueError(f"max_retries must be >= 0, got {max_retries}")
        if num_cpus is not None and (address is not None or num_cpus < 1):
            raise ValueError("num_cpus (>= 1) applies only to a local instance started here (address=None)")
        self.ray = ray
        self.started = False
        if not ray.is_initialized():
            _reachable(address)
            try:
                ray.init(
                    address=address,
                    num_cpus=num_cpus,
                    include_dashboard=False,
                    log_to_driver=False,
                    configure_logging=False,
                )
            except ConnectionError as exc:
                raise ConnectionError(f"cannot reach the Ray cluster at {address!r}: {first_line(exc)}") from None
            self.started = address is None
        elif num_cpus is not None:
            warnings.warn(f"Ray is already running in this process: num_cpus={num_cpus} is not applied", stacklevel=2)
        self.validation_cpus, self.max_retries = float(validation_cpus), int(max_retries)
        self.sandbox = sandbox
        self._validate = ray.remote(_validate_source)
        self._host_count = env_hosts
        self._hosts: list[Any] = []
        self._next_host = itertools.count()

    def validate_many(self, programs: Sequence[EnvProgram], config: ValidationConfig) -> list[ValidationReport]:
        """One report per program, in order, each validated as a Ray task (all submitted at once); a
        program whose worker died on every attempt gets :func:`crash_report`.

        Raises:
            SandboxSetupError: no sandbox worker can start on the node that ran a task.
        """
        ray = self.ray
        task = self._validate.options(num_cpus=self.validation_cpus, max_retries=self.max_retries)
        refs = [task.remote(p.source, p.origin, config) for p in programs]
        reports = []
        lost = (
            ray.exceptions.WorkerCrashedError,
            ray.exceptions.NodeDiedError,
            ray.exceptions.ObjectLostError,
            ray.exceptions.OutOfMemoryError,
            ray.exceptions.LocalRayletDiedError,
        )
        for program, ref in zip(programs, refs, strict=True):
            try:
                reports.append(ray.get(ref))
            except lost as exc:
                attempts = 1 + self.max_retries
                reports.append(
                    crash_report(
                        program,
                        config,
                        f"the Ray worker validating the program died on all {attempts} attempt(s) "
                        f"({type(exc).__name__}: {first_line(exc)})",
                    )
                )
            except ray.exceptions.RayTaskError as exc:
                raise exc.as_instanceof_cause() from None
        return reports

    def env(self, spec: Any) -> Any:
        """A zero-argument factory (call it here) of a :class:`RayEnv` playing ``spec`` in a host actor:
        an id (sent as its program's source, so ids registered only here work everywhere), a
        program, or a picklable factory. ``gymnasium.error.Error`` for an unknown ``spade/`` id."""
        portable, env_id = _portable(spec)
        if isinstance(portable, EnvProgram | str):
            portable = partial(_sandboxed_env, portable, self.sandbox)
        return _RayEnvFactory(self, portable, env_id)

    def _new_host(self) -> Any:
        return self.ray.remote(_EnvHost).options(num_cpus=0, max_concurrency=256, scheduling_strategy="SPREAD").remote()

    def open_env(self, spec: Any) -> RayEnv:
        """A :class:`RayEnv` of ``spec`` (a picklable program or factory) on the next host actor, round
        robin; the hosts start on first use (``env_hosts``, or one per alive node), and a dead host
        is replaced once. Raises what :class:`RayEnv` raises."""
        if not self._hosts:
            count = self._host_count or max(sum(1 for n in self.ray.nodes() if n.get("Alive")), 1)
            self._hosts = [self._new_host() for _ in range(count)]
        index = next(self._next_host) % len(self._hosts)
        try:
            return RayEnv(self._hosts[index], spec)
        except WorkerCrash:  # the host died since: replace it and try once more
            self._hosts[index] = self._new_host()
            return RayEnv(self._hosts[index], spec)

    def close(self) -> None:
        """Kill the host actors, and shut Ray down if this executor started it."""
        if self.ray.is_initialized():  # (ray.kill on a shut-down Ray would start a new instance)
            for host in self._hosts:
                with contextlib.suppress(Exception):  # already gone
                    self.ray.kill(host)
        self._hosts = []
        if self.started and self.ray.is_initialized():
            self.ray.shutdown()
            self.started = False

    def __enter__(self) -> RayExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"RayExecutor(validation_cpus={self.validation_cpus}, hosts={len(self._hosts)})"


def _reachable(address: str | None, timeout_s: float = 10.0) -> None:
    """Fail fast (ConnectionError within ``timeout_s``) on a ``host:port`` that nothing answers."""
    if address is None or address in ("auto", "local") or "://" in address:
        return  # a local start, this node's cluster, or Ray Client (which has its own timeout)
    host, _, port = address.rpartition(":")
    try:
        socket.create_connection((host or "127.0.0.1", int(port)), timeout=timeout_s).close()
    except ValueError:
        raise ConnectionError(f"cannot reach the Ray cluster at {address!r}: expected 'host:port'") from None
    except OSError as exc:
        raise ConnectionError(f"cannot reach the Ray cluster at {address!r}: {exc}") from None


def _sandboxed_env(program: EnvProgram | str, sandbox: SandboxConfig | None) -> Any:
    from spade_gym.env import SandboxedEnv

    return SandboxedEnv(program, config=sandbox)
