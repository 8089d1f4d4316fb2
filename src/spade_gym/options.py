"""Config fields, defined one way for every config dataclass (the sections of
:class:`~spade_gym.trainer.config.SelfPlayConfig`, :class:`~spade_gym.trainer.grpo.GRPOConfig`,
:class:`~spade_gym.regret.RewardConfig`): a field's help text is its ``metadata["help"]``, its range
is ``Annotated`` constraints on its type (``Ge(1)``, ``Gt(0)``, ``Le(1)``, ``Lt(1)``, :data:`FINITE`,
a :class:`Why`) that pydantic checks in a config and :func:`refusal` checks for a dataclass built in
Python; :func:`type_name` renders the same text for ``--help-config``, the YAML comments and the errors
(:mod:`spade_gym.trainer.config`)."""

from __future__ import annotations

import dataclasses
import math
import operator
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union, get_args, get_origin

from annotated_types import Ge, Gt, Le, Lt, Predicate

__all__ = ["FINITE", "Why", "option", "option_factory", "range_name", "refusal", "type_name"]

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


_SIGNS = {Ge: ">=", Gt: ">", Le: "<=", Lt: "<"}
_COMPARE = {Ge: operator.ge, Gt: operator.gt, Le: operator.le, Lt: operator.lt}
_COUNTS = {2: "two", 3: "three", 4: "four"}


def type_name(tp: Any, ranges: bool = True, none: str = "null") -> str:
    """How a type reads in help and messages: ``int``, ``one of 'on', 'off'``, ``float or null``;
    with ``ranges``, an ``Annotated`` type's constraints: ``an int >= 1``, ``a number in (0, 1]``,
    ``a finite number > 0 (why)``, ``two numbers in [0, 1)``. ``none`` names ``None`` (``null`` in
    YAML, ``None`` for Python callers)."""
    if get_origin(tp) is Annotated:
        return range_name(tp.__origin__, tp.__metadata__) if ranges else type_name(tp.__origin__, none=none)
    if tp is Any:
        return "any value"
    if dataclasses.is_dataclass(tp):
        return "a section (a mapping of keys)"
    origin = get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(c) for c in get_args(tp))
    if origin in (Union, types.UnionType):
        arms = [a for a in get_args(tp) if a is not type(None)]
        names = " or ".join(type_name(a, ranges, none) for a in arms)
        return f"{names} or {none}" if len(arms) < len(get_args(tp)) else names
    if origin is tuple:
        args = get_args(tp)
        if ranges and len(set(args)) == 1 and get_origin(args[0]) is Annotated:  # two numbers in [0, 1)
            return range_name(args[0].__origin__, args[0].__metadata__, count=len(args))
        return f"a list of {len(args)} " + " and ".join(dict.fromkeys(type_name(a, ranges, none) for a in args))
    if origin is list:
        return f"a list of {type_name(get_args(tp)[0], none=none)}"
    if origin is dict:
        return "a mapping"
    bool_name = "bool (true or false)" if none == "null" else "bool (True or False)"
    return {bool: bool_name, int: "int", float: "float", str: "str"}.get(tp, getattr(tp, "__name__", str(tp)))


def range_name(tp: type, metadata: Sequence[Any], count: int = 1) -> str:
    """``an int >= 1``, ``a number in (0, 1]``, ``a finite number > 0 (why)``: a type with its
    ``Annotated`` constraints (a lower bound before an upper one); ``count`` values of it: ``two
    numbers in [0, 1)``."""
    bounds = [(_SIGNS[type(m)], getattr(m, type(m).__name__.lower())) for m in metadata if type(m) in _SIGNS]
    noun = "int" if tp is int else "finite number" if FINITE in metadata else "number"
    text = f"{'an' if noun[0] in 'aeiou' else 'a'} {noun}" if count == 1 else f"{_COUNTS.get(count, count)} {noun}s"
    if len(bounds) == 2:
        (low_sign, low), (high_sign, high) = bounds
        text += f" in {'[' if low_sign == '>=' else '('}{low}, {high}{']' if high_sign == '<=' else ')'}"
    elif bounds:
        text += " {} {}".format(*bounds[0])
    return text + "".join(f" ({m.text})" for m in metadata if isinstance(m, Why))


def refusal(value: Any, tp: Any) -> str | None:
    """``None`` when ``value`` is of type ``tp`` and within its ``Annotated`` range, else what is
    expected (:func:`type_name` with ``None`` for null): the check pydantic makes in strict mode
    (an int is a number, a bool is not), in plain Python for a dataclass built without a config.
    Types: ``Annotated`` (``Ge``, ``Gt``, ``Le``, ``Lt``, :data:`FINITE`, :class:`Why`) of
    ``int``/``float``, ``Literal``, ``X | None``, fixed ``tuple``, ``int``, ``float``, ``bool``,
    ``str``; TypeError for another."""
    return None if _fits(value, tp) else type_name(tp, none="None")


def _fits(value: Any, tp: Any) -> bool:
    origin = get_origin(tp)
    if origin is Annotated:
        return _fits(value, tp.__origin__) and all(_meets(value, m) for m in tp.__metadata__)
    if origin in (Union, types.UnionType):
        return any(_fits(value, arm) for arm in get_args(tp))
    if origin is Literal:
        return any(value == c and isinstance(value, type(c)) and _fits(value, type(c)) for c in get_args(tp))
    if origin is tuple:
        args = get_args(tp)
        return (
            isinstance(value, tuple)
            and len(value) == len(args)
            and all(_fits(v, a) for v, a in zip(value, args, strict=True))
        )
    if tp is type(None):
        return value is None
    if tp is bool:
        return isinstance(value, bool)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if tp is float:
        return isinstance(value, int | float) and not isinstance(value, bool)
    if tp is str:
        return isinstance(value, str)
    raise TypeError(f"refusal() cannot check type {tp!r}")


def _meets(value: Any, constraint: Any) -> bool:
    if isinstance(constraint, Why):
        return True
    if constraint == FINITE:
        try:
            return math.isfinite(value)
        except OverflowError:  # an int too large for a float
            return False
    if type(constraint) not in _SIGNS:
        raise TypeError(f"refusal() cannot check constraint {constraint!r}")
    return bool(_COMPARE[type(constraint)](value, getattr(constraint, type(constraint).__name__.lower())))
