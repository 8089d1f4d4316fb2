"""Speed of one Designer step with the embedded model on this CPU.

Reported, never asserted: the wall time of a step split into generation (the Designer writing a
program), validation (the gate, two sandbox workers) and regret estimation (the Agent's 2k episodes),
plus registration. Two steps are measured: :func:`~spade_gym.designer.design` with the embedded
model as Designer (what the 135M model writes is usually refused, so this step is generation plus
a short validation), and :func:`~spade_gym.designer.evaluate_completion` of a known-good program
with the embedded model as Agent (validation, regret and registration, no generation). The shares
are ratios within the same run; the baseline of the second step is the validation time.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from spade_gym.agent import RolloutConfig  # noqa: E402
from spade_gym.designer import DesignerConfig, build_prompt, design, evaluate_completion  # noqa: E402
from spade_gym.policies import SamplingParams, load_policy  # noqa: E402
from spade_gym.registry.gymnasium import open_registry  # noqa: E402

DESIGNER_TOKENS, AGENT_TOKENS, K = 256, 32, 2
PROGRAM = (Path(__file__).resolve().parent.parent / "examples" / "programs" / "arithmetic_chain.py").read_text()
DOCUMENT = "A bakery sells loaves at 3 euros and rolls at 1 euro; an order's total is the sum of its items."


def _config() -> DesignerConfig:
    return DesignerConfig(
        k=K,
        rollout=RolloutConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=AGENT_TOKENS)),
        temperature=0.3,
        max_new_tokens=DESIGNER_TOKENS,
    )


def test_designer_step_with_the_embedded_designer(benchmark: Any, report: Callable[..., None], tmp_path: Path) -> None:
    policy = load_policy("default")
    registry = open_registry(tmp_path / "registry", seed_library=True)
    prompt = build_prompt(DOCUMENT, [], setting="reasoning")
    results: dict[str, Any] = {}

    def run() -> None:
        results["outcome"] = design(policy, prompt, registry=registry, config=_config(), seed=0, repairs=0)

    benchmark.pedantic(run, rounds=1, iterations=1)
    o = results["outcome"]
    total = benchmark.stats.stats.max
    staged = o.generation_s + o.validation_s + o.regret_s + o.registry_s
    report(
        f"design step ({DESIGNER_TOKENS} new tokens, outcome {o.report.category}): {total:.1f} s = generation "
        f"{o.generation_s:.1f} s + validation {o.validation_s:.2f} s + regret {o.regret_s:.1f} s + registry "
        f"{o.registry_s:.2f} s + other {max(total - staged, 0):.2f} s; generation {o.generation_s / total:.1%} of the step",
        total_s=total,
        generation_s=o.generation_s,
        validation_s=o.validation_s,
        regret_s=o.regret_s,
        registry_s=o.registry_s,
    )


def test_designer_step_of_a_valid_program_with_the_embedded_agent(
    benchmark: Any, report: Callable[..., None], tmp_path: Path
) -> None:
    agent = load_policy("default")
    completion = f"Here it is.\n```python\n{PROGRAM}```"
    results: dict[str, Any] = {}
    counter = iter(range(100))

    def run() -> None:
        registry = open_registry(tmp_path / f"registry{next(counter)}", seed_library=False)
        results["outcome"] = evaluate_completion(completion, None, registry=registry, agent=agent, config=_config())

    benchmark.pedantic(run, rounds=1, iterations=1)
    o = results["outcome"]
    assert o.accepted, o.report.feedback()
    total = benchmark.stats.stats.max
    staged = o.validation_s + o.regret_s + o.registry_s
    report(
        f"accepted program, regret with k={K} ({AGENT_TOKENS} tokens a turn): {total:.1f} s = validation "
        f"{o.validation_s:.2f} s + regret {o.regret_s:.1f} s + registry {o.registry_s:.3f} s + other "
        f"{max(total - staged, 0):.3f} s; regret / validation = {o.regret_s / o.validation_s:.1f}x",
        total_s=total,
        validation_s=o.validation_s,
        regret_s=o.regret_s,
        registry_s=o.registry_s,
    )


#: G designs of up to GROUP_TOKENS new tokens; the target size is 1,536 (SPADE_BENCH_DESIGN_TOKENS=1536,
#: about 15 minutes here), CI's 256
GROUP, GROUP_TOKENS = 4, int(os.environ.get("SPADE_BENCH_DESIGN_TOKENS", "256"))


@pytest.mark.long
def test_a_group_of_designs_on_a_memory_prompt(benchmark: Any, report: Callable[..., None], tmp_path: Path) -> None:
    """G=4 designs on one memory prompt, with key/value reuse (the
    prompt prefilled once for the group) against the uncached path (prefilled G times) and a
    decode-only floor, in the same run on the same seed (target: at least 2x faster than uncached)."""
    from test_bench_rollout import decode_floor

    from spade_gym.memory import EnvironmentMemory

    policy = load_policy("default")
    registry = open_registry(tmp_path / "registry", seed_library=True)
    memory = EnvironmentMemory(registry).select(0, setting="reasoning")
    prompt = build_prompt(DOCUMENT, memory, setting="reasoning", mode="edit")
    sampling = SamplingParams(temperature=0.5, n=GROUP, max_new_tokens=GROUP_TOKENS, seed=0)
    cache, policy.prefix_cache = policy.prefix_cache, None
    uncached = policy.generate([prompt.messages], sampling)
    uncached_s = policy.last_stats["wall_s"]
    policy.prefix_cache = cache
    assert cache is not None
    results: dict[str, Any] = {}

    def run() -> None:
        cache.clear()
        results["out"] = policy.generate([prompt.messages], sampling)

    benchmark.pedantic(run, rounds=1, iterations=1)
    cached_s, prompt_tokens = policy.last_stats["wall_s"], policy.last_stats["prompt_tokens"] // GROUP
    reused = policy.last_stats["reused_prompt_tokens"]
    new_tokens = [c.num_tokens for c in results["out"]]
    floor = decode_floor(policy, [(GROUP, max(new_tokens))])
    import torch

    started = time.perf_counter()  # one prefill of the prompt: what reuse cannot remove
    with torch.inference_mode():
        policy.model(input_ids=torch.tensor([results["out"][0].prompt_token_ids]), logits_to_keep=1)
    prefill_s = time.perf_counter() - started
    speedup = uncached_s / cached_s
    bound = uncached_s / (floor + prefill_s)  # a reuse that cost only the floor and one prefill
    report(
        f"G={GROUP} designs on a {prompt_tokens}-token memory prompt (edit mode), up to {GROUP_TOKENS} new tokens "
        f"({new_tokens} generated; uncached {[c.num_tokens for c in uncached]}): {cached_s:.1f} s with key/value reuse "
        f"({reused} prompt tokens read from the cache) vs {uncached_s:.1f} s uncached: {speedup:.2f}x (target >= 2x: "
        f"{'met' if speedup >= 2 else 'MISSED'}); decode-only floor {floor:.1f} s ({cached_s / floor:.2f}x the floor); "
        f"one prefill of the prompt {prefill_s:.1f} s; the rest, {max(cached_s - floor - prefill_s, 0):.1f} s, is "
        f"decoding over the prompt's keys and values, which the 4-token floor does not attend to; a reuse "
        f"costing only the floor and one prefill would be {bound:.2f}x faster than uncached",
        prompt_tokens=prompt_tokens,
        cached_s=cached_s,
        uncached_s=uncached_s,
        decode_floor_s=floor,
        prefill_s=prefill_s,
        speedup_over_uncached=speedup,
        best_possible_speedup=bound,
    )


#: several prompts of one iteration: PROMPTS prompts of GROUP_OF designs, ROW_TOKENS new tokens each
PROMPTS, GROUP_OF, ROW_TOKENS = 4, 2, 64


def test_the_designs_of_several_prompts_in_one_call(
    benchmark: Any, report: Callable[..., None], tmp_path: Path
) -> None:
    """Self-play samples the designs of an iteration's prompts in one
    ``generate`` call (full batches) instead of one call per prompt; both with key/value reuse,
    the same prompts and the same settings, in the same run. Reported, not asserted."""
    from spade_gym.memory import EnvironmentMemory

    policy = load_policy("default")
    registry = open_registry(tmp_path / "registry", seed_library=True)
    memory = EnvironmentMemory(registry)
    prompts = [
        build_prompt(
            f"{DOCUMENT} Order {p}: {p + 2} loaves.",
            memory.select(p, setting="reasoning"),
            setting="reasoning",
            mode="edit",
        )
        for p in range(PROMPTS)
    ]
    sampling = SamplingParams(temperature=0.5, n=GROUP_OF, max_new_tokens=ROW_TOKENS, seed=0)
    cache = policy.prefix_cache
    assert cache is not None
    cache.clear()
    started = time.perf_counter()
    one_by_one = [c for prompt in prompts for c in policy.generate([prompt.messages], sampling)]
    per_prompt_s = time.perf_counter() - started
    results: dict[str, Any] = {}

    def run() -> None:
        cache.clear()
        results["out"] = policy.generate([p.messages for p in prompts], sampling)

    benchmark.pedantic(run, rounds=1, iterations=1)
    batched_s = policy.last_stats["wall_s"]
    tokens = sum(c.num_tokens for c in results["out"]), sum(c.num_tokens for c in one_by_one)
    report(
        f"{PROMPTS} prompts x {GROUP_OF} designs, up to {ROW_TOKENS} new tokens: one call {batched_s:.1f} s "
        f"({tokens[0]} tokens) vs one call per prompt {per_prompt_s:.1f} s ({tokens[1]} tokens): "
        f"{per_prompt_s / batched_s:.2f}x",
        batched_s=batched_s,
        per_prompt_s=per_prompt_s,
        speedup=per_prompt_s / batched_s,
    )
