"""Held-out suites over local benchmark files: real files, real math-verify, the real sandbox, and
scripted policies that answer right, wrong, nothing, or with hostile code."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from doubles import ScriptedPolicy

from spade_gym import SandboxConfig
from spade_gym.agent import agent_prompt
from spade_gym.evaluation import (
    CodeFileSuite,
    MathFileSuite,
    MultipleChoiceFileSuite,
    SuiteResult,
    extract_code,
    load_results,
    save_results,
)
from spade_gym.policies.base import SamplingParams

pytest.importorskip("math_verify")


def scripted(replies: dict[str, str]) -> ScriptedPolicy:
    """A policy that answers each prompt with the reply of the longest key in its last message ("" when
    none is); it raises for prompts containing ``BOOM``, as a model server that fell over."""

    def reply(prompt: list[dict[str, str]]) -> str:
        text = prompt[-1]["content"]
        if "BOOM" in text:
            raise RuntimeError("the model server fell over")
        keys = [key for key in replies if key in text]
        return replies[max(keys, key=len)] if keys else ""

    return ScriptedPolicy(reply)


def write_lines(path: Path, rows: Sequence[dict[str, Any] | str]) -> Path:
    path.write_text("\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n", encoding="utf-8")
    return path


def summary(result: SuiteResult) -> list[tuple[str, float, str | None]]:
    return [(r.item_id, r.score, r.error) for r in result.items]


# -- math ------------------------------------------------------------------------------------------


def test_gsm8k_answers_right_wrong_empty_and_malformed(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "gsm8k.jsonl",
        [
            {"question": "Q-tag: 6 boxes of 12?", "answer": "6 * 12 = <<6*12=72>>72\n#### 72"},
            {"question": "Q-commas: how many?", "answer": "1000 + 234 = 1,234\n#### 1,234"},
            {"question": "Q-commas-pred: how many?", "answer": "#### 1234"},
            {"question": "Q-untagged: how much?", "answer": "#### 18"},
            {"id": "gsm-wrong", "question": "Q-wrong: how many?", "answer": "#### 72"},
            {"question": "Q-empty: how many?", "answer": "#### 5"},
            {"question": "Q-BOOM", "answer": "#### 5"},
            "{not json",
            {"id": 17, "answer": "#### 3"},
            {"question": "Q-type", "answer": ["3"]},
            {"question": "Q-nothing", "answer": "#### "},
            "",
            {"question": "Q-numeric: how many?", "answer": 0.5},
        ],
    )
    policy = scripted(
        {
            "Q-tag": "6 * 12 = 72. <answer>72</answer>",
            "Q-commas:": "<answer>1234</answer>",
            "Q-commas-pred": "<answer>1,234</answer>",
            "Q-untagged": "She earns 9 * 2 = 18 dollars a day, so the answer is 18 dollars.",
            "Q-wrong": "<answer>70</answer> wait, <answer>73</answer>",
            "Q-numeric": r"<answer>\frac{1}{2}</answer>",
        }
    )
    progress: list[tuple[int, int]] = []
    result = MathFileSuite(path, batch_size=4).run(policy, progress=lambda d, n: progress.append((d, n)))
    assert result.suite == "math:gsm8k.jsonl" and result.policy == "scripted"
    assert summary(result) == [
        ("line-1", 1.0, None),
        ("line-2", 1.0, None),
        ("line-3", 1.0, None),
        ("line-4", 1.0, None),
        ("gsm-wrong", 0.0, None),
        ("line-6", 0.0, "empty response"),
        ("line-7", 0.0, "generation failed: RuntimeError: the model server fell over"),
        (
            "line-8",
            0.0,
            "gsm8k.jsonl line 8: not valid JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1))",
        ),
        ("17", 0.0, "gsm8k.jsonl line 9: missing field 'question' (or 'problem', 'prompt')"),
        ("line-10", 0.0, "gsm8k.jsonl line 10: field 'answer' must be a string or a number, got list"),
        ("line-11", 0.0, "gsm8k.jsonl line 11: field 'answer' has no answer (empty, or nothing after '####')"),
        ("line-13", 1.0, None),  # a numeric answer, 0.5, against \frac{1}{2}
    ]
    assert [r.reference for r in result.items[:5]] == ["72", "1234", "1234", "18", "72"]
    assert result.items[4].metadata == {"answer": "73", "read": "73"}  # the last answer block counts
    assert result.items[3].metadata["answer"].startswith("She earns")  # no tag: the whole completion
    assert result.n == 12 and result.errors == 6 and result.score == pytest.approx(5 / 12)
    assert policy.prompts[0][:3] == agent_prompt("reasoning")  # the instruction and the worked format example
    assert policy.prompts[0][3] == {"role": "user", "content": "Q-tag: 6 boxes of 12?"}
    assert progress[-1] == (12, 12)


def test_math_answers_from_boxed_solutions(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "math.jsonl",
        [
            {"problem": "P-half", "solution": r"We get $\boxed{\frac{1}{2}}$."},
            {"problem": "P-boxed-pred", "solution": r"First \boxed{2}, then finally $\boxed{3}$."},
            {"problem": "P-sqrt", "solution": r"So $x = \boxed{\frac{\sqrt{3}}{2}}$."},
            {"problem": "P-root", "solution": r"$\boxed{\sqrt{2}}$"},
            {"problem": "P-expr", "solution": r"$\boxed{x+1}$"},
            {"problem": "P-interval", "solution": r"$\boxed{(1, 2)}$"},
            {"problem": "P-math500", "answer": r"\frac{14}{3}", "solution": r"\boxed{\frac{14}{3}}"},
            {"problem": "P-unboxed", "solution": "The answer is 4."},
            {"problem": "P-unreadable", "answer": "$ $"},  # math-verify reads nothing in it
            {"prompt": "P-wrong-fraction", "solution": r"$\boxed{\frac{1}{3}}$"},
        ],
    )
    policy = scripted(
        {
            "P-half": "<answer>0.5</answer>",
            "P-boxed-pred": r"The total is $\boxed{3}$.",
            "P-sqrt": r"<answer>\frac{\sqrt3}{2}</answer>",
            "P-root": r"<answer>\sqrt{2}</answer>",
            "P-expr": "<answer>1+x</answer>",
            "P-interval": "<answer>(1, 2)</answer>",
            "P-math500": "<answer>14/3</answer>",
            "P-unreadable": "<answer>3</answer>",
            "P-wrong-fraction": "<answer>0.5</answer>",
        }
    )
    result = MathFileSuite(path).run(policy)
    assert [r.reference for r in result.items[:7]] == [
        r"\frac{1}{2}",
        "3",
        r"\frac{\sqrt{3}}{2}",
        r"\sqrt{2}",
        "x+1",
        "(1, 2)",
        r"\frac{14}{3}",
    ]
    assert summary(result) == [
        ("line-1", 1.0, None),
        ("line-2", 1.0, None),
        ("line-3", 1.0, None),
        ("line-4", 1.0, None),
        ("line-5", 1.0, None),
        ("line-6", 1.0, None),
        ("line-7", 1.0, None),
        ("line-8", 0.0, "math.jsonl line 8: field 'solution' has no \\boxed{...} answer"),
        ("line-9", 0.0, "math.jsonl line 9: math-verify cannot read the reference answer '$ $'"),
        ("line-10", 0.0, None),
    ]


def test_math_verify_runs_off_the_main_thread_and_a_runaway_answer_times_out(tmp_path: Path) -> None:
    path = write_lines(
        tmp_path / "gsm.jsonl",
        [
            {"question": "Q-huge", "answer": "#### 72"},
            {"question": "Q-fine", "answer": "#### 72"},
        ],
    )
    policy = scripted({"Q-huge": "<answer>10^{10^{10}}</answer>", "Q-fine": "<answer>72</answer>"})
    results: list[SuiteResult] = []
    thread = threading.Thread(target=lambda: results.append(MathFileSuite(path, timeout_s=1).run(policy)))
    start = time.monotonic()
    thread.start()
    thread.join(60)
    assert not thread.is_alive() and time.monotonic() - start < 30
    assert summary(results[0]) == [
        ("line-1", 0.0, "math-verify timed out (1 s) reading or comparing the answer"),
        ("line-2", 1.0, None),
    ]


def test_a_math_verify_process_that_hangs_is_killed_and_replaced() -> None:
    from spade_gym.evaluation.files import _math_forms, _MathVerifier

    verifier = _MathVerifier(timeout_s=1, memory_bytes=1 << 30)
    try:
        assert verifier.check(_math_forms("72"), _math_forms("72"))["correct"] is True
        verifier.deadline_s = 0.0  # no time at all: the process is killed
        assert "its process was killed" in verifier.check(_math_forms("72"), _math_forms("72"))["error"]
        verifier.deadline_s = 30.0
        assert verifier.check(_math_forms("1,234"), _math_forms("1234"))["correct"] is True
    finally:
        verifier.close()


def test_math_settings_limit_and_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = write_lines(tmp_path / "g.jsonl", [{"question": f"Q{i}", "answer": f"#### {i}"} for i in range(5)])
    suite = MathFileSuite(path, limit=2, sampling=SamplingParams(temperature=0.0, max_new_tokens=64, stop=("\n\n",)))
    result = suite.run(scripted({"Q0": "<answer>0</answer>", "Q1": "<answer>2</answer>"}))
    assert summary(result) == [("line-1", 1.0, None), ("line-2", 0.0, None)]
    config = json.loads(json.dumps(result.config))
    assert config["path"] == str(path) and config["limit"] == 2 and config["batch_size"] == 16
    assert config["sampling"]["max_new_tokens"] == 64 and config["sampling"]["stop"] == ["\n\n"]
    assert config["timeout_s"] == 5
    saved = save_results([result], tmp_path / "out.json")
    assert summary(load_results(saved)[0]) == summary(result)
    with pytest.raises(FileNotFoundError, match="no benchmark file"):
        MathFileSuite(tmp_path / "missing.jsonl")
    with pytest.raises(ValueError, match="sampling.n must be 1"):
        MathFileSuite(path, sampling=SamplingParams(temperature=1.0, n=2))
    with pytest.raises(ValueError, match="limit"):
        MathFileSuite(path, limit=-1)
    with pytest.raises(ValueError, match="timeout_s"):
        MathFileSuite(path, timeout_s=0)
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(
        importlib.util, "find_spec", lambda name, *a: None if name == "math_verify" else real_find_spec(name, *a)
    )
    with pytest.raises(ImportError, match=r"pip install -e '\.\[eval\]' in a clone"):
        MathFileSuite(path)


# -- multiple choice -------------------------------------------------------------------------------


def test_multiple_choice_labels_indices_texts_and_tolerated_answers(tmp_path: Path) -> None:
    colours = ["red", "green", "blue", "yellow"]
    path = write_lines(
        tmp_path / "mmlu.jsonl",
        [
            {"question": "M-plain", "choices": colours, "answer": "B"},
            {"question": "M-parens", "choices": colours, "answer": 1},
            {"question": "M-dot", "choices": colours, "answer": "green"},
            {"question": "M-lower", "choices": {"a": "red", "b": "green", "c": "blue"}, "answer": "(b)"},
            {"question": "M-paren-text", "choices": colours, "answer": "B"},
            {"question": "M-text", "choices": colours, "answer": "B"},
            {"question": "M-sentence", "choices": colours, "answer": "B"},
            {"question": "M-untagged", "choices": colours, "answer": 2},
            {"question": "M-wrong", "choices": colours, "answer": "B"},
            {"question": "M-none", "choices": colours, "answer": "B"},
            {"question": "M-empty", "choices": colours, "answer": "B"},
            {"question": "M-bad-choices", "choices": "red, green", "answer": "A"},
            {"question": "M-range", "choices": colours, "answer": 4},
            {"question": "M-unknown", "choices": colours, "answer": "purple"},
            {"question": "M-no-choices", "answer": "A"},
            {"question": "M-label", "choices": {"AB": "x", "C": "y"}, "answer": "C"},
            {"question": "M-one", "choices": ["only"], "answer": 0},
            {"question": "M-choice-type", "choices": ["x", None], "answer": 0},
            {"question": "M-answer-type", "choices": colours, "answer": None},
        ],
    )
    policy = scripted(
        {
            "M-plain": "<answer>B</answer>",
            "M-parens": "<answer>(B)</answer>",
            "M-dot": "<answer>B.</answer>",
            "M-lower": "<answer>b</answer>",
            "M-paren-text": "<answer>B) green</answer>",
            "M-text": "<answer>Green</answer>",
            "M-sentence": "<answer>The answer is B</answer>",
            "M-untagged": "A is wrong and B is wrong, so it must be C.",
            "M-wrong": "<answer>A</answer>",
            "M-none": "<answer>7</answer> but maybe B",
        }
    )
    result = MultipleChoiceFileSuite(path).run(policy)
    assert result.suite == "mc:mmlu.jsonl"
    where = "mmlu.jsonl line"
    assert summary(result) == [
        ("line-1", 1.0, None),
        ("line-2", 1.0, None),
        ("line-3", 1.0, None),
        ("line-4", 1.0, None),
        ("line-5", 1.0, None),
        ("line-6", 1.0, None),
        ("line-7", 1.0, None),
        ("line-8", 1.0, None),
        ("line-9", 0.0, None),
        ("line-10", 0.0, None),
        ("line-11", 0.0, "empty response"),
        (
            "line-12",
            0.0,
            f"{where} 12: field 'choices' must be a list of strings or an object mapping labels to strings, got str",
        ),
        ("line-13", 0.0, f"{where} 13: answer index 4 is out of range for 4 choices (0-based)"),
        (
            "line-14",
            0.0,
            f"{where} 14: answer 'purple' is neither a choice label (A, B, C, D) nor the exact text of a choice",
        ),
        ("line-15", 0.0, f"{where} 15: missing field 'choices'"),
        ("line-16", 0.0, f"{where} 16: choice label 'AB' must be a single letter A-Z"),
        ("line-17", 0.0, f"{where} 17: field 'choices' needs at least two choices, got 1"),
        ("line-18", 0.0, f"{where} 18: choice B must be a string, got null"),
        ("line-19", 0.0, f"{where} 19: field 'answer' must be a label, a 0-based index or a choice's text, got null"),
    ]
    assert [r.metadata["prediction"] for r in result.items[7:10]] == ["C", "A", None]
    assert [r.reference for r in result.items[:4]] == ["B", "B", "B", "B"]
    prompt = policy.prompts[0][-1]["content"]
    assert prompt.startswith("M-plain\n\nA. red\nB. green\nC. blue\nD. yellow\n\n")
    assert "letter of the correct choice inside <answer></answer>" in prompt


# -- code ------------------------------------------------------------------------------------------

ADD_RIGHT = "```python\ndef add(a, b):\n    return a + b\n```"


def fenced(code: str) -> str:
    return f"Here is my solution.\n```python\n{code}\n```\nIt adds."


def code_file(path: Path, keys: Sequence[str]) -> Path:
    tests = ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"]
    return write_lines(path, [{"id": key, "prompt": f"{key}: write add(a, b).", "tests": tests} for key in keys])


def test_code_right_wrong_empty_and_humaneval_style(tmp_path: Path, fast_config: SandboxConfig) -> None:
    humaneval_test = (
        'METADATA = {"author": "x"}\n\n\ndef check(candidate):\n'
        '    assert candidate("ab") == "ba"\n    assert candidate("a\\nb") == "b\\na"\n'
    )
    path = write_lines(
        tmp_path / "humaneval.jsonl",
        [
            {
                "id": "right",
                "prompt": "C-right: write add(a, b).",
                "tests": ["assert add(1, 2) == 3", "assert add(-1, 1) == 0"],
            },
            {
                "id": "half",
                "prompt": "C-half: write add(a, b).",
                "tests": ["assert add(1, 1) == 2", "assert add(2, 2) == 4"],
            },
            {"id": "empty", "prompt": "C-empty", "tests": ["assert add(1, 2) == 3"]},
            {
                "task_id": "HumanEval/1",
                "prompt": 'from typing import List\n\n\ndef flip(s: str) -> str:\n    """Reverse s."""\n',
                "test": humaneval_test,
                "entry_point": "flip",
            },
            {"id": "mbpp", "text": "C-mbpp: write square.", "test_list": ["assert square(3) == 9"]},
            {
                "id": "unlabelled",
                "prompt": "C-unlabelled: write add.",
                "tests": "assert add(2, 3) == 5\nassert add(0, 0) == 0",
            },
            {"id": "bad-tests", "prompt": "C-x", "tests": [1, 2]},
            {"id": "no-tests", "prompt": "C-x", "tests": []},
            {"id": "numpy-test", "prompt": "C-x", "tests": ["import numpy\nassert add(1, 2) == 3"]},
            {"id": "broken-test", "prompt": "C-x", "tests": ["assert add(1, 2) =="]},
            {"id": "no-prompt", "tests": ["assert True"]},
            {"id": "bad-entry", "prompt": "C-x", "tests": ["assert True"], "entry_point": "not a name"},
        ],
    )
    flip = (
        "from typing import List, Optional\n\n\ndef flip(s: str) -> str:\n    out: List[str] = []\n"
        "    for ch in s:\n        out.insert(0, ch)\n    return ''.join(out)\n\n\n"
        "if __name__ == '__main__':\n    print(flip('abc'))\n"
    )
    policy = scripted(
        {
            "C-right": ADD_RIGHT,
            "C-half": fenced("def add(a, b):\n    return a * b"),  # right for 2 + 2 only
            "Reverse s.": "```python\n" + flip + "```",
            "C-mbpp": "```py\ndef square(x):\n    return x ** 2\n```",
            "C-unlabelled": "```\ndef add(a, b):\n    return a + b\n```",
        }
    )
    result = CodeFileSuite(path, sandbox_config=fast_config).run(policy)
    assert result.suite == "code:humaneval.jsonl"
    where = "humaneval.jsonl line"
    assert summary(result) == [
        ("right", 1.0, None),
        ("half", 0.0, None),
        ("empty", 0.0, "empty response"),
        ("line-4", 1.0, None),
        ("mbpp", 1.0, None),
        ("unlabelled", 1.0, None),
        ("bad-tests", 0.0, f"{where} 7: field 'tests' must be a list of strings or a string, got list"),
        ("no-tests", 0.0, f"{where} 8: field 'tests' has no tests"),
        (
            "numpy-test",
            0.0,
            f"{where} 9: test 0 imports 'numpy'; the sandbox allows only math, random, re, string, "
            "itertools, collections, heapq, bisect, fractions, json",
        ),
        ("broken-test", 0.0, f"{where} 10: test 0 is not valid Python (line 1: invalid syntax)"),
        ("no-prompt", 0.0, f"{where} 11: missing field 'prompt' (or 'text')"),
        ("bad-entry", 0.0, f"{where} 12: field 'entry_point' must be a function name, got 'not a name'"),
    ]
    half = result.items[1].metadata
    assert (half["tests_passed"], half["tests_total"]) == (1, 2)
    assert half["failures"] == [[0, "AssertionError()"]]
    assert result.items[0].metadata == {"tests_passed": 2, "tests_total": 2, "failures": [], "failure": None}
    assert result.items[5].metadata["tests_total"] == 1  # one string of test code is one test
    assert "must define `flip`" in policy.prompts[3][1]["content"]
    assert "may import only math, random" in policy.prompts[0][0]["content"]
    assert result.config["call_timeout_s"] == 0.5


HOSTILE = {
    "H-import-os": "import os\n\ndef add(a, b):\n    os.system('touch /tmp/pwned')\n    return a + b",
    "H-open": "def add(a, b):\n    open('/etc/passwd').read()\n    return a + b",
    "H-open-at-load": "SECRET = open('/etc/passwd').read()\n\ndef add(a, b):\n    return a + b",
    "H-dunder-import": "def add(a, b):\n    return __import__('os').getcwd()",
    "H-own-env": "class Env:\n    pass\n\ndef add(a, b):\n    return a + b",
    "H-loop-at-load": "while True:\n    pass",
    "H-loop-in-test": "def add(a, b):\n    while True:\n        pass",
    "H-memory-at-load": "BIG = [0] * (10 ** 10)\n\ndef add(a, b):\n    return a + b",
    "H-memory-in-test": "def add(a, b):\n    return len('x' * (10 ** 10)) + a + b",
    "H-syntax": "def add(a, b) return a + b",
    "H-exit": "def add(a, b):\n    raise SystemExit(0)",
    "H-print": "def add(a, b):\n    print('x' * 100000)\n    return a + b",
    "H-recursion": "def add(a, b):\n    return add(a, b)",
}


def test_hostile_code_scores_zero_with_the_sandbox_reason(tmp_path: Path, fast_config: SandboxConfig) -> None:
    path = code_file(tmp_path / "code.jsonl", list(HOSTILE))
    policy = scripted({key: fenced(code) for key, code in HOSTILE.items()})
    start = time.monotonic()
    result = CodeFileSuite(path, sandbox_config=fast_config).run(policy)
    assert time.monotonic() - start < 30
    errors = {r.item_id: r.metadata["failure"] or "" for r in result.items}
    assert all(r.score == 0.0 for r in result.items)
    assert errors["H-import-os"].startswith("COMPILE_REJECTED: the code: the program fails the static check")
    assert "import of 'os' is not allowed" in errors["H-import-os"]
    assert errors["H-open"] == "SANDBOX_DENIED: line 2: builtin open() is not available to environment programs"
    assert errors["H-open-at-load"] == "SANDBOX_DENIED: line 1: builtin open() is not available to environment programs"
    assert (
        errors["H-dunder-import"].startswith("COMPILE_REJECTED: ")
        and '"__import__" is an invalid name' in errors["H-dunder-import"]
    )
    assert "defines 'class Env' 2 times" in errors["H-own-env"]
    assert (
        errors["H-loop-at-load"]
        == "TIMEOUT: the program ran past the CPU budget of 0.5 s of load(); the worker was killed"
    )
    assert (
        errors["H-loop-in-test"]
        == "TIMEOUT: the program ran past the CPU budget of 0.5 s of step(); the worker was killed"
    )
    assert errors["H-memory-at-load"] == "MEMORY_LIMIT: the program ran out of memory"
    assert errors["H-memory-in-test"] == "MEMORY_LIMIT: the program ran out of memory"
    assert errors["H-syntax"] == "the code does not parse: line 1: expected ':'"
    assert errors["H-exit"].startswith("ENV_EXCEPTION: SystemExit")
    assert errors["H-print"].startswith("OUTPUT_LIMIT: ")
    # infinite recursion is an ordinary failed test (RecursionError), not a sandbox failure
    assert errors["H-recursion"] == "" and result.items[-1].error is None
    assert result.items[-1].metadata["failures"][0] == [0, "RecursionError('maximum recursion depth exceeded')"]
    # code that cannot run is a wrong answer, not an item that could not be answered
    assert result.errors == 0 and result.score == 0.0
    assert not Path("/tmp/pwned").exists()


def test_code_cannot_fake_passing_tests(tmp_path: Path, fast_config: SandboxConfig) -> None:
    """Rebinding names the harness uses, or the tests themselves, does not add passes."""
    tricks = {
        "T-enumerate": "def enumerate(xs):\n    return [(0, lambda: None)] * 10\n\ndef add(a, b):\n    return -1",
        "T-rebind-tests": ("def add(a, b):\n    global spade_test_1\n    spade_test_1 = lambda: None\n    return -1"),
        "T-exception": "Exception = BaseException\n\ndef add(a, b):\n    return -1",
    }
    path = code_file(tmp_path / "tricks.jsonl", list(tricks))
    result = CodeFileSuite(path, sandbox_config=fast_config).run(scripted({k: fenced(c) for k, c in tricks.items()}))
    assert [(r.score, r.metadata["tests_passed"]) for r in result.items] == [(0.0, 0), (0.0, 0), (0.0, 0)]


def test_extract_code() -> None:
    assert extract_code("a\n```python\nx = 1\n```\nb\n```python\ny = 2\n```") == "y = 2\n"
    assert extract_code("```text\nnot code\n```\n```\nz = 3\n```") == "z = 3\n"
    assert extract_code("```py\nw = 4\n```\n```\nz = 3\n```") == "w = 4\n"
    assert extract_code("def f(): pass") == "def f(): pass"


def test_importing_the_evaluation_package_stays_light() -> None:
    code = (
        "import sys, spade_gym.evaluation as e; e.CodeFileSuite, e.MathFileSuite;"
        "print('math_verify' in sys.modules, 'torch' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_bad_settings_are_named(tmp_path: Path) -> None:
    path = code_file(tmp_path / "c.jsonl", ["x"])
    with pytest.raises(ValueError, match="batch_size"):
        CodeFileSuite(path, batch_size=0)
    with pytest.raises(ValueError, match="sandbox_config"):
        CodeFileSuite(path, sandbox_config={"call_timeout_s": 1})  # type: ignore[arg-type]
    assert MultipleChoiceFileSuite(path, limit=0).run(scripted({})).n == 0
