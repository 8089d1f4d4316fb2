"""The Designer's valid-design rate per mode: how often a design passes the validation gate.

    python examples/design_rate.py                                  # the CPU example's model and cold start
    python examples/design_rate.py --modes edit --prompts 6 --group 4
    python examples/design_rate.py --no-warmstart                   # the model as it is, no cold start
    python examples/design_rate.py --set policy.spec=Qwen/Qwen2.5-Coder-0.5B-Instruct

Builds the run exactly as `spade selfplay --config CONFIG` does (the cold start applied, cached),
then poses PROMPTS Designer prompts per mode from the run's seed library and samples GROUP designs
each with the config's Designer settings (edit mode: `designer.edit_max_new_tokens`). Every design
is extracted and validated against the run's registry (novelty included); nothing is registered and
no regret is measured. Prints per mode: designs, valid, the rate with its 95% Wilson interval, the
refusal categories, new tokens and seconds per design; writes OUT/design_rate.json and every
completion with its verdict to OUT/designs.jsonl.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from dataclasses import replace
from pathlib import Path

from spade_gym.designer import MODES, extract_design, propose_group
from spade_gym.evaluation import confidence_interval
from spade_gym.program import EnvProgram
from spade_gym.trainer.config import ConfigError, SelfPlayConfig
from spade_gym.trainer.run import RunDir
from spade_gym.trainer.selfplay import SelfPlay
from spade_gym.validation import validate

parser = argparse.ArgumentParser(
    description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
)
parser.add_argument("--config", default="examples/selfplay_cpu.yaml", help="the self-play YAML config")
parser.add_argument("--out", default="runs/design-rate", help="folder for the run, the results and the designs")
parser.add_argument("--modes", default="edit,write", help="modes to measure, comma-separated (edit, write)")
parser.add_argument("--prompts", type=int, default=4, help="Designer prompts per mode (each a new document/parent)")
parser.add_argument("--group", type=int, default=None, help="designs per prompt (default: designer.group_size)")
parser.add_argument("--seed", type=int, default=0, help="seed of the prompts and the sampling")
parser.add_argument("--no-warmstart", action="store_true", help="measure the model without the cold start")
parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
args = parser.parse_args()

modes = [m.strip() for m in args.modes.split(",") if m.strip()]
if not modes or any(m not in MODES for m in modes):
    parser.error(f"--modes must list some of {MODES}, got {args.modes!r}")
if args.prompts < 1:
    parser.error(f"--prompts must be >= 1, got {args.prompts}")
out = Path(args.out)
try:
    config = SelfPlayConfig.from_yaml(args.config).with_overrides([*args.set, f"run.out={out / 'run'}"])
    if args.no_warmstart:
        config = config.with_overrides(["warmstart.enabled=false"])
    loop = SelfPlay(config, RunDir.create(config.run.out, config))
except (ConfigError, ValueError) as exc:
    parser.error(str(exc))
group = args.group or config.designer.group_size
designer, validation = loop.designer_config, loop.designer_config.validation
results: dict[str, dict[str, object]] = {}
out.mkdir(parents=True, exist_ok=True)
with (out / "designs.jsonl").open("w", encoding="utf-8") as log:
    for mode in modes:
        verdicts: list[int] = []
        categories: Counter[str] = Counter()
        tokens, seconds = 0, 0.0
        for p in range(args.prompts):
            prompt, _ = propose_group(
                args.seed * 1000 + p, documents=loop.documents, memory=loop.memory, config=designer, mode=mode
            )
            sampling = replace(designer.sampling_for(prompt.mode), n=group, seed=args.seed * 1000 + p)
            began = time.perf_counter()
            completions = loop.generator.generate([prompt.messages], sampling)
            seconds += time.perf_counter() - began
            for c in completions:
                tokens += len(c.completion_token_ids or ())
                extracted = extract_design(c.text, prompt)
                if extracted.source is None:
                    category, problem = "NO_CODE", extracted.problem
                else:
                    report = validate(
                        EnvProgram(extracted.source, origin="designer"), validation, registry=loop.registry
                    )
                    category = "ACCEPTED" if report.accepted else report.category
                    problem = None if report.accepted else report.feedback()[:400]
                verdicts.append(int(category == "ACCEPTED"))
                categories[category] += 1
                record = {"mode": prompt.mode, "parent": prompt.parent, "prompt": p, "category": category}
                log.write(json.dumps({**record, "problem": problem, "completion": c.text}) + "\n")
            where = prompt.parent or prompt.setting
            print(f"{mode} prompt {p + 1}/{args.prompts} ({where}): {sum(verdicts)}/{len(verdicts)} valid", flush=True)
        low, high = confidence_interval([float(v) for v in verdicts])
        n = len(verdicts)
        results[mode] = {
            "designs": n,
            "valid": sum(verdicts),
            "rate": sum(verdicts) / n,
            "ci95": [low, high],
            "categories": dict(categories),
            "tokens_per_design": tokens / n,
            "seconds_per_design": seconds / n,
        }
summary = {
    "policy": config.policy.spec,
    "warmstart": not args.no_warmstart and config.warmstart.enabled,
    "group": group,
    "prompts": args.prompts,
    "edit_max_new_tokens": config.designer.edit_max_new_tokens,
    "max_new_tokens": config.designer.max_new_tokens,
    "temperature": config.designer.temperature,
    "modes": results,
}
(out / "design_rate.json").write_text(json.dumps(summary, indent=1), encoding="utf-8")
print(
    "\n| mode | designs | valid | rate [95% CI] | refused as | tokens/design | s/design |\n|---|---|---|---|---|---|---|"
)
for mode, r in results.items():
    ci = r["ci95"]
    assert isinstance(ci, list)
    refused = ", ".join(f"{k} {v}" for k, v in sorted(r["categories"].items()) if k != "ACCEPTED")  # type: ignore[union-attr]
    print(
        f"| {mode} | {r['designs']} | {r['valid']} | {r['rate']:.2f} [{ci[0]:.2f}, {ci[1]:.2f}] | {refused or '-'} | "
        f"{r['tokens_per_design']:.0f} | {r['seconds_per_design']:.1f} |"
    )
print(f"written: {out / 'design_rate.json'}, {out / 'designs.jsonl'}")
loop.close()
