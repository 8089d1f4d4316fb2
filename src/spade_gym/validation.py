"""The validation gate: a program becomes a training environment only if every check passes.

The checks of docs/DESIGN.md ("The validation gate"), run on the real sandbox:

1. ``static``: size, syntax, restricted compiler, import allow-list, the ``Env`` interface;
2. ``load``: the module and ``Env()`` run within the time and memory limits;
3. ``contract``: types and sizes of every return value, finite rewards, JSON ``info``, returns in [0, 1];
4. ``determinism``: the same seeds and actions give the same transitions in two fresh workers with
   different ``PYTHONHASHSEED`` (the second plays the seeds in reverse order), and on a reused instance;
5. ``termination``: every episode ends by ``max_turns``;
6. ``feasibility``: following ``oracle()`` reaches ``SUCCESS_RETURN`` on every seed;
7. ``non_triviality``: trivial policies (empty, constants, random letters, malformed actions, echo,
   the most common oracle answer, the hint itself) do not succeed, and the hint neither is nor
   states the answer (:func:`hint_states_answer`);
8. ``variety``: different seeds give different first observations;
9. ``novelty``: not an exact duplicate (:func:`~spade_gym.registry.dedup.ast_hash`) of a registered
   environment, nor a near duplicate by text (MinHash similarity ``>= near_duplicate_threshold``)
   that also behaves like it on the behaviour probe (:func:`behaviour_difference`).
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import re
import string
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field, replace
from typing import TYPE_CHECKING, Any, NoReturn

from spade_gym.errors import ContractError, ResourceLimitExceeded, SandboxSetupError, SpadeError
from spade_gym.program import RETURN_TOLERANCE, SUCCESS_RETURN, EnvProgram
from spade_gym.sandbox import Budget, SandboxClient, SandboxConfig
from spade_gym.seeds import SEED_VARIABLE, seed_source

if TYPE_CHECKING:
    from spade_gym.registry import Registry

__all__ = [
    "CHECKS",
    "SEED_VARIABLE",
    "AuditResult",
    "CheckResult",
    "audit",
    "ValidationConfig",
    "ValidationReport",
    "behaviour_difference",
    "check_novelty",
    "hint_states_answer",
    "validate",
]

#: Words of the hint the audit tries as constant answers (the first ones the observation lacks).
AUDIT_HINT_WORDS = 16


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
_REPAIR = {
    "COMPILE_REJECTED": "Fix the listed problems; use only the allowed imports and ordinary Python.",
    "SANDBOX_DENIED": "Do not touch dunder attributes, files, modules' internals or builtins such as type(), "
    "id(), open() or eval(); use plain values and f-strings.",
    "TIMEOUT": "Make every call (reset, step, hint, oracle) finish in well under the deadline and keep "
    "episodes short; avoid unbounded loops and expensive searches.",
    "MEMORY_LIMIT": "Keep data structures small; do not build huge strings or lists.",
    "OUTPUT_LIMIT": "Keep observations, info and print output small.",
    "PROTOCOL_ERROR": "reset(seed) must return (str, dict) and step(action) must return "
    "(str, float, bool, bool, dict) with JSON values only in info (no tuples or sets).",
    "INVALID_REWARD": "Rewards must be finite ints or floats and the episode return (sum of rewards) must lie in "
    "[0, 1]: give the success reward once.",
    "ENV_EXCEPTION": "Handle every action, including empty, malformed or repeated ones, by returning an "
    "observation that says what was wrong; never raise.",
    "NONDETERMINISM": "Draw all randomness from random.Random(seed) created in reset(seed), reset every "
    "attribute in reset, and never depend on hash(), id() or set iteration order.",
    "EPISODE_LIMIT": "Set truncated=True when the turn counter reaches max_turns (or end the episode earlier).",
    "ORACLE_FAILED": "oracle() must return the action a perfect agent takes in the current state; following it "
    f"from reset must reach a return of at least {SUCCESS_RETURN}.",
    "TRIVIAL": "Check the answer exactly (not with 'in' or a prefix test) and do not reward empty, constant or "
    "echoed actions.",
    "HINT_LEAK": "hint() must help without giving the answer away: submitting the hint text must not succeed and "
    "the hint must not contain the answer; give a method, a partial result or the first digit instead.",
    "WRONG_SETTING": "Write an environment of the setting the task asks for: set setting to it.",
    "SEED_INVARIANT": "Different seeds must give different tasks: generate the task from random.Random(seed).",
    "DUPLICATE": "Write an environment that behaves differently from the existing one: change its rules, its "
    "sizes (the constants, such as the number of digits or turns) or the wording of its observations; renaming, "
    "reformatting, rewording the docstring or reordering the code is a copy.",
    "WORKER_CRASH": "The program crashed its worker process; simplify it.",
}


@dataclass(frozen=True)
class ValidationConfig:
    """Every limit of the validation gate.

    Attributes:
        seeds: validation seeds; default ``()``: ``n_seeds`` drawn fresh per validation
            (:meth:`resolved`), so a program cannot know them.
        trivial_seeds, novelty_probe_seeds: how many of ``seeds`` (the first) the trivial policies
            and the behaviour probe play; ``trivial_max_turns``: turns of such an episode at most.
        answer_seeds: out-of-sample seeds whose first oracle actions give the "most common answer"
            policy (default: ``n_seeds`` more drawn fresh).
        max_trivial_success_rate, max_hint_success_rate: share of seeds a trivial policy may win,
            and on which the hint may succeed or equal the answer.
        termination_max_turns: turns of the extra empty-action episode that checks termination
            when ``max_turns`` exceeds ``trivial_max_turns``.
        min_distinct_first_observations: share of seeds that must give distinct first observations.
        budget_s: CPU seconds of the whole validation (and of an audit or behaviour probe); wall
            time at most ``sandbox.wall_factor`` times as much.
        hash_seeds: ``PYTHONHASHSEED`` of the determinism check's two workers (default: drawn once per process).
        near_duplicate_threshold: MinHash similarity from which a program is a near duplicate;
            ``novelty_max_candidates``: near duplicates the probe compares with.
        sandbox: the sandbox limits; its ``hash_seed`` is replaced by ``hash_seeds``.
    """

    seeds: tuple[int, ...] = ()
    n_seeds: int = 10
    trivial_seeds: int = 10
    trivial_max_turns: int = 64
    answer_seeds: tuple[int, ...] = ()
    success_threshold: float = SUCCESS_RETURN
    max_trivial_success_rate: float = 0.5
    max_hint_success_rate: float = 0.0
    termination_max_turns: int = 2000
    min_distinct_first_observations: float = 0.5
    return_tolerance: float = RETURN_TOLERANCE
    budget_s: float = 20.0
    hash_seeds: tuple[int, int] = field(default_factory=lambda: _GATE_HASH_SEEDS)
    constant_answers: tuple[str, ...] = ("0", "yes")
    random_text_seed: int = 0
    near_duplicate_threshold: float = 0.9
    novelty_probe_seeds: int = 10
    novelty_max_candidates: int = 16
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
    """

    program_id: str
    name: str | None = None
    setting: str | None = None
    max_turns: int | None = None
    description: str | None = None
    accepted: bool = False
    category: str = "COMPILE_REJECTED"
    checks: list[CheckResult] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    oracle_returns: list[float] = field(default_factory=list)
    trivial_success_rates: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0
    startup_seconds: float = 0.0
    config: dict[str, Any] = field(default_factory=dict)

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


class _Failed(Exception):
    """A check failed in a way that ends validation (the workers can no longer be trusted)."""

    def __init__(self, check: str, category: str, message: str) -> None:
        super().__init__(message)
        self.check, self.category, self.message = check, category, message


def _clip(text: str, limit: int = 160) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[:limit] + "..."


def _error_check(error: SpadeError, default: str) -> str:
    if isinstance(error, ContractError) or (
        isinstance(error, ResourceLimitExceeded) and error.category == "OUTPUT_LIMIT"
    ):
        return "contract"
    return default


def _digest(*parts: object) -> bytes:
    text = json.dumps(parts, sort_keys=True, default=str, ensure_ascii=False)
    return hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()


@dataclass
class _Episode:
    """A played episode: first observation and info, actions, and a 16-byte digest per step."""

    seed: int
    first: tuple[str, dict[str, Any]]
    actions: list[str] = field(default_factory=list)
    digests: list[bytes] = field(default_factory=list)
    last: tuple[str, float, bool, bool] = ("", 0.0, False, False)  # the last transition, less info
    total: float = 0.0
    excursion: tuple[int, float] | None = None  # the first (turn, return) outside [0, 1]
    tolerance: float = RETURN_TOLERANCE
    agent_view: bool = False

    def add(self, transition: tuple[str, float, bool, bool, dict[str, Any]]) -> None:
        obs, reward, terminated, truncated, info = transition
        self.digests.append(
            _digest(_seen(obs), reward, terminated, truncated)
            if self.agent_view
            else _digest(obs, reward, terminated, truncated, info)
        )
        self.last = (obs, reward, terminated, truncated)
        self.total += reward
        if self.excursion is None and not -self.tolerance <= self.total <= 1 + self.tolerance:
            self.excursion = (len(self.digests), self.total)

    @property
    def ended(self) -> bool:
        return bool(self.digests) and (self.last[2] or self.last[3])

    @property
    def last_observation(self) -> str:
        return self.last[0] if self.digests else self.first[0]


class _Validator:
    def __init__(self, program: EnvProgram, config: ValidationConfig, registry: Registry | None) -> None:
        config = config.resolved(program.id)  # this validation's own fresh seeds
        self.program = program
        self.config = config
        self.registry = registry
        self.results = {name: CheckResult(name) for name in CHECKS}
        self.report = ValidationReport(program_id=program.id, seeds=list(config.seeds), config=config.to_dict())
        self.budget = Budget(config.budget_s, what="validation", wall=True, wall_factor=config.sandbox.wall_factor)
        self.clients: list[SandboxClient] = []

    def fail(self, check: str, category: str, message: str) -> None:
        result = self.results[check]
        if result.passed is not False:  # keep the first failure of each check
            result.passed, result.category, result.message = False, category, message

    def passed(self, *checks: str) -> None:
        for check in checks:
            if self.results[check].passed is None:
                self.results[check].passed = True

    def call(self, client: SandboxClient, op: str, args: dict[str, Any] | None, check: str, where: str) -> Any:
        try:
            return client.call(op, args, self.budget)
        except SpadeError as exc:
            raise _Failed(_error_check(exc, check), exc.category, f"{where}: {exc.message}") from None

    def run(self) -> ValidationReport:
        started = time.perf_counter()
        try:
            self._run()
        except _Failed as failure:
            self.fail(failure.check, failure.category, failure.message)
        finally:
            for client in self.clients:
                client.kill()
        report = self.report
        report.checks = [self.results[name] for name in CHECKS]
        _conclude(report)
        report.seconds = round(time.perf_counter() - started, 6)
        return report

    def _timed(self, check: str, fn: Any, *args: Any, **kwargs: Any) -> Any:
        started = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            self.results[check].seconds += round(time.perf_counter() - started, 6)

    def _run(self) -> None:
        # The restricted compile happens in the workers (bounded by the load deadline); its errors
        # come back from load() as COMPILE_REJECTED and count as the static check.
        problems = self._timed("static", self.program.problems, restricted_compile=False)
        if problems:
            self.fail("static", "COMPILE_REJECTED", "; ".join(problems))
            return
        a, b = self._timed("load", self._load)
        self.passed("static")
        oracle_episodes = self._timed("feasibility", self._oracle_episodes, a)
        self.passed("termination", "feasibility")
        self._timed("variety", self._variety, oracle_episodes)
        self.passed("variety")
        # Worker B replays the oracle's episodes (determinism) while worker A replays one on the same
        # instance; then both share the trivial-policy episodes. Two workers, two cores.
        again = "when the same instance is reset with the same seed again"
        self._timed("determinism", self._replay, a, oracle_episodes[:1], again)
        common = self._timed("non_triviality", self._most_common_answer, a)
        jobs = self._trivial_jobs(common)
        with ThreadPoolExecutor(max_workers=1) as pool:
            on_b = pool.submit(self._replays_then_trivial, b, oracle_episodes, jobs[1::2])
            self._timed("non_triviality", self._run_trivial, a, jobs[::2])
            on_b.result()
        self.passed("determinism")
        self._judge_trivial()
        self.passed("non_triviality", "contract")  # every call has now been checked
        self._timed("novelty", self._novelty)

    def _load(self) -> tuple[SandboxClient, SandboxClient]:
        started = time.perf_counter()
        sandbox = replace(
            self.config.sandbox, call_timeout_s=min(self.config.sandbox.call_timeout_s, self.config.budget_s)
        )
        self.clients = [SandboxClient(replace(sandbox, hash_seed=seed)) for seed in self.config.hash_seeds]
        a, b = self.clients
        for client in self.clients:
            try:
                spec = client.load(self.program.source)
            except SpadeError as exc:
                check = "static" if exc.category == "COMPILE_REJECTED" else _error_check(exc, "load")
                raise _Failed(check, exc.category, f"loading the program: {exc.message}") from None
        self.report.name, self.report.setting, self.report.max_turns = spec.name, spec.setting, spec.max_turns
        self.report.description = spec.description
        self.report.startup_seconds = round(time.perf_counter() - started, 6)
        self.passed("load")
        return a, b

    def _play(
        self, client: SandboxClient, seed: int, policy: Any, max_turns: int, check: str, label: str, hint: bool = False
    ) -> _Episode:
        """Play one episode; ``policy(client, episode) -> action``; ``hint``: read ``hint()`` after reset."""
        obs, info = self.call(client, "reset", {"seed": seed}, check, f"reset({seed}) in the {label} episode")
        if hint:
            self.call(client, "hint", None, "contract", f"hint() after reset({seed}) in the {label} episode")
        episode = _Episode(seed, (obs, info), tolerance=self.config.return_tolerance)
        for turn in range(1, max_turns + 1):
            action = policy(client, episode)
            episode.actions.append(action)
            where = f"step() on turn {turn} of the {label} episode for seed {seed}"
            episode.add(tuple(self.call(client, "step", {"action": action}, check, where)))
            if episode.ended:
                break
        return episode

    def _oracle_episodes(self, a: SandboxClient) -> list[_Episode]:
        max_turns = self.report.max_turns or 1
        leaks: list[int] = []
        hints: dict[int, str] = {}  # seed -> the hint at the start of its oracle episode

        def oracle_policy(client: SandboxClient, episode: _Episode) -> str:
            turn = len(episode.actions) + 1
            where = f"on turn {turn} of the oracle episode for seed {episode.seed}"
            action: str = self.call(client, "oracle", None, "feasibility", f"oracle() {where}")
            if turn == 1:  # the hint is checked for leaks (and its contract) at the start
                hint = self.call(client, "hint", None, "contract", f"hint() {where}")
                if hint.strip() and hint.strip() == action.strip():
                    leaks.append(episode.seed)
                hints[episode.seed] = hint
            return action

        episodes = []
        for seed in self.config.seeds:
            episode = self._play(a, seed, oracle_policy, max_turns, "feasibility", "oracle")
            episodes.append(episode)
            total = episode.total
            self.report.oracle_returns.append(round(total, 6))
            self._check_episode(episode, "oracle", "")
            if episode.ended and total < self.config.success_threshold:
                self.fail(
                    "feasibility",
                    "ORACLE_FAILED",
                    f"seed {seed}: following oracle() for {len(episode.actions)} turn(s) returned {total:g}; "
                    f"it must reach {self.config.success_threshold:g} (last observation: "
                    f"{_clip(episode.last_observation)!r})",
                )
        rate = len(leaks) / len(self.config.seeds)
        if leaks and rate > self.config.max_hint_success_rate:
            self.fail(
                "non_triviality",
                "HINT_LEAK",
                f"hint() equals oracle() at the start of {len(leaks)} of {len(self.config.seeds)} episodes "
                f"(seeds {_seed_list(leaks)}); the hint gives the answer away",
            )
            return episodes
        # the hint alone must not state the answer: the oracle's last action, the one that completed the task
        firsts = {e.seed: (hints[e.seed], e.actions[-1], e.first[0]) for e in episodes if e.actions}
        stated = hint_states_answer(firsts, [action for e in episodes for action in e.actions[:-1]])
        if stated and len(stated) / len(self.config.seeds) > self.config.max_hint_success_rate:
            seed = stated[0]
            hint, action, observation = firsts[seed]
            found = next(x for x in _secrets(action, observation) if _contains(_normalised(hint), x))
            self.fail(
                "non_triviality",
                "HINT_LEAK",
                f"hint() states the oracle's answer at the start of {len(stated)} of {len(self.config.seeds)} "
                f"episodes (seeds {_seed_list(stated)}; seed {seed}: the hint {_clip(hint, 120)!r} contains the "
                f"answer {_clip(found, 60)!r}); a hint must help without stating the answer: give "
                "a method, a partial result or the first digit or letter instead",
            )
        return episodes

    def _check_episode(self, episode: _Episode, label: str, playing: str | None) -> None:
        """The return stays in [0, 1]; unless ``playing`` is ``None``, the episode ended by ``max_turns``."""
        if episode.excursion is not None:
            turn, partial = episode.excursion
            self.fail(
                "contract",
                "INVALID_REWARD",
                f"seed {episode.seed}: the return reached {partial:g} on turn {turn} of the {label} episode; "
                "the sum of rewards must stay within [0, 1]",
            )
        if playing is not None and not episode.ended:
            self.fail(
                "termination",
                "EPISODE_LIMIT",
                f"seed {episode.seed}: {playing}after max_turns={self.report.max_turns or 1} actions the episode "
                "had neither terminated nor truncated",
            )

    def _replays_then_trivial(
        self, b: SandboxClient, episodes: list[_Episode], jobs: list[tuple[str, int, int, bool]]
    ) -> None:
        h1, h2 = self.config.hash_seeds
        where = (
            f"between two fresh workers (PYTHONHASHSEED {h1} and {h2}, the second playing the seeds in reverse order)"
        )
        self._timed("determinism", self._replay, b, list(reversed(episodes)), where)
        self._timed("non_triviality", self._run_trivial, b, jobs)

    def _replay(self, client: SandboxClient, episodes: list[_Episode], where: str) -> None:
        """Replay ``episodes`` on ``client``; the first that differs fails the determinism check."""
        for recorded in episodes:

            def policy(client: SandboxClient, episode: _Episode, recorded: _Episode = recorded) -> str:
                return recorded.actions[len(episode.actions)]

            replayed = self._play(client, recorded.seed, policy, len(recorded.actions), "determinism", "replayed")
            difference = _first_difference(recorded, replayed)
            if difference:
                self.fail("determinism", "NONDETERMINISM", f"seed {recorded.seed}: {difference} {where}")
                return

    def _variety(self, episodes: list[_Episode]) -> None:
        firsts = [e.first[0] for e in episodes]
        distinct = len(set(firsts))
        needed = max(2, round(self.config.min_distinct_first_observations * len(firsts))) if len(firsts) > 1 else 1
        if distinct < needed:
            self.fail(
                "variety",
                "SEED_INVARIANT",
                f"{len(firsts)} seeds gave only {distinct} distinct first observation(s); at least {needed} are "
                f"required (first observation: {_clip(firsts[0])!r})",
            )

    def _most_common_answer(self, a: SandboxClient) -> str | None:
        """The most common first oracle action over :attr:`ValidationConfig.answer_seeds`."""
        answers: Counter[str] = Counter()
        for seed in self.config.answer_seeds:
            self.call(a, "reset", {"seed": seed}, "non_triviality", f"reset({seed})")
            answers[self.call(a, "oracle", None, "feasibility", f"oracle() after reset({seed})")] += 1
        return answers.most_common(1)[0][0] if answers else None

    def _trivial_jobs(self, common: str | None) -> list[tuple[str, int, int, bool]]:
        """``(policy, seed, turns, counts_as_trial)`` for every trivial episode to play."""
        self._policies: dict[str, Any] = {
            label: _on_episode(act) for label, act in _blind_policies(self.config.random_text_seed).items()
        }
        self._policies["hint"] = self._hint_policy
        for answer in self.config.constant_answers:
            self._policies[f"constant {answer!r}"] = _on_episode(_constant(answer))
        if common is not None:
            self._policies[f"most common answer {_clip(common, 40)!r}"] = _on_episode(_constant(common))
        self._wins: Counter[str] = Counter()
        declared = self.report.max_turns or 1
        turns = min(declared, self.config.trivial_max_turns)
        seeds = self.config.seeds[: max(1, self.config.trivial_seeds)]
        jobs = [(label, seed, turns, True) for label in self._policies for seed in seeds]
        if declared > turns:  # one empty-action episode played to the end checks termination
            jobs.append(("empty", self.config.seeds[0], min(declared, self.config.termination_max_turns), False))
        return jobs

    def _hint_policy(self, client: SandboxClient, episode: _Episode) -> str:
        where = f"on turn {len(episode.actions) + 1} of the hint-submitting episode for seed {episode.seed}"
        return str(self.call(client, "hint", None, "contract", f"hint() {where}"))

    def _run_trivial(self, client: SandboxClient, jobs: list[tuple[str, int, int, bool]]) -> None:
        declared = self.report.max_turns or 1
        for label, seed, turns, counts in jobs:
            # hint() is called after reset, as in the Agent's hinted episodes: a hint() that changes the
            # episode (say, to pay any answer) must not make a trivial policy succeed
            episode = self._play(
                client, seed, self._policies[label], turns, "non_triviality", f"{label}-policy", hint=True
            )
            self._check_episode(
                episode, f"{label}-policy", f"playing the {label} policy, " if turns == declared else None
            )
            if counts and episode.total >= self.config.success_threshold:
                self._wins[label] += 1

    def _judge_trivial(self) -> None:
        n = len(self.config.seeds[: max(1, self.config.trivial_seeds)])
        for label in self._policies:
            rate = self._wins[label] / n
            self.report.trivial_success_rates[label] = round(rate, 6)
            limit = self.config.max_hint_success_rate if label == "hint" else self.config.max_trivial_success_rate
            if rate > limit:
                category = "HINT_LEAK" if label == "hint" else "TRIVIAL"
                what = "submitting the hint text" if label == "hint" else f"the trivial policy {label}"
                self.fail(
                    "non_triviality",
                    category,
                    f"{what} succeeded on {self._wins[label]} of {n} seeds (hint() having been called after reset, "
                    "as in the Agent's hinted episodes); a trivial policy must not succeed",
                )

    def _novelty(self) -> None:
        problem = _duplicate_of(self.program, self.registry, self.config)
        if problem is None:
            self.passed("novelty")
        else:
            self.fail("novelty", "DUPLICATE", problem)


def _duplicate_of(program: EnvProgram, registry: Registry | None, config: ValidationConfig) -> str | None:
    """Why ``program`` duplicates an environment of ``registry``, or ``None`` when it is novel."""
    if registry is None:
        return None
    exact = registry.exact_duplicate(program)
    if exact is not None:
        return (
            f"the program is an exact duplicate of the registered {exact.env_id}: the same code up to names, the "
            "environment's name, docstrings, comments and layout"
        )
    candidates = registry.near_duplicates(program, threshold=config.near_duplicate_threshold)
    for record, similarity in candidates[: config.novelty_max_candidates]:
        try:
            other = record.program()
        except SpadeError:  # a damaged entry cannot be compared: it does not make the program a copy
            continue
        difference = behaviour_difference(program, other, config)
        if difference is None:
            seeds = list(config.seeds[: max(1, config.novelty_probe_seeds)])
            return (
                f"the program is a near duplicate (similarity {similarity:.2f}) of the registered {record.env_id} "
                f"and behaves exactly like it: on seeds {_seed_list(seeds)} the oracle's, random and malformed "
                "actions get the same observations, rewards and hints from both (what the Agent sees; whitespace and info do not count)"
            )
    return None


#: The behaviour probe's action sources: the new program's oracle, then two program-blind ones.
_PROBES = ("oracle", "random_text", "garbage")


def behaviour_difference(program: EnvProgram | str, other: EnvProgram | str, config: ValidationConfig) -> str | None:
    """The first difference the Agent could see between two programs on the behaviour probe, or ``None``.

    Plays ``program`` on the first ``config.novelty_probe_seeds`` seeds with its ``oracle()``,
    random letters and malformed actions, reading ``hint()`` after each reset, and replays the same
    actions on ``other`` in a second worker, within ``config.budget_s``. Compared: ``setting``,
    ``max_turns``, ``tools``, observations and hints up to whitespace, rewards and flags (not
    ``info``); a program failing where the other does not differs. SandboxSetupError: no worker.
    """
    program = EnvProgram(program) if isinstance(program, str) else program
    other = EnvProgram(other) if isinstance(other, str) else other
    config = config.resolved(program.id)  # both on the same seeds
    budget = Budget(
        config.budget_s, what="the novelty check's behaviour probe", wall=True, wall_factor=config.sandbox.wall_factor
    )
    clients = [SandboxClient(replace(config.sandbox, hash_seed=config.hash_seeds[0])) for _ in range(2)]
    try:
        specs = []
        for client, prog in zip(clients, (program, other), strict=True):
            try:
                specs.append(client.load(prog.source))
            except SandboxSetupError:
                raise
            except SpadeError as exc:
                return f"{'the new' if prog is program else 'the registered'} program does not load ({exc.message})"
        mine, theirs = specs
        for what in ("setting", "max_turns", "tools"):
            if getattr(mine, what) != getattr(theirs, what):
                return f"{what} differs ({getattr(mine, what)!r} vs {getattr(theirs, what)!r})"
        turns = min(mine.max_turns, config.trivial_max_turns)
        for seed in config.seeds[: max(1, config.novelty_probe_seeds)]:
            for probe in _PROBES:
                played: list[tuple[_Episode, str]] = []
                for client, who in zip(clients, ("new", "registered"), strict=True):
                    replay = played[0][0] if played else None
                    try:
                        played.append(_probe_episode(client, seed, probe, turns, budget, config, replay))
                    except SandboxSetupError:
                        raise
                    except SpadeError as exc:
                        return f"seed {seed}, {probe} actions: the {who} program failed ({exc.message})"
                (recorded, hint), (replayed, other_hint) = played
                if _seen(hint) != _seen(other_hint):
                    return f"seed {seed}: the hint differs ({_clip(hint, 80)!r} vs {_clip(other_hint, 80)!r})"
                difference = _first_difference(recorded, replayed, agent_view=True)
                if difference:
                    return f"seed {seed}, {probe} actions: {difference}"
        return None
    finally:
        for client in clients:
            client.kill()


def _probe_episode(
    client: SandboxClient,
    seed: int,
    probe: str,
    turns: int,
    budget: Budget,
    config: ValidationConfig,
    replay: _Episode | None,
) -> tuple[_Episode, str]:
    """One behaviour-probe episode and the hint read after its reset; ``replay``: play its actions."""
    policies = _blind_policies(config.random_text_seed)
    obs, info = client.call("reset", {"seed": seed}, budget)
    hint = str(client.call("hint", None, budget))
    episode = _Episode(seed, (obs, info), agent_view=True)
    limit = len(replay.actions) if replay is not None else turns
    for turn in range(limit):
        if replay is not None:
            action = replay.actions[turn]
        elif probe == "oracle":
            action = str(client.call("oracle", None, budget))
        else:
            action = policies[probe](episode.last_observation, seed, len(episode.actions))
        episode.actions.append(action)
        episode.add(tuple(client.call("step", {"action": action}, budget)))
        if episode.ended:
            break
    return episode, hint


def _conclude(report: ValidationReport) -> None:
    """Set ``accepted`` and ``category`` from the checks: the category of the first failed check."""
    first = next((c for c in report.checks if c.passed is False), None)
    report.accepted = first is None and all(c.passed for c in report.checks)
    report.category = "ACCEPT" if report.accepted else (first.category if first and first.category else "ERROR")


def check_novelty(
    report: ValidationReport, program: EnvProgram | str, registry: Registry, config: ValidationConfig | None = None
) -> ValidationReport:
    """Run the novelty check of a report made without a registry: ``check_novelty(validate(p, c), p,
    r, c)`` gives the verdict of ``validate(p, c, registry=r)``, as a new report (the check stays
    unrun when validation stopped before it). ``config``: default the report's own.

    Raises ValueError when ``report`` is not the report of ``program``.
    """
    program = EnvProgram(program) if isinstance(program, str) else program
    if report.program_id != program.id:
        raise ValueError(f"the report is of program {report.program_id}, not of the given program {program.id}")
    if config is None:  # the report's own settings, as far as the novelty check uses them
        defaults, saved = ValidationConfig(), report.config
        keys = ("near_duplicate_threshold", "novelty_probe_seeds", "novelty_max_candidates")
        config = replace(defaults, **{key: type(getattr(defaults, key))(saved[key]) for key in keys if key in saved})
    if not config.seeds:  # the seeds the report was made on
        config = replace(config, seeds=tuple(report.seeds) or config.resolved(report.program_id).seeds)
    out = ValidationReport.from_dict(report.to_dict())
    novelty = out.check("novelty")
    if novelty.passed is None:  # validation stopped before the novelty check
        return out
    started = time.perf_counter()
    problem = _duplicate_of(program, registry, config)
    seconds = round(time.perf_counter() - started, 6)
    novelty.passed, novelty.category, novelty.message = (
        (True, None, "") if problem is None else (False, "DUPLICATE", problem)
    )
    novelty.seconds += seconds
    out.seconds = round(out.seconds + seconds, 6)
    _conclude(out)
    return out


#: Characters that may not touch a stated answer in the hint (a "7" inside "17" is not a "7").
_WORD = re.compile(r"[0-9a-z]")
#: An answer found in the hints of at least this share of the other seeds is boilerplate, not stated.
COMMON_IN_HINTS = 0.5
#: An answer this short ("8", "no") turns up in a hint by chance (see :func:`hint_states_answer`).
SHORT_ANSWER = 2


def _normalised(text: str) -> str:
    """Lower case, whitespace collapsed, surrounding quotes, brackets and sentence punctuation dropped."""
    return " ".join(text.lower().split()).strip(" .,;:!?'\"`()[]")


def _contains(hint: str, answer: str) -> bool:
    """Whether the normalised ``answer`` occurs in the normalised ``hint`` as a whole token."""
    start = hint.find(answer)
    while start >= 0:
        end = start + len(answer)
        before = hint[start - 1] if start else ""
        after = hint[end] if end < len(hint) else ""
        if not (_WORD.fullmatch(before) and _WORD.fullmatch(answer[0])) and not (
            _WORD.fullmatch(after) and _WORD.fullmatch(answer[-1])
        ):
            return True
        start = hint.find(answer, start + 1)
    return False


def _secrets(action: str, observation: str) -> list[str]:
    """What a hint must not state: the action and a tool call's arguments ``observation`` lacks."""
    out = [_normalised(action)]
    try:
        call = json.loads(action)
    except ValueError:
        call = None
    if isinstance(call, dict) and isinstance(call.get("arguments"), dict):
        shown = _normalised(observation)
        for value in call["arguments"].values():
            if isinstance(value, (str, int, float)) and not isinstance(value, bool):
                argument = _normalised(str(value))
                if argument and not _contains(shown, argument):
                    out.append(argument)
    return [secret for secret in dict.fromkeys(out) if secret]


def hint_states_answer(firsts: Mapping[int, tuple[str, str, str]], steps: Iterable[str] = ()) -> list[int]:
    """The seeds (ascending) whose hint, read at the start of the episode, states the answer.

    ``firsts``: ``{seed: (hint, the oracle's last action, first observation)}``; ``steps``: the
    oracle's other actions. The answer (for a tool call, also its argument values the observation
    does not name) is stated when, normalised, it is a whole token of the hint (``"7"`` is in
    ``"the answer is 7."``, not in ``"17"``), unless it is one of ``steps`` or in the hints of at
    least :data:`COMMON_IN_HINTS` of the other seeds. An answer of at most :data:`SHORT_ANSWER`
    characters counts only when more than :data:`COMMON_IN_HINTS` of all the hints state theirs.
    """
    hints = {seed: _normalised(hint) for seed, (hint, _, _) in firsts.items()}
    secrets = {seed: _secrets(action, observation) for seed, (_, action, observation) in firsts.items()}
    moves = {secret for step in steps for secret in _secrets(step, "")}
    stated: list[int] = []
    short: list[int] = []
    for seed in sorted(secrets):
        for secret in secrets[seed]:
            if secret in moves or not _contains(hints[seed], secret):
                continue
            others = [other for other in secrets if other != seed and secret not in secrets[other]]
            common = sum(_contains(hints[other], secret) for other in others)
            if others and common >= COMMON_IN_HINTS * len(others):
                continue
            (short if len(secret) <= SHORT_ANSWER else stated).append(seed)
            break
    if len(short) + len(stated) > COMMON_IN_HINTS * len(secrets):  # most hints state theirs: no coincidence
        stated = sorted(stated + short)
    return stated


def _seed_list(seeds: list[int], shown: int = 10) -> str:
    text = ", ".join(map(str, seeds[:shown]))
    return text + (f", ... ({len(seeds) - shown} more)" if len(seeds) > shown else "")


def _constant(text: str) -> Callable[[str, int, int], str]:
    return lambda obs, seed, turn: text


def _on_episode(act: Callable[[str, int, int], str]) -> Any:
    """A ``(observation, seed, turn) -> action`` policy as ``_play`` calls it."""
    return lambda client, episode: act(episode.last_observation, episode.seed, len(episode.actions))


def _random_text_action(seed: int, episode_seed: int, turn: int) -> str:
    rng = random.Random(f"{seed}-{episode_seed}-{turn}")  # the same whichever worker
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, 12)))


#: Malformed actions of the kinds agents produce: numbers out of range, broken JSON, odd whitespace.
_GARBAGE = (
    "-1",
    "9",
    "99",
    "1000000",
    "0.5",
    "{",
    "}",
    "[]",
    "null",
    '{"name": "x"}',
    '{"name": 1, "arguments": []}',
    " ",
    "\n",
    "a b c",
    "A1",
    "Z9",
    "up up",
    "\u00e9\u2603",
    "<answer></answer>",
    "None",
)


def _garbage_action(seed: int, episode_seed: int, turn: int) -> str:
    return random.Random(f"garbage-{seed}-{episode_seed}-{turn}").choice(_GARBAGE)


def _blind_policies(seed: int) -> dict[str, Callable[[str, int, int], str]]:
    """The trivial policies blind to the program: ``(observation, episode seed, turn) -> action``."""
    return {
        "empty": _constant(""),
        "random_text": lambda obs, s, turn: _random_text_action(seed, s, turn),
        "garbage": lambda obs, s, turn: _garbage_action(seed, s, turn),
        "echo": lambda obs, s, turn: obs,
    }


def _seen(text: str) -> str:
    """Text as the Agent reads it, for the novelty probe: whitespace runs collapsed, ends stripped."""
    return " ".join(text.split())


def _first_difference(a: _Episode, b: _Episode, agent_view: bool = False) -> str | None:
    """The first difference of two episodes; with ``agent_view``, only in what the Agent sees."""
    same: Callable[[str, str], bool] = (lambda x, y: _seen(x) == _seen(y)) if agent_view else (lambda x, y: x == y)
    if not same(a.first[0], b.first[0]):
        return f"the first observation differs ({_clip(a.first[0], 80)!r} vs {_clip(b.first[0], 80)!r})"
    if not agent_view and a.first[1] != b.first[1]:
        return "the info returned by reset() differs"
    for turn, (x, y) in enumerate(zip(a.digests, b.digests, strict=False), 1):
        if x != y:
            seen = "the observation, reward or flags" if agent_view else "the observation, reward, flags or info"
            return f"{seen} on turn {turn} differ"
    if len(a.digests) != len(b.digests):
        return "the episode length differs"
    return None


# -- the audit: the gate's trivial-policy and oracle checks on seeds the gate did not play --------


@dataclass
class AuditResult:
    """What :func:`audit` found: the ``seeds`` played, each trivial policy's ``success_rates``, the
    ``oracle_failures`` (seeds), and when it failed a ``category`` (``"TRIVIAL"``, ``"HINT_LEAK"``,
    ``"ORACLE_FAILED"`` or a sandbox error's) and a ``message``."""

    seeds: tuple[int, ...]
    success_rates: dict[str, float] = field(default_factory=dict)
    oracle_failures: list[int] = field(default_factory=list)
    category: str | None = None
    message: str = ""

    @property
    def passed(self) -> bool:
        """Whether the program behaved on these seeds as the gate requires."""
        return self.category is None


def audit(
    env: Any, seeds: Iterable[int], config: ValidationConfig | None = None, max_turns: int | None = None
) -> AuditResult:
    """Replay the gate's feasibility and non-triviality checks on ``seeds`` the gate did not play,
    each episode in a fresh worker as the Agent's: ``reset``, ``hint()``, then ``step``.

    The trivial policies play first, before any ``oracle()`` call (``TRIVIAL``); on the first seed
    no word of the hint absent from the observation (the first :data:`AUDIT_HINT_WORDS`) may win as
    an answer (``HINT_LEAK``); following ``oracle()`` must succeed (``ORACLE_FAILED``) and the hint
    must not state its answer (:func:`hint_states_answer`, ``HINT_LEAK``).

    ``env``: what :class:`~spade_gym.agent.Episode` accepts. ``config``: the gate's thresholds;
    ``budget_s`` bounds the audit. ``max_turns``: of a trivial episode (default: the env's, up to
    ``config.trivial_max_turns``). A program error is a failed :class:`AuditResult`, never an
    exception. Raises ValueError for no seeds, SandboxSetupError when no worker can start.
    """
    from spade_gym.agent import open_playable_env
    from spade_gym.env import SandboxedEnv

    config = config or ValidationConfig()
    seeds = tuple(seeds)
    if not seeds:
        raise ValueError("audit() needs at least one seed")
    result = AuditResult(seeds)
    policies = _blind_policies(config.random_text_seed)
    policies.update({f"constant {a!r}": _constant(a) for a in config.constant_answers})

    def fail(category: str, message: str) -> NoReturn:
        result.category, result.message = category, message[:500]
        raise _Failed("audit", category, message)

    # the whole audit: a slow program cannot stall the trainer (CPU seconds of its workers)
    budget = Budget(config.budget_s, what="audit", wall=True, wall_factor=config.sandbox.wall_factor)

    def play(seed: int, label: str, act: Any, limit_turns: int | None) -> tuple[float, str, str, list[str]]:
        """One episode in a fresh worker: ``(return, hint, first observation, actions)``."""
        if why := budget.exhausted():
            fail("TIMEOUT", f"{why} (ValidationConfig.budget_s)")
        playable: Any = None
        try:
            if isinstance(env, EnvProgram):  # each episode draws on what is left of the audit's CPU budget
                sandbox = replace(config.sandbox, episode_budget_s=max(min(budget.remaining, 1e5), 1e-3))
                playable = SandboxedEnv(env, config=sandbox)
            else:
                playable = open_playable_env(env)  # a SandboxedEnv (with oracle()) or another playable env
            first, _info = playable.reset(seed=seed)
            hint = playable.hint()  # as start_episode: every episode reads it right after reset
            observation, total, actions = first, 0.0, []
            limit = min(playable.max_turns, limit_turns or config.trivial_max_turns)
            for turn in range(limit):
                action = act(playable, observation, seed, turn)
                actions.append(action)
                observation, reward, terminated, truncated, info = playable.step(action)
                error = info.get("sandbox_error") if isinstance(info, dict) else None
                if error:
                    fail(
                        str(error.get("category") or "ENV_EXCEPTION"),
                        f"seed {seed}, the {label} policy: {error.get('message', '')}",
                    )
                total += reward
                if terminated or truncated:
                    break
            return total, hint, first, actions
        except (_Failed, SandboxSetupError):
            raise
        except Exception as exc:  # the program failed to load, or in reset, hint or oracle
            fail(getattr(exc, "category", None) or "ENV_EXCEPTION", f"seed {seed}, the {label} policy: {exc}")
        finally:
            client = getattr(playable, "client", None)  # a SandboxedEnv: charge its worker's CPU seconds
            if client is not None:
                budget.charge(client.cpu_used_s)
            if playable is not None:
                playable.close()

    wins: Counter[str] = Counter()
    try:
        # the trivial policies first: a program that notes oracle() calls (the gate's habit) sees none
        for label, policy in policies.items():
            for seed in seeds:
                total, *_ = play(seed, label, lambda e, obs, s, t, p=policy: p(obs, s, t), max_turns)
                if total >= config.success_threshold:
                    wins[label] += 1
        result.success_rates = {label: wins[label] / len(seeds) for label in policies}
        worst = max(result.success_rates, key=lambda k: result.success_rates[k])
        if result.success_rates[worst] > config.max_trivial_success_rate:
            fail(
                "TRIVIAL",
                f"the trivial policy {worst} succeeded on {wins[worst]} of {len(seeds)} seeds the gate did not "
                "play (episodes played as the Agent's); a trivial policy must not succeed",
            )
        firsts: dict[int, tuple[str, str, str]] = {}
        steps: list[str] = []
        for seed in seeds:
            total, hint, first, actions = play(seed, "oracle", lambda e, obs, s, t: e.oracle(), None)
            if total < config.success_threshold:
                result.oracle_failures.append(seed)
            if actions:
                firsts[seed] = (hint, actions[-1], first)
                steps += actions[:-1]
            if seed == seeds[0]:
                words = [w for w in dict.fromkeys(re.findall(r"[\w'-]+", hint)) if w.lower() not in first.lower()]
                for word in words[:AUDIT_HINT_WORDS]:
                    won, *_ = play(seed, f"hint word {word!r}", lambda e, obs, s, t, w=word: w, max_turns)
                    if won >= config.success_threshold:
                        fail(
                            "HINT_LEAK",
                            f"seed {seed}: the word {_clip(word, 40)!r} of the hint succeeds as the answer "
                            f"(hint {_clip(hint, 80)!r}); a hint must help without naming an answer",
                        )
    except _Failed:
        return result
    n = len(seeds)
    stated = hint_states_answer(firsts, steps)
    if result.oracle_failures:
        result.category = "ORACLE_FAILED"
        result.message = (
            f"following oracle() did not succeed on {len(result.oracle_failures)} of {n} seeds the gate did not play "
            f"(seeds {_seed_list(result.oracle_failures)})"
        )
    elif stated:
        hint, answer, _ = firsts[stated[0]]
        result.category = "HINT_LEAK"
        result.message = (
            f"the hint read after reset (as the Agent reads it) states the oracle's answer on {len(stated)} of {n} "
            f"seeds (seed {stated[0]}: {_clip(hint, 80)!r}, answer {_clip(answer, 40)!r})"
        )
    return result


def validate(
    program: EnvProgram | str, config: ValidationConfig | None = None, registry: Registry | None = None
) -> ValidationReport:
    """Run the validation gate on ``program`` (an :class:`EnvProgram` or its source text); with
    ``registry``, the novelty check compares against its environments.

    Returns the :class:`ValidationReport`: the program's faults are reported, never raised. Raises
    SandboxSetupError when no sandbox worker can be started on this machine.
    """
    if isinstance(program, str):
        program = EnvProgram(program)
    return _Validator(program, config or ValidationConfig(), registry).run()
