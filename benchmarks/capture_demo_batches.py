"""Run ``make demo``'s self-play (``spade selfplay --config examples/selfplay_cpu.yaml``) and keep
the samples of every GRPO update, for ``test_bench_update.py`` and the shared-prefix tests.

    SPADE_VALIDATION_SEED=same python benchmarks/capture_demo_batches.py OUT.json.gz [RUN_DIR] [--set k=v ...]

The run is the CLI's own (same config, same seeds); the only addition is a wrapper around
``GRPOTrainer.update`` that appends its samples (as given, before advantages are set) to
``OUT.json.gz``: ``{"updates": [[sample, ...], ...]}``, each sample ``dataclasses.asdict`` of a
:class:`~spade_gym.trainer.grpo.TrainSample`. Run it under ``/usr/bin/time -v`` for the demo's
peak resident memory: the wrapper holds only token ids.
"""

from __future__ import annotations

import dataclasses
import gzip
import json
import sys
import time
from pathlib import Path


def main(argv: list[str]) -> None:
    from spade_gym import cli
    from spade_gym.trainer import grpo

    out = Path(argv[0])
    run_dir = (
        argv[1] if len(argv) > 1 and not argv[1].startswith("--") else f"runs/capture-{time.strftime('%Y%m%d-%H%M%S')}"
    )
    rest = [a for a in argv[1:] if a != run_dir]
    updates: list[list[dict]] = []
    inner = grpo.GRPOTrainer.update

    def update(self, samples):  # type: ignore[no-untyped-def]
        updates.append([dataclasses.asdict(s) for s in samples])
        with gzip.open(out, "wt") as f:
            json.dump({"updates": updates}, f)
        return inner(self, samples)

    grpo.GRPOTrainer.update = update  # type: ignore[method-assign]
    args = ["selfplay", "--config", "examples/selfplay_cpu.yaml", "--out", run_dir, *rest]
    cli.app(args, standalone_mode=False)


if __name__ == "__main__":
    main(sys.argv[1:])
