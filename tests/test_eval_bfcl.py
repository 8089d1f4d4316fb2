"""BFCL-style multi-turn function calling: loading, per-turn call matching, batching and bad input,
played by scripted policies (real Policy objects that answer from a script)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from doubles import ScriptedPolicy

from spade_gym.evaluation import BFCLSuite
from spade_gym.evaluation.bfcl import RECORDED, load_function_docs, parse_call, to_openai_tool
from spade_gym.policies.base import SamplingParams

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "benchmarks" / "bfcl_multi_turn_sample.jsonl"
DONE = "All done."


def call(name: str, **arguments: Any) -> str:
    """A completion that makes one tool call."""
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def user(content: str) -> list[dict[str, str]]:
    return [{"role": "user", "content": content}]


def fn(name: str, *params: str) -> dict[str, Any]:
    """A BFCL-style function doc with string parameters."""
    properties = {p: {"type": "string", "description": p} for p in params}
    return {"name": name, "description": f"{name} tool", "parameters": {"type": "dict", "properties": properties}}


FS_TOOLS = [fn("cd", "folder"), fn("mkdir", "dir_name"), fn("mv", "source", "destination"), fn("ls")]
FS_ITEM: dict[str, Any] = {
    "id": "fs-0",
    "question": [user("Go to document and make temp."), user("Move report.pdf into temp.")],
    "function": FS_TOOLS,
    "ground_truth": [
        ["cd(folder='document')", "mkdir(dir_name='temp')"],
        ["mv(source='report.pdf', destination='temp')"],
    ],
}
CD, MKDIR = call("cd", folder="document"), call("mkdir", dir_name="temp")
MV = call("mv", source="report.pdf", destination="temp")
RIGHT = [CD, MKDIR, DONE, MV, DONE]


def scripted(scripts: dict[str, list[str]]) -> ScriptedPolicy:
    """A policy that answers each conversation from the script of its first user message: the
    ``k``-th assistant message is ``script[k]`` (``DONE`` past its end). It raises for a batch
    holding a conversation whose first user message contains ``"boom"``."""

    def reply(prompt: list[dict[str, str]]) -> str:
        first = next(m["content"] for m in prompt if m["role"] == "user")
        if "boom" in first:
            raise RuntimeError("boom")
        script = scripts[first]
        step = sum(m["role"] == "assistant" for m in prompt)
        return script[step] if step < len(script) else DONE

    return ScriptedPolicy(reply)


def write_jsonl(path: Path, rows: Sequence[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8")
    return path


def run_one(tmp_path: Path, item: dict[str, Any], script: list[str], **kwargs: Any) -> Any:
    suite = BFCLSuite(write_jsonl(tmp_path / "items.jsonl", [item]), **kwargs)
    policy = scripted({item["question"][0][0]["content"]: script})
    result = suite.run(policy)
    assert result.n == 1
    return result.items[0], policy


# ---------------------------------------------------------------------------------------------
# Call matching, per turn


@pytest.mark.parametrize(
    ("script", "score", "turns"),
    [
        (RIGHT, 1.0, [True, True]),
        ([MKDIR, CD, DONE, MV, DONE], 1.0, [True, True]),  # order within a turn does not matter
        ([CD, MKDIR, DONE, call("mv", source="report.pdf", destination="tmp"), DONE], 0.5, [True, False]),
        ([call("chdir", folder="document"), MKDIR, DONE, MV, DONE], 0.5, [False, True]),  # wrong name
        ([CD, MKDIR, MKDIR, DONE, MV, DONE], 0.5, [False, True]),  # extra call
        ([CD, DONE, MV, DONE], 0.5, [False, True]),  # missing call
        ([CD, MKDIR, DONE, MV, call("ls"), DONE], 0.5, [True, False]),  # extra call of another tool
        ([CD, MKDIR, DONE, DONE], 0.5, [True, False]),  # no call at all where one was due
        ([MV, DONE, CD, MKDIR, DONE], 0.0, [False, False]),  # right calls, wrong turns
        ([DONE, DONE], 0.0, [False, False]),
    ],
)
def test_a_turn_is_right_when_its_calls_are_the_ground_truths_multiset(
    tmp_path: Path, script: list[str], score: float, turns: list[bool]
) -> None:
    record, _ = run_one(tmp_path, FS_ITEM, script)
    assert record.score == score and record.error is None
    assert [t["correct"] for t in record.metadata["turns"]] == turns
    assert record.metadata["turns_correct"] == turns.count(True) and record.metadata["turns_total"] == 2


def test_the_record_says_what_was_called_and_what_was_expected(tmp_path: Path) -> None:
    record, policy = run_one(tmp_path, FS_ITEM, [CD, call("mkdir", dir_name="tmp"), DONE, MV, DONE])
    first = record.metadata["turns"][0]
    assert first["calls"] == [
        {"name": "cd", "arguments": {"folder": "document"}},
        {"name": "mkdir", "arguments": {"dir_name": "tmp"}},
    ]
    assert first["expected"] == FS_ITEM["ground_truth"][0]
    assert record.prompt == "Go to document and make temp." and record.response == DONE
    assert json.loads(record.reference or "") == FS_ITEM["ground_truth"]
    assert record.metadata["source"] == "items.jsonl line 1 (id 'fs-0')" and record.metadata["completions"] == 5
    # what the Agent saw at its last step: system prompt, the turns, each call's result as a user message
    last = policy.batches[-1][0]
    assert [m["role"] for m in last] == ["system", "user"] + ["assistant", "user"] * 4
    assert last[3]["content"] == RECORDED == '{"status": "recorded"}' and last[6]["content"] == DONE
    assert last[7]["content"] == "Move report.pdf into temp."


@pytest.mark.parametrize(
    ("truth", "arguments", "right"),
    [
        ("f(x=1)", {"x": 1.0}, True),
        ("f(x=1.5, y=[1, 2])", {"y": [1.0, 2], "x": 1.5}, True),
        ("f(x=(1, 'a'))", {"x": [1, "a"]}, True),  # tuples and lists alike
        ("f(x={'k': [1]})", {"x": {"k": [1.0]}}, True),
        ("f(x=None, y=True)", {"x": None, "y": True}, True),
        ("f(x=1)", {"x": "1"}, False),  # strings are not numbers
        ("f(x=1)", {"x": True}, False),  # booleans are not numbers
        ("f(x='Doc')", {"x": "doc"}, False),  # strings compare exactly
        ("f(x='a')", {"x": "a", "y": 2}, False),  # an extra argument
        ("f(x='a', y=2)", {"x": "a"}, False),  # a missing one
        ("f('a', 2)", {"$0": "a", "$1": 2}, True),  # positional arguments are "$0", "$1"...
    ],
)
def test_arguments_compare_as_json_values(tmp_path: Path, truth: str, arguments: dict[str, Any], right: bool) -> None:
    item = {"question": [user("Do it.")], "function": [fn("f", "x", "y")], "ground_truth": [[truth]]}
    record, _ = run_one(tmp_path, item, [call("f", **arguments), DONE])
    assert record.score == (1.0 if right else 0.0)


def test_arguments_sent_as_a_json_string_are_read(tmp_path: Path) -> None:
    openai_style = '<tool_call>{"name": "cd", "arguments": "{\\"folder\\": \\"document\\"}"}</tool_call>'
    record, _ = run_one(tmp_path, FS_ITEM, [openai_style, MKDIR, DONE, MV, DONE])
    assert record.score == 1.0


# ---------------------------------------------------------------------------------------------
# Malformed, empty and endless answers


@pytest.mark.parametrize(
    ("bad", "told"),
    [
        ("<tool_call>{not json</tool_call>", "not valid JSON"),
        ('<tool_call>{"arguments": {}}</tool_call>', 'must be a JSON object with a "name"'),
        ('<tool_call>{"name": "cd", "arguments": [1]}</tool_call>', '"arguments" must be a JSON object'),
        ('<tool_call>{"name": "cd", "arguments": {"folder": "document"}}', "no closing </tool_call>"),
    ],
)
def test_a_malformed_call_is_told_to_the_agent_and_makes_its_turn_wrong(tmp_path: Path, bad: str, told: str) -> None:
    record, policy = run_one(tmp_path, FS_ITEM, [bad, CD, MKDIR, DONE, MV, DONE])
    assert record.score == 0.5 and record.error is None
    assert [t["correct"] for t in record.metadata["turns"]] == [False, True]
    assert told in record.metadata["turns"][0]["calls"][0]["malformed"]
    assert told in policy.batches[1][0][-1]["content"]  # the next prompt ends with the error message
    assert len(record.metadata["turns"][0]["calls"]) == 3


def test_an_empty_answer_makes_its_turn_wrong(tmp_path: Path) -> None:
    record, _ = run_one(tmp_path, FS_ITEM, [CD, MKDIR, DONE, ""])
    assert record.score == 0.5 and record.error is None
    # even a turn that expects no call is wrong when the answer is empty
    item = dict(FS_ITEM, ground_truth=[FS_ITEM["ground_truth"][0], []])
    record, _ = run_one(tmp_path, item, [CD, MKDIR, DONE, "  \n"])
    assert record.score == 0.5 and [t["correct"] for t in record.metadata["turns"]] == [True, False]
    record, _ = run_one(tmp_path, item, [CD, MKDIR, DONE, "Nothing to do."])
    assert record.score == 1.0


def test_an_item_that_gets_nothing_says_empty_response(tmp_path: Path) -> None:
    record, policy = run_one(tmp_path, FS_ITEM, ["", ""])
    assert (record.score, record.error, record.metadata["completions"]) == (0.0, "empty response", 2)
    assert len(policy.batches) == 2  # an empty answer ends the turn; the next turn is still played


def test_calls_past_the_limit_end_the_turn(tmp_path: Path) -> None:
    item = {"question": [user("List it."), user("Again.")], "function": FS_TOOLS, "ground_truth": [["ls()"], ["ls()"]]}
    record, policy = run_one(tmp_path, item, [call("ls")] * 20, max_calls_per_turn=3)
    assert record.score == 0.0 and record.error is None
    assert [len(t["calls"]) for t in record.metadata["turns"]] == [3, 3] and len(policy.batches) == 6
    assert policy.batches[3][0][-1] == {"role": "user", "content": "Again."}  # turn 2 began after 3 calls
    # the limit itself is allowed: the turn ends at the limit-th call and can be right
    record, policy = run_one(tmp_path, FS_ITEM, [CD, MKDIR, MV, DONE], max_calls_per_turn=2)
    assert record.score == 1.0 and len(policy.batches) == 4


# ---------------------------------------------------------------------------------------------
# Batching and generation failures


def test_one_generate_call_per_step_over_every_item_still_playing(tmp_path: Path) -> None:
    items = [dict(FS_ITEM, id=f"fs-{i}", question=[user(f"Task {i}."), user(f"Next {i}.")]) for i in range(3)]
    path = write_jsonl(tmp_path / "items.jsonl", items)
    policy = scripted({"Task 0.": RIGHT, "Task 1.": [DONE, DONE], "Task 2.": [CD, MKDIR, DONE, DONE]})
    seen: list[tuple[int, int]] = []
    result = BFCLSuite(path, sampling=SamplingParams(temperature=0.0, seed=7)).run(
        policy, progress=lambda *a: seen.append(a)
    )
    assert [r.score for r in result.items] == [1.0, 0.0, 0.5]
    assert [len(b) for b in policy.batches] == [3, 3, 2, 2, 1]
    assert [s.seed for s in policy.samplings if s] == [7, 8, 9, 10, 11]
    assert all(s is not None and s.truncate_prompt and s.temperature == 0.0 for s in policy.samplings)
    assert seen == [(0, 3), (0, 3), (1, 3), (1, 3), (2, 3), (3, 3)]
    assert result.suite == "bfcl:items.jsonl" and result.policy == "scripted" and result.seconds > 0
    assert result.config == BFCLSuite(path, sampling=SamplingParams(temperature=0.0, seed=7)).config()
    json.dumps(result.to_dict(), allow_nan=False)


def test_a_failing_batch_is_retried_item_by_item(tmp_path: Path) -> None:
    items = [
        dict(FS_ITEM, id="a", question=[user("A."), user("A2.")]),
        dict(FS_ITEM, id="b", question=[user("boom"), user("B2.")]),
        dict(FS_ITEM, id="c", question=[user("C."), user("C2.")]),
    ]
    policy = scripted({"A.": RIGHT, "C.": [CD, MKDIR, DONE, DONE]})
    result = BFCLSuite(write_jsonl(tmp_path / "items.jsonl", items)).run(policy)
    assert [r.score for r in result.items] == [1.0, 0.0, 0.5]
    assert result.items[1].error == "generation failed: RuntimeError: boom" and result.errors == 1
    assert [len(b) for b in policy.batches[:4]] == [3, 1, 1, 1]  # the batch, then one by one
    assert [len(b) for b in policy.batches[4:]] == [2, 2, 2, 1]  # the failed item is out
    assert all(s is not None and s.max_new_tokens == 512 and s.seed is None for s in policy.samplings)  # the default


# ---------------------------------------------------------------------------------------------
# Files: tools and answers apart, ids, limits, withheld tools


def test_tools_and_answers_from_separate_files(tmp_path: Path) -> None:
    docs = tmp_path / "func_doc"
    docs.mkdir()
    write_jsonl(docs / "file_system.json", FS_TOOLS)  # BFCL's .json files are JSON lines
    openai_doc = {"type": "function", "function": {"name": "send", "description": "Send.", "parameters": {}}}
    (docs / "messages.json").write_text(json.dumps([openai_doc, fn("cd", "other")]), encoding="utf-8")
    items = [
        {"id": "x", "question": FS_ITEM["question"]},
        {"id": "y", "question": [user("Send it.")]},
        {"id": "z", "question": [user("No answer for me.")]},
    ]
    answers = write_jsonl(
        tmp_path / "answers.jsonl",
        [
            {"id": "y", "ground_truth": [["send(to='Ana')"]]},
            "{oops",
            {"id": "x", "ground_truth": FS_ITEM["ground_truth"]},
        ],
    )
    suite = BFCLSuite(write_jsonl(tmp_path / "items.jsonl", items), answers=answers, functions=docs)
    policy = scripted({"Go to document and make temp.": RIGHT, "Send it.": [call("send", to="Ana"), DONE]})
    result = suite.run(policy)
    assert [r.score for r in result.items] == [1.0, 1.0, 0.0]
    assert result.items[2].error == (
        "items.jsonl line 3 (id 'z'): no ground truth: no 'ground_truth' field, not in answers.jsonl; "
        "answers.jsonl has unreadable lines [2]"
    )
    system = policy.batches[0][0][0]["content"]
    assert '"name": "send"' in system and '"name": "mv"' in system and '"dict"' not in system
    assert system.count('"name": "cd"') == 1  # the first doc of a name wins
    assert suite.config()["answers"] == str(answers) and suite.config()["functions"] == str(docs)


def test_inline_fields_win_over_the_files(tmp_path: Path) -> None:
    answers = write_jsonl(tmp_path / "answers.jsonl", [{"id": "fs-0", "ground_truth": [["ls()"], ["ls()"]]}])
    record, _ = run_one(
        tmp_path, FS_ITEM, RIGHT, answers=answers, functions=write_jsonl(tmp_path / "f.jsonl", [fn("ls")])
    )
    assert record.score == 1.0


def test_a_duplicated_answer_id_is_an_error(tmp_path: Path) -> None:
    item = {"id": "d", "question": [user("Hi.")], "function": FS_TOOLS}
    answers = write_jsonl(tmp_path / "answers.jsonl", [{"id": "d", "ground_truth": [[]]}] * 2)
    record, _ = run_one(tmp_path, item, [DONE], answers=answers)
    assert record.error == "items.jsonl line 1 (id 'd'): answers.jsonl has 2 ground truths for this id (lines [1, 2])"


def test_ids_default_to_the_line_number_and_limit_reads_the_first_lines(tmp_path: Path) -> None:
    rows = [FS_ITEM, "", {k: v for k, v in FS_ITEM.items() if k != "id"}, "{bad"]
    path = write_jsonl(tmp_path / "items.jsonl", rows)
    result = BFCLSuite(path).run(scripted({"Go to document and make temp.": RIGHT}))
    assert [r.item_id for r in result.items] == ["fs-0", "line-3", "line-4"]
    assert [r.score for r in result.items] == [1.0, 1.0, 0.0]
    assert len(BFCLSuite(path, limit=2)) == 2 and BFCLSuite(path, limit=0).run(scripted({})).n == 0


def test_withheld_and_excluded_tools(tmp_path: Path) -> None:
    item = {
        "question": [user("Sort notes.txt."), []],
        "function": [*FS_TOOLS, fn("sort", "file_name")],
        "excluded_function": ["ls"],
        "missed_function": {"1": ["sort"]},
        "ground_truth": [[], ["sort(file_name='notes.txt')"]],
    }
    record, policy = run_one(
        tmp_path, item, ["I have no tool to sort with.", call("sort", file_name="notes.txt"), DONE]
    )
    assert record.score == 1.0
    system = policy.batches[0][0][0]["content"]
    assert '"name": "cd"' in system and '"name": "sort"' not in system and '"name": "ls"' not in system
    announced = policy.batches[1][0][-1]
    assert announced["role"] == "user" and announced["content"].startswith("More tools are available now:")
    assert '"name": "sort"' in announced["content"]
    # a withheld doc can also be given in full
    item = dict(item, function=FS_TOOLS, missed_function={"1": [fn("sort", "file_name")]})
    assert run_one(tmp_path, item, ["No.", call("sort", file_name="notes.txt"), DONE])[0].score == 1.0


# ---------------------------------------------------------------------------------------------
# Bad input: scored 0 with the file, line, id and fault named; never skipped


GOOD = dict(FS_ITEM, id="good")


@pytest.mark.parametrize(
    ("line", "error"),
    [
        ("{not json", "items.jsonl line 2: not valid JSON"),
        ("[1, 2]", "items.jsonl line 2: expected a JSON object, got list"),
        ({"id": "b", "function": FS_TOOLS, "ground_truth": [[]]}, "items.jsonl line 2 (id 'b'): no 'question'"),
        (
            {"id": "b", "question": [user("Q.")], "function": FS_TOOLS},
            "items.jsonl line 2 (id 'b'): no ground truth: no 'ground_truth' field, and no answers file",
        ),
        (
            dict(GOOD, id="b", ground_truth=[["cd(folder='document')"]]),
            "items.jsonl line 2 (id 'b'): the question has 2 turns but the ground truth has 1",
        ),
        (
            dict(GOOD, id="b", ground_truth=[["cd(folder='document'"], []]),
            "items.jsonl line 2 (id 'b'): ground-truth turn 0: \"cd(folder='document'\" is not a Python call",
        ),
        (
            dict(GOOD, id="b", ground_truth=[[], ["cd(folder=here)"]]),
            "items.jsonl line 2 (id 'b'): ground-truth turn 1: 'cd(folder=here)' has an argument that is not a "
            "Python literal: 'here'",
        ),
        (dict(GOOD, id="b", ground_truth=[["cd"], []]), "'cd' is not a function call"),
        (dict(GOOD, id="b", ground_truth=[[1], []]), "ground-truth turn 0: a call must be a string, got int"),
        (dict(GOOD, id="b", ground_truth="cd()"), "'ground_truth' must be a list of turns"),
        (dict(GOOD, id="b", question=[]), "'question' must be a non-empty list of turns"),
        (dict(GOOD, id="b", question=[user("Q."), "hi"]), "question turn 1 must be a list of messages, got str"),
        (dict(GOOD, id="b", question=[user("Q."), [{"role": "robot", "content": "x"}]]), "needs a role in"),
        (dict(GOOD, id="b", function=[{"description": "no name"}]), "function 0: a function doc needs a non-empty"),
        ({k: v for k, v in GOOD.items() if k != "function"}, "no tools: no 'function' field and no functions file"),
        (dict(GOOD, id="b", missed_function={"1": ["nope"]}), "'missed_function' names 'nope'"),
        (dict(GOOD, id="b", missed_function={"5": ["cd"]}), "'missed_function' key '5' must be a turn index below 2"),
        (dict(GOOD, id="b", excluded_function="ls"), "'excluded_function' must be a list of function names"),
    ],
)
def test_a_malformed_line_scores_zero_and_says_why(tmp_path: Path, line: Any, error: str) -> None:
    suite = BFCLSuite(write_jsonl(tmp_path / "items.jsonl", [GOOD, line]))
    result = suite.run(scripted({"Go to document and make temp.": RIGHT}))
    assert result.n == 2 and [r.score for r in result.items] == [1.0, 0.0] and result.errors == 1
    assert error in (result.items[1].error or "")
    assert result.items[1].error.startswith("items.jsonl line 2")  # type: ignore[union-attr]


def test_settings_and_shared_files_are_checked_up_front(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "items.jsonl", [FS_ITEM])
    with pytest.raises(ValueError, match="sampling.n must be 1"):
        BFCLSuite(path, sampling=SamplingParams(temperature=1.0, n=2))
    with pytest.raises(ValueError, match="max_calls_per_turn"):
        BFCLSuite(path, max_calls_per_turn=0)
    with pytest.raises(ValueError, match="limit"):
        BFCLSuite(path, limit=-1)
    with pytest.raises(FileNotFoundError):
        BFCLSuite(tmp_path / "missing.jsonl")
    with pytest.raises(FileNotFoundError):
        BFCLSuite(path, functions=tmp_path / "no-docs")
    with pytest.raises(FileNotFoundError):
        BFCLSuite(path, answers=tmp_path / "no-answers.jsonl")
    bad_docs = write_jsonl(tmp_path / "docs.jsonl", [fn("cd"), "{broken"])
    with pytest.raises(ValueError, match="docs.jsonl line 2: not valid JSON"):
        BFCLSuite(path, functions=bad_docs)
    write_jsonl(bad_docs, [fn("cd"), {"name": ""}])
    with pytest.raises(ValueError, match="docs.jsonl line 2: a function doc needs a non-empty string 'name'"):
        BFCLSuite(path, functions=bad_docs)
    config = BFCLSuite(path, max_calls_per_turn=2, limit=5).config()
    assert json.loads(json.dumps(config)) == config
    assert config["max_calls_per_turn"] == 2 and config["limit"] == 5 and config["items"] == 1
    assert config["sampling"]["temperature"] == 0.0 and config["sampling"]["stop"] == []


# ---------------------------------------------------------------------------------------------
# Helpers


def test_parse_call() -> None:
    assert parse_call("cd(folder='document')") == ("cd", {"folder": "document"})
    assert parse_call(" math.factorial(5, exact=True) ") == ("math.factorial", {"$0": 5, "exact": True})
    assert parse_call("f(x=-1.5, y=[1, (2, 3)], z={'a': None})") == (
        "f",
        {"x": -1.5, "y": [1, (2, 3)], "z": {"a": None}},
    )
    assert parse_call("ls()") == ("ls", {})
    for bad, message in [
        ("f(**kw)", r"\*\*kwargs"),
        ("f(*a)", r"\*args"),
        ("f(x=1, x=2)", "repeats the argument 'x'"),
        ("f()()", "plain or dotted name"),
        ("f(x=g())", "not a Python literal"),
        ("1 + 2", "not a function call"),
        ("import os", "not a Python call"),
    ]:
        with pytest.raises(ValueError, match=message):
            parse_call(bad)


def test_tool_docs_are_shown_in_openai_format(tmp_path: Path) -> None:
    bfcl_doc = {
        "name": "post",
        "description": "Post.",
        "parameters": {
            "type": "dict",
            "properties": {
                "type": {"type": "string"},  # a parameter named "type" stays a parameter
                "score": {"type": "float"},
                "point": {"type": "tuple", "items": {"type": "any"}},
                "meta": {"type": "dict", "properties": {}},
            },
        },
        "response": {"type": "dict"},
    }
    assert to_openai_tool(bfcl_doc) == {
        "type": "function",
        "function": {
            "name": "post",
            "description": "Post.",
            "parameters": {
                "type": "object",
                "properties": {
                    "type": {"type": "string"},
                    "score": {"type": "number"},
                    "point": {"type": "array", "items": {}},
                    "meta": {"type": "object", "properties": {}},
                },
            },
        },
    }
    assert to_openai_tool({"name": "ls"})["function"]["parameters"] == {"type": "object", "properties": {}}
    (tmp_path / "one.json").write_text(json.dumps(fn("ls")), encoding="utf-8")
    assert [t["function"]["name"] for t in load_function_docs(tmp_path / "one.json")] == ["ls"]
    with pytest.raises(ValueError, match="must be a JSON object"):
        to_openai_tool(["ls"])


# ---------------------------------------------------------------------------------------------
# The example file


def oracle_scripts(path: Path) -> dict[str, list[str]]:
    """The scripts of a policy that makes exactly the ground truth's calls, turn by turn."""
    scripts = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        row = json.loads(line)
        script = []
        for turn in row["ground_truth"]:
            script += [call(name, **arguments) for name, arguments in map(parse_call, turn)] + [DONE]
        scripts[row["question"][0][0]["content"]] = script
    return scripts


def test_the_example_file_loads_and_the_right_calls_score_one() -> None:
    suite = BFCLSuite(EXAMPLE)
    assert suite.name == "bfcl:bfcl_multi_turn_sample.jsonl" and len(suite) == 4
    result = suite.run(scripted(oracle_scripts(EXAMPLE)))
    assert result.score == 1.0 and result.errors == 0 and result.n == 4
    assert [r.metadata["turns_total"] for r in result.items] == [3, 3, 2, 2]
    assert result.interval()[1] == 1.0
    # a policy that never calls a tool gets only the turns that expect no call
    lazy = BFCLSuite(EXAMPLE).run(scripted({k: [DONE] * 9 for k in oracle_scripts(EXAMPLE)}))
    assert [r.score for r in lazy.items] == [0.0, pytest.approx(1 / 3), 0.0, 0.5]
