"""The ``fill`` prompt: the host's fixed parts and a model's holes make modules the real gate accepts,
a hole that does not parse is sampled again, and real policies continue an assistant message."""

from __future__ import annotations

import importlib.util
from collections.abc import Sequence
from typing import Any

import pytest
from doubles import ScriptedPolicy

from spade_gym.designer import build_prompt, generate_designs
from spade_gym.fill import FILL_SETTINGS, Hole, fill_designs, fill_parts
from spade_gym.policies.base import SamplingParams
from spade_gym.trainer.config import ConfigError, SelfPlayConfig
from spade_gym.validation import validate

HAS_LLAMA = importlib.util.find_spec("llama_cpp") is not None

#: Per setting, what a model writes into each hole, in order (None: the hole is written as given).
HOLES: dict[str, list[str]] = {
    "reasoning": [
        "Modular squares: the agent is given n and m and answers n*n mod m.",
        "MAX_VALUE = 90\n",
        "ModularSquare",
        "        n = rng.randint(10, MAX_VALUE)\n        m = rng.randint(7, 19)\n",
        "What is {n} squared modulo {m}? Answer with the number.",
        "n * n % m)",
        "Square {n} first, then take the remainder on division by {m}.",
    ],
    "tool_use": [
        "Book shelves: the agent looks up shelf counts and submits the fullest shelf.",
        "SHELVES = 6\n",
        "shelf_count",
        "The number of books on a shelf",
        "LargestShelf",
        "        names = rng.sample(['oak', 'elm', 'ash', 'yew', 'fir', 'box', 'bay', 'fig'], SHELVES)\n"
        "        self.records = {name: rng.randint(1, 99) for name in names}\n",
        "Which shelf holds most books? Keys: {', '.join(self.records)}",
        "max(self.records, key=self.records.get)",
        "Look up all {len(self.records)} shelves, then compare the counts.",
    ],
    "game": [
        "Take-away: a pile of stones, take 1 or 2 a turn against an opponent who leaves multiples of 3.",
        "START = 9\n",
        "TakeAway",
        "        self.pile = rng.randint(START, START + 20)\n        if self.pile % 3 == 0:\n            self.pile += 1\n",
        "        return [m for m in ('1', '2') if int(m) <= self.pile]\n",
        "        return f'Pile: {self.pile}. Moves: ' + ', '.join(self._moves())\n",
        "        self.pile -= int(move)\n        if self.pile == 0:\n            won = True\n        else:\n"
        "            self.pile = max(0, self.pile - (self.pile % 3 or 1))\n"
        "            if self.pile == 0:\n                self.turn = self.max_turns\n",
        "        return 'Leave the opponent a multiple of three.'\n",
        "        return str(self.pile % 3)\n",
    ],
}


def hole_writer(texts: Sequence[str], broken: Sequence[int] = ()) -> ScriptedPolicy:
    """A stand-in model that writes ``texts[k]`` into the k-th hole it is asked (a text that does not
    parse first, for the holes listed in ``broken``); asked the same assistant text again, it writes
    the same hole."""
    last: dict[str, Any] = {"hole": -1, "prefix": None}

    def reply(prompt: list[dict[str, str]]) -> str:
        prefix = prompt[-1]["content"]
        retry = prefix == last["prefix"]
        if not retry:
            last["hole"], last["prefix"] = last["hole"] + 1, prefix
        hole = last["hole"]
        return "n * (n % m))) +" if hole in broken and not retry else texts[hole]

    return ScriptedPolicy(reply, name="hole-writer", token_ids=[1, 2], logprobs=[-0.5, -0.5])


def asked(writer: ScriptedPolicy) -> list[str]:
    """The assistant texts ``writer`` was asked to continue, in order."""
    return [prompt[-1]["content"] for prompt in writer.prompts]


@pytest.mark.parametrize("setting", FILL_SETTINGS)
def test_filled_modules_pass_the_real_gate(setting: str) -> None:
    holes = [p for p in fill_parts(setting) if isinstance(p, Hole)]
    assert len(holes) == len(HOLES[setting])
    writer = hole_writer(HOLES[setting])
    prompt = build_prompt("Stones, shelves and squares.", setting=setting, variant="fill")
    [design] = generate_designs(writer, [prompt], SamplingParams(temperature=0.5, n=1, seed=3))
    assert asked(writer)[0] == '```python\n"""' and len(asked(writer)) == len(holes)
    assert design.prompt_token_ids is None and design.completion_token_ids == [1, 2] * len(holes)  # not trainable
    source = design.text.removeprefix("```python\n").removesuffix("```")
    report = validate(source)
    assert report.accepted, report.feedback()
    assert report.setting == setting


def test_a_hole_that_does_not_parse_is_sampled_again() -> None:
    writer = hole_writer(HOLES["reasoning"], broken=[5])  # the answer first comes back as `n * (n % m))) +`
    [design] = fill_designs(writer, [{"role": "user", "content": "x"}], "reasoning", SamplingParams(n=1, seed=0))
    assert len(asked(writer)) == 8  # seven holes, the answer asked twice
    source = design.text.removeprefix("```python\n").removesuffix("```")
    assert "self.answer = str(n * n % m)\n" in source and validate(source).accepted
    # the description written once is the module's and the class's docstring
    assert source.count("Modular squares: the agent is given n and m") == 2


def test_fill_needs_a_designer_of_its_own() -> None:
    with pytest.raises(ConfigError, match="designer.policy"):
        SelfPlayConfig.from_dict({"designer": {"prompt": "fill"}})
    SelfPlayConfig.from_dict({"designer": {"prompt": "fill", "policy": "llamacpp:qwen2.5-coder-0.5b"}})


PREFIX = "```python\nimport random\n\nclass Env:\n    "


def _continues(ids: list[int], plain: list[int], decode: Any) -> None:
    assert ids[: len(plain)] == plain  # the generation prompt, then the assistant's text as it stands
    assert decode(ids[len(plain) :]) == PREFIX


def test_the_transformers_policy_continues_an_assistant_message(embedded_policy: Any) -> None:
    chat = [{"role": "user", "content": "Write a module."}]
    ids = embedded_policy.encode([*chat, {"role": "assistant", "content": PREFIX}])
    _continues(ids, embedded_policy.encode(chat), embedded_policy.tokenizer.decode)


@pytest.mark.slow
@pytest.mark.skipif(not HAS_LLAMA, reason="llama-cpp-python is not installed (make llamacpp)")
def test_the_llamacpp_policy_continues_an_assistant_message() -> None:
    from spade_gym.policies import load_policy

    policy: Any = load_policy("llamacpp:default", n_ctx=512)
    try:
        chat = [{"role": "user", "content": "Write a module."}]
        ids = policy.prompt_token_ids([*chat, {"role": "assistant", "content": PREFIX}])
        _continues(ids, policy.prompt_token_ids(chat), lambda t: policy._llama.detokenize(t).decode())
        [done] = policy.generate(
            [[*chat, {"role": "assistant", "content": PREFIX}]], SamplingParams(temperature=0, max_new_tokens=8)
        )
        assert done.prompt_token_ids == ids and done.text  # it writes on from the prefix
    finally:
        policy.close()


def test_the_host_checks_refuse_an_answer_unrelated_to_the_question() -> None:
    from spade_gym import fill

    drawn = {"knobs": "TOP = 9\n", "values": "        a = rng.randint(1, TOP)\n        self.b = rng.randint(1, 9)\n"}
    assert fill._drawn_with_knobs(drawn["values"], drawn)
    assert not fill._drawn_with_knobs("        a = rng.randint(1, N)\n", drawn)  # N is no knob
    assert not fill._drawn_with_knobs("        pass\n", drawn) and not fill._drawn_with_knobs("        a = 4\n", drawn)
    deep = "        a = rng.random() " + "-" * 100_000 + "1\n"  # the parser runs out of memory: refused, not raised
    assert not fill.Hole("values", 9, (), fill._values, uses=fill._drawn_with_knobs).fits(deep, drawn)
    assert not fill._records("        records = {'a': rng.random()}\n", drawn)  # not self.records
    assert fill._shows_values("What is {a} times {self.b}? Answer with the number.", drawn)
    assert not fill._shows_values("What is the product of the two numbers?", drawn)  # the values are not shown
    assert not fill._shows_values("Task: {a} {self.b}", drawn)  # no rule stated in words
    drawn["question"] = "What is {a} times {self.b}?"
    assert fill._answers_question("a * self.b)", drawn)
    assert not fill._answers_question("rng.randint(1, 99))", drawn)  # drawn apart from the question
    assert not fill._answers_question("42)", drawn)  # a constant
    drawn["question"] = "What is {a} squared?"
    assert not fill._answers_question("self.b * 2)", drawn)  # from a value the question does not show
    assert fill._hints_at_values("Multiply {a} by {self.b}.", drawn)
    assert not fill._hints_at_values("Think step by step.", drawn)
    assert not fill._hints_at_values("It is {self.answer}.", drawn)
    # an attribute that would hide a method is renamed; a bare helper call becomes a method call
    assert fill._values("        self.hint = 'x'\n        self.oracle = 3 + self.max_turns\n") == (
        "        self.hint_ = 'x'\n        self.oracle_ = 3 + self.max_turns\n"
    )
    assert (
        fill._methods(fill._statements)("        return _moves()\n        n = _show()\n")
        == "        n = self._show()\n"
    )
    # a value kept in self.observation is renamed there and where the question reads it
    drawn = {"values": fill._values("        self.observation = rng.randint(1, 9)\n")}
    assert drawn["values"] == "        self.observation_ = rng.randint(1, 9)\n"
    assert fill._renamed("Double {self.observation}.", drawn) == "Double {self.observation_}."
    assert not fill._shows_values("Double {self.observation_}, then add {self.clue} to it.", drawn)  # no clue drawn


def test_a_hole_that_never_fits_is_refused_before_the_gate() -> None:
    from spade_gym.contract import unfilled_placeholders

    texts = list(HOLES["reasoning"])
    texts[5] = "rng.randint(1, 99))"  # every answer drawn apart from the question
    writer = hole_writer(texts)
    [design] = fill_designs(writer, [{"role": "user", "content": "x"}], "reasoning", SamplingParams(n=1))
    assert len(asked(writer)) == 5 + 4  # the answer asked four times, the hint after it not at all
    source = design.text.removeprefix("```python\n").removesuffix("```")
    answer, hint = unfilled_placeholders(source)
    assert "<your answer: The answer is computed from values the question shows" in answer.message
    assert "<your hint:" in hint.message
