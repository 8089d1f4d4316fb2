"""SPADE's learning benchmark: self-play against the designer-off baseline from one cold start, at
equal Agent steps and at equal policy tokens, on held-out episodes: unseen seeds of the training
environments, unseen difficulty levels, whole unseen environments.

    python examples/learning_curve.py            # the full benchmark (25 min measured on 2 cores, cold start cached)
    python examples/learning_curve.py --short    # the CI-sized run (estimated 5 min on 2 cores)
    python examples/learning_curve.py --set agent.credit=turn --out runs/lc-turn

Both arms run the CPU example (examples/selfplay_cpu.yaml) with its held-out evaluation; the
baseline turns the Designer off. Rerunning with the same --out resumes both runs and reuses
finished evaluations. Writes OUT/learning.md (the tables), OUT/learning.json (every figure) and
OUT/learning.png (the curves over Agent steps with 95% bands, and the paired differences).
"""

from __future__ import annotations

import argparse

from spade_gym.evaluation.learning import learning_benchmark
from spade_gym.trainer.config import ConfigError, SelfPlayConfig

parser = argparse.ArgumentParser(
    description=__doc__.split("\n\n")[0].replace("\n", " "), formatter_class=argparse.ArgumentDefaultsHelpFormatter
)
parser.add_argument("--config", default="examples/selfplay_cpu.yaml", help="the self-play YAML config")
parser.add_argument("--out", default="runs/learning-curve", help="folder for both runs and the results")
parser.add_argument(
    "--iterations", type=int, default=2, help="self-play iterations (design phases; 2 took 25 minutes on 2 cores)"
)
parser.add_argument("--every", type=int, default=1, help="a point of the curve every N iterations")
parser.add_argument("--minutes", type=float, default=45.0, help="the budget each run is checked against")
parser.add_argument("--short", action="store_true", help="CI size: see SHORT")
parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
args = parser.parse_args()

#: What --short changes: one design phase, fewer Agent steps, wider intervals (CI checks the
#: pipeline end to end; its figures are too small for a claim).
SHORT = [
    "agent.updates_per_iteration=2",
    "agent.episodes_per_env=4",
    "agent.replay_seeds=4",
    "eval.half_width=0.35",
    "eval.greedy=false",
    "designer.group_size=2",
    "warmstart.agent_steps=2",
    "warmstart.designer_examples=1",
    "warmstart.designer_steps=1",
]
#: The full size: about 150 held-out episodes a part (a 95% interval of +-0.08: the gains at this
#: scale are about 0.1-0.2), sampled only.
FULL = ["eval.half_width=0.08", "eval.greedy=false"]
overrides = [
    'eval.parts=["seeds", "levels", "envs"]',
    f"run.iterations={1 if args.short else args.iterations}",
    f"eval.every={args.every}",
    f"run.budget_minutes={args.minutes}",
    *(SHORT if args.short else FULL),
    *args.set,
]
try:
    config = SelfPlayConfig.from_yaml(args.config).with_overrides(overrides)
    result = learning_benchmark(config, args.out)
except (ConfigError, ValueError) as exc:
    parser.error(str(exc))
print(result.markdown())
print(f"written: {args.out}/learning.md, learning.json, learning.png")
