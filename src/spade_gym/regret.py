"""Regret estimation and the Environment Designer's reward.

The regret of an environment for the current Agent is the gap between its mean return with the
privileged hint and without it (DESIGN.md, "Regret and the Designer's reward"; SPADE's analogue
of the PAIRED/ACCEL regret objective of unsupervised environment design):

    regret = max(mean_return_hint - mean_return_nohint, 0)

:func:`estimate_regret` plays ``k`` episodes with the hint and ``k`` without on the same seeds
(one batched rollout, sampling temperature > 0) and returns both means with their standard errors;
the no-hint trajectories are kept for reuse as Agent training data. :func:`designer_reward` turns
a validation outcome and an estimate into the Designer's reward, every threshold configurable in
:class:`RewardConfig`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import fmean, stdev
from typing import Any, Literal

from spade_gym.agent import Episode, RolloutConfig, RolloutStats, Trajectory, rollout
from spade_gym.policies.base import Policy, SamplingParams

__all__ = [
    "DesignerReward",
    "RegretEstimate",
    "RewardConfig",
    "designer_reward",
    "estimate_regret",
    "regret_episodes",
    "standard_error",
    "summarise",
]


def standard_error(values: Sequence[float]) -> float:
    """Standard error of the mean, ``stdev / sqrt(n)`` (sample stdev); 0 for fewer than 2 values."""
    return stdev(values) / math.sqrt(len(values)) if len(values) > 1 else 0.0


@dataclass
class RegretEstimate:
    """The Agent's returns on one environment with and without the hint.

    Attributes:
        env_id: the environment; ``k``: episodes per arm; ``seeds``: the reset seeds (shared by
            both arms).
        mean_hint, mean_nohint: mean episode returns (in [0, 1]); ``se_hint``, ``se_nohint``: their
            standard errors.
        regret: ``max(mean_hint - mean_nohint, 0)``.
        errors: episodes that ended with an environment error (either arm).
        nohint: the no-hint trajectories (Agent training data); ``hint``: the hinted ones.
        stats: the rollout's figures.
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
    nohint: list[Trajectory] = field(repr=False, default_factory=list)
    hint: list[Trajectory] = field(repr=False, default_factory=list)
    stats: RolloutStats | None = field(repr=False, default=None)

    def summary(self) -> dict[str, Any]:
        """The figures as a JSON-able dict (what ``meta.json`` stores)."""
        keys = ("k", "seeds", "mean_hint", "mean_nohint", "se_hint", "se_nohint", "regret", "errors")
        return {key: getattr(self, key) for key in keys}


def estimate_regret(
    env: Any,
    policy: Policy,
    k: int = 4,
    seeds: Sequence[int] | None = None,
    *,
    config: RolloutConfig | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> RegretEstimate:
    """Estimate an environment's regret for ``policy``: ``k`` episodes with and ``k`` without the hint.

    Args:
        env: a gymnasium id (``"spade/Name-v0"``), a program (path, source, ``EnvProgram``) or a
            factory returning a ``SandboxedEnv`` (see :class:`~spade_gym.agent.Episode`).
        policy: the Agent.
        k: episodes per arm, ``>= 1``.
        seeds: ``k`` reset seeds shared by both arms; default ``0 .. k-1``.
        config: rollout settings; default samples at temperature 1.0 (regret needs sampling).
        progress: called after every turn with ``(episodes finished, 2k)``.

    Returns:
        A :class:`RegretEstimate`; environment errors count as return 0 (and in ``errors``).

    Raises:
        ValueError: ``k < 1``, ``len(seeds) != k``, or greedy sampling (``temperature == 0``):
            k greedy episodes on one seed are one episode repeated.
    """
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    seeds = list(range(k)) if seeds is None else [int(s) for s in seeds]
    if len(seeds) != k:
        raise ValueError(f"seeds must hold k={k} seeds, got {len(seeds)}")
    config = config or RolloutConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=256))
    if config.sampling.greedy:
        raise ValueError("regret needs sampling: set RolloutConfig.sampling.temperature > 0")
    trajectories, stats = rollout(regret_episodes(env, seeds), policy, config, progress=progress)
    return summarise(trajectories, stats)


def regret_episodes(env: Any, seeds: Sequence[int]) -> list[Episode]:
    """The ``2k`` episodes of a regret estimate: ``k`` with the hint, then ``k`` without, same seeds."""
    return [Episode(env, seed, hint) for hint in (True, False) for seed in seeds]


def summarise(trajectories: Sequence[Trajectory], stats: RolloutStats | None = None) -> RegretEstimate:
    """Turn the trajectories of :func:`regret_episodes` (hinted first) into a :class:`RegretEstimate`.

    Raises:
        ValueError: an odd or empty number of trajectories.
    """
    if not trajectories or len(trajectories) % 2:
        raise ValueError(f"expected 2k trajectories (k with the hint, then k without), got {len(trajectories)}")
    k = len(trajectories) // 2
    hinted, plain = list(trajectories[:k]), list(trajectories[k:])
    hint_returns = [t.episode_return for t in hinted]
    plain_returns = [t.episode_return for t in plain]
    mean_hint, mean_nohint = fmean(hint_returns), fmean(plain_returns)
    return RegretEstimate(
        env_id=hinted[0].env_id,
        k=k,
        seeds=[t.seed for t in plain],
        mean_hint=mean_hint,
        mean_nohint=mean_nohint,
        se_hint=standard_error(hint_returns),
        se_nohint=standard_error(plain_returns),
        regret=max(mean_hint - mean_nohint, 0.0),
        errors=sum(t.error is not None for t in trajectories),
        nohint=plain,
        hint=hinted,
        stats=stats,
    )


@dataclass(frozen=True)
class RewardConfig:
    """Thresholds of the Designer's reward (DESIGN.md).

    Attributes:
        invalid: reward of a program that fails validation.
        duplicate: reward of an exact or near duplicate of a registered environment.
        trivial: reward of a trivial environment; ``trivial_at``: the no-hint mean return at or
            above which it counts as trivial (the Agent already solves it).
        out_of_reach: reward of an environment out of reach; ``out_of_reach_below``: the hint
            mean return below which it counts so (the Agent fails even with the hint).
    """

    invalid: float = -1.0
    duplicate: float = -0.5
    trivial: float = 0.0
    trivial_at: float = 1.0
    out_of_reach: float = 0.0
    out_of_reach_below: float = 0.05


@dataclass(frozen=True)
class DesignerReward:
    """The Designer's reward and why: ``outcome`` is ``"invalid"``, ``"duplicate"``,
    ``"trivial"``, ``"out_of_reach"`` or ``"regret"``."""

    reward: float
    outcome: Literal["invalid", "duplicate", "trivial", "out_of_reach", "regret"]


def designer_reward(
    accepted: bool,
    estimate: RegretEstimate | None = None,
    *,
    duplicate: bool = False,
    config: RewardConfig | None = None,
) -> DesignerReward:
    """The Environment Designer's reward for one program (DESIGN.md, "Regret and the Designer's reward").

    In order: a program that failed validation gets ``config.invalid``; a duplicate gets
    ``config.duplicate``; an environment the Agent solves without the hint (no-hint mean return
    ``>= trivial_at``) gets ``config.trivial``; one it fails even with the hint (hint mean return
    ``< out_of_reach_below``) gets ``config.out_of_reach``; otherwise the regret.

    Args:
        accepted: whether the validation gate accepted the program (``ValidationReport.accepted``).
        estimate: the regret estimate (needed when accepted and not a duplicate).
        duplicate: whether the program duplicates a registered environment (a
            ``DuplicateEnvironment`` was raised, or the gate reported ``DUPLICATE``).
        config: the thresholds.

    Returns:
        A :class:`DesignerReward`.

    Raises:
        ValueError: an accepted, non-duplicate program without an estimate.
    """
    config = config or RewardConfig()
    if not accepted and not duplicate:
        return DesignerReward(config.invalid, "invalid")
    if duplicate:
        return DesignerReward(config.duplicate, "duplicate")
    if estimate is None:
        raise ValueError("an accepted program needs a RegretEstimate for its reward")
    if estimate.mean_nohint >= config.trivial_at:
        return DesignerReward(config.trivial, "trivial")
    if estimate.mean_hint < config.out_of_reach_below:
        return DesignerReward(config.out_of_reach, "out_of_reach")
    return DesignerReward(estimate.regret, "regret")
