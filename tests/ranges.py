"""The edges of an ``Annotated`` range (``Ge``, ``Gt``, ``Le``, ``Lt``, finite), for the tests of the
config keys and of ``GRPOConfig``."""

from __future__ import annotations

import math
from typing import Any

from annotated_types import Ge, Gt, Le, Lt

from spade_gym.options import FINITE


def range_edges(base: type, metadata: list[Any]) -> tuple[list[Any], list[Any]]:
    """``(refused, accepted)``: the values just outside and just inside an Annotated range."""
    refused: list[Any] = []
    accepted: list[Any] = []
    nudge = (lambda x, d: x + d) if base is int else (lambda x, d: math.nextafter(x, d * math.inf))
    for m in metadata:
        if isinstance(m, Ge):
            refused.append(nudge(m.ge, -1))
            accepted.append(m.ge)
        elif isinstance(m, Gt):
            refused.append(m.gt)
            accepted.append(nudge(m.gt, 1))
        elif isinstance(m, Le):
            refused.append(nudge(m.le, 1))
            accepted.append(m.le)
        elif isinstance(m, Lt):
            refused.append(m.lt)
            accepted.append(nudge(m.lt, -1))
        elif m == FINITE:  # and the largest finite numbers (no finite key has an upper bound)
            refused.extend([math.nan, math.inf, -math.inf])
            accepted.extend([1e308] if any(isinstance(b, Ge | Gt) for b in metadata) else [-1e308, 1e308])
    return refused, accepted
