"""Where validation and the Agent's environments run: local worker processes, or Ray.

The self-play loop does the same work on a laptop and on a cluster; only the *executor* changes
(docs/DESIGN.md, "Scale"):

* **Validation.** :meth:`Executor.validate_many` runs the validation gate on a batch of programs
  *without* a registry (each gate run is independent and can run anywhere); the caller then runs
  :func:`~spade_gym.validation.check_novelty` against its registry, in order, just before
  registering. ``validate(p, registry=r)`` and ``check_novelty(validate(p), p, r)`` give the same
  verdict, so the executor never changes a result.
* **Environments.** :meth:`Executor.env` turns an episode's environment (a ``spade/`` id, a
  program, a factory) into a zero-argument factory that :func:`~spade_gym.agent.rollout` calls:
  a local sandboxed environment for ``"local"``; a proxy to a Ray actor hosting it for ``"ray"``.

:class:`LocalExecutor` runs everything in this process and its sandbox workers. ``"ray"`` is
:class:`spade_gym.ray_executor.RayExecutor` (the ``ray`` extra, imported only when asked for).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal, Protocol

from spade_gym.program import EnvProgram
from spade_gym.validation import ValidationConfig, ValidationReport, validate

__all__ = ["Executor", "ExecutorKind", "LocalExecutor", "make_executor"]

ExecutorKind = Literal["local", "ray"]


class Executor(Protocol):
    """Runs validation and hosts environments for the self-play loop."""

    #: ``"local"`` or ``"ray"``.
    kind: str

    def validate_many(self, programs: Sequence[EnvProgram], config: ValidationConfig) -> list[ValidationReport]:
        """Validate every program without a registry; one report per program, in order. A program's
        fault (and, on Ray, a worker that died twice) is a failed report, never an exception."""
        ...

    def env(self, spec: Any) -> Any:
        """What :class:`~spade_gym.agent.Episode` should hold to play ``spec`` on this executor."""
        ...

    def close(self) -> None:
        """Release what the executor holds (actors, connections); safe to call more than once."""
        ...


class LocalExecutor:
    """Validation one program after another in this process (each run uses its two sandbox worker
    processes, two cores), and environments as local sandbox workers."""

    kind = "local"

    def validate_many(self, programs: Sequence[EnvProgram], config: ValidationConfig) -> list[ValidationReport]:
        """``[validate(p, config) for p in programs]`` (no registry: see the module docstring).

        Args:
            programs: the programs, any number.
            config: the gate's settings.

        Returns:
            One :class:`ValidationReport` per program, in order.

        Raises:
            SandboxSetupError: no sandbox worker can start on this machine (not a program's fault).
        """
        return [validate(program, config) for program in programs]

    def env(self, spec: Any) -> Any:
        """A zero-argument factory that makes ``spec`` here (a sandbox worker of this machine).

        Args:
            spec: what :class:`~spade_gym.agent.Episode` accepts (a ``spade/`` id, a program or a
                factory).

        Returns:
            A callable returning the environment; its ``env_id`` names the episodes as ``spec``
            itself would.
        """
        return _LocalEnvFactory(spec)

    def close(self) -> None:
        """Nothing to release."""

    def __enter__(self) -> LocalExecutor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return "LocalExecutor()"


class _LocalEnvFactory:
    """``spec`` made on call, named as :func:`~spade_gym.agent.rollout` names ``spec`` itself."""

    def __init__(self, spec: Any) -> None:
        self.spec = spec
        self.env_id = spec if isinstance(spec, str) and spec.startswith("spade/") and "\n" not in spec else None

    def __call__(self) -> Any:
        from spade_gym.agent import open_playable_env

        return open_playable_env(self.spec)

    def __repr__(self) -> str:
        return f"LocalEnv({self.env_id or self.spec!r:.60})"


def make_executor(kind: str = "local", **options: Any) -> Executor:
    """The executor named ``kind``.

    Args:
        kind: ``"local"`` (this machine's processes) or ``"ray"`` (Ray tasks and actors; needs the
            ``ray`` extra).
        **options: for ``"ray"``, the arguments of
            :class:`~spade_gym.ray_executor.RayExecutor` (``address``, ``num_cpus``, ...);
            none for ``"local"``.

    Returns:
        The executor (a context manager); close it with ``close()`` when done.

    Raises:
        ValueError: an unknown ``kind``, or options given to ``"local"``.
        MissingDependency: ``"ray"`` without Ray installed (``pip install 'spade-gym[ray]'``).
    """
    if kind == "local":
        if options:
            raise ValueError(f"the local executor takes no options, got {sorted(options)}")
        return LocalExecutor()
    if kind == "ray":
        from spade_gym.ray_executor import RayExecutor

        return RayExecutor(**options)
    raise ValueError(f"executor must be 'local' or 'ray', got {kind!r}")
