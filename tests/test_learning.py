"""The learning benchmark's pieces: settings, the held-out suite, token counting, the report and the plot.

The benchmark end to end (two real runs with the embedded model) is ``benchmarks/test_bench_learning.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spade_gym.evaluation.base import ItemRecord, SuiteResult, compare_results
from spade_gym.evaluation.environments import HELD_OUT_SEED_BASE
from spade_gym.evaluation.learning import ArmResult, LearningResult, LearningSettings, plot_learning, policy_tokens
from spade_gym.trainer.selfplay import MOVED_KEYS, what_moved


def result(scores: list[float]) -> SuiteResult:
    return SuiteResult("envs:A", "p", [ItemRecord(f"A/{k}", s) for k, s in enumerate(scores)])


def test_settings_refuse_no_environment_and_too_few_episodes() -> None:
    with pytest.raises(ValueError, match="name at least one held-out evaluation environment"):
        LearningSettings(eval_envs=())
    with pytest.raises(ValueError, match="episodes_per_env must be >= 2"):
        LearningSettings(eval_envs=("ArithmeticChain",), episodes_per_env=1)


def test_the_suite_plays_the_named_environments_on_held_out_seeds() -> None:
    suite = LearningSettings(eval_envs=("ArithmeticChain", "NimLastStoneWins"), episodes_per_env=3).suite()
    assert suite.name == "envs:ArithmeticChain,NimLastStoneWins"
    assert sorted(r.name for r in suite.records) == ["ArithmeticChain", "NimLastStoneWins"]
    assert suite.config()["seeds_from"] == HELD_OUT_SEED_BASE and suite.sampling.greedy
    with pytest.raises(ValueError, match="no environment named Missing"):
        LearningSettings(eval_envs=("Missing",)).suite()


def test_policy_tokens_sums_generated_and_trained_tokens() -> None:
    rows = [{"tokens/designer": 10, "tokens/agent": 5, "tokens/train": 7}, {"tokens/agent": 3, "tokens/train": None}]
    assert policy_tokens(rows) == 25 and policy_tokens([]) == 0


def test_report_and_plot_show_the_paired_gains(tmp_path: Path) -> None:
    before, after_sp, after_bl = result([0, 0, 1, 0, 1, 0]), result([1, 0, 1, 1, 1, 0]), result([0, 0, 1, 0, 1, 1])
    curve = [{"designer/valid_rate": 0.5, "designer/reward_mean": -0.25, "agent/return_nohint": 0.4}]
    sp = ArmResult("selfplay", 1, 100, "d", after_sp, compare_results(after_sp, before), curve)
    bl = ArmResult("baseline", 2, 104, "d", after_bl, compare_results(after_bl, before), [{}, {}])
    res = LearningResult("m", 135_000_000, before, sp, bl, compare_results(after_sp, after_bl), 60.0)
    assert sp.gain.paired and sp.gain.difference == pytest.approx(2 / 6)
    text = res.markdown()
    assert "135M parameters" in text and "one checkpoint: True" in text
    assert f"{sp.gain.difference:+.3f} [{sp.gain.low:+.3f}, {sp.gain.high:+.3f}]" in text
    assert "| selfplay | 0 | 0.500 | -0.250 |" in text and text.count("| baseline |") == 3
    figures = res.to_dict()
    assert figures["same_start"] and figures["selfplay"]["gain"]["difference"] == sp.gain.difference
    png = plot_learning(res, tmp_path / "l.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_what_moved_names_first_and_last_and_says_why_a_figure_is_missing() -> None:
    rows = [
        {"designer/valid_rate": 0.0, "train/optimizer_steps": 0, "train/agent/trained_samples": 0},
        {"designer/valid_rate": 0.5, "train/optimizer_steps": 1, "train/agent/trained_samples": 4, "train/loss": 0.25},
    ]
    lines = what_moved(rows)
    assert len(lines) == len(MOVED_KEYS)
    assert "Designer valid rate (valid programs, duplicates included): 0 -> 0.500 (mean 0.250)" in lines
    assert "optimizer steps: 0 -> 1 (total 1)" in lines
    assert "Agent samples with nonzero advantage: 0 -> 4 (total 4)" in lines
    assert any(line.startswith("Agent return without hint") and "no accepted design" in line for line in lines)
    assert "no optimizer step" in what_moved([{"train/optimizer_steps": 0}])[-1]
    assert what_moved([]) == ["no iteration finished"]


def test_what_moved_counts_an_iteration_without_an_update_as_zero() -> None:
    lines = what_moved([{"designer/valid_rate": 0.0, "designer/accepted": 0}, {"designer/valid_rate": 0.0}])
    assert "optimizer steps: 0 -> 0 (total 0)" in lines
    assert "Designer samples with nonzero advantage: 0 -> 0 (total 0)" in lines
    assert "Designer accepted designs: 0 -> 0 (total 0)" in lines


def test_the_stall_warning_names_the_roles_that_trained() -> None:
    from spade_gym.trainer.grpo import UpdateStats
    from spade_gym.trainer.selfplay import _training_state

    designer_only = UpdateStats(optimizer_steps=1, trained_samples={"designer": 3})
    assert "only the Designer trained" in _training_state(designer_only)
    assert "Agent still trains" in _training_state(UpdateStats(optimizer_steps=1, trained_samples={"agent": 4}))
    assert "both roles" in _training_state(UpdateStats(optimizer_steps=2, trained_samples={"agent": 4, "designer": 1}))
    assert "no optimizer step" in _training_state(UpdateStats(optimizer_steps=0))
    assert "no optimizer step" in _training_state(None)
