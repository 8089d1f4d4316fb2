"""The transformers backend on the embedded model: batched generation, exact logprobs, re-scoring,
stop strings, the context window, LoRA adapters and bad input. Real model, real tokenizer, CPU."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

from spade_gym.errors import ContextLengthExceeded, ModelNotFound, PolicyError
from spade_gym.policies import Completion, Policy, SamplingParams, load_policy
from spade_gym.policies.transformers import TransformersPolicy, resolve_device_dtype

torch = pytest.importorskip("torch")
pytestmark = pytest.mark.slow

ADD = [{"role": "user", "content": "What is 2 + 3?"}]
COLOUR = [{"role": "system", "content": "Answer in one word."}, {"role": "user", "content": "Name a colour."}]
STORY = [{"role": "user", "content": "Tell me a long story about a dragon who learns to count."}]


def assert_well_formed(completion: Completion, policy: TransformersPolicy, max_new_tokens: int) -> None:
    ids, logprobs = completion.completion_token_ids, completion.logprobs
    assert ids is not None and logprobs is not None and completion.prompt_token_ids is not None
    assert 1 <= len(ids) <= max_new_tokens and len(logprobs) == len(ids)
    assert all(math.isfinite(x) and x <= 0 for x in logprobs)
    if completion.finish_reason == "length":
        assert len(ids) == max_new_tokens and not set(ids[:-1]) & set(policy.eos_token_ids)
    eos_at = [k for k, t in enumerate(ids) if t in policy.eos_token_ids]
    assert eos_at in ([], [len(ids) - 1]), "nothing may follow an end-of-sequence token"


def test_load_policy_default_is_the_embedded_model_on_cpu(embedded_policy: TransformersPolicy) -> None:
    assert isinstance(embedded_policy, TransformersPolicy) and isinstance(embedded_policy, Policy)
    assert embedded_policy.name == "SmolLM2-135M-Instruct"
    assert (embedded_policy.device.type, embedded_policy.dtype) == ("cpu", torch.float32)
    assert embedded_policy.context_window == embedded_policy.model.config.max_position_embeddings


def test_greedy_generation_answers_a_chat_prompt(embedded_policy: TransformersPolicy) -> None:
    out = embedded_policy.generate([ADD, COLOUR], SamplingParams(temperature=0, max_new_tokens=24))
    assert [c.prompt_index for c in out] == [0, 1]
    assert "5" in out[0].text
    for completion in out:
        assert_well_formed(completion, embedded_policy, 24)
        assert completion.prompt_token_ids == embedded_policy.encode([ADD, COLOUR][completion.prompt_index])
        ids = completion.completion_token_ids or []
        if completion.finish_reason == "stop":
            assert ids[-1] in embedded_policy.eos_token_ids
        assert completion.text == embedded_policy.tokenizer.decode(ids, skip_special_tokens=True)
    again = embedded_policy.generate([ADD, COLOUR], SamplingParams(temperature=0, max_new_tokens=24))
    assert [c.completion_token_ids for c in again] == [c.completion_token_ids for c in out]


def test_left_padding_does_not_change_a_prompts_completion(embedded_policy: TransformersPolicy) -> None:
    """ADD alone, and ADD padded on the left beside a much longer prompt: same tokens, same logprobs."""
    greedy = SamplingParams(temperature=0, max_new_tokens=12)
    alone = embedded_policy.generate([ADD], greedy)[0]
    padded = embedded_policy.generate([STORY + [{"role": "user", "content": "and more " * 40}], ADD], greedy)[1]
    assert padded.completion_token_ids == alone.completion_token_ids
    assert padded.logprobs == pytest.approx(alone.logprobs, abs=1e-4)


def test_sampling_returns_groups_of_n_that_differ_and_a_seed_repeats_them(embedded_policy: TransformersPolicy) -> None:
    sampling = SamplingParams(temperature=1.0, n=4, max_new_tokens=16, seed=7)
    out = embedded_policy.generate([STORY, COLOUR], sampling)
    assert [c.prompt_index for c in out] == [0, 0, 0, 0, 1, 1, 1, 1]
    for completion in out:
        assert_well_formed(completion, embedded_policy, 16)
    assert len({tuple(c.completion_token_ids or ()) for c in out[:4]}) > 1, "a sampled group must not be 4 copies"
    repeat = embedded_policy.generate([STORY, COLOUR], sampling)
    assert [c.completion_token_ids for c in repeat] == [c.completion_token_ids for c in out]
    other = embedded_policy.generate([STORY, COLOUR], SamplingParams(temperature=1.0, n=4, max_new_tokens=16, seed=8))
    assert [c.completion_token_ids for c in other] != [c.completion_token_ids for c in out]
    assert embedded_policy.last_stats["generate_calls"] == 1
    assert embedded_policy.last_stats["completion_tokens"] == sum(c.num_tokens for c in other)


def test_max_batch_size_splits_the_batch_and_keeps_the_order(embedded_policy: TransformersPolicy) -> None:
    prompts = [ADD, STORY, COLOUR]
    greedy = SamplingParams(temperature=0, max_new_tokens=8)
    whole = embedded_policy.generate(prompts, greedy)
    small = TransformersPolicy(embedded_policy.model, embedded_policy.tokenizer, max_batch_size=2, name="small")
    split = small.generate(prompts, greedy)
    assert small.last_stats["generate_calls"] == 2
    assert [c.prompt_index for c in split] == [0, 1, 2]
    assert [c.completion_token_ids for c in split] == [c.completion_token_ids for c in whole]


def test_max_new_tokens_ends_with_length(embedded_policy: TransformersPolicy) -> None:
    out = embedded_policy.generate([STORY], SamplingParams(temperature=0, max_new_tokens=5))[0]
    assert out.finish_reason == "length" and out.num_tokens == 5
    assert_well_formed(out, embedded_policy, 5)


def test_stop_strings_end_the_completion_and_are_cut_from_the_text(embedded_policy: TransformersPolicy) -> None:
    free = embedded_policy.generate([STORY], SamplingParams(temperature=0, max_new_tokens=40))[0]
    assert " " in free.text
    stop = free.text.split(" ")[2]  # a word the greedy completion is known to produce
    out = embedded_policy.generate([STORY], SamplingParams(temperature=0, max_new_tokens=40, stop=(stop,)))[0]
    assert out.finish_reason == "stop" and stop not in out.text
    assert out.num_tokens < free.num_tokens
    decoded = embedded_policy.tokenizer.decode(out.completion_token_ids or [], skip_special_tokens=True)
    assert stop in decoded and out.text == decoded[: decoded.index(stop)]
    assert out.completion_token_ids == (free.completion_token_ids or [])[: out.num_tokens]


def test_sequence_logprobs_equal_generation_logprobs(embedded_policy: TransformersPolicy) -> None:
    """Re-scoring reproduces generation's numbers, for greedy and for tempered top-p samples: the
    logprobs are those of the sampling temperature's distribution (1 when greedy), before top-p,
    with each Completion's temperature or the temperatures given."""
    greedy = embedded_policy.generate([ADD, STORY], SamplingParams(temperature=0, max_new_tokens=20))
    tempered = embedded_policy.generate(
        [COLOUR, STORY], SamplingParams(temperature=0.7, top_p=0.9, n=2, max_new_tokens=20, seed=3)
    )
    batch = greedy + tempered
    with torch.no_grad():
        rescored = embedded_policy.sequence_logprobs(batch, micro_batch_tokens=64)
    assert len(rescored) == len(batch)
    for completion, scores in zip(batch, rescored, strict=True):
        assert scores.shape == (completion.num_tokens,)
        assert scores.tolist() == pytest.approx(completion.logprobs, abs=2e-4)
    assert [c.temperature for c in batch] == [1.0, 1.0, 0.7, 0.7, 0.7, 0.7]
    # the same numbers from (prompt ids, completion ids) pairs and their temperatures, on both paths
    pairs = [(c.prompt_token_ids or [], c.completion_token_ids or []) for c in batch]
    for shared in (True, False):
        with torch.no_grad():
            from_pairs = embedded_policy.sequence_logprobs(
                pairs, temperatures=[c.temperature for c in batch], shared_prefix=shared
            )
        for a, b in zip(from_pairs, rescored, strict=True):
            assert torch.allclose(a, b, atol=2e-4)
    with torch.no_grad():  # at temperature 1 a tempered sample's tokens score otherwise
        raw = embedded_policy.sequence_logprobs(pairs[2:3])[0]
    assert not torch.allclose(raw, rescored[2], atol=1e-2)


def test_sequence_logprobs_carry_gradients(embedded_policy: TransformersPolicy) -> None:
    completion = embedded_policy.generate([ADD], SamplingParams(temperature=0, max_new_tokens=6))[0]
    embedded_policy.model.zero_grad()
    with torch.enable_grad():
        (scores,) = embedded_policy.sequence_logprobs([completion])
        scores.sum().backward()
    grad = embedded_policy.model.get_input_embeddings().weight.grad
    assert grad is not None and float(grad.abs().sum()) > 0
    embedded_policy.model.zero_grad(set_to_none=True)


def test_a_prompt_over_the_context_window_is_refused_or_left_truncated(embedded_policy: TransformersPolicy) -> None:
    small = TransformersPolicy(embedded_policy.model, embedded_policy.tokenizer, context_window=64, name="small")
    long_prompt = [{"role": "user", "content": "count with me: " + "one two three " * 30}]
    with pytest.raises(ContextLengthExceeded, match="context window of 64 tokens") as info:
        small.generate([long_prompt], SamplingParams(max_new_tokens=8))
    assert info.value.limit == 64 and info.value.needed > 64
    out = small.generate([long_prompt], SamplingParams(temperature=0, max_new_tokens=8, truncate_prompt=True))[0]
    full = small.encode(long_prompt)
    assert out.prompt_token_ids == full[-(64 - 8) :]
    with pytest.raises(ValueError, match="over the context window of 64"):
        small.sequence_logprobs([(full, [1, 2])])


@pytest.mark.parametrize("prompts", [[], [ADD[0]], [[{"role": "user", "content": None}]]])
def test_malformed_prompts_are_refused_before_the_model_runs(embedded_policy: TransformersPolicy, prompts: Any) -> None:
    with pytest.raises(ValueError, match="prompts"):
        embedded_policy.generate(prompts)


def test_sequence_logprobs_refuses_what_it_cannot_score(embedded_policy: TransformersPolicy) -> None:
    with pytest.raises(ValueError, match="at least one"):
        embedded_policy.sequence_logprobs([])
    with pytest.raises(ValueError, match="non-empty prompt and completion"):
        embedded_policy.sequence_logprobs([([1, 2], [])])
    no_ids = Completion("text", None, None, None, "stop")
    with pytest.raises(ValueError, match="no token ids"):
        embedded_policy.sequence_logprobs([no_ids])


def test_model_paths_that_do_not_exist_are_named(tmp_path: Path) -> None:
    with pytest.raises(ModelNotFound, match="does not exist"):
        load_policy(str(tmp_path / "no-such-model"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ModelNotFound, match="no config.json"):
        load_policy(str(tmp_path / "empty"))
    with pytest.raises(ModelNotFound, match="cannot load model 'no-such-org/no-such-model'"):
        load_policy("no-such-org/no-such-model")  # not cached, and the tests never reach the hub


def test_a_tokenizer_without_chat_template_is_refused(embedded_policy: TransformersPolicy) -> None:
    import copy

    tokenizer = copy.deepcopy(embedded_policy.tokenizer)
    tokenizer.chat_template = None
    with pytest.raises(PolicyError, match="no chat template"):
        TransformersPolicy(embedded_policy.model, tokenizer)
    template = "{% for m in messages %}{{ m['role'] }}: {{ m['content'] }}\n{% endfor %}assistant:"
    policy = TransformersPolicy(embedded_policy.model, tokenizer, chat_template=template)
    assert policy.tokenizer.decode(policy.encode(ADD)).endswith("assistant:")


def test_lora_adapters_train_alone_and_merge_for_inference(embedded_policy: TransformersPolicy) -> None:
    pytest.importorskip("peft")
    from spade_gym.policies.embedded import embedded_model_dir

    policy = TransformersPolicy(
        embedded_model_dir(), lora={"r": 4, "lora_alpha": 8, "target_modules": ["q_proj", "v_proj"]}
    )
    trainable = [name for name, p in policy.model.named_parameters() if p.requires_grad]
    assert trainable and all("lora_" in name for name in trainable)
    greedy = SamplingParams(temperature=0, max_new_tokens=10)
    # fresh adapters start at zero (lora_B = 0): the policy still answers like the base model
    base_answer = embedded_policy.generate([ADD], greedy)[0]
    assert policy.generate([ADD], greedy)[0].completion_token_ids == base_answer.completion_token_ids
    base_weights = embedded_policy.model.state_dict()
    merged = policy.state_dict_for_inference()
    assert set(merged) == set(base_weights)
    key = "model.layers.0.self_attn.q_proj.weight"
    assert torch.equal(merged[key], base_weights[key])
    with torch.no_grad():
        for name, parameter in policy.model.named_parameters():
            if "lora_B" in name:
                parameter.fill_(0.01)
    merged = policy.state_dict_for_inference()
    assert not torch.equal(merged[key], base_weights[key])
    assert torch.equal(merged["model.layers.0.mlp.up_proj.weight"], base_weights["model.layers.0.mlp.up_proj.weight"])
    # merging for inference leaves the adapters unmerged and the policy unchanged
    assert torch.equal(policy.state_dict_for_inference()[key], merged[key])


def test_a_saved_adapter_loads_back(tmp_path: Path) -> None:
    pytest.importorskip("peft")
    from spade_gym.policies.embedded import embedded_model_dir

    trained = TransformersPolicy(embedded_model_dir(), lora={"r": 4, "target_modules": ["q_proj", "v_proj"]})
    with torch.no_grad():
        for name, parameter in trained.model.named_parameters():
            if "lora_B" in name:
                parameter.normal_(std=0.05)
    trained.model.save_pretrained(tmp_path / "adapter")
    loaded = TransformersPolicy(embedded_model_dir(), adapter=tmp_path / "adapter")
    key = "model.layers.3.self_attn.v_proj.weight"
    assert torch.allclose(loaded.state_dict_for_inference()[key], trained.state_dict_for_inference()[key])
    assert any(p.requires_grad for p in loaded.model.parameters()), "a loaded adapter stays trainable"
    with pytest.raises(ModelNotFound, match="adapter folder"):
        TransformersPolicy(embedded_model_dir(), adapter=tmp_path / "missing")


def test_device_and_dtype_defaults_and_names() -> None:
    device, dtype = resolve_device_dtype("cpu", None)
    assert (device.type, dtype) == ("cpu", torch.float32)
    assert resolve_device_dtype("cpu", "bf16")[1] == torch.bfloat16
    assert resolve_device_dtype("cpu", torch.float16)[1] == torch.float16
    with pytest.raises(ValueError, match="dtype must be"):
        resolve_device_dtype("cpu", "int4")
    if torch.cuda.is_available():
        device, dtype = resolve_device_dtype(None, None)
        assert device.type == "cuda" and dtype in (torch.bfloat16, torch.float16)
    else:
        assert resolve_device_dtype(None, "auto")[0].type in ("cpu", "mps")
        with pytest.raises(ValueError, match="no CUDA GPU"):
            resolve_device_dtype("cuda", None)


def test_generate_from_two_threads_gives_what_each_would_alone(embedded_policy: TransformersPolicy) -> None:
    import concurrent.futures

    sampling = SamplingParams(temperature=1.0, max_new_tokens=8, seed=11)
    alone = [embedded_policy.generate([p], sampling)[0].completion_token_ids for p in (ADD, COLOUR)]
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        futures = [pool.submit(embedded_policy.generate, [p], sampling) for p in (ADD, COLOUR)]
        together = [f.result()[0].completion_token_ids for f in futures]
    assert together == alone


def test_without_a_seed_successive_calls_differ(embedded_policy: TransformersPolicy) -> None:
    sampling = SamplingParams(temperature=1.0, max_new_tokens=16)
    samples = {tuple(embedded_policy.generate([STORY], sampling)[0].completion_token_ids or ()) for _ in range(3)}
    assert len(samples) > 1, "seed=None must draw fresh randomness on every call"


def test_a_tiny_temperature_decodes_greedily(embedded_policy: TransformersPolicy) -> None:
    greedy = embedded_policy.generate([ADD], SamplingParams(temperature=0, max_new_tokens=8))[0]
    tiny = embedded_policy.generate([ADD], SamplingParams(temperature=1e-45, max_new_tokens=8))[0]
    assert tiny.completion_token_ids == greedy.completion_token_ids


@pytest.mark.parametrize(
    ("batch", "message"),
    [
        ([([1, 2], [10**9])], r"batch\[0\] completion\[0\] = 1000000000 is not a token id in \[0, 49152\)"),
        ([([1, -1], [5])], r"batch\[0\] prompt\[1\] = -1"),
        ([([1, 2], [1.7])], r"completion\[0\] = 1.7"),
        ([([1, 2], "hello")], "must be a list of token ids"),
        ([(1, 2, 3)], r"batch\[0\] must be a Completion or a \(prompt_ids, completion_ids\) pair"),
        ("hello", "batch must be a list"),
    ],
)
def test_sequence_logprobs_names_bad_token_ids(embedded_policy: TransformersPolicy, batch: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        embedded_policy.sequence_logprobs(batch)


def test_sequence_logprobs_needs_a_positive_micro_batch(embedded_policy: TransformersPolicy) -> None:
    for size in (0, -1):
        with pytest.raises(ValueError, match="micro_batch_tokens"):
            embedded_policy.sequence_logprobs([([1, 2], [3])], micro_batch_tokens=size)
    completion = embedded_policy.generate([ADD], SamplingParams(temperature=0, max_new_tokens=4))[0]
    with pytest.raises(ValueError, match="batch must be a list"):
        embedded_policy.sequence_logprobs(completion)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"context_window": 0}, "context_window must be an int >= 1"),
        ({"context_window": -5}, "context_window must be an int >= 1"),
        ({"max_batch_size": "a"}, "max_batch_size must be an int >= 1"),
        ({"device": "tpu0"}, "device must be"),
    ],
)
def test_constructor_arguments_are_checked(embedded_policy: TransformersPolicy, kwargs: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        TransformersPolicy(embedded_policy.model, embedded_policy.tokenizer, **kwargs)


def test_chat_templates_that_cannot_work_are_refused(embedded_policy: TransformersPolicy) -> None:
    import copy

    tokenizer = copy.deepcopy(embedded_policy.tokenizer)
    with pytest.raises(PolicyError, match="cannot be rendered"):
        TransformersPolicy(embedded_policy.model, tokenizer, chat_template="{% for m in messages %}{{ m.content }")
    empty = TransformersPolicy(embedded_policy.model, copy.deepcopy(tokenizer), chat_template="{{ '' }}")
    with pytest.raises(ValueError, match="rendered this prompt to no tokens"):
        empty.generate([ADD])
    with pytest.raises(ValueError, match="sampling must be a SamplingParams"):
        embedded_policy.generate([ADD], {"temperature": 0})  # type: ignore[arg-type]


def test_a_misspelt_default_is_caught_at_once() -> None:
    import time

    started = time.perf_counter()
    with pytest.raises(ModelNotFound, match="did you mean 'default'"):
        load_policy("defualt")
    assert time.perf_counter() - started < 5
    assert load_policy("Default").name == "SmolLM2-135M-Instruct"
