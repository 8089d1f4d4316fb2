"""Seeds no environment program can predict, for every figure the host writes unless the user passes
seeds: drawn in ``[0, 2**31)`` by :class:`random.SystemRandom`, or, when :data:`SEED_VARIABLE` is
set, from a generator seeded by its value and a tag (reproducible, for comparisons).
"""

from __future__ import annotations

import os
import random

__all__ = ["SEED_SPACE", "SEED_VARIABLE", "draw_seeds", "seed_source"]

#: Environment variable that makes every seed draw reproducible (see the module docstring).
SEED_VARIABLE = "SPADE_VALIDATION_SEED"
#: Seeds are drawn in ``range(SEED_SPACE)``.
SEED_SPACE = 2**31


def seed_source(tag: str) -> random.Random:
    """The generator seeds are drawn from: seeded by :data:`SEED_VARIABLE` and ``tag`` when the
    variable is set, else :class:`random.SystemRandom`."""
    secret = os.environ.get(SEED_VARIABLE)
    return random.Random(f"{secret}-{tag}") if secret else random.SystemRandom()


def draw_seeds(n: int, tag: str = "") -> list[int]:
    """``n`` distinct seeds in ``[0, 2**31)`` from :func:`seed_source` (``tag`` names the draw).
    ValueError for ``n < 0``."""
    if n < 0:
        raise ValueError(f"cannot draw {n} seeds; expected n >= 0")
    return seed_source(tag).sample(range(SEED_SPACE), n)
