"""Parametric environment families: environment programs whose difficulty is set by module-level
int constants, their **knobs** (``STEPS = 4``), ordered easy to hard: the environment parameters a
PAIRED adversary chooses (Dennis et al. 2020, NeurIPS, sec. 3-4), regret being the Agent's hint gap.
Built in (:data:`FAMILIES`): ``arithmetic`` and ``maze``; :class:`ChainSolverAgent` is a scripted
Agent with a known regret landscape on ``arithmetic``.
"""

from __future__ import annotations

import ast
import difflib
import json
import re
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from spade_gym.contract import replace_spans
from spade_gym.policies.base import Completion, Policy, Prompt, SamplingParams, resolve_sampling
from spade_gym.program import EnvProgram
from spade_gym.validation import ValidationConfig, ValidationReport, validate

__all__ = [
    "ARITHMETIC",
    "FAMILIES",
    "MAZE",
    "ChainSolverAgent",
    "EnvFamily",
    "FamilyInstance",
    "Knob",
    "get_family",
    "validate_instance",
]


@dataclass(frozen=True)
class Knob:
    """One difficulty knob: the template's constant ``name`` ranging over the ints ``low`` (easiest)
    to ``high`` (hardest). ``ValueError``: ``name`` is not an identifier, or ``low``/``high`` are not
    ints with ``low <= high``."""

    name: str
    low: int
    high: int
    doc: str = ""

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name.isidentifier():
            raise ValueError(f"Knob name must be a Python identifier (the template's constant), got {self.name!r}")
        for bound in ("low", "high"):
            value = getattr(self, bound)
            if isinstance(value, bool) or not isinstance(value, int):
                raise ValueError(f"Knob {self.name}: {bound} must be an int, got {value!r}")
        if self.low > self.high:
            raise ValueError(f"Knob {self.name}: low ({self.low}) must be <= high ({self.high})")

    @property
    def levels(self) -> int:
        """Number of values the knob takes, ``high - low + 1``."""
        return self.high - self.low + 1

    def value_at(self, fraction: float) -> int:
        """The value at ``fraction`` (clipped to [0, 1]) of the range, rounded half up."""
        fraction = min(max(float(fraction), 0.0), 1.0)
        return self.low + int(fraction * (self.high - self.low) + 0.5)

    def position(self, value: int) -> float:
        """Where ``value`` lies in the range, in [0, 1] (0 for a one-value knob)."""
        return 0.0 if self.high == self.low else (value - self.low) / (self.high - self.low)


@dataclass(frozen=True)
class EnvFamily:
    """A program ``template`` and its difficulty ``knobs``; the template must pass the static check
    and assign each knob an int literal exactly once at the top level. ``ValueError``: no knobs or
    duplicate names; the template fails the static check; a knob not assigned exactly once to an
    int literal, or outside its range.
    """

    name: str
    template: str
    knobs: tuple[Knob, ...]
    description: str = ""
    #: ``{knob: (line, start byte, end byte, template value)}`` of each knob's literal.
    _spans: dict[str, tuple[int, int, int, int]] = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"EnvFamily name must be a non-empty string, got {self.name!r}")
        object.__setattr__(self, "knobs", tuple(self.knobs))
        if not self.knobs:
            raise ValueError(f"family {self.name!r} needs at least one Knob")
        if any(not isinstance(k, Knob) for k in self.knobs):
            raise ValueError(f"family {self.name!r}: knobs must be Knob objects")
        names = [k.name for k in self.knobs]
        if len(set(names)) != len(names):
            raise ValueError(f"family {self.name!r}: duplicate knob names in {names}")
        if not isinstance(self.template, str):
            raise ValueError(f"family {self.name!r}: template must be program source text (str)")
        problems = EnvProgram(self.template, origin=f"family {self.name}").problems(restricted_compile=False)
        if problems:
            raise ValueError(
                f"the template of family {self.name!r} fails the static check:\n"
                + "\n".join(f"- {p}" for p in problems)
            )
        self._spans.update(_knob_spans(self.name, self.template, self.knobs))

    @property
    def knob_names(self) -> tuple[str, ...]:
        """The knobs' names, in order."""
        return tuple(k.name for k in self.knobs)

    def defaults(self) -> dict[str, int]:
        """The knob values written in the template."""
        return {name: span[3] for name, span in self._spans.items()}

    def resolve(self, values: Mapping[str, int] | Sequence[int] | None = None) -> dict[str, int]:
        """``{knob: value}`` for every knob in order, from ``{knob: int}`` (missing ones take the
        template's value), one int per knob, or ``None``. ``ValueError``: an unknown knob, a wrong
        number of values, or a value outside ``[low, high]``."""
        out = self.defaults()
        values = {} if values is None else values
        if not isinstance(values, Mapping):
            seq = list(values)
            if len(seq) != len(self.knobs):
                raise ValueError(
                    f"family {self.name!r} has {len(self.knobs)} knobs {list(self.knob_names)}, got {len(seq)} values"
                )
            values = dict(zip(self.knob_names, seq, strict=True))
        unknown = sorted(set(values) - set(self.knob_names))
        if unknown:
            raise ValueError(f"family {self.name!r} has no knob {unknown[0]!r}; its knobs: {list(self.knob_names)}")
        for knob in self.knobs:
            if knob.name not in values:
                continue
            value = values[knob.name]
            if hasattr(value, "item") and not isinstance(value, bool):  # a numpy integer
                value = value.item()
            if isinstance(value, bool) or not isinstance(value, int) or not knob.low <= value <= knob.high:
                raise ValueError(
                    f"knob {knob.name} of family {self.name!r} must be an int in [{knob.low}, {knob.high}], got {value!r}"
                )
            out[knob.name] = value
        return out

    def instantiate(self, values: Mapping[str, int] | Sequence[int] | None = None) -> EnvProgram:
        """The template with each knob's literal replaced (not validated); ValueError as :meth:`resolve`."""
        resolved = self.resolve(values)
        spans = [(line, start, end, repr(resolved[name])) for name, (line, start, end, _) in self._spans.items()]
        label = ",".join(f"{k}={v}" for k, v in resolved.items())
        return EnvProgram(replace_spans(self.template, spans), origin=f"family {self.name}[{label}]")

    def difficulty(self, values: Mapping[str, int] | Sequence[int] | None = None) -> float:
        """The mean position of the knobs within their ranges, in [0, 1]; ValueError as :meth:`resolve`."""
        resolved = self.resolve(values)
        return sum(k.position(resolved[k.name]) for k in self.knobs) / len(self.knobs)


def _knob_spans(family: str, template: str, knobs: Sequence[Knob]) -> dict[str, tuple[int, int, int, int]]:
    """``{knob: (line, start byte, end byte, value)}`` of each knob's literal in the template."""
    tree = ast.parse(template)
    found: dict[str, list[ast.Assign]] = {k.name: [] for k in knobs}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in found:
                found[node.targets[0].id].append(node)
    spans: dict[str, tuple[int, int, int, int]] = {}
    for knob in knobs:
        nodes = found[knob.name]
        if len(nodes) != 1:
            raise ValueError(
                f"knob {knob.name} of family {family!r} must be assigned exactly once at the top level of the "
                f"template (as '{knob.name} = <int>'), found {len(nodes)} assignments"
            )
        value = nodes[0].value
        try:
            literal = ast.literal_eval(value)
        except ValueError:
            literal = None
        if (
            isinstance(literal, bool)
            or not isinstance(literal, int)
            or value.end_lineno != value.lineno
            or value.end_col_offset is None
        ):
            raise ValueError(
                f"knob {knob.name} of family {family!r} must be assigned an int literal on one line "
                f"(e.g. '{knob.name} = {knob.low}')"
            )
        if not knob.low <= literal <= knob.high:
            raise ValueError(
                f"knob {knob.name} of family {family!r}: the template's value {literal} is outside [{knob.low}, {knob.high}]"
            )
        spans[knob.name] = (value.lineno, value.col_offset, value.end_col_offset, literal)
    return spans


@dataclass(frozen=True)
class FamilyInstance:
    """One instantiation of a family (by name), its knob values, program and gate report."""

    family: str
    values: dict[str, int]
    program: EnvProgram
    report: ValidationReport
    difficulty: float

    @property
    def accepted(self) -> bool:
        """Whether the validation gate accepted the program."""
        return self.report.accepted

    @property
    def label(self) -> str:
        """``"family[KNOB=v,...]"``, e.g. ``"arithmetic[STEPS=4,OPERAND_DIGITS=1]"``."""
        return f"{self.family}[" + ",".join(f"{k}={v}" for k, v in self.values.items()) + "]"


_CACHE_SIZE = 4096
_reports: OrderedDict[tuple[str, str], ValidationReport] = OrderedDict()
_reports_lock = threading.Lock()


def validate_instance(
    family: EnvFamily,
    values: Mapping[str, int] | Sequence[int] | None = None,
    config: ValidationConfig | None = None,
) -> FamilyInstance:
    """Instantiate ``family`` at ``values`` and run the validation gate on it (no novelty check).

    Reports are cached per process by (program id, gate configuration), the most recent 4096. A
    refused program is reported (``accepted`` false), never raised. ``ValueError``: bad knob values;
    ``SandboxSetupError``: no sandbox worker can be started on this machine.
    """
    resolved = family.resolve(values)
    program = family.instantiate(resolved)
    config = config or ValidationConfig()
    key = (program.id, json.dumps(config.to_dict(), sort_keys=True))
    with _reports_lock:
        report = _reports.get(key)
        if report is not None:
            _reports.move_to_end(key)
    if report is None:
        report = validate(program, config)
        with _reports_lock:
            _reports[key] = report
            while len(_reports) > _CACHE_SIZE:
                _reports.popitem(last=False)
    return FamilyInstance(family.name, resolved, program, report, family.difficulty(resolved))


_ARITHMETIC_TEMPLATE = '''\
import random
import re

STEPS = 4
OPERAND_DIGITS = 1
INT_ANSWER = re.compile(r"^\\s*(-?\\d{1,60})\\s*\\.?\\s*$")
ATTEMPT_REWARDS = [1.0, 0.5, 0.25]


def describe_op(op, k):
    if op == "add":
        return "add " + str(k)
    if op == "subtract":
        return "subtract " + str(k)
    return "multiply by " + str(k)


class Env:
    """Evaluate a seeded chain of integer operations (add, subtract, multiply) applied in order to a starting number and answer with the final value as a single integer; the length of the chain and the number of digits of its operands are the family's difficulty knobs, the agent has three attempts (a wrong answer is answered with too high or too low), and a correct answer pays 1.0, 0.5 or 0.25 on the first, second or third attempt."""

    name = "ParamArithmeticChain"
    setting = "reasoning"
    max_turns = 3

    def __init__(self):
        self.start = 0
        self.ops = []
        self.values = []
        self.answer = 0
        self.turn = 0
        self.done = False

    def reset(self, seed):
        rng = random.Random(seed)
        low = 2 if OPERAND_DIGITS == 1 else 10 ** (OPERAND_DIGITS - 1)
        high = 10 ** OPERAND_DIGITS - 1
        value = rng.randint(10, 99) if OPERAND_DIGITS == 1 else rng.randint(low, high)
        self.start = value
        self.ops = []
        self.values = []
        for i in range(STEPS):
            op = rng.choice(["add", "subtract", "multiply"])
            k = rng.randint(2, 9) if op == "multiply" else rng.randint(low, high)
            if op == "multiply" and value > 100000:
                op = "subtract"
                k = rng.randint(low, high)
            if op == "subtract" and value - k < 1:
                op = "add"
            if op == "add":
                value = value + k
            elif op == "subtract":
                value = value - k
            else:
                value = value * k
            self.ops.append([op, k])
            self.values.append(value)
        middle = STEPS // 2
        if middle >= 1 and self.values[middle - 1] == value and self.ops[-1][0] != "multiply":
            # the later steps cancel out: move the last operand by one, so the hint never states the answer
            self.ops[-1][1] += 1
            value = value + 1 if self.ops[-1][0] == "add" else value - 1
            self.values[-1] = value
        self.answer = value
        self.turn = 0
        self.done = False
        lines = ["Start with the number " + str(self.start) + " and apply these operations in order:"]
        for i in range(STEPS):
            lines.append("Step " + str(i + 1) + ": " + describe_op(self.ops[i][0], self.ops[i][1]))
        lines.append("What is the final value? Answer with a single integer. You have " + str(self.max_turns)
                     + " attempts; after a wrong answer you are told whether it was too high or too low.")
        return "\\n".join(lines), {"steps": STEPS, "operand_digits": OPERAND_DIGITS}

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {"correct": False}
        self.turn += 1
        left = self.max_turns - self.turn
        match = INT_ANSWER.match(str(action))
        reward = 0.0
        correct = False
        if match is None:
            obs = "Could not read a single integer from your answer; it counts as an attempt. Attempts left: " + str(left) + "."
        else:
            guess = int(match.group(1))
            if guess == self.answer:
                correct = True
                reward = ATTEMPT_REWARDS[self.turn - 1]
                obs = "Correct! The final value is " + str(self.answer) + "."
            elif guess > self.answer:
                obs = "Wrong: " + str(guess) + " is too high. Attempts left: " + str(left) + "."
            else:
                obs = "Wrong: " + str(guess) + " is too low. Attempts left: " + str(left) + "."
        truncated = (not correct) and self.turn >= self.max_turns
        self.done = correct or truncated
        return obs, reward, correct, truncated, {"correct": correct, "attempts_left": left}

    def hint(self):
        middle = len(self.ops) // 2
        if middle == 0:
            return "There is a single step: apply it to the starting number " + str(self.start) + "."
        return ("After step " + str(middle) + " the running value is " + str(self.values[middle - 1])
                + "; continue from there with step " + str(middle + 1) + ".")

    def oracle(self):
        return str(self.answer)
'''

_MAZE_TEMPLATE = '''\
import random
from collections import deque

SIZE = 5
WALLS = 2
MOVES = {"up": [-1, 0], "down": [1, 0], "left": [0, -1], "right": [0, 1]}
MOVE_ORDER = ["up", "down", "left", "right"]


def route(grid, start, goal):
    """The moves of a shortest route from start to goal (a list of move names), or None."""
    prev = {(start[0], start[1]): None}
    queue = deque([(start[0], start[1])])
    while queue:
        cur = queue.popleft()
        if cur == (goal[0], goal[1]):
            break
        for name in MOVE_ORDER:
            nr, nc = cur[0] + MOVES[name][0], cur[1] + MOVES[name][1]
            if 0 <= nr < SIZE and 0 <= nc < SIZE and grid[nr][nc] != "#" and (nr, nc) not in prev:
                prev[(nr, nc)] = [cur, name]
                queue.append((nr, nc))
    if (goal[0], goal[1]) not in prev:
        return None
    moves = []
    cur = (goal[0], goal[1])
    while prev[cur] is not None:
        moves.append(prev[cur][1])
        cur = prev[cur][0]
    moves.reverse()
    return moves


class Env:
    """Walk from @ to the goal G on a seeded square grid with walls (#): each turn move up, down, left or right; moving into a wall or off the grid wastes the turn, reaching G pays 1.0, and the grid size and wall density are the family's difficulty knobs."""

    name = "ParamGridMaze"
    setting = "game"
    max_turns = 4 * SIZE + 4

    def __init__(self):
        self.grid = []
        self.pos = [0, 0]
        self.goal = [0, 0]
        self.turn = 0
        self.done = False

    def reset(self, seed):
        rng = random.Random(seed)
        cells = [[r, c] for r in range(SIZE) for c in range(SIZE)]
        for attempt in range(60):
            grid = [["." for c in range(SIZE)] for r in range(SIZE)]
            for cell in cells:
                if rng.random() < WALLS / 10:
                    grid[cell[0]][cell[1]] = "#"
            if attempt == 59:
                grid = [["." for c in range(SIZE)] for r in range(SIZE)]
            start, goal = rng.sample(cells, 2)
            grid[start[0]][start[1]] = "."
            grid[goal[0]][goal[1]] = "."
            moves = route(grid, start, goal)
            if moves is not None and SIZE - 1 <= len(moves) <= 2 * SIZE + 2:
                break
        self.grid = grid
        self.pos = [start[0], start[1]]
        self.goal = [goal[0], goal[1]]
        self.turn = 0
        self.done = False
        return self.render("Find your way to G."), {"size": SIZE, "walls": WALLS}

    def render(self, message):
        rows = []
        for r in range(SIZE):
            row = ""
            for c in range(SIZE):
                if [r, c] == self.pos:
                    row += "@"
                elif [r, c] == self.goal:
                    row += "G"
                else:
                    row += self.grid[r][c]
            rows.append(row)
        return (message + "\\n" + "\\n".join(rows) + "\\nYou (@) are at row " + str(self.pos[0] + 1) + ", column "
                + str(self.pos[1] + 1) + "; G is at row " + str(self.goal[0] + 1) + ", column " + str(self.goal[1] + 1)
                + " (row 1 is the top). Moves left: " + str(self.max_turns - self.turn)
                + ". Answer with one move: up, down, left or right.")

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {"reached": False}
        self.turn += 1
        move = str(action).strip().lower()
        if move not in MOVES:
            message = "Unknown move; use up, down, left or right."
        else:
            nr, nc = self.pos[0] + MOVES[move][0], self.pos[1] + MOVES[move][1]
            if 0 <= nr < SIZE and 0 <= nc < SIZE and self.grid[nr][nc] != "#":
                self.pos = [nr, nc]
                message = "You moved " + move + "."
            else:
                message = "Blocked: you cannot move " + move + " from here."
        reached = self.pos == self.goal
        truncated = (not reached) and self.turn >= self.max_turns
        self.done = reached or truncated
        if reached:
            return "You reached G!", 1.0, True, False, {"reached": True}
        return self.render(message), 0.0, False, truncated, {"reached": False}

    def hint(self):
        moves = route(self.grid, self.pos, self.goal) or []
        half = moves[: (len(moves) + 1) // 2]
        return ("A shortest route takes " + str(len(moves)) + " moves; it begins with: " + ", ".join(half)
                + ". Walls never move.")

    def oracle(self):
        moves = route(self.grid, self.pos, self.goal)
        return moves[0] if moves else "up"
'''

#: The built-in ``arithmetic`` family (``ParamArithmeticChain``).
ARITHMETIC = EnvFamily(
    "arithmetic",
    _ARITHMETIC_TEMPLATE,
    (
        Knob("STEPS", 1, 10, "operations in the chain"),
        Knob("OPERAND_DIGITS", 1, 3, "digits of each added or subtracted operand"),
    ),
    "integer operation chains; the hint gives the running value halfway along",
)

#: The built-in ``maze`` family (``ParamGridMaze``).
MAZE = EnvFamily(
    "maze",
    _MAZE_TEMPLATE,
    (
        Knob("SIZE", 3, 7, "cells on a side of the square grid"),
        Knob("WALLS", 0, 4, "wall density in tenths of the cells"),
    ),
    "grid walks to a goal among walls; the hint gives the first half of a shortest route",
)

#: The built-in families by name.
FAMILIES: dict[str, EnvFamily] = {family.name: family for family in (ARITHMETIC, MAZE)}


def get_family(family: EnvFamily | str) -> EnvFamily:
    """A family by name (or the family itself); ValueError for an unknown name, TypeError for another type."""
    if isinstance(family, EnvFamily):
        return family
    if not isinstance(family, str):
        raise TypeError(f"a family is an EnvFamily or the name of a built-in one, got {type(family).__name__}")
    if family in FAMILIES:
        return FAMILIES[family]
    close = difflib.get_close_matches(family, list(FAMILIES), n=1)
    suggestion = f" Did you mean {close[0]!r}?" if close else ""
    raise ValueError(
        f"unknown environment family {family!r}; built-in families: {', '.join(FAMILIES)} "
        f"(or pass an EnvFamily of your own).{suggestion}"
    )


_START = re.compile(r"Start with the number (-?\d+)")
_STEP = re.compile(r"^Step (\d+): (add|subtract|multiply by) (-?\d+)\s*$", re.MULTILINE)
_HINT = re.compile(r"Hint: After step (\d+) the running value is (-?\d+)")


class ChainSolverAgent(Policy):
    """A scripted Agent for the ``arithmetic`` family that works out at most ``capacity`` (>= 0) steps.

    With the hint it needs only the steps after ``STEPS // 2``; within reach it answers correctly,
    else ``0``. So the regret is 1 for ``capacity < STEPS <= 2 * capacity`` and 0 otherwise.
    Deterministic; other prompts get ``<answer>0</answer>``. Raises ValueError for ``capacity < 0``.
    """

    context_window: int | None = None

    def __init__(self, capacity: int = 3) -> None:
        if isinstance(capacity, bool) or not isinstance(capacity, int) or capacity < 0:
            raise ValueError(f"capacity must be an int >= 0, got {capacity!r}")
        self.capacity = capacity
        self.name = f"chain-solver-{capacity}"

    def answer(self, observation: str) -> int | None:
        """The chain's value if within reach from the first ``observation`` (hint or not), else ``None``."""
        start = _START.search(observation)
        steps = _STEP.findall(observation)
        if start is None or not steps:
            return None
        value, done = int(start.group(1)), 0
        hint = _HINT.search(observation)
        if hint is not None:
            done, value = int(hint.group(1)), int(hint.group(2))
        if len(steps) - done > self.capacity:
            return None
        for _, op, k in steps[done:]:
            value = value + int(k) if op == "add" else value - int(k) if op == "subtract" else value * int(k)
        return value

    def generate(self, prompts: Sequence[Prompt], sampling: SamplingParams | None = None) -> list[Completion]:
        """``sampling.n`` completions per prompt, grouped by prompt, without token ids or logprobs."""
        sampling = resolve_sampling(sampling)
        out: list[Completion] = []
        for i, prompt in enumerate(prompts):
            # the first user message that states a chain (the worked format example comes before it)
            users = [m["content"] for m in prompt if m["role"] == "user"]
            first = next((u for u in users if _START.search(u)), users[0] if users else "")
            value = self.answer(first)
            text = f"<answer>{value}</answer>" if value is not None else "Too long for me. <answer>0</answer>"
            out.extend(Completion(text, None, None, None, "stop", i) for _ in range(sampling.n))
        return out
