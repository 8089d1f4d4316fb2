"""The RestrictedPython policy: what an environment program may say, and what it may touch.

RestrictedPython's stock transformer is both leaky (allowed modules reach ``sys`` and ``open``
through public attributes, ``str.format`` walks attributes in C) and too strict (it rejects
``self.t += 1``, ``self._x`` and ``super()``). Our policy has two halves:

* compile time, :class:`ProgramTransformer`: widens the stock policy (see there) and still refuses
  dunder names, frame attributes, ``exec``/``eval``, ``async``, ``nonlocal``, metaclasses and every
  guard name ``_x_``;
* run time, :class:`ProgramRuntime`: the guards and builtins of a program's globals, read-only
  module proxies, a per-program ``random``, a capped ``print``, and a record of the first violation
  (reported even when the program catches the guard's exception).

It runs inside the worker (and on the host for the static check) and imports nothing heavier than
RestrictedPython.
"""

from __future__ import annotations

import ast
import builtins
import collections
import importlib
import operator
import os
import random
import string
import types
from collections.abc import Callable
from typing import Any

from RestrictedPython import compile_restricted_exec
from RestrictedPython.Guards import guarded_iter_unpack_sequence, guarded_unpack_sequence
from RestrictedPython.transformer import INSPECT_ATTRIBUTES, RestrictingNodeTransformer

from spade_gym.errors import Category, GuardViolation

__all__ = [
    "ALLOWED_MODULES",
    "PROGRAM_FILENAME",
    "GuardViolation",
    "ProgramTransformer",
    "compile_program",
    "ProgramRuntime",
]

#: Modules an environment program may import (docs/DESIGN.md, "The environment program contract").
ALLOWED_MODULES: tuple[str, ...] = tuple(
    "math random re string itertools collections heapq bisect fractions json".split()
)

#: The file name program code is compiled under; tracebacks keep only frames from it.
PROGRAM_FILENAME = "<env_program>"

#: Magic methods a program class may define (RestrictedPython allows only eight).
ALLOWED_MAGIC_METHODS = frozenset(
    """__init__ __repr__ __str__ __eq__ __ne__ __lt__ __le__ __gt__ __ge__ __hash__ __len__
    __contains__ __iter__ __next__ __getitem__ __setitem__ __delitem__ __bool__ __call__
    __add__ __radd__ __sub__ __rsub__ __mul__ __rmul__ __truediv__ __rtruediv__ __floordiv__
    __rfloordiv__ __mod__ __rmod__ __neg__ __pos__ __abs__ __enter__ __exit__""".split()
)

#: Attribute names denied at run time whatever the object (frames, code, generators, ...).
DENIED_ATTRIBUTES = frozenset(INSPECT_ATTRIBUTES) | {"mro", "gi_frame", "cr_frame", "ag_frame"}

#: Public single-underscore API of ``collections.namedtuple`` classes.
NAMEDTUPLE_API = frozenset({"_asdict", "_replace", "_fields", "_make", "_field_defaults"})

#: Builtins whose use is a violation (called, they raise a classified ``SANDBOX_DENIED``).
DENIED_BUILTINS = tuple(
    "type id open eval exec compile globals locals vars dir input breakpoint memoryview help exit quit".split()
)

SAFE_BUILTIN_NAMES = (
    "abs all any ascii bin bool bytearray bytes callable chr classmethod complex dict divmod "
    "enumerate filter float format frozenset hash hex int isinstance issubclass iter len list map "
    "max min next object oct ord pow property range repr reversed round set slice sorted "
    "staticmethod str sum super tuple zip None True False Ellipsis NotImplemented"
).split()

#: ``(ast operator, its augmented-assignment text, the in-place function)``.
_INPLACE = (
    (ast.Add, "+=", operator.iadd),
    (ast.Sub, "-=", operator.isub),
    (ast.Mult, "*=", operator.imul),
    (ast.Div, "/=", operator.itruediv),
    (ast.FloorDiv, "//=", operator.ifloordiv),
    (ast.Mod, "%=", operator.imod),
    (ast.Pow, "**=", operator.ipow),
    (ast.LShift, "<<=", operator.ilshift),
    (ast.RShift, ">>=", operator.irshift),
    (ast.BitOr, "|=", operator.ior),
    (ast.BitXor, "^=", operator.ixor),
    (ast.BitAnd, "&=", operator.iand),
    (ast.MatMult, "@=", operator.imatmul),
)
_INPLACE_OPS: dict[str, Callable[[Any, Any], Any]] = {text: fn for _, text, fn in _INPLACE}
_AST_OP_TO_STR: dict[type, str] = {op: text for op, text, _ in _INPLACE}
_DUNDER_ATTRIBUTE = (
    '"{}" is an invalid attribute name: attributes starting with "__" are not accessible to environment programs.'
)


def _is_private_name(name: str) -> bool:
    """A single-underscore name a program may use: ``_x`` but not ``__x`` nor a guard ``_x_``."""
    return (
        name.startswith("_")
        and not name.startswith("__")
        and not (name.endswith("_") and len(name) > 1)
        and name != "_print"
    )


class ProgramTransformer(RestrictingNodeTransformer):
    """RestrictedPython's transformer, widened to the ordinary Python that models write.

    It allows single-underscore names and attributes (still guarded at run time), the magic methods
    of :data:`ALLOWED_MAGIC_METHODS` inside classes, ``super().__init__``, and lowers ``obj.attr op= v``
    and ``obj[k] op= v`` to ``_inplace_attr_(obj, "attr", "op=", v)`` and ``_inplace_item_(obj, k, "op=", v)``.
    """

    def check_name(self, node: Any, name: str | None, allow_magic_methods: bool = False) -> None:
        if name is not None:
            magic = allow_magic_methods and name in ALLOWED_MAGIC_METHODS and getattr(node, "col_offset", 0) != 0
            if _is_private_name(name) or magic:
                return
            if name.startswith("__"):
                self.error(node, f'"{name}" is an invalid name: names starting with "__" are reserved for the sandbox.')
                return
        super().check_name(node, name, allow_magic_methods=allow_magic_methods)

    def visit_Attribute(self, node: ast.Attribute) -> Any:
        if _is_private_name(node.attr) or (node.attr == "__init__" and _is_super_call(node.value)):
            # Let the stock visitor lower it, without its underscore test.
            original = node.attr
            node.attr = "x"
            new = super().visit_Attribute(node)
            if isinstance(new, ast.Call):  # load: _getattr_(value, "x")
                new.args[1] = ast.copy_location(ast.Constant(original), new.args[1])
            elif isinstance(new, ast.Attribute):  # store / del: _write_(value).x
                new.attr = original
            return new
        if node.attr.startswith("__"):
            self.error(node, _DUNDER_ATTRIBUTE.format(node.attr))
            return node
        return super().visit_Attribute(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> Any:
        target = node.target
        op = _AST_OP_TO_STR[type(node.op)]  # every operator is listed
        if isinstance(target, ast.Attribute):
            self._check_attribute_name(target)
            hook, obj, key = "_inplace_attr_", self.visit(target.value), ast.Constant(target.attr)
        elif isinstance(target, ast.Subscript):
            if isinstance(target.slice, ast.Slice):
                self.error(node, "Augmented assignment to a slice is not supported; write x[a:b] = x[a:b] + y.")
                return node
            hook, obj = "_inplace_item_", self.visit(target.value)
            key = self.visit(target.slice)
        else:
            return super().visit_AugAssign(node)
        args = [obj, key, ast.Constant(op), self.visit(node.value)]
        new_node = ast.Expr(value=ast.Call(func=ast.Name(hook, ast.Load()), args=args, keywords=[]))
        return ast.fix_missing_locations(ast.copy_location(new_node, node))

    def _check_attribute_name(self, node: ast.Attribute) -> None:
        attr = node.attr
        if attr.startswith("_") and not _is_private_name(attr):
            self.error(node, _DUNDER_ATTRIBUTE.format(attr))
        if attr in INSPECT_ATTRIBUTES:
            self.error(node, f'"{attr}" is a restricted name, that is forbidden to access in RestrictedPython.')


def _is_super_call(node: ast.AST) -> bool:
    return (
        isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "super" and not node.keywords
    )


def compile_program(source: str, filename: str = PROGRAM_FILENAME) -> tuple[types.CodeType | None, list[str]]:
    """Compile ``source`` under :class:`ProgramTransformer`.

    Returns:
        ``(code, [])``, or ``(None, messages)`` each naming a line when the program is refused.
    """
    try:
        result = compile_restricted_exec(source, filename=filename, policy=ProgramTransformer)
    except (RecursionError, MemoryError, ValueError, SyntaxError) as exc:
        return None, [f"the program could not be compiled: {type(exc).__name__}: {exc}"[:500]]
    if result.errors or result.code is None:
        return None, list(result.errors) or ["the restricted compiler produced no code"]
    return result.code, []


class ModuleProxy:
    """A read-only view of one allow-listed module exposing only ``attrs`` (none of them a module)."""

    __slots__ = ("__name", "__attrs", "__deny")

    def __init__(self, name: str, attrs: dict[str, Any], deny: Callable[[str], GuardViolation]) -> None:
        object.__setattr__(self, "_ModuleProxy__name", name)
        object.__setattr__(self, "_ModuleProxy__attrs", attrs)
        object.__setattr__(self, "_ModuleProxy__deny", deny)

    def __getattribute__(self, attr: str) -> Any:
        # Every lookup lands here (``from json import _ModuleProxy__attrs`` uses the real getattr):
        # only the allowed attributes exist.
        attrs = object.__getattribute__(self, "_ModuleProxy__attrs")
        if attr in attrs:
            return attrs[attr]
        name = object.__getattribute__(self, "_ModuleProxy__name")
        raise object.__getattribute__(self, "_ModuleProxy__deny")(
            f"module {name!r} exposes no attribute {attr!r} to environment programs"
        )

    def __setattr__(self, attr: str, value: Any) -> None:
        name = object.__getattribute__(self, "_ModuleProxy__name")
        raise object.__getattribute__(self, "_ModuleProxy__deny")(f"module {name!r} is read-only")

    __delattr__ = __setattr__  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"<module {object.__getattribute__(self, '_ModuleProxy__name')!r} (read-only)>"


_MODULES = {name: importlib.import_module(name) for name in ALLOWED_MODULES}
#: Public attributes withheld from programs, per module.
_WITHHELD = {
    "string": {"Formatter"},  # get_field() walks attributes with the real getattr
    "random": {"SystemRandom"},  # os.urandom: nondeterministic by design
    "collections": {"UserString"},  # its format() calls the real str.format on its data
}
_RANDOM_FUNCTIONS = (
    "seed random uniform triangular randint choice randrange sample shuffle choices normalvariate "
    "lognormvariate expovariate vonmisesvariate gammavariate gauss betavariate paretovariate "
    "weibullvariate getstate setstate getrandbits randbytes binomialvariate"
).split()

_COLLECTIONS = (collections.OrderedDict, collections.Counter, collections.defaultdict, collections.deque)
# Classes a program class may derive from (besides builtin exceptions and its own classes).
_ALLOWED_BASES: frozenset[type] = frozenset({object, dict, list, set, tuple, random.Random, *_COLLECTIONS})
_WRITABLE_BUILTIN_TYPES = (dict, list, set, bytearray, *_COLLECTIONS)


def _check_format_string(fmt: str, deny: Callable[[str], GuardViolation], depth: int = 0) -> None:
    """Refuse ``str.format`` fields that traverse attributes or items (``{0.x}``, ``{0[k]}``)."""
    if depth > 2:
        raise deny("format specifications nested too deeply")
    try:
        parsed = list(string.Formatter().parse(fmt))
    except ValueError:
        return  # str.format itself will raise the same ValueError
    for _literal, field, spec, _conversion in parsed:
        if field and ("." in field or "[" in field):
            raise deny(
                f"str.format field {{{field}}} reaches into attributes or items; "
                "format plain values (f-strings or concatenation) instead"
            )
        if spec:
            _check_format_string(spec, deny, depth + 1)


class ProgramRuntime:
    """The execution environment of one program instance: its globals (guards, builtins, module
    proxies), the classes it defined, the capped ``print`` buffer and the violation record.

    Args:
        max_print_bytes: cap on ``print`` output per call, bytes of UTF-8.
        rng_seed: seed of the module-level ``random`` functions; ``None``: from ``os.urandom``, so
            a program relying on them is visibly nondeterministic.
    """

    def __init__(self, max_print_bytes: int = 64 * 1024, rng_seed: int | None = None) -> None:
        self.max_print_bytes = max_print_bytes
        self.program_classes: set[type] = set()
        self.violation: GuardViolation | None = None
        self._printed: list[str] = []
        self._printed_bytes = 0
        seed = rng_seed if rng_seed is not None else int.from_bytes(os.urandom(8), "big")
        self.rng = random.Random(seed)
        self.modules = {name: self._make_proxy(name) for name in ALLOWED_MODULES}
        self.globals: dict[str, Any] = self._make_globals()

    # -- violations and output -------------------------------------------------------------------
    def deny(self, message: str, category: str = Category.SANDBOX_DENIED) -> GuardViolation:
        """Record a violation (the first of the call is kept) and return the signal to raise."""
        exc = GuardViolation(message, category)
        if self.violation is None:
            self.violation = exc
        return exc

    def begin_call(self) -> None:
        """Reset the per-call print buffer and violation record."""
        self.violation = None
        self._printed = []
        self._printed_bytes = 0

    def printed(self) -> str:
        """Text the program printed during the current call (at most ``max_print_bytes``)."""
        return "".join(self._printed)

    def _print(self, *objects: Any, sep: Any = " ", end: Any = "\n", file: Any = None, flush: bool = False) -> None:
        if file is not None:
            raise self.deny("print(file=...) is not allowed; programs cannot write to files")
        sep = " " if sep is None else sep
        end = "\n" if end is None else end
        if not isinstance(sep, str) or not isinstance(end, str):
            raise TypeError("print() sep and end must be str")
        parts, chars = [], self._printed_bytes
        for i, obj in enumerate(objects):  # stop at the cap before building one huge string
            part = (sep if i else "") + str(obj)
            chars += len(part)
            if chars > self.max_print_bytes:
                break
            parts.append(part)
        text = "".join(parts) + end
        size = self._printed_bytes + len(text.encode("utf-8", "replace"))
        if chars > self.max_print_bytes or size > self.max_print_bytes:
            raise self.deny(
                f"print output exceeded {self.max_print_bytes} bytes in one call", category=Category.OUTPUT_LIMIT
            )
        self._printed.append(text)
        self._printed_bytes = size

    # -- module proxies ---------------------------------------------------------------------------
    def _make_proxy(self, name: str) -> ModuleProxy:
        module = _MODULES[name]
        withheld = _WITHHELD.get(name, set())
        attrs = {
            key: value
            for key, value in vars(module).items()
            if not key.startswith("_") and not isinstance(value, types.ModuleType) and key not in withheld
        }
        if name == "random":
            for fn in _RANDOM_FUNCTIONS:
                if hasattr(self.rng, fn):
                    attrs[fn] = getattr(self.rng, fn)
        return ModuleProxy(name, attrs, self.deny)

    def _import(self, name: str, globals: Any = None, locals: Any = None, fromlist: Any = (), level: int = 0) -> Any:
        if level != 0:
            raise self.deny("relative imports are not allowed")
        if name not in self.modules:
            raise self.deny(
                f"import of {name!r} is not allowed; environment programs may import only " + ", ".join(ALLOWED_MODULES)
            )
        return self.modules[name]

    # -- classes ----------------------------------------------------------------------------------
    def _build_class(self, name: str, bases: tuple[type, ...], namespace: dict[str, Any]) -> type:
        for base in bases:
            if not isinstance(base, type):
                raise self.deny(f"class {name} derives from {base!r}, which is not a class")
            if not (
                base in self.program_classes
                or base in _ALLOWED_BASES
                or (issubclass(base, BaseException) and base.__module__ == "builtins")
            ):
                raise self.deny(
                    f"class {name} may not derive from {base.__name__}; use object, a builtin "
                    "exception, a plain container or one of the program's own classes"
                )
        cls = type(name, bases, namespace)
        self.program_classes.add(cls)
        return cls

    def _is_program_object(self, obj: Any) -> bool:
        if isinstance(obj, type):
            return obj in self.program_classes
        if isinstance(obj, super):
            return getattr(obj, "__thisclass__", None) in self.program_classes
        return type(obj) in self.program_classes or any(cls in self.program_classes for cls in type(obj).__mro__[1:])

    # -- guards -----------------------------------------------------------------------------------
    def _check_attr(self, obj: Any, name: Any) -> None:
        if type(name) is not str:
            raise self.deny("attribute names must be str")
        if name in DENIED_ATTRIBUTES:
            raise self.deny(f"attribute {name!r} is not accessible to environment programs")
        if name.startswith("_"):
            if name == "__init__" and isinstance(obj, super) and self._is_program_object(obj):
                return
            if name.startswith("__"):
                raise self.deny(f"dunder attribute {name!r} is not accessible to environment programs")
            if self._is_program_object(obj):
                return
            cls = obj if isinstance(obj, type) else type(obj)  # a namedtuple class or instance
            if name in NAMEDTUPLE_API and issubclass(cls, tuple) and hasattr(cls, "_fields"):
                return
            raise self.deny(
                f"attribute {name!r} of a {type(obj).__name__} is private; only the program's own "
                "classes may use single-underscore attributes"
            )

    def _getattr(self, obj: Any, name: Any, *default: Any) -> Any:
        self._check_attr(obj, name)
        if name in ("format", "format_map") and (obj is str or isinstance(obj, str)):
            return self._safe_format(obj, name)
        return getattr(obj, name, *default)

    def _hasattr(self, obj: Any, name: Any) -> bool:
        self._check_attr(obj, name)
        return hasattr(obj, name)

    def _setattr(self, obj: Any, name: Any, value: Any) -> None:
        self._check_attr(obj, name)
        setattr(self._write(obj), name, value)

    def _delattr(self, obj: Any, name: Any) -> None:
        self._check_attr(obj, name)
        delattr(self._write(obj), name)

    def _safe_format(self, obj: Any, name: str) -> Callable[..., str]:
        deny = self.deny
        if obj is str:  # unbound: str.format(fmt, *args)

            def unbound(fmt: Any, *args: Any, **kwargs: Any) -> str:
                if not isinstance(fmt, str):
                    raise TypeError(f"str.{name} needs a str")
                _check_format_string(fmt, deny)
                return getattr(str, name)(fmt, *args, **kwargs)

            return unbound

        def bound(*args: Any, **kwargs: Any) -> str:
            _check_format_string(obj, deny)
            return getattr(obj, name)(*args, **kwargs)

        return bound

    def _write(self, obj: Any) -> Any:
        if isinstance(obj, ModuleProxy):
            raise self.deny(f"module {object.__getattribute__(obj, '_ModuleProxy__name')!r} is read-only")
        if self._is_program_object(obj) and not isinstance(obj, super):
            return obj
        if isinstance(obj, types.FunctionType) and obj.__globals__ is self.globals:
            return obj
        if type(obj) in _WRITABLE_BUILTIN_TYPES:
            return obj
        raise self.deny(f"writing to a {type(obj).__name__} object is not allowed")

    def _inplace_attr(self, obj: Any, name: str, op: str, value: Any) -> None:
        target = self._write(obj)
        current = self._getattr(obj, name)
        setattr(target, name, _INPLACE_OPS[op](current, value))

    def _inplace_item(self, obj: Any, key: Any, op: str, value: Any) -> None:
        target = self._write(obj)
        target[key] = _INPLACE_OPS[op](obj[key], value)

    def _inplacevar(self, op: str, x: Any, y: Any) -> Any:
        return _INPLACE_OPS[op](x, y)

    def _denied_builtin(self, name: str) -> Callable[..., Any]:
        def denied(*args: Any, **kwargs: Any) -> Any:
            raise self.deny(f"builtin {name}() is not available to environment programs")

        denied.__name__ = name
        return denied

    def _make_globals(self) -> dict[str, Any]:
        runtime = self

        class PrintCollector:
            """Target of RestrictedPython's ``print`` rewrite: ``_print._call_print(...)``."""

            def __init__(self, _getattr_: Any = None) -> None:
                pass

            def _call_print(self, *objects: Any, **kwargs: Any) -> None:
                runtime._print(*objects, **kwargs)

            def __call__(self) -> str:
                return runtime.printed()

        safe: dict[str, Any] = {name: getattr(builtins, name) for name in SAFE_BUILTIN_NAMES}
        safe.update((n, v) for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException))
        safe.update((name, self._denied_builtin(name)) for name in DENIED_BUILTINS)
        safe["getattr"] = self._getattr
        safe["hasattr"] = self._hasattr
        safe["setattr"] = self._setattr
        safe["delattr"] = self._delattr
        safe["__import__"] = self._import
        safe["print"] = self._print
        safe["__build_class__"] = builtins.__build_class__
        return {
            "__builtins__": safe,
            "__name__": "env_program",
            "__metaclass__": self._build_class,
            "_getattr_": self._getattr,
            "_getitem_": operator.getitem,
            "_getiter_": iter,
            "_write_": self._write,
            "_inplacevar_": self._inplacevar,
            "_inplace_attr_": self._inplace_attr,
            "_inplace_item_": self._inplace_item,
            "_iter_unpack_sequence_": guarded_iter_unpack_sequence,
            "_unpack_sequence_": guarded_unpack_sequence,
            "_apply_": lambda f, *a, **kw: f(*a, **kw),
            "_print_": PrintCollector,
        }
