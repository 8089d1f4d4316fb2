"""Regret estimation and the Environment Designer's reward (docs/DESIGN.md, "Regret and the Designer's reward").

SPADE's regret, the analogue of the PAIRED/ACCEL regret of unsupervised environment design, is
``mean_return_hint - mean_return_nohint``. A hint may help only together with the environment: a
hint that solves the task on its own (the answer spelled, reversed, split into words, hidden among
decoys) is a leak, whatever its encoding. So a third arm plays the hint **alone**: the Agent reads
its seed's hint with the observations of *another* seed's no-hint episode in their place (so the
hint cannot tell the arm by a fixed text; with ``k = 1``, :data:`~spade_gym.agent.DECOY_OBSERVATION`),
and the Designer is paid only for what the hint adds beyond it::

    regret = max(0, mean_return_hint - max(mean_return_nohint, mean_return_hint_only))

The hint-only arm is played only when the hint arm beats the no-hint arm (``hint_only="auto"``):
otherwise the regret is 0 whatever it returns.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, fields
from statistics import fmean, stdev
from typing import Annotated, Any, Literal

from annotated_types import Ge, Le

from spade_gym.agent import Episode, RolloutConfig, RolloutStats, Trajectory, rollout
from spade_gym.options import FINITE, option
from spade_gym.policies.base import Policy
from spade_gym.program import LEARNING_WINDOW, OUT_OF_REACH_BELOW, TRIVIAL_AT
from spade_gym.seeds import draw_seeds

#: Default regret episodes per arm (``DesignerConfig.k``, the ``agent.k`` config key, the CLI's ``-k``).
REGRET_EPISODES = 4
#: When the hint-only arm is played (:func:`estimate_regret`'s ``hint_only``).
HintOnly = Literal["auto", "always", "never"]

__all__ = [
    "REGRET_EPISODES",
    "DesignerReward",
    "HintOnly",
    "RegretEstimate",
    "SHAPINGS",
    "RewardConfig",
    "designer_reward",
    "estimate_regret",
    "estimate_regrets",
    "hint_only_episodes",
    "regret_episodes",
    "standard_error",
    "summarise",
]


def standard_error(values: Sequence[float]) -> float:
    """Standard error of the mean, ``stdev / sqrt(n)`` (sample stdev); 0 for fewer than 2 values."""
    return stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0


@dataclass
class RegretEstimate:
    """The Agent's returns on one environment with the hint, without it, and with the hint alone.

    ``k`` episodes per arm on the shared ``seeds``; means in [0, 1] with standard errors ``se_*``;
    ``*_hint_only``: the hint-only arm (``None`` when it was not played); ``regret``: the module's
    rule; ``reason``: which rule set it, in words; ``errors``: episodes ended by an environment
    error; ``success_*``: fraction of successful episodes (``None`` when built without
    trajectories); ``nohint``/``hint``/``hint_only``: the trajectories.
    """

    env_id: str
    k: int
    seeds: list[int]
    mean_hint: float
    mean_nohint: float
    se_hint: float
    se_nohint: float
    regret: float
    errors: int
    success_hint: float | None = None
    success_nohint: float | None = None
    mean_hint_only: float | None = None
    se_hint_only: float | None = None
    success_hint_only: float | None = None
    reason: str = ""
    nohint: list[Trajectory] = field(repr=False, default_factory=list)
    hint: list[Trajectory] = field(repr=False, default_factory=list)
    hint_only: list[Trajectory] = field(repr=False, default_factory=list)
    stats: RolloutStats | None = field(repr=False, default=None)

    @property
    def p_nohint(self) -> float:
        """The no-hint success rate ``p`` the shaping uses: ``success_nohint``, else ``mean_nohint``."""
        return self.mean_nohint if self.success_nohint is None else self.success_nohint

    def summary(self) -> dict[str, Any]:
        """The figures as a JSON-able dict (what ``meta.json`` stores): every shown field but ``env_id``."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.repr and f.name != "env_id"}


def estimate_regret(
    env: Any,
    policy: Policy,
    k: int = REGRET_EPISODES,
    seeds: Sequence[int] | None = None,
    *,
    config: RolloutConfig | None = None,
    progress: Callable[[int, int], None] | None = None,
    hint_only: HintOnly = "auto",
) -> RegretEstimate:
    """Estimate an environment's regret for ``policy`` (the module's rule): ``k`` episodes with the
    hint and ``k`` without in one batched rollout, then, when ``hint_only`` is ``"always"`` or
    ``"auto"`` and the hint arm returned more, ``k`` with the hint alone.

    ``env``: anything :class:`~spade_gym.agent.Episode` takes; ``seeds``: shared by every arm
    (default: ``k`` drawn by :func:`~spade_gym.seeds.draw_seeds`, which a program cannot predict);
    ``progress`` gets ``(episodes finished, episodes planned)``. Errors count as return 0.
    Raises ValueError for ``k < 1``, ``len(seeds) != k``, an unknown ``hint_only`` or greedy sampling.
    """
    return estimate_regrets([env], policy, k, seeds, config=config, progress=progress, hint_only=hint_only)[0]


def estimate_regrets(
    envs: Sequence[Any],
    policy: Policy,
    k: int = REGRET_EPISODES,
    seeds: Sequence[int] | None = None,
    *,
    config: RolloutConfig | None = None,
    progress: Callable[[int, int], None] | None = None,
    hint_only: HintOnly = "auto",
) -> list[RegretEstimate]:
    """:func:`estimate_regret` for several environments on the same seeds, in two batched rollouts in
    all (every environment's hint and no-hint arms, then the hint-only arms that are played); each
    estimate's ``stats`` are those of both rollouts. Raises as :func:`estimate_regret`."""
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    seeds = draw_seeds(k, "regret") if seeds is None else [int(s) for s in seeds]
    if len(seeds) != k:
        raise ValueError(f"seeds must hold k={k} seeds, got {len(seeds)}")
    if hint_only not in ("auto", "always", "never"):
        raise ValueError(f"hint_only must be 'auto', 'always' or 'never', got {hint_only!r}")
    config = config or RolloutConfig()
    if config.sampling.greedy:
        raise ValueError("regret needs sampling: set RolloutConfig.sampling.temperature > 0")
    episodes = [e for env in envs for e in regret_episodes(env, seeds)]
    played, stats = rollout(episodes, policy, config, progress=progress)
    arms = [list(played[2 * k * i : 2 * k * (i + 1)]) for i in range(len(envs))]
    firsts = [summarise(trajectories) for trajectories in arms]
    alone = [
        i
        for i, first in enumerate(firsts)
        if hint_only == "always" or (hint_only == "auto" and first.mean_hint > first.mean_nohint)
    ]
    if alone:
        offset = len(played)

        def later(done: int, total: int) -> None:
            if progress is not None:
                progress(offset + done, offset + total)

        blind = [e for i in alone for e in hint_only_episodes(envs[i], seeds, firsts[i].nohint)]
        more, extra = rollout(blind, policy, config, progress=later)
        for name in ("generate_calls", "episodes", "turns", "format_ok_turns", "generation_s", "env_s", "total_s"):
            setattr(stats, name, getattr(stats, name) + getattr(extra, name))
        for n, i in enumerate(alone):
            arms[i] += more[k * n : k * (n + 1)]
    return [summarise(trajectories, stats) for trajectories in arms]


def regret_episodes(env: Any, seeds: Sequence[int]) -> list[Episode]:
    """The ``2k`` episodes of a regret estimate: ``k`` with the hint, then ``k`` without, same seeds."""
    return [Episode(env, seed, hint) for hint in (True, False) for seed in seeds]


def hint_only_episodes(env: Any, seeds: Sequence[int], nohint: Sequence[Trajectory] = ()) -> list[Episode]:
    """The ``k`` episodes of the hint-only arm: each seed's hint, and in place of its observations
    those the Agent read in the no-hint episode of the next seed (``nohint``, in the order of
    ``seeds``; none, or ``k = 1``: :data:`~spade_gym.agent.DECOY_OBSERVATION`)."""
    decoys: list[tuple[str, ...]] = [()] * len(seeds)
    if len(nohint) == len(seeds) > 1:
        shown = [tuple(m["content"] for m in t.messages[1:] if m["role"] == "user" and m["content"]) for t in nohint]
        decoys = [shown[(i + 1) % len(shown)] for i in range(len(shown))]
    return [Episode(env, seed, True, decoy=True, decoy_observations=d) for seed, d in zip(seeds, decoys, strict=True)]


def _mean(trajectories: Sequence[Trajectory], value: Callable[[Trajectory], float]) -> float | None:
    return fmean(value(t) for t in trajectories) if trajectories else None


def summarise(trajectories: Sequence[Trajectory], stats: RolloutStats | None = None) -> RegretEstimate:
    """Turn the trajectories of :func:`regret_episodes` (and, optionally, :func:`hint_only_episodes`)
    into a :class:`RegretEstimate`; the arms are told apart by ``Trajectory.hint`` and ``decoy``.

    Raises ValueError unless the hint and no-hint arms hold the same number ``k >= 1`` of episodes
    and the hint-only arm ``k`` or none.
    """
    hinted = [t for t in trajectories if t.hint and not t.decoy]
    plain = [t for t in trajectories if not t.hint and not t.decoy]
    alone = [t for t in trajectories if t.decoy]
    k = len(plain)
    if not k or len(hinted) != k or len(alone) not in (0, k) or any(not t.hint for t in alone):
        raise ValueError(
            f"expected k episodes with the hint, k without and 0 or k with the hint alone; got {len(hinted)}, "
            f"{len(plain)} and {len(alone)} (of which {sum(not t.hint for t in alone)} unhinted)"
        )
    mean_hint = fmean(t.episode_return for t in hinted)
    mean_nohint = fmean(t.episode_return for t in plain)
    mean_alone = _mean(alone, lambda t: t.episode_return)
    regret, reason = _regret(mean_hint, mean_nohint, mean_alone)
    return RegretEstimate(
        env_id=(hinted or plain)[0].env_id,
        k=k,
        seeds=[t.seed for t in plain],
        mean_hint=mean_hint,
        mean_nohint=mean_nohint,
        se_hint=standard_error([t.episode_return for t in hinted]),
        se_nohint=standard_error([t.episode_return for t in plain]),
        regret=regret,
        errors=sum(t.error is not None for t in trajectories),
        success_hint=fmean(t.success for t in hinted),
        success_nohint=fmean(t.success for t in plain),
        mean_hint_only=mean_alone,
        se_hint_only=standard_error([t.episode_return for t in alone]) if alone else None,
        success_hint_only=_mean(alone, lambda t: float(t.success)),
        reason=reason,
        nohint=plain,
        hint=hinted,
        hint_only=alone,
        stats=stats,
    )


def _regret(hint: float, nohint: float, alone: float | None) -> tuple[float, str]:
    """The module's rule: ``(regret, the reason in words)``."""
    if hint <= nohint:
        return 0.0, f"the hint did not raise the return ({hint:.2f} with it, {nohint:.2f} without)"
    if alone is None:
        return (
            hint - nohint,
            f"the hint raised the return from {nohint:.2f} to {hint:.2f}; the hint alone was not played",
        )
    if alone >= hint:
        return 0.0, f"the hint alone, without the environment's observations, returns {alone:.2f}: a leak"
    if alone > nohint:
        return hint - alone, (
            f"the hint alone returns {alone:.2f}, more than {nohint:.2f} without it: paid only what the hint adds "
            f"with the environment ({hint:.2f})"
        )
    return hint - nohint, f"the hint raised the return from {nohint:.2f} to {hint:.2f}; alone it returns {alone:.2f}"


#: The Designer reward's shaping rules (:attr:`RewardConfig.shaping`).
SHAPINGS = ("none", "window", "learnability")


#: A reward, and a fraction of episodes (``Annotated`` ranges, checked by the config).
_Finite = Annotated[float, FINITE]
_Share = Annotated[float, Ge(0), Le(1)]


@dataclass(frozen=True)
class RewardConfig:
    """Thresholds and shaping of the Designer's reward (the ``designer.reward`` config section); each
    field's help text documents it, its ``Annotated`` range is what the config accepts. ValueError for
    an unknown ``shaping`` or a window not in [0, 1]."""

    invalid: _Finite = option(-1.0, "reward of a program that fails the validation gate")
    duplicate: _Finite = option(-0.5, "reward of an exact or near duplicate of a registered environment")
    trivial: _Finite = option(0.0, "reward of a trivial environment (the Agent solves it without the hint)")
    trivial_at: _Share = option(TRIVIAL_AT, "no-hint mean return at or above which an environment is trivial")
    out_of_reach: _Finite = option(0.0, "reward of an environment out of reach (failed even with the hint)")
    out_of_reach_below: _Share = option(
        OUT_OF_REACH_BELOW, "hint mean return below which an environment is out of reach"
    )
    shaping: Literal["none", "window", "learnability"] = option(
        "none",
        "reward of an environment neither trivial nor out of reach: 'none' (the regret, SPADE), 'window' (the "
        "regret only while the no-hint success rate p is in [window_low, window_high], R-Zero) or "
        "'learnability' (4 p (1 - p), times the regret when learnability_times_regret)",
    )
    window_low: _Share = option(LEARNING_WINDOW[0], "lowest no-hint success rate at which 'window' pays the regret")
    window_high: _Share = option(LEARNING_WINDOW[1], "highest no-hint success rate at which 'window' pays the regret")
    outside_window: _Finite = option(0.0, "reward under 'window' when the no-hint success rate is outside the window")
    learnability_times_regret: bool = option(
        True, "'learnability' pays 4 p (1 - p) times the regret (true) or 4 p (1 - p) alone (false)"
    )

    def __post_init__(self) -> None:
        if self.shaping not in SHAPINGS:
            raise ValueError(f"RewardConfig.shaping = {self.shaping!r}; expected one of {', '.join(SHAPINGS)}")
        if not 0.0 <= self.window_low <= self.window_high <= 1.0:
            raise ValueError(
                f"RewardConfig.window_low = {self.window_low!r} and window_high = {self.window_high!r}; expected "
                "0 <= window_low <= window_high <= 1"
            )


#: What decided a Designer reward (:attr:`DesignerReward.outcome`).
Outcome = Literal["invalid", "duplicate", "trivial", "out_of_reach", "regret", "outside_window", "learnability"]


@dataclass(frozen=True)
class DesignerReward:
    """The Designer's reward, the rule of :func:`designer_reward` that gave it, and the ``p`` it used."""

    reward: float
    outcome: Outcome
    p_nohint: float | None = None


def designer_reward(
    accepted: bool,
    estimate: RegretEstimate | None = None,
    *,
    duplicate: bool = False,
    config: RewardConfig | None = None,
) -> DesignerReward:
    """The Environment Designer's reward for one program.

    In order: ``duplicate``, ``invalid`` (gate rejected), ``trivial`` (no-hint mean ``>=
    trivial_at``), ``out_of_reach`` (hint mean ``< out_of_reach_below``); otherwise, with ``p`` the
    no-hint success rate, ``config.shaping`` decides: ``"none"`` (SPADE): the regret; ``"window"``:
    the regret when ``window_low <= p <= window_high``, else ``outside_window`` (R-Zero, Huang et
    al. 2025, section 3); ``"learnability"``: ``4 p (1 - p)`` (Tzannetos et al. 2023; Rutherford et
    al. 2024, "No Regrets", section 4), times the regret when ``learnability_times_regret``.

    Why shaping: a hint that states the answer earns the maximum regret 1 at ``p = 0``, where every
    no-hint group has zero advantage and the Agent learns nothing.

    Raises ValueError for an accepted, non-duplicate program without an estimate.
    """
    config = config or RewardConfig()
    if duplicate:
        return DesignerReward(config.duplicate, "duplicate")
    if not accepted:
        return DesignerReward(config.invalid, "invalid")
    if estimate is None:
        raise ValueError("an accepted program needs a RegretEstimate for its reward")
    p = estimate.p_nohint
    if estimate.mean_nohint >= config.trivial_at:
        return DesignerReward(config.trivial, "trivial", p)
    if estimate.mean_hint < config.out_of_reach_below:
        return DesignerReward(config.out_of_reach, "out_of_reach", p)
    if config.shaping == "window":
        if config.window_low <= p <= config.window_high:
            return DesignerReward(estimate.regret, "regret", p)
        return DesignerReward(config.outside_window, "outside_window", p)
    if config.shaping == "learnability":
        learnability = 4.0 * p * (1.0 - p)
        return DesignerReward(
            learnability * estimate.regret if config.learnability_times_regret else learnability, "learnability", p
        )
    return DesignerReward(estimate.regret, "regret", p)
