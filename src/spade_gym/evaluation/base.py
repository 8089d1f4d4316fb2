"""What every held-out suite shares: :class:`Suite` (``Suite.run(policy) -> SuiteResult``), per-item
records and confidence intervals.

Item scores are in [0, 1]; a suite's score is their mean over *every* item given: a failed item
scores 0 with the reason in :attr:`ItemRecord.error`, never skipped.

95% intervals: Wilson's score interval when every score is 0 or 1 (Wilson 1927, JASA 22), else the
normal interval ``mean +- z * s / sqrt(n)`` clipped to [0, 1]. A difference (:func:`compare_results`)
is paired by item id when the ids agree, else Newcombe's hybrid score interval (Newcombe 1998,
Statistics in Medicine 17, method 10).
"""

from __future__ import annotations

import json
import math
import statistics
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from spade_gym.policies.base import Completion, SamplingParams, policy_name

__all__ = [
    "DEFAULT_SAMPLING",
    "Comparison",
    "ItemRecord",
    "Suite",
    "SuiteResult",
    "compare_results",
    "confidence_interval",
    "generate_answers",
    "load_results",
    "read_jsonl",
    "save_results",
]

#: Evaluation samples greedily by default: one deterministic answer per item.
DEFAULT_SAMPLING = SamplingParams(temperature=0.0, max_new_tokens=512)
#: Two-sided 95% normal quantile.
Z95 = 1.959963984540054
RESULTS_FORMAT = "spade-eval-v1"


@dataclass
class ItemRecord:
    """One scored item: a stable ``item_id`` within the suite (``"leg_counting/3"``), ``score`` in
    [0, 1], the first user message ``prompt`` and last completion ``response`` (2,000 characters in
    JSON), the ``reference`` answer if any, ``error``: why it scored 0 without being answered wrongly
    (unreadable line, empty response, environment failure), and suite-specific JSON ``metadata``."""

    item_id: str
    score: float
    prompt: str = ""
    response: str = ""
    reference: str | None = None
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class SuiteResult:
    """A suite's result on one policy: ``suite`` and ``policy`` names, one :class:`ItemRecord` per item
    given (in order), wall ``seconds``, and the suite's ``config`` (JSON)."""

    suite: str
    policy: str
    items: list[ItemRecord]
    seconds: float = 0.0
    config: dict[str, Any] = field(default_factory=dict)

    @property
    def n(self) -> int:
        """Items scored (all of them, failures included)."""
        return len(self.items)

    @property
    def score(self) -> float:
        """Mean item score in [0, 1] (``nan`` for an empty suite)."""
        return statistics.fmean(r.score for r in self.items) if self.items else math.nan

    @property
    def errors(self) -> int:
        """Items scored 0 because something failed (see :attr:`ItemRecord.error`)."""
        return sum(r.error is not None for r in self.items)

    def interval(self, z: float = Z95) -> tuple[float, float]:
        """The score's confidence interval ``(low, high)`` (see the module docstring)."""
        return confidence_interval([r.score for r in self.items], z)

    def score_text(self) -> str:
        """``"0.620 [0.540, 0.700]"``: the score and its 95% interval."""
        low, high = self.interval()
        return f"{self.score:.3f} [{low:.3f}, {high:.3f}]"

    def by(self, key: str) -> dict[str, SuiteResult]:
        """One result per value of ``metadata[key]`` (e.g. ``"task"``), named ``suite/value``; KeyError
        when no item has ``key``."""
        if self.items and not any(key in r.metadata for r in self.items):
            known = sorted({k for r in self.items for k in r.metadata})
            raise KeyError(f"no item of {self.suite!r} has metadata {key!r} (keys: {', '.join(known) or 'none'})")
        groups: dict[str, list[ItemRecord]] = {}
        for record in self.items:
            groups.setdefault(str(record.metadata.get(key, "?")), []).append(record)
        return {k: SuiteResult(f"{self.suite}/{k}", self.policy, v) for k, v in sorted(groups.items())}

    def to_dict(self, text_limit: int = 2000) -> dict[str, Any]:
        """JSON data: the summary (score, interval, n, errors) and every item."""
        low, high = self.interval()
        items = [
            {**asdict(r), "prompt": r.prompt[:text_limit], "response": r.response[:text_limit]} for r in self.items
        ]
        return {
            "suite": self.suite,
            "policy": self.policy,
            "score": _finite_or_none(self.score),
            "ci95": [_finite_or_none(low), _finite_or_none(high)],
            "n": self.n,
            "errors": self.errors,
            "seconds": self.seconds,
            "config": self.config,
            "items": items,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SuiteResult:
        """Rebuild a result from :meth:`to_dict`'s data; ValueError for data that is not a suite result
        or a score that is not a number in [0, 1]."""
        try:
            items = [ItemRecord(**row) for row in data["items"]]
            result = cls(
                str(data["suite"]),
                str(data["policy"]),
                items,
                float(data.get("seconds", 0.0)),
                dict(data.get("config", {})),
            )
        except (KeyError, TypeError) as exc:
            raise ValueError(f"not a spade suite result: {exc}") from None
        for record in items:
            score = record.score
            if isinstance(score, bool) or not isinstance(score, int | float) or not 0.0 <= score <= 1.0:
                raise ValueError(
                    f"suite {result.suite!r}, item {record.item_id!r}: score {score!r} is not a number in [0, 1]"
                )
            record.score = float(score)
        return result


def _finite_or_none(x: float) -> float | None:
    return x if math.isfinite(x) else None


def confidence_interval(scores: Sequence[float], z: float = Z95) -> tuple[float, float]:
    """``(low, high)`` within [0, 1] for the mean of ``scores`` (each in [0, 1]) at normal quantile ``z``;
    ``(nan, nan)`` for no scores (methods: the module docstring)."""
    n = len(scores)
    if n == 0:
        return math.nan, math.nan
    mean = statistics.fmean(scores)
    if all(s in (0.0, 1.0) for s in scores):
        denominator = 1 + z * z / n
        centre = (mean + z * z / (2 * n)) / denominator
        half = z * math.sqrt(mean * (1 - mean) / n + z * z / (4 * n * n)) / denominator
        low, high = centre - half, centre + half
        return (0.0 if low < 1e-12 else low), (1.0 if high > 1 - 1e-12 else high)
    half = z * (statistics.stdev(scores) / math.sqrt(n) if n > 1 else math.inf)
    return max(mean - half, 0.0), min(mean + half, 1.0)


class Suite(ABC):
    """A held-out benchmark: subclasses set :attr:`name` and implement :meth:`run`."""

    name: str = "suite"

    @abstractmethod
    def run(self, policy: Any, *, progress: Callable[[int, int], None] | None = None) -> SuiteResult:
        """Score ``policy`` (anything with ``generate``) on every item: one record per item.
        ``progress`` is called with ``(items done, items in all)``."""

    def config(self) -> dict[str, Any]:
        """The suite's settings as JSON data (stored in the result)."""
        return {}

    def _result(self, policy: Any, items: list[ItemRecord], began: float) -> SuiteResult:
        """The run's result; ``began`` is its ``time.perf_counter()`` start."""
        return SuiteResult(self.name, policy_name(policy), items, time.perf_counter() - began, self.config())


def save_results(results: Sequence[SuiteResult], path: str | Path, *, extra: Mapping[str, Any] | None = None) -> Path:
    """Write results to a JSON file (``{"format", **extra, "results": [...]}``); returns the path."""
    path = Path(path)
    if path.parent != Path():
        path.parent.mkdir(parents=True, exist_ok=True)
    data = {"format": RESULTS_FORMAT, **(extra or {}), "results": [r.to_dict() for r in results]}
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8")
    return path


def load_results(path: str | Path) -> list[SuiteResult]:
    """Read a file written by :func:`save_results` (``spade eval --out``); FileNotFoundError, or
    ValueError for a file that is not one."""
    path = Path(path)
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ValueError(f"{path} is not JSON ({exc})") from None
    if not isinstance(data, dict) or data.get("format") != RESULTS_FORMAT:
        raise ValueError(f"{path} is not a spade eval results file (expected format {RESULTS_FORMAT!r})")
    return [SuiteResult.from_dict(r) for r in data["results"]]


@dataclass(frozen=True)
class Comparison:
    """``a - b`` on one suite: the scores, ``difference``, its interval ``low, high`` within [-1, 1]
    (``nan`` when a result has no item), ``paired`` by id or not, ``n`` items compared (paired) or
    ``n_a + n_b``, and ``config_differences`` (``"key: a -> b"``: the scores measure different things)."""

    suite: str
    score_a: float
    score_b: float
    difference: float
    low: float
    high: float
    paired: bool
    n: int
    config_differences: tuple[str, ...] = ()

    def text(self) -> str:
        """``"+0.120 [-0.010, +0.250]"``: the difference and its interval."""
        return f"{self.difference:+.3f} [{self.low:+.3f}, {self.high:+.3f}]"


def compare_results(a: SuiteResult, b: SuiteResult, z: float = Z95) -> Comparison:
    """The difference ``a - b`` with its interval: paired ``mean(a_i - b_i) +- z * sd / sqrt(n)`` when
    both have the same ids in the same order (more than one, differences not all equal), else
    Newcombe's hybrid score interval from each result's own interval.

    Raises:
        ValueError: the results are of different suites.
    """
    if a.suite != b.suite:
        raise ValueError(f"cannot compare suite {a.suite!r} with suite {b.suite!r}")
    differences = tuple(_config_differences(a.config, b.config))
    diff = a.score - b.score
    ids_a, ids_b = [r.item_id for r in a.items], [r.item_id for r in b.items]
    if ids_a == ids_b and len(set(ids_a)) == len(ids_a) and len(ids_a) > 1:
        diffs = [x.score - y.score for x, y in zip(a.items, b.items, strict=True)]
        sd = statistics.stdev(diffs)
        if sd > 0:
            half = z * sd / math.sqrt(len(diffs))
            low, high = max(diff - half, -1.0), min(diff + half, 1.0)
            return Comparison(a.suite, a.score, b.score, diff, low, high, True, len(diffs), differences)
    low_a, high_a = a.interval(z)
    low_b, high_b = b.interval(z)
    low = diff - math.sqrt((a.score - low_a) ** 2 + (high_b - b.score) ** 2)
    high = diff + math.sqrt((high_a - a.score) ** 2 + (b.score - low_b) ** 2)
    return Comparison(a.suite, a.score, b.score, diff, max(low, -1.0), min(high, 1.0), False, a.n + b.n, differences)


#: Settings that differ between two runs of one suite without changing what it measures.
_SAME_MEASURE = frozenset({"sampling.seed"})


def _config_differences(a: Mapping[str, Any], b: Mapping[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key in sorted(set(a) | set(b)):
        va, vb, dotted = a.get(key), b.get(key), f"{prefix}{key}"
        if isinstance(va, Mapping) and isinstance(vb, Mapping):
            out += _config_differences(va, vb, dotted + ".")
        elif va != vb and dotted not in _SAME_MEASURE:
            out.append(f"{dotted}: {va!r:.60} -> {vb!r:.60}")
    return out


def read_jsonl(path: str | Path) -> list[tuple[int, dict[str, Any] | str]]:
    """``(line number, object)`` per non-blank line of a JSON-lines file, or ``(line number, error
    message)`` for a line that is not UTF-8 or not a JSON object; FileNotFoundError without a file."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no benchmark file at {path}")
    rows: list[tuple[int, dict[str, Any] | str]] = []
    for number, raw in enumerate(path.read_bytes().split(b"\n"), start=1):
        try:
            line = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            rows.append((number, f"{path.name} line {number}: not UTF-8 text ({exc.reason} at byte {exc.start})"))
            continue
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (json.JSONDecodeError, RecursionError) as exc:
            rows.append((number, f"{path.name} line {number}: not valid JSON ({exc})"))
            continue
        if not isinstance(value, dict):
            rows.append((number, f"{path.name} line {number}: expected a JSON object, got {type(value).__name__}"))
        else:
            rows.append((number, value))
    return rows


def generate_answers(
    policy: Any,
    conversations: Sequence[list[dict[str, str]]],
    sampling: SamplingParams = DEFAULT_SAMPLING,
    *,
    batch_size: int = 16,
    progress: Callable[[int, int], None] | None = None,
) -> list[Completion | str]:
    """Per conversation a :class:`~spade_gym.policies.base.Completion`, or an error string when it
    fails on its own (a failed batch is retried item by item). ``sampling.n`` must be 1; long
    prompts are left-truncated. ``progress(done, total)`` is called after each batch."""
    sampling = replace(sampling, truncate_prompt=True)
    out: list[Completion | str] = []
    for lo in range(0, len(conversations), batch_size):
        batch = list(conversations[lo : lo + batch_size])
        try:
            out.extend(_complete(policy, batch, sampling))
        except Exception:  # noqa: BLE001 - find the item that fails, score it 0, keep the rest
            for conversation in batch:
                try:
                    out.extend(_complete(policy, [conversation], sampling))
                except Exception as exc:  # noqa: BLE001
                    out.append(f"generation failed: {type(exc).__name__}: {exc}")
        if progress is not None:
            progress(len(out), len(conversations))
    return out


def _complete(policy: Any, prompts: list[list[dict[str, str]]], sampling: SamplingParams) -> list[Completion]:
    completions = list(policy.generate([list(p) for p in prompts], sampling))
    if len(completions) != len(prompts) or not all(isinstance(c, Completion) for c in completions):
        raise ValueError(f"generate returned {len(completions)} completions for {len(prompts)} prompts")
    return completions
