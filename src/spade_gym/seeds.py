"""Seeds no environment program can predict: every figure the host writes (the gate's verdict, a
regret estimate, ``spade envs measure``, the adapters' datasets) is measured on seeds drawn here
unless the user passes seeds. A program that behaves only below some seed, or only on ``0 .. k-1``,
is then measured where it misbehaves.

Seeds are drawn in ``[0, 2**31)`` by :class:`random.SystemRandom` (the operating system's random
source), or, when the environment variable :data:`SEED_VARIABLE` is set (``SPADE_VALIDATION_SEED=same``,
for comparisons), from a generator seeded by its value and a tag, so the same tag gives the same seeds.
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
