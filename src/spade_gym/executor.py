"""Where validation and the Agent's environments run: local worker processes, or Ray.

Only the executor changes between a laptop and a cluster (docs/DESIGN.md, "Scale"). The gate runs
without a registry (the caller then runs :func:`~spade_gym.novelty.check_novelty` in order);
``"ray"`` is :class:`spade_gym.ray_executor.RayExecutor` (the ``ray`` extra, imported when asked for).
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
        """One report per program, in order, without a registry; failures are reports, never exceptions."""
        ...

    def env(self, spec: Any) -> Any:
        """What :class:`~spade_gym.agent.Episode` should hold to play ``spec`` on this executor."""
        ...

    def close(self) -> None:
        """Release what the executor holds (actors, connections); safe to call more than once."""
        ...


class LocalExecutor:
    """Validation one program after another in this process, and environments as local sandbox workers."""

    kind = "local"

    def validate_many(self, programs: Sequence[EnvProgram], config: ValidationConfig) -> list[ValidationReport]:
        """``[validate(p, config) for p in programs]``; SandboxSetupError when no sandbox worker can start."""
        return [validate(program, config) for program in programs]

    def env(self, spec: Any) -> Any:
        """A zero-argument factory making ``spec`` (an id, program or factory) here, named as ``spec``."""
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
    """The executor named ``kind`` (a context manager): ``"local"``, or ``"ray"`` with ``options`` for
    :class:`~spade_gym.ray_executor.RayExecutor`. ValueError for an unknown ``kind`` or options given
    to ``"local"``; MissingDependency for ``"ray"`` without Ray installed."""
    if kind == "local":
        if options:
            raise ValueError(f"the local executor takes no options, got {sorted(options)}")
        return LocalExecutor()
    if kind == "ray":
        from spade_gym.ray_executor import RayExecutor

        return RayExecutor(**options)
    raise ValueError(f"executor must be 'local' or 'ray', got {kind!r}")
