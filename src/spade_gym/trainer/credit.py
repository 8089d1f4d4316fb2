"""Credit assignment for the Agent's multi-turn episodes, and the schedule's bookkeeping of updates.

``agent.credit: episode`` (:func:`~spade_gym.trainer.grpo.samples_from_trajectories`) gives every
turn the episode's return, scored against the other episodes of its group. ``agent.credit: turn``
(:func:`samples_by_turn`) gives turn ``t`` its return-to-go ``r_t + r_{t+1} + ...`` (clipped to
[0, 1]) and scores it only against the turns ``t`` of the group's other episodes: in a two-attempt
environment (1.0 on the first answer, 0.5 on the second) a right second answer is then compared
with other second answers, not with episodes that were right at once (under episode credit its
return 0.5 sits below such a group's mean, so the right answer is pushed down).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, Literal

from spade_gym.trainer.grpo import TrainSample, UpdateStats

if TYPE_CHECKING:
    from spade_gym.agent import Trajectory

__all__ = ["merge_updates", "samples_by_turn"]

_TURN_EPISODES = itertools.count()


def samples_by_turn(
    trajectories: Iterable[Trajectory], *, group_by: Literal["seed", "env"] = "seed"
) -> list[TrainSample]:
    """The Agent's samples with per-turn credit: one per turn, reward its return-to-go, group
    ``"agent:<env_id>[:<seed>]:turn<t>"`` (``":hint"`` appended for hinted episodes); episodes
    that ended with an environment error are left out. ValueError for an unknown ``group_by``."""
    if group_by not in ("seed", "env"):
        raise ValueError(f"group_by must be 'seed' or 'env', got {group_by!r}")
    out = []
    for trajectory in trajectories:
        if trajectory.error is not None:
            continue
        base = f"agent:{trajectory.env_id}" + (f":{trajectory.seed}" if group_by == "seed" else "")
        rewards = list(trajectory.rewards)
        for t, (prompt, completion, logprobs, mask) in enumerate(trajectory.samples()):
            to_go = min(max(math.fsum(rewards[t:]), 0.0), 1.0)
            group = f"{base}:turn{t}" + (":hint" if trajectory.hint else "")
            episode = f"turn-{next(_TURN_EPISODES)}"
            out.append(
                TrainSample(list(prompt), list(completion), list(logprobs), list(mask), to_go, "agent", group, episode)
            )
    return out


def merge_updates(updates: Sequence[UpdateStats]) -> UpdateStats | None:
    """One :class:`UpdateStats` for several updates (``None`` for none): counts, tokens and times
    summed; loss and gradient norm averaged over the updates that stepped; per-token figures
    weighted by trained tokens, per-role means by samples; ``step`` and learning rate the last."""
    if not updates:
        return None
    out = UpdateStats(step=updates[-1].step, learning_rate=updates[-1].learning_rate)
    stepped = [u for u in updates if u.optimizer_steps and math.isfinite(u.loss)]
    if stepped:
        out.loss = math.fsum(u.loss for u in stepped) / len(stepped)
        out.grad_norm = math.fsum(u.grad_norm for u in stepped) / len(stepped)
    tokens = sum(u.tokens for u in updates)
    if tokens:
        out.clip_fraction = math.fsum(u.clip_fraction * u.tokens for u in updates) / tokens
        out.mean_ratio = math.fsum(u.mean_ratio * u.tokens for u in updates) / tokens
        kls = [(u.kl, u.tokens) for u in updates if u.kl is not None]
        out.kl = math.fsum(k * n for k, n in kls) / tokens if kls else None
    for u in updates:
        for name in ("tokens", "optimizer_steps", "skipped_nan", "forward_s", "backward_s", "optimizer_s", "total_s"):
            setattr(out, name, getattr(out, name) + getattr(u, name))
        for counts, more in ((out.dropped, u.dropped), (out.trained_samples, u.trained_samples)):
            for key, count in more.items():
                counts[key] = counts.get(key, 0) + count
    for role in {r for u in updates for r in u.samples}:
        weights = [(u, u.samples.get(role, 0)) for u in updates if u.samples.get(role, 0)]
        total = sum(n for _, n in weights)
        out.samples[role] = total
        for name in ("reward_mean", "advantage_mean", "advantage_std"):
            getattr(out, name)[role] = math.fsum(getattr(u, name)[role] * n for u, n in weights) / total
    return out
