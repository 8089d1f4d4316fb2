"""One iteration of the CPU self-play example (``examples/selfplay_cpu.yaml``) with the embedded model.

Reported, never asserted: the iteration's wall time split by phase (design generation, validation,
regret, replay rollouts, update, checkpoint), the peak resident memory of the process (target below
6 GiB), and the share of the iteration spent outside generation and the backward pass (target below
10%). The iteration runs in a fresh subprocess, so its peak memory is its own; generation time is
measured around every ``policy.generate`` call of the run.

Two cases:

- ``seed-library``: the example as it is. The 135M model solves none of the seed environments and
  writes no valid program, so every group's rewards are equal, the advantages zero, and the update
  has nothing to train on (no backward pass).
  It also runs once without key/value reuse (``policy.prefix_cache = None``), for the ratio.
- ``with-update``: the same config on a registry holding one environment whose return depends on the
  parity of the answer's length, so the model's sampled answers give varied returns and the update
  runs forward, backward and optimizer steps on the embedded model: the cost of a real update.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from programs import EVEN_LENGTH

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = """
import json, resource, sys, time
from spade_gym.trainer.config import SelfPlayConfig
from spade_gym.trainer.run import RunDir
from spade_gym.trainer.selfplay import SelfPlay

out = sys.argv[1]
# one iteration's cost, without the cold start (its cost is in test_bench_learning.py's run)
config = SelfPlayConfig.from_yaml(sys.argv[2]).with_overrides(
    ["run.iterations=1", f"run.out={out}", "warmstart.enabled=false"]
)
run = RunDir.create(out, config)
if len(sys.argv) > 3 and sys.argv[3] != "--no-prefix-cache":  # a registry holding only this program
    from spade_gym.program import EnvProgram
    from spade_gym.registry.gymnasium import open_registry
    registry = open_registry(run.registry_dir, seed_library=False)
    registry.add(EnvProgram.from_file(sys.argv[3]), name="EvenLength", setting="reasoning", max_turns=1, description="parity")
    registry.close()
loop = SelfPlay(config, run, say=lambda _: None)  # the policy as the config says (LoRA adapters)
policy = loop.generator
if len(sys.argv) > 3 and sys.argv[3] == "--no-prefix-cache":  # the uncached path, for the ratio
    policy.prefix_cache = None
generation = [0.0, 0]
inner = policy.generate
def timed(prompts, sampling=None):
    began = time.perf_counter()
    try:
        return inner(prompts, sampling)
    finally:
        generation[0] += time.perf_counter() - began
        generation[1] += 1
policy.generate = timed
began = time.perf_counter()
(result,) = loop.train()
wall = time.perf_counter() - began
loop.close()
peak_kib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
print(json.dumps({"wall_s": wall, "generation_s": generation[0], "generate_calls": generation[1],
                  "peak_rss_bytes": peak_kib * 1024, "metrics": result.metrics}, default=str))
"""


@pytest.mark.parametrize("case", ["seed-library", "with-update"])
def test_one_iteration_of_the_cpu_example(
    benchmark: Any, report: Callable[..., None], tmp_path: Path, case: str
) -> None:
    results: dict[str, Any] = {}
    args = [str(tmp_path / "run"), str(ROOT / "examples" / "selfplay_cpu.yaml")]
    if case == "with-update":
        (tmp_path / "even_length.py").write_text(EVEN_LENGTH)
        args.append(str(tmp_path / "even_length.py"))

    def iteration(*extra: str) -> dict[str, Any]:
        done = subprocess.run(
            [sys.executable, "-c", SCRIPT, *args, *extra],
            capture_output=True,
            text=True,
            timeout=1800,
            env=os.environ.copy(),
        )
        assert done.returncode == 0, done.stderr[-3000:]
        figures: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
        return figures

    uncached = ""
    if case == "seed-library":  # the same iteration (same seeds) without key/value reuse
        plain = iteration("--no-prefix-cache")
        args[0] = str(tmp_path / "run-cached")
        uncached = f"; without key/value reuse {plain['wall_s']:.0f} s, generation {plain['generation_s']:.0f} s"

    def run() -> None:
        results.update(iteration())

    benchmark.pedantic(run, rounds=1, iterations=1)
    if uncached:  # sampled designs and episodes differ in rounding, so the samples trained may differ
        uncached += (
            f" ({plain['generation_s'] / results['generation_s']:.2f}x the generation time with reuse; trained samples "
            f"{plain['metrics'].get('train/agent/samples', 0)} agent + {plain['metrics'].get('train/designer/samples', 0)} "
            "designer)"
        )
    m = results["metrics"]
    wall, generation = results["wall_s"], results["generation_s"]
    backward = float(m.get("train/backward_s", 0.0))
    outside = max(wall - generation - backward, 0.0) / wall
    peak = results["peak_rss_bytes"] / 2**30
    phases = ", ".join(f"{k.removeprefix('time/')} {float(v):.1f} s" for k, v in m.items() if k.startswith("time/"))
    report(
        f"one iteration ({case}): {wall:.0f} s ({phases}){uncached}; generation {generation:.0f} s in {results['generate_calls']} calls, "
        f"backward {backward:.1f} s; outside generation and backward {outside:.1%} (target < 10%: "
        f"{'met' if outside < 0.10 else 'MISSED'}); peak RSS {peak:.2f} GiB (target < 6 GiB: "
        f"{'met' if peak < 6 else 'MISSED'}); trained samples {m.get('train/agent/samples', 0)} agent + "
        f"{m.get('train/designer/samples', 0)} designer, optimizer steps {m.get('train/optimizer_steps', 0)}",
        wall_s=wall,
        generation_s=generation,
        backward_s=backward,
        update_s=float(m.get("time/update", 0.0)),
        outside_share=outside,
        peak_rss_gib=peak,
    )
