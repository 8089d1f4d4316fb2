"""What every held-out suite shares: per-item records, a result with a confidence interval, and the
:class:`Suite` interface (``Suite.run(policy) -> SuiteResult``).

Scores are per item, in [0, 1] (1 is solved). A suite's score is their mean over *every* item it
was given: an item that could not be read, a policy that answered nothing, or a program that
crashed is scored 0 and counted, with the reason in :attr:`ItemRecord.error`, never skipped.

Confidence intervals (95% by default): the Wilson score interval when every score is 0 or 1
(Wilson 1927, "Probable inference, the law of succession, and statistical inference", JASA 22), the
normal interval ``mean +- z * s / sqrt(n)`` clipped to [0, 1] otherwise. The difference of two
results (:func:`compare_results`) is paired over the items both scored when their ids agree
(``mean(a_i - b_i) +- z * sd / sqrt(n)``), else Newcombe's hybrid score interval from the two
results' own intervals (Newcombe 1998, Statistics in Medicine 17, method 10).
"""

from __future__ import annotations

import json
import math
import statistics
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from spade_gym.policies.base import Completion, SamplingParams

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
    """One scored item.

    Attributes:
        item_id: stable id within the suite (``"leg_counting/3"``, ``"line-12"``, a file's own id).
        score: in [0, 1]; 0 for an item that failed in any way.
        prompt: what the policy saw (the first user message; cut to 2,000 characters in JSON).
        response: the policy's last completion text (cut to 2,000 characters in JSON).
        reference: the reference answer, when the suite has one.
        error: why the item scored 0 without being answered wrongly (unreadable line, empty
            response, environment failure), else ``None``.
        metadata: suite-specific JSON data (task name, tests passed, turns...).
    """

    item_id: str
    score: float
    prompt: str = ""
    response: str = ""
    reference: str | None = None
    error: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)


@dataclass
class SuiteResult:
    """A suite's result on one policy.

    Attributes:
        suite: the suite's name (``"reasoning-gym"``, ``"math:gsm8k.jsonl"``...).
        policy: the policy's name.
        items: one :class:`ItemRecord` per item given, in order.
        seconds: wall time of the run.
        config: the suite's settings (JSON), so a result says what was measured.
    """

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

    def by(self, key: str) -> dict[str, SuiteResult]:
        """Split by ``metadata[key]`` (e.g. ``"task"``): one result per value, named ``suite/value``.

        Raises:
            KeyError: no item has ``key`` in its metadata (the message lists the keys there are).
        """
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
        items = []
        for record in self.items:
            row = asdict(record)
            row["prompt"], row["response"] = row["prompt"][:text_limit], row["response"][:text_limit]
            items.append(row)
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
        """Rebuild a result from :meth:`to_dict`'s data.

        Raises:
            ValueError: the data is not a suite result (the message names the missing field), or an
                item's score is not a number in [0, 1].
        """
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
    """Confidence interval of the mean of ``scores`` (each in [0, 1]).

    Args:
        scores: item scores.
        z: the normal quantile (1.96 for 95%).

    Returns:
        ``(low, high)`` within [0, 1]; ``(nan, nan)`` for no scores. Wilson score interval when
        every score is 0 or 1, else the clipped normal interval (see the module docstring).
    """
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
    """A held-out benchmark: :meth:`run` scores a policy on every item.

    Subclasses set :attr:`name` and implement :meth:`run`; :meth:`config` reports their settings.
    """

    name: str = "suite"

    @abstractmethod
    def run(self, policy: Any, *, progress: Callable[[int, int], None] | None = None) -> SuiteResult:
        """Score ``policy`` on every item of the suite.

        Args:
            policy: a :class:`~spade_gym.policies.base.Policy` (anything with ``generate``).
            progress: called with ``(items done, items in all)`` as the run goes.

        Returns:
            A :class:`SuiteResult` with one record per item.
        """

    def config(self) -> dict[str, Any]:
        """The suite's settings as JSON data (stored in the result)."""
        return {}


def save_results(results: Sequence[SuiteResult], path: str | Path, *, extra: Mapping[str, Any] | None = None) -> Path:
    """Write results to a JSON file (``{"format", "results": [...], **extra}``); returns the path.

    Raises:
        OSError: the file cannot be written.
    """
    path = Path(path)
    if path.parent != Path():
        path.parent.mkdir(parents=True, exist_ok=True)
    data = {"format": RESULTS_FORMAT, **(extra or {}), "results": [r.to_dict() for r in results]}
    path.write_text(json.dumps(data, indent=1, ensure_ascii=False, allow_nan=False) + "\n", encoding="utf-8")
    return path


def load_results(path: str | Path) -> list[SuiteResult]:
    """Read a file written by :func:`save_results` (``spade eval --out``).

    Raises:
        FileNotFoundError: no such file. ValueError: not a results file (the message says why).
    """
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
    """``a - b`` on one suite: the two scores, their difference and its confidence interval.

    Attributes:
        suite: the suite; ``score_a``, ``score_b``: the scores; ``difference``: ``a - b``;
        low, high: the difference's interval, within [-1, 1] (``nan`` when a result has no item);
        paired: whether items were paired by id; ``n``: items compared (paired) or ``n_a + n_b``;
        config_differences: the settings in which the two results differ (tasks, seeds, files,
            sampling...), as ``"key: a -> b"``; a difference there means the scores measure
            different things.
    """

    suite: str
    score_a: float
    score_b: float
    difference: float
    low: float
    high: float
    paired: bool
    n: int
    config_differences: tuple[str, ...] = ()


def compare_results(a: SuiteResult, b: SuiteResult, z: float = Z95) -> Comparison:
    """The difference ``a - b`` with its confidence interval (see the module docstring).

    Items paired by id (the same ids in the same order, more than one, and not all differences
    equal) give the paired interval ``mean(a_i - b_i) +- z * sd / sqrt(n)``. Otherwise the interval
    is Newcombe's hybrid score interval for a difference of two independent means (Newcombe 1998,
    Statistics in Medicine 17, method 10), built from each result's own interval (Wilson for 0/1
    scores), which stays honest when a result has no variance. Both are clipped to [-1, 1].

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
    """Read a JSON-lines benchmark file, keeping bad lines as errors rather than skipping them.

    Args:
        path: the file (UTF-8, one JSON object per line; blank lines are ignored).

    Returns:
        ``(line number, object)`` per line, or ``(line number, error message)`` for a line that is
        not UTF-8 text or not a JSON object.

    Raises:
        FileNotFoundError: no such file (or a folder).
    """
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
    """One completion per conversation, generated in batches; a batch that fails is retried item by
    item, and an item that still fails gives its error message instead of a completion.

    Args:
        policy: anything with ``generate(prompts, sampling)``.
        conversations: chat messages per item.
        sampling: sampling settings (``n`` must be 1; prompts that are too long are left-truncated).
        batch_size: conversations per ``generate`` call.
        progress: called with ``(items done, items in all)`` after each batch.

    Returns:
        Per conversation, a :class:`~spade_gym.policies.base.Completion` or an error string.
    """
    from dataclasses import replace

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
    """``policy.generate``, checked to give one :class:`Completion` per prompt."""
    completions = list(policy.generate([list(p) for p in prompts], sampling))
    if len(completions) != len(prompts) or not all(isinstance(c, Completion) for c in completions):
        raise ValueError(f"generate returned {len(completions)} completions for {len(prompts)} prompts")
    return completions
