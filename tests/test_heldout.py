"""The held-out evaluation's split (unseen seeds, unseen difficulty levels, unseen environments), its
sizes, its report line, and the difficulty ladders it reads: real seed-library programs in the real
sandbox, a tiny randomly initialised Llama as the Agent."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from spade_gym import EnvProgram, Registry, validate
from spade_gym.evaluation.base import ItemRecord, SuiteResult, save_results
from spade_gym.evaluation.environments import HELD_OUT_SEED_BASE
from spade_gym.evaluation.heldout import (
    EvalSection,
    HeldOut,
    gain_line,
    heldout_items,
    heldout_report,
    ladders_of,
    part_size,
    save_path,
    seed_records,
    seen_levels,
)
from spade_gym.ladder import Ladder, knob_variant, read_ladder
from spade_gym.program import knobs
from spade_gym.registry.gymnasium import bundled_registry_path
from spade_gym.trainer.config import ConfigError, SelfPlayConfig
from spade_gym.validation import ValidationConfig

GRADED = ["ColorCodeLookup", "ColorDoorRooms", "CountListItems", "LargerOfTwo", "OrderStatusLookup"]
POOL = ["ColorCodeLookup", "CountListItems", "LargerOfTwo", "OrderStatusLookup"]


def test_parts_are_sized_by_the_interval_they_need() -> None:
    assert part_size(0.1) == 97 and part_size(0.15) == 43 and part_size(0.5) == 4


def test_the_three_parts_are_disjoint_from_training() -> None:
    section = EvalSection(enabled=True, half_width=0.2)  # 25 episodes per part
    items = heldout_items(section, seed_records(POOL), seed_records(["ColorDoorRooms"]), ladders_of(POOL))
    assert list(items) == ["seeds", "levels", "envs"]
    seeds, levels, envs = items["seeds"], items["levels"], items["envs"]
    # unseen seeds: every training environment, evenly, on seeds no training step draws (< 2**31)
    assert {i.label for i in seeds} == set(POOL) and len(seeds) == 4 * 7
    assert all(i.seed >= HELD_OUT_SEED_BASE for part in items.values() for i in part)
    # unseen levels: each training environment at its ladder's held-out knob value, above the pool's
    for item in levels:
        name, knob = item.label.split("@")
        key, value = knob.split("=")
        pool_value = knobs(seed_records([name])[0].source_path.read_text())[key]
        assert knobs(item.source)[key] == int(value) > pool_value
    assert {i.label.split("@")[0] for i in levels} == set(POOL)
    # unseen environments: only the held-out one, never a training environment
    assert {i.label for i in envs} == {"ColorDoorRooms"} and len(envs) == 25
    assert len({i.item_id for part in items.values() for i in part}) == sum(map(len, items.values()))
    only = heldout_items(EvalSection(parts=["seeds"], half_width=0.5), seed_records(POOL), [], {})
    assert list(only) == ["seeds"] and len(only["seeds"]) == 4


def test_an_unseen_environment_must_be_held_out_of_training() -> None:
    with pytest.raises(ConfigError, match="'eval.envs' names LargerOfTwo, which run.held_out_envs does not hold out"):
        SelfPlayConfig.from_dict({"eval": {"envs": ["LargerOfTwo"]}})
    SelfPlayConfig.from_dict({"eval": {"envs": ["LargerOfTwo"]}, "run": {"held_out_envs": ["LargerOfTwo"]}})


def result(part: str, scores: list[float]) -> SuiteResult:
    items = [ItemRecord(f"A/{k}", s, metadata={"env": "A"}) for k, s in enumerate(scores)]
    return SuiteResult(f"heldout-{part}", "p", items)


def test_the_report_prints_one_line_of_the_documented_form(tmp_path: Path) -> None:
    before = HeldOut({"seeds": result("seeds", [0, 1, 0, 0, 1, 0, 0, 0])}, {"seeds": result("seeds-greedy", [0] * 8)})
    after = HeldOut({"seeds": result("seeds", [1, 1, 0, 1, 1, 0, 1, 1])}, {"seeds": result("seeds-greedy", [1] * 8)})
    for tag, held in (("before", before), ("after", after)):
        save_path(tmp_path, tag).parent.mkdir(exist_ok=True)
        save_results(held.results(), save_path(tmp_path, tag))
    lines = heldout_report(tmp_path)
    form = re.compile(
        r"^held-out success \(unseen seeds\): (\d\.\d{3}) \[(\d\.\d{3}), (\d\.\d{3})\] -> (\d\.\d{3}) "
        r"\[(\d\.\d{3}), (\d\.\d{3})\], gain ([+-]\d\.\d{3}) \[([+-]\d\.\d{3}), ([+-]\d\.\d{3})\]$"
    )
    matched = [form.match(line) for line in lines if form.match(line)]
    assert len(matched) == 1 and matched[0].group(1, 4, 7) == ("0.250", "0.750", "+0.500")
    assert lines[0] == gain_line(before.sampled["seeds"], after.sampled["seeds"])
    assert any("greedy, unseen seeds: 0.000 -> 1.000" in line for line in lines)
    assert heldout_report(tmp_path / "nothing") == []


@pytest.mark.parametrize("name", GRADED)
def test_every_graded_environment_states_a_ladder_the_gate_accepts_at_both_ends(name: str) -> None:
    (folder,) = (bundled_registry_path() / "envs").glob(f"{name}-v0")
    ladder = read_ladder(folder)
    assert ladder is not None
    source = (folder / "env.py").read_text()
    assert ladder.low <= knobs(source)[ladder.knob] < ladder.held_out <= ladder.high
    known = ValidationConfig(seeds=tuple(range(1000, 1010)), answer_seeds=tuple(range(5000, 5010)))
    for value in (ladder.low, ladder.high):
        variant = knob_variant(source, ladder.knob, value)
        changed = [(a, b) for a, b in zip(source.splitlines(), variant.splitlines(), strict=True) if a != b]
        pool = knobs(source)[ladder.knob]
        assert changed == ([] if value == pool else [(f"{ladder.knob} = {pool}", f"{ladder.knob} = {value}")])
        report = validate(EnvProgram(variant), known)
        assert report.accepted or report.category == "TRIVIAL", (value, report.feedback())


def test_a_ladder_survives_a_statistics_update_and_is_measured_per_knob_value(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from test_selfplay import tiny_policy
    from transformers import AutoTokenizer

    from spade_gym.policies.embedded import embedded_model_dir

    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir())

    from spade_gym.ladder import measure_ladders, write_ladder
    from spade_gym.policies import SamplingParams

    root = tmp_path / "reg"
    shutil.copytree(bundled_registry_path() / "envs" / "ColorCodeLookup-v0", root / "envs" / "ColorCodeLookup-v0")
    with pytest.warns(RuntimeWarning, match="index.sqlite is missing"):  # a copied folder: its index is rebuilt
        registry = Registry(root, create=True)
    folder = registry.get("ColorCodeLookup-v0").path
    write_ladder(folder, Ladder("N_ITEMS", 1, 2, 2))
    registry.update_stats("ColorCodeLookup-v0", episodes=2, mean_return_nohint=0.5)  # rewrites meta.json
    assert read_ladder(folder) == Ladder("N_ITEMS", 1, 2, 2)
    measured = measure_ladders(
        [folder], tiny_policy(tokenizer), episodes=2, sampling=SamplingParams(temperature=0.5, max_new_tokens=4)
    )
    ladder = read_ladder(folder)
    assert ladder == measured[folder] and set(ladder.success()) == {1, 2}
    assert ladder.measured["episodes"] == 2 and ladder.measured["policy"] == "tiny"
    assert json.loads((folder / "meta.json").read_text())["stats"]["mean_return_nohint"] == 0.5
    with pytest.raises(ValueError, match="low <= held_out <= high"):
        Ladder("N_ITEMS", 3, 5, 2)
    with pytest.raises(ValueError, match="no knob 'ROOMS'"):
        knob_variant((folder / "env.py").read_text(), "ROOMS", 2)


def test_a_level_the_designer_reached_is_no_longer_unseen(tmp_path: Path) -> None:
    items = heldout_items(EvalSection(parts=["levels"], half_width=0.5), seed_records(POOL), [], ladders_of(POOL))
    registry = Registry(tmp_path / "reg", create=True)
    source = seed_records(["ColorCodeLookup"])[0].source_path.read_text()
    registry.add(EnvProgram(source), name="ColorCodeLookup", setting="reasoning", max_turns=2, description="pool")
    assert seen_levels(items["levels"], registry.records()) == []
    variant = knob_variant(source, "N_ITEMS", 4)
    registry.add(
        EnvProgram(variant),
        name="ColorCodeLookup",
        setting="reasoning",
        max_turns=2,
        description="v",
        allow_near_duplicates=True,
    )
    assert seen_levels(items["levels"], registry.records()) == ["ColorCodeLookup@N_ITEMS=4"]
