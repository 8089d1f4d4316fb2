"""Speed of the Agent's rollouts: a batch of 32 episodes with the embedded model on this CPU.

Reported, never asserted: wall time split into generation (``policy.generate``), environment
(reset, steps, hints, closing the workers) and bookkeeping (prompts, parsing, records) time, with
the share of environment plus bookkeeping in the total (target: below 5%), and the number of
``generate`` calls beside the episodes x turns that one call per episode per turn would make.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("torch")

from spade_gym.agent import Episode, RolloutConfig, rollout  # noqa: E402
from spade_gym.policies import SamplingParams, load_policy  # noqa: E402

ENVS = (
    "spade/ArithmeticChain-v0",
    "spade/CalendarDayOffset-v0",
    "spade/NimLastStoneWins-v0",
    "spade/BankTransferReport-v0",
)
NEW_TOKENS, TURNS = 48, 2


def test_rollout_of_32_episodes(benchmark: Any, report: Callable[..., None]) -> None:
    policy = load_policy("default")
    episodes = [Episode(env, seed, hint=seed % 2 == 1) for env in ENVS for seed in range(8)]
    config = RolloutConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=NEW_TOKENS, seed=0), max_turns=TURNS)
    results: dict[str, Any] = {}

    def run() -> None:
        results["trajectories"], results["stats"] = rollout(episodes, policy, config)

    benchmark.pedantic(run, rounds=1, iterations=1)
    trajectories, stats = results["trajectories"], results["stats"]
    assert len(trajectories) == 32 and all(t.num_turns >= 1 for t in trajectories)
    turns = sum(t.num_turns for t in trajectories)
    overhead = (stats.env_s + stats.bookkeeping_s) / stats.total_s
    report(
        f"32 episodes ({turns} agent turns, {NEW_TOKENS} new tokens a turn, at most {TURNS} turns): {stats.total_s:.1f} s = "
        f"generation {stats.generation_s:.1f} s + environments {stats.env_s:.2f} s + bookkeeping "
        f"{stats.bookkeeping_s:.2f} s; environments + bookkeeping {overhead:.1%} of the total (target < 5%: "
        f"{'met' if overhead < 0.05 else 'MISSED'}); {stats.generate_calls} generate calls vs {turns} "
        f"for one call per episode per turn",
        total_s=stats.total_s,
        generation_s=stats.generation_s,
        env_s=stats.env_s,
        bookkeeping_s=stats.bookkeeping_s,
        overhead_share=overhead,
        generate_calls=stats.generate_calls,
        agent_turns=turns,
    )
