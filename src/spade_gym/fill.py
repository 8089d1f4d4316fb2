"""The ``fill`` write-mode prompt: the host writes a setting's skeleton and the model fills its holes.

The Designer's answer is generated part by part, each a continuation of the answer so far: the host
writes the contract's fixed parts, the model the task (knobs, description, name, the episode drawn
in ``reset``, ``hint``, a tool or a game's rules). Each hole stops at its stop strings or token
budget and is trimmed to its place. A filled design carries no prompt token ids: it is not one
sample of the model, so it is not trained on (``fill`` needs a frozen ``designer.policy``).
"""

from __future__ import annotations

import ast
import builtins
import re
import textwrap
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from spade_gym.contract import parse_module
from spade_gym.policies.base import Completion, Message, Policy, SamplingParams

__all__ = ["FILL_SETTINGS", "Copy", "Hole", "fill_designs", "fill_parts"]


@dataclass(frozen=True)
class Hole:
    """One part the model writes: at most ``max_tokens`` tokens, cut at the first of ``stop``, then
    ``finish(text)`` (the part as it goes into the module). ``check``: a template with ``{}`` where
    the finished part goes that must compile, or ``""`` (no check); ``uses``: a test of the part
    against the holes filled before it (the question and the hint show values drawn for the episode, the
    answer is computed from values the question shows)."""

    name: str
    max_tokens: int
    stop: tuple[str, ...]
    finish: Callable[[str], str]
    check: str = "def f(self):\n{}"
    uses: Callable[[str, Mapping[str, str]], bool] | None = None

    def why(self) -> str:
        """What a fitting part is, in one line (``uses``'s summary, or that it must compile)."""
        doc = (self.uses.__doc__ or "") if self.uses is not None else ""
        return " ".join(doc.split(".")[0].split()) or "Python that compiles in place"

    def placeholder(self) -> str:
        """``<your NAME: WHY>`` where the part goes, as a string the contract's lint reports (``UNFILLED``)."""
        marker = re.sub(r"[{}\"'\\]", "", f"<your {self.name}: {self.why()}>")
        if self.check.startswith('f"'):
            return marker
        if self.check == "str({}":
            return repr(marker) + ")\n"
        return repr(marker) + "\n" if self.check == "{}" else "        " + repr(marker) + "\n"

    def fits(self, part: str, filled: Mapping[str, str]) -> bool:
        """Whether the finished ``part`` compiles in its ``check`` template and passes ``uses``."""
        if self.check:
            try:
                compile(self.check.replace("{}", part), "<hole>", "exec")
            except (SyntaxError, ValueError, RecursionError, MemoryError):  # a hostile part: refused, not raised
                return False
        return self.uses is None or self.uses(part, filled)


@dataclass(frozen=True)
class Copy:
    """The finished text of an earlier hole, written again (the task's description as the class docstring)."""

    hole: str


Part = str | Hole | Copy

_METHOD_STOP = ("\n    def ", "\n    @", "\nclass ", "\n\n\n", "```")


def _knobs(text: str) -> str:
    lines = [ln.rstrip() for ln in text.splitlines() if re.match(r"^[A-Z][A-Z0-9_]*\s*=\s*-?\d+\s*(#.*)?$", ln)]
    return "\n".join(lines[:4]) + ("\n" if lines else "")


def _doc(text: str) -> str:
    words = " ".join(text.replace("\\", " ").replace('"', "'").split())
    return words[:600] or "A task grounded in the document."


def _name(text: str) -> str:
    words = re.findall(r"[A-Za-z][A-Za-z0-9]*", text)
    name = "".join(w[:1].upper() + w[1:] for w in words)[:40]
    return name or "Designed"


def _string(text: str) -> str:
    return " ".join(text.replace("\\", " ").replace('"', "'").split())[:200] or "look_up"


def _identifier(text: str) -> str:
    name = re.sub(r"\W+", "_", text.strip().lower()).strip("_")[:40]
    return name if name and not name[0].isdigit() and name != "submit" else "look_up"


def _body(returns: str | None) -> Callable[[str], str]:
    """A method body: the indented lines up to the first line outside the method; ``returns`` is
    appended when the body does not end with a ``return`` (``None``: nothing is appended)."""

    def finish(text: str) -> str:
        kept: list[str] = []
        for line in text.splitlines():
            if line.strip() and not line.startswith("        "):
                break
            kept.append(line.rstrip())
        while kept and not kept[-1].strip():
            kept.pop()
        last = kept[-1].strip() if kept else ""
        if returns is not None and not last.startswith("return ") and last != "return":
            kept.append("        " + returns)
        if not kept:
            kept.append("        pass")
        return "\n".join(kept) + "\n"

    return finish


def _statements(text: str) -> str:
    """Indented lines of a method, none of them a ``return`` (``pass`` when there are none)."""
    kept = [ln for ln in _body(None)(text).splitlines() if not ln.strip().startswith("return")]
    return "\n".join(kept or ["        pass"]) + "\n"


def _expression(text: str) -> str:
    """One line: the rest of ``str(`` (its closing parenthesis added when the model left it off)."""
    line = text.strip().splitlines()[0].strip() if text.strip() else "''"
    depth = line.count("(") - line.count(")")
    return line + ")" * max(depth + 1, 0) + "\n" if depth >= 0 else line + "\n"


def _fstring(text: str) -> str:
    """The text of an f-string: one line, its double quotes made single."""
    line = text.strip().splitlines()[0] if text.strip() else "?"
    return line.replace('"', "'").replace("\\", "/")


#: Attributes the values may not set: members, and what ``reset`` sets after them.
_MEMBERS = ("hint", "oracle", "step", "reset", "_moves", "_show", "observation", "answer", "clue")
_BUILTINS = frozenset(dir(builtins)) | {"TOOL", "TOOLS", "TOOL_DESCRIPTION"}


def _names(code: str) -> set[str]:
    """The local names and ``self`` attributes ``code`` (statements or an expression) reads or sets."""
    tree = parse_module(textwrap.dedent(code).strip() or "pass")
    if tree is None:
        return set()
    found: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and node.id not in ("self", "rng", "random"):
            found.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self":
            found.add("self." + node.attr)
    return found


def _values(text: str) -> str:
    """The values' statements; an attribute that would hide a member (``self.hint = ...``) renamed."""
    body = _statements(text)
    for member in _MEMBERS:
        if re.search(rf"\bself\.{member}\s*=(?!=)", body):
            body = re.sub(rf"\bself\.{member}\b(?!\s*\()", f"self.{member}_", body)
    return body


def _knob_names(filled: Mapping[str, str]) -> set[str]:
    return set(re.findall(r"^([A-Z][A-Z0-9_]*)\s*=", filled.get("knobs", ""), re.MULTILINE))


def _drawn_with_knobs(part: str, filled: Mapping[str, str]) -> bool:
    """The values are drawn from ``rng`` into names, and every UPPERCASE name they read is a knob."""
    names = _names(part)
    used = {n for n in names if re.fullmatch(r"[A-Z][A-Z0-9_]*", n)}
    return "rng." in part and bool(names - used) and used <= _knob_names(filled)


def _records(part: str, filled: Mapping[str, str]) -> bool:
    """The records are drawn as :func:`_drawn_with_knobs` says and set ``self.records``."""
    return "self.records" in _names(part) and _drawn_with_knobs(part, filled)


def _drawn(filled: Mapping[str, str]) -> set[str]:
    return _names(filled.get("values", "") + filled.get("records", ""))


def _renamed(part: str, filled: Mapping[str, str]) -> str:
    """``part`` reading the values' renamed attributes (``self.observation`` -> ``self.observation_``)."""
    drawn = _drawn(filled)
    for member in _MEMBERS:
        if f"self.{member}_" in drawn:
            part = re.sub(rf"\bself\.{member}\b(?!\s*\()", f"self.{member}_", part)
    return part


def _known(code: str, filled: Mapping[str, str]) -> bool:
    """Every name ``code`` reads is a value drawn, a knob or a builtin."""
    return _names(code) <= _drawn(filled) | _knob_names(filled) | _BUILTINS


def _shows_values(part: str, filled: Mapping[str, str]) -> bool:
    """The question asks in words (at least five outside the braces: "Task: {x}" states no rule),
    shows at least one value drawn for the episode, and reads nothing else."""
    code = 'f"' + part + '"'
    words = re.findall(r"[A-Za-z]{2,}", re.sub(r"\{[^{}]*\}", " ", part))
    return len(words) >= 5 and bool(_names(code) & _drawn(filled)) and _known(code, filled)


def _answers_question(part: str, filled: Mapping[str, str]) -> bool:
    """The answer is computed from values the question shows (not drawn apart from it, not a
    constant), and reads nothing else."""
    shown = _names('f"' + filled.get("question", "") + '"')
    code = "str(" + part
    return "rng" not in part and bool(_names(code) & _drawn(filled) & shown) and _known(code, filled)


def _hints_at_values(part: str, filled: Mapping[str, str]) -> bool:
    """The hint speaks of this episode's values, never of the answer itself, and reads nothing else."""
    code = 'f"' + part + '"'
    return bool(_names(code) & _drawn(filled)) and _known(code, filled)


def _methods(finish: Callable[[str], str]) -> Callable[[str], str]:
    """``finish``, then a bare call of the game's own helpers (``_moves()``) made a method call."""
    return lambda text: re.sub(r"(?<![\w.])(_moves|_show)\(", r"self.\1(", finish(text))


# the task, drawn and computed in ``reset``: values, the answer, the question and the hint
_VALUES = ("\n        self.answer", "\n        #", "\n        return", *_METHOD_STOP)
_QUESTION: list[Part] = [
    "        # the question the agent sees: the values it needs and the form of the answer\n"
    '        self.observation = f"',
    Hole("question", 120, ('"\n', "\n"), _fstring, 'f"{}"', _shows_values),
    '"\n        # the answer to that question, computed from the values: a number or a word (many possible\n'
    "        # values, never yes/no)\n        self.answer = str(",
    Hole("answer", 60, ("\n",), _expression, "str({}", _answers_question),
    '        # a hint for this episode: a method or a partial result, never the answer itself\n        self.clue = f"',
    Hole("hint", 80, ('"\n', "\n"), _fstring, 'f"{}"', _hints_at_values),
    '"\n        return self.observation, {}\n',
]


def _head(imports: str, what: str) -> list[Part]:
    return [
        '"""',
        Hole("description", 120, ('"""', "\n\n"), _doc, ""),
        f'"""\n\n{imports}\n\n# difficulty knobs of this {what}: module-level UPPERCASE ints (sizes, ranges)\n',
        Hole("knobs", 60, ("\n\n", "\nclass", "```"), _knobs, "{}"),
    ]


def _class(setting: str, max_turns: int, extra: str = "") -> list[Part]:
    return [
        '\n\nclass Env:\n    """',
        Copy("description"),
        '"""\n\n    name = "',
        Hole("name", 12, ('"', "\n"), _name, ""),
        f'"\n    setting = "{setting}"\n    max_turns = {max_turns}\n{extra}',
    ]


_REASONING: list[Part] = [
    *_head("import random", "task"),
    *_class("reasoning", 2),
    "\n    def reset(self, seed):\n        rng = random.Random(seed)\n        self.turn = 0\n"
    "        # the values of this episode, drawn from rng with the knobs (numbers or items)\n",
    Hole("values", 250, _VALUES, _values, uses=_drawn_with_knobs),
    *_QUESTION,
    """
    def step(self, action):
        self.turn += 1
        correct = action.strip().lower() == str(self.answer).strip().lower()
        reward = 1.0 if correct and self.turn == 1 else (0.5 if correct else 0.0)
        terminated = correct or self.turn >= self.max_turns
        observation = "Correct." if correct else "Wrong, try again."
        return observation, reward, terminated, False, {"correct": correct}

    def hint(self):
        return self.clue

    def oracle(self):
        return str(self.answer)
""",
]

_TOOL_USE: list[Part] = [
    *_head("import json\nimport random", "task"),
    '\n# the look-up tool of this task: its name (snake_case) and what it returns for a key\nTOOL = "',
    Hole("tool", 10, ('"', "\n"), _identifier, ""),
    '"\nTOOL_DESCRIPTION = "',
    Hole("tool description", 40, ('"', "\n"), _string, ""),
    """"
TOOLS = [
    {"type": "function", "function": {"name": TOOL, "description": TOOL_DESCRIPTION, "parameters": {
        "type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}}},
    {"type": "function", "function": {"name": "submit", "description": "Submit the final answer.", "parameters": {
        "type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}},
]""",
    *_class("tool_use", 6, "    tools = TOOLS\n"),
    "\n    def reset(self, seed):\n        rng = random.Random(seed)\n        self.turn = 0\n"
    "        # the records of this episode, drawn from rng with the knobs: self.records, a dict from a str key\n"
    "        # to what the look-up tool returns for it\n",
    Hole("records", 300, _VALUES, _values, uses=_records),
    *_QUESTION,
    """
    def step(self, action):
        self.turn += 1
        truncated = self.turn >= self.max_turns
        try:
            call = json.loads(action)
            name, args = call["name"], dict(call["arguments"])
        except (ValueError, KeyError, TypeError):
            return 'Call a tool: {"name": ..., "arguments": {...}}', 0.0, False, truncated, {}
        if name == "submit":
            correct = str(args.get("answer", "")).strip().lower() == str(self.answer).strip().lower()
            return ("Correct." if correct else "Wrong."), (1.0 if correct else 0.0), True, False, {"correct": correct}
        if name == TOOL:
            record = self.records.get(str(args.get("key", "")).strip())
            return (str(record) if record is not None else "not found"), 0.0, False, truncated, {}
        return "Unknown tool.", 0.0, False, truncated, {}

    def hint(self):
        return self.clue

    def oracle(self):
        return json.dumps({"name": "submit", "arguments": {"answer": str(self.answer)}})
""",
]

_GAME: list[Part] = [
    *_head("import random", "game"),
    *_class("game", 12),
    "\n    def reset(self, seed):\n        rng = random.Random(seed)\n        self.turn = 0\n"
    "        # this episode's position, drawn from rng with the knobs into attributes of self (no fixed move may\n"
    "        # win every seed)\n",
    Hole("position", 250, ("\n        return", *_METHOD_STOP), _methods(_values), uses=_drawn_with_knobs),
    "        return self._show(), {}\n\n    def _moves(self):\n        # the legal moves now: a list of short str\n",
    Hole("moves", 200, _METHOD_STOP, _methods(_body("return []"))),
    "\n    def _show(self):\n        # a str showing the position and the legal moves\n",
    Hole("show", 150, _METHOD_STOP, _methods(_body("return str(self._moves())"))),
    """
    def step(self, action):
        self.turn += 1
        move = action.strip().lower()
        if move not in [str(m).lower() for m in self._moves()]:
            return "Illegal move. " + self._show(), 0.0, False, self.turn >= self.max_turns, {"legal": False}
        won = False
        # apply the move to the position (attributes of self); set won = True when the game is won
""",
    Hole("move", 300, ("\n        return", *_METHOD_STOP), _methods(_statements)),
    """        truncated = not won and self.turn >= self.max_turns
        return self._show(), (1.0 if won else 0.0), bool(won), truncated, {"legal": True}

    def hint(self):
        # a str with a strategy for this position, never the whole sequence of moves
""",
    Hole("hint", 160, _METHOD_STOP, _body('return "Think ahead."')),
    "\n    def oracle(self):\n        # the best legal move now, a str\n",
    Hole("oracle", 250, _METHOD_STOP, _methods(_body("return str(self._moves()[0]) if self._moves() else ''"))),
]

_PARTS: dict[str, list[Part]] = {"reasoning": _REASONING, "tool_use": _TOOL_USE, "game": _GAME}
#: The settings with a fill plan (all three).
FILL_SETTINGS = tuple(_PARTS)


def fill_parts(setting: str) -> list[Part]:
    """The parts of ``setting``'s module in order: fixed text (``str``), :class:`Hole` and :class:`Copy`. ValueError
    for an unknown setting."""
    if setting not in _PARTS:
        raise ValueError(f"setting must be one of {FILL_SETTINGS}, got {setting!r}")
    return list(_PARTS[setting])


_OPEN = "```python\n"


def fill_designs(
    policy: Policy,
    messages: Sequence[Message],
    setting: str,
    sampling: SamplingParams,
    *,
    retries: int = 3,
) -> list[Completion]:
    """``sampling.n`` designs for one prompt, each a filled skeleton of ``setting`` in a ```python block.

    Each hole is a ``generate`` call extending the answer so far (the last, assistant message) with
    the hole's token budget and stops; one that does not fit (:meth:`Hole.fits`) is sampled again up
    to ``retries`` times, then it and every later hole are ``<your ...>`` placeholders (refused as
    ``UNFILLED``). Raises ValueError for an unknown setting, and whatever ``policy.generate`` raises.
    """
    parts = fill_parts(setting)
    out: list[Completion] = []
    for k in range(sampling.n):  # design by design: each part's prompt extends the last (KV cache reuse)
        answer, filled, ids, logprobs = _OPEN, dict[str, str](), list[int](), list[float]()
        failed = False
        for h, part in enumerate(parts):
            if isinstance(part, str):
                answer += part
                continue
            if isinstance(part, Copy):
                answer += filled[part.hole]
                continue
            if failed:  # the design is refused already: the parts after it are not asked for
                filled[part.name] = part.placeholder() if (part.check or part.uses) else part.name
                answer += filled[part.name]
                continue
            for attempt in range(1 + retries):
                seed = None if sampling.seed is None else sampling.seed + k + 1000 * h + 100_000 * attempt
                call = replace(sampling, n=1, max_new_tokens=part.max_tokens, stop=part.stop, seed=seed)
                [done] = policy.generate([[*messages, {"role": "assistant", "content": answer}]], call)
                ids += done.completion_token_ids or []
                logprobs += done.logprobs or []
                text = _renamed(part.finish(done.text), filled)
                if part.fits(text, filled):
                    break
            else:  # no sample fitted: refused before the gate as UNFILLED, naming the hole
                text, failed = part.placeholder(), True
            filled[part.name] = text
            answer += text
        temperature = 1.0 if sampling.greedy else sampling.temperature
        out.append(Completion(answer + "```", None, ids, logprobs, "stop", 0, temperature))
    return out
