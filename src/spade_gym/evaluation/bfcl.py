"""Multi-turn function calling in the style of the Berkeley Function Calling Leaderboard (BFCL v3).

**File format** (:class:`BFCLSuite`): one JSON object per line.

* ``id``: the item's id (else ``"line-<n>"``).
* ``question``: the turns, each a list of ``{"role", "content"}`` messages; an empty turn lets the
  Agent go on with no new message.
* ``function`` (optional): the tools, BFCL's ``{"name", "description", "parameters"}`` or OpenAI's
  ``{"type": "function", "function": {...}}``; else the suite's ``functions`` file or folder.
* ``ground_truth`` (optional): per turn a list of Python call strings (:func:`parse_call`), e.g.
  ``[["cd(folder='document')"], []]``; else the suite's ``answers`` file, matched by id.
* ``excluded_function`` (optional): tools not shown; ``missed_function`` (optional):
  ``{"<turn>": [name or doc, ...]}``, tools withheld until that turn and then announced.

**Playing.** Within a turn the Agent makes up to ``max_calls_per_turn`` tool calls, one per
message; a message without a tool call ends the turn.

**Scoring (a simplification of BFCL).** Calls are matched, *not executed* (BFCL's AST-style check,
not its state-based one): every well-formed call gets :data:`RECORDED`, and a turn is correct when
the multiset of calls made equals the ground truth's, arguments compared as JSON values (``1 ==
1.0``, ``True != 1``). A malformed call or an empty completion makes the turn wrong. The score is
the fraction of correct turns; a bad line scores 0 with an ``error`` naming the file, line and fault.
"""

from __future__ import annotations

import ast
import json
import re
import time
from collections import Counter
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from spade_gym.agent import extract_action, system_prompt
from spade_gym.evaluation.base import DEFAULT_SAMPLING, ItemRecord, Suite, SuiteResult, generate_answers, read_jsonl
from spade_gym.policies.base import ROLES, Completion, SamplingParams

__all__ = ["DESCRIPTION", "RECORDED", "BFCLSuite", "load_function_docs", "parse_call", "to_openai_tool"]

#: What the Agent is told about the task (the "Environment:" part of its system prompt).
DESCRIPTION = (
    "A user asks you for tasks over several turns. For each request, make the tool calls it needs, one call "
    "per message. When the request is done, or cannot be done with the tools, reply without a tool call: "
    "that hands the turn back to the user."
)
#: The result every well-formed call gets (calls are checked, not executed).
RECORDED = json.dumps({"status": "recorded"})
_TOOL_CALL = re.compile(r"<tool_call>.*?</tool_call>", re.DOTALL | re.IGNORECASE)
_UNCLOSED = "Error: the tool call has no closing </tool_call> tag."
# BFCL's parameter types that JSON Schema spells differently; None: no type
_SCHEMA_TYPES: dict[str, str | None] = {"dict": "object", "float": "number", "tuple": "array", "any": None}


def parse_call(text: str) -> tuple[str, dict[str, Any]]:
    """``(name, arguments)`` of a call string such as ``"mv(source='a.txt', destination='b')"``: the
    (possibly dotted) name, and the literal arguments by keyword, positional ones keyed ``"$0"``...
    ``ValueError`` (quoting the call): not a call of a (dotted) name with literal arguments,
    ``*args``/``**kwargs``, or a repeated keyword."""
    if not isinstance(text, str):
        raise ValueError(f"a call must be a string, got {type(text).__name__}")
    try:
        node = ast.parse(text.strip(), mode="eval").body
    except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
        raise ValueError(f"{text!r} is not a Python call ({exc})") from None
    if not isinstance(node, ast.Call):
        raise ValueError(f"{text!r} is not a function call")
    name = _dotted_name(node.func)
    if name is None:
        raise ValueError(f"{text!r} does not call a plain or dotted name")
    arguments: dict[str, Any] = {}
    for i, arg in enumerate(node.args):
        if isinstance(arg, ast.Starred):
            raise ValueError(f"{text!r} uses *args")
        arguments[f"${i}"] = _literal(arg, text)
    for keyword in node.keywords:
        if keyword.arg is None:
            raise ValueError(f"{text!r} uses **kwargs")
        if keyword.arg in arguments:
            raise ValueError(f"{text!r} repeats the argument {keyword.arg!r}")
        arguments[keyword.arg] = _literal(keyword.value, text)
    return name, arguments


def _dotted_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        head = _dotted_name(node.value)
        return None if head is None else f"{head}.{node.attr}"
    return None


def _literal(node: ast.expr, text: str) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, TypeError, SyntaxError, RecursionError, MemoryError):
        raise ValueError(f"{text!r} has an argument that is not a Python literal: {ast.unparse(node)!r}") from None


def to_openai_tool(doc: object) -> dict[str, Any]:
    """A BFCL or OpenAI function doc as ``{"type": "function", "function": {"name", "description",
    "parameters"}}``, BFCL's schema types mapped to JSON Schema's (``dict`` -> ``object``, ``float``
    -> ``number``, ``tuple`` -> ``array``, ``any`` -> no type); other keys are dropped. ``ValueError``:
    not an object, no non-empty string ``name``, or a mistyped ``description`` or ``parameters``."""
    if not isinstance(doc, Mapping):
        raise ValueError(f"a function doc must be a JSON object, got {type(doc).__name__}")
    function = doc["function"] if doc.get("type") == "function" and isinstance(doc.get("function"), Mapping) else doc
    name = function.get("name")
    if not isinstance(name, str) or not name:
        raise ValueError(f"a function doc needs a non-empty string 'name', got {name!r}")
    description = function.get("description", "")
    if not isinstance(description, str):
        raise ValueError(f"function {name!r}: 'description' must be a string")
    parameters = function.get("parameters", {"type": "object", "properties": {}})
    if not isinstance(parameters, Mapping):
        raise ValueError(f"function {name!r}: 'parameters' must be a JSON schema object")
    out = {"name": name, "description": description, "parameters": _json_schema(parameters)}
    return {"type": "function", "function": out}


def _json_schema(value: Any) -> Any:
    if isinstance(value, Mapping):
        out = {}
        for key, item in value.items():
            if key == "type" and isinstance(item, str) and item in _SCHEMA_TYPES:
                mapped = _SCHEMA_TYPES[item]
                if mapped is not None:
                    out[key] = mapped
            else:
                out[key] = _json_schema(item)
        return out
    if isinstance(value, list):
        return [_json_schema(v) for v in value]
    return value


def load_function_docs(path: str | Path) -> list[dict[str, Any]]:
    """The function docs of a file, or of a folder's ``*.json``/``*.jsonl`` files in name order, as
    :func:`to_openai_tool` gives them, the first of each name kept. A file holds a JSON list, one
    doc, or one doc per line. ``FileNotFoundError``: no such file or folder, or a folder without
    JSON files; ``ValueError``: a file is not UTF-8 JSON or a doc is malformed (naming file and line)."""
    path = Path(path)
    if path.is_dir():
        files = sorted(p for p in path.iterdir() if p.is_file() and p.suffix in (".json", ".jsonl"))
        if not files:
            raise FileNotFoundError(f"no *.json or *.jsonl function docs in the folder {path}")
    elif path.is_file():
        files = [path]
    else:
        raise FileNotFoundError(f"no function docs at {path}")
    tools: dict[str, dict[str, Any]] = {}
    for file in files:
        for where, doc in _json_values(file):
            tool = _tool(doc, f"{file.name} {where}", ValueError)
            tools.setdefault(tool["function"]["name"], tool)
    return list(tools.values())


def _json_values(file: Path) -> list[tuple[str, Any]]:
    try:
        text = file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{file} is not UTF-8 text ({exc})") from None
    try:
        whole = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        pass
    else:
        return [(f"item {i}", v) for i, v in enumerate(whole)] if isinstance(whole, list) else [("line 1", whole)]
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                out.append((f"line {number}", json.loads(line)))
            except (json.JSONDecodeError, RecursionError) as exc:
                raise ValueError(f"{file.name} line {number}: not valid JSON ({exc})") from None
    return out


# -- call matching -----------------------------------------------------------------------------

_Key = tuple[Any, ...]


def _canonical(value: Any) -> _Key:
    """A hashable form under which JSON-equal values are equal (``1 == 1.0``, ``True != 1``)."""
    if value is None:
        return ("null",)
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, int | float):
        return ("number", value)
    if isinstance(value, str):
        return ("string", value)
    if isinstance(value, list | tuple):
        return ("array", tuple(_canonical(v) for v in value))
    if isinstance(value, set | frozenset):
        return ("set", frozenset(_canonical(v) for v in value))
    if isinstance(value, Mapping):
        return ("object", frozenset((_canonical(k), _canonical(v)) for k, v in value.items()))
    return ("other", repr(value))


def _call_key(name: str, arguments: Mapping[str, Any]) -> _Key:
    return (name, _canonical(dict(arguments)))


# -- items -------------------------------------------------------------------------------------


@dataclass
class _Item:
    item_id: str
    where: str  # "file line n (id ...)"
    turns: list[list[dict[str, str]]]
    expected: list[list[str]]  # the ground-truth call strings per turn
    expected_keys: list[list[_Key]]
    tools: list[dict[str, Any]]
    added: dict[int, list[dict[str, Any]]] = field(default_factory=dict)

    @property
    def prompt(self) -> str:
        return next((m["content"] for turn in self.turns for m in turn if m["role"] == "user"), "")


class _BadItem(ValueError):
    """A line that cannot be played; the message says why."""


def _check_turns(question: object) -> list[list[dict[str, str]]]:
    if not isinstance(question, list) or not question:
        raise _BadItem("'question' must be a non-empty list of turns")
    turns = []
    for t, turn in enumerate(question):
        if not isinstance(turn, list):
            raise _BadItem(f"question turn {t} must be a list of messages, got {type(turn).__name__}")
        messages = []
        for m, message in enumerate(turn):
            if not isinstance(message, Mapping):
                raise _BadItem(f"question turn {t} message {m} must be an object with 'role' and 'content'")
            role, content = message.get("role"), message.get("content")
            if role not in ROLES or not isinstance(content, str):
                raise _BadItem(
                    f"question turn {t} message {m} needs a role in {sorted(ROLES)} and a string content, "
                    f"got role {role!r} and content of type {type(content).__name__}"
                )
            messages.append({"role": str(role), "content": content})
        turns.append(messages)
    return turns


def _check_ground_truth(ground_truth: object, turns: int) -> tuple[list[list[str]], list[list[_Key]]]:
    if not isinstance(ground_truth, list) or not all(isinstance(t, list) for t in ground_truth):
        raise _BadItem("'ground_truth' must be a list of turns, each a list of call strings")
    if len(ground_truth) != turns:
        raise _BadItem(f"the question has {turns} turns but the ground truth has {len(ground_truth)}")
    keys = []
    for t, calls in enumerate(ground_truth):
        turn_keys = []
        for call in calls:
            try:
                turn_keys.append(_call_key(*parse_call(call)))
            except ValueError as exc:
                raise _BadItem(f"ground-truth turn {t}: {exc}") from None
        keys.append(turn_keys)
    return [list(t) for t in ground_truth], keys


def _tool(doc: object, where: str, error: type[ValueError] = _BadItem) -> dict[str, Any]:
    try:
        return to_openai_tool(doc)
    except ValueError as exc:
        raise error(f"{where}: {exc}") from None


def _item_tools(
    row: Mapping[str, Any], shared: list[dict[str, Any]] | None, turns: int
) -> tuple[list[dict[str, Any]], dict[int, list[dict[str, Any]]]]:
    if "function" in row:
        if not isinstance(row["function"], list):
            raise _BadItem("'function' must be a list of function docs")
        tools = [_tool(doc, f"function {i}") for i, doc in enumerate(row["function"])]
    elif shared is not None:
        tools = list(shared)
    else:
        raise _BadItem("no tools: no 'function' field and no functions file given")
    by_name = {t["function"]["name"]: t for t in tools}
    excluded = row.get("excluded_function", [])
    if not isinstance(excluded, list) or not all(isinstance(n, str) for n in excluded):
        raise _BadItem("'excluded_function' must be a list of function names")
    hidden = set(excluded)
    added: dict[int, list[dict[str, Any]]] = {}
    missed = row.get("missed_function", {})
    if not isinstance(missed, Mapping):
        raise _BadItem("'missed_function' must be an object {turn index: [function names or docs]}")
    for key, entries in missed.items():
        try:
            turn = int(key)
        except ValueError:
            turn = -1
        if not 0 <= turn < turns or not isinstance(entries, list):
            raise _BadItem(f"'missed_function' key {key!r} must be a turn index below {turns} with a list of functions")
        for entry in entries:
            if isinstance(entry, str):
                if entry not in by_name:
                    raise _BadItem(f"'missed_function' names {entry!r}, which is not among the tools")
                tool = by_name[entry]
            else:
                tool = _tool(entry, f"'missed_function' turn {turn}")
            hidden.add(tool["function"]["name"])
            added.setdefault(turn, []).append(tool)
    return [t for t in tools if t["function"]["name"] not in hidden], added


# -- playing -----------------------------------------------------------------------------------


class _Play:
    """One item in flight."""

    def __init__(self, item: _Item, max_calls: int) -> None:
        self.item = item
        self.max_calls = max_calls
        self.messages: list[dict[str, str]] = [
            {"role": "system", "content": system_prompt("tool_use", DESCRIPTION, item.tools)}
        ]
        self.turn = -1
        self.calls: list[list[dict[str, Any]]] = []  # per turn: as recorded in metadata
        self.empty_turns: set[int] = set()
        self.completions = 0
        self.empty_completions = 0
        self.last_text = ""
        self.error: str | None = None
        self.done = False
        self._next_turn()

    def _next_turn(self) -> None:
        self.turn += 1
        if self.turn >= len(self.item.turns):
            self.done = True
            return
        self.calls.append([])
        new_tools = self.item.added.get(self.turn)
        if new_tools:
            listing = "\n".join(json.dumps(t, sort_keys=True) for t in new_tools)
            self.messages.append({"role": "user", "content": f"More tools are available now:\n{listing}"})
        self.messages.extend(dict(m) for m in self.item.turns[self.turn])

    def apply(self, completion: Completion) -> None:
        text = completion.text
        self.completions += 1
        self.last_text = text
        self.messages.append({"role": "assistant", "content": text})
        if not text.strip():
            self.empty_completions += 1
            self.empty_turns.add(self.turn)
            self._next_turn()
            return
        if _TOOL_CALL.search(text):
            parsed = extract_action(text, "tool_use")
            result, recorded = self._record(parsed.action, parsed.error)
        elif "<tool_call>" in text.lower():
            result, recorded = self._record(None, _UNCLOSED)
        else:
            self._next_turn()
            return
        self.calls[-1].append(recorded)
        self.messages.append({"role": "user", "content": result})
        if len(self.calls[-1]) >= self.max_calls:
            self._next_turn()

    def _record(self, action: str | None, error: str | None) -> tuple[str, dict[str, Any]]:
        """The tool result for the Agent and the call as recorded; a malformed call never matches."""
        if action is None:  # extract_action found a <tool_call> block it could not read
            message = error or "Error: malformed tool call."
            return message, {"malformed": message}
        call = json.loads(action)
        name, arguments = call["name"], call.get("arguments", {})
        if isinstance(arguments, str):  # OpenAI's wire format sends the arguments as a JSON string
            try:
                arguments = json.loads(arguments)
            except (json.JSONDecodeError, RecursionError):
                pass
        if not isinstance(arguments, dict):
            message = 'Error: "arguments" must be a JSON object of argument names to values.'
            return message, {"malformed": message, "name": name}
        return RECORDED, {"name": name, "arguments": arguments}

    def record(self) -> ItemRecord:
        item = self.item
        turns, right = [], 0
        for t, expected in enumerate(item.expected_keys):
            made = self.calls[t] if t < len(self.calls) else None
            keys = [
                ("malformed", i) if "malformed" in c else _call_key(c["name"], c["arguments"])
                for i, c in enumerate(made or [])
            ]
            correct = made is not None and t not in self.empty_turns and Counter(keys) == Counter(expected)
            turns.append({"correct": correct, "calls": made or [], "expected": item.expected[t]})
            right += correct
        error = self.error
        if error is None and self.completions and self.empty_completions == self.completions:
            error = "empty response"
        score = 0.0 if self.error is not None else right / len(turns)
        metadata = {
            "source": item.where,
            "turns": turns,
            "turns_correct": right,
            "turns_total": len(turns),
            "completions": self.completions,
        }
        reference = json.dumps(item.expected, ensure_ascii=False)
        return ItemRecord(item.item_id, score, item.prompt, self.last_text, reference, error, metadata)


class BFCLSuite(Suite):
    """BFCL-style multi-turn function calling over the JSON-lines file ``path`` (the module
    docstring), named ``"bfcl:<file name>"``; ``limit``: the first items only.

    Args:
        answers: JSON lines ``{"id", "ground_truth"}`` (BFCL's ``possible_answer`` file).
        functions: a file or folder of function docs (BFCL's ``multi_turn_func_doc``).

    Raises FileNotFoundError (``path``, ``answers`` or ``functions`` does not exist) or ValueError (a
    setting out of range, a file that is not UTF-8, a malformed ``functions`` file). Malformed
    *items* do not raise: they score 0 with an error.
    """

    def __init__(
        self,
        path: str | Path,
        *,
        answers: str | Path | None = None,
        functions: str | Path | None = None,
        sampling: SamplingParams = DEFAULT_SAMPLING,
        max_calls_per_turn: int = 4,
        limit: int | None = None,
    ) -> None:
        if sampling.n != 1:
            raise ValueError(f"BFCLSuite samples one completion per step: sampling.n must be 1, got {sampling.n}")
        if isinstance(max_calls_per_turn, bool) or not isinstance(max_calls_per_turn, int) or max_calls_per_turn < 1:
            raise ValueError(f"max_calls_per_turn must be an int >= 1, got {max_calls_per_turn!r}")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise ValueError(f"limit must be an int >= 0 or None, got {limit!r}")
        self.path = Path(path)
        self.answers = None if answers is None else Path(answers)
        self.functions = None if functions is None else Path(functions)
        self.sampling = sampling
        self.max_calls_per_turn = max_calls_per_turn
        self.limit = limit
        self.name = f"bfcl:{self.path.name}"
        rows = read_jsonl(self.path)[:limit]
        shared = None if self.functions is None else load_function_docs(self.functions)
        ground_truths, answer_problems = self._read_answers()
        self._items: list[_Item | ItemRecord] = [
            self._item(number, row, shared, ground_truths, answer_problems) for number, row in rows
        ]

    def _read_answers(self) -> tuple[dict[str, list[tuple[int, Any]]], str]:
        """Ground truths by id (every line with that id), and a note on unreadable lines."""
        if self.answers is None:
            return {}, ""
        found: dict[str, list[tuple[int, Any]]] = {}
        bad = []
        for number, row in read_jsonl(self.answers):
            if isinstance(row, str) or "id" not in row or "ground_truth" not in row:
                bad.append(number)
            else:
                found.setdefault(str(row["id"]), []).append((number, row["ground_truth"]))
        note = f"; {self.answers.name} has unreadable lines {bad}" if bad else ""
        return found, note

    def _item(
        self,
        number: int,
        row: dict[str, Any] | str,
        shared: list[dict[str, Any]] | None,
        ground_truths: Mapping[str, list[tuple[int, Any]]],
        answer_problems: str,
    ) -> _Item | ItemRecord:
        if isinstance(row, str):  # read_jsonl's message names the file and line
            return ItemRecord(f"line-{number}", 0.0, error=row, metadata={"source": f"{self.path.name} line {number}"})
        item_id = str(row["id"]) if row.get("id") is not None else f"line-{number}"
        where = f"{self.path.name} line {number} (id {item_id!r})"
        try:
            if "question" not in row:
                raise _BadItem("no 'question'")
            turns = _check_turns(row["question"])
            if "ground_truth" in row:
                ground_truth = row["ground_truth"]
            elif self.answers is not None and item_id in ground_truths:
                found = ground_truths[item_id]
                if len(found) > 1:
                    lines = [n for n, _ in found]
                    raise _BadItem(f"{self.answers.name} has {len(found)} ground truths for this id (lines {lines})")
                ground_truth = found[0][1]
            else:
                source = f"not in {self.answers.name}{answer_problems}" if self.answers else "and no answers file"
                raise _BadItem(f"no ground truth: no 'ground_truth' field, {source}")
            expected, keys = _check_ground_truth(ground_truth, len(turns))
            tools, added = _item_tools(row, shared, len(turns))
        except _BadItem as exc:
            return ItemRecord(item_id, 0.0, error=f"{where}: {exc}", metadata={"source": where})
        return _Item(item_id, where, turns, expected, keys, tools, added)

    def __len__(self) -> int:
        """Items in the suite (malformed lines included)."""
        return len(self._items)

    def config(self) -> dict[str, Any]:
        return {
            "path": str(self.path),
            "answers": None if self.answers is None else str(self.answers),
            "functions": None if self.functions is None else str(self.functions),
            "sampling": {k: list(v) if isinstance(v, tuple) else v for k, v in asdict(self.sampling).items()},
            "max_calls_per_turn": self.max_calls_per_turn,
            "limit": self.limit,
            "items": len(self._items),
        }

    def run(self, policy: Any, *, progress: Callable[[int, int], None] | None = None) -> SuiteResult:
        """One record per line, in file order; ``metadata`` has ``source``, ``turns`` (per turn:
        ``correct``, the ``calls`` made, the ``expected`` calls), ``turns_correct``, ``turns_total``
        and ``completions``."""
        started = time.perf_counter()
        plays = [_Play(e, self.max_calls_per_turn) if isinstance(e, _Item) else e for e in self._items]
        total = len(self._items)
        calls = 0
        while True:
            active = [p for p in plays if isinstance(p, _Play) and not p.done]
            if progress is not None:
                progress(total - len(active), total)
            if not active:
                break
            seed = self.sampling.seed
            sampling = replace(self.sampling, truncate_prompt=True, seed=None if seed is None else seed + calls)
            calls += 1
            answers = generate_answers(policy, [p.messages for p in active], sampling, batch_size=len(active))
            for play, completion in zip(active, answers, strict=True):
                if isinstance(completion, str):
                    play.error, play.done = completion, True
                else:
                    play.apply(completion)
        return self._result(policy, [p.record() if isinstance(p, _Play) else p for p in plays], started)
