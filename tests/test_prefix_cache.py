"""Key/value cache reuse in the transformers backend: prompts that share a prefix, the
n samples of one prompt and the next turn of a conversation read cached keys and values, and the
results are those of uncached generation. Real embedded model, CPU."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from spade_gym.agent import agent_prompt
from spade_gym.policies import SamplingParams
from spade_gym.policies.transformers import PrefixCache, TransformersPolicy

torch = pytest.importorskip("torch")

GREEDY = SamplingParams(temperature=0, max_new_tokens=20)
DESCRIPTION = "Count the words in a short comma-separated list of fruits and answer with the count."
#: the episodes of one environment: the same system prompt, description and worked example
EPISODES = [
    agent_prompt("reasoning", DESCRIPTION) + [{"role": "user", "content": f"List: {words}\nHow many words?"}]
    for words in ("apple, pear", "plum, lime, fig", "kiwi", "date, melon, peach, mango")
]


@pytest.fixture()
def policy(embedded_policy: TransformersPolicy) -> Iterator[TransformersPolicy]:
    """The embedded policy with an empty prefix cache, restored afterwards."""
    kept = embedded_policy.prefix_cache
    embedded_policy.prefix_cache = PrefixCache(2**30)
    yield embedded_policy
    embedded_policy.prefix_cache = kept


def _uncached(policy: TransformersPolicy, prompts: list[Any], sampling: SamplingParams) -> list[Any]:
    cache, policy.prefix_cache = policy.prefix_cache, None
    try:
        return policy.generate(prompts, sampling)
    finally:
        policy.prefix_cache = cache


def _same(cached: list[Any], plain: list[Any]) -> None:
    assert [c.completion_token_ids for c in cached] == [c.completion_token_ids for c in plain]
    for a, b in zip(cached, plain, strict=True):
        assert a.logprobs == pytest.approx(b.logprobs, abs=1e-4)


def test_episodes_of_one_environment_share_their_prefix_and_decode_the_same(policy: TransformersPolicy) -> None:
    plain = _uncached(policy, EPISODES, GREEDY)
    assert policy.last_stats["reused_prompt_tokens"] == 0 and policy.last_stats["prefill_s"] == 0.0
    first = policy.generate(EPISODES, GREEDY)
    assert 0 < policy.last_stats["prefill_s"] < policy.last_stats["wall_s"]
    encoded = [policy.encode(p) for p in EPISODES]
    common = min(
        next(k for k, (x, y) in enumerate(zip(encoded[0], ids, strict=False)) if x != y) for ids in encoded[1:]
    )
    assert common > 50  # the system prompt, description and worked example
    assert policy.last_stats["reused_prompt_tokens"] == 3 * common, "computed once, read by all four episodes"
    _same(first, plain)
    again = policy.generate(EPISODES, GREEDY)  # each whole prompt is now cached
    assert policy.last_stats["reused_prompt_tokens"] == policy.last_stats["prompt_tokens"] - 4
    _same(again, plain)
    rescored = policy.sequence_logprobs(again)
    for completion, scores in zip(again, rescored, strict=True):
        assert completion.logprobs == pytest.approx(scores.tolist(), abs=1e-4)


def test_the_n_samples_of_a_prompt_prefill_it_once(policy: TransformersPolicy) -> None:
    sampling = SamplingParams(temperature=1.0, n=4, max_new_tokens=12, seed=5)
    plain = _uncached(policy, EPISODES[:1], sampling)
    cached = policy.generate(EPISODES[:1], sampling)
    prompt = policy.last_stats["prompt_tokens"] // 4
    assert policy.last_stats["reused_prompt_tokens"] == 3 * (prompt - 1)  # prefilled once for the four
    assert [c.completion_token_ids for c in cached] == [c.completion_token_ids for c in plain]
    # a group's samples are not continued: their completions are not kept (a design's would fill the cache)
    assert policy.prefix_cache is not None
    for c in cached:
        sequence = [*(c.prompt_token_ids or []), *(c.completion_token_ids or [])]
        assert policy.prefix_cache.lookup(sequence, limit=len(sequence))[1] < len(c.prompt_token_ids or [])


def test_the_next_turn_of_a_conversation_starts_from_its_cached_history(policy: TransformersPolicy) -> None:
    turn1 = policy.generate(EPISODES[:2], GREEDY)
    conversations = [
        EPISODES[k] + [{"role": "assistant", "content": turn1[k].text}, {"role": "user", "content": "Wrong. Again."}]
        for k in range(2)
    ]
    plain = _uncached(policy, conversations, GREEDY)
    turn2 = policy.generate(conversations, GREEDY)
    first_prompts = sum(len(c.prompt_token_ids or []) for c in turn1)
    assert policy.last_stats["reused_prompt_tokens"] > first_prompts, "turn 1's prompt and reply are not recomputed"
    _same(turn2, plain)


def test_a_weight_change_empties_the_cache(policy: TransformersPolicy) -> None:
    before = policy.generate(EPISODES[:2], GREEDY)
    assert len(policy.prefix_cache or []) > 0
    weight = policy.model.get_output_embeddings().weight
    saved = weight.detach().clone()
    try:
        with torch.no_grad():
            weight.mul_(1.5)  # an in-place update, as an optimizer step makes
        changed = policy.generate(EPISODES[:2], GREEDY)
        assert policy.last_stats["reused_prompt_tokens"] < policy.last_stats["prompt_tokens"] - 2
        _same(changed, _uncached(policy, EPISODES[:2], GREEDY))
        assert [c.logprobs for c in changed] != [c.logprobs for c in before]
    finally:
        with torch.no_grad():
            weight.copy_(saved)


def test_the_cache_keeps_to_its_size_dropping_the_least_recently_used() -> None:
    def kv(n: int) -> Any:
        return torch.zeros(1, 2, 2, n, 4)  # 2 * 2 * n * 4 floats: 64n bytes

    cache = PrefixCache(max_bytes=64 * 50)
    cache.add(list(range(20)), kv(20))
    cache.add([7] + list(range(20)), kv(21))
    assert cache.lookup(list(range(30)), limit=30)[1] == 20  # the first entry, now the most recently used
    cache.add([9] * 20, kv(20))  # over 50 tokens: the least recently used (the second entry) goes
    assert len(cache) == 2 and cache.nbytes <= 64 * 50
    assert cache.lookup([7] + list(range(20)), limit=21) == (None, 0)
    assert cache.lookup(list(range(10)), limit=5)[1] == 5  # never more than the limit
    cache.add(list(range(100)), kv(100))  # larger than the whole cache: not kept
    assert len(cache) == 2


def test_prefix_cache_mb_is_checked(embedded_policy: TransformersPolicy) -> None:
    with pytest.raises(ValueError, match="prefix_cache_mb must be an int >= 0"):
        TransformersPolicy(embedded_policy.model, embedded_policy.tokenizer, prefix_cache_mb=-1)
    off = TransformersPolicy(embedded_policy.model, embedded_policy.tokenizer, prefix_cache_mb=0)
    assert off.prefix_cache is None
