"""Shared-prefix scoring gives the logprobs and gradients of encoding every sequence whole.

The batch is real: ``tests/data/demo_update.json.gz`` holds the samples of one GRPO update of
``make demo`` (the Designer's group of designs sharing one prompt; the Agent's turns, whose episodes
of one environment share the system prompt and the worked example, and whose second turns hold the
first whole). The model is the embedded SmolLM2-135M-Instruct with the demo's LoRA adapters.
"""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from spade_gym.policies import SamplingParams
from spade_gym.policies.scoring import MICRO_BATCH_TOKENS, TRUNK_ATTENTION, PackedRow, checkpointing, pack

torch = pytest.importorskip("torch")

BATCH = Path(__file__).parent / "data" / "demo_update.json.gz"
LORA = {"r": 16, "lora_alpha": 32, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}


def demo_pairs() -> dict[str, list[tuple[list[int], list[int]]]]:
    """The update's samples as (prompt ids, completion ids): by role, and by group."""
    with gzip.open(BATCH, "rt") as f:
        samples = json.load(f)
    out: dict[str, list[tuple[list[int], list[int]]]] = {}
    for s in samples:
        for key in (s["role"], s["group"]):
            out.setdefault(key, []).append((s["prompt_ids"], s["completion_ids"]))
    return out


@pytest.fixture(scope="module")
def lora_policy() -> Any:
    """The embedded model with the demo's adapters, B drawn from N(0, 0.02) so every adapter has a gradient."""
    from spade_gym.policies import load_policy

    torch.manual_seed(0)
    policy = load_policy("default", lora=dict(LORA))
    with torch.no_grad():
        for name, p in policy.model.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.02)
    return policy


def scores_and_gradients(policy: Any, pairs: list[tuple[list[int], list[int]]], **options: Any) -> tuple[list, list]:
    """Each sequence's logprobs and the gradient of sum_k w_k . logprobs_k (w: fixed per-token
    weights, so a token scored at the wrong place or a gradient routed to the wrong sequence shows),
    a backward pass per forward pass as the trainer runs them."""
    params = [p for p in policy.model.parameters() if p.requires_grad]
    for p in params:
        p.grad = None
    out: list[Any] = [None] * len(pairs)
    policy.model.train()
    try:
        for members, logprobs in policy.score_batches(pairs, **options):
            loss = sum((lp * weight(k, len(lp))).sum() for k, lp in zip(members, logprobs, strict=True))
            loss.backward()
            for k, lp in zip(members, logprobs, strict=True):
                out[k] = lp.detach()
    finally:
        policy.model.eval()
    return out, [p.grad.detach().clone() for p in params]


def weight(k: int, n: int) -> Any:
    return torch.cos(torch.arange(n, dtype=torch.float32) * 0.7 + k)


def relative(a: list[Any], b: list[Any]) -> float:
    num = sum(float(((x - y) ** 2).sum()) for x, y in zip(a, b, strict=True))
    return (num / sum(float((x**2).sum()) for x in a)) ** 0.5


def test_a_prefix_tree_row_holds_each_shared_token_once() -> None:
    """The Designer's group is one row (its prompt once); the Agent's turns are a row per replayed
    environment (rows of unrelated environments would make every token attend over both)."""
    pairs = demo_pairs()
    for role, most_rows, max_share in (("designer", 1, 0.26), ("agent", 3, 0.25)):
        whole = sum(len(p) + len(c) for p, c in pairs[role])
        rows = pack(pairs[role], MICRO_BATCH_TOKENS)
        assert len(rows) <= most_rows and sorted(k for r in rows for k in r.members) == list(range(len(pairs[role])))
        assert sum(len(r.tokens) for r in rows) < max_share * whole, role
        assert sum(len(r.targets) for r in rows) == sum(len(c) for _, c in pairs[role])
    assert len(pack(pairs["agent"], 600)) > 3 and all(len(r.tokens) <= 600 for r in pack(pairs["agent"], 600))


def test_a_rows_trunk_is_the_prefix_every_later_token_descends_from() -> None:
    """A group sharing a prompt: the trunk is the prompt and the completions' shared start; a row of
    one sequence is all trunk; sequences sharing nothing have none."""
    (group,) = pack([([1, 2, 3], [4, 5]), ([1, 2, 3], [4, 6, 7])], 100)
    assert group.tokens == [1, 2, 3, 4, 5, 6, 7] and group.trunk == 4
    (alone,) = pack([([1, 2, 3], [4])], 100)
    assert alone.trunk == 4
    apart = PackedRow([1, 2, 3, 4], [0, 1, 0, 1], [2, 2, 4, 4], [0, 1], [1, 1], [2, 4], [0, 2])
    assert apart.trunk == 0
    assert PackedRow([9, 8], [0, 1], [2, 2], [0], [1], [8], [0]).trunk == 2


def test_checkpointing_takes_the_first_share_of_the_layers(lora_policy: Any) -> None:
    """``checkpointing(model, share)``: the first ``ceil(share * L)`` decoder layers, none for 0."""
    from transformers.modeling_layers import GradientCheckpointingLayer

    layers = [m for m in lora_policy.model.modules() if isinstance(m, GradientCheckpointingLayer)]
    try:
        for share, expected in ((0.5, 15), (0.2, 6), (0.01, 1), (1.0, 30), (0.0, 0)):
            checkpointing(lora_policy.model, share)
            flags = [layer.gradient_checkpointing for layer in layers]
            assert flags == [True] * expected + [False] * (len(layers) - expected), share
    finally:
        checkpointing(lora_policy.model, 0.0)


def assert_same(policy: Any, batch: list[tuple[list[int], list[int]]], budget: int) -> None:
    """Whole sequences one at a time vs shared prefixes in one pass, with every layer checkpointed in
    passes of at most ``budget`` tokens, and with half the layers checkpointed in one pass: logprobs
    within 1e-4, gradients within 1e-4 relative (float rounding is about 1e-6), every adapter with a
    gradient."""
    whole, g_whole = scores_and_gradients(policy, batch, shared_prefix=False, micro_batch_tokens=1)
    shared, g_shared = scores_and_gradients(policy, batch, micro_batch_tokens=10**6)
    assert policy.model.config._attn_implementation == TRUNK_ATTENTION, "shared prefixes attend causally over a trunk"
    split, g_split = scores_and_gradients(policy, batch, micro_batch_tokens=budget, checkpoint_tokens=0)
    longest = max(len(row.tokens) for row in pack(batch, 10**6))
    part, g_part = scores_and_gradients(policy, batch, micro_batch_tokens=10**6, checkpoint_tokens=longest // 2)
    assert not any(getattr(m, "gradient_checkpointing", False) for m in policy.model.modules()), "switched off after"
    for other, g_other in ((shared, g_shared), (split, g_split), (part, g_part)):
        for a, b in zip(whole, other, strict=True):
            assert a.shape == b.shape
            torch.testing.assert_close(b, a, rtol=0, atol=1e-4)
        assert relative(g_whole, g_other) < 1e-4
        assert all(float(g.abs().sum()) > 0 for g in g_other)


def test_agent_turns_score_and_train_as_whole_sequences(lora_policy: Any) -> None:
    """One replayed environment's Agent turns (4 episodes of 2 turns: the episodes share the system
    prompt and worked example, a second turn holds its first), one of them twice; and the Designer
    group's logprobs (its 1,890-token prompt shared) without gradients."""
    pairs = demo_pairs()
    turns = pairs["agent:spade/CountListItems-v0"][:8]
    assert len({len(p) for p, _ in turns}) > 2
    assert_same(lora_policy, [*turns, turns[0]], budget=300)
    designs = list({tuple(c): (p, c) for p, c in pairs["designer"]}.values())[:2]  # two different designs
    with torch.no_grad():
        whole = lora_policy.sequence_logprobs(designs, shared_prefix=False, micro_batch_tokens=1)
        shared = lora_policy.sequence_logprobs(designs)
    for a, b in zip(whole, shared, strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-4)


@pytest.mark.slow
def test_designer_group_trains_as_whole_sequences(lora_policy: Any) -> None:
    """Two different designs sharing the Designer's 1,890-token prompt, with gradients (the
    prompt's gradient is the sum of both samples')."""
    designs = list({tuple(c): (p, c) for p, c in demo_pairs()["designer"]}.values())[:2]
    assert len(designs) == 2
    assert_same(lora_policy, designs, budget=10**6)


def test_eager_attention_scores_a_packed_row_as_whole_sequences(lora_policy: Any) -> None:
    """Eager attention adds its mask to the scores: a packed row's bool mask is made additive (a bool
    mask added as 0/1 would let every token see every other: logprobs off by up to 9 nats)."""
    config = lora_policy.model.config
    saved = config._attn_implementation
    turns = demo_pairs()["agent:spade/CountListItems-v0"][:4]
    try:
        config._attn_implementation = "eager"
        with torch.no_grad():
            whole = lora_policy.sequence_logprobs(turns, shared_prefix=False, micro_batch_tokens=1)
            shared = lora_policy.sequence_logprobs(turns)
        assert config._attn_implementation == "eager", "eager attention is left as it is"
    finally:
        config._attn_implementation = saved
    assert len(pack(turns, MICRO_BATCH_TOKENS)) < len(turns), "the turns share a row"
    for a, b in zip(whole, shared, strict=True):
        torch.testing.assert_close(b, a, rtol=0, atol=1e-4)


def test_generation_is_unchanged_after_an_update_and_checkpointing_ends_with_the_passes(lora_policy: Any) -> None:
    """Greedy tokens before and after a checkpointed, shared-prefix forward and backward are the
    same; passes closed early (as the trainer does on an error) switch checkpointing off."""
    prompts = [[{"role": "user", "content": q}] for q in ("Name three colours.", "What is 2 + 3?")]
    greedy = SamplingParams(temperature=0.0, max_new_tokens=24)
    before = [c.completion_token_ids for c in lora_policy.generate(prompts, greedy)]
    turns = demo_pairs()["agent:spade/CountListItems-v0"][:4]
    scores_and_gradients(lora_policy, turns, micro_batch_tokens=10**6, checkpoint_tokens=64)
    after = [c.completion_token_ids for c in lora_policy.generate(prompts, greedy)]
    assert after == before and all(before)
    passes = lora_policy.score_batches(turns, micro_batch_tokens=300, checkpoint_tokens=64)
    next(passes)
    assert any(getattr(m, "gradient_checkpointing", False) for m in lora_policy.model.modules())
    passes.close()
    assert not any(getattr(m, "gradient_checkpointing", False) for m in lora_policy.model.modules())
