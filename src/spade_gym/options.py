"""Config fields, defined one way for every config dataclass: a field's help text is its
``metadata["help"]``, its range ``Annotated`` constraints on its type (``Ge(1)``, ``Gt(0)``, ``Le(1)``,
``Lt(1)``, :data:`FINITE`, a :class:`Why`) that pydantic checks, in a config file and in a dataclass
built in Python (:func:`first_refusal`); :func:`type_name` renders them for help and errors."""

from __future__ import annotations

import dataclasses
import functools
import importlib
import math
import re
import types
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal, Union, get_args, get_origin, get_type_hints

from annotated_types import Ge, Gt, Le, Lt, MinLen, Predicate

__all__ = [
    "FINITE",
    "Why",
    "adapter",
    "config_fields",
    "first_refusal",
    "option",
    "option_factory",
    "range_name",
    "refusal",
    "strict_yaml_loader",
    "type_name",
]

#: ``Annotated`` metadata: refuse NaN and the infinities.
FINITE = Predicate(math.isfinite)


@dataclass(frozen=True)
class Why:
    """``Annotated`` metadata: why a field's range is what it is, shown after the range."""

    text: str


def config_fields(cls: Any) -> list[dataclasses.Field[Any]]:
    """The fields of dataclass ``cls`` that are config keys: those with a help text. A field without
    one is set by the code that uses the dataclass (from other sections), never by a config file."""
    return [f for f in dataclasses.fields(cls) if "help" in f.metadata]


def option(default: Any, help: str) -> Any:
    """A dataclass field with ``default`` and its help text."""
    return field(default=default, metadata={"help": help})


def option_factory(factory: Callable[[], Any], help: str) -> Any:
    """A dataclass field whose default ``factory()`` makes, with its help text."""
    return field(default_factory=factory, metadata={"help": help})


_SIGNS = {Ge: ">=", Gt: ">", Le: "<=", Lt: "<"}
_COUNTS = {2: "two", 3: "three", 4: "four"}


def type_name(tp: Any, ranges: bool = True, none: str = "null") -> str:
    """How a type reads in help and messages: ``int``, ``one of 'on', 'off'``, ``float or null``;
    with ``ranges``, an ``Annotated`` type's constraints: ``an int >= 1``, ``a number in (0, 1]``,
    ``a finite number > 0 (why)``, ``two numbers in [0, 1)``. ``none`` names ``None`` (``null`` in
    YAML, ``None`` for Python callers)."""
    if get_origin(tp) is Annotated:
        inner, metadata = tp.__origin__, tp.__metadata__
        if get_origin(inner) in (list, tuple) and metadata == (MinLen(1),):  # a non-empty list
            return "a non-empty " + type_name(inner, ranges, none).removeprefix("a ")
        return range_name(inner, metadata) if ranges else type_name(inner, none=none)
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
        if len(args) == 2 and args[1] is Ellipsis:  # any length
            return f"a list of {type_name(args[0], none=none)}"
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


@functools.cache
def adapter(tp: Any) -> Any:
    """A strict ``pydantic.TypeAdapter`` for ``tp`` (no coercion, except an int for a float; pydantic is
    imported on first use)."""
    from pydantic import ConfigDict, TypeAdapter

    return TypeAdapter(tp, config=ConfigDict(strict=True))


def refusal(value: Any, tp: Any) -> str | None:
    """``None`` when pydantic (:func:`adapter`) accepts ``value`` as a ``tp`` within its ``Annotated``
    range, else what is expected (:func:`type_name`, ``None`` for null)."""
    from pydantic import ValidationError

    try:
        adapter(tp).validate_python(value)
    except ValidationError:
        return type_name(tp, none="None")
    return None


_CHECKED_FIELDS: dict[type, list[tuple[str, Any]]] = {}


def _checked_fields(cls: type) -> list[tuple[str, Any]]:
    """``(name, type)`` of the fields of dataclass ``cls`` that :func:`first_refusal` checks: all but
    the bools and the nested dataclasses (each checks itself); computed once per class."""
    if cls not in _CHECKED_FIELDS:
        hints = get_type_hints(cls, include_extras=True)
        fields = ((f.name, hints[f.name]) for f in dataclasses.fields(cls))
        _CHECKED_FIELDS[cls] = [(n, tp) for n, tp in fields if tp is not bool and not dataclasses.is_dataclass(tp)]
    return _CHECKED_FIELDS[cls]


def first_refusal(obj: object) -> tuple[str, Any, str] | None:
    """``(field, value, expected)`` of the first field of dataclass ``obj`` whose value its type (its
    ``Annotated`` range) refuses (:func:`refusal`), or ``None``."""
    for name, tp in _checked_fields(type(obj)):
        value = getattr(obj, name)
        expected = refusal(value, tp)
        if expected is not None:
            return name, value, expected
    return None


@functools.cache
def strict_yaml_loader() -> Any:
    """A ``yaml.SafeLoader`` subclass with YAML 1.2 core scalars and duplicate keys refused (PyYAML
    is imported on first use; ImportError without it)."""
    yaml: Any = importlib.import_module("yaml")

    replaced = {f"tag:yaml.org,2002:{kind}" for kind in ("bool", "float", "int", "timestamp")}

    class StrictLoader(yaml.SafeLoader):
        def construct_mapping(self, node: Any, deep: bool = False) -> Any:
            self.flatten_mapping(node)
            seen = set()
            for key_node, _ in node.value:
                key = self.construct_object(key_node, deep=True)
                try:
                    duplicate = key in seen
                except TypeError:
                    continue  # unhashable: the base class reports it
                if duplicate:
                    raise yaml.constructor.ConstructorError(
                        "while constructing a mapping",
                        node.start_mark,
                        f"found duplicate key {key!r}",
                        key_node.start_mark,
                    )
                seen.add(key)
            return super().construct_mapping(node, deep=deep)

        def construct_yaml_int(self, node: Any) -> int:
            return int(self.construct_scalar(node).replace("_", ""), 10)

    StrictLoader.yaml_implicit_resolvers = {
        first: [(tag, rx) for tag, rx in resolvers if tag not in replaced]
        for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
    }
    StrictLoader.add_implicit_resolver(
        "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
    )
    StrictLoader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?[0-9]+$"), list("-+0123456789"))
    StrictLoader.add_implicit_resolver(
        "tag:yaml.org,2002:float",
        re.compile(
            r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"
        ),
        list("-+0123456789."),
    )
    StrictLoader.add_constructor("tag:yaml.org,2002:int", StrictLoader.construct_yaml_int)
    # an explicit !!timestamp stays text, as an unquoted date does (a date object has no YAML 1.2 scalar)
    StrictLoader.add_constructor("tag:yaml.org,2002:timestamp", yaml.SafeLoader.construct_yaml_str)
    return StrictLoader
