"""The validation gate's configuration and its verdict: :class:`ValidationConfig` (every limit),
:class:`CheckResult` and :class:`ValidationReport` (one result per check of :data:`CHECKS`, the
category of the first failed one, feedback for the Designer) and :func:`conclude`. Below the gate
(:mod:`spade_gym.validation`) and the novelty check (:mod:`spade_gym.novelty`), which both fill a report."""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import asdict, dataclass, field, replace
from typing import Any

from spade_gym.errors import Category
from spade_gym.program import RETURN_TOLERANCE, SUCCESS_RETURN
from spade_gym.sandbox import SandboxConfig
from spade_gym.seeds import SEED_VARIABLE, seed_source

__all__ = ["CHECKS", "CheckResult", "ValidationConfig", "ValidationReport", "clip", "conclude"]


def _gate_hash_seeds() -> tuple[int, int]:
    """The gate's two ``PYTHONHASHSEED`` values: random, so ``hash()`` cannot reveal validation."""
    secret = os.environ.get(SEED_VARIABLE)  # set: the same pair in every process (Ray workers too)
    raw = hashlib.sha256(f"hash-seeds-{secret}".encode()).digest() if secret else os.urandom(8)
    return int.from_bytes(raw[:4], "big") >> 1, (int.from_bytes(raw[4:8], "big") >> 1) | (1 << 31)


_GATE_HASH_SEEDS: tuple[int, int] = _gate_hash_seeds()

#: The checks, in the order they are reported; the first failing one names the report's category.
CHECKS = (
    "static",
    "load",
    "contract",
    "determinism",
    "termination",
    "feasibility",
    "non_triviality",
    "variety",
    "novelty",
)

#: How to repair each kind of failure, appended to the feedback for the Designer.
_REPAIR: dict[str, str] = {
    Category.COMPILE_REJECTED: "Fix the listed problems; use only the allowed imports and ordinary Python.",
    Category.SANDBOX_DENIED: "Do not touch dunder attributes, files, modules' internals or builtins such as type(), "
    "id(), open() or eval(); use plain values and f-strings.",
    Category.TIMEOUT: "Make every call (reset, step, hint, oracle) finish in well under the deadline and keep "
    "episodes short; avoid unbounded loops and expensive searches.",
    Category.MEMORY_LIMIT: "Keep data structures small; do not build huge strings or lists.",
    Category.OUTPUT_LIMIT: "Keep observations, info and print output small.",
    Category.PROTOCOL_ERROR: "reset(seed) must return (str, dict) and step(action) must return "
    "(str, float, bool, bool, dict) with JSON values only in info (no tuples or sets).",
    Category.INVALID_REWARD: "Rewards must be finite ints or floats and the episode return (sum of rewards) must lie in "
    "[0, 1]: give the success reward once.",
    Category.ENV_EXCEPTION: "Handle every action, including empty, malformed or repeated ones, by returning an "
    "observation that says what was wrong; never raise.",
    Category.NONDETERMINISM: "Draw all randomness from random.Random(seed) created in reset(seed), reset every "
    "attribute in reset, and never depend on hash(), id() or set iteration order.",
    Category.EPISODE_LIMIT: "Set truncated=True when the turn counter reaches max_turns (or end the episode earlier).",
    Category.ORACLE_FAILED: "oracle() must return the action a perfect agent takes in the current state; following it "
    f"from reset must reach a return of at least {SUCCESS_RETURN}.",
    Category.TRIVIAL: "Check the answer exactly (not with 'in' or a prefix test) and do not reward empty, constant or "
    "echoed actions.",
    Category.HINT_LEAK: "hint() must help without giving the answer away: submitting the hint text must not succeed and "
    "the hint must not contain the answer; give a method, a partial result or the first digit instead.",
    Category.WRONG_SETTING: "Write an environment of the setting the task asks for: set setting to it.",
    Category.SEED_INVARIANT: "Different seeds must give different tasks: generate the task from random.Random(seed).",
    Category.DUPLICATE: "Write an environment with a task of its own, not one the Agent already practises in the "
    "registered environment named above.",
    Category.WORKER_CRASH: "The program crashed its worker process; simplify it.",
}


@dataclass(frozen=True)
class ValidationConfig:
    """Every limit of the validation gate.

    Attributes:
        seeds: validation seeds; default ``()``: ``n_seeds`` drawn fresh per validation
            (:meth:`resolved`), so a program cannot know them.
        trivial_seeds: how many of ``seeds`` (the first) the trivial policies play; a trivial
            episode is played to the program's ``max_turns`` (capped by the host at
            ``sandbox.max_turns``), so paying late is caught.
        answer_seeds: out-of-sample seeds whose first oracle actions give the "most common answer"
            policy (default: ``n_seeds`` more drawn fresh).
        max_trivial_success_rate, max_hint_success_rate: share of seeds a trivial policy may win,
            and on which the hint may succeed or equal the answer.
        min_distinct_first_observations: share of seeds that must give distinct first observations.
        budget_s: CPU seconds of the workers in the whole validation (and in an audit or novelty
            probe); wall time at most ``sandbox.wall_factor`` times as much.
        host_budget_s: CPU seconds of the host's own work in each of those (decoding, hashing, the
            hint-leak check); ``max_hint_bytes``: longest hint, UTF-8 bytes (the Agent reads it whole);
            observations are bounded per episode by ``sandbox.max_episode_text_bytes``.
        hash_seeds: ``PYTHONHASHSEED`` of the determinism check's two workers (default: drawn once per process).
        sandbox: the sandbox limits; its ``hash_seed`` is replaced by ``hash_seeds``.
    """

    seeds: tuple[int, ...] = ()
    n_seeds: int = 10
    trivial_seeds: int = 10
    answer_seeds: tuple[int, ...] = ()
    success_threshold: float = SUCCESS_RETURN
    max_trivial_success_rate: float = 0.5
    max_hint_success_rate: float = 0.0
    min_distinct_first_observations: float = 0.5
    return_tolerance: float = RETURN_TOLERANCE
    budget_s: float = 20.0
    host_budget_s: float = 20.0
    max_hint_bytes: int = 4096
    hash_seeds: tuple[int, int] = field(default_factory=lambda: _GATE_HASH_SEEDS)
    constant_answers: tuple[str, ...] = ("0", "yes")
    random_text_seed: int = 0
    sandbox: SandboxConfig = field(default_factory=SandboxConfig)

    def __post_init__(self) -> None:
        if len(set(self.seeds)) != len(self.seeds):
            raise ValueError("ValidationConfig.seeds must be distinct ints (or empty: drawn fresh)")
        if self.n_seeds < 1:
            raise ValueError(f"ValidationConfig.n_seeds must be >= 1, got {self.n_seeds}")
        if self.hash_seeds[0] == self.hash_seeds[1]:
            raise ValueError("ValidationConfig.hash_seeds must differ, or the determinism check proves nothing")
        if not 0 <= self.max_trivial_success_rate < 1:
            raise ValueError("max_trivial_success_rate must be in [0, 1)")

    def resolved(self, program_id: str = "") -> ValidationConfig:
        """This configuration with empty ``seeds`` and ``answer_seeds`` drawn in ``[0, 2**31)`` by
        :class:`random.SystemRandom`, or from :data:`SEED_VARIABLE` and ``program_id`` when it is set."""
        if self.seeds and self.answer_seeds:
            return self
        drawn = seed_source(program_id).sample(range(2**31), 2 * self.n_seeds)
        return replace(
            self,
            seeds=self.seeds or tuple(drawn[: self.n_seeds]),
            answer_seeds=self.answer_seeds or tuple(drawn[self.n_seeds :]),
        )

    def to_dict(self) -> dict[str, Any]:
        """The configuration as JSON values (tuples become lists)."""
        return dict(json.loads(json.dumps(asdict(self))))


@dataclass
class CheckResult:
    """The outcome of one check: ``name`` (of :data:`CHECKS`), ``passed`` (``None``: not run),
    the failure's ``category`` and ``message``, and the wall ``seconds`` spent on it."""

    name: str
    passed: bool | None = None
    category: str | None = None
    message: str = ""
    seconds: float = 0.0


@dataclass
class ValidationReport:
    """Everything the gate found about one program; JSON round-trips with :meth:`to_json`.

    ``name``, ``setting``, ``max_turns``, ``description``: what the program declares (``None`` if
    it did not load). ``category``: ``"ACCEPT"`` or that of the first failing check. ``checks``: one
    :class:`CheckResult` per name of :data:`CHECKS`, in order. ``oracle_returns``: per seed.
    ``seconds``: wall time, ``startup_seconds`` of it starting the workers. ``config``: as a dict.
    ``usage``: what the validation used of its budgets (``worker_cpu_s``, ``host_cpu_s``, the
    largest episode's observation bytes ``episode_text_bytes``, the longest hint ``hint_bytes``).
    """

    program_id: str
    name: str | None = None
    setting: str | None = None
    max_turns: int | None = None
    description: str | None = None
    accepted: bool = False
    category: str = Category.COMPILE_REJECTED
    checks: list[CheckResult] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    oracle_returns: list[float] = field(default_factory=list)
    trivial_success_rates: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    startup_seconds: float = 0.0
    config: dict[str, Any] = field(default_factory=dict)
    usage: dict[str, float] = field(default_factory=dict)

    def check(self, name: str) -> CheckResult:
        """The result of the check ``name``."""
        for result in self.checks:
            if result.name == name:
                return result
        raise KeyError(f"no check named {name!r}; checks are {', '.join(CHECKS)}")

    @property
    def failures(self) -> list[CheckResult]:
        """The checks that failed, in report order."""
        return [c for c in self.checks if c.passed is False]

    def feedback(self) -> str:
        """A text for the Environment Designer: what failed, where, and how to repair it."""
        if self.accepted:
            return f"The environment {self.name} passed every validation check."
        lines = [f"The environment{' ' + self.name if self.name else ''} failed validation:"]
        for failure in self.failures:
            lines.append(f"- {failure.name} ({failure.category}): {failure.message}")
            advice = _REPAIR.get(failure.category or "")
            if advice:
                lines.append(f"  How to fix: {advice}")
        return "\n".join(lines)

    def to_dict(self) -> dict[str, Any]:
        """The report as JSON values."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ValidationReport:
        """Rebuild a report from :meth:`to_dict` output; ``ValueError`` if ``data`` is not one."""
        try:
            fields = dict(data)
            fields["checks"] = [CheckResult(**c) for c in data.get("checks", [])]
            return cls(**fields)
        except TypeError as exc:
            raise ValueError(f"not a validation report: {exc}") from None

    def to_json(self) -> str:
        """The report as a JSON string."""
        return json.dumps(self.to_dict(), ensure_ascii=False, indent=2)

    @classmethod
    def from_json(cls, text: str) -> ValidationReport:
        """Rebuild a report from :meth:`to_json` output."""
        return cls.from_dict(json.loads(text))


def clip(text: str, limit: int = 160) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[:limit] + "..."


def conclude(report: ValidationReport) -> None:
    """Set ``accepted`` and ``category`` from the checks: the category of the first failed check."""
    first = next((c for c in report.checks if c.passed is False), None)
    report.accepted = first is None and all(c.passed for c in report.checks)
    report.category = (
        Category.ACCEPT if report.accepted else (first.category if first and first.category else Category.ERROR)
    )
