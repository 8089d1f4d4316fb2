"""Adapters that plug spade_gym into other RL libraries, each an optional extra imported lazily.

* ``integrations.trl`` (``spade-gym[trl]``): Designer reward functions and an
  ``environment_factory`` for TRL's ``GRPOTrainer``.
* ``integrations.verl`` (``spade-gym[verl]``): an agent loop for verl's multi-turn rollouts.
* ``integrations.openrlhf_agent`` (``spade-gym[openrlhf]``): an ``agent_func`` file for OpenRLHF.
* ``integrations.verifiers`` (``spade-gym[verifiers]``): ``load_environment`` for verifiers and
  prime-rl (also importable as the top-level ``spade_gym_verifiers``).
* ``integrations.sb3`` (``spade-gym[sb3]``): helpers for ``spade/DesignerParams-v0`` (PAIRED-style).
* Ray (``spade-gym[ray]``) is a backend of the core, not an adapter: :mod:`spade_gym.ray_executor`
  and :mod:`spade_gym.policies.ray` (``integrations.ray`` re-exports both).

Importing :mod:`spade_gym` imports none of these libraries (nor torch or vLLM); each module
imports its library when it is used, through :func:`spade_gym.errors.require`, which turns a missing library into
one clear line naming the extra to install.
"""

from __future__ import annotations

from spade_gym.errors import MissingDependency, require

__all__ = ["MissingDependency", "require"]
