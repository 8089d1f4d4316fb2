"""Held-out suites over local JSON-lines files: :class:`MathFileSuite` (``"math:<file>"``),
:class:`MultipleChoiceFileSuite` (``"mc:<file>"``) and :class:`CodeFileSuite` (``"code:<file>"``).

Each suite prompts the policy once per non-blank line (batched, greedy by default) and scores it in
[0, 1]. An unusable line (not JSON, a missing or mistyped field), an empty completion
(``"empty response"``) or a generation failure scores 0 with the reason in
:attr:`ItemRecord.error` and still counts. Item ids are a line's own ``id``, else ``"line-<n>"``.
"""

from __future__ import annotations

import ast
import contextlib
import importlib.util
import json
import os
import re
import select
import subprocess
import sys
import time
from abc import abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from spade_gym.agent import agent_prompt, extract_action
from spade_gym.env import SandboxedEnv
from spade_gym.errors import SandboxSetupError, SpadeError, install_hint
from spade_gym.evaluation.base import DEFAULT_SAMPLING, ItemRecord, Suite, SuiteResult, generate_answers, read_jsonl
from spade_gym.policies.base import Completion, SamplingParams
from spade_gym.program import EnvProgram
from spade_gym.sandbox import SandboxConfig
from spade_gym.sandbox.policy import ALLOWED_MODULES

__all__ = ["CodeFileSuite", "MathFileSuite", "MultipleChoiceFileSuite", "extract_code"]

#: A completion longer than this is cut to its last characters before math-verify reads it.
MAX_MATH_ANSWER_CHARS = 10_000
#: Failed tests whose exception is kept in a code item's metadata.
MAX_FAILURES_KEPT = 10


class _BadLine(ValueError):
    """A line of a benchmark file that cannot be used (the message names the file and line)."""


@dataclass
class _Item:
    """One usable line: what the policy is asked and what its answer is scored against."""

    number: int
    item_id: str
    messages: list[dict[str, str]]
    reference: str | None
    data: dict[str, Any] = field(default_factory=dict)

    @property
    def prompt(self) -> str:
        return self.messages[-1]["content"]


class _FileSuite(Suite):
    """What the three file suites share: reading, validating, generating, and the failure rules."""

    prefix = "file"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        sampling: SamplingParams = DEFAULT_SAMPLING,
        batch_size: int = 16,
        limit: int | None = None,
    ) -> None:
        if not isinstance(sampling, SamplingParams):
            raise ValueError(f"sampling must be a SamplingParams, got {type(sampling).__name__}")
        if sampling.n != 1:
            raise ValueError(f"file suites score one answer per item: sampling.n must be 1, got {sampling.n}")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size must be an int >= 1, got {batch_size!r}")
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
            raise ValueError(f"limit must be None or an int >= 0, got {limit!r}")
        self.path = Path(path)
        if not self.path.is_file():
            raise FileNotFoundError(f"no benchmark file at {self.path}")
        self.sampling = sampling
        self.batch_size = batch_size
        self.limit = limit
        self.name = f"{self.prefix}:{self.path.name}"

    def config(self) -> dict[str, Any]:
        """``{"path", "sampling": {...}, "batch_size", "limit"}`` plus the suite's own settings."""
        sampling = asdict(self.sampling)
        sampling["stop"] = list(sampling["stop"])
        return {"path": str(self.path), "sampling": sampling, "batch_size": self.batch_size, "limit": self.limit}

    def run(self, policy: Any, *, progress: Callable[[int, int], None] | None = None) -> SuiteResult:
        """One record per non-blank line (the first ``limit``), unusable lines scored 0;
        ``FileNotFoundError`` if the file is gone."""
        start = time.perf_counter()
        rows = read_jsonl(self.path)[: self.limit]
        records: list[ItemRecord | None] = []
        items: list[_Item] = []
        for number, row in rows:
            if isinstance(row, str):
                records.append(ItemRecord(f"line-{number}", 0.0, error=row))
                continue
            item_id = _item_id(row, number)
            try:
                items.append(self._item(number, item_id, row))
                records.append(None)
            except _BadLine as exc:
                records.append(ItemRecord(item_id, 0.0, error=str(exc)))
        bad = len(records) - len(items)

        def report(done: int, _total: int) -> None:
            if progress is not None:
                progress(bad + done, len(records))

        answers = generate_answers(
            policy, [item.messages for item in items], self.sampling, batch_size=self.batch_size, progress=report
        )
        with self._scoring() as context:
            scored = iter([self._score_one(item, answer, context) for item, answer in zip(items, answers, strict=True)])
        result = [record if record is not None else next(scored) for record in records]
        if progress is not None and not items:
            progress(len(result), len(result))
        return self._result(policy, result, start)

    def _score_one(self, item: _Item, answer: Completion | str, context: Any) -> ItemRecord:
        if isinstance(answer, str):
            return ItemRecord(item.item_id, 0.0, item.prompt, "", item.reference, answer)
        if not answer.text.strip():
            return ItemRecord(item.item_id, 0.0, item.prompt, answer.text, item.reference, "empty response")
        return self._score(item, answer.text, context)

    def _scoring(self) -> contextlib.AbstractContextManager[Any]:
        return contextlib.nullcontext()

    def _where(self, number: int) -> str:
        return f"{self.path.name} line {number}"

    @abstractmethod
    def _item(self, number: int, item_id: str, row: dict[str, Any]) -> _Item:
        """Validate one line; raise :class:`_BadLine` naming what is wrong."""

    @abstractmethod
    def _score(self, item: _Item, text: str, context: Any) -> ItemRecord:
        """Score a non-empty completion."""


def _item_id(row: Mapping[str, Any], number: int) -> str:
    value = row.get("id")
    if (isinstance(value, str) and value) or (isinstance(value, int) and not isinstance(value, bool)):
        return str(value)
    return f"line-{number}"


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _text_field(row: Mapping[str, Any], names: Sequence[str], where: str) -> str:
    """The non-empty text of the first of ``names`` present in ``row``."""
    for name in names:
        if name in row:
            value = row[name]
            if not isinstance(value, str):
                raise _BadLine(f"{where}: field {name!r} must be a string, got {_type_name(value)}")
            if not value.strip():
                raise _BadLine(f"{where}: field {name!r} is empty")
            return value
    others = f" (or {', '.join(repr(n) for n in names[1:])})" if len(names) > 1 else ""
    raise _BadLine(f"{where}: missing field {names[0]!r}{others}")


# -- math ------------------------------------------------------------------------------------------

_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_MATH_DELIMITED = re.compile(r"(?<!\\)\$|\\\(|\\\[|\\boxed|\\fbox")
_WORD = re.compile(r"(?<![\\A-Za-z])[A-Za-z]{2,}")
_DIGIT_COMMA = re.compile(r"(?<=\d),(?=\d)")


def _last_boxed(text: str) -> str | None:
    """The content of the last ``\\boxed{...}`` (balanced braces) in ``text``, else ``None``."""
    found = None
    for match in _BOXED.finditer(text):
        depth, i = 1, match.end()
        while i < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[i], 0)
            i += 1
        if depth == 0:
            found = text[match.end() : i - 1].strip()
    return found


def _math_forms(text: str) -> list[str]:
    """Strings for math-verify's ``parse``, best first: a bare expression is wrapped in ``$...$``
    first (bare ``1+x`` reads as ``1``), unless it has words (wrapped, they become products)."""
    text = text.strip()
    if not text:
        return []
    if _MATH_DELIMITED.search(text):
        return [text]
    wrapped = f"${text}$"
    return [text, wrapped] if _WORD.search(text) else [wrapped, text]


# Runs in a helper process (``python -c``): math-verify with its own signal timeouts, which work
# there because they run on that process's main thread. Requests and replies are JSON lines.
_VERIFIER_SCRIPT = r"""
import json, logging, resource, sys

timeout, memory = int(sys.argv[1]), int(sys.argv[2])
from math_verify import parse, verify

class Timeouts(logging.Handler):
    seen = False
    def emit(self, record):
        if "Timeout" in record.getMessage():
            Timeouts.seen = True

log = logging.getLogger("math_verify")
log.addHandler(Timeouts(logging.WARNING))
log.setLevel(logging.WARNING)
log.propagate = False
try:
    with open("/proc/self/statm") as f:
        used = int(f.read().split()[0]) * resource.getpagesize()
    resource.setrlimit(resource.RLIMIT_AS, (used + memory, used + memory))
except (OSError, ValueError):
    pass

def first(forms):
    for form in forms:
        try:
            parsed = parse(form, parsing_timeout=timeout)
        except Exception:
            parsed = []
        if parsed:
            return parsed
    return []

out, sys.stdout = sys.stdout, sys.stderr
for line in sys.stdin:
    Timeouts.seen = False
    try:
        request = json.loads(line)
        gold = first(request["gold"])
        pred = first(request["prediction"]) if gold else []
        correct = bool(gold and pred and verify(gold, pred, timeout_seconds=timeout))
        read = pred[-1] if pred and isinstance(pred[-1], str) else None
        reply = {"gold": bool(gold), "read": read, "correct": correct, "timeout": Timeouts.seen}
    except Exception as exc:
        reply = {"error": type(exc).__name__ + ": " + str(exc)[:200]}
    except BaseException as exc:
        reply = {"error": type(exc).__name__ + " (math-verify timed out)", "timeout": True}
    out.write(json.dumps(reply) + "\n")
    out.flush()
"""


class _MathVerifier:
    """math-verify in a helper process with a deadline per item; a late or dead process is killed
    (the next request starts a new one) and the item gets ``{"error": ...}``."""

    def __init__(self, timeout_s: int, memory_bytes: int, deadline_s: float | None = None) -> None:
        self.timeout_s = timeout_s
        self.memory_bytes = memory_bytes
        # parse (up to two forms) of gold and prediction, then up to four pairs compared
        self.deadline_s = deadline_s if deadline_s is not None else 8.0 * timeout_s + 10.0
        self.startup_s = 120.0
        self._proc: subprocess.Popen[bytes] | None = None
        self._fresh = False

    def check(self, gold: list[str], prediction: list[str]) -> dict[str, Any]:
        """``{"gold": parsed?, "read": what was read, "correct", "timeout"}`` or ``{"error"}``."""
        if self._proc is None or self._proc.poll() is not None:
            self.close()
            self._proc = subprocess.Popen(
                [sys.executable, "-c", _VERIFIER_SCRIPT, str(self.timeout_s), str(self.memory_bytes)],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.DEVNULL,
            )
            self._fresh = True
        proc = self._proc
        assert proc.stdin is not None and proc.stdout is not None
        deadline = self.deadline_s + (self.startup_s if self._fresh else 0.0)
        self._fresh = False
        try:
            proc.stdin.write(json.dumps({"gold": gold, "prediction": prediction}).encode() + b"\n")
            proc.stdin.flush()
            line = _read_line(proc.stdout.fileno(), time.monotonic() + deadline)
        except OSError:
            line = b""
        if line is None:
            self.close()
            return {"error": f"math-verify gave no answer within {deadline:g} s; its process was killed"}
        try:
            reply = json.loads(line)
        except ValueError:
            reply = None
        if not isinstance(reply, dict):
            code = proc.poll()
            self.close()
            return {"error": f"math-verify's process ended (exit status {code})"}
        return reply

    def close(self) -> None:
        if self._proc is not None:
            with self._proc:  # closes its pipes and waits for it
                self._proc.kill()
            self._proc = None


def _read_line(fd: int, deadline: float) -> bytes | None:
    """Bytes up to a newline from ``fd``; ``b""`` at end of file, ``None`` past the deadline."""
    data = b""
    while not data.endswith(b"\n"):
        remaining = deadline - time.monotonic()
        if remaining <= 0 or not select.select([fd], [], [], remaining)[0]:
            return None
        chunk = os.read(fd, 65536)
        if not chunk:
            return b""
        data += chunk
    return data


class MathFileSuite(_FileSuite):
    """GSM8K- and MATH-style problems, scored 1 or 0 by math-verify (the ``eval`` extra) in a helper
    process with a deadline, so an answer that keeps sympy busy scores 0.

    A line has the problem in ``question``, ``problem`` or ``prompt`` and the reference in ``answer``
    (a string or number; GSM8K's ``"... #### 1,234"`` gives ``1234``) or else the last
    ``\\boxed{...}`` of ``solution`` (MATH). The answer read is the completion's last ``<answer>``
    block, else the whole completion.

    Args:
        path, sampling (``n`` must be 1), batch_size (prompts per ``generate`` call), limit (the
            first items only; ``None``: all): as every file suite.
        timeout_s: math-verify's timeout per parse or comparison, seconds.
        memory_bytes: memory the helper process may use beyond its start-up size.

    Records: ``metadata`` has ``answer`` (the text checked, 200 characters) and ``read`` (what
    math-verify read). Raises ImportError without math-verify, FileNotFoundError or ValueError.
    """

    prefix = "math"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        sampling: SamplingParams = DEFAULT_SAMPLING,
        batch_size: int = 16,
        limit: int | None = None,
        timeout_s: int = 5,
        memory_bytes: int = 2 << 30,
    ) -> None:
        if importlib.util.find_spec("math_verify") is None:
            raise ImportError(
                "MathFileSuite scores answers with math-verify, which is not installed: "
                f"{install_hint('eval')}, or pip install 'math-verify>=0.7'"
            )
        super().__init__(path, sampling=sampling, batch_size=batch_size, limit=limit)
        if isinstance(timeout_s, bool) or not isinstance(timeout_s, int) or timeout_s < 1:
            raise ValueError(f"timeout_s must be an int >= 1 (seconds), got {timeout_s!r}")
        if isinstance(memory_bytes, bool) or not isinstance(memory_bytes, int) or memory_bytes < 1 << 26:
            raise ValueError(f"memory_bytes must be an int >= 64 MiB, got {memory_bytes!r}")
        self.timeout_s = timeout_s
        self.memory_bytes = memory_bytes

    def config(self) -> dict[str, Any]:
        return {**super().config(), "timeout_s": self.timeout_s, "memory_bytes": self.memory_bytes}

    def _item(self, number: int, item_id: str, row: dict[str, Any]) -> _Item:
        where = self._where(number)
        question = _text_field(row, ("question", "problem", "prompt"), where)
        if "answer" in row:
            value = row["answer"]
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise _BadLine(f"{where}: field 'answer' must be a string or a number, got {_type_name(value)}")
            reference = str(value).strip()
            if "####" in reference:
                reference = _DIGIT_COMMA.sub("", reference.rsplit("####", 1)[1].strip())
            if not reference:
                raise _BadLine(f"{where}: field 'answer' has no answer (empty, or nothing after '####')")
        elif "solution" in row:
            solution = row["solution"]
            if not isinstance(solution, str):
                raise _BadLine(f"{where}: field 'solution' must be a string, got {_type_name(solution)}")
            boxed = _last_boxed(solution)
            if not boxed:
                raise _BadLine(f"{where}: field 'solution' has no \\boxed{{...}} answer")
            reference = boxed
        else:
            raise _BadLine(f"{where}: missing field 'answer' (or a 'solution' with a \\boxed{{...}} answer)")
        messages = [*agent_prompt("reasoning"), {"role": "user", "content": question}]
        return _Item(number, item_id, messages, reference)

    def _scoring(self) -> contextlib.AbstractContextManager[_MathVerifier]:
        return contextlib.closing(_MathVerifier(self.timeout_s, self.memory_bytes))

    def _score(self, item: _Item, text: str, context: Any) -> ItemRecord:
        parsed = extract_action(text, "reasoning")
        answer = parsed.action if parsed.format_ok and parsed.action is not None else text
        answer = answer[-MAX_MATH_ANSWER_CHARS:]
        record = ItemRecord(item.item_id, 0.0, item.prompt, text, item.reference, metadata={"answer": answer[:200]})
        if not answer.strip():
            return record  # an empty answer block: a wrong answer
        assert item.reference is not None
        reply = context.check(_math_forms(item.reference), _math_forms(answer))
        record.metadata["read"] = reply.get("read")
        if "error" in reply:
            record.error = f"math-verify failed: {reply['error']}"
        elif not reply.get("gold"):
            record.error = (
                f"{self._where(item.number)}: math-verify cannot read the reference answer {item.reference!r}"
            )
        elif reply.get("correct"):
            record.score = 1.0
        elif reply.get("timeout"):
            record.error = f"math-verify timed out ({self.timeout_s} s) reading or comparing the answer"
        return record


# -- multiple choice -------------------------------------------------------------------------------

_LABELS = "ABCDEFGHIJKLMNOPQRSTUVWXYZ"
_LONE_LABEL = re.compile(r"\(?\s*([A-Za-z])\s*\)?\.?")
_LEADING_LABEL = re.compile(r"\(?([A-Z])(?:[).:]|$)")
_STANDALONE_CAPITAL = re.compile(r"(?<![A-Za-z0-9_])[A-Z](?![A-Za-z0-9_])")
_MC_INSTRUCTION = (
    "Answer with the letter of the correct choice inside <answer></answer> tags, for example <answer>A</answer>."
)


def _choice_label(text: str, labels: Sequence[str], choices: Sequence[str]) -> str | None:
    """The label an answer names (see :class:`MultipleChoiceFileSuite`), else ``None``."""
    text = text.strip()
    lone = _LONE_LABEL.fullmatch(text)
    if lone and lone.group(1).upper() in labels:
        return lone.group(1).upper()
    leading = _LEADING_LABEL.match(text)
    if leading and leading.group(1) in labels:
        return leading.group(1)
    folded = text.casefold()
    for label, choice in zip(labels, choices, strict=True):
        if folded == choice.strip().casefold():
            return label
    return _last_capital(text, labels)


def _last_capital(text: str, labels: Sequence[str]) -> str | None:
    found = [m.group() for m in _STANDALONE_CAPITAL.finditer(text) if m.group() in labels]
    return found[-1] if found else None


class MultipleChoiceFileSuite(_FileSuite):
    """Multiple-choice questions; 1 for the right label, else 0.

    A line has ``question``, ``choices`` (a list labelled ``A``, ``B``... in order, at most 26, or an
    object of single-letter labels to texts) and ``answer`` (a label, a 0-based index or a choice's
    exact text). The prediction is the label named in the last ``<answer>`` block (``B``, ``(b)``,
    ``B) text``, a choice's text), else the completion's last standalone capital label.

    Records: ``metadata["prediction"]`` is the label read, or ``None``. Arguments as
    :class:`MathFileSuite`'s first four.
    """

    prefix = "mc"

    def _item(self, number: int, item_id: str, row: dict[str, Any]) -> _Item:
        where = self._where(number)
        question = _text_field(row, ("question",), where)
        if "choices" not in row:
            raise _BadLine(f"{where}: missing field 'choices'")
        raw = row["choices"]
        if isinstance(raw, list):
            if len(raw) > len(_LABELS):
                raise _BadLine(f"{where}: field 'choices' has {len(raw)} entries; at most {len(_LABELS)} are labelled")
            pairs = list(zip(_LABELS, raw, strict=False))
        elif isinstance(raw, dict):
            pairs = []
            for key, value in raw.items():
                if not (len(key) == 1 and key.upper() in _LABELS):
                    raise _BadLine(f"{where}: choice label {key!r} must be a single letter A-Z")
                pairs.append((key.upper(), value))
            if len({label for label, _ in pairs}) < len(pairs):
                raise _BadLine(f"{where}: field 'choices' repeats a label (labels are case-insensitive)")
        else:
            raise _BadLine(
                f"{where}: field 'choices' must be a list of strings or an object mapping labels to strings, "
                f"got {_type_name(raw)}"
            )
        if len(pairs) < 2:
            raise _BadLine(f"{where}: field 'choices' needs at least two choices, got {len(pairs)}")
        labels, choices = [], []
        for label, value in pairs:
            if isinstance(value, bool) or not isinstance(value, str | int | float):
                raise _BadLine(f"{where}: choice {label} must be a string, got {_type_name(value)}")
            labels.append(label)
            choices.append(str(value))
        reference = self._reference(row, labels, choices, where)
        listing = "\n".join(f"{label}. {choice}" for label, choice in zip(labels, choices, strict=True))
        user = f"{question.strip()}\n\n{listing}\n\n{_MC_INSTRUCTION}"
        messages = [*agent_prompt("reasoning"), {"role": "user", "content": user}]
        return _Item(number, item_id, messages, reference, {"labels": labels, "choices": choices})

    @staticmethod
    def _reference(row: Mapping[str, Any], labels: list[str], choices: list[str], where: str) -> str:
        if "answer" not in row:
            raise _BadLine(f"{where}: missing field 'answer'")
        answer = row["answer"]
        if isinstance(answer, int) and not isinstance(answer, bool):
            if not 0 <= answer < len(labels):
                raise _BadLine(f"{where}: answer index {answer} is out of range for {len(labels)} choices (0-based)")
            return labels[answer]
        if isinstance(answer, str):
            lone = _LONE_LABEL.fullmatch(answer.strip())
            if lone and lone.group(1).upper() in labels:
                return lone.group(1).upper()
            for label, choice in zip(labels, choices, strict=True):
                if answer.strip() == choice.strip():
                    return label
            raise _BadLine(
                f"{where}: answer {answer[:80]!r} is neither a choice label ({', '.join(labels)}) "
                "nor the exact text of a choice"
            )
        raise _BadLine(
            f"{where}: field 'answer' must be a label, a 0-based index or a choice's text, got {_type_name(answer)}"
        )

    def _score(self, item: _Item, text: str, context: Any) -> ItemRecord:
        labels, choices = item.data["labels"], item.data["choices"]
        parsed = extract_action(text, "reasoning")
        if parsed.format_ok and parsed.action is not None:
            prediction = _choice_label(parsed.action, labels, choices)
        else:
            prediction = _last_capital(text, labels)
        score = 1.0 if prediction == item.reference else 0.0
        return ItemRecord(item.item_id, score, item.prompt, text, item.reference, metadata={"prediction": prediction})


# -- code ------------------------------------------------------------------------------------------

_FENCE = re.compile(r"```[ \t]*([\w+.-]*)[^\n]*\n(.*?)```", re.DOTALL)
_PYTHON_TAGS = frozenset({"python", "python3", "py"})
_OPEN_FENCE = re.compile(r"```[ \t]*([\w+.-]*)[^\n]*\n(?!.*```)", re.DOTALL)
_STRIPPED_IMPORTS = frozenset({"typing", "typing_extensions", "__future__"})
_CODE_SYSTEM_PROMPT = (
    "You write Python code. Think briefly, then give your complete solution in one ```python fenced "
    "code block; only the last such block counts. The code runs in a sandbox: it may import only "
    f"{', '.join(ALLOWED_MODULES)}; no files, network or other modules."
)
_TEST_ENV = '''

class Env:
    """Runs a benchmark's tests on candidate code: one step, reward = the share of tests passed."""

    name = "CodeTests"
    setting = "reasoning"
    max_turns = 1
    tests = ({names})

    def reset(self, seed):
        return "", {{}}

    def step(self, action):
        passed = 0
        number = 0
        failures = []
        for test in self.tests:
            try:
                test()
                passed += 1
            except MemoryError:
                raise
            except Exception as exc:
                if len(failures) < {max_failures}:
                    failures.append([number, repr(exc)[:300]])
            number += 1
        return "", passed / {total}, True, False, {{"passed": passed, "failures": failures}}

    def hint(self):
        return "Make every test pass."

    def oracle(self):
        return ""
'''


def extract_code(text: str) -> str:
    """The code in a completion (unchecked): the last ```` ```python ```` (or ``py``) fenced block,
    else the last fenced block without a language, else what follows an unclosed opening fence,
    else the whole text."""
    blocks = _FENCE.findall(text)
    for tags in (_PYTHON_TAGS, frozenset({""})):
        chosen = [code for tag, code in blocks if tag.lower() in tags]
        if chosen:
            return chosen[-1]
    unclosed = _OPEN_FENCE.search(text)  # cut off by its token limit
    if unclosed is not None and unclosed.group(1).lower() in _PYTHON_TAGS | {""}:
        return text[unclosed.end() :]
    return text


def _is_main_guard(node: ast.stmt) -> bool:
    test = node.test if isinstance(node, ast.If) else None
    return (
        isinstance(test, ast.Compare)
        and isinstance(test.left, ast.Name)
        and test.left.id == "__name__"
        and any(isinstance(c, ast.Constant) and c.value == "__main__" for c in test.comparators)
    )


def _is_stripped_import(node: ast.AST) -> bool:
    if isinstance(node, ast.ImportFrom):
        return node.level == 0 and node.module in _STRIPPED_IMPORTS
    if isinstance(node, ast.Import):
        return all(alias.name in _STRIPPED_IMPORTS for alias in node.names)
    return False


class _DropAnnotations(ast.NodeTransformer):
    """Remove type annotations and ``typing`` imports."""

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.annotation = None
        return node

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> ast.AST:
        node.returns = None
        self.generic_visit(node)
        return node

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.stmt | None:
        if node.value is None:
            return None
        return ast.copy_location(ast.Assign([node.target], node.value), node)

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> ast.AST | None:
        return None if _is_stripped_import(node) else node

    visit_ImportFrom = visit_Import


def _prepare_code(code: str) -> str:
    """The code as the sandbox runs it: without a top-level ``__main__`` block (the sandbox reserves
    dunder names) and, if it imports ``typing``, without annotations; raises SyntaxError."""
    tree = ast.parse(code)
    guards = any(_is_main_guard(node) for node in tree.body)
    typed = any(_is_stripped_import(node) for node in ast.walk(tree))
    if not guards and not typed:
        return code
    tree.body = [node for node in tree.body if not _is_main_guard(node)]
    if typed:
        tree = _DropAnnotations().visit(tree)
        for node in ast.walk(tree):
            body = getattr(node, "body", None)
            if isinstance(body, list) and not body and not isinstance(node, ast.Module):
                body.append(ast.Pass())
    return ast.unparse(ast.fix_missing_locations(tree)) + "\n"


def _test_function(index: int, test: str, entry_point: str | None, where: str) -> str:
    """One test snippet as ``def spade_test_<index>(): ...``; a HumanEval ``check`` that is defined
    but not called is called with the entry point."""
    try:
        tree = ast.parse(test)
    except SyntaxError as exc:
        raise _BadLine(f"{where}: test {index} is not valid Python (line {exc.lineno}: {exc.msg})") from None
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or "."]
            for module in modules:
                if module not in ALLOWED_MODULES:
                    raise _BadLine(
                        f"{where}: test {index} imports {module!r}; the sandbox allows only {', '.join(ALLOWED_MODULES)}"
                    )
    if not tree.body:
        raise _BadLine(f"{where}: test {index} has no statements")
    defines_check = any(isinstance(n, ast.FunctionDef) and n.name == "check" for n in tree.body)
    calls = any(
        isinstance(n, ast.Expr)
        and isinstance(n.value, ast.Call)
        and isinstance(n.value.func, ast.Name)
        and n.value.func.id == "check"
        for n in tree.body
    )
    if entry_point and defines_check and not calls:
        tree.body.append(ast.parse(f"check({entry_point})").body[0])
    function = ast.parse(f"def spade_test_{index}():\n    pass\n").body[0]
    assert isinstance(function, ast.FunctionDef)
    function.body = tree.body
    return ast.unparse(ast.fix_missing_locations(ast.Module(body=[function], type_ignores=[])))


def _test_program(code: str, tests: Sequence[str]) -> str:
    names = ", ".join(f"spade_test_{i}" for i in range(len(tests))) + ("," if len(tests) == 1 else "")
    env = _TEST_ENV.format(names=names, total=len(tests), max_failures=MAX_FAILURES_KEPT)
    return code.rstrip() + "\n\n\n" + "\n\n\n".join(tests) + "\n" + env


class CodeFileSuite(_FileSuite):
    """Programming problems with tests; the model's code runs only in the sandbox, scored pass@1.

    A line has ``prompt`` (or ``text``), ``tests`` (or ``test``, ``test_list``: a list of snippets such
    as ``"assert add(1, 2) == 3"``, or one string that is one test) and optionally ``entry_point``,
    the function the code must define. Tests may import only the sandbox's allow-listed modules.
    The code (:func:`extract_code`) and the tests become one environment program run by
    :class:`SandboxedEnv`. Code that does not parse, is refused by the sandbox, or runs out of time
    or memory scores 0 with ``metadata["failure"]`` set and ``error`` left ``None``.

    Arguments as :class:`MathFileSuite`'s first four, and ``sandbox_config`` (the sandbox's limits).
    Records: ``metadata`` has ``tests_passed``, ``tests_total``, ``failures`` (``[test index,
    exception]`` for the first failed tests) and ``failure``. ``run`` raises SandboxSetupError when
    the sandbox cannot start workers on this machine.
    """

    prefix = "code"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        sampling: SamplingParams = DEFAULT_SAMPLING,
        batch_size: int = 16,
        limit: int | None = None,
        sandbox_config: SandboxConfig | None = None,
    ) -> None:
        super().__init__(path, sampling=sampling, batch_size=batch_size, limit=limit)
        if sandbox_config is not None and not isinstance(sandbox_config, SandboxConfig):
            raise ValueError(f"sandbox_config must be a SandboxConfig, got {type(sandbox_config).__name__}")
        self.sandbox_config = sandbox_config or SandboxConfig()

    def config(self) -> dict[str, Any]:
        return {
            **super().config(),
            "call_timeout_s": self.sandbox_config.call_timeout_s,
            "memory_bytes": self.sandbox_config.memory_bytes,
        }

    def _item(self, number: int, item_id: str, row: dict[str, Any]) -> _Item:
        where = self._where(number)
        problem = _text_field(row, ("prompt", "text"), where)
        entry_point = row.get("entry_point")
        if entry_point is not None and not (isinstance(entry_point, str) and entry_point.isidentifier()):
            raise _BadLine(f"{where}: field 'entry_point' must be a function name, got {entry_point!r:.80}")
        key = next((k for k in ("tests", "test", "test_list") if k in row), None)
        if key is None:
            raise _BadLine(f"{where}: missing field 'tests' (a list of test snippets, or one string of test code)")
        raw = row[key]
        if isinstance(raw, str):
            raw = [raw]
        if not isinstance(raw, list) or not all(isinstance(t, str) for t in raw):
            raise _BadLine(f"{where}: field {key!r} must be a list of strings or a string, got {_type_name(row[key])}")
        if not raw:
            raise _BadLine(f"{where}: field {key!r} has no tests")
        tests = [_test_function(i, test, entry_point, where) for i, test in enumerate(raw)]
        user = problem.strip() + (f"\n\nYour code must define `{entry_point}`." if entry_point else "")
        messages = [{"role": "system", "content": _CODE_SYSTEM_PROMPT}, {"role": "user", "content": user}]
        return _Item(number, item_id, messages, None, {"tests": tests})

    def _score(self, item: _Item, text: str, context: Any) -> ItemRecord:
        tests: list[str] = item.data["tests"]
        metadata: dict[str, Any] = {"tests_passed": 0, "tests_total": len(tests), "failures": [], "failure": None}
        record = ItemRecord(item.item_id, 0.0, item.prompt, text, None, metadata=metadata)
        try:
            code = _prepare_code(extract_code(text))
        except (SyntaxError, ValueError, RecursionError, MemoryError) as exc:
            where = f"line {exc.lineno}: " if isinstance(exc, SyntaxError) and exc.lineno else ""
            metadata["failure"] = f"the code does not parse: {where}{getattr(exc, 'msg', None) or exc}"
            return record
        try:
            program = EnvProgram(_test_program(code, tests), origin="the code")
            with SandboxedEnv(program, config=self.sandbox_config) as env:
                env.reset(seed=0)
                _obs, _reward, _terminated, _truncated, info = env.step("")
        except SandboxSetupError:
            raise
        except SpadeError as exc:
            metadata["failure"] = f"{exc.category}: {exc.message.strip()[:500]}"
            return record
        except ValueError as exc:
            metadata["failure"] = str(exc).strip()[:500]
            return record
        failure = info.get("sandbox_error")
        if failure is not None:
            metadata["failure"] = f"{failure.get('category')}: {failure.get('message', '')}"[:500]
            return record
        passed = int(info.get("passed", 0))
        metadata["tests_passed"], metadata["failures"] = passed, info.get("failures", [])
        record.score = 1.0 if passed == len(tests) else 0.0
        return record
