"""The environment contract as the Designer meets it: a skeleton to fill per setting
(:func:`skeleton`), a static lint of a program's form (:func:`contract_problems`, each problem naming
its line), and the one repair of form made on the host (:func:`rename_env_class`).
"""

from __future__ import annotations

import ast
import re
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = [
    "ContractProblem",
    "SKELETON_SETTINGS",
    "contract_problems",
    "parse_module",
    "rename_env_class",
    "replace_spans",
    "skeleton",
    "unfilled_placeholders",
]

_REASONING = '''import random

# TODO: difficulty knobs of your task, module-level UPPERCASE ints


class Env:
    """<your task in one paragraph: what the agent is asked, what it answers, how it is scored>"""

    name = "<YourTaskName>"
    setting = "reasoning"
    max_turns = 2

    def reset(self, seed):
        rng = random.Random(seed)
        self.turn = 0
        # TODO: draw this episode's task from rng; set self.answer (a str that differs between seeds,
        # not yes/no) and observation (a str: the task and the form of the answer)
        return observation, {}

    def step(self, action):
        self.turn += 1
        correct = action.strip().lower() == self.answer.lower()
        reward = 1.0 if correct and self.turn == 1 else (0.5 if correct else 0.0)
        terminated = correct or self.turn >= self.max_turns
        observation = "Correct." if correct else "Wrong, try again."
        return observation, reward, terminated, False, {"correct": correct}

    def hint(self):
        # TODO: return a str that helps with this episode (a method, a partial result), never self.answer

    def oracle(self):
        return self.answer
'''

_TOOL_USE = '''import json
import random

# TODO: TOOLS, a list of OpenAI-style function schemas: one tool that looks a record up, and
# {"type": "function", "function": {"name": "submit", "description": "Submit the final answer.",
#  "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}}


class Env:
    """<your task in one paragraph: what the tools reveal, what the agent submits, how it is scored>"""

    name = "<YourTaskName>"
    setting = "tool_use"
    max_turns = 6
    tools = TOOLS

    def reset(self, seed):
        rng = random.Random(seed)
        self.turn = 0
        # TODO: draw from rng self.records (a dict: the key your look-up tool takes -> what it returns),
        # self.answer (a str the records are needed for) and observation (a str: the task, the tools to call)
        return observation, {}

    def step(self, action):
        self.turn += 1
        truncated = self.turn >= self.max_turns
        try:
            call = json.loads(action)
            name, args = call["name"], dict(call["arguments"])
        except (ValueError, KeyError, TypeError):
            return 'Call a tool: {"name": ..., "arguments": {...}}', 0.0, False, truncated, {}
        if name == "submit":
            correct = str(args.get("answer", "")).strip().lower() == self.answer.lower()
            return ("Correct." if correct else "Wrong."), (1.0 if correct else 0.0), True, False, {"correct": correct}
        # TODO: answer your look-up tool: return (str(record or "not found"), 0.0, False, truncated, {})
        return "Unknown tool.", 0.0, False, truncated, {}

    def hint(self):
        # TODO: return a str saying which record to look up and why, never self.answer

    def oracle(self):
        return json.dumps({"name": "submit", "arguments": {"answer": self.answer}})
'''

_GAME = '''import random

# TODO: difficulty knobs of your game, module-level UPPERCASE ints


class Env:
    """<your game in one paragraph: the position, the moves, how it is won and scored>"""

    name = "<YourGameName>"
    setting = "game"
    max_turns = 12

    def reset(self, seed):
        rng = random.Random(seed)
        self.turn = 0
        # TODO: draw this episode's position from rng into attributes of self (no fixed move may win every seed)
        return self._show(), {}

    def _moves(self):
        # TODO: return the legal moves now, a list of str

    def _show(self):
        # TODO: return a str showing the position and the legal moves

    def step(self, action):
        self.turn += 1
        move = action.strip().lower()
        if move not in self._moves():
            return "Illegal move. " + self._show(), 0.0, False, self.turn >= self.max_turns, {"legal": False}
        # TODO: apply the move to the position; set won (a bool)
        truncated = not won and self.turn >= self.max_turns
        return self._show(), (1.0 if won else 0.0), won, truncated, {"legal": True}

    def hint(self):
        # TODO: return a str with a strategy for this position, never the whole move sequence

    def oracle(self):
        # TODO: return the best legal move now, a str
'''

_SKELETONS = {"reasoning": _REASONING, "tool_use": _TOOL_USE, "game": _GAME}
#: The settings that have a skeleton (all three).
SKELETON_SETTINGS = tuple(_SKELETONS)


def skeleton(setting: str) -> str:
    """The module to fill for ``setting`` (``"reasoning"``, ``"tool_use"`` or ``"game"``): exact
    signatures and return shapes, ``# TODO:`` lines where the task goes. ValueError otherwise."""
    if setting not in _SKELETONS:
        raise ValueError(f"setting must be one of {SKELETON_SETTINGS}, got {setting!r}")
    return _SKELETONS[setting]


def parse_module(source: str) -> ast.Module | None:
    """``ast.parse(source)``, or ``None`` for a module that does not parse (a hostile one included)."""
    try:
        return ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None


#: Where ast starts a new line: after "\n", "\r\n" or a lone "\r".
_LINE_BREAK = re.compile(r"(?<=\n)|(?<=\r)(?!\n)")


def replace_spans(source: str, spans: Iterable[tuple[int, int, int, str]]) -> str:
    """``source`` with each ``(line, start, end, text)`` span replaced by ``text``; ``line`` is 1-based
    and ``start``/``end`` are UTF-8 byte columns, as ast gives them. Spans must not overlap."""
    lines = _LINE_BREAK.split(source)
    # right to left, so that two spans on one line keep their offsets
    for line, start, end, text in sorted(spans, reverse=True):
        raw = lines[line - 1].encode("utf-8")
        lines[line - 1] = (raw[:start] + text.encode("utf-8") + raw[end:]).decode("utf-8")
    return "".join(lines)


@dataclass(frozen=True)
class ContractProblem:
    """One slip of form: ``line`` (1-based, 0 for the whole module), ``message``, and ``expected``
    (the form the contract asks for, as code)."""

    line: int
    message: str
    expected: str = ""


_SIGNATURES = {
    "reset": ("reset(self, seed)", "return observation, info  # (str, dict)", 2),
    "step": (
        "step(self, action)",
        "return observation, reward, terminated, truncated, info  # (str, float, bool, bool, dict)",
        5,
    ),
    "hint": ("hint(self)", "return text  # str", 0),
    "oracle": ("oracle(self)", "return action  # str", 0),
}


def _classes(tree: ast.Module) -> list[ast.ClassDef]:
    return [node for node in tree.body if isinstance(node, ast.ClassDef)]


def _methods(cls: ast.ClassDef) -> dict[str, ast.FunctionDef]:
    return {node.name: node for node in cls.body if isinstance(node, ast.FunctionDef)}


def _assigned(cls: ast.ClassDef) -> set[str]:
    names: set[str] = set()
    for node in cls.body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        names.update(t.id for t in targets if isinstance(t, ast.Name))
    return names


def _returns(function: ast.FunctionDef) -> list[ast.Return]:
    """The return statements of ``function`` itself (not of nested functions or lambdas)."""
    found: list[ast.Return] = []
    stack: list[ast.AST] = list(function.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Return):
            found.append(node)
        elif not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda | ast.ClassDef):
            stack.extend(ast.iter_child_nodes(node))
    return sorted(found, key=lambda r: r.lineno)


def _setting(cls: ast.ClassDef) -> str | None:
    for node in cls.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "setting" for t in node.targets):
            if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
                return node.value.value
    return None


def contract_problems(source: str) -> list[ContractProblem]:
    """The contract's slips of form in ``source``, found without running it, in line order: one class,
    named ``Env``, setting its members and defining its methods with the contract's parameters; every
    ``return`` of ``reset`` a 2-tuple and of ``step`` a 5-tuple. A module that does not parse gives
    one problem at its line."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        return [ContractProblem(exc.lineno or 0, f"syntax error: {exc.msg}"), *unfilled_placeholders(source)]
    except (ValueError, RecursionError, MemoryError) as exc:
        return [ContractProblem(0, f"the module does not parse: {exc}")]
    classes = _classes(tree)
    problems: list[ContractProblem] = []
    env = next((c for c in classes if c.name == "Env"), None)
    if env is None:
        if not classes:
            return [ContractProblem(0, "the module defines no class", "class Env:")]
        env = classes[0]
        problems.append(
            ContractProblem(
                env.lineno, f"the class is named {env.name}; the contract needs exactly `class Env:`", "class Env:"
            )
        )
    for other in classes:
        if other is not env:
            problems.append(
                ContractProblem(
                    other.lineno,
                    f"a second class {other.name}: the module may define only class Env (use dicts, lists or "
                    "methods of Env for helpers)",
                )
            )
    members = _assigned(env)
    wanted = ["name", "setting", "max_turns"] + (["tools"] if _setting(env) == "tool_use" else [])
    for member in wanted:
        if member not in members:
            expected = {
                "name": 'name = "NewCamelCaseName"',
                "setting": 'setting = "reasoning"  # or "tool_use" or "game"',
                "max_turns": "max_turns = 4",
                "tools": "tools = TOOLS  # a list of OpenAI-style function schemas",
            }[member]
            why = "a tool_use environment must list its tools" if member == "tools" else "a class attribute"
            problems.append(ContractProblem(env.lineno, f"class Env does not set {member} ({why})", expected))
    methods = _methods(env)
    for method, (signature, shape, arity) in _SIGNATURES.items():
        function = methods.get(method)
        if function is None:
            problems.append(ContractProblem(env.lineno, f"class Env has no method {method}", f"def {signature}:"))
            continue
        params = [a.arg for a in function.args.args]
        required = len(params) - len(function.args.defaults)
        want = 2 if method in ("reset", "step") else 1
        if required > want or (len(params) < want and function.args.vararg is None):
            problems.append(
                ContractProblem(
                    function.lineno,
                    f"{method} takes ({', '.join(params)}); the contract calls {signature}",
                    f"def {signature}:",
                )
            )
        if arity:
            for node in _returns(function):
                value = node.value
                if isinstance(value, ast.Tuple) and len(value.elts) != arity:
                    problems.append(
                        ContractProblem(
                            node.lineno, f"{method} returns a tuple of {len(value.elts)} values, not {arity}", shape
                        )
                    )
                elif value is None or (isinstance(value, ast.Constant) and value.value is None):
                    problems.append(ContractProblem(node.lineno, f"{method} returns nothing", shape))
    problems += unfilled_placeholders(source, tree)
    return sorted(problems, key=lambda p: p.line)


_ANGLE = re.compile(r"<[Yy]our [^<>\n]*>|<Your[A-Z]\w*>")  # the skeleton's own placeholders, not <answer> tags


_TODO = re.compile(r"^\s*# TODO:", re.MULTILINE)


def unfilled_placeholders(source: str, tree: ast.Module | None = None) -> list[ContractProblem]:
    """The skeleton's placeholders left in ``source``: its ``# TODO:`` lines, ``...`` used as a value
    or statement, and its ``<your ...>`` / ``<YourName>`` texts in a string; one problem per line."""
    todo = [
        ContractProblem(source.count("\n", 0, m.start()) + 1, "the skeleton's TODO is still here: write its code")
        for m in _TODO.finditer(source)
    ]
    tree = tree or parse_module(source)
    if tree is None:
        return todo
    lines: dict[int, str] = {p.line: p.message for p in todo}
    for node in ast.walk(tree):
        if not isinstance(node, ast.Constant):
            continue
        if node.value is Ellipsis:
            lines.setdefault(node.lineno, "the skeleton's `...` is still here: write your own code")
        elif isinstance(node.value, str) and (found := _ANGLE.search(node.value)):
            lines.setdefault(node.lineno, f"the skeleton's placeholder {found.group(0)!r} is still here")
    return [ContractProblem(line, message) for line, message in sorted(lines.items())]


_CLASS_LINE = re.compile(r"^class[ \t]+(\w+)\b", re.MULTILINE)


def rename_env_class(source: str) -> tuple[str, str | None]:
    """``(source, note)``: a module with no ``class Env`` whose only class defines ``reset`` and
    ``step`` gets that class renamed ``Env`` in code (not in strings); any other comes back with ``None``."""
    tree = parse_module(source)
    if tree is None:
        return source, None
    classes = _classes(tree)
    if len(classes) != 1 or classes[0].name == "Env" or not {"reset", "step"} <= set(_methods(classes[0])):
        return source, None
    old = classes[0].name
    if any(isinstance(n, ast.Name) and n.id == "Env" for n in ast.walk(tree)):
        return source, None  # the module already uses the name Env for something else
    spots = [(n.lineno, n.col_offset) for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == old]
    class_line = _LINE_BREAK.split(source)[classes[0].lineno - 1]
    header = _CLASS_LINE.match(class_line.lstrip())
    if header is None:  # a decorated class: its `class` line is not where the node starts
        return source, None
    spots.append((classes[0].lineno, len(class_line) - len(class_line.lstrip()) + header.start(1)))
    renamed = replace_spans(source, [(row, col, col + len(old.encode("utf-8")), "Env") for row, col in spots])
    return renamed, f"renamed class {old} to Env (the contract's class name)"
