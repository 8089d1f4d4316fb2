"""The contract as the Designer meets it: skeletons to fill, the lint of a program's form, the
lone-class rename, precise repair feedback, and the prompt's own examples counting as registered."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_designer import FAST as FAST_DESIGN

from spade_gym.contract import SKELETON_SETTINGS, contract_problems, rename_env_class, skeleton, unfilled_placeholders
from spade_gym.design_novelty import closest_reference, copies_prompt_example
from spade_gym.design_prompts import PROMPT_EXAMPLES, WORKED_EXAMPLE, WORKED_EXAMPLES
from spade_gym.designer import DesignerConfig, build_prompt, evaluate_completion, extract_program
from spade_gym.program import EnvProgram
from spade_gym.registry.gymnasium import open_registry
from spade_gym.repair import repair_feedback, same_program
from spade_gym.validation import validate

FAST = FAST_DESIGN.validation


def fill(setting: str, pairs: list[tuple[str, str]]) -> str:
    source = skeleton(setting)
    for old, new in pairs:
        assert old in source, old
        source = source.replace(old, new, 1)
    return source


FILLED = {
    "reasoning": fill(
        "reasoning",
        [
            ("# TODO: difficulty knobs of your task, module-level UPPERCASE ints", "SIZE = 3"),
            ("<your task in one paragraph: what the agent is asked, what it answers, how it is scored>", "doc"),
            ('"<YourTaskName>"', '"LargestOfMany"'),
            (
                "        # TODO: draw this episode's task from rng; set self.answer (a str that differs between seeds,\n"
                "        # not yes/no) and observation (a str: the task and the form of the answer)",
                "        self.numbers = rng.sample(range(100, 1000), SIZE)\n        self.answer = str(max(self.numbers))\n"
                '        observation = "Largest of " + ", ".join(str(n) for n in self.numbers) + "?"',
            ),
            (
                "        # TODO: return a str that helps with this episode (a method, a partial result), never self.answer",
                '        return "It starts with " + self.answer[0] + "."',
            ),
        ],
    ),
    "tool_use": fill(
        "tool_use",
        [
            (
                "# TODO: TOOLS, a list of OpenAI-style function schemas",
                'TOOLS = [{"type": "function", "function": {"name": "get_price", "description": "Price in cents.", '
                '"parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}}}, '
                '{"type": "function", "function": {"name": "submit", "description": "Submit.", "parameters": {"type": '
                '"object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}}]\n# ',
            ),
            ("<your task in one paragraph: what the tools reveal, what the agent submits, how it is scored>", "doc"),
            ('"<YourTaskName>"', '"PriceTotal"'),
            (
                "        # TODO: draw from rng self.records (a dict: the key your look-up tool takes -> what it returns),\n"
                "        # self.answer (a str the records are needed for) and observation (a str: the task, the tools to call)",
                '        items = rng.sample(["pen", "cup", "hat", "map", "key"], 2)\n'
                "        self.records = {i: rng.randint(100, 999) for i in items}\n"
                "        self.answer = str(sum(self.records.values()))\n"
                '        observation = "Total cents of " + " and ".join(items) + "? get_price, then submit."',
            ),
            (
                '        # TODO: answer your look-up tool: return (str(record or "not found"), 0.0, False, truncated, {})',
                '        if name == "get_price":\n'
                '            return str(self.records.get(str(args.get("item")), "not found")), 0.0, False, truncated, {}',
            ),
            (
                "        # TODO: return a str saying which record to look up and why, never self.answer",
                '        return "Look each item up once."',
            ),
        ],
    ),
    "game": fill(
        "game",
        [
            ("# TODO: difficulty knobs of your game, module-level UPPERCASE ints", "TOP = 20"),
            ("<your game in one paragraph: the position, the moves, how it is won and scored>", "doc"),
            ('"<YourGameName>"', '"GuessHigherLower"'),
            (
                "        # TODO: draw this episode's position from rng into attributes of self (no fixed move may win every seed)",
                "        self.low = rng.randint(1, 50)\n        self.high, self.bottom = self.low + TOP, self.low\n"
                "        self.secret = rng.randint(self.low, self.high)\n"
                '        self.said = "Guess " + str(self.low) + " to " + str(self.high) + "."',
            ),
            (
                "        # TODO: return the legal moves now, a list of str",
                "        return [str(n) for n in range(self.bottom, self.bottom + TOP + 1)]",
            ),
            ("        # TODO: return a str showing the position and the legal moves", "        return self.said"),
            (
                "        # TODO: apply the move to the position; set won (a bool)",
                "        guess = int(move)\n        won = guess == self.secret\n"
                '        if guess < self.secret:\n            self.low, self.said = max(self.low, guess + 1), "Higher."\n'
                '        elif guess > self.secret:\n            self.high, self.said = min(self.high, guess - 1), "Lower."',
            ),
            (
                "        # TODO: return a str with a strategy for this position, never the whole move sequence",
                '        return "Halve the range."',
            ),
            (
                "        # TODO: return the best legal move now, a str",
                "        return str((self.low + self.high) // 2)",
            ),
        ],
    ),
}


@pytest.mark.parametrize("setting", SKELETON_SETTINGS)
def test_a_filled_skeleton_passes_the_gate_and_an_unfilled_one_does_not(setting: str) -> None:
    slips = contract_problems(skeleton(setting))  # copied unfilled: its TODO lines, and it does not even parse
    assert slips[0].message.startswith("syntax error") and all("skeleton's TODO" in p.message for p in slips[1:])
    assert contract_problems(FILLED[setting]) == []
    assert not validate(skeleton(setting), FAST).accepted  # copied unfilled it is refused
    report = validate(FILLED[setting], FAST)
    assert report.accepted, report.feedback()
    assert (report.setting, "tools = TOOLS" in FILLED[setting]) == (setting, setting == "tool_use")


def test_contract_lint_names_each_slip_with_its_line() -> None:
    source = FILLED["reasoning"].replace("class Env:", "class LargestEnv:")
    source = source.replace(
        'return observation, reward, terminated, False, {"correct": correct}', "return reward, True"
    )
    source = source.replace('setting = "reasoning"', 'setting = "tool_use"')
    lines = source.splitlines()
    found = {(p.line, p.message.split(";")[0].split(" (")[0]) for p in contract_problems(source)}
    class_line = lines.index("class LargestEnv:") + 1
    step_return = next(i for i, line in enumerate(lines, 1) if line.strip() == "return reward, True")
    assert found == {
        (class_line, "the class is named LargestEnv"),
        (class_line, "class Env does not set tools"),
        (step_return, "step returns a tuple of 2 values, not 5"),
    }
    assert contract_problems("def broken(:\n")[0].message.startswith("syntax error")


def test_a_lone_class_is_renamed_env_in_code_not_in_strings() -> None:
    source = FILLED["reasoning"].replace("class Env:", "class LargestEnv:")
    source = source.replace('name = "LargestOfMany"', 'name = "LargestEnv"\n    LIMIT = 3')
    source = source.replace("return self.answer\n", "return self.answer if LargestEnv.LIMIT else ''\n")
    renamed, note = rename_env_class(source)
    assert note == "renamed class LargestEnv to Env (the contract's class name)"
    assert "class Env:" in renamed and 'name = "LargestEnv"' in renamed and "Env.LIMIT" in renamed
    assert validate(renamed, FAST).accepted
    found = extract_program(f"Here it is:\n```python\n{source}```")
    assert found.source == renamed and found.note == note
    assert rename_env_class(FILLED["reasoning"]) == (FILLED["reasoning"], None)  # already Env
    two = source + "\n\nclass Helper:\n    pass\n"
    assert rename_env_class(two) == (two, None)  # which class is the environment is not clear


def test_repair_feedback_quotes_lines_expected_shapes_and_the_change() -> None:
    first = FILLED["reasoning"].replace(
        'return observation, reward, terminated, False, {"correct": correct}', "return reward, True"
    )
    report = validate(first, FAST)
    assert report.category == "PROTOCOL_ERROR"
    text = repair_feedback(report, first)
    assert "contract (PROTOCOL_ERROR)" in text and "`return reward, True`" in text
    assert "expected: `return observation, reward, terminated, truncated, info" in text
    again = repair_feedback(report, first + "\n", previous_source=first)
    assert "nothing changed" in again and same_program(first, first + "\n")
    second = first.replace("return reward, True", "return reward, True, False")
    changed = repair_feedback(validate(second, FAST), second, previous_source=first)
    assert "-        return reward, True\n+        return reward, True, False" in changed
    missing = repair_feedback(report, None, problem="no code", setting="tool_use")
    assert "No program was found: no code." in missing and skeleton("tool_use") in missing


def test_the_prompts_worked_example_counts_as_registered(tmp_path: Path) -> None:
    assert WORKED_EXAMPLE in PROMPT_EXAMPLES
    config = FAST
    renamed = WORKED_EXAMPLE.replace("ListSum", "NumberTotal").replace("self.numbers", "self.values")
    assert "worked example ListSum" in (copies_prompt_example(EnvProgram(renamed), config) or "")
    variant = WORKED_EXAMPLE.replace("randint(10, 99)", "randint(100, 999)")  # behaves differently: a variant
    assert copies_prompt_example(EnvProgram(variant), config) is None
    reference, similarity = closest_reference(variant)
    assert reference is not None and reference.label == "example ListSum" and similarity >= 0.9  # not "new"
    registry = open_registry(tmp_path / "registry", seed_library=True)
    prompt = build_prompt(None, [], setting="reasoning", variant="example")
    outcome = evaluate_completion(f"```python\n{renamed}```", prompt, registry=registry, agent=None, config=FAST_DESIGN)
    assert outcome.report.category == "DUPLICATE" and not outcome.accepted
    assert outcome.report.check("novelty").message.startswith("the program is a copy of the prompt's worked example")


@pytest.mark.parametrize(("field", "value"), [("prompt", "fill-in"), ("feedback", "loud")])
def test_designer_config_refuses_unknown_prompt_and_feedback(field: str, value: str) -> None:
    with pytest.raises(ValueError, match=field):
        DesignerConfig(**{field: value})


def test_a_skeleton_left_unfilled_is_refused_before_the_gate(tmp_path: Path) -> None:
    half = (
        FILLED["reasoning"].replace('"LargestOfMany"', '"<YourTaskName>"').replace("SIZE = 3", "SIZE = 3\nLIMIT = ...")
    )
    assert [p.line for p in unfilled_placeholders(half)] == [4, 10]
    assert unfilled_placeholders('TAGS = "<answer>7</answer>"\n') == []  # an action tag is not a placeholder
    registry = open_registry(tmp_path / "registry", seed_library=False)
    outcome = evaluate_completion(f"```python\n{half}```", None, registry=registry, agent=None, config=FAST_DESIGN)
    assert outcome.report.category == "UNFILLED" and "lines 4, 10" in outcome.report.check("static").message


@pytest.mark.parametrize("setting", SKELETON_SETTINGS)
def test_the_examples_variant_shows_a_valid_example_of_the_target_setting(setting: str) -> None:
    example = WORKED_EXAMPLES[setting]
    assert example in PROMPT_EXAMPLES and validate(example, FAST).accepted
    prompt = build_prompt(None, [], setting=setting, variant="examples")
    assert example in prompt.messages[1]["content"] and "never its task" in prompt.messages[0]["content"]
    assert all(other not in prompt.text for key, other in WORKED_EXAMPLES.items() if key != setting)
