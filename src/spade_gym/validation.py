"""The validation gate: a program becomes a training environment only if every check passes.

The checks of docs/DESIGN.md ("The validation gate"), run on the real sandbox:

1. ``static``: size, syntax, restricted compiler, import allow-list, the ``Env`` interface;
2. ``load``: the module and ``Env()`` run within the time and memory limits;
3. ``contract``: types and sizes of every return value, finite rewards, JSON ``info``, returns in [0, 1];
4. ``determinism``: the same seeds and actions give the same transitions in two fresh workers with
   different ``PYTHONHASHSEED`` (the second plays the seeds in reverse order), and on a reused instance;
5. ``termination``: every episode ends by ``max_turns`` (every episode of the gate is played to
   ``max_turns``, capped by the host at ``sandbox.max_turns``, with non-empty actions too);
6. ``feasibility``: following ``oracle()`` reaches ``SUCCESS_RETURN`` on every seed;
7. ``non_triviality``: trivial policies (empty, constants, random letters, malformed actions, echo,
   the most common oracle answer, the hint itself) do not succeed, and the hint neither is nor
   states the answer (:func:`~spade_gym.hint_leak.hint_states_answer`);
8. ``variety``: different seeds give different first observations;
9. ``novelty``: not an exact duplicate (:func:`~spade_gym.registry.dedup.ast_hash`) of a registered
   environment, nor one that behaves like it on its probe (:mod:`spade_gym.novelty`), whatever the
   text similarity.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections import Counter
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from spade_gym.errors import Category, ContractError, ResourceLimitExceeded, SpadeError
from spade_gym.hint_leak import contains, hint_states_answer, normalised, secrets
from spade_gym.program import RETURN_TOLERANCE, EnvProgram
from spade_gym.sandbox import Budget, HostBudget, SandboxClient
from spade_gym.seeds import SEED_VARIABLE
from spade_gym.trivial import blind_policies, constant
from spade_gym.verdict import (  # noqa: F401 - the gate's verdict, importable from here too
    CHECKS,
    CheckResult,
    ValidationConfig,
    ValidationReport,
    clip,
    conclude,
)

if TYPE_CHECKING:
    from spade_gym.registry import Registry

__all__ = [
    "CHECKS",
    "SEED_VARIABLE",
    "CheckResult",
    "ValidationConfig",
    "ValidationReport",
    "validate",
]


class _Failed(Exception):
    """A check failed in a way that ends validation (the workers can no longer be trusted)."""

    def __init__(self, check: str, category: str, message: str) -> None:
        super().__init__(message)
        self.check, self.category, self.message = check, category, message


def _error_check(error: SpadeError, default: str) -> str:
    if isinstance(error, ContractError) or (
        isinstance(error, ResourceLimitExceeded) and error.category == Category.OUTPUT_LIMIT
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
    text_bytes: int = 0  # of the observations and hints the host read in this episode

    def held(self, text: str) -> int:
        """Count ``text`` into :attr:`text_bytes`; returns the new total."""
        self.text_bytes += len(text.encode("utf-8", "surrogatepass"))
        return self.text_bytes

    def add(self, transition: tuple[str, float, bool, bool, dict[str, Any]]) -> None:
        obs, reward, terminated, truncated, info = transition
        self.held(obs)
        self.digests.append(_digest(obs, reward, terminated, truncated, info))
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
        self.host = HostBudget(config.host_budget_s, "validation")
        self.clients: list[SandboxClient] = []
        self.usage = {"episode_text_bytes": 0, "hint_bytes": 0}

    def fail(self, check: str, category: str, message: str) -> None:
        result = self.results[check]
        if result.passed is not False:  # keep the first failure of each check
            result.passed, result.category, result.message = False, category, message

    def passed(self, *checks: str) -> None:
        for check in checks:
            if self.results[check].passed is None:
                self.results[check].passed = True

    def call(self, client: SandboxClient, op: str, args: dict[str, Any] | None, check: str, where: str) -> Any:
        if why := self.host.exhausted():
            raise _Failed("contract", Category.TIMEOUT, f"{where}: {why} (ValidationConfig.host_budget_s)")
        try:
            out = client.call(op, args, self.budget)
        except SpadeError as exc:
            raise _Failed(_error_check(exc, check), exc.category, f"{where}: {exc.message}") from None
        if op == "hint":
            self.hint_size(out, where)
        return out

    def hint_size(self, hint: str, where: str) -> None:
        size = len(hint.encode("utf-8", "surrogatepass"))
        self.usage["hint_bytes"] = max(self.usage["hint_bytes"], size)
        if size > self.config.max_hint_bytes:
            raise _Failed(
                "contract",
                Category.OUTPUT_LIMIT,
                f"{where}: the hint has {size:,} bytes; at most {self.config.max_hint_bytes:,} "
                "(ValidationConfig.max_hint_bytes): a hint is a short help the Agent reads whole",
            )

    def run(self) -> ValidationReport:
        started = time.perf_counter()
        self.host.charge()
        try:
            self._run()
        except _Failed as failure:
            self.fail(failure.check, failure.category, failure.message)
        finally:
            for client in self.clients:
                client.kill()
        self.host.charge()
        report = self.report
        report.usage = {
            "worker_cpu_s": round(self.budget.used, 6),
            "host_cpu_s": round(self.host.used, 6),
            **self.usage,
        }
        report.checks = [self.results[name] for name in CHECKS]
        conclude(report)
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
            self.fail("static", Category.COMPILE_REJECTED, "; ".join(problems))
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
                check = "static" if exc.category == Category.COMPILE_REJECTED else _error_check(exc, "load")
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
        episode = _Episode(seed, (obs, info), tolerance=self.config.return_tolerance)
        episode.held(obs)
        if hint:
            read = self.call(client, "hint", None, "contract", f"hint() after reset({seed}) in the {label} episode")
            episode.held(read)
        for turn in range(1, max_turns + 1):
            action = policy(client, episode)
            episode.actions.append(action)
            where = f"step() on turn {turn} of the {label} episode for seed {seed}"
            episode.add(tuple(self.call(client, "step", {"action": action}, check, where)))
            self._held(episode, where)
            if episode.ended:
                break
        return episode

    def _held(self, episode: _Episode, where: str) -> None:
        """The episode's observations and hints stay within ``sandbox.max_episode_text_bytes``."""
        self.usage["episode_text_bytes"] = max(self.usage["episode_text_bytes"], episode.text_bytes)
        limit = self.config.sandbox.max_episode_text_bytes
        if episode.text_bytes > limit:
            raise _Failed(
                "contract",
                Category.OUTPUT_LIMIT,
                f"{where}: the episode's observations and hints reached {episode.text_bytes:,} bytes; the host holds "
                f"at most {limit:,} per episode (SandboxConfig.max_episode_text_bytes)",
            )

    def _turns(self) -> int:
        """Turns of a gate episode: the declared ``max_turns``, capped by the host."""
        return min(self.report.max_turns or 1, self.config.sandbox.max_turns)

    def _oracle_episodes(self, a: SandboxClient) -> list[_Episode]:
        max_turns = self._turns()
        leaks: list[int] = []
        hints: dict[int, str] = {}  # seed -> the hint at the start of its oracle episode

        def oracle_policy(client: SandboxClient, episode: _Episode) -> str:
            turn = len(episode.actions) + 1
            where = f"on turn {turn} of the oracle episode for seed {episode.seed}"
            action: str = self.call(client, "oracle", None, "feasibility", f"oracle() {where}")
            if turn == 1:  # the hint is checked for leaks (and its contract) at the start
                hint = self.call(client, "hint", None, "contract", f"hint() {where}")
                episode.held(hint)
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
            capped = not episode.ended and len(episode.actions) >= max_turns  # the host's turn cap ended it
            if (episode.ended or capped) and total < self.config.success_threshold:
                self.fail(
                    "feasibility",
                    Category.ORACLE_FAILED,
                    f"seed {seed}: following oracle() for {len(episode.actions)} turn(s) returned {total:g}; "
                    f"it must reach {self.config.success_threshold:g} (last observation: "
                    f"{clip(episode.last_observation)!r})"
                    + (f"; the host ends every episode after {max_turns} turns" if capped else ""),
                )
        rate = len(leaks) / len(self.config.seeds)
        if leaks and rate > self.config.max_hint_success_rate:
            self.fail(
                "non_triviality",
                Category.HINT_LEAK,
                f"hint() equals oracle() at the start of {len(leaks)} of {len(self.config.seeds)} episodes "
                f"(seeds {seed_list(leaks)}); the hint gives the answer away",
            )
            return episodes
        # the hint alone must not state the answer: the oracle's last action, the one that completed the task
        firsts = {e.seed: (hints[e.seed], e.actions[-1], e.first[0]) for e in episodes if e.actions}
        stated = hint_states_answer(firsts, [action for e in episodes for action in e.actions[:-1]])
        if why := self.host.exhausted():
            raise _Failed("contract", Category.TIMEOUT, f"the hint-leak check: {why} (ValidationConfig.host_budget_s)")
        if stated and len(stated) / len(self.config.seeds) > self.config.max_hint_success_rate:
            seed = stated[0]
            hint, action, observation = firsts[seed]
            found = next((x for x in secrets(action, observation) if contains(normalised(hint), x)), action)
            self.fail(
                "non_triviality",
                Category.HINT_LEAK,
                f"hint() states the oracle's answer at the start of {len(stated)} of {len(self.config.seeds)} "
                f"episodes (seeds {seed_list(stated)}; seed {seed}: the hint {clip(hint, 120)!r} contains the "
                f"answer {clip(found, 60)!r}); a hint must help without stating the answer: give "
                "a method, a partial result or the first digit or letter instead",
            )
        return episodes

    def _check_episode(self, episode: _Episode, label: str, playing: str | None) -> None:
        """The return stays in [0, 1]; unless ``playing`` is ``None``, the episode ended by ``max_turns``."""
        if episode.excursion is not None:
            turn, partial = episode.excursion
            self.fail(
                "contract",
                Category.INVALID_REWARD,
                f"seed {episode.seed}: the return reached {partial:g} on turn {turn} of the {label} episode; "
                "the sum of rewards must stay within [0, 1]",
            )
        if playing is not None and not episode.ended and len(episode.actions) == (self.report.max_turns or 1):
            self.fail(
                "termination",
                Category.EPISODE_LIMIT,
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
                self.fail("determinism", Category.NONDETERMINISM, f"seed {recorded.seed}: {difference} {where}")
                return

    def _variety(self, episodes: list[_Episode]) -> None:
        firsts = [e.first[0] for e in episodes]
        distinct = len(set(firsts))
        needed = max(2, round(self.config.min_distinct_first_observations * len(firsts))) if len(firsts) > 1 else 1
        if distinct < needed:
            self.fail(
                "variety",
                Category.SEED_INVARIANT,
                f"{len(firsts)} seeds gave only {distinct} distinct first observation(s); at least {needed} are "
                f"required (first observation: {clip(firsts[0])!r})",
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
            label: _on_episode(act) for label, act in blind_policies(self.config.random_text_seed).items()
        }
        self._policies["hint"] = self._hint_policy
        for answer in self.config.constant_answers:
            self._policies[f"constant {answer!r}"] = _on_episode(constant(answer))
        if common is not None:
            self._policies[f"most common answer {clip(common, 40)!r}"] = _on_episode(constant(common))
        self._wins: Counter[str] = Counter()
        seeds = self.config.seeds[: max(1, self.config.trivial_seeds)]
        # every policy (empty, constant and non-empty ones) to max_turns: paying late, or not ending, is seen
        return [(label, seed, self._turns(), True) for label in self._policies for seed in seeds]

    def _hint_policy(self, client: SandboxClient, episode: _Episode) -> str:
        where = f"on turn {len(episode.actions) + 1} of the hint-submitting episode for seed {episode.seed}"
        return str(self.call(client, "hint", None, "contract", f"hint() {where}"))

    def _run_trivial(self, client: SandboxClient, jobs: list[tuple[str, int, int, bool]]) -> None:
        for label, seed, turns, counts in jobs:
            # hint() is called after reset, as in the Agent's hinted episodes: a hint() that changes the
            # episode (say, to pay any answer) must not make a trivial policy succeed
            episode = self._play(
                client, seed, self._policies[label], turns, "non_triviality", f"{label}-policy", hint=True
            )
            self._check_episode(episode, f"{label}-policy", f"playing the {label} policy, ")
            if counts and episode.total >= self.config.success_threshold:
                self._wins[label] += 1

    def _judge_trivial(self) -> None:
        n = len(self.config.seeds[: max(1, self.config.trivial_seeds)])
        for label in self._policies:
            rate = self._wins[label] / n
            self.report.trivial_success_rates[label] = round(rate, 6)
            limit = self.config.max_hint_success_rate if label == "hint" else self.config.max_trivial_success_rate
            if rate > limit:
                category = Category.HINT_LEAK if label == "hint" else Category.TRIVIAL
                what = "submitting the hint text" if label == "hint" else f"the trivial policy {label}"
                self.fail(
                    "non_triviality",
                    category,
                    f"{what} succeeded on {self._wins[label]} of {n} seeds (hint() having been called after reset, "
                    "as in the Agent's hinted episodes); a trivial policy must not succeed",
                )

    def _novelty(self) -> None:
        from spade_gym.novelty import duplicate_of

        problem = duplicate_of(self.program, self.registry, self.config)
        if problem is None:
            self.passed("novelty")
        else:
            self.fail("novelty", *problem)


def _first_difference(a: _Episode, b: _Episode) -> str | None:
    """The first difference of two episodes."""
    if a.first[0] != b.first[0]:
        return f"the first observation differs ({clip(a.first[0], 80)!r} vs {clip(b.first[0], 80)!r})"
    if a.first[1] != b.first[1]:
        return "the info returned by reset() differs"
    for turn, (x, y) in enumerate(zip(a.digests, b.digests, strict=False), 1):
        if x != y:
            return f"the observation, reward, flags or info on turn {turn} differ"
    if len(a.digests) != len(b.digests):
        return "the episode length differs"
    return None


def seed_list(seeds: list[int], shown: int = 10) -> str:
    text = ", ".join(map(str, seeds[:shown]))
    return text + (f", ... ({len(seeds) - shown} more)" if len(seeds) > shown else "")


def _on_episode(act: Callable[[str, int, int], str]) -> Any:
    """A ``(observation, seed, turn) -> action`` policy as ``_play`` calls it."""
    return lambda client, episode: act(episode.last_observation, episode.seed, len(episode.actions))


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
