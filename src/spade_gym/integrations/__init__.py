"""Adapters that plug spade_gym into other RL libraries, each an optional extra of its name, imported
lazily; a missing library raises one clear line naming the extra (:func:`spade_gym.errors.require`).
"""

from __future__ import annotations

from spade_gym.errors import MissingDependency, require

__all__ = ["MissingDependency", "require"]
