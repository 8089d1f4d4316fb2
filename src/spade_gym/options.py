"""Config fields, defined one way for every config dataclass (the sections of
:class:`~spade_gym.trainer.config.SelfPlayConfig`, :class:`~spade_gym.trainer.grpo.GRPOConfig`,
:class:`~spade_gym.regret.RewardConfig`): a field's help text is its ``metadata["help"]``, its range
is ``Annotated`` constraints on its type (``Ge(1)``, ``Gt(0)``, ``Le(1)``, :data:`FINITE`, a
:class:`Why`) that pydantic checks; ``--help-config``, the YAML comments and the errors are made
from them (:mod:`spade_gym.trainer.config`)."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from annotated_types import Predicate

__all__ = ["FINITE", "Why", "option", "option_factory"]

#: ``Annotated`` metadata: refuse NaN and the infinities.
FINITE = Predicate(math.isfinite)


@dataclass(frozen=True)
class Why:
    """``Annotated`` metadata: why a field's range is what it is, shown after the range."""

    text: str


def option(default: Any, help: str) -> Any:
    """A dataclass field with ``default`` and its help text."""
    return field(default=default, metadata={"help": help})


def option_factory(factory: Callable[[], Any], help: str) -> Any:
    """A dataclass field whose default ``factory()`` makes, with its help text."""
    return field(default_factory=factory, metadata={"help": help})
