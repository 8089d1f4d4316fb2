"""How much does the Agent's GRPO update learn, and which choices help? Designer-off runs of the CPU
example, one per variant, from the cold start, scored on unseen seeds (and unseen difficulty
levels) of the training environments before and after the same number of Agent steps.

    python examples/in_pool_learning.py --steps 8                                  # the schedule alone
    python examples/in_pool_learning.py --variant turn=agent.credit=turn           # per-turn credit
    python examples/in_pool_learning.py --variant linear='policy.lora={r: 16, lora_alpha: 32, target_modules: all-linear}'

Every variant runs the same config plus its overrides (``name=KEY=VALUE;KEY=VALUE``); variants
with the same starting weights share the evaluation before training, and every difference is
paired by held-out episode. Writes OUT/in_pool.md and OUT/in_pool.json.
"""

from __future__ import annotations

import argparse
import json
import shutil
import time
from pathlib import Path

from spade_gym.evaluation.base import compare_results
from spade_gym.evaluation.heldout import PARTS, save_path
from spade_gym.evaluation.learning import _digest
from spade_gym.trainer.config import ConfigError, SelfPlayConfig
from spade_gym.trainer.run import RunDir
from spade_gym.trainer.selfplay import SelfPlay

parser = argparse.ArgumentParser(
    description=__doc__.split("\n\n")[0].replace("\n", " "), formatter_class=argparse.ArgumentDefaultsHelpFormatter
)
parser.add_argument("--config", default="examples/selfplay_cpu.yaml", help="the self-play YAML config")
parser.add_argument("--out", default="runs/in-pool", help="folder of the runs (reruns resume them)")
parser.add_argument("--steps", type=int, default=8, help="Agent steps of each variant")
parser.add_argument("--parts", default="seeds,levels", help="held-out parts scored")
parser.add_argument("--variant", action="append", default=[], metavar="NAME=KEY=VALUE[;KEY=VALUE]", help="a variant")
parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="override for every variant")
args = parser.parse_args()

variants = {"base": []}
for spec in args.variant:
    name, _, overrides = spec.partition("=")
    variants[name] = [o for o in overrides.split(";") if o]
parts = [p.strip() for p in args.parts.split(",") if p.strip()]
common = [
    "run.designer=off",
    "run.iterations=1",
    f"agent.updates_per_iteration={args.steps}",
    "eval.enabled=true",
    f"eval.parts={json.dumps(parts)}",
    "eval.greedy=false",
    "run.budget_minutes=null",
    *args.set,
]
out = Path(args.out)
rows: dict[str, dict[str, object]] = {}
afters, befores, digests = {}, {}, {}
for name, overrides in variants.items():
    path = out / name
    try:
        config = SelfPlayConfig.from_yaml(args.config).with_overrides([*common, *overrides, f"run.out={path}"])
        loop = (
            SelfPlay.resume(path) if (path / "config.yaml").is_file() else SelfPlay(config, RunDir.create(path, config))
        )
    except (ConfigError, ValueError) as exc:
        parser.error(f"variant {name}: {exc}")
    began = time.perf_counter()
    digests[name] = digest = loop.run.path.joinpath("start.sha256")
    if not digest.is_file():
        digest.write_text(_digest(loop.policy))
    same = next((n for n in digests if n != name and digests[n].read_text() == digest.read_text()), None)
    if same is not None and not save_path(path, "before").is_file():  # one start, one evaluation before
        save_path(path, "before").parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(save_path(out / same, "before"), save_path(path, "before"))
    loop.train()
    befores[name], afters[name] = loop.evaluate("before"), loop.evaluate("after")
    rows[name] = {
        "overrides": overrides,
        "agent_steps": loop.agent_steps,
        "minutes": (time.perf_counter() - began) / 60,
    }
    loop.close()

lines = [
    f"Designer-off runs of {args.config}, {args.steps} Agent steps each; held-out success sampled at the Agent's "
    "temperature, 95% intervals, differences paired by held-out episode.",
    "",
    "| variant | part | n | before | after | gain | minus base |",
    "|---|---|---|---|---|---|---|",
]
for name in variants:
    for part in parts:
        if part not in afters[name].sampled:
            continue
        b, a = befores[name].sampled[part], afters[name].sampled[part]
        gain = compare_results(a, b)
        vs = compare_results(a, afters["base"].sampled[part]) if name != "base" else None
        rows[name][part] = {"before": b.score, "after": a.score, "gain": [gain.difference, gain.low, gain.high]}
        shown_vs = f"{vs.difference:+.3f} [{vs.low:+.3f}, {vs.high:+.3f}]" if vs else "-"
        lines.append(
            f"| {name} | {PARTS[part]} | {b.n} | {b.score:.3f} [{b.interval()[0]:.3f}, {b.interval()[1]:.3f}] | "
            f"{a.score:.3f} [{a.interval()[0]:.3f}, {a.interval()[1]:.3f}] | "
            f"{gain.difference:+.3f} [{gain.low:+.3f}, {gain.high:+.3f}] | {shown_vs} |"
        )
lines += [
    "",
    "Per environment (which ones the model learns):",
    "",
    "| variant | environment | n | before | after | gain |",
]
lines.append("|---|---|---|---|---|---|")
for name in variants:
    for part in parts:
        if part not in afters[name].sampled:
            continue
        before_env, after_env = befores[name].sampled[part].by("env"), afters[name].sampled[part].by("env")
        for env, a in after_env.items():
            b = before_env[env]
            gain = compare_results(a, b)
            rows[name][f"{part}/{env}"] = {
                "before": b.score,
                "after": a.score,
                "gain": [gain.difference, gain.low, gain.high],
            }
            lines.append(
                f"| {name} | {env} | {b.n} | {b.score:.3f} | {a.score:.3f} | "
                f"{gain.difference:+.3f} [{gain.low:+.3f}, {gain.high:+.3f}] |"
            )
text = "\n".join(lines) + "\n"
print(text)
out.mkdir(parents=True, exist_ok=True)
(out / "in_pool.md").write_text(text)
(out / "in_pool.json").write_text(json.dumps(rows, indent=1))
print(f"written: {out / 'in_pool.md'}, {out / 'in_pool.json'}")
