"""Held-out evaluation: results, intervals and comparisons, the episode suites (real reasoning-gym,
real sandboxed seed environments) and the ``spade eval`` / ``spade compare`` commands."""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from doubles import ScriptedPolicy
from typer.testing import CliRunner

from spade_gym.cli import app
from spade_gym.evaluation import (
    ItemRecord,
    SuiteResult,
    compare_results,
    confidence_interval,
    generate_answers,
    load_results,
    read_jsonl,
    save_results,
)
from spade_gym.evaluation.environments import HELD_OUT_SEED_BASE, HELD_OUT_TASKS, ProgramSuite, ReasoningGymSuite
from spade_gym.evaluation.suites import SuiteOptions, load_suite
from spade_gym.policies.base import Completion

runner = CliRunner()


def cli(*args: str) -> tuple[int, str]:
    result = runner.invoke(app, list(args), env={"COLUMNS": "200"})
    return result.exit_code, result.output


def answering(answer: Callable[[str], str]) -> ScriptedPolicy:
    """A policy that answers each prompt with ``answer(last message)`` inside answer tags ("" for nothing)."""

    def reply(prompt: list[dict[str, str]]) -> str:
        text = answer(prompt[-1]["content"])
        return text and f"<answer>{text}</answer>"

    return ScriptedPolicy(reply)


def result(scores: Sequence[float], suite: str = "s", prefix: str = "i") -> SuiteResult:
    return SuiteResult(suite, "p", [ItemRecord(f"{prefix}{k}", s) for k, s in enumerate(scores)])


# -- intervals, results, comparisons ------------------------------------------------------------


def test_wilson_interval_matches_published_values() -> None:
    # Wilson score intervals at 95% (Newcombe 1998, Statistics in Medicine 17, table I)
    low, high = confidence_interval([1.0] * 81 + [0.0] * 182)
    assert (round(low, 4), round(high, 4)) == (0.2553, 0.3662)
    low, high = confidence_interval([1.0] * 15 + [0.0] * 133)
    assert (round(low, 4), round(high, 4)) == (0.0624, 0.1605)
    assert confidence_interval([0.0] * 10)[0] == 0.0 and round(confidence_interval([0.0] * 10)[1], 4) == 0.2775


def test_partial_scores_use_the_clipped_normal_interval() -> None:
    low, high = confidence_interval([0.5, 0.5, 1.0, 0.0])
    half = 1.959963984540054 * math.sqrt(((0.0) ** 2 * 2 + 0.5**2 * 2) / 3) / 2
    assert (low, high) == pytest.approx((0.5 - half, 0.5 + half))
    assert confidence_interval([0.9, 1.0])[1] == 1.0 and math.isnan(confidence_interval([])[0])


def test_paired_and_unpaired_differences() -> None:
    a, b = result([1, 1, 0, 1]), result([0, 1, 0, 0])
    c = compare_results(a, b)
    diffs = [1, 0, 0, 1]
    half = 1.959963984540054 * math.sqrt(sum((d - 0.5) ** 2 for d in diffs) / 3) / 2
    assert c.paired and c.n == 4 and c.difference == 0.5
    assert (c.low, c.high) == pytest.approx((0.5 - half, 1.0))  # clipped to the possible range
    # unpaired: Newcombe's method 10 (Newcombe 1998, Statistics in Medicine 17, example: 56/70 vs 48/80)
    c = compare_results(result([1] * 56 + [0] * 14), result([1] * 48 + [0] * 32, prefix="j"))
    assert not c.paired and c.n == 150 and c.difference == pytest.approx(0.2)
    assert (round(c.low, 4), round(c.high, 4)) == (0.0524, 0.3339)
    # identical paired scores have no variance: the interval is the unpaired one, not a point
    same = compare_results(result([0, 0]), result([0, 0]))
    assert not same.paired and same.low < 0 < same.high
    # settings that change what is measured are reported
    x, y = result([1, 0]), result([1, 0])
    x.config, y.config = {"tasks": ["a"], "sampling": {"seed": 0}}, {"tasks": ["b"], "sampling": {"seed": 1}}
    assert compare_results(x, y).config_differences == ("tasks: ['a'] -> ['b']",)
    with pytest.raises(ValueError, match="cannot compare suite 's' with suite 't'"):
        compare_results(a, result([1], suite="t"))


def test_results_round_trip_through_json(tmp_path: Path) -> None:
    r = SuiteResult("math:x.jsonl", "p", [ItemRecord("a", 1.0, "q" * 5000, "r", "42", None, {"k": 1})], 2.5, {"n": 1})
    path = save_results([r, result([0.0, 1.0])], tmp_path / "out" / "res.json", extra={"policy_spec": "default"})
    data = json.loads(path.read_text())
    assert data["policy_spec"] == "default" and data["results"][0]["ci95"] == [pytest.approx(0.2065, abs=1e-4), 1.0]
    back = load_results(path)
    assert back[0].items[0].prompt == "q" * 2000 and back[0].items[0].metadata == {"k": 1} and back[1].score == 0.5
    (tmp_path / "bad.json").write_text('{"format": "other"}')
    with pytest.raises(ValueError, match="not a spade eval results file"):
        load_results(tmp_path / "bad.json")


def test_bad_lines_are_kept_as_errors(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    path.write_text('{"q": 1}\n\n{oops\n[1, 2]\n{"q": 2}\n')
    rows = read_jsonl(path)
    assert [n for n, _ in rows] == [1, 3, 4, 5]
    assert rows[0][1] == {"q": 1} and "line 3: not valid JSON" in str(rows[1][1])
    assert "line 4: expected a JSON object, got list" in str(rows[2][1])
    with pytest.raises(FileNotFoundError):
        read_jsonl(tmp_path / "missing.jsonl")


def test_a_failing_item_is_an_error_and_the_rest_are_answered() -> None:
    def upper_unless_boom(question: str) -> str:
        if "boom" in question:
            raise RuntimeError("cannot answer boom")
        return question.upper()

    conversations = [[{"role": "user", "content": c}] for c in ("a", "boom", "c")]
    out = generate_answers(answering(upper_unless_boom), conversations, batch_size=3)
    assert isinstance(out[0], Completion) and out[0].text == "<answer>A</answer>"
    assert out[1] == "generation failed: RuntimeError: cannot answer boom"
    assert isinstance(out[2], Completion)


# -- the episode suites --------------------------------------------------------------------------


def reasoning_gym_answers(tasks: Sequence[str], items: int) -> dict[str, str]:
    from spade_gym.reasoning_gym import ReasoningGymEnv

    answers = {}
    for task in tasks:
        env = ReasoningGymEnv(task, split="eval")
        for seed in range(items):
            question, _ = env.reset(seed=seed)
            answers[question] = env.oracle()
    return answers


def test_reasoning_gym_suite_scores_right_and_empty_answers() -> None:
    pytest.importorskip("reasoning_gym")
    tasks = ["leg_counting", "gcd"]
    answers = reasoning_gym_answers(tasks, 3)
    suite = ReasoningGymSuite(tasks, items_per_task=3)
    right = suite.run(answering(lambda q: answers[q]))
    assert right.n == 6 and right.score == 1.0 and right.errors == 0
    assert [r.item_id for r in right.items] == [f"{t}/{s}" for t in tasks for s in range(3)]
    assert right.items[0].reference == answers[right.items[0].prompt]
    assert set(right.by("task")) == set(tasks) and right.config["split"] == "eval"
    nothing = suite.run(answering(lambda q: ""))
    assert nothing.n == 6 and nothing.score == 0.0 and nothing.errors == 6
    assert {r.error for r in nothing.items} == {"empty response"}


def test_the_held_out_selection_is_reasoning_gyms_and_solvable() -> None:
    pytest.importorskip("reasoning_gym")
    answers = reasoning_gym_answers(HELD_OUT_TASKS, 1)
    solved = ReasoningGymSuite(items_per_task=1).run(answering(lambda q: answers[q]))
    assert solved.n == len(HELD_OUT_TASKS) == 12 and solved.score == 1.0


def test_program_suite_plays_seed_environments_on_held_out_seeds() -> None:
    suite = ProgramSuite("tool_use", envs=["BankTransferReport", "CalendarFirstFreeSlot"], max_turns=2)
    out = suite.run(answering(lambda q: ""))
    assert out.suite == "tool-use" and out.n == 4 and out.score == 0.0 and out.errors == 4
    assert all(r.metadata["seed"] >= HELD_OUT_SEED_BASE for r in out.items)
    assert {r.metadata["env"] for r in out.items} == {"BankTransferReport", "CalendarFirstFreeSlot"}
    assert {r.metadata["held_out_task"] for r in out.items} == {False}
    held = ProgramSuite("tool_use", envs=["InboxCodeRelay"], episodes_per_env=1, max_turns=1).run(answering(str))
    assert held.items[0].metadata["held_out_task"] is True
    games = ProgramSuite("game", episodes_per_env=1, max_turns=1)
    assert games.name == "games"
    assert len(games.records) >= 5 and all(r.setting == "game" for r in games.records)
    with pytest.raises(ValueError, match="no tool_use environment named Nope"):
        ProgramSuite("tool_use", envs=["Nope"])


def test_envs_suite_plays_named_environments_of_any_setting_with_the_oracle_scoring_one() -> None:
    from spade_gym.env import SandboxedEnv
    from spade_gym.registry.gymnasium import bundled_registry_path

    suite = load_suite("envs:ArithmeticChain,InboxCodeRelay", SuiteOptions(items=1))
    assert suite.name == "envs:ArithmeticChain,InboxCodeRelay"
    assert {r.setting for r in suite.records} == {"reasoning", "tool_use"}
    assert suite.run(answering(lambda q: "")).score == 0.0
    env = SandboxedEnv(bundled_registry_path() / "envs" / "ArithmeticChain-v0" / "env.py")
    env.reset(seed=HELD_OUT_SEED_BASE)
    oracle = env.oracle()
    env.close()
    solved = load_suite("envs:ArithmeticChain", SuiteOptions(items=1)).run(answering(lambda q: oracle))
    assert solved.n == 1 and solved.score == 1.0
    with pytest.raises(ValueError, match="no environment named Nope"):
        load_suite("envs:Nope")
    with pytest.raises(ValueError, match="name at least one environment"):
        load_suite("envs:")
    assert load_suite("envs:spade/ArithmeticChain-v0,InboxCodeRelay-v0").name == suite.name  # ids as listed
    with pytest.raises(ValueError, match="named more than once"):
        load_suite("envs:ArithmeticChain,ArithmeticChain-v0")


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ("reasoninggym", "did you mean 'reasoning-gym'"),
        ("math", "'math' needs a file"),
        ("math:/no/such.jsonl", "no file at ./no/such.jsonl."),
        ("reasoning-gym:", "name at least one task"),
        ("reasoning-gym:leg_countin", "did you mean 'leg_counting'"),
        ("tool-use:x", "unknown suite"),
    ],
)
def test_bad_suite_names_are_explained(spec: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_suite(spec, SuiteOptions())


# -- the commands --------------------------------------------------------------------------------


def test_eval_refuses_a_bad_suite_before_loading_a_model() -> None:
    code, out = cli("eval", "--suite", "nonsense", "--policy", "/no/such/model")
    assert code == 2 and "unknown suite 'nonsense'" in out and "reasoning-gym[:task,...]" in out
    code, out = cli("eval", "--suite", "reasoning-gym", "--items", "0")
    assert code == 2 and "--items must be >= 1" in out


def test_compare_prints_differences(tmp_path: Path) -> None:
    a = save_results([result([1, 1, 1, 1, 1, 0] * 3), result([0, 1], suite="t")], tmp_path / "a.json")
    b = save_results([result([0, 0, 0, 0, 1, 0] * 3)], tmp_path / "b.json")
    code, out = cli("compare", str(a), str(b))
    assert code == 0 and "+0.667" in out and "A better" in out and "in one file only (not compared): t" in out
    code, out = cli("compare", str(b), str(a))
    assert code == 0 and "-0.667" in out and "B better" in out
    (tmp_path / "x.json").write_text("not json")
    code, out = cli("compare", str(a), str(tmp_path / "x.json"))
    assert code == 2 and "is not JSON" in out


@pytest.mark.slow
def test_eval_with_the_embedded_model_on_reasoning_gym(tmp_path: Path) -> None:
    pytest.importorskip("reasoning_gym")
    out_file = tmp_path / "r.json"
    code, out = cli(
        "eval", "--suite", "reasoning-gym:leg_counting,gcd", "--items", "2", "--max-new-tokens", "16",
        "--out", str(out_file), "--details",
    )  # fmt: skip
    assert code == 0, out
    assert "SmolLM2-135M-Instruct on held-out suites" in out and "reasoning-gym" in out and "leg_counting" in out
    (res,) = load_results(out_file)
    assert res.n == 4 and all(0.0 <= r.score <= 1.0 for r in res.items) and res.config["split"] == "eval"


TINY_RUN = """
policy:
  spec: default
  lora: {r: 4, lora_alpha: 8, target_modules: [q_proj]}
designer: {prompts_per_iteration: 1, group_size: 2, edit_probability: 1.0, max_new_tokens: 64, edit_max_new_tokens: 48, document_max_tokens: 128, memory_k: 1}  # edits only: no design floor
agent: {k: 2, max_new_tokens: 12, max_turns: 1, replay_envs: 1, episodes_per_env: 2}
run: {iterations: 1, tensorboard: false}
"""


@pytest.mark.slow
def test_the_selfplay_vs_baseline_script_writes_the_table_and_plot(tmp_path: Path) -> None:
    pytest.importorskip("reasoning_gym")
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    (tmp_path / "tiny.yaml").write_text(TINY_RUN)
    done = subprocess.run(
        [
            sys.executable, str(root / "examples" / "selfplay_vs_baseline.py"), "--config", str(tmp_path / "tiny.yaml"),
            "--out", str(tmp_path / "cmp"), "--suite", "reasoning-gym:leg_counting", "--items", "2",
            "--max-new-tokens", "12", "--max-baseline-iterations", "3",
        ],
        capture_output=True, text=True, timeout=900, cwd=root,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    assert "compute: self-play" in done.stdout and "| reasoning-gym:leg_counting | 2 |" in done.stdout
    table = (tmp_path / "cmp" / "comparison.md").read_text()
    assert "| suite | items | self-play | baseline |" in table and "| reasoning-gym:leg_counting | 2 |" in table
    assert (tmp_path / "cmp" / "comparison.png").stat().st_size > 1000
    for name in ("selfplay", "baseline"):
        (res,) = load_results(tmp_path / "cmp" / f"{name}_eval.json")
        assert res.n == 2 and res.policy.startswith(f"{name}@")
    from spade_gym.trainer.run import read_metrics

    assert 1 <= len(read_metrics(tmp_path / "cmp" / "baseline" / "metrics.jsonl")) <= 3


#: Right answers to the example benchmark files, keyed by a phrase of each prompt.
ORACLE_ANSWERS = {
    "rolls": "<answer>7</answer>",
    "Pens cost": "<answer>8</answer>",
    "Simplify": "<answer>\\frac{3}{4}</answer>",
    "closest to the Sun": "<answer>B</answer>",
    "7 times 8": "<answer>B</answer>",
    "boils": "<answer>B</answer>",
    "add(a, b)": "```python\ndef add(a, b):\n    return a + b\n```",
    "reverse_words": "```python\ndef reverse_words(s):\n    return ' '.join(s.split()[::-1])\n```",
}


def oracle_answer(prompt: list[dict[str, str]]) -> str:
    """The right answer to a prompt of the example benchmark files."""
    return next(a for key, a in ORACLE_ANSWERS.items() if key in prompt[-1]["content"])


@pytest.mark.parametrize("spec", ["math:gsm8k_sample.jsonl", "mc:mc_sample.jsonl", "code:code_sample.jsonl"])
def test_the_example_benchmark_files_load_and_score(spec: str) -> None:
    pytest.importorskip("math_verify")
    kind, name = spec.split(":")
    path = Path(__file__).resolve().parent.parent / "examples" / "benchmarks" / name
    suite = load_suite(f"{kind}:{path}", SuiteOptions())
    solved = suite.run(ScriptedPolicy(oracle_answer, name="oracle"))
    assert solved.n >= 2 and solved.score == 1.0 and solved.errors == 0, [r.error for r in solved.items]
    assert suite.run(answering(lambda q: "")).score == 0.0


# -- bad input found by a new user --------------------------------------------------------------


def test_a_line_that_is_not_utf8_is_one_bad_item(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_bytes(b'{"q": 1}\n{"q": "caf\xe9"}\n{"q": 3}\n')
    rows = read_jsonl(path)
    assert rows[0] == (1, {"q": 1}) and rows[2] == (3, {"q": 3})
    assert rows[1][0] == 2 and "m.jsonl line 2: not UTF-8 text" in str(rows[1][1])
    suite = load_suite(f"mc:{path}", SuiteOptions())
    out = suite.run(answering(lambda q: "A"))
    assert out.n == 3 and out.errors == 3 and "not UTF-8" in str(out.items[1].error)


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda p: "math:", "no file at ''"),
        (lambda p: f"math:{p}", "a folder at"),
        (lambda p: (p / "e.jsonl").write_text("\n \n") and f"mc:{p / 'e.jsonl'}", "is empty: no item to score"),
    ],
)
def test_file_suites_refuse_folders_and_empty_files(tmp_path: Path, make: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        load_suite(make(tmp_path), SuiteOptions())
    with pytest.raises(ValueError, match="SuiteOptions.items must be None or an int >= 1"):
        load_suite("reasoning-gym", SuiteOptions(items=0))


@pytest.mark.parametrize("score", ["1", float("nan"), 5.0, True])
def test_a_hand_edited_result_with_a_bad_score_is_refused(tmp_path: Path, score: Any) -> None:
    path = save_results([result([1.0, 0.0])], tmp_path / "r.json")
    data = json.loads(path.read_text())
    data["results"][0]["items"][0]["score"] = score
    path.write_text(json.dumps(data))
    with pytest.raises(ValueError, match="is not a number in \\[0, 1\\]"):
        load_results(path)
    code, out = cli("compare", str(path), str(path))
    assert code == 2 and "is not a number in [0, 1]" in out


def test_splitting_by_a_key_no_item_has_is_an_error() -> None:
    r = SuiteResult("s", "p", [ItemRecord("a", 1.0, metadata={"task": "t"})])
    assert list(r.by("task")) == ["t"]
    with pytest.raises(KeyError, match="no item of 's' has metadata 'nonsense' \\(keys: task\\)"):
        r.by("nonsense")


def test_eval_refuses_a_folder_as_out_and_a_suite_twice(tmp_path: Path) -> None:
    code, out = cli("eval", "--suite", "reasoning-gym", "--out", str(tmp_path))
    assert code == 2 and "is a folder" in out
    code, out = cli("eval", "--suite", "games", "--suite", "games")
    assert code == 2 and "suite games given more than once" in out


def test_a_folder_of_runs_is_not_a_policy(tmp_path: Path) -> None:
    (tmp_path / "selfplay").mkdir()
    (tmp_path / "selfplay" / "config.yaml").write_text("")
    code, out = cli("eval", "--suite", "games", "--policy", str(tmp_path))
    assert code == 1 and "holds run folders, not a model: pick one of selfplay" in out


def test_compare_reports_settings_that_differ(tmp_path: Path) -> None:
    a, b = result([1, 1, 0, 1]), result([0, 1, 0, 0])
    a.config, b.config = {"tasks": ["gcd"]}, {"tasks": ["lcm"]}
    code, out = cli("compare", str(save_results([a], tmp_path / "a.json")), str(save_results([b], tmp_path / "b.json")))
    assert code == 0 and "measured differently: tasks: ['gcd'] -> ['lcm']" in out and "a.json" in out


def test_reasoning_gym_suite_names_its_tasks_unless_it_is_the_held_out_selection() -> None:
    pytest.importorskip("reasoning_gym")
    assert ReasoningGymSuite().name == "reasoning-gym"
    assert ReasoningGymSuite(["gcd", "lcm"]).name == "reasoning-gym:gcd,lcm"
    with pytest.raises(ValueError, match="named more than once"):
        ReasoningGymSuite(["gcd", "gcd"])


def test_code_cut_off_inside_its_block_still_runs(tmp_path: Path) -> None:
    from spade_gym.evaluation.files import extract_code

    assert extract_code("Here:\n```python\ndef add(a, b):\n    return a + b\n") == "def add(a, b):\n    return a + b\n"
    path = tmp_path / "c.jsonl"
    path.write_text(json.dumps({"prompt": "add(a, b)", "tests": ["assert add(1, 2) == 3"]}) + "\n")
    solved = load_suite(f"code:{path}", SuiteOptions()).run(answering(lambda q: ""))
    assert solved.score == 0.0

    cut_off = ScriptedPolicy("```python\ndef add(a, b):\n    return a + b\n", finish_reason="length")
    assert load_suite(f"code:{path}", SuiteOptions()).run(cut_off).score == 1.0
