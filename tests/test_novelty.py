"""The novelty check on a real registry on disk (the seed library plus a knob program): a renamed
copy or a docstring-only rewrite is refused; a size variant (one knob constant), a new rule and new
feedback are let through; a copy that behaves the same is refused whatever its text similarity
(padded with dead data, its task statement reworded, written as an edit of its parent)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from spade_gym import EnvProgram
from spade_gym.novelty import check_novelty
from spade_gym.registry.dedup import ast_hash
from spade_gym.registry.gymnasium import bundled_registry_path, open_registry
from spade_gym.registry.store import Registry
from spade_gym.stages import register_program
from spade_gym.validation import ValidationConfig, validate

#: A small graded program with module-level knobs, as the cold start's variants are written.
KNOB_SUM = '''import random

DIGITS = 2
NUMBERS = 3


class Env:
    """Add up a few seeded numbers of DIGITS digits each; one answer per episode, the exact sum pays 1.0."""

    name = "KnobSum"
    setting = "reasoning"
    max_turns = 1

    def reset(self, seed):
        rng = random.Random(seed)
        low = 10 ** (DIGITS - 1)
        self.numbers = [rng.randint(low, 10 * low - 1) for _ in range(NUMBERS)]
        self.done = False
        return "What is the sum of " + ", ".join(str(n) for n in self.numbers) + "? Answer with the number only.", {}

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {}
        self.done = True
        text = action.strip()
        if text == str(sum(self.numbers)):
            return "Correct.", 1.0, True, False, {"correct": True}
        return "Wrong.", 0.0, True, False, {"correct": False}

    def hint(self):
        return "Add the numbers from left to right; the first two give " + str(sum(self.numbers[:2])) + "."

    def oracle(self):
        return str(sum(self.numbers))
'''

SEED = "NumberBaseConversion-v0"


def seed_source() -> str:
    return (bundled_registry_path() / "envs" / SEED / "env.py").read_text()


def renamed(source: str, names: dict[str, str]) -> str:
    for old, new in names.items():
        source = re.sub(rf"\b{re.escape(old)}", new, source)
    return source


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Registry:
    """A registry on disk: the seed library, plus KnobSum registered through the gate."""
    registry = open_registry(tmp_path_factory.mktemp("novelty") / "registry")
    report, record = register_program(KNOB_SUM, registry)
    assert report.accepted and record is not None and record.env_id == "KnobSum-v0", report.feedback()
    return registry


def verdict(source: str, registry: Registry) -> tuple[str, str]:
    report = validate(source, registry=registry)
    novelty = report.check("novelty")
    assert novelty.passed is not None, report.feedback()  # every other check passed
    return report.category, novelty.message


def test_a_renamed_copy_is_an_exact_duplicate(registry: Registry) -> None:
    """(a) Functions, locals, ``self`` attributes and the environment's name renamed."""
    copy = renamed(
        seed_source(),
        {
            "to_base(": "render_in_base(",
            "parse_base(": "read_in_base(",
            "self.value": "self.number",
            "self.shown": "self.display",
            "rng": "generator",
            "NumberBaseConversion": "BaseSwitcher",
        },
    )
    assert copy != seed_source() and ast_hash(copy) == ast_hash(seed_source())
    category, message = verdict(copy, registry)
    assert category == "DUPLICATE"
    assert message.startswith(f"the program is an exact duplicate of the registered {SEED}")


def test_a_docstring_rewording_is_an_exact_duplicate(registry: Registry) -> None:
    """(b) The docstring is shown in the memory, never to the Agent: rewording it alone is a copy."""
    source = seed_source()
    docstring = source.split('"""')[1]
    copy = source.replace(docstring, "Turn a number written in one base into another base; four tries.")
    assert copy != source
    category, message = verdict(copy, registry)
    assert category == "DUPLICATE" and "exact duplicate" in message


@pytest.mark.parametrize("knob", ["DIGITS = 3", "NUMBERS = 4"])
def test_a_size_variant_is_let_through(registry: Registry, knob: str) -> None:
    """(c) One knob constant changed: a near duplicate by text, but it asks a different task."""
    variant = KNOB_SUM.replace(knob.split(" = ")[0] + " = " + ("2" if "DIGITS" in knob else "3"), knob)
    assert variant != KNOB_SUM
    near = registry.near_duplicates(EnvProgram(variant))
    assert [r.env_id for r, _ in near] == ["KnobSum-v0"] and near[0][1] >= 0.9  # refused by text alone
    assert verdict(variant, registry) == ("ACCEPT", "")
    seeded_knob = renamed(variant, {"KnobSum": "KnobSumWide"})  # renaming it too changes nothing
    assert verdict(seeded_knob, registry) == ("ACCEPT", "")


def test_a_new_rule_is_let_through(registry: Registry) -> None:
    """(d) An extra branch: a wrong answer now says whether it was too high."""
    variant = KNOB_SUM.replace(
        '        return "Wrong.", 0.0, True, False, {"correct": False}',
        "        if text.isdigit() and int(text) > sum(self.numbers):\n"
        '            return "Wrong: too high.", 0.0, True, False, {"correct": False}\n'
        '        return "Wrong.", 0.0, True, False, {"correct": False}',
    )
    assert verdict(variant, registry) == ("ACCEPT", "")
    seed_variant = seed_source().replace(  # a new feedback rule: how many leading digits are right
        '            obs = "Wrong: the value of " + text',
        "            same = 0\n"
        "            while same < min(len(text), len(self.answer)) and text[same] == self.answer[same]:\n"
        "                same += 1\n"
        '            obs = "Leading digits right: " + str(same) + ". Wrong: the value of " + text',
    )
    assert seed_variant != seed_source()
    assert [r.env_id for r, _ in registry.near_duplicates(EnvProgram(seed_variant))] == [SEED]
    assert verdict(seed_variant, registry) == ("ACCEPT", "")


def test_new_feedback_wording_is_let_through(registry: Registry) -> None:
    """(e) What the Agent is told after its actions, in other words: what it learns differs, a variant."""
    variant = seed_source().replace('"Convert the "', '"Rewrite the "').replace('"Correct! "', '"Well done! "')
    near = registry.near_duplicates(EnvProgram(variant))
    assert [r.env_id for r, _ in near] == [SEED] and near[0][1] >= 0.9
    assert verdict(variant, registry) == ("ACCEPT", "")


def test_a_near_copy_that_behaves_the_same_is_refused(registry: Registry) -> None:
    """An equivalent rewrite and a dead helper change the text, not the behaviour."""
    copy = (
        seed_source()
        .replace("value = value // base", "value //= base")
        .replace("class Env:", "def unused_helper(x):\n    return x * 2\n\n\nclass Env:")
    )
    assert ast_hash(copy) != ast_hash(seed_source())
    category, message = verdict(copy, registry)
    assert category == "DUPLICATE"
    assert message.startswith(f"the program behaves like the registered {SEED}: on ")
    feedback = validate(copy, registry=registry).feedback()
    # the feedback names the environment it copies, not what would get a copy past the check
    assert SEED in feedback and "a task of its own" in feedback
    assert not any(w in feedback.lower() for w in ("wording", "reword", "constant", "rename", "pad"))


#: Thirty numbers the program never reads: text similarity to the original falls below 0.9.
PADDING = "UNUSED = [" + ", ".join(str(11 + 3 * i) for i in range(30)) + "]\n\n\nclass Env:"


@pytest.mark.parametrize(
    "copy",
    [
        pytest.param(lambda src: src.replace("class Env:", PADDING, 1), id="padded"),
        pytest.param(
            lambda src: src.replace("class Env:", PADDING, 1).replace('"Convert the "', '"Rewrite the "'),
            id="padded-and-statement-reworded",
        ),
    ],
)
def test_a_padded_or_reworded_copy_below_the_text_threshold_is_refused(registry: Registry, copy: Any) -> None:
    source = copy(seed_source())
    near = registry.near_duplicates(EnvProgram(source), threshold=0.9)
    assert SEED not in [r.env_id for r, _ in near]  # text similarity alone would let it through
    category, message = verdict(source, registry)
    assert category == "DUPLICATE" and f"the registered {SEED}" in message


def test_a_probe_is_kept_in_the_environments_folder(registry: Registry) -> None:
    from spade_gym.novelty import PROBE_FILE, PROBE_SEEDS, Probe

    verdict(KNOB_SUM.replace("DIGITS = 2", "DIGITS = 5"), registry)  # a reasoning, max_turns 1 candidate
    probe = Probe.from_json((registry.get("KnobSum-v0").path / PROBE_FILE).read_text())
    assert len(probe.seeds) == PROBE_SEEDS and probe.setting == "reasoning" and probe.max_turns == 1
    assert all(seed >= 0 for seed in probe.seeds) and probe.seeds != list(range(PROBE_SEEDS))
    assert {e.kind for e in probe.episodes} == {"oracle", "near", "garbage"}


def test_check_novelty_gives_the_same_verdicts(registry: Registry) -> None:
    variant = KNOB_SUM.replace("DIGITS = 2", "DIGITS = 4")
    copy = KNOB_SUM.replace("10 * low - 1", "low * 10 - 1")
    for source, category in ((variant, "ACCEPT"), (copy, "DUPLICATE")):
        alone = validate(source)
        assert alone.accepted
        assert check_novelty(alone, source, registry).category == category
        assert check_novelty(alone, source, registry, ValidationConfig()).category == category


def test_a_size_of_turns_is_a_variant_and_an_info_change_is_not(registry: Registry) -> None:
    turns = KNOB_SUM.replace("max_turns = 1", "max_turns = 2").replace("DIGITS = 2", "DIGITS = 2  # two tries")
    assert verdict(turns, registry)[0] == "ACCEPT"
    info_only = KNOB_SUM.replace('{"correct": True}', '{"correct": True, "v": 1}')
    assert verdict(info_only, registry)[0] == "DUPLICATE"


def test_a_variant_registers_through_the_gate(tmp_path: Path) -> None:
    base = KNOB_SUM.replace('"KnobSum"', '"KnobSumAlone"')
    registry = open_registry(tmp_path / "registry", seed_library=False)
    assert register_program(base, registry)[1] is not None
    report, record = register_program(base.replace("DIGITS = 2", "DIGITS = 3"), registry)
    assert report.accepted and record is not None and record.env_id == "KnobSumAlone-v1"
    report, record = register_program(renamed(base, {"self.numbers": "self.values"}), registry)
    assert report.category == "DUPLICATE" and record is None
