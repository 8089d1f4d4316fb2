"""The RestrictedPython policy, exercised in-process through ``ProgramHost`` (the worker's core).

These tests run program code in this process on purpose: they test the guards alone, fast. The
same programs run through the real sandbox in ``test_sandbox.py`` and the corpora tests.
"""

from __future__ import annotations

import random
import types

import pytest
from programs import program

from spade_gym import EnvProgram
from spade_gym.sandbox.policy import ALLOWED_MODULES, ModuleProxy, ProgramRuntime
from spade_gym.sandbox.worker import ProgramHost


def run(source: str, seed: int = 0, actions: tuple[str, ...] = ()) -> list[dict]:
    """Static check, load, reset and step in-process; return every response."""
    EnvProgram(source).check()
    host = ProgramHost()
    responses = [host.handle("load", {"source": source}), host.handle("reset", {"seed": seed})]
    responses += [host.handle("step", {"action": a}) for a in actions]
    return responses


def reset_value(source: str) -> object:
    responses = run(source)
    assert responses[0]["ok"], responses[0]
    assert responses[1]["ok"], responses[1]
    return responses[1]["value"][0]


def reset_error(source: str) -> dict:
    responses = run(source)
    assert responses[0]["ok"], responses[0]
    assert not responses[1]["ok"], responses[1]
    return responses[1]["error"]


def test_ordinary_python_that_models_write_is_accepted() -> None:
    source = program(
        preamble="""
        import random
        from collections import namedtuple, deque, Counter

        Point = namedtuple("Point", "x y")

        class Base:
            def __init__(self, size):
                self.size = size
                self._cells = {}

        class Board(Base):
            def __init__(self, size):
                super().__init__(size)
                self.moves = 0

            def __repr__(self):
                return "Board(" + str(self.size) + ")"
        """,
        reset="""
        self.t = 0
        self.board = Board(3)
        self.board.moves += 2
        self.board._cells["a"] = 1
        self.board._cells["a"] += 4
        self.counts = [0, 0]
        self.counts[1] *= 3
        self.counts[1] += 7
        p = Point(1, 2)._replace(y=5)
        pairs = sorted(zip((3, 1), tuple("ba")))
        q = deque([1]); q.appendleft(0)
        n = 0
        n += 1
        words = Counter("abca").most_common(1)
        text = "{} and {name}".format(p.y, name="x") + f"{self._helper():>4}" + "%s" % min(1, 2)
        return text + repr(self.board) + str(pairs) + str(list(q)) + str(words) + str(p._asdict()) + str(
            self.board._cells["a"] + self.board.moves + self.counts[1] + n), {}
        """,
        members="""
        def _helper(self):
            return max([1, 2, 3])
        """,
    )
    value = reset_value(source)
    assert value == "5 and x   31Board(3)[(1, 'a'), (3, 'b')][0, 1][('a', 2)]{'x': 1, 'y': 5}15"


@pytest.mark.parametrize(
    ("code", "message"),
    [
        ("getattr(self, '__' + 'class__')", "dunder attribute '__class__'"),
        ("getattr(random, 'Random')._randbelow", "is private"),
        ("'abc'._x", "is private"),
        ("'{0.__class__}'.format(self)", "reaches into attributes or items"),
        ("'{0[x]}'.format({'x': 1})", "reaches into attributes or items"),
        ("'{0:{1.real}}'.format(1, 2)", "reaches into attributes or items"),
        ("str.format('{0.real}', 1)", "reaches into attributes or items"),
        ("'{x.real}'.format_map({'x': 1})", "reaches into attributes or items"),
        ("random.SystemRandom", "exposes no attribute 'SystemRandom'"),
        ("random.Random and string.Formatter", "exposes no attribute 'Formatter'"),
        ("type(self)", "builtin type() is not available"),
        ("id(self)", "builtin id() is not available"),
        ("globals()", "builtin globals() is not available"),
        ("vars(self)", "builtin vars() is not available"),
        ("open('/etc/passwd')", "builtin open() is not available"),
        ("getattr(int, 'mro')()", "attribute 'mro' is not accessible"),
        ("getattr((i for i in []), 'gi_' + 'frame')", "attribute 'gi_frame' is not accessible"),
        ("setattr(random, 'random', 1)", "module 'random' is read-only"),
        ("setattr(str, 'x', 1)", "writing to a type object"),
        ("print('x', file=self)", "print(file=...) is not allowed"),
    ],
)
def test_runtime_guards_deny(code: str, message: str) -> None:
    error = reset_error(program(reset=f"x = {code}\nreturn 'never', {{}}", preamble="import random\nimport string"))
    assert error["category"] == "SANDBOX_DENIED"
    assert message in error["message"]
    assert error["message"].startswith("line ")


def test_violation_is_reported_even_when_the_program_swallows_it() -> None:
    source = program(
        reset="""
        try:
            getattr(self, '__dict__')
        except:
            pass
        return 'fine', {}
        """
    )
    error = reset_error(source)
    assert error["category"] == "SANDBOX_DENIED"


def test_except_exception_does_not_catch_a_guard() -> None:
    source = program(
        reset="""
        try:
            open('/etc/passwd')
        except Exception:
            return 'caught', {}
        return 'fell through', {}
        """
    )
    assert reset_error(source)["category"] == "SANDBOX_DENIED"


def test_modules_are_read_only() -> None:
    error = reset_error(program(reset="random.random = None\nreturn 'x', {}"))
    assert error["message"].endswith("module 'random' is read-only")


def test_no_module_proxy_exposes_a_module_or_a_withheld_name() -> None:
    runtime = ProgramRuntime()
    for name in ALLOWED_MODULES:
        proxy = runtime.modules[name]
        attrs = object.__getattribute__(proxy, "_ModuleProxy__attrs")
        assert attrs, name
        for attr, value in attrs.items():
            assert not isinstance(value, (types.ModuleType, ModuleProxy)), (name, attr)
            assert not attr.startswith("_"), (name, attr)
    assert "Formatter" not in object.__getattribute__(runtime.modules["string"], "_ModuleProxy__attrs")


def test_program_random_is_its_own_and_leaves_the_host_random_alone() -> None:
    state = random.getstate()
    runtime = ProgramRuntime(rng_seed=7)
    proxy = runtime.modules["random"]
    proxy.seed(123)
    drawn = [proxy.random() for _ in range(3)]
    assert random.getstate() == state
    assert drawn == [random.Random(123).random() for _ in range(1)] + drawn[1:]
    assert proxy.random.__self__ is runtime.rng


def test_class_bases_are_restricted() -> None:
    source = program(preamble="import json\n\nclass Bad(json.JSONDecoder):\n    pass", reset="return 'x', {}")
    response = run(source)[0]
    assert not response["ok"]
    assert "may not derive from JSONDecoder" in response["error"]["message"]


def test_print_is_captured_and_capped() -> None:
    host = ProgramHost(max_print_bytes=100)
    assert host.handle("load", {"source": program(reset="print('hello', 42)\nreturn 'x', {}")})["ok"]
    response = host.handle("reset", {"seed": 0})
    assert response["ok"] and response["printed"] == "hello 42\n"
    host = ProgramHost(max_print_bytes=100)
    host.handle("load", {"source": program(reset="for i in range(50):\n    print('line', i)\nreturn 'x', {}")})
    response = host.handle("reset", {"seed": 0})
    assert response["error"]["category"] == "OUTPUT_LIMIT"


def test_exceptions_become_text_with_the_program_line() -> None:
    error = reset_error(program(reset="x = 1\ny = {}['missing']\nreturn 'x', {}"))
    assert error["category"] == "ENV_EXCEPTION"
    assert error["message"].startswith("KeyError at line")
    assert "y = {}['missing']" in error["traceback"]
