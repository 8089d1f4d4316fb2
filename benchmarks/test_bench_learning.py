"""The learning benchmark (``examples/learning_curve.py``) in its short mode, as CI runs it.

The full benchmark (three design phases, docs/learning.md) takes longer than CI allows; ``--short``
runs one design phase with two Agent steps of 8 episodes and the baseline at equal Agent steps and
tokens, on held-out parts of 8 episodes (a 95% interval of about +-0.35). Reported, never asserted: per part (unseen seeds,
unseen difficulty levels, unseen environments) the success before, self-play's paired gain and
self-play minus the baseline, and the wall time. The run's own checks (a report is written, both
arms start from one checkpoint and are compared at equal Agent steps) are asserted, since a
benchmark that silently produced nothing would measure nothing.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parent.parent


def test_learning_benchmark_short_mode(benchmark: Any, report: Callable[..., None], tmp_path: Path) -> None:
    out = tmp_path / "learning"
    seconds: list[float] = []

    def run() -> None:
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, str(ROOT / "examples" / "learning_curve.py"), "--short", "--out", str(out)],
            capture_output=True,
            text=True,
            timeout=2400,
            cwd=ROOT,
            env=os.environ.copy(),
        )
        seconds.append(time.perf_counter() - began)
        assert done.returncode == 0, (done.stdout[-2000:], done.stderr[-3000:])

    benchmark.pedantic(run, rounds=1, iterations=1)
    figures = json.loads((out / "learning.json").read_text())
    assert (out / "learning.md").is_file() and (out / "learning.png").is_file()
    assert figures["same_start"], "the self-play run and the baseline must start from one checkpoint"
    sp, bl = figures["selfplay"], figures["baseline_equal_steps"]
    assert sp["steps"] == bl["steps"] >= 1, "the arms are compared at equal Agent steps"
    assert set(sp["gains"]) == set(figures["selfplay_minus_baseline_equal_steps"]) == {"seeds", "levels", "envs"}

    def cmp(c: dict[str, float]) -> str:
        return f"{c['difference']:+.3f} [{c['low']:+.3f}, {c['high']:+.3f}]"

    parts = "; ".join(
        f"{part}: before {figures['before'][part]['score']:.3f}, self-play gain {cmp(sp['gains'][part])}, "
        f"minus baseline {cmp(figures['selfplay_minus_baseline_equal_steps'][part])}"
        for part in sp["gains"]
    )
    report(
        f"learning benchmark (short): {figures['model']} ({figures['parameters'] / 1e6:.0f}M), {sp['steps']} Agent "
        f"steps per arm; {parts}; {seconds[0]:.0f} s",
        wall_s=seconds[0],
        selfplay_gain_seeds=sp["gains"]["seeds"]["difference"],
        selfplay_minus_baseline_seeds=figures["selfplay_minus_baseline_equal_steps"]["seeds"]["difference"],
    )
