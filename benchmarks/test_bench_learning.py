"""The learning benchmark (``examples/learning_curve.py``) in its short mode, as CI runs it.

The full benchmark (the CPU example's iterations, 32 held-out episodes per evaluation environment)
takes longer than CI allows; ``--short`` runs one self-play iteration and the baseline at equal
policy tokens, and scores 8 held-out episodes per environment. Reported, never asserted: the held-out
score before and after for both arms with their paired 95% intervals, the Designer's valid rate and
reward, the Agent's returns with and without the hint, and the wall time. The run's own checks (a
report is written, both arms start from one checkpoint, the curves have a row per iteration) are
asserted, since a benchmark that silently produced nothing would measure nothing.
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
    sp, bl = figures["selfplay"], figures["baseline"]
    assert len(sp["curve"]) == sp["iterations"] >= 1 and len(bl["curve"]) == bl["iterations"] >= 1
    last = sp["curve"][-1]
    report(
        f"learning benchmark (short): {figures['model']} ({figures['parameters'] / 1e6:.0f}M), {figures['items']} "
        f"held-out episodes; before {figures['before']:.3f}; self-play {sp['iterations']} it, {sp['tokens']} tokens: "
        f"after {sp['after']:.3f}, gain {sp['gain']['difference']:+.3f} [{sp['gain']['low']:+.3f}, "
        f"{sp['gain']['high']:+.3f}]; baseline {bl['iterations']} it, {bl['tokens']} tokens: after {bl['after']:.3f}, "
        f"gain {bl['gain']['difference']:+.3f} [{bl['gain']['low']:+.3f}, {bl['gain']['high']:+.3f}]; designer valid "
        f"rate {last.get('designer/valid_rate')}, reward {last.get('designer/reward_mean')}; agent return hint "
        f"{last.get('agent/return_hint')} / no hint {last.get('agent/return_nohint')}; {seconds[0]:.0f} s",
        wall_s=seconds[0],
        before=figures["before"],
        selfplay_after=sp["after"],
        baseline_after=bl["after"],
        selfplay_gain=sp["gain"]["difference"],
        baseline_gain=bl["gain"]["difference"],
    )
