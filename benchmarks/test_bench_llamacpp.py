"""llama.cpp (``LlamaCppPolicy``) against the torch path (``TransformersPolicy``) on this CPU, in one run.

Reported, never asserted (the asserts only check that each call did its job):

1. The embedded SmolLM2-135M-Instruct both ways (torch: the converted float32 checkpoint; llama.cpp:
   the package's Q4_1 GGUF), batch 1, rounds interleaved: prefill tokens/s (a prompt of about
   1,000 tokens, one new token; key/value reuse off on both sides, so every call prefills) and
   decode tokens/s (a short prompt, 128 new tokens greedy).
2. The offline code models through llama.cpp (``qwen2.5-coder-0.5b``, ``qwen2.5-coder-1.5b``), the
   same two figures, where their part packages are installed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from statistics import median
from typing import Any

import pytest

pytest.importorskip("llama_cpp")
pytest.importorskip("torch")

from spade_gym.errors import ModelNotFound  # noqa: E402
from spade_gym.policies import SamplingParams, load_policy  # noqa: E402

ROUNDS = 3
DECODE_TOKENS = 128
LONG = [
    {
        "role": "user",
        "content": "Summarise this log:\n" + "\n".join(f"line {i}: value {i * 7 % 13}" for i in range(120)),
    }
]
SHORT = [{"role": "user", "content": "Tell me a long story about a dragon who learns to count."}]


def _speeds(policy: Any) -> dict[str, float]:
    """Best-of-round prefill and decode tokens/s of ``policy`` at batch 1 (one round)."""
    started = time.perf_counter()
    [first] = policy.generate([LONG], SamplingParams(temperature=0, max_new_tokens=1))
    prefill = len(first.prompt_token_ids or ()) / (time.perf_counter() - started)
    started = time.perf_counter()
    [story] = policy.generate([SHORT], SamplingParams(temperature=0, max_new_tokens=DECODE_TOKENS))
    decode = story.num_tokens / (time.perf_counter() - started)
    assert story.num_tokens > 16 and len(first.prompt_token_ids or ()) > 500
    return {"prefill": prefill, "decode": decode}


def test_llamacpp_against_torch_on_the_embedded_model(benchmark: Any, report: Callable[..., None]) -> None:
    torch_policy = load_policy("default", prefix_cache_mb=0)  # a fresh prefill each call, as llama.cpp's
    llama_policy = load_policy("llamacpp:default", n_ctx=4096)
    rounds: dict[str, list[dict[str, float]]] = {"torch": [], "llamacpp": []}
    _speeds(torch_policy), _speeds(llama_policy)  # warm-up

    def one_round() -> None:
        rounds["torch"].append(_speeds(torch_policy))
        rounds["llamacpp"].append(_speeds(llama_policy))

    benchmark.pedantic(one_round, rounds=ROUNDS, iterations=1)
    best = {name: {k: max(r[k] for r in runs) for k in ("prefill", "decode")} for name, runs in rounds.items()}
    med = {name: {k: median(r[k] for r in runs) for k in ("prefill", "decode")} for name, runs in rounds.items()}
    t, c = best["torch"], best["llamacpp"]
    report(
        f"SmolLM2-135M batch 1, best of {ROUNDS}: decode llama.cpp {c['decode']:.1f} vs torch {t['decode']:.1f} "
        f"tokens/s ({c['decode'] / t['decode']:.1f}x); prefill llama.cpp {c['prefill']:.0f} vs torch "
        f"{t['prefill']:.0f} tokens/s ({c['prefill'] / t['prefill']:.2f}x); medians decode {med['llamacpp']['decode']:.1f} "
        f"vs {med['torch']['decode']:.1f}, prefill {med['llamacpp']['prefill']:.0f} vs {med['torch']['prefill']:.0f}",
        decode_llamacpp=c["decode"],
        decode_torch=t["decode"],
        prefill_llamacpp=c["prefill"],
        prefill_torch=t["prefill"],
        decode_ratio=c["decode"] / t["decode"],
        prefill_ratio=c["prefill"] / t["prefill"],
    )
    llama_policy.close()  # type: ignore[attr-defined]


@pytest.mark.parametrize("alias", ["qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"])
def test_code_models_through_llamacpp(benchmark: Any, report: Callable[..., None], alias: str) -> None:
    try:
        policy = load_policy(f"llamacpp:{alias}", n_ctx=4096)
    except ModelNotFound as exc:
        pytest.skip(f"{alias} is not installed: {exc}")
    runs: list[dict[str, float]] = []
    benchmark.pedantic(lambda: runs.append(_speeds(policy)), rounds=2, iterations=1)
    best = {k: max(r[k] for r in runs) for k in ("prefill", "decode")}
    report(
        f"{alias} through llama.cpp, batch 1, best of 2: decode {best['decode']:.1f} tokens/s, prefill "
        f"{best['prefill']:.0f} tokens/s",
        decode=best["decode"],
        prefill=best["prefill"],
    )
    policy.close()  # type: ignore[attr-defined]
