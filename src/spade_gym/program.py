"""Environment programs: source text, a stable identity, and the static check.

An environment program is one Python module defining one class ``Env`` (docs/DESIGN.md, "The
environment program contract"); :class:`EnvProgram` checks it without running any of it.
"""

from __future__ import annotations

import ast
import hashlib
import os
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Literal, cast, get_args

from spade_gym.contract import parse_module
from spade_gym.errors import ProgramError
from spade_gym.sandbox.policy import ALLOWED_MODULES, compile_program

#: Held while the host parses or compiles a program: two threads parsing at once can fail with
#: ``SystemError: AST constructor recursion depth mismatch`` on CPython 3.11 (gh-106905).
_AST_LOCK = threading.RLock()

__all__ = [
    "EnvProgram",
    "LEARNING_WINDOW",
    "OUT_OF_REACH_BELOW",
    "REQUIRED_METHODS",
    "RETURN_TOLERANCE",
    "SETTINGS",
    "SUCCESS_RETURN",
    "TOO_EASY_AT",
    "TRIVIAL_AT",
    "MAX_SOURCE_BYTES",
    "knob_nodes",
    "knobs",
]

#: Largest program accepted, in bytes of UTF-8 source.
MAX_SOURCE_BYTES = 100_000
#: Deepest nesting of syntax-tree nodes accepted (the restricted compiler's time grows with it).
MAX_AST_DEPTH = 64
#: A setting of docs/DESIGN.md.
Setting = Literal["reasoning", "tool_use", "game"]
#: The three settings of docs/DESIGN.md.
SETTINGS: tuple[Setting, ...] = get_args(Setting)
#: Slack on the contract's [0, 1] bounds of an episode return, for float sums such as 1/3 + 1/3 + 1/3.
RETURN_TOLERANCE = 1e-6
#: An episode succeeds when its return is at least this (docs/DESIGN.md).
SUCCESS_RETURN = 0.99
#: Difficulty bands on an environment's measured mean returns (one definition each; the Designer's
#: reward and the memory's labels both use them):
#: with the hint below this, the Agent fails even when told how ("out of reach", "too hard");
OUT_OF_REACH_BELOW = 0.05
#: without the hint at or above this, it always solves it alone (the reward's "trivial");
TRIVIAL_AT = 1.0
#: without the hint at or above this, it nearly always does (the memory's "too easy" examples);
TOO_EASY_AT = 0.9
#: the no-hint success rates where an environment teaches (R-Zero trains where 0.3 <= p <= 0.8).
LEARNING_WINDOW = (0.3, 0.8)
#: Methods ``Env`` must define, with their positional parameters after ``self``.
REQUIRED_METHODS: dict[str, int] = {"reset": 1, "step": 1, "hint": 0, "oracle": 0}
#: Class attributes ``Env`` must define.
REQUIRED_ATTRIBUTES = ("name", "setting", "max_turns")


@dataclass(frozen=True)
class EnvProgram:
    """The source of one environment program.

    Args:
        source: Python source text (at most :data:`MAX_SOURCE_BYTES` bytes of UTF-8).
        origin: where it came from (a path, ``"designer"``, ...), for messages only.

    Attributes:
        id: SHA-256 hex digest of the source after an AST round trip (layout and comments dropped,
            docstrings kept).
    """

    source: str
    origin: str = field(default="<string>", compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.source, str):
            raise TypeError(f"EnvProgram source must be str, got {type(self.source).__name__}")
        if self.source.startswith("\ufeff"):  # a UTF-8 byte-order mark, as some editors write
            object.__setattr__(self, "source", self.source[1:])

    @classmethod
    def from_file(cls, path: str | os.PathLike[str]) -> EnvProgram:
        """Read a program from a UTF-8 file (``FileNotFoundError``; ``ProgramError`` if not UTF-8)."""
        data = Path(path).read_bytes()
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise ProgramError(f"{path}: the program is not UTF-8 text ({exc})") from None
        return cls(text, origin=str(path))

    @cached_property
    def normalized_source(self) -> str:
        """The source after an AST round trip (``ast.unparse``); the raw source if it does not parse."""
        try:
            with _AST_LOCK:
                return ast.unparse(ast.parse(self.source))
        except (SyntaxError, ValueError, RecursionError, MemoryError):
            return self.source

    @cached_property
    def id(self) -> str:
        """SHA-256 hex digest (64 characters) of :attr:`normalized_source`."""
        return hashlib.sha256(self.normalized_source.encode("utf-8", "surrogatepass")).hexdigest()

    def problems(self, *, restricted_compile: bool = True) -> list[str]:
        """Run the static check (nothing runs); return every problem found, each naming its line.

        Args:
            restricted_compile: also compile under the restricted policy here (the sandbox passes
                ``False`` and compiles in the worker, under the load deadline: it can take seconds).
        """
        with _AST_LOCK:
            return self._problems(restricted_compile)

    def _problems(self, restricted_compile: bool) -> list[str]:
        size = len(self.source.encode("utf-8", "surrogatepass"))
        if size > MAX_SOURCE_BYTES:
            return [f"the program is {size} bytes; the limit is {MAX_SOURCE_BYTES} bytes"]
        if "\x00" in self.source:
            return ["the program contains a NUL character; it must be plain text"]
        try:
            tree = ast.parse(self.source)
        except SyntaxError as exc:
            where = f"line {exc.lineno}: " if exc.lineno else ""
            return [f"{where}syntax error: {exc.msg}"]
        except (ValueError, RecursionError, MemoryError) as exc:
            return [f"the program could not be parsed ({type(exc).__name__}); is it nested too deeply?"]
        depth = _max_depth(tree)
        if depth > MAX_AST_DEPTH:
            return [f"the program nests expressions and statements {depth} levels deep; the limit is {MAX_AST_DEPTH}"]
        problems = _check_imports(tree) + _check_interface(tree)
        if restricted_compile:
            _code, errors = compile_program(self.source)
            problems += [f"restricted compiler: {e}" for e in errors]
        return problems

    def check(self, *, restricted_compile: bool = True) -> EnvProgram:
        """Raise :class:`ProgramError` listing every problem of :meth:`problems`, else return ``self``."""
        problems = self.problems(restricted_compile=restricted_compile)
        if problems:
            raise ProgramError(
                f"{self.origin}: the program fails the static check:\n" + "\n".join(f"- {p}" for p in problems)
            )
        return self


def _check_imports(tree: ast.Module) -> list[str]:
    problems = []
    allowed = ", ".join(ALLOWED_MODULES)
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name not in ALLOWED_MODULES:
                    problems.append(f"line {node.lineno}: import of {alias.name!r} is not allowed; allowed: {allowed}")
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                problems.append(f"line {node.lineno}: relative imports are not allowed")
            elif node.module not in ALLOWED_MODULES:
                problems.append(f"line {node.lineno}: import from {node.module!r} is not allowed; allowed: {allowed}")
            else:
                for alias in node.names:
                    if alias.name == "*":
                        problems.append(f"line {node.lineno}: 'from {node.module} import *' is not allowed")
                    elif alias.name.startswith("_"):
                        problems.append(f"line {node.lineno}: importing the private name {alias.name!r} is not allowed")
    return problems


def _check_interface(tree: ast.Module) -> list[str]:
    envs = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "Env"]
    if not envs:
        hint = ""
        if any(isinstance(n, (ast.FunctionDef, ast.Assign)) and _defines_name(n, "Env") for n in tree.body):
            hint = " (Env must be a class statement, not a function or an alias)"
        return [f"the module must define exactly one top-level 'class Env'; found none{hint}"]
    if len(envs) > 1:
        return [f"the module defines 'class Env' {len(envs)} times; define it exactly once"]
    if any(_defines_name(n, "Env") for n in tree.body if not isinstance(n, ast.ClassDef)):
        return ["the name 'Env' is rebound at module level; define it only as the class"]
    env = envs[0]
    problems = []
    if not ast.get_docstring(env):
        problems.append(f"line {env.lineno}: class Env needs a docstring saying what the environment is about")
    methods = {n.name: n for n in env.body if isinstance(n, ast.FunctionDef)}
    assigned: dict[str, ast.expr | None] = {}
    for node in env.body:
        if isinstance(node, ast.Assign):
            for target in node.targets:
                if isinstance(target, ast.Name):
                    assigned[target.id] = node.value
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            assigned[node.target.id] = node.value
    for name, n_args in REQUIRED_METHODS.items():
        method = methods.get(name)
        if method is None:
            problems.append(f"class Env must define the method {name}(self{', x' * n_args})")
            continue
        positional = method.args.posonlyargs + method.args.args
        if len(positional) < 1 + n_args and method.args.vararg is None:
            problems.append(
                f"line {method.lineno}: Env.{name} takes {len(positional)} positional parameter(s); "
                f"it must accept self{' and one argument' if n_args else ''}"
            )
    for name in REQUIRED_ATTRIBUTES:
        if name not in assigned:
            problems.append(f"class Env must set the class attribute {name!r}")
    problems += _check_literal(
        assigned,
        "name",
        str,
        lambda v: v.isascii() and v.isidentifier() and v[:1].isupper(),
        "a CamelCase identifier such as 'MazeWalk'",
    )
    problems += _check_literal(assigned, "setting", str, lambda v: v in SETTINGS, f"one of {SETTINGS}")
    problems += _check_literal(assigned, "max_turns", int, lambda v: 1 <= v <= 100_000, "an int from 1 to 100000")
    setting = assigned.get("setting")
    if isinstance(setting, ast.Constant) and setting.value == "tool_use" and "tools" not in assigned:
        problems.append("a tool_use environment must set the class attribute 'tools' (OpenAI-style function schemas)")
    return problems


def _check_literal(
    assigned: dict[str, ast.expr | None], name: str, kind: type, ok: Callable[[Any], bool], expected: str
) -> list[str]:
    value = assigned.get(name)
    if not isinstance(value, ast.Constant):
        return []  # computed values are checked when the program loads
    if type(value.value) is not kind or not ok(value.value):
        return [f"line {value.lineno}: Env.{name} = {value.value!r}; expected {expected}"]
    return []


def _max_depth(tree: ast.AST) -> int:
    """Deepest nesting of nodes in ``tree`` (iterative: a deep tree cannot exhaust the stack)."""
    deepest, stack = 0, [(tree, 1)]
    while stack:
        node, depth = stack.pop()
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return deepest


def _defines_name(node: ast.stmt, name: str) -> bool:
    if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
        return node.name == name
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Name) and t.id == name for t in node.targets)
    if isinstance(node, (ast.AnnAssign, ast.AugAssign)):
        return isinstance(node.target, ast.Name) and node.target.id == name
    if isinstance(node, (ast.Import, ast.ImportFrom)):
        return any((a.asname or a.name) == name for a in node.names)
    return False


# Difficulty knobs


def knob_nodes(tree: ast.Module) -> list[tuple[str, ast.Constant]]:
    """``(name, value node)`` of the module-level ``UPPERCASE = <int>`` assignments."""
    out = []
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if (
            isinstance(target, ast.Name)
            and target.id.isupper()
            and isinstance(value, ast.Constant)
            and type(value.value) is int
        ):
            out.append((target.id, value))
    return out


def knobs(source: str) -> dict[str, int]:
    """The difficulty knobs of a program: ``{name: value}`` of its module-level UPPERCASE int
    constants (``{}`` when it does not parse)."""
    with _AST_LOCK:
        tree = parse_module(source)
    return {} if tree is None else {name: cast(int, node.value) for name, node in knob_nodes(tree)}
