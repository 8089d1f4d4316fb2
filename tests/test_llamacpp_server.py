"""The OpenAI-compatible policy and the Designer against a real llama.cpp server (llama-cpp-python's,
started here on the embedded model's GGUF): a server that ignores ``n``, reports logprobs only
with ``top_logprobs``, and runs one request at a time."""

from __future__ import annotations

import importlib.util
import json
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from spade_gym.cli import app
from spade_gym.policies import SamplingParams, load_policy
from spade_gym.policies.gguf import gguf_path
from spade_gym.policies.openai import OpenAIPolicy

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("llama_cpp") is None or importlib.util.find_spec("uvicorn") is None,
        reason="llama-cpp-python[server] is not installed (pip install 'spade-gym[llamacpp]')",
    ),
]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """``http://127.0.0.1:<port>/v1``: llama-cpp-python's server on the embedded GGUF, model name ``smollm2``."""
    gguf, _ = gguf_path("default")
    port = free_port()
    log = tmp_path_factory.mktemp("server") / "server.log"
    command = [sys.executable, "-m", "llama_cpp.server", "--model", str(gguf), "--model_alias", "smollm2"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--n_ctx", "8192", "--verbose", "False"]
    with open(log, "wb") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"{url}/models", timeout=2) as answer:
                    assert json.load(answer)["data"][0]["id"] == "smollm2"
                break
            except OSError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the llama.cpp server did not start: {log.read_text()[-2000:]}") from None
                time.sleep(0.5)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=30)


def test_a_group_from_a_server_that_ignores_n(server: str) -> None:
    with OpenAIPolicy("smollm2", server) as policy:
        completions = policy.generate(
            [[{"role": "user", "content": "Name a fruit."}]],
            SamplingParams(temperature=1.0, n=3, max_new_tokens=16, seed=3),
        )
        assert len(completions) == 3 and policy.server_n is False  # one choice per request: the rest sent singly
        assert all(c.text and c.logprobs for c in completions)  # logprobs: true with top_logprobs: 1
        assert len({c.text for c in completions}) > 1  # seeds seed, seed + 1, seed + 2


def test_model_size_comes_from_the_model_name_not_the_url(server: str) -> None:
    from spade_gym.designer import auto_edit_probability, model_parameters

    assert model_parameters(f"openai:SmolLM2-135M-Instruct@{server}") == 1.35e8
    assert model_parameters(f"openai:smollm2@{server}") is None  # no size in the name: nothing read off the URL
    assert auto_edit_probability(f"openai:Qwen2.5-Coder-7B@{server}") < 0.5


def test_the_designer_runs_against_the_server_unchanged(server: str, tmp_path: Path) -> None:
    spec = f"openai:SmolLM2-135M@{server}"
    assert isinstance(load_policy(spec), OpenAIPolicy)
    result = CliRunner().invoke(
        app,
        ["design", "--policy", spec, "--registry", str(tmp_path / "registry"), "--mode", "edit", "-k", "1"],
    )
    assert result.exit_code in (0, 1), result.output  # 1: the design was refused; 2 would be an error
    assert "outcome" in result.output and "Traceback" not in result.output
