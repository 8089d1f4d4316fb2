"""The policy interface (``spade_gym.policies.base``) and ``load_policy``'s spec parsing: no model needed."""

from __future__ import annotations

import subprocess
import sys

import pytest

from spade_gym.policies import SamplingParams, check_prompts, parse_policy_spec
from spade_gym.policies.base import cut_at_stop, resolve_sampling

CHAT = [{"role": "user", "content": "hi"}]


def test_sampling_params_defaults_sample_one_completion() -> None:
    sampling = SamplingParams()
    assert (sampling.temperature, sampling.top_p, sampling.n, sampling.stop, sampling.seed) == (1.0, 1.0, 1, (), None)
    assert not sampling.greedy and SamplingParams(temperature=0).greedy


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"temperature": -0.1}, "temperature"),
        ({"temperature": float("nan")}, "temperature"),
        ({"top_p": 0.0}, "top_p"),
        ({"top_p": 1.5}, "top_p"),
        ({"max_new_tokens": 0}, "max_new_tokens"),
        ({"max_new_tokens": 2.5}, "max_new_tokens"),
        ({"n": 0}, "n"),
        ({"n": True}, "n"),
        ({"stop": ("",)}, "stop"),
        ({"stop": b"ab"}, "stop"),
        ({"stop": 3}, "stop"),
        ({"seed": "1"}, "seed"),
        ({"seed": 2**64}, "seed"),
        ({"seed": -1}, "seed"),
        ({"temperature": True}, "temperature"),
        ({"top_p": True}, "top_p"),
    ],
)
def test_sampling_params_out_of_range_name_the_field(kwargs: dict, field: str) -> None:
    with pytest.raises(ValueError, match=rf"SamplingParams\.{field}"):
        SamplingParams(**kwargs)


def test_a_greedy_group_is_refused() -> None:
    """n identical greedy completions are a degenerate group (the STYLE.md pitfall): refused, not silent."""
    with pytest.raises(ValueError, match="identical greedy completions"):
        SamplingParams(n=4, temperature=0)


def test_tiny_temperatures_are_greedy() -> None:
    """A softmax at temperature 1e-45 overflows: such temperatures decode greedily, as in vLLM."""
    assert SamplingParams(temperature=1e-45).greedy and SamplingParams(temperature=5e-324).greedy
    assert not SamplingParams(temperature=1e-4).greedy
    with pytest.raises(ValueError, match="identical greedy completions"):
        SamplingParams(n=2, temperature=1e-9)


def test_sampling_must_be_sampling_params() -> None:
    assert resolve_sampling(None) == SamplingParams()
    with pytest.raises(ValueError, match="sampling must be a SamplingParams"):
        resolve_sampling({"temperature": 0})


def test_a_single_stop_string_is_one_stop_string() -> None:
    assert SamplingParams(stop=None).stop == ()  # type: ignore[arg-type]
    assert SamplingParams(stop="</answer>").stop == ("</answer>",)  # type: ignore[arg-type]
    assert SamplingParams(stop=["a", "b"]).stop == ("a", "b")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("prompts", "message"),
    [
        ([], "empty"),
        ("hello", "list of conversations"),
        (CHAT, "wrap a single conversation"),
        ([[]], r"prompts\[0\] must be a non-empty list"),
        ([CHAT, "hello"], r"prompts\[1\] must be a non-empty list"),
        ([[{"role": "robot", "content": "x"}]], r"prompts\[0\]\[0\]\['role'\]"),
        ([[{"role": "user", "content": 3}]], r"prompts\[0\]\[0\]\['content'\] must be a string"),
        ([[{"role": "user"}]], r"\['content'\] must be a string"),
        ([["user: hi"]], r"prompts\[0\]\[0\] must be a mapping"),
        (
            [[{"role": "user", "content": "ok"}, {"role": "user", "content": "\ud800 hi"}]],
            r"prompts\[0\]\[1\].*lone surrogate",
        ),
    ],
)
def test_check_prompts_names_what_is_wrong(prompts: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        check_prompts(prompts)


def test_check_prompts_returns_plain_messages() -> None:
    prompts = [[{"role": "system", "content": "s", "name": "x"}, {"role": "user", "content": "u"}]]
    assert check_prompts(prompts) == [[{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]]


def test_cut_at_stop_cuts_before_the_earliest_stop() -> None:
    assert cut_at_stop("a</answer>b<end>", ["<end>", "</answer>"]) == ("a", True)
    assert cut_at_stop("no stop here", ["<end>"]) == ("no stop here", False)
    assert cut_at_stop("text", []) == ("text", False)


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("default", ("embedded", {})),
        ("embedded", ("embedded", {})),
        (" Default ", ("embedded", {})),
        ("HuggingFaceTB/SmolLM2-360M-Instruct", ("transformers", {"model": "HuggingFaceTB/SmolLM2-360M-Instruct"})),
        ("/models/ckpt", ("transformers", {"model": "/models/ckpt"})),
        ("vllm:Qwen/Qwen2.5-1.5B-Instruct", ("vllm", {"model": "Qwen/Qwen2.5-1.5B-Instruct"})),
        ("vllm:default", ("vllm", {"model": "default"})),
        (
            "openai:Qwen/Qwen2.5-7B-Instruct@http://localhost:8000/v1",
            ("openai", {"model": "Qwen/Qwen2.5-7B-Instruct", "base_url": "http://localhost:8000/v1"}),
        ),
        (
            "openai:me@work@https://api.example.com/v1",
            ("openai", {"model": "me@work", "base_url": "https://api.example.com/v1"}),
        ),
    ],
)
def test_parse_policy_spec(spec: str, expected: tuple) -> None:
    assert parse_policy_spec(spec) == expected


@pytest.mark.parametrize(
    "spec", ["", "   ", "vllm:", "openai:gpt-4o", "openai:@http://x/v1", "openai:gpt@localhost:8000"]
)
def test_parse_policy_spec_refuses_malformed_specs(spec: str) -> None:
    with pytest.raises(ValueError, match="policy spec"):
        parse_policy_spec(spec)


def test_importing_spade_gym_does_not_import_torch() -> None:
    """The sandbox, registry and CLI stay light: backends import torch, vLLM or openai on first use."""
    code = "import sys, spade_gym, spade_gym.policies; print(sorted(m for m in ('torch', 'transformers', 'vllm', 'openai') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_a_hub_id_that_is_not_cached_fails_at_once_when_the_hub_is_unreachable(monkeypatch: pytest.MonkeyPatch) -> None:
    # a mistyped id used to spend about 90 s in the hub client's retries before failing
    pytest.importorskip("transformers")
    import time

    from huggingface_hub import constants

    from spade_gym.errors import ModelNotFound
    from spade_gym.policies import load_policy

    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens there
    started = time.monotonic()
    with pytest.raises(ModelNotFound, match="not in the Hugging Face cache and the hub cannot be reached"):
        load_policy("no-such-org/no-such-modle")
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("spec", ["[a]", "not a model id"])
def test_a_spec_that_is_neither_a_folder_nor_a_hub_id_is_model_not_found(spec: str) -> None:
    pytest.importorskip("transformers")
    from spade_gym.errors import ModelNotFound
    from spade_gym.policies import load_policy

    with pytest.raises(ModelNotFound, match="neither a folder that exists nor a Hugging Face model id"):
        load_policy(spec)


def test_chat_token_ids_renders_with_a_real_tokenizer_and_refuses_an_empty_render() -> None:
    tokenizers = pytest.importorskip("tokenizers")
    transformers = pytest.importorskip("transformers")
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import Whitespace

    from spade_gym.errors import ChatTemplateError, GenerationError
    from spade_gym.policies.base import chat_token_ids

    words = tokenizers.Tokenizer(WordLevel({"?": 0, "user": 1, "hi": 2, "assistant": 3, ":": 4}, unk_token="?"))
    words.pre_tokenizer = Whitespace()
    tokenizer = transformers.PreTrainedTokenizerFast(tokenizer_object=words, unk_token="?")
    tokenizer.chat_template = (
        "{% for m in messages %}{{ m.role }} : {{ m.content }} {% endfor %}"
        "{% if add_generation_prompt %}assistant :{% endif %}"
    )
    user = {"role": "user", "content": "hi"}
    assert chat_token_ids(tokenizer, [user]) == [1, 4, 2, 3, 4]
    continued = chat_token_ids(tokenizer, [user, {"role": "assistant", "content": "hi"}])
    assert continued[:5] == [1, 4, 2, 3, 4] and continued[-1] == 2  # the assistant's text is continued
    tokenizer.chat_template = "{{ '' }}"
    with pytest.raises(ChatTemplateError, match="rendered this prompt to no tokens") as raised:
        chat_token_ids(tokenizer, [user])
    assert isinstance(raised.value, ValueError) and isinstance(raised.value, GenerationError)
