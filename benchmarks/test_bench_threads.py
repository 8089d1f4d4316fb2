"""Generation speed by torch thread count and OpenMP wait policy, alone and beside a competing process.

One torch thread had measured 4-10x faster than two on a loaded 2-core machine. Cause:
torch's OpenMP runtime (GNU libgomp) spins for a while when its threads wait at a barrier
(``OMP_WAIT_POLICY`` unset), so when another process holds a core, the spinning
thread burns the time slice the working one needs. :mod:`spade_gym.policies.transformers` sets
``OMP_WAIT_POLICY=PASSIVE`` before torch is first imported (unless the variable is set).

Each configuration runs in a fresh process (the wait policy is read when torch loads): the embedded
model generates a batch of 8 greedy completions of 32 tokens, the median of 3 rounds. "Loaded"
means a second process running the same kind of work (torch with its default settings, two
threads) for the whole measurement. Reported, never asserted: ratios against torch's default
(``OMP_WAIT_POLICY`` unset, all cores) in the same run.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("torch")

_CHILD = r"""
import json, os, statistics, sys, time
import torch
from spade_gym.policies import SamplingParams, load_policy
threads, rounds = int(sys.argv[1]), int(sys.argv[2])
if threads:
    torch.set_num_threads(threads)
policy = load_policy("default", prefix_cache_mb=0)
prompts = [[{"role": "user", "content": f"Count to {i} and say why numbers matter in daily life."}] for i in range(8)]
sampling = SamplingParams(temperature=0.0, max_new_tokens=32)
policy.generate(prompts[:1], sampling)
times = []
for _ in range(rounds if rounds else 10**9):
    began = time.perf_counter()
    policy.generate(prompts, sampling)
    times.append(time.perf_counter() - began)
print(json.dumps({"median_s": statistics.median(times), "threads": torch.get_num_threads()}))
"""


def _env(wait_policy: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("OMP_WAIT_POLICY", None)
    if wait_policy != "unset":  # unset: libgomp's default (spin a while, then sleep)
        env["OMP_WAIT_POLICY"] = wait_policy
    return env


def _measure(wait_policy: str, threads: int) -> dict[str, Any]:
    done = subprocess.run(
        [sys.executable, "-c", _CHILD, str(threads), "3"],
        env=_env(wait_policy),
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


CONFIGS = (("unset", 0), ("PASSIVE", 0), ("unset", 1))


@pytest.mark.long
@pytest.mark.parametrize("loaded", [False, True], ids=["alone", "loaded"])
def test_generation_by_wait_policy_and_threads(loaded: bool, report: Callable[..., None], benchmark: Any) -> None:
    competitor = None
    if loaded:  # an ordinary torch job beside us: default settings, all cores, forever
        competitor = subprocess.Popen(
            [sys.executable, "-c", _CHILD, "0", "0"],
            env=_env("unset"),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    try:
        results = {f"{policy}/{threads or 'all'}": _measure(policy, threads) for policy, threads in CONFIGS}
    finally:
        if competitor is not None:
            competitor.kill()
            competitor.wait()
    base = results["unset/all"]["median_s"]
    figures = {f"{name}_s": r["median_s"] for name, r in results.items()}
    ratios = {f"{name}_speedup": base / r["median_s"] for name, r in results.items() if name != "unset/all"}
    benchmark.pedantic(lambda: None, rounds=1, iterations=1)
    report(
        ("beside a competing torch process: " if loaded else "alone: ")
        + ", ".join(f"{name} {r['median_s']:.2f} s" for name, r in results.items())
        + " (batch 8 x 32 tokens); speed-up over the default (unset/all): "
        + ", ".join(f"{k.removesuffix('_speedup')} {v:.2f}x" for k, v in ratios.items()),
        **figures,
        **ratios,
    )
    assert all(r["median_s"] > 0 for r in results.values())
