"""The Designer's design rate: valid, accepted and genuinely new environments per design, with the
gate as the verifier (best-of-N), per model, mode and prompt variant.

    python examples/design_rate.py --designer llamacpp:qwen2.5-coder-0.5b --designs 60
    python examples/design_rate.py --designer llamacpp:qwen2.5-coder-1.5b --variants skeleton,example
    python examples/design_rate.py --modes edit --designs 12      # the CPU example's model and cold start

Each cell (designer x mode x prompt variant) is an environment factory run (`spade_gym.factory`)
into OUT/<cell>/: prompts from the config's documents and a registry holding the seed library
(less the held-out environments), GROUP designs sampled per prompt, each judged by the gate (novelty
against the registry and the prompt's own examples), its regret measured with the Agent (the
config's policy; with --designer, `--agent`, default the embedded model) and registered. A stopped
run resumes. Without --designer the config's own Designer is measured, cold start applied, as
`spade selfplay --config CONFIG` builds it.

Prints one table row per cell: designs, valid / accepted / new with 95% Wilson intervals, tokens,
seconds and CPU seconds per design, new environments per hour and per CPU-hour; then every new
environment (name, setting, turns, returns with and without the hint), each played once with
`gymnasium.make` and its oracle. Writes OUT/design_rate.json.
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium

from spade_gym.contract import unfilled_placeholders
from spade_gym.design_prompts import PROMPT_VARIANTS
from spade_gym.designer import MODES
from spade_gym.documents import load_documents
from spade_gym.factory import FactoryConfig, FactorySummary, read_designs, run_factory
from spade_gym.trainer.config import ConfigError, SelfPlayConfig

parser = argparse.ArgumentParser(
    description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
)
parser.add_argument("--config", default="examples/selfplay_cpu.yaml", help="the self-play YAML config")
parser.add_argument(
    "--designer",
    action="append",
    default=[],
    help="a Designer policy spec to measure (repeatable), e.g. llamacpp:qwen2.5-coder-0.5b; default: the config's",
)
parser.add_argument("--agent", default="default", help="the Agent whose regret is measured (with --designer)")
parser.add_argument("--out", default="runs/design-rate", help="folder of the cells, the results and the designs")
parser.add_argument("--modes", default="write", help="modes to measure, comma-separated (write, edit)")
parser.add_argument(
    "--variants", default="skeleton", help=f"write-mode prompt variants, comma-separated {PROMPT_VARIANTS}"
)
parser.add_argument(
    "--feedback", default="precise", choices=("precise", "report"), help="repair feedback (repairs only)"
)
parser.add_argument("--designs", type=int, default=40, help="designs per cell (resumed cells count theirs)")
parser.add_argument("--hours", type=float, default=None, help="or: wall hours per cell")
parser.add_argument("--group", type=int, default=4, help="designs sampled per prompt (best-of-N)")
parser.add_argument("--temperature", type=float, default=None, help="the Designer's temperature (default: config's)")
parser.add_argument("--max-new-tokens", type=int, default=None, help="most tokens per whole-program design")
parser.add_argument("--seed", type=int, default=0, help="seed of the prompts and the sampling")
parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="config override (repeatable)")
args = parser.parse_args()


def listed(text: str, allowed: tuple[str, ...], what: str) -> list[str]:
    items = [m.strip() for m in text.split(",") if m.strip()]
    if not items or any(m not in allowed for m in items):
        parser.error(f"--{what} must list some of {allowed}, got {text!r}")
    return items


modes, variants = listed(args.modes, MODES, "modes"), listed(args.variants, PROMPT_VARIANTS, "variants")
out = Path(args.out)
try:
    config = SelfPlayConfig.from_yaml(args.config).with_overrides(args.set)
except (ConfigError, ValueError) as exc:
    parser.error(str(exc))
designer_config = config.designer_config()
if args.temperature is not None:
    designer_config = replace(designer_config, temperature=args.temperature)
if args.max_new_tokens is not None:
    designer_config = replace(designer_config, max_new_tokens=args.max_new_tokens)
designer_config = replace(designer_config, feedback=args.feedback)
documents = load_documents(
    config.designer.documents, seed=config.run.seed, max_tokens=config.designer.document_max_tokens
)


def designers() -> Any:
    """``(label, designer policy, agent)`` per measured Designer, loaded one at a time."""
    from spade_gym.policies import load_policy

    if args.designer:
        for spec in args.designer:
            policy = load_policy(spec)
            yield spec, policy, args.agent
            if hasattr(policy, "close"):
                policy.close()
        return
    from spade_gym.trainer.run import RunDir
    from spade_gym.trainer.selfplay import SelfPlay

    loop = SelfPlay(config, RunDir.create(out / "run", config))
    yield config.designer.policy or config.policy.spec, loop.designer_policy, loop.generator
    loop.close()


def progress(summary: FactorySummary, line: dict[str, Any]) -> None:
    what = line["name"] or "-"
    print(
        f"  {summary.line()}; last: {line['category']} {what} ({line['setting'] or line['target_setting']})", flush=True
    )


def play(gym_id: str, seed: int = 0) -> str:
    """One oracle episode of ``gym_id`` through gymnasium.make: ``"return R in T turns"``."""
    env = gymnasium.make(gym_id)
    try:
        env.reset(seed=seed)
        total, turns, done = 0.0, 0, False
        while not done:
            _, reward, terminated, truncated, _ = env.step(env.unwrapped.oracle())
            total, turns, done = total + float(reward), turns + 1, terminated or truncated
        return f"return {total:.2f} in {turns} turn(s)"
    finally:
        env.close()


results: list[dict[str, Any]] = []
listing: list[str] = []
for label, designer, agent in designers():
    for mode in modes:
        for variant in variants if mode == "write" else ["-"]:
            cell = re.sub(r"[^A-Za-z0-9.]+", "-", f"{label}-{mode}-{variant}").strip("-")
            print(f"{cell}:", flush=True)
            factory = FactoryConfig(
                designer=replace(designer_config, prompt=variant if variant != "-" else designer_config.prompt),
                group=args.group,
                mode=mode,
                count=None if args.hours else args.designs,
                seconds=args.hours * 3600 if args.hours else None,
                seed=args.seed,
                held_out=tuple(config.run.held_out_envs),
            )
            summary = run_factory(out / cell, designer, documents, factory, agent=agent, progress=progress)
            lines = read_designs(out / cell)
            moved = {  # what the host-side changes did to this cell's designs
                "renamed_to_env": sum("renamed class" in (line["note"] or "") for line in lines),
                "renamed_and_valid": sum("renamed class" in (line["note"] or "") and line["valid"] for line in lines),
                "example_copies": sum("worked example" in (line["problem"] or "") for line in lines),
                "skeleton_unfilled": sum(
                    bool(line["source"] and unfilled_placeholders(line["source"])) for line in lines
                ),
                "multi_turn_new": sum(line["new"] and (line["max_turns"] or 0) > 1 for line in lines),
                "tool_use_new": sum(line["new"] and line["setting"] == "tool_use" for line in lines),
            }
            results.append({"designer": label, "mode": mode, "variant": variant, **summary.to_dict(), **moved})
            for line in lines:
                if line["new"]:
                    played = play(line["gym_id"])
                    listing.append(
                        f"| {label} | {line['name']} | {line['setting']} | {line['max_turns']} | "
                        f"{line['return_hint']:.2f} | {line['return_nohint']:.2f} | {line['closest']} "
                        f"{line['similarity']:.2f} | {played} |"
                    )

(out / "design_rate.json").write_text(json.dumps(results, indent=1), encoding="utf-8")
print(
    "\n| designer | mode | prompt | designs | valid [95% CI] | accepted [95% CI] | new [95% CI] | tokens/design "
    "| s/design | CPU s/design | new/h | new/CPU-h | refused as |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|"
)
for r in results:
    cells = []
    for what in ("valid", "accepted", "new"):
        low, high = r[f"{what}_ci95"]
        cells.append(f"{r[what]} ({r[f'{what}_rate']:.2f} [{low:.2f}, {high:.2f}])")
    refused = ", ".join(f"{k} {v}" for k, v in r["categories"].items() if k != "ACCEPT") or "-"
    cpu = r["cpu_seconds"] / r["designs"] if r["designs"] else 0.0
    print(
        f"| {r['designer']} | {r['mode']} | {r['variant']} | {r['designs']} | {' | '.join(cells)} | "
        f"{r['tokens_per_design']:.0f} | {r['seconds_per_design']:.1f} | {cpu:.1f} | {r['new_per_hour']:.1f} | "
        f"{r['new_per_cpu_hour']:.1f} | {refused} |"
    )
print(
    "\n| designer | mode | prompt | lone class renamed Env (valid) | copies of the prompt's example refused | "
    "skeleton left unfilled | new multi-turn | new tool_use |\n|---|---|---|---|---|---|---|---|"
)
for r in results:
    print(
        f"| {r['designer']} | {r['mode']} | {r['variant']} | {r['renamed_to_env']} ({r['renamed_and_valid']}) | "
        f"{r['example_copies']} | {r['skeleton_unfilled']} | {r['multi_turn_new']} | {r['tool_use_new']} |"
    )
if listing:
    print(
        "\nNew environments (returns of the Agent with / without the hint; closest seed or example; an oracle "
        "episode through gymnasium.make):\n| designer | name | setting | max_turns | hint | no hint | closest | "
        "gymnasium.make |\n|---|---|---|---|---|---|---|---|"
    )
    print("\n".join(listing))
print(f"written: {out / 'design_rate.json'} and each cell's designs.jsonl")
