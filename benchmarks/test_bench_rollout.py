"""Speed of the Agent's rollouts: a batch of 32 episodes with the embedded model on this CPU.

Reported, never asserted: wall time split into generation (``policy.generate``), environment
(reset, steps, hints, closing the workers) and bookkeeping (prompts, parsing, records) time, with
the share of environment plus bookkeeping in the total (target: below 5%), and the number of
``generate`` calls beside the episodes x turns that one call per episode per turn would make.

The figures, in the same run and on the same seeds: the rollout's generation time with
key/value reuse (the default, :class:`~spade_gym.policies.transformers.PrefixCache`) against the
same rollout without it, and against a decode-only floor: ``model.generate`` of each turn's batch,
as many rows and new tokens as the turn's longest completion, after a 4-token prompt (target:
within 1.3x of the floor).
"""

from __future__ import annotations

import time
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


def decode_floor(policy: Any, shape: list[tuple[int, int]]) -> float:
    """Seconds of bare ``model.generate`` for each ``(rows, new tokens)`` after a 4-token prompt,
    every row running to its last token: the cost of decoding alone."""
    import torch

    started = time.perf_counter()
    for rows, tokens in shape:
        ids = torch.tensor([policy.encode([{"role": "user", "content": "Hi"}])[:4]] * rows)
        with torch.inference_mode():
            policy.model.generate(
                input_ids=ids,
                attention_mask=torch.ones_like(ids),
                do_sample=True,
                temperature=1.0,
                top_k=0,
                min_new_tokens=tokens,
                max_new_tokens=tokens,
                pad_token_id=policy.pad_token_id,
            )
    return time.perf_counter() - started


@pytest.mark.long
def test_rollout_of_32_episodes(benchmark: Any, report: Callable[..., None]) -> None:
    policy = load_policy("default")
    episodes = [Episode(env, seed, hint=seed % 2 == 1) for env in ENVS for seed in range(8)]
    config = RolloutConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=NEW_TOKENS, seed=0), max_turns=TURNS)
    results: dict[str, Any] = {}
    cache, policy.prefix_cache = policy.prefix_cache, None
    _, uncached = rollout(episodes, policy, config)  # the same rollout recomputing every prompt
    policy.prefix_cache = cache
    assert cache is not None

    calls: list[dict[str, float]] = []  # each call's last_stats: where the time went
    generate = policy.generate

    def recorded(prompts: Any, sampling: Any) -> Any:
        out = generate(prompts, sampling)
        calls.append(dict(policy.last_stats))
        return out

    def run() -> None:
        calls.clear()
        policy.generate = recorded
        try:
            results["trajectories"], results["stats"] = rollout(episodes, policy, config)
        finally:
            del policy.generate

    benchmark.pedantic(run, rounds=1, iterations=1)
    trajectories, stats = results["trajectories"], results["stats"]
    assert len(trajectories) == 32 and all(t.num_turns >= 1 for t in trajectories)
    turns = sum(t.num_turns for t in trajectories)
    shape = [
        (len(at), max(len(t.turns[k].completion_token_ids or [1]) for t in at))
        for k in range(TURNS)
        if (at := [t for t in trajectories if t.num_turns > k])
    ]
    floor = decode_floor(policy, shape)
    overhead = (stats.env_s + stats.bookkeeping_s) / stats.total_s
    speedup, to_floor = uncached.generation_s / stats.generation_s, stats.generation_s / floor
    # prompt tokens no cache held (each episode's own observation and description tail) must be computed:
    # the floor plus their prefill is the least any reuse can reach
    prefill_s = sum(c["prefill_s"] for c in calls)
    computed = sum(c["prompt_tokens"] - c["reused_prompt_tokens"] for c in calls)
    bound = (floor + prefill_s) / floor
    report(
        f"32 episodes ({turns} agent turns, {NEW_TOKENS} new tokens a turn, at most {TURNS} turns): {stats.total_s:.1f} s = "
        f"generation {stats.generation_s:.1f} s + environments {stats.env_s:.2f} s + bookkeeping "
        f"{stats.bookkeeping_s:.2f} s; environments + bookkeeping {overhead:.1%} of the total (target < 5%: "
        f"{'met' if overhead < 0.05 else 'MISSED'}); {stats.generate_calls} generate calls vs {turns} "
        f"for one call per episode per turn; generation without key/value reuse {uncached.generation_s:.1f} s "
        f"({speedup:.2f}x), decode-only floor {floor:.1f} s (batches {shape}): {to_floor:.2f}x the floor "
        f"(target <= 1.3x: {'met' if to_floor <= 1.3 else 'MISSED'}); of the generation, {prefill_s:.1f} s "
        f"prefilled the {computed} prompt tokens no cache held (the floor plus that prefill alone is "
        f"{bound:.2f}x the floor) and {stats.generation_s - prefill_s:.1f} s decoded "
        f"({(stats.generation_s - prefill_s) / floor:.2f}x the floor: attention over the cached prompts, "
        f"copying caches in and out of the batch)",
        total_s=stats.total_s,
        generation_s=stats.generation_s,
        env_s=stats.env_s,
        bookkeeping_s=stats.bookkeeping_s,
        overhead_share=overhead,
        generate_calls=stats.generate_calls,
        agent_turns=turns,
        uncached_generation_s=uncached.generation_s,
        decode_floor_s=floor,
        ratio_to_floor=to_floor,
        speedup_over_uncached=speedup,
        prefill_s=prefill_s,
        computed_prompt_tokens=computed,
        floor_plus_prefill_ratio=bound,
    )
