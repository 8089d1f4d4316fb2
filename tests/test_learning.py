"""The learning benchmark's pieces: token counting, the report and the plot.

The benchmark end to end (two real runs with the embedded model) is ``benchmarks/test_bench_learning.py``.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from spade_gym.evaluation.base import ItemRecord, SuiteResult, compare_results
from spade_gym.evaluation.heldout import HeldOut
from spade_gym.evaluation.learning import ArmResult, CurvePoint, LearningResult, plot_learning, policy_tokens
from spade_gym.trainer.summary import MOVED_KEYS, designer_summary, what_moved


def held(scores: dict[str, list[float]]) -> HeldOut:
    def result(part: str, values: list[float]) -> SuiteResult:
        return SuiteResult(f"heldout-{part}", "p", [ItemRecord(f"A/{k}", s) for k, s in enumerate(values)])

    return HeldOut(
        {p: result(p, v) for p, v in scores.items()}, {p: result(f"{p}-greedy", v) for p, v in scores.items()}
    )


def test_policy_tokens_sums_generated_and_trained_tokens() -> None:
    rows = [{"tokens/designer": 10, "tokens/agent": 5, "tokens/train": 7}, {"tokens/agent": 3, "tokens/train": None}]
    assert policy_tokens(rows) == 25 and policy_tokens([]) == 0


def test_report_and_plot_show_every_part_and_the_paired_differences(tmp_path: Path) -> None:
    before = held({"seeds": [0, 0, 1, 0, 1, 0], "levels": [0, 0, 0, 0, 1, 0], "envs": [1, 0, 0, 0, 1, 0]})
    sp_after = held({"seeds": [1, 0, 1, 1, 1, 0], "levels": [0, 1, 0, 0, 1, 0], "envs": [1, 0, 0, 0, 1, 0]})
    bl_after = held({"seeds": [0, 0, 1, 0, 1, 1], "levels": [0, 0, 0, 0, 1, 0], "envs": [1, 0, 0, 0, 0, 0]})

    def arm(name: str, after: HeldOut, steps: int, tokens: int) -> ArmResult:
        gains = {p: compare_results(r, before.sampled[p]) for p, r in after.sampled.items()}
        curve = [CurvePoint("before", 0, 0, {"seeds": (1 / 3, 0.1, 0.7)}), CurvePoint("after", steps, tokens, {})]
        return ArmResult(name, steps, tokens, "d", after, gains, curve, [{"steps/agent_total": steps}])

    sp, bl = arm("self-play", sp_after, 8, 100), arm("baseline", bl_after, 8, 80)
    minus = {p: compare_results(r, bl_after.sampled[p]) for p, r in sp_after.sampled.items()}
    res = LearningResult("m", 135_000_000, before, sp, bl, arm("baseline", bl_after, 10, 100), minus, minus, 60.0)
    assert sp.gains["seeds"].paired and sp.gains["seeds"].difference == pytest.approx(2 / 6)
    text = res.markdown()
    assert "135M parameters" in text and "one checkpoint: True" in text
    for what in ("unseen seeds", "unseen difficulty levels", "unseen environments"):
        assert text.count(f"| {what} | 6 |") == 3
    g, d = sp.gains["seeds"], minus["seeds"]
    assert f"| {d.difference:+.3f} [{d.low:+.3f}, {d.high:+.3f}] |" in text  # self-play minus the baseline
    assert f"| {g.difference:+.3f} [{g.low:+.3f}, {g.high:+.3f}] | - |" in text
    figures = res.to_dict()
    assert figures["same_start"] and figures["selfplay"]["gains"]["seeds"]["difference"] == g.difference
    assert set(figures["selfplay_minus_baseline_equal_tokens"]) == {"seeds", "levels", "envs"}
    png = plot_learning(res, tmp_path / "l.png")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_designer_summary_says_what_it_produced_and_earned() -> None:
    rows = [
        {
            "designer/designs": 4,
            "designer/accepted": 1,
            "designer/reward_mean": -0.5,
            "designer/outcomes": {"invalid": 3, "learnability": 1},
        },
        {
            "designer/designs": 4,
            "designer/accepted": 0,
            "designer/reward_mean": -1.0,
            "designer/outcomes": {"invalid": 4},
            "steps/agent_total": 16,
            "steps/designer_total": 2,
        },
    ]
    line = designer_summary(rows)
    assert line.startswith("Designer: 8 designs, 1 accepted, mean reward -0.750 (invalid 7, learnability 1)")
    assert line.endswith("Agent steps 16, Designer steps 2") and designer_summary([{}]).startswith("Designer: off")


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
    from spade_gym.trainer.summary import training_state

    designer_only = UpdateStats(optimizer_steps=1, trained_samples={"designer": 3})
    assert "only the Designer trained" in training_state(designer_only)
    assert "Agent still trains" in training_state(UpdateStats(optimizer_steps=1, trained_samples={"agent": 4}))
    assert "both roles" in training_state(UpdateStats(optimizer_steps=2, trained_samples={"agent": 4, "designer": 1}))
    assert "no optimizer step" in training_state(UpdateStats(optimizer_steps=0))
    assert "no optimizer step" in training_state(None)


def test_the_benchmark_compares_the_arms_at_equal_agent_steps_and_tokens_from_one_start(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from test_selfplay import tiny_policy
    from transformers import AutoTokenizer

    from spade_gym.evaluation.learning import learning_benchmark
    from spade_gym.policies.embedded import embedded_model_dir
    from spade_gym.trainer.config import SelfPlayConfig

    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir())
    held = ["InboxCodeRelay", "TravelBookingConstraints", "LightsOut3x3", "MastermindCodeBreaker"]
    config = SelfPlayConfig.from_dict(
        {
            "designer": {"prompts_per_iteration": 1, "group_size": 2, "max_new_tokens": 8, "memory_k": 1},
            "agent": {"max_new_tokens": 4, "replay_envs": 1, "episodes_per_env": 2, "updates_per_iteration": 2},
            "eval": {"parts": ["seeds", "envs"], "half_width": 0.5, "greedy": False, "envs": ["LargerOfTwo"]},
            "run": {
                "iterations": 1,
                "tensorboard": False,
                "seed_tags": ["graded"],
                "held_out_envs": [*held, "ColorDoorRooms", "CountListItems", "OrderStatusLookup", "LargerOfTwo"],
            },
        }
    )
    result = learning_benchmark(
        config,
        tmp_path / "b",
        say=lambda _: None,
        make_policy=lambda: tiny_policy(tokenizer),
        max_baseline_iterations=3,
    )
    figures = result.to_dict()
    assert figures["same_start"] and result.selfplay.steps == result.baseline_steps.steps == 2
    assert result.baseline_tokens.tokens >= result.selfplay.tokens or result.baseline_tokens.steps == 6
    # the held-out items: 4 unseen seeds of the one training environment, 4 of the unseen one
    assert {p: r.n for p, r in result.before.sampled.items()} == {"seeds": 4, "envs": 4}
    assert set(result.difference_steps) == set(result.difference_tokens) == {"seeds", "envs"}
    assert [c.tag for c in result.selfplay.curve] == ["before", "after"] and result.selfplay.curve[-1].steps == 2
    assert (tmp_path / "b" / "learning.png").is_file() and "| unseen environments | 4 |" in result.markdown()
    # the baseline reused the start's evaluation (one checkpoint, one evaluation before)
    before = (tmp_path / "b" / "baseline" / "eval" / "before.json").read_text()
    assert before == (tmp_path / "b" / "selfplay" / "eval" / "before.json").read_text()
