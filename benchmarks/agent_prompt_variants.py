"""How much of the Agent's prompt the environment's description is worth: held-out success and
format compliance with the description in full, cut to its first clause, or left out.

    python benchmarks/agent_prompt_variants.py [--seeds 48] [--variants full,clause,none] [--out FILE.json]

For each variant, the demo's Agent (``examples/selfplay_cpu.yaml``: the embedded model, its LoRA
adapters and the Agent's part of the cold start, 16 steps on the oracle's actions, trained on
prompts of that variant; cached per variant like any cold start), plays ``--seeds`` held-out seeds (``>= 2**40``, never a cold-start
seed) of each graded seed environment without the hint, sampled at the Agent's temperature
(:data:`~spade_gym.agent.AGENT_TEMPERATURE`), 48 new tokens a turn, at most 2 turns (the demo's
settings). Every variant plays the same seeds with the same sampling seeds, so differences are
paired. Prints, per variant: success and format compliance with 95% intervals (Wilson), mean
prompt tokens of a first turn, and the paired difference in success from ``full`` (normal
interval over the per-episode differences).
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


#: What the Agent's prompt shows of the description: all of it, the package's own choice
#: (``spade_gym.agent.environment_summary``: its first clause), or nothing.
VARIANTS = ("full", "clause", "none")


def wilson(successes: int, n: int, z: float = 1.96) -> tuple[float, float]:
    if n == 0:
        return (math.nan, math.nan)
    p = successes / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return (centre - half, centre + half)


def run_variant(name: str, seeds: int) -> dict:
    from spade_gym import agent
    from spade_gym.agent import Episode, RolloutConfig, rollout
    from spade_gym.policies.base import SamplingParams
    from spade_gym.registry.gymnasium import bundled_registry_path, open_registry
    from spade_gym.trainer.config import SelfPlayConfig
    from spade_gym.trainer.selfplay import load_config_policy
    from spade_gym.trainer.warmstart import run_warmstart

    inner = agent.environment_summary
    cut: Callable[[str], str] = {"full": str.strip, "clause": inner, "none": lambda d: ""}[name]
    # the rollout and the cold start both build the Agent's prompt through environment_summary
    agent.environment_summary = cut  # type: ignore[assignment]
    try:
        config = SelfPlayConfig.from_yaml(ROOT / "examples" / "selfplay_cpu.yaml").with_overrides(
            ["warmstart.designer_examples=0", "warmstart.designer_steps=0"]  # the Agent's part of the cold start
        )
        policy = load_config_policy(config, config.policy.spec)
        result = run_warmstart(config, policy, say=lambda line: print(f"[{name}] {line}", flush=True))
        registry = open_registry(bundled_registry_path())
        records = [r for r in registry.records() if "graded" in (getattr(r, "tags", None) or ())]
        programs = {r.name: r.program() for r in records}
        episodes = [Episode(programs[n], 2**40 + 7919 * k) for n in sorted(programs) for k in range(seeds)]
        sampling = SamplingParams(temperature=agent.AGENT_TEMPERATURE, max_new_tokens=48, seed=12345)
        trajectories, stats = rollout(episodes, policy, RolloutConfig(sampling=sampling, max_turns=2))
    finally:
        agent.environment_summary = inner  # type: ignore[assignment]
    first = [len(t.turns[0].prompt_token_ids or ()) for t in trajectories if t.turns]
    turns = [turn for t in trajectories for turn in t.turns]
    success = [int(t.success) for t in trajectories]
    per_env = {n: 0 for n in programs}
    for episode, ok in zip(episodes, success, strict=True):
        per_env[next(n for n, p in programs.items() if p is episode.env)] += ok
    return {
        "variant": name,
        "cold_start_cached": result.cached,
        "episodes": len(trajectories),
        "success": success,
        "success_rate": sum(success) / len(success),
        "success_ci": wilson(sum(success), len(success)),
        "format_ok": sum(t.format_ok for t in turns),
        "turns": len(turns),
        "format_ci": wilson(sum(t.format_ok for t in turns), len(turns)),
        "first_turn_prompt_tokens": statistics.fmean(first),
        "success_per_env": per_env,
        "generation_s": stats.generation_s,
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=32, help="held-out seeds per graded environment")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--out", type=Path, default=None, help="write every figure as JSON")
    args = parser.parse_args(argv)
    results = [run_variant(name, args.seeds) for name in args.variants.split(",")]
    base = next((r for r in results if r["variant"] == "full"), results[0])
    for r in results:
        lo, hi = r["success_ci"]
        flo, fhi = r["format_ci"]
        diffs = [a - b for a, b in zip(r["success"], base["success"], strict=True)]
        mean, se = statistics.fmean(diffs), statistics.stdev(diffs) / math.sqrt(len(diffs))
        r["paired_diff"] = (mean, mean - 1.96 * se, mean + 1.96 * se)
        print(
            f"{r['variant']:>6}: success {r['success_rate']:.3f} [{lo:.3f}, {hi:.3f}] "
            f"format {r['format_ok'] / r['turns']:.3f} [{flo:.3f}, {fhi:.3f}] "
            f"first-turn prompt {r['first_turn_prompt_tokens']:.0f} tokens, "
            f"vs full {mean:+.3f} [{mean - 1.96 * se:+.3f}, {mean + 1.96 * se:+.3f}], per env {r['success_per_env']}",
            flush=True,
        )
    if args.out is not None:
        args.out.write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main(sys.argv[1:])
