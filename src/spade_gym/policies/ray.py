"""Generation on Ray: any policy loaded in a Ray actor, so a vLLM engine can live on another GPU
or node than the trainer (``run.executor: ray`` with ``ray.generation_gpus``; the ``ray`` extra,
imported only when a :class:`RayPolicy` is created).
"""

from __future__ import annotations

import contextlib
from typing import Any

from spade_gym import errors
from spade_gym.errors import first_line, require

__all__ = ["RayPolicy"]

_FEATURE = "spade_gym.policies.ray.RayPolicy"


class _PolicyHost:
    """A Ray actor holding one policy (e.g. a vLLM engine on a GPU)."""

    def __init__(self, spec: str, kwargs: dict[str, Any]) -> None:
        from spade_gym.policies import load_policy

        self.policy: Any = load_policy(spec, **kwargs)

    def describe(self) -> dict[str, Any]:
        return {"name": self.policy.name, "context_window": self.policy.context_window}

    def generate(self, prompts: Any, sampling: Any) -> Any:
        return self.policy.generate(prompts, sampling)

    def encode(self, messages: Any) -> list[int]:
        return list(self.policy.encode(messages))

    def load_weights(self, weights: Any) -> None:
        self.policy.load_weights(weights)


class RayPolicy:
    """A policy loaded in a Ray actor (generation on another GPU or node), used like any
    :class:`~spade_gym.Policy`: ``generate`` and, where the policy has them, ``encode`` and
    ``load_weights`` are forwarded.

    Args:
        spec: what :func:`spade_gym.load_policy` accepts, e.g. ``"vllm:Qwen/Qwen2.5-1.5B-Instruct"``.
        num_gpus: GPUs reserved for the actor (1 for a vLLM engine; 0 on CPU).
        num_cpus: CPUs reserved for the actor.
        **kwargs: passed to ``load_policy`` in the actor.

    Raises:
        MissingDependency: Ray is not installed.
        PolicyError: the actor could not load the policy (the actor's error, re-raised here).
    """

    def __init__(self, spec: str, *, num_gpus: float = 0, num_cpus: float = 1, **kwargs: Any) -> None:
        ray = require("ray", "ray", _FEATURE)
        self._ray = ray
        actor = ray.remote(_PolicyHost).options(num_gpus=num_gpus, num_cpus=num_cpus)
        self._actor = actor.remote(spec, kwargs)
        try:
            described = ray.get(self._actor.describe.remote())
        except ray.exceptions.RayActorError as exc:
            cause = getattr(exc, "cause", None)
            if isinstance(cause, BaseException):
                raise cause from None
            raise errors.PolicyError(f"the Ray actor could not load policy {spec!r}: {first_line(exc)}") from None
        self.name: str = described["name"]
        self.context_window: int | None = described["context_window"]
        self.spec = spec

    def generate(self, prompts: Any, sampling: Any = None) -> Any:
        """``policy.generate(prompts, sampling)`` in the actor; see :meth:`spade_gym.Policy.generate`."""
        return self._ray.get(self._actor.generate.remote(prompts, sampling))

    def encode(self, messages: Any) -> list[int]:
        """The prompt token ids of ``messages`` under the actor's chat template."""
        result: list[int] = self._ray.get(self._actor.encode.remote(messages))
        return result

    def load_weights(self, weights: Any) -> None:
        """Load new weights into the actor's engine (after an update); ``weights`` is an iterable
        of ``(name, tensor)`` pairs, sent through Ray's object store."""
        self._ray.get(self._actor.load_weights.remote(list(weights)))

    def close(self) -> None:
        """Kill the actor (frees its GPU)."""
        if self._ray.is_initialized():
            with contextlib.suppress(Exception):  # already gone
                self._ray.kill(self._actor)

    def __repr__(self) -> str:
        return f"RayPolicy({self.spec!r})"
