"""What a repair round does with each kind of feedback, on the same refused designs.

    python examples/repair_rate.py runs/design-rate/llamacpp-qwen2.5-coder-1.5b-write-skeleton \\
        --designer llamacpp:qwen2.5-coder-1.5b --repairs 24

Takes up to REPAIRS refused designs of a factory folder (`spade design --count`, or a cell of
examples/design_rate.py), and answers each once with every feedback kind: `report` (the gate's
report, as before) and `precise` (spade_gym.repair.repair_feedback: the failing check, the lines,
the expected shapes, the diff against the previous attempt). The Designer writes one repair per
kind (same seed), judged by the gate against the seed library. Prints per kind: repairs, the same
program resubmitted, valid after repair, and the refusal categories before and after.
"""

from __future__ import annotations

import argparse
import json
import time
from collections import Counter
from pathlib import Path

from spade_gym.design_novelty import copies_prompt_example
from spade_gym.designer import extract_program
from spade_gym.factory import PROMPTS_FILE, read_designs
from spade_gym.policies import SamplingParams, load_policy
from spade_gym.program import EnvProgram
from spade_gym.registry.gymnasium import open_registry
from spade_gym.repair import repair_feedback, same_program
from spade_gym.validation import ValidationConfig, ValidationReport, validate

parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
parser.add_argument("folder", type=Path, help="a factory folder (designs.jsonl, prompts.jsonl)")
parser.add_argument("--designer", required=True, help="the Designer policy spec (the one that wrote the designs)")
parser.add_argument("--repairs", type=int, default=20, help="refused designs to repair")
parser.add_argument("--temperature", type=float, default=0.5)
parser.add_argument("--max-new-tokens", type=int, default=1536)
parser.add_argument("--seed", type=int, default=0)
args = parser.parse_args()

prompts = {}
for raw in (args.folder / PROMPTS_FILE).read_text(encoding="utf-8").splitlines():
    entry = json.loads(raw)
    prompts[entry["prompt"]] = entry
refused = [line for line in read_designs(args.folder) if not line["valid"] and line["prompt"] in prompts]
refused = refused[: args.repairs]
if not refused:
    parser.error(f"no refused design with its prompt in {args.folder}")
policy = load_policy(args.designer)
registry = open_registry(args.folder.parent / (args.folder.name + "-repairs") / "registry", seed_library=True)
validation = ValidationConfig()
again = "Write the whole corrected module again in one ```python code block."
results: dict[str, dict[str, object]] = {}
log = open(args.folder.parent / (args.folder.name + "-repairs.jsonl"), "w", encoding="utf-8")
for kind in ("report", "precise"):
    same, valid, before, after, seconds = 0, 0, Counter[str](), Counter[str](), 0.0
    for n, line in enumerate(refused):
        entry = prompts[line["prompt"]]
        report = ValidationReport(program_id="", category=line["category"])
        if line["source"] is not None:  # the gate's full report, again (the log keeps only its words)
            report = validate(EnvProgram(line["source"]), validation, registry=registry)
        if kind == "precise":
            problem = None if line["source"] else extract_program(line["completion"]).problem
            feedback = repair_feedback(report, line["source"], problem=problem, setting=entry["setting"])
        else:
            feedback = (
                report.feedback()
                if line["source"]
                else f"No program was found: {extract_program(line['completion']).problem}."
            )
        messages = [*entry["messages"], {"role": "assistant", "content": line["completion"]}]
        messages.append({"role": "user", "content": feedback + "\n\n" + again})
        started = time.perf_counter()
        sampling = SamplingParams(temperature=args.temperature, max_new_tokens=args.max_new_tokens, seed=args.seed + n)
        [completion] = policy.generate([messages], sampling)
        seconds += time.perf_counter() - started
        source = extract_program(completion.text).source
        category = "NO_CODE"
        if source is not None:
            program = EnvProgram(source)
            verdict = validate(program, validation, registry=registry)
            copy_of = copies_prompt_example(program, validation) if verdict.accepted else None
            category = "DUPLICATE" if copy_of else verdict.category
        repeated = same_program(line["source"], source)
        same += repeated
        valid += category in ("ACCEPT", "DUPLICATE")
        before[line["category"]] += 1
        after[category] += 1
        log.write(
            json.dumps(
                {
                    "kind": kind,
                    "before": line["category"],
                    "after": category,
                    "same": repeated,
                    "feedback": feedback,
                    "completion": completion.text,
                }
            )
            + "\n"
        )
        print(
            f"{kind} {n + 1}/{len(refused)}: {line['category']} -> {category}{' (same program)' if repeated else ''}",
            flush=True,
        )
    results[kind] = {
        "repairs": len(refused),
        "same": same,
        "valid": valid,
        "before": dict(before),
        "after": dict(after),
        "s_per_repair": seconds / len(refused),
    }
log.close()
print(
    "\n| feedback | repairs | same program resubmitted | valid after repair | after (categories) | s/repair |\n|---|---|---|---|---|---|"
)
for kind, r in results.items():
    cats = ", ".join(f"{k} {v}" for k, v in sorted(r["after"].items()))  # type: ignore[union-attr]
    print(f"| {kind} | {r['repairs']} | {r['same']} | {r['valid']} | {cats} | {r['s_per_repair']:.0f} |")
print(f"before (both): {', '.join(f'{k} {v}' for k, v in sorted(results['report']['before'].items()))}")  # type: ignore[union-attr]
(args.folder.parent / (args.folder.name + "-repairs.json")).write_text(json.dumps(results, indent=1))
