"""Regret estimation and the Environment Designer's reward.

The regret of an environment for the current Agent is the gap between its mean return with the
privileged hint and without it (docs/DESIGN.md, "Regret and the Designer's reward"; SPADE's analogue
of the PAIRED/ACCEL regret objective of unsupervised environment design):

    regret = max(mean_return_hint - mean_return_nohint, 0)

:func:`estimate_regret` plays ``k`` episodes with the hint and ``k`` without on the same seeds
(one batched rollout, sampling temperature > 0) and returns both means with their standard errors;
the no-hint trajectories are kept for reuse as Agent training data. :func:`designer_reward` turns
a validation outcome and an estimate into the Designer's reward, every threshold configurable in
:class:`RewardConfig`, with an optional shaping toward the edge of the Agent's ability (the regret
only inside a window of no-hint success rates, as in R-Zero, or the learnability ``p (1 - p)`` of
"No Regrets"; see :func:`designer_reward`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from statistics import fmean, stdev
from typing import Any, Literal

from spade_gym.agent import Episode, RolloutConfig, RolloutStats, Trajectory, rollout
from spade_gym.policies.base import Policy
from spade_gym.program import LEARNING_WINDOW, OUT_OF_REACH_BELOW, TRIVIAL_AT

#: Regret episodes per arm (with the hint, and as many without) by default. One definition:
#: :func:`estimate_regret`, ``DesignerConfig.k``, the ``agent.k`` config key and the CLI's ``-k``.
REGRET_EPISODES = 4

__all__ = [
    "REGRET_EPISODES",
    "DesignerReward",
    "RegretEstimate",
    "SHAPINGS",
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
        success_hint, success_nohint: the fraction of episodes that succeeded
            (:attr:`Trajectory.success <spade_gym.agent.Trajectory.success>`) with and without the
            hint; ``None`` when the estimate was built without trajectories.
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
    success_hint: float | None = None
    success_nohint: float | None = None
    nohint: list[Trajectory] = field(repr=False, default_factory=list)
    hint: list[Trajectory] = field(repr=False, default_factory=list)
    stats: RolloutStats | None = field(repr=False, default=None)

    @property
    def p_nohint(self) -> float:
        """The no-hint success rate ``p`` in [0, 1] that the reward's shaping uses: ``success_nohint``,
        or ``mean_nohint`` when that is unknown (equal for environments that pay 0 or 1)."""
        return self.mean_nohint if self.success_nohint is None else self.success_nohint

    def summary(self) -> dict[str, Any]:
        """The figures as a JSON-able dict (what ``meta.json`` stores)."""
        keys = (
            "k",
            "seeds",
            "mean_hint",
            "mean_nohint",
            "se_hint",
            "se_nohint",
            "regret",
            "errors",
            "success_hint",
            "success_nohint",
        )
        return {key: getattr(self, key) for key in keys}


def estimate_regret(
    env: Any,
    policy: Policy,
    k: int = REGRET_EPISODES,
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
        config: rollout settings; default ``RolloutConfig()``, the Agent's measured sampling
            (:data:`~spade_gym.agent.AGENT_TEMPERATURE`; regret needs sampling).
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
    config = config or RolloutConfig()
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
        success_hint=fmean(t.success for t in hinted),
        success_nohint=fmean(t.success for t in plain),
        nohint=plain,
        hint=hinted,
        stats=stats,
    )


#: The Designer reward's shaping rules (:attr:`RewardConfig.shaping`).
SHAPINGS = ("none", "window", "learnability")


def _opt(default: Any, help: str) -> Any:
    """A field with its help text (``spade selfplay --help-config`` shows it under ``designer.reward``)."""
    return field(default=default, metadata={"help": help})


@dataclass(frozen=True)
class RewardConfig:
    """Thresholds and shaping of the Designer's reward (docs/DESIGN.md, "Regret and the Designer's reward").

    This one dataclass is also the ``designer.reward`` section of the self-play config
    (:mod:`spade_gym.trainer.config`): each field's default and help text live here only.

    Attributes:
        invalid: reward of a program that fails validation.
        duplicate: reward of an exact or near duplicate of a registered environment.
        trivial: reward of a trivial environment; ``trivial_at``: the no-hint mean return at or
            above which it counts as trivial (the Agent already solves it).
        out_of_reach: reward of an environment out of reach; ``out_of_reach_below``: the hint
            mean return below which it counts so (the Agent fails even with the hint).
        shaping: how an environment that is neither trivial nor out of reach is rewarded (see
            :func:`designer_reward`): ``"none"`` (the paper's regret, the default), ``"window"``
            (regret only inside a band of no-hint success rates) or ``"learnability"``
            (``4 p (1 - p)``, by default times the regret).
        window_low, window_high: the band of ``"window"``, inclusive, on the no-hint success
            rate ``p`` (default 0.3 and 0.8, R-Zero's band, Huang et al. 2025, section 3);
            ``outside_window``: the reward outside it (default 0).
        learnability_times_regret: ``"learnability"`` multiplies ``4 p (1 - p)`` by the regret
            (default ``True``: see :func:`designer_reward` for why).

    Raises:
        ValueError: an unknown ``shaping``, or a window that is not ``0 <= window_low <=
            window_high <= 1``.
    """

    invalid: float = _opt(-1.0, "reward of a program that fails the validation gate")
    duplicate: float = _opt(-0.5, "reward of an exact or near duplicate of a registered environment")
    trivial: float = _opt(0.0, "reward of a trivial environment (the Agent solves it without the hint)")
    trivial_at: float = _opt(TRIVIAL_AT, "no-hint mean return in [0, 1] at or above which an environment is trivial")
    out_of_reach: float = _opt(0.0, "reward of an environment out of reach (failed even with the hint)")
    out_of_reach_below: float = _opt(
        OUT_OF_REACH_BELOW, "hint mean return in [0, 1] below which an environment is out of reach"
    )
    shaping: Literal["none", "window", "learnability"] = _opt(
        "none",
        "reward of an environment neither trivial nor out of reach: 'none' (the regret, SPADE), 'window' (the "
        "regret only while the no-hint success rate p is in [window_low, window_high], R-Zero) or "
        "'learnability' (4 p (1 - p), times the regret when learnability_times_regret)",
    )
    window_low: float = _opt(
        LEARNING_WINDOW[0], "lowest no-hint success rate in [0, 1] at which 'window' pays the regret"
    )
    window_high: float = _opt(
        LEARNING_WINDOW[1], "highest no-hint success rate in [0, 1] at which 'window' pays the regret"
    )
    outside_window: float = _opt(0.0, "reward under 'window' when the no-hint success rate is outside the window")
    learnability_times_regret: bool = _opt(
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
    """The Designer's reward and which rule of :func:`designer_reward` gave it.

    Attributes:
        reward: the reward.
        outcome: ``"invalid"``, ``"duplicate"``, ``"trivial"``, ``"out_of_reach"``, ``"regret"``
            (the regret was paid: no shaping, or inside the window), ``"outside_window"``
            (``shaping="window"``, ``p`` outside it) or ``"learnability"``
            (``shaping="learnability"``).
        p_nohint: the no-hint success rate the shaping used (``None`` when no estimate was needed).
    """

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
    """The Environment Designer's reward for one program (docs/DESIGN.md, "Regret and the Designer's reward").

    In order: a program that failed validation gets ``config.invalid``; a duplicate gets
    ``config.duplicate``; an environment the Agent solves without the hint (no-hint mean return
    ``>= trivial_at``) gets ``config.trivial``; one it fails even with the hint (hint mean return
    ``< out_of_reach_below``) gets ``config.out_of_reach``; otherwise ``config.shaping`` decides,
    with ``p`` the no-hint success rate (:attr:`RegretEstimate.p_nohint`):

    * ``"none"`` (default, SPADE): the regret ``max(mean_hint - mean_nohint, 0)``;
    * ``"window"``: the regret when ``window_low <= p <= window_high``, else ``outside_window``
      (R-Zero, Huang et al. 2025, section 3, keeps only questions whose solver success is within
      [0.3, 0.8]);
    * ``"learnability"``: ``4 p (1 - p)``, the variance of a Bernoulli(``p``) success scaled to
      [0, 1] (the "learnability" of Tzannetos et al. 2023 and of Rutherford et al. 2024, "No
      Regrets", section 4; Absolute Zero, Zhao et al. 2025, likewise pays its proposer nothing at
      ``p`` 0 or 1), times the regret when ``learnability_times_regret`` (default).

    Why shaping: the regret is largest where the hint solves the task and the Agent alone never
    does: a hint that states the answer (``mean_hint`` 1, ``p`` 0) earns the maximum regret 1. But
    then every no-hint episode returns 0, its group has zero advantage and the Agent learns
    nothing from it: the regret rewards exactly the environments the Agent cannot learn from.
    ``p (1 - p)`` is the variance of the success of a group of no-hint episodes, the spread a
    GRPO-style update turns into advantages; ``4 p (1 - p)`` is 0 at ``p = 0`` and ``p = 1`` and 1
    at ``p = 1/2``. Alone it no longer asks anything of the hint; times the regret it pays for
    environments the Agent sometimes solves *and* where the privileged hint helps (SPADE's
    verification signal), so ``learnability_times_regret`` is on by default. With ``k`` episodes ``p`` takes the values ``0, 1/k, ..., 1``: with the default
    ``k = 4`` the window [0.3, 0.8] keeps ``p`` = 0.5 and 0.75 only.

    Args:
        accepted: whether the validation gate accepted the program (``ValidationReport.accepted``).
        estimate: the regret estimate (needed when accepted and not a duplicate).
        duplicate: whether the program duplicates a registered environment (a
            ``DuplicateEnvironment`` was raised, or the gate reported ``DUPLICATE``).
        config: the thresholds and shaping.

    Returns:
        A :class:`DesignerReward` whose ``outcome`` names the rule that applied.

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
