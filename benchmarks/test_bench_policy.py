"""Speed and memory of the embedded model through :class:`TransformersPolicy` on this CPU.

Reported, never asserted (the asserts only check that each measured call did its job):

1. Tokens per second of batched greedy generation at batch 1, 8 and 32, each beside a bare
   ``model.generate`` on the same token ids in the same test, interleaved round by round.
   Targets: the wrapper (chat template, logprobs, finish bookkeeping, decoding included) keeps at
   least 95% of the bare throughput; batch 32 reaches at least 6x the throughput of batch 1.
2. Peak resident memory of a fresh process that loads the embedded model and generates a batch of
   32 (target below 2 GiB), beside a process that only imports torch and transformers.
3. First-use conversion of the GGUF file (into an empty ``SPADE_CACHE``) and the cached load
   (target below 5 s), beside a bare ``from_pretrained`` of the same folder, each in a fresh process.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from statistics import median
from typing import Any

import pytest

torch = pytest.importorskip("torch")

from spade_gym.policies import SamplingParams, load_policy  # noqa: E402
from spade_gym.policies.transformers import TransformersPolicy  # noqa: E402

NEW_TOKENS = 64
# more rounds where a round is short: batch 1's figure is the noisiest (a round is about 3 s);
# with CI set, fewer (about 75 s less), so that .ci/run fits its 40 minutes on 2 cores
ROUNDS = {1: 4, 8: 3, 32: 2} if os.environ.get("CI") else {1: 7, 8: 4, 32: 3}
PROMPTS = [
    [{"role": "user", "content": f"Tell me a long story about a {animal} who learns to {skill}."}]
    for animal in ("dragon", "fox", "whale", "robot", "owl", "cat", "bear", "crow")
    for skill in ("count", "sing", "swim", "paint")
]
THROUGHPUT: dict[int, float] = {}


@pytest.fixture(scope="module")
def policy() -> TransformersPolicy:
    loaded = load_policy("default")
    assert isinstance(loaded, TransformersPolicy)
    return loaded


def _bare_inputs(policy: TransformersPolicy, batch: int) -> tuple[Any, Any]:
    encoded = [policy.encode(p) for p in PROMPTS[:batch]]
    width = max(len(e) for e in encoded)
    ids = torch.full((batch, width), policy.pad_token_id, dtype=torch.long)
    mask = torch.zeros((batch, width), dtype=torch.long)
    for k, e in enumerate(encoded):
        ids[k, width - len(e) :] = torch.tensor(e)
        mask[k, width - len(e) :] = 1
    return ids, mask


def _bare_completions(policy: TransformersPolicy, sequences: Any, width: int) -> list[list[int]]:
    out = []
    for row in sequences[:, width:].tolist():
        ends = [k for k, t in enumerate(row) if t in policy.eos_token_ids]
        out.append(row[: ends[0] + 1] if ends else row)
    return out


@pytest.mark.parametrize("batch", [1, 8, 32])
def test_generation_throughput(
    benchmark: Any, report: Callable[..., None], policy: TransformersPolicy, batch: int
) -> None:
    greedy = SamplingParams(temperature=0, max_new_tokens=NEW_TOKENS)
    ids, mask = _bare_inputs(policy, batch)
    ours: list[tuple[float, int]] = []
    bare: list[tuple[float, int]] = []
    results: dict[str, Any] = {}

    def bare_generate() -> None:  # the baseline, run before every round of ours (interleaved)
        started = time.perf_counter()
        with torch.inference_mode():
            sequences = policy.model.generate(
                input_ids=ids, attention_mask=mask, max_new_tokens=NEW_TOKENS, do_sample=False
            )
        wall = time.perf_counter() - started
        results["bare"] = _bare_completions(policy, sequences, ids.shape[1])
        bare.append((wall, sum(len(r) for r in results["bare"])))

    def wrapped_generate() -> None:
        started = time.perf_counter()
        completions = policy.generate(PROMPTS[:batch], greedy)
        ours.append((time.perf_counter() - started, sum(c.num_tokens for c in completions)))
        results["ours"] = completions

    policy.generate(PROMPTS[:batch], SamplingParams(temperature=0, max_new_tokens=4))  # warm-up
    benchmark.pedantic(wrapped_generate, setup=bare_generate, rounds=ROUNDS[batch], iterations=1)
    # the same greedy tokens, with one logprob each: the wrapper did the bare call's job and more
    assert [c.completion_token_ids for c in results["ours"]] == results["bare"]
    assert all(c.logprobs is not None and len(c.logprobs) == c.num_tokens for c in results["ours"])
    # best of the rounds (the least disturbed by neighbours on a shared machine), and the median
    ours_tps = max(tokens / wall for wall, tokens in ours)
    bare_tps = max(tokens / wall for wall, tokens in bare)
    ours_median = median(tokens / wall for wall, tokens in ours)
    bare_median = median(tokens / wall for wall, tokens in bare)
    THROUGHPUT[batch] = ours_tps
    kept = ours_tps / bare_tps
    report(
        f"batch {batch}, {NEW_TOKENS} new tokens, best of {len(ours)} rounds: {ours_tps:.1f} tokens/s with logprobs "
        f"vs bare model.generate {bare_tps:.1f} tokens/s = {kept:.1%} kept (target >= 95%: "
        f"{'met' if kept >= 0.95 else 'MISSED'}); medians {ours_median:.1f} vs {bare_median:.1f} "
        f"({ours_median / bare_median:.1%})",
        batch=batch,
        new_tokens=NEW_TOKENS,
        tokens_per_s=ours_tps,
        bare_tokens_per_s=bare_tps,
        ratio_to_bare=kept,
        median_tokens_per_s=ours_median,
        median_bare_tokens_per_s=bare_median,
        median_ratio_to_bare=ours_median / bare_median,
        tokens_per_round=ours[-1][1],
    )


def test_batch_scaling(benchmark: Any, report: Callable[..., None]) -> None:
    if not {1, 32} <= set(THROUGHPUT):
        pytest.skip("needs test_generation_throughput[1] and [32] in the same run")
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    scaling = THROUGHPUT[32] / THROUGHPUT[1]
    report(
        f"batch 32 / batch 1 throughput: {scaling:.1f}x (target >= 6x: {'met' if scaling >= 6 else 'MISSED'}); "
        f"batch 8 / batch 1: {THROUGHPUT.get(8, float('nan')) / THROUGHPUT[1]:.1f}x",
        batch32_over_batch1=scaling,
    )


def _run_python(code: str, env: dict[str, str] | None = None) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, env={**os.environ, **(env or {})}
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


_RSS = """
import json

def peak_kib():  # VmHWM: this process's own peak (ru_maxrss would inherit the forking parent's)
    with open("/proc/self/status") as status:
        return int(next(line for line in status if line.startswith("VmHWM:")).split()[1])

import torch, transformers
from transformers import AutoModelForCausalLM
base = peak_kib()
loaded = base
if {generate}:
    from spade_gym.policies import SamplingParams, load_policy
    policy = load_policy("default")
    loaded = peak_kib()
    prompts = [[{{"role": "user", "content": f"Tell me a long story about dragon {{i}}."}}] for i in range(32)]
    out = policy.generate(prompts, SamplingParams(temperature=1.0, max_new_tokens={tokens}, seed=0))
    assert len(out) == 32
print(json.dumps({{"imports_kib": base, "loaded_kib": loaded, "peak_kib": peak_kib()}}))
"""


def test_peak_memory_of_generation(benchmark: Any, report: Callable[..., None]) -> None:
    figures: dict[str, Any] = {}

    def measure() -> None:
        figures["baseline"] = _run_python(_RSS.format(generate=False, tokens=NEW_TOKENS))
        figures["policy"] = _run_python(_RSS.format(generate=True, tokens=NEW_TOKENS))

    benchmark.pedantic(measure, rounds=1, iterations=1)
    gib = 1024 * 1024
    peak, after_load = figures["policy"]["peak_kib"] / gib, figures["policy"]["loaded_kib"] / gib
    baseline = figures["baseline"]["peak_kib"] / gib
    report(
        f"peak RSS, load + batch 32 x {NEW_TOKENS} tokens: {peak:.2f} GiB (target < 2 GiB: "
        f"{'met' if peak < 2 else 'MISSED'}); after load {after_load:.2f} GiB; import torch+transformers alone "
        f"{baseline:.2f} GiB ({peak / baseline:.1f}x)",
        peak_rss_gib=peak,
        loaded_rss_gib=after_load,
        baseline_rss_gib=baseline,
    )


_LOAD = """
import json, time
started = time.perf_counter()
import torch, transformers
from transformers import AutoModelForCausalLM, AutoTokenizer
from spade_gym.policies.embedded import embedded_model_dir
imports = time.perf_counter() - started
started = time.perf_counter()
folder = embedded_model_dir(progress=False)
resolve = time.perf_counter() - started
started = time.perf_counter()
if {bare}:
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(folder)
else:
    from spade_gym.policies import load_policy
    load_policy("default")
load = time.perf_counter() - started
print(json.dumps({{"imports_s": imports, "resolve_s": resolve, "load_s": load}}))
"""


def test_conversion_and_cached_load(benchmark: Any, report: Callable[..., None]) -> None:
    figures: dict[str, Any] = {}

    def measure() -> None:
        with tempfile.TemporaryDirectory(prefix="spade-bench-cache-") as cache:
            env = {"SPADE_CACHE": cache}
            figures["first"] = _run_python(_LOAD.format(bare=False), env)
            figures["cached"] = [_run_python(_LOAD.format(bare=False), env) for _ in range(2)]
            figures["bare"] = [_run_python(_LOAD.format(bare=True), env) for _ in range(2)]

    benchmark.pedantic(measure, rounds=1, iterations=1)
    conversion = figures["first"]["resolve_s"]
    cached = min(f["load_s"] for f in figures["cached"])  # load_policy("default"), the cache lookup included
    imports = min(f["imports_s"] for f in figures["cached"])
    cold = min(f["imports_s"] + f["resolve_s"] + f["load_s"] for f in figures["cached"])
    bare = min(f["load_s"] for f in figures["bare"])
    report(
        f"first use: GGUF conversion {conversion:.1f} s (once); cached load_policy('default') {cached:.2f} s "
        f"(target < 5 s: {'met' if cached < 5 else 'MISSED'}) vs bare from_pretrained + tokenizer {bare:.2f} s "
        f"({cached / bare:.2f}x); a fresh process also imports torch and transformers first: {imports:.1f} s, "
        f"{cold:.1f} s in all",
        conversion_s=conversion,
        cached_load_s=cached,
        import_s=imports,
        cold_process_s=cold,
        bare_load_s=bare,
        ratio_to_bare=cached / bare,
    )
