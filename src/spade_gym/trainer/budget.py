"""The time a self-play run will take, estimated before any work starts, and the refusal of a
config that cannot fit its stated budget (``run.budget_minutes``; leave it null on other hardware
or models than :data:`CPU_COSTS` were measured on). The estimate counts the phases of one iteration
(design, the Designer's update, the Agent steps), the held-out evaluations and, when it is not
cached, the cold start.
"""

from __future__ import annotations

import math
from dataclasses import astuple, dataclass
from typing import Any

__all__ = ["CPU_COSTS", "Costs", "Estimate", "check_budget", "estimate_run"]


@dataclass(frozen=True)
class Costs:
    """Unit costs in wall seconds: ``load`` (model and registry), ``episode_token`` (one generated
    token of one Agent episode-turn in a training rollout), ``eval_token`` (the same in a held-out
    evaluation, whose larger batches cost less per token), ``agent_sample`` (one Agent turn in a GRPO
    update; ``turn_credit`` times that under ``agent.credit: turn``, whose equal second-turn groups
    are left out), ``design_token`` (one Designer token), ``validate`` (the gate, per design),
    ``designer_sample`` (one design in the Designer's update), ``warmstart_step`` (one cold-start
    step, Agent and Designer steps averaged)."""

    load: float
    episode_token: float
    eval_token: float
    agent_sample: float
    turn_credit: float
    design_token: float
    validate: float
    designer_sample: float
    warmstart_step: float


#: Measured with the embedded SmolLM2-135M on 2 CPU cores under the shared lock, on the learning
#: benchmark's run of 2026-12-05 (benchmarks/README.md, "Self-play schedule"): an Agent step of 16
#: two-turn episodes at 48 tokens took 8-13 s of rollout and 5.5-7 s of update (per-turn credit);
#: 268 held-out episodes 147-160 s; a design phase of 4 edit designs 11-13 s and its Designer update
#: 14-19 s; the demo's cold start 211 s for 28 steps.
CPU_COSTS = Costs(
    load=25.0,
    episode_token=0.0080,
    eval_token=0.0065,
    agent_sample=0.35,
    turn_credit=0.62,
    design_token=0.02,
    validate=2.0,
    designer_sample=5.0,
    warmstart_step=8.0,
)


@dataclass(frozen=True)
class Estimate:
    """Minutes of each part of a run: ``start`` (loading, the cold start when not cached),
    ``design`` (design phases and the Designer's updates), ``agent`` (Agent steps), ``evaluation``."""

    start: float
    design: float
    agent: float
    evaluation: float

    @property
    def total(self) -> float:
        return self.start + self.design + self.agent + self.evaluation

    def describe(self) -> str:
        return (
            f"about {self.total:.1f} min: start {self.start:.1f}, design {self.design:.1f}, Agent steps "
            f"{self.agent:.1f}, held-out evaluation {self.evaluation:.1f}"
        )


def _turns(config: Any) -> int:
    return config.agent.max_turns or 2


def step_minutes(config: Any, costs: Costs = CPU_COSTS) -> float:
    """One Agent step: ``replay_envs * episodes_per_env`` episodes played, then their update."""
    a = config.agent
    turns = a.replay_envs * a.episodes_per_env * _turns(config)
    update = costs.agent_sample * (costs.turn_credit if a.credit == "turn" else 1.0)
    return turns * (a.max_new_tokens * costs.episode_token + update) / 60.0


def evaluation_minutes(config: Any, costs: Costs = CPU_COSTS, *, curve: bool = False) -> float:
    """One held-out evaluation: every part, sampled and (``eval.greedy``) greedy; with ``curve``
    a point of the curve (unseen seeds, sampled)."""
    from spade_gym.evaluation.heldout import part_size

    e = config.eval
    if not e.enabled:
        return 0.0
    episodes = part_size(e.half_width) * (1 if curve else len(e.parts) * (2 if e.greedy else 1))
    return episodes * _turns(config) * config.agent.max_new_tokens * costs.eval_token / 60.0


def estimate_run(config: Any, *, cached_warmstart: bool = False, costs: Costs = CPU_COSTS) -> Estimate:
    """The :class:`Estimate` of ``config`` (a :class:`~spade_gym.trainer.config.SelfPlayConfig`)."""
    a, d, r, w = config.agent, config.designer, config.run, config.warmstart
    start = costs.load
    if w.enabled and not cached_warmstart:
        start += (w.agent_steps + w.designer_steps) * costs.warmstart_step
    design = 0.0
    if r.designer == "on":
        designs = d.prompts_per_iteration * d.group_size
        share = config.edit_probability()
        tokens = share * d.edit_max_new_tokens + (1 - share) * d.max_new_tokens
        regret = 2 * a.k * _turns(config) * a.max_new_tokens * costs.episode_token
        design = designs * (tokens * costs.design_token + costs.validate + regret + costs.designer_sample)
    points = (r.iterations - 1) // config.eval.every if config.eval.every else 0
    return Estimate(
        start=start / 60.0,
        design=r.iterations * design / 60.0,
        agent=r.iterations * a.updates_per_iteration * step_minutes(config, costs),
        evaluation=2 * evaluation_minutes(config, costs) + points * evaluation_minutes(config, costs, curve=True),
    )


def check_budget(config: Any, *, cached_warmstart: bool = False, also: Estimate | None = None) -> Estimate | None:
    """Refuse a run that cannot fit ``run.budget_minutes`` (``None``: no budget, nothing checked);
    ``also``: a second run that shares the budget (the learning benchmark's baseline).

    Raises:
        ConfigError: naming ``agent.updates_per_iteration`` or ``eval.half_width`` (whichever takes
            the larger share of the estimate), the estimate and the most that fits.
    """
    from spade_gym.trainer.config import ConfigError

    budget = config.run.budget_minutes
    if budget is None:
        return None
    estimate = estimate_run(config, cached_warmstart=cached_warmstart)
    if also is not None:
        estimate = Estimate(*(a + b for a, b in zip(astuple(estimate), astuple(also), strict=True)))
    if estimate.total <= budget:
        return estimate
    a = config.agent
    rest = estimate.total - estimate.agent
    if estimate.agent >= estimate.evaluation:
        per = estimate.agent / a.updates_per_iteration
        fit = max(math.floor((budget - rest) / per), 0) if per else 0
        key, value, advice = "agent.updates_per_iteration", a.updates_per_iteration, f"at most {fit} fit"
    else:
        key, value = "eval.half_width", config.eval.half_width
        advice = "a wider interval (a larger eval.half_width), fewer eval.parts or eval.greedy false fit sooner"
    raise ConfigError(
        f"config key {key!r} = {value}: the run cannot fit run.budget_minutes = {budget:g}; estimated "
        f"{estimate.describe()} (unit costs measured with the embedded model on 2 CPU cores); {advice}",
        key=key,
    )
