"""Does the Agent's GRPO update move its greedy answers at all? The designer-off baseline trained
with the evaluation environments IN its pool, scored on their held-out seeds before and after.

    python examples/in_pool_learning.py --iterations 8                  # docs/learning.md figure (12 min on 2 cores)
    python examples/in_pool_learning.py --set train.learning_rate=3e-4 --set train.epochs=2

The learning benchmark (examples/learning_curve.py) holds whole environments out; this is the
easier question under it: if training on an environment does not move its held-out seeds, no
Designer can make it transfer to an unseen one. Seeds from 2**40 on are never trained on.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from spade_gym.evaluation import compare_results
from spade_gym.evaluation.learning import LearningSettings
from spade_gym.trainer.config import ConfigError, SelfPlayConfig
from spade_gym.trainer.run import RunDir
from spade_gym.trainer.selfplay import SelfPlay

parser = argparse.ArgumentParser(
    description=__doc__.split("\n\n")[0].replace("\n", " "), formatter_class=argparse.ArgumentDefaultsHelpFormatter
)
parser.add_argument("--config", default="examples/selfplay_cpu.yaml", help="the self-play YAML config")
parser.add_argument("--out", default="runs/in-pool", help="run folder (must not exist)")
parser.add_argument("--iterations", type=int, default=8, help="designer-off iterations")
parser.add_argument("--eval-envs", default="LargerOfTwo,ColorDoorRooms", help="environments scored (and trained on)")
parser.add_argument("--episodes", type=int, default=32, help="held-out seeds per evaluation environment")
parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
args = parser.parse_args()

envs = tuple(e.strip() for e in args.eval_envs.split(",") if e.strip())
# 5 environments x 8 episodes on 8 seeds per iteration; only the bundled evaluation set stays out
size = [
    "agent.replay_envs=5",
    "agent.episodes_per_env=8",
    "agent.replay_seeds=8",
    'run.held_out_envs=["InboxCodeRelay"]',
]
try:
    config = SelfPlayConfig.from_yaml(args.config).with_overrides(
        [*size, "run.designer=off", f"run.iterations={args.iterations}", f"run.out={args.out}", *args.set]
    )
    if set(envs) & set(config.run.held_out_envs):
        parser.error(f"--eval-envs {sorted(envs)} must be in the training pool; run.held_out_envs holds them")
    suite = LearningSettings(eval_envs=envs, episodes_per_env=args.episodes).suite()
    loop = SelfPlay(config, RunDir.create(args.out, config))
except (ConfigError, ValueError) as exc:
    parser.error(str(exc))
began = time.perf_counter()
before = suite.run(loop.policy)
loop.train()
after = suite.run(loop.policy)
gain = compare_results(after, before)
loop.close()
per_env: dict[str, dict[str, float]] = {}
for name, result in (("before", before), ("after", after)):
    for item in result.items:
        per_env.setdefault(item.metadata["env"], {}).setdefault(name, 0.0)
        per_env[item.metadata["env"]][name] += item.score / args.episodes
print(
    f"held-out seeds of {', '.join(envs)}: {before.score:.3f} -> {after.score:.3f}, "
    f"gain {gain.difference:+.3f} [{gain.low:+.3f}, {gain.high:+.3f}] (paired 95% CI, n={gain.n})"
)
for env, scores in sorted(per_env.items()):
    print(f"  {env}: {scores.get('before', 0):.3f} -> {scores.get('after', 0):.3f}")
summary = {
    "before": before.score,
    "after": after.score,
    "gain": gain.difference,
    "ci95": [gain.low, gain.high],
    "n": gain.n,
    "per_env": per_env,
    "overrides": [*size, *args.set],
    "seconds": time.perf_counter() - began,
}
(Path(args.out) / "in_pool.json").write_text(json.dumps(summary, indent=1))
print(f"written: {Path(args.out) / 'in_pool.json'}")
