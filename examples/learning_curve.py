"""SPADE's learning benchmark: held-out score before and after self-play and after the designer-off
baseline at equal policy tokens, with paired 95% intervals, the per-iteration curves and a plot.

    python examples/learning_curve.py --iterations 8 --episodes 64   # docs/learning.md's figures (25 min on 2 cores)
    python examples/learning_curve.py --short                 # the CI-sized run (a few minutes)
    python examples/learning_curve.py --config my.yaml --eval-envs A,B --episodes 32

The evaluation environments are added to `run.held_out_envs`, so no training step sees them, and
are played on held-out seeds. Both arms start from the same (cold-start) checkpoint. Rerunning with
the same --out resumes both runs and reuses finished evaluations. Writes OUT/learning.md (the
table), OUT/learning.json (every figure), OUT/learning.png and the held-out items per policy.
"""

from __future__ import annotations

import argparse

from spade_gym.evaluation.learning import LearningSettings, learning_benchmark
from spade_gym.policies import SamplingParams
from spade_gym.trainer.config import ConfigError, SelfPlayConfig

#: The held-out evaluation environments of the CPU benchmark: graded seed environments the 135M
#: model solves sometimes without the hint (measured: see docs/learning.md).
DEFAULT_EVAL_ENVS = "LargerOfTwo,ColorDoorRooms"

parser = argparse.ArgumentParser(
    description=__doc__.split("\n\n")[0].replace("\n", " "), formatter_class=argparse.ArgumentDefaultsHelpFormatter
)
parser.add_argument("--config", default="examples/selfplay_cpu.yaml", help="the self-play YAML config")
parser.add_argument("--out", default="runs/learning-curve", help="folder for both runs and the results")
parser.add_argument("--iterations", type=int, default=None, help="self-play iterations (default: the config's)")
parser.add_argument("--eval-envs", default=DEFAULT_EVAL_ENVS, help="held-out evaluation environments, comma-separated")
parser.add_argument("--episodes", type=int, default=32, help="held-out episodes (seeds) per evaluation environment")
parser.add_argument("--max-new-tokens", type=int, default=64, help="most new tokens per Agent turn at evaluation")
parser.add_argument(
    "--short", action="store_true", help="CI size: 1 iteration, a 3-step cold start, 4 episodes per environment"
)
parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
args = parser.parse_args()

#: What --short changes: the smallest run that still exercises every phase (CI checks the pipeline,
#: not the learning; its figures are far too small for a claim).
SHORT = [
    "run.iterations=1",
    "warmstart.agent_steps=2",
    "warmstart.designer_examples=1",
    "warmstart.designer_steps=1",
    "designer.group_size=2",
    "designer.max_new_tokens=700",
    "agent.replay_envs=1",
]
overrides = [*SHORT, *args.set] if args.short else list(args.set)
if args.iterations is not None:
    overrides.append(f"run.iterations={args.iterations}")
try:
    config = SelfPlayConfig.from_yaml(args.config).with_overrides(overrides)
    settings = LearningSettings(
        eval_envs=tuple(e.strip() for e in args.eval_envs.split(",") if e.strip()),
        episodes_per_env=4 if args.short else args.episodes,
        sampling=SamplingParams(temperature=0.0, max_new_tokens=args.max_new_tokens),
    )
    result = learning_benchmark(config, args.out, settings)
except (ConfigError, ValueError) as exc:
    parser.error(str(exc))
print(result.markdown())
print(f"written: {args.out}/learning.md, learning.json, learning.png")
