"""Adapters that plug spade_gym into other RL libraries, each an optional extra imported lazily.

``trl``, ``verl``, ``openrlhf_agent``, ``verifiers`` (also the top-level ``spade_gym_verifiers``)
and ``sb3`` (``spade/DesignerParams-v0``), each with the extra of its name. Ray is a backend of
the core (:mod:`spade_gym.ray_executor`, :mod:`spade_gym.policies.ray`; ``integrations.ray``
re-exports both). A missing library raises one clear line naming the extra
(:func:`spade_gym.errors.require`).
"""

from __future__ import annotations

from spade_gym.errors import MissingDependency, require

__all__ = ["MissingDependency", "require"]
