"""The vLLM backend (``spade_gym.policies.vllm``) and the shared ``fit_prompt`` helper.

Three layers (no fake engine: what needs vLLM runs only against a real one):

* pure mapping helpers (sampling settings, context window, parameter names, output conversion),
  which need neither vLLM nor a GPU;
* ``VLLMPolicy`` without vLLM installed (a clear ``BackendUnavailable``, never an ``ImportError``);
* a real engine on the embedded model, skipped unless vLLM is installed and a CUDA GPU is present.
"""

from __future__ import annotations

import dataclasses
import math
import sys
import types
from typing import Any

import pytest

from spade_gym.errors import BackendUnavailable, ContextLengthExceeded, GenerationError, ModelNotFound
from spade_gym.policies import Policy, SamplingParams, load_policy
from spade_gym.policies.base import fit_prompt
from spade_gym.policies.vllm import (
    COLOCATE_DEFAULTS,
    VLLMPolicy,
    completions_from_outputs,
    ensure_distributed_env,
    to_vllm_param_name,
    to_vllm_sampling_kwargs,
)

CHAT = [{"role": "user", "content": "What is 2 + 3? Answer with a number."}]
DIST_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT")

# -- pure helpers --------------------------------------------------------------------------------


def test_sampling_kwargs_map_every_field() -> None:
    sampling = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=33, n=4, stop=("\n\n", "END"), seed=7)
    kwargs = to_vllm_sampling_kwargs(sampling)
    assert kwargs == {
        "n": 4,
        "temperature": 0.7,
        "top_p": 0.9,
        "max_tokens": 33,
        "stop": ["\n\n", "END"],
        "seed": 7,
        "logprobs": 0,
    }
    assert isinstance(kwargs["stop"], list)
    # every SamplingParams field is mapped, except truncation, which happens before the request
    mapped = {"temperature", "top_p", "max_new_tokens", "n", "stop", "seed"}
    assert {f.name for f in dataclasses.fields(SamplingParams)} == mapped | {"truncate_prompt"}


def test_sampling_kwargs_greedy_and_defaults() -> None:
    kwargs = to_vllm_sampling_kwargs(SamplingParams(temperature=0, max_new_tokens=5))
    assert kwargs["temperature"] == 0.0 and isinstance(kwargs["temperature"], float)
    assert kwargs["n"] == 1 and kwargs["max_tokens"] == 5
    assert kwargs["stop"] == [] and kwargs["seed"] is None and kwargs["logprobs"] == 0
    lone = SamplingParams(stop="STOP")  # type: ignore[arg-type]  # a lone string is one stop string
    assert to_vllm_sampling_kwargs(lone)["stop"] == ["STOP"]


def test_fit_prompt_keeps_a_prompt_that_fits() -> None:
    ids = list(range(10))
    out = fit_prompt(ids, 6, 16, False)
    assert out == ids and out is not ids
    assert fit_prompt(ids, 6, 16, True) == ids  # exactly at the limit
    assert fit_prompt(ids, 10_000, None, False) == ids  # unknown window


def test_fit_prompt_refuses_with_the_limit_in_the_message() -> None:
    with pytest.raises(ContextLengthExceeded) as info:
        fit_prompt(list(range(10)), 4, 8, False)
    error = info.value
    assert (error.limit, error.needed) == (8, 14)
    assert str(error) == (
        "prompt of 10 tokens + max_new_tokens 4 = 14 exceeds the model's context window of 8 tokens; shorten the "
        "prompt, lower max_new_tokens, or pass SamplingParams(truncate_prompt=True) to keep the last 4 prompt tokens"
    )


def test_fit_prompt_left_truncates_when_asked() -> None:
    assert fit_prompt(list(range(10)), 4, 8, True) == [6, 7, 8, 9]
    assert fit_prompt(list(range(10)), 7, 8, True) == [9]


def test_fit_prompt_refuses_when_max_new_tokens_fills_the_window() -> None:
    for truncate in (False, True):
        with pytest.raises(ContextLengthExceeded, match="context window of 8 tokens") as info:
            fit_prompt([1, 2], 8, 8, truncate)
        assert (info.value.limit, info.value.needed) == (8, 10)


def test_param_names_follow_trl() -> None:
    assert to_vllm_param_name("model.layers.0.self_attn.q_proj.weight") == "model.layers.0.self_attn.q_proj.weight"
    assert to_vllm_param_name("lm_head.weight") == "lm_head.weight"
    # PEFT, adapters merged: base names come back, adapter weights are skipped
    assert (
        to_vllm_param_name("base_model.model.model.layers.0.self_attn.q_proj.base_layer.weight")
        == "model.layers.0.self_attn.q_proj.weight"
    )
    assert to_vllm_param_name("base_model.model.model.layers.0.self_attn.q_proj.lora_A.default.weight") is None
    assert to_vllm_param_name("base_model.model.lm_head.modules_to_save.default.weight") == "lm_head.weight"
    assert to_vllm_param_name("base_model.model.lm_head.original_module.weight") is None
    # activation checkpointing / FSDP wrappers
    assert to_vllm_param_name("model.layers.3._checkpoint_wrapped_module.mlp.up_proj.weight") == (
        "model.layers.3.mlp.up_proj.weight"
    )
    assert to_vllm_param_name("_fsdp_wrapped_module.model.norm.weight") == "model.norm.weight"


def test_ensure_distributed_env_fills_only_what_is_missing() -> None:
    env: dict[str, str] = {}
    ensure_distributed_env(env)
    assert (env["RANK"], env["LOCAL_RANK"], env["WORLD_SIZE"], env["MASTER_ADDR"]) == ("0", "0", "1", "localhost")
    assert 0 < int(env["MASTER_PORT"]) < 65536
    launched = {"RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4", "MASTER_ADDR": "10.0.0.1", "MASTER_PORT": "29501"}
    env = dict(launched)
    ensure_distributed_env(env)
    assert env == launched
    env = {"MASTER_PORT": "auto"}
    ensure_distributed_env(env)
    assert env["MASTER_PORT"].isdigit() and env["MASTER_PORT"] != "0"


# -- vLLM-shaped outputs, built by hand for the pure converter ---------------------------------


class HandLogprob:
    def __init__(self, logprob: float) -> None:
        self.logprob = logprob
        self.rank = 1


def sample(prompt_index: int, k: int) -> types.SimpleNamespace:
    tokens = [100 * prompt_index + k, 2]
    return types.SimpleNamespace(
        index=k,
        text=f"p{prompt_index}s{k}",
        token_ids=tokens,
        # the sampled token plus a distractor, as vLLM adds top-k entries when asked for more
        logprobs=[{t: HandLogprob(-0.5 * (j + 1) - k), 99_999: HandLogprob(-9.0)} for j, t in enumerate(tokens)],
        finish_reason="length" if k == 1 else ("abort" if k == 2 else "stop"),
    )


# -- VLLMPolicy without vLLM, or without a GPU ------------------------------------------------------


def test_constructor_without_vllm_raises_backend_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` now fails, installed or not
    with pytest.raises(BackendUnavailable) as info:
        VLLMPolicy("x")
    assert not isinstance(info.value, ImportError)
    assert "pip install -e '.[vllm]'" in str(info.value) and "GPU" in str(info.value)


def test_load_policy_vllm_without_vllm_raises_backend_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "vllm", None)
    with pytest.raises(BackendUnavailable, match=r"-e '\.\[vllm\]'"):
        load_policy("vllm:Qwen/Qwen2.5-0.5B-Instruct")


# -- the output converter ----------------------------------------------------------------------------


def test_missing_logprobs_are_a_generation_error() -> None:
    request = types.SimpleNamespace(outputs=[sample(0, 0)])
    request.outputs[0].logprobs = None
    with pytest.raises(GenerationError, match="log-probabilities"):
        completions_from_outputs([request], [[1, 2]], 1)
    with pytest.raises(GenerationError, match="expected n=2"):
        completions_from_outputs([types.SimpleNamespace(outputs=[sample(0, 0)])], [[1]], 2)
    with pytest.raises(GenerationError, match="2 prompts"):
        completions_from_outputs([], [[1], [2]], 1)


# -- a real engine (needs vLLM and a CUDA GPU) -------------------------------------------------------


@pytest.fixture(scope="module")
def real_policy() -> Any:
    pytest.importorskip("vllm")
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("vLLM needs a CUDA GPU")
    embedded = pytest.importorskip("spade_gym.policies.embedded")
    try:
        model_dir = embedded.embedded_model_dir()
    except ModelNotFound as error:
        pytest.skip(f"embedded model unavailable: {error}")
    policy = load_policy("vllm:default", gpu_memory_utilization=0.3, max_model_len=1024, enforce_eager=True)
    yield policy, model_dir
    del policy


@pytest.mark.slow
def test_load_policy_vllm_default(real_policy: Any) -> None:
    policy, model_dir = real_policy
    assert isinstance(policy, VLLMPolicy) and isinstance(policy, Policy)
    assert policy.name == str(model_dir) and policy.context_window == 1024


@pytest.mark.slow
def test_real_generation(real_policy: Any) -> None:
    policy, _ = real_policy
    greedy = policy.generate([CHAT, CHAT], SamplingParams(temperature=0, max_new_tokens=16))
    assert len(greedy) == 2 and [c.prompt_index for c in greedy] == [0, 1]
    for completion in greedy:
        assert 1 <= completion.num_tokens <= 16 and len(completion.logprobs) == completion.num_tokens
        assert all(math.isfinite(lp) and lp <= 0 for lp in completion.logprobs)
        assert completion.finish_reason in ("stop", "length")
        assert completion.finish_reason == "stop" or completion.num_tokens == 16

    sampling = SamplingParams(temperature=1.0, n=4, max_new_tokens=12, seed=0)
    group = policy.generate([CHAT, [{"role": "user", "content": "Name a colour."}]], sampling)
    assert [c.prompt_index for c in group] == [0, 0, 0, 0, 1, 1, 1, 1]
    again = policy.generate([CHAT, [{"role": "user", "content": "Name a colour."}]], sampling)
    assert [c.completion_token_ids for c in group] == [c.completion_token_ids for c in again]


@pytest.mark.slow
def test_real_logprobs_are_at_the_sampling_temperature(real_policy: Any) -> None:
    """Sampled at temperature 0.5, the reported logprobs are those of logits / 0.5 (as the trainer re-scores)."""
    policy, model_dir = real_policy
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    completion = policy.generate([CHAT], SamplingParams(temperature=0.5, max_new_tokens=12, seed=1))[0]
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    ids = torch.tensor([completion.prompt_token_ids + completion.completion_token_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(completion.prompt_token_ids) - 1 : -1].float()
    assert completion.temperature == 0.5
    reference = torch.log_softmax(logits / 0.5, dim=-1).gather(1, ids[0, len(completion.prompt_token_ids) :, None])[
        :, 0
    ]
    # vLLM runs in half precision: compare on average, loosely per token
    difference = (torch.tensor(completion.logprobs) - reference).abs()
    assert difference.mean().item() < 0.15 and difference.max().item() < 1.0


@pytest.mark.slow
def test_real_context_window(real_policy: Any) -> None:
    policy, _ = real_policy
    long_chat = [{"role": "user", "content": "word " * 2000}]
    with pytest.raises(ContextLengthExceeded, match="context window of 1024 tokens"):
        policy.generate([long_chat], SamplingParams(max_new_tokens=8))
    completion = policy.generate([long_chat], SamplingParams(max_new_tokens=8, truncate_prompt=True))[0]
    assert len(completion.prompt_token_ids) == 1024 - 8


@pytest.mark.slow
def test_real_load_weights_round_trip(real_policy: Any) -> None:
    """Loading the checkpoint's own weights changes nothing; a changed weight changes the output."""
    policy, model_dir = real_policy
    transformers = pytest.importorskip("transformers")
    greedy = SamplingParams(temperature=0, max_new_tokens=16)
    before = policy.generate([CHAT], greedy)[0]
    model = transformers.AutoModelForCausalLM.from_pretrained(model_dir)
    state_dict = model.state_dict()
    policy.load_weights(state_dict)
    assert policy.generate([CHAT], greedy)[0].completion_token_ids == before.completion_token_ids

    scrambled = dict(state_dict)
    scrambled["model.norm.weight"] = -state_dict["model.norm.weight"]
    policy.load_weights(scrambled)
    assert policy.generate([CHAT], greedy)[0].completion_token_ids != before.completion_token_ids
    policy.load_weights(state_dict)  # leave the shared engine as it was
    assert policy.generate([CHAT], greedy)[0].completion_token_ids == before.completion_token_ids


def test_the_vllm_engine_turns_on_its_own_prefix_caching() -> None:
    # vLLM reuses shared prompt prefixes itself (the applied defaults are
    # checked where an engine is built, in the GPU tests)
    assert COLOCATE_DEFAULTS["enable_prefix_caching"] is True
