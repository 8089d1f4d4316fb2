"""The audit: the validation gate's trivial-policy, oracle and hint checks, replayed on seeds the gate
did not play (the regret seeds), each episode in a fresh worker as the Agent's (docs/security.md,
"Reward integrity"). A program that behaves only while validated, or only on the gate's seeds, is
refused here, before any regret is measured.
"""

from __future__ import annotations

import random
import re
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any, NoReturn

from spade_gym.errors import Category, SandboxSetupError
from spade_gym.hint_leak import hint_states_answer
from spade_gym.program import EnvProgram
from spade_gym.sandbox import Budget, HostBudget
from spade_gym.trivial import blind_policies, constant
from spade_gym.validation import ValidationConfig, clip, seed_list

__all__ = ["AUDIT_HINT_CANDIDATES", "AuditResult", "audit", "hint_candidates"]

#: Most candidate answers taken from the hint (its words and adjacent word pairs the observation
#: lacks); a longer hint gives a sample drawn at random, so no place in it is safe.
AUDIT_HINT_CANDIDATES = 24
_HINT_WORD = re.compile(r"[\w'-]+")


class _AuditFailed(Exception):
    """A check of the audit failed; :class:`AuditResult` holds why."""


@dataclass
class AuditResult:
    """What :func:`audit` found: the ``seeds`` played, each trivial policy's ``success_rates``, the
    ``oracle_failures`` (seeds), when it failed a ``category`` (``"TRIVIAL"``, ``"HINT_LEAK"``,
    ``"ORACLE_FAILED"``, ``"TIMEOUT"`` or a sandbox error's) and a ``message``, and ``usage``: what it
    used of its budgets (``worker_cpu_s``, ``host_cpu_s``, ``episodes``, ``hint_bytes``)."""

    seeds: tuple[int, ...]
    success_rates: dict[str, float] = field(default_factory=dict)
    oracle_failures: list[int] = field(default_factory=list)
    category: str | None = None
    message: str = ""
    usage: dict[str, float] = field(default_factory=dict)

    @property
    def passed(self) -> bool:
        """Whether the program behaved on these seeds as the gate requires."""
        return self.category is None


def hint_candidates(hint: str, observation: str, limit: int = AUDIT_HINT_CANDIDATES) -> list[str]:
    """Answers a hint may name outright: its distinct words absent from ``observation``, then adjacent
    pairs of them (a pass phrase), at most ``limit`` (words first; a random sample of the longer
    list). Linear in the lengths of both texts."""
    shown = {w.lower() for w in _HINT_WORD.findall(observation)}
    words = _HINT_WORD.findall(hint)
    fresh = [w.lower() not in shown for w in words]
    singles = [w for w, new in zip(words, fresh, strict=True) if new]
    pairs = [f"{a} {b}" for i, (a, b) in enumerate(zip(words, words[1:], strict=False)) if fresh[i] and fresh[i + 1]]
    singles, pairs = list(dict.fromkeys(singles)), list(dict.fromkeys(pairs))
    draw = random.SystemRandom()  # a longer hint: a sample no program can predict, words first
    if len(singles) >= limit:
        return draw.sample(singles, limit)
    return singles + (pairs if len(singles) + len(pairs) <= limit else draw.sample(pairs, limit - len(singles)))


def audit(
    env: Any, seeds: Iterable[int], config: ValidationConfig | None = None, max_turns: int | None = None
) -> AuditResult:
    """Replay the gate's feasibility and non-triviality checks on ``seeds`` the gate did not play,
    each episode in a fresh worker as the Agent's: ``reset``, ``hint()``, then ``step``.

    The trivial policies play first, before any ``oracle()`` call (``TRIVIAL``); on the first seed
    no :func:`hint_candidates` answer may win (``HINT_LEAK``); following ``oracle()`` must succeed
    (``ORACLE_FAILED``) and the hint must not state its answer (:func:`hint_states_answer`,
    ``HINT_LEAK``). Budgets as the gate's: ``config.budget_s`` of worker CPU, ``host_budget_s`` of
    the host's own, ``max_hint_bytes`` per hint, ``sandbox.max_episode_text_bytes`` per episode.

    ``env``: what :class:`~spade_gym.agent.Episode` accepts. ``max_turns``: of a trivial or hint-word
    episode, as the Agent's (default: the env's, which the host caps at ``sandbox.max_turns``); the
    oracle plays to the env's own. A program error is a failed
    :class:`AuditResult`, never an exception. Raises ValueError for no seeds, SandboxSetupError when
    no worker can start.
    """
    config = config or ValidationConfig()
    seeds = tuple(seeds)
    if not seeds:
        raise ValueError("audit() needs at least one seed")
    result = AuditResult(seeds)
    policies = blind_policies(config.random_text_seed)
    policies.update({f"constant {a!r}": constant(a) for a in config.constant_answers})

    def fail(category: str, message: str) -> NoReturn:
        result.category, result.message = category, message[:500]
        raise _AuditFailed(message)

    # the whole audit: a slow program cannot stall the trainer (CPU seconds of its workers and of the host)
    budget = Budget(config.budget_s, what="audit", wall=True, wall_factor=config.sandbox.wall_factor)
    host = HostBudget(config.host_budget_s, "audit")
    host.charge()
    usage = {"episodes": 0, "hint_bytes": 0}

    def play(seed: int, label: str, act: Any, turns: int | None = max_turns) -> tuple[float, str, str, list[str]]:
        """One episode in a fresh worker, of at most ``turns`` turns (``None``: the env's own, which
        the host caps): ``(return, hint, first observation, actions)``."""
        if why := budget.exhausted() or host.exhausted():
            fail(Category.TIMEOUT, f"{why} (ValidationConfig.budget_s and host_budget_s)")
        playable: Any = None
        usage["episodes"] += 1
        try:
            playable = _open(env, config, budget)
            first, _info = playable.reset(seed=seed)
            hint = playable.hint()  # as start_episode: every episode reads it right after reset
            size = len(hint.encode("utf-8", "surrogatepass"))
            usage["hint_bytes"] = max(usage["hint_bytes"], size)
            if size > config.max_hint_bytes:
                fail(
                    Category.OUTPUT_LIMIT,
                    f"seed {seed}: the hint has {size:,} bytes; at most {config.max_hint_bytes:,}",
                )
            observation, total, actions = first, 0.0, []
            for turn in range(min(playable.max_turns, turns or playable.max_turns)):
                if why := host.exhausted():
                    fail(Category.TIMEOUT, f"seed {seed}, the {label} policy: {why} (ValidationConfig.host_budget_s)")
                action = act(playable, observation, seed, turn)
                actions.append(action)
                observation, reward, terminated, truncated, info = playable.step(action)
                error = info.get("sandbox_error") if isinstance(info, dict) else None
                if error:
                    fail(
                        str(error.get("category") or Category.ENV_EXCEPTION),
                        f"seed {seed}, the {label} policy: {error.get('message', '')}",
                    )
                total += reward
                if terminated or truncated:
                    break
            return total, hint, first, actions
        except (_AuditFailed, SandboxSetupError):
            raise
        except Exception as exc:  # the program failed to load, or in reset, hint or oracle
            fail(getattr(exc, "category", None) or Category.ENV_EXCEPTION, f"seed {seed}, the {label} policy: {exc}")
        finally:
            client = getattr(playable, "client", None)  # a SandboxedEnv: charge its worker's CPU seconds
            if client is not None:
                budget.charge(client.cpu_used_s)
            if playable is not None:
                playable.close()

    try:
        _audit(result, seeds, policies, play, config)
    except _AuditFailed:
        pass
    host.charge()
    result.usage = {"worker_cpu_s": round(budget.used, 6), "host_cpu_s": round(host.used, 6), **usage}
    return result


def _open(env: Any, config: ValidationConfig, budget: Budget) -> Any:
    """A fresh playable instance of ``env``; a program's episode draws on what is left of ``budget``."""
    from spade_gym.agent import open_playable_env
    from spade_gym.env import SandboxedEnv

    if isinstance(env, EnvProgram):
        sandbox = replace(config.sandbox, episode_budget_s=max(min(budget.remaining, 1e5), 1e-3))
        return SandboxedEnv(env, config=sandbox)
    return open_playable_env(env)  # a SandboxedEnv (with oracle()) or another playable env


def _audit(
    result: AuditResult,
    seeds: tuple[int, ...],
    policies: dict[str, Callable[[str, int, int], str]],
    play: Callable[..., tuple[float, str, str, list[str]]],
    config: ValidationConfig,
) -> None:
    """The audit's checks in order; a failure raises ``_AuditFailed`` with ``result`` filled in."""
    wins: Counter[str] = Counter()
    # the trivial policies first: a program that notes oracle() calls (the gate's habit) sees none
    for label, policy in policies.items():
        for seed in seeds:
            total, *_ = play(seed, label, lambda e, obs, s, t, p=policy: p(obs, s, t))
            if total >= config.success_threshold:
                wins[label] += 1
    result.success_rates = {label: wins[label] / len(seeds) for label in policies}
    worst = max(result.success_rates, key=lambda k: result.success_rates[k])
    if result.success_rates[worst] > config.max_trivial_success_rate:
        result.category = Category.TRIVIAL
        result.message = (
            f"the trivial policy {worst} succeeded on {wins[worst]} of {len(seeds)} seeds the gate did not "
            "play (episodes played as the Agent's); a trivial policy must not succeed"
        )
        return
    firsts: dict[int, tuple[str, str, str]] = {}
    steps: list[str] = []
    for seed in seeds:
        # the oracle plays to the env's own max_turns (the host caps it): feasibility, not the Agent's cap
        total, hint, first, actions = play(seed, "oracle", lambda e, obs, s, t: e.oracle(), None)
        if total < config.success_threshold:
            result.oracle_failures.append(seed)
        if actions:
            firsts[seed] = (hint, actions[-1], first)
            steps += actions[:-1]
        if seed != seeds[0]:
            continue
        for word in hint_candidates(hint, first):
            won, *_ = play(seed, f"hint word {word!r}", lambda e, obs, s, t, w=word: w)
            if won >= config.success_threshold:
                result.category = Category.HINT_LEAK
                result.message = (
                    f"seed {seed}: {clip(word, 40)!r}, taken from the hint, succeeds as the answer "
                    f"(hint {clip(hint, 80)!r}); a hint must help without naming an answer"
                )
                return
    n = len(seeds)
    stated = hint_states_answer(firsts, steps)
    if result.oracle_failures:
        result.category = Category.ORACLE_FAILED
        result.message = (
            f"following oracle() did not succeed on {len(result.oracle_failures)} of {n} seeds the gate did not play "
            f"(seeds {seed_list(result.oracle_failures)})"
        )
    elif stated:
        hint, answer, _ = firsts[stated[0]]
        result.category = Category.HINT_LEAK
        result.message = (
            f"the hint read after reset (as the Agent reads it) states the oracle's answer on {len(stated)} of {n} "
            f"seeds (seed {stated[0]}: {clip(hint, 80)!r}, answer {clip(answer, 40)!r})"
        )
