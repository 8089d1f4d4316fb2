"""Edit mode's answer format: edit blocks (SEARCH/REPLACE) against the parent program.

A variant of a shown program is a few changed lines; the Designer answers with those lines, and the
host applies them to the parent (spade_gym.designer.apply_edits) before the validation gate."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from doubles import ScriptedPolicy
from test_designer import FAST, hint_reader

from spade_gym.design_prompts import WORKED_EXAMPLE as _EXAMPLE  # the program the edit example applies to
from spade_gym.designer import (
    DESIGNER_EDIT_SYSTEM_PROMPT,
    EDIT_DIVIDER,
    EDIT_REPLACE,
    EDIT_SEARCH,
    DesignerConfig,
    apply_edits,
    build_prompt,
    design,
    edit_blocks,
    evaluate_completion,
    extract_design,
    has_edits,
)
from spade_gym.memory import EnvironmentMemory, MemoryConfig, MemoryItem, verdict
from spade_gym.registry import Registry
from spade_gym.registry.gymnasium import open_registry
from spade_gym.trainer.config import ConfigError, SelfPlayConfig
from spade_gym.trainer.warmstart import knobs, variants
from spade_gym.validation import validate


def block(search: str, replace: str) -> str:
    return f"{EDIT_SEARCH}\n{search}\n{EDIT_DIVIDER}\n{replace}\n{EDIT_REPLACE}"


@pytest.fixture()
def registry(tmp_path: Path) -> Registry:
    return open_registry(tmp_path / "registry", seed_library=True, include_tags=("graded",))


def parent_item(registry: Registry, name: str) -> MemoryItem:
    record = registry.get(f"{name}-v0")
    return MemoryItem(record, "random", verdict(record.stats), record.program().source)


# ---- the format ----------------------------------------------------------------------------------


def test_the_edit_prompt_example_applies_to_the_write_example_and_passes_the_gate() -> None:
    example = DESIGNER_EDIT_SYSTEM_PROMPT.split("Example of an answer:")[1]
    assert has_edits(example)
    edited = apply_edits(_EXAMPLE, example)
    assert edited.source is not None, edited.problem
    assert "COUNT = 5" in edited.source and "randint(100, 999)" in edited.source
    report = validate(edited.source)
    assert report.accepted, report.feedback()


def test_blocks_of_every_seed_variant_round_trip(registry: Registry) -> None:
    rng = random.Random(0)
    checked = 0
    for record in registry:
        source = record.program().source
        if not knobs(source):
            continue
        variant = variants(source, rng)
        blocks = edit_blocks(source, variant)
        assert blocks.count(EDIT_SEARCH) >= 1  # at least one knob moved
        assert apply_edits(source, f"Here are the changes.\n\n{blocks}\nDone.").source == variant.strip("\n") + "\n"
        checked += 1
    assert checked >= 4
    assert edit_blocks(_EXAMPLE, _EXAMPLE) == ""


def test_a_search_text_is_widened_until_it_is_unique() -> None:
    parent = "A = 1\nx = 0\nB = 2\nx = 0\n"
    child = "A = 1\nx = 0\nB = 2\nx = 5\n"
    blocks = edit_blocks(parent, child)
    search = blocks.split(EDIT_SEARCH + "\n")[1].split("\n" + EDIT_DIVIDER)[0]
    assert parent.count(search) == 1 and "x = 0" in search
    assert apply_edits(parent, blocks).source == child


def test_whitespace_differences_in_search_lines_still_match_and_reindent() -> None:
    edit = block('name = "ListSum"\nsetting = "reasoning"', 'name = "ListSumB"\nsetting = "reasoning"')
    edited = apply_edits(_EXAMPLE, edit)
    assert edited.source is not None, edited.problem
    assert '    name = "ListSumB"\n    setting = "reasoning"' in edited.source
    assert "up to whitespace" in (edited.note or "")


@pytest.mark.parametrize(
    ("completion", "problem"),
    [
        ("I would make it harder.", "no edit block"),
        (f'{EDIT_SEARCH}\n    name = "ListSum"\n{EDIT_DIVIDER}\n    name = "X"\n', "never closed"),
        (f"{EDIT_DIVIDER}\nx\n{EDIT_REPLACE}", "expected <<<<<<< SEARCH"),
        (f"{EDIT_SEARCH}\n{EDIT_REPLACE}\nx\n{EDIT_DIVIDER}", "malformed"),
        (block("   ", "x = 1"), "empty SEARCH"),
        (block("    name = 'Nowhere'", '    name = "X"'), "not in the program"),
        (block('    name = "ListSum"', '    name = "ListSum"'), "unchanged"),
    ],
)
def test_bad_edit_blocks_are_reported(completion: str, problem: str) -> None:
    edited = apply_edits(_EXAMPLE, completion)
    assert edited.source is None and problem in (edited.problem or "")


def test_edit_mode_still_reads_a_whole_module(registry: Registry) -> None:
    prompt = build_prompt(None, [parent_item(registry, "CountListItems")], mode="edit")
    assert prompt.parent_source is not None and prompt.messages[0]["content"] == DESIGNER_EDIT_SYSTEM_PROMPT
    whole = f"```python\n{_EXAMPLE}```"
    assert extract_design(whole, prompt).source == _EXAMPLE
    write = build_prompt(None, [parent_item(registry, "CountListItems")], mode="write")
    assert write.parent_source is None
    assert extract_design(block("a", "b"), write).source is None  # blocks need a parent
    # no program at all: an edit prompt's feedback asks for edit blocks, a write prompt's does not
    edit_problem = extract_design("I would change the size.", prompt).problem
    write_problem = extract_design("I would change the size.", write).problem
    assert edit_problem is not None and "edit blocks" in edit_problem and "SEARCH" in edit_problem
    assert write_problem is not None and "edit blocks" not in write_problem


# ---- through the gate, the regret and the registry -------------------------------------------------


def test_an_edit_completion_registers_the_variant_with_its_parent(registry: Registry) -> None:
    parent = parent_item(registry, "CountListItems")
    prompt = build_prompt(None, [parent], mode="edit")
    source = parent.source
    assert source is not None
    variant = variants(source, random.Random(3))
    completion = "Harder: more items.\n" + edit_blocks(source, variant)
    outcome = evaluate_completion(completion, prompt, registry=registry, agent=hint_reader(), config=FAST)
    assert outcome.accepted, outcome.report.feedback()
    assert outcome.source == variant.strip("\n") + "\n"
    assert outcome.record is not None and outcome.record.parents == ("CountListItems-v0",)
    assert outcome.record.program().source == outcome.source


def test_an_edit_keeps_its_parents_setting_whatever_setting_was_drawn(registry: Registry) -> None:
    # a fresh user's demo: a "game" prompt asked to vary a reasoning environment, so all four correct
    # knob edits were refused as WRONG_SETTING
    parent = parent_item(registry, "CountListItems")
    prompt = build_prompt(None, [parent], setting="game", mode="edit")
    assert prompt.setting == "reasoning" and "valid game environment" not in prompt.text
    source = parent.source
    assert source is not None
    completion = edit_blocks(source, variants(source, random.Random(3)))
    outcome = evaluate_completion(completion, prompt, registry=registry, agent=hint_reader(), config=FAST)
    assert outcome.accepted, outcome.report.feedback()


def test_a_rename_only_edit_is_refused_as_a_duplicate(registry: Registry) -> None:
    parent = parent_item(registry, "CountListItems")
    prompt = build_prompt(None, [parent], mode="edit")
    rename = block('    name = "CountListItems"', '    name = "CountListItemsTwo"')
    outcome = evaluate_completion(rename, prompt, registry=registry, agent=hint_reader(), config=FAST)
    assert not outcome.accepted and outcome.report.category == "DUPLICATE"


def test_an_edit_that_pads_the_parent_with_dead_data_is_refused_as_a_duplicate(registry: Registry) -> None:
    parent = parent_item(registry, "CountListItems")
    prompt = build_prompt(None, [parent], mode="edit")
    unused = "UNUSED = [" + ", ".join(str(11 + 7 * i) for i in range(30)) + "]"
    padding = (
        block("N_ITEMS = 2", "N_ITEMS = 2\n" + unused)
        + "\n"
        + block('    name = "CountListItems"', '    name = "CountListItemsPlus"')
    )
    outcome = evaluate_completion(padding, prompt, registry=registry, agent=hint_reader(), config=FAST)
    assert outcome.source is not None and unused in outcome.source
    assert not outcome.accepted and outcome.report.category == "DUPLICATE", outcome.report.feedback()
    assert "behaves like the registered CountListItems-v0" in outcome.report.feedback()
    assert outcome.reward.reward == FAST.reward.duplicate


def test_design_repairs_an_edit_against_the_parent(registry: Registry) -> None:
    parent = parent_item(registry, "CountListItems")
    prompt = build_prompt(None, [parent], mode="edit")
    assert parent.source is not None
    good = edit_blocks(parent.source, variants(parent.source, random.Random(5)))
    policy = ScriptedPolicy([block("    nothing = 1", "    nothing = 2"), good])  # a bad edit first
    outcome = design(policy, prompt, registry=registry, agent=hint_reader(), config=FAST, repairs=1)
    assert outcome.accepted and outcome.rounds == 2
    assert outcome.attempts[0]["category"] == "NO_CODE" and "not in the program" in outcome.attempts[0]["feedback"]
    repair = policy.batches[1][0][-1]["content"]
    assert "edit blocks against the program of CountListItems-v0" in repair
    assert all(s is not None and s.max_new_tokens == FAST.edit_max_new_tokens for s in policy.samplings)


# ---- budgets ----------------------------------------------------------------------------------------


def test_edit_budget_has_a_floor_and_edits_only_need_no_program_budget() -> None:
    with pytest.raises(ValueError, match="edit_max_new_tokens"):
        DesignerConfig(edit_max_new_tokens=8)
    assert DesignerConfig().sampling_for("edit").max_new_tokens == DesignerConfig().edit_max_new_tokens
    assert DesignerConfig().sampling_for("write").max_new_tokens == DesignerConfig().sampling.max_new_tokens
    with pytest.raises(ConfigError, match="designer.edit_max_new_tokens"):
        SelfPlayConfig().with_overrides(["designer.edit_max_new_tokens=4"])
    low = ["designer.max_new_tokens=64"]
    with pytest.raises(ConfigError, match="designer.max_new_tokens"):
        SelfPlayConfig().with_overrides(low).check_design_budget()
    SelfPlayConfig().with_overrides([*low, "designer.edit_probability=1"]).check_design_budget()
    config = SelfPlayConfig().with_overrides(["designer.edit_max_new_tokens=96"])
    assert config.designer_config().sampling_for("edit").max_new_tokens == 96


def test_memory_selection_feeds_an_edit_prompt(registry: Registry) -> None:
    items = EnvironmentMemory(registry, MemoryConfig(k=2)).select(random.Random(0))
    prompt = build_prompt(None, items, mode="edit")
    parent = next(i for i in prompt.memory if i.record.env_id == prompt.parent)
    assert prompt.parent_source == parent.record.program().source
