"""Adapters that plug spade_gym into other RL libraries, each an optional extra imported lazily.

* ``integrations.trl`` (``spade-gym[trl]``): Designer reward functions and an
  ``environment_factory`` for TRL's ``GRPOTrainer``.
* ``integrations.verl`` (``spade-gym[verl]``): an agent loop for verl's multi-turn rollouts.
* ``integrations.openrlhf_agent`` (``spade-gym[openrlhf]``): an ``agent_func`` file for OpenRLHF.
* ``integrations.verifiers`` (``spade-gym[verifiers]``): ``load_environment`` for verifiers and
  prime-rl (also importable as the top-level ``spade_gym_verifiers``).
* ``integrations.sb3`` (``spade-gym[sb3]``): helpers for ``spade/DesignerParams-v0`` (PAIRED-style).
* ``integrations.ray`` (``spade-gym[ray]``): validation, environments and generation on Ray.

Importing :mod:`spade_gym` imports none of these libraries (nor torch or vLLM); each module
imports its library when it is used, through :func:`require`, which turns a missing library into
one clear line naming the extra to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from spade_gym.errors import MissingDependency

__all__ = ["MissingDependency", "require"]


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module`` for ``feature``, or say in one line which extra installs it.

    Args:
        module: the module to import, e.g. ``"trl"`` or ``"stable_baselines3"``.
        extra: the spade-gym extra that installs it, e.g. ``"trl"`` (``pip install 'spade-gym[trl]'``),
            or a full pip requirement when it is not one of ours (``"verl"``).
        feature: what needs it, for the message, e.g. ``"spade_gym.integrations.trl"``.

    Returns:
        The imported module.

    Raises:
        MissingDependency: ``module`` is not installed (also an :class:`ImportError`); its message
            is ``"<feature> needs <module>: pip install 'spade-gym[<extra>]'"``, and names the
            missing dependency when the library is installed but one of its own is not.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        top = module.split(".")[0]
        install = f"pip install 'spade-gym[{extra}]'" if extra.isidentifier() else f"pip install '{extra}'"
        missing = (exc.name or top).split(".")[0]
        what = top if missing == top else f"{top} (which could not import its dependency {missing})"
        raise MissingDependency(f"{feature} needs {what}: {install}") from None
