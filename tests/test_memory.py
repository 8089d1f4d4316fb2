"""The environment memory: a real registry on disk holding 18 programs of the bundled seed library,
with chosen statistics; exact picks per category, backfill, thresholds, setting preference,
determinism and variety, formatting, damaged entries and config validation."""

from __future__ import annotations

import dataclasses
import random
import warnings
from collections import Counter
from pathlib import Path

import pytest

from spade_gym.errors import RegistryError
from spade_gym.memory import (
    CATEGORIES,
    VERDICT_GOOD,
    VERDICT_LOW_REGRET,
    VERDICT_PARTLY_MEASURED,
    VERDICT_TOO_EASY,
    VERDICT_TOO_HARD,
    VERDICT_UNMEASURED,
    EnvironmentMemory,
    MemoryConfig,
    MemoryItem,
    format_memory,
    pick_parent,
    verdict,
)
from spade_gym.registry import EnvRecord, EnvStats, Registry
from spade_gym.registry.gymnasium import bundled_registry_path

# name -> (mean_return_hint, mean_return_nohint, regret); None: not measured. Registered in this
# order, so the last one is the newest.
STATS: dict[str, tuple[float, float, float] | None] = {
    "ArithmeticChain": (0.9, 0.1, 0.8),  # reasoning, top regret
    "BankTransferReport": (0.8, 0.2, 0.6),  # tool_use, tied second
    "NimLastStoneWins": (0.7, 0.1, 0.6),  # game, tied second
    "CalendarDayOffset": (0.6, 0.3, 0.3),  # reasoning
    "FileSystemTaskRunner": (0.5, 0.45, 0.05),  # tool_use, low regret
    "KeyDoorMazeEscape": (0.4, 0.2, 0.2),  # game
    "UnitConversionChain": (1.0, 0.95, 0.05),  # reasoning, too easy
    "SpreadsheetTotalRow": (0.95, 0.9, 0.05),  # tool_use, too easy (no-hint return exactly at 0.9)
    "HanoiTowerFinish": (1.0, 1.0, 0.0),  # game, too easy
    "SecretWordCipherDecode": (0.0, 0.0, 0.0),  # reasoning, too hard
    "CalendarFirstFreeSlot": (0.04, 0.0, 0.04),  # tool_use, too hard
    "HigherLowerSecret": (0.05, 0.0, 0.05),  # game, hint return exactly at 0.05: not too hard
    "PetOwnerDeduction": None,  # reasoning
    "InventoryOrderFulfilment": None,  # tool_use
    "EightPuzzleSlide": None,  # game
    "SequenceNextTerm": None,  # reasoning
    "TicketTriageClose": None,  # tool_use
    "LightsOut3x3": None,  # game, the newest
}
ORDER = [f"{name}-v0" for name in STATS]
TOO_EASY = {"UnitConversionChain-v0", "SpreadsheetTotalRow-v0", "HanoiTowerFinish-v0"}
TOO_HARD = {"SecretWordCipherDecode-v0", "CalendarFirstFreeSlot-v0"}
UNMEASURED = {f"{name}-v0" for name, stats in STATS.items() if stats is None}
# Good-difficulty candidates by regret, highest first (ties in one set).
BY_REGRET = [
    {"ArithmeticChain-v0"},
    {"BankTransferReport-v0", "NimLastStoneWins-v0"},
    {"CalendarDayOffset-v0"},
    {"KeyDoorMazeEscape-v0"},
    {"FileSystemTaskRunner-v0", "HigherLowerSecret-v0"},
]
SEEDS = range(40)


def bundled() -> dict[str, EnvRecord]:
    return {record.name: record for record in Registry(bundled_registry_path()).records()}


def register(registry: Registry, names: list[str], stats: dict[str, tuple[float, float, float] | None]) -> None:
    """Register the bundled programs ``names`` (in order) and give them ``stats`` (8 episodes)."""
    library = bundled()
    for name in names:
        source = library[name]
        registry.add(
            source.program(),
            name=name,
            setting=source.setting,
            max_turns=source.max_turns,
            description=source.description,
        )
        measured = stats.get(name)
        if measured is not None:
            hint, nohint, regret = measured
            registry.update_stats(
                f"{name}-v0", episodes=8, mean_return_hint=hint, mean_return_nohint=nohint, regret=regret
            )


@pytest.fixture(scope="module")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Registry:
    """The shared registry: never changed by a test."""
    reg = Registry(tmp_path_factory.mktemp("memory") / "registry", create=True)
    register(reg, list(STATS), STATS)
    return reg


def memory(registry: Registry, **config: object) -> EnvironmentMemory:
    return EnvironmentMemory(registry, MemoryConfig(**config))  # type: ignore[arg-type]


def ids(items: list[MemoryItem]) -> list[str]:
    return [item.env_id for item in items]


def reasons(items: list[MemoryItem]) -> list[str]:
    return [item.reason for item in items]


# ------------------------------------------------------------------------------------------------
# The mix
# ------------------------------------------------------------------------------------------------


def test_default_mix_picks_top_regrets_the_newest_and_one_too_easy_or_too_hard(registry: Registry) -> None:
    seen_fourth: Counter[str] = Counter()
    for seed in SEEDS:
        items = memory(registry).select(seed)
        assert len(items) == 4
        assert reasons(items)[:3] == ["high_regret", "high_regret", "recent"]
        assert items[0].env_id == "ArithmeticChain-v0"
        assert items[1].env_id in BY_REGRET[1]
        assert items[2].env_id == "LightsOut3x3-v0"
        fourth = items[3]
        assert fourth.reason in ("too_easy", "too_hard")
        assert fourth.env_id in (TOO_EASY if fourth.reason == "too_easy" else TOO_HARD)
        seen_fourth[fourth.reason] += 1
        seen_fourth[fourth.env_id] += 1
    # the half slot goes to too_easy or too_hard by a coin flip; every candidate turns up
    assert seen_fourth["too_easy"] > 5 and seen_fourth["too_hard"] > 5
    assert all(seen_fourth[env_id] for env_id in TOO_EASY | TOO_HARD)


def test_regret_ties_are_broken_at_random(registry: Registry) -> None:
    second = Counter(memory(registry).select(seed)[1].env_id for seed in SEEDS)
    assert set(second) == BY_REGRET[1]
    assert min(second.values()) >= 8


def test_high_regret_only_ranks_good_candidates_in_order(registry: Registry) -> None:
    items = memory(registry, k=7, high_regret=1, recent=0, too_easy=0, too_hard=0).select(3)
    assert reasons(items) == ["high_regret"] * 7
    # too easy (regret 0.05) and too hard (0.04) environments are not high-regret candidates
    picked = ids(items)
    assert [set(picked[0:1]), set(picked[1:3]), set(picked[3:4]), set(picked[4:5]), set(picked[5:7])] == BY_REGRET
    # with nothing else to draw from, the rest are random (measured or not)
    items = memory(registry, k=9, high_regret=1, recent=0, too_easy=0, too_hard=0).select(3)
    assert reasons(items) == ["high_regret"] * 7 + ["random"] * 2


def test_quotas_round_by_largest_remainder() -> None:
    config = MemoryConfig()
    assert config.quotas() == {"high_regret": 2, "recent": 1, "too_easy": 1, "too_hard": 0}  # ties: listed first
    assert config.quotas(8) == {"high_regret": 4, "recent": 2, "too_easy": 1, "too_hard": 1}
    assert config.quotas(3) == {"high_regret": 2, "recent": 1, "too_easy": 0, "too_hard": 0}
    assert config.quotas(1) == {"high_regret": 1, "recent": 0, "too_easy": 0, "too_hard": 0}
    assert config.quotas(0) == dict.fromkeys(CATEGORIES, 0)
    easy_or_hard: Counter[str] = Counter()
    for seed in SEEDS:
        quotas = config.quotas(4, seed)
        assert sum(quotas.values()) == 4 and quotas["high_regret"] == 2 and quotas["recent"] == 1
        easy_or_hard["too_easy" if quotas["too_easy"] else "too_hard"] += 1
    assert easy_or_hard["too_easy"] > 5 and easy_or_hard["too_hard"] > 5
    zero = MemoryConfig(high_regret=0, recent=0, too_easy=0, too_hard=0)
    assert zero.quotas(5) == dict.fromkeys(CATEGORIES, 0)
    weights = MemoryConfig(k=10, high_regret=1, recent=1, too_easy=1, too_hard=0)
    quotas = weights.quotas(rng=1)
    assert sum(quotas.values()) == 10 and quotas["too_hard"] == 0
    assert sorted(quotas[c] for c in ("high_regret", "recent", "too_easy")) == [3, 3, 4]
    with pytest.raises(ValueError, match="n = -1"):
        config.quotas(-1)


def test_too_easy_and_too_hard_follow_the_thresholds_and_every_candidate_is_drawn(registry: Registry) -> None:
    easy = Counter(memory(registry, k=1, high_regret=0, recent=0, too_easy=1, too_hard=0).select(s)[0] for s in SEEDS)
    assert {item.env_id for item in easy} == TOO_EASY  # no-hint return 0.9 counts: ">= too_easy_at"
    assert all(item.reason == "too_easy" and item.verdict == VERDICT_TOO_EASY for item in easy)
    hard = Counter(memory(registry, k=1, high_regret=0, recent=0, too_easy=0, too_hard=1).select(s)[0] for s in SEEDS)
    assert {item.env_id for item in hard} == TOO_HARD  # hint return 0.05 does not: "< too_hard_below"
    # other thresholds
    strict = dict(k=3, high_regret=0, recent=0, too_easy=1, too_hard=0, too_easy_at=0.96)
    items = memory(registry, **strict).select(0)
    assert ids(items)[0] == "HanoiTowerFinish-v0" and reasons(items) == ["too_easy", "random", "random"]
    loose = dict(k=3, high_regret=0, recent=0, too_easy=0, too_hard=1, too_hard_below=0.06)
    assert set(ids(memory(registry, **loose).select(0))) == TOO_HARD | {"HigherLowerSecret-v0"}
    # an environment no longer too easy becomes a high-regret candidate (regret 0.05)
    relaxed = memory(registry, k=8, high_regret=1, recent=0, too_easy=0, too_hard=0, too_easy_at=0.96).select(0)
    assert {"UnitConversionChain-v0", "SpreadsheetTotalRow-v0"} <= set(ids(relaxed))
    assert "HanoiTowerFinish-v0" not in ids(relaxed)


# ------------------------------------------------------------------------------------------------
# Backfill
# ------------------------------------------------------------------------------------------------


def test_a_short_category_is_backfilled_by_the_next_highest_regret(registry: Registry) -> None:
    for seed in SEEDS:
        items = memory(registry).select(seed, exclude=TOO_EASY | TOO_HARD)
        assert reasons(items) == ["high_regret", "high_regret", "recent", "high_regret"]
        assert {items[1].env_id, items[3].env_id} == BY_REGRET[1]


def test_backfill_goes_round_robin_then_random(registry: Registry) -> None:
    # quotas 3 + 3; too_easy has 3, too_hard 2: the slot left is random
    items = memory(registry, k=6, high_regret=0, recent=0, too_easy=1, too_hard=1).select(5)
    assert Counter(reasons(items)) == {"too_easy": 3, "too_hard": 2, "random": 1}
    assert items[-1].env_id not in TOO_EASY | TOO_HARD
    # quotas 4 + 4: too_easy is short by one; high_regret (weight > 0) takes the slot before random
    items = memory(registry, k=8, high_regret=1, recent=0, too_easy=1, too_hard=0).select(5)
    assert reasons(items) == ["high_regret"] * 4 + ["too_easy"] * 3 + ["high_regret"]
    assert items[-1].env_id == "KeyDoorMazeEscape-v0"
    # a category of weight 0 never backfills: too_hard candidates exist but the rest is random
    items = memory(registry, k=6, high_regret=0, recent=0, too_easy=1, too_hard=0).select(5)
    assert reasons(items) == ["too_easy"] * 3 + ["random"] * 3
    # every weight 0: k random environments
    items = memory(registry, k=5, high_regret=0, recent=0, too_easy=0, too_hard=0).select(5)
    assert reasons(items) == ["random"] * 5 and len(set(ids(items))) == 5


def test_k_larger_than_the_registry_gives_every_environment_once(registry: Registry) -> None:
    for seed in range(5):
        items = memory(registry, k=50).select(seed)
        assert sorted(ids(items)) == sorted(ORDER)
    assert len(memory(registry, k=50).select(0, exclude=["ArithmeticChain-v0"])) == len(ORDER) - 1


def test_unmeasured_environments_are_only_recent_or_random(registry: Registry) -> None:
    for seed in SEEDS:
        for item in memory(registry, k=len(ORDER)).select(seed):
            if item.env_id in UNMEASURED:
                assert item.reason in ("recent", "random")
                assert item.verdict == VERDICT_UNMEASURED
    measured = set(ORDER) - UNMEASURED
    items = memory(registry).select(0, exclude=measured)
    assert reasons(items) == ["recent", "random", "random", "random"]
    assert items[0].env_id == "LightsOut3x3-v0"


def test_an_empty_registry_and_k_0_give_no_items(tmp_path: Path, registry: Registry) -> None:
    empty = Registry(tmp_path / "empty", create=True)
    assert EnvironmentMemory(empty).select(0) == []
    assert EnvironmentMemory(empty).select(0, setting="game", exclude=["X-v0"]) == []
    assert memory(registry, k=0).select(0) == []
    assert memory(registry).select(0, exclude=ORDER) == []
    assert format_memory([]) == ""


# ------------------------------------------------------------------------------------------------
# Exclude, setting preference, determinism
# ------------------------------------------------------------------------------------------------


def test_exclude_takes_env_ids_and_gym_ids(registry: Registry) -> None:
    for seed in SEEDS:
        items = memory(registry).select(seed, exclude=["spade/ArithmeticChain-v0", "LightsOut3x3-v0", "Nope-v3"])
        assert "ArithmeticChain-v0" not in ids(items) and "LightsOut3x3-v0" not in ids(items)
        assert set(ids(items)[:2]) == BY_REGRET[1]
        assert items[2].env_id == "TicketTriageClose-v0"  # the newest left
    with pytest.raises(TypeError, match="single str"):
        memory(registry).select(0, exclude="ArithmeticChain-v0")
    with pytest.raises(TypeError, match="only str"):
        memory(registry).select(0, exclude=[3])  # type: ignore[list-item]


def test_the_preferred_setting_comes_first(registry: Registry) -> None:
    settings = {record.env_id: record.setting for record in registry.records()}
    for seed in SEEDS:
        items = memory(registry).select(seed, setting="game")
        assert [settings[i] for i in ids(items)] == ["game"] * 4
        assert ids(items)[:3] == ["NimLastStoneWins-v0", "KeyDoorMazeEscape-v0", "LightsOut3x3-v0"]
        # game has no too-hard environment: that half slot goes to the next-highest game regret
        assert items[3].env_id in {"HanoiTowerFinish-v0", "HigherLowerSecret-v0"}
    # config.setting is the default; select's setting overrides it
    items = memory(registry, setting="tool_use").select(1)
    assert {settings[i] for i in ids(items)} == {"tool_use"}
    assert items[0].env_id == "BankTransferReport-v0" and items[2].env_id == "TicketTriageClose-v0"
    assert {settings[i] for i in ids(memory(registry, setting="tool_use").select(1, setting="game"))} == {"game"}
    # a share: 2 of 4 slots for reasoning, 2 for the others
    for seed in range(10):
        items = memory(registry, same_setting_share=0.5).select(seed, setting="reasoning")
        assert [settings[i] == "reasoning" for i in ids(items)] == [True, True, False, False]
        assert items[0].env_id == "ArithmeticChain-v0"
        assert items[2].env_id in BY_REGRET[1]  # the other settings' own top regret
    # too few of the preferred setting: the others fill the slots
    few = [
        i for i, s in settings.items() if s == "reasoning" and i not in {"ArithmeticChain-v0", "PetOwnerDeduction-v0"}
    ]
    items = memory(registry).select(2, setting="reasoning", exclude=few)
    assert ids(items)[:2] == ["ArithmeticChain-v0", "PetOwnerDeduction-v0"]
    assert len(items) == 4 and all(settings[i] != "reasoning" for i in ids(items)[2:])
    # share 0 with a setting: the other settings first, the preferred one only as backfill
    items = memory(registry, k=4, same_setting_share=0.0).select(0, setting="game")
    assert all(settings[i] != "game" for i in ids(items))
    with pytest.raises(ValueError, match="setting = 'chess'"):
        memory(registry).select(0, setting="chess")


def test_the_same_seed_gives_the_same_picks_and_seeds_vary(registry: Registry) -> None:
    mem = memory(registry, k=6, high_regret=1, recent=1, too_easy=1, too_hard=1)
    for seed in range(10):
        first = mem.select(seed)
        assert [(i.env_id, i.reason) for i in mem.select(seed)] == [(i.env_id, i.reason) for i in first]
        assert ids(mem.select(random.Random(seed))) == ids(first)
    assert len({tuple(ids(mem.select(seed))) for seed in SEEDS}) > 10
    rng = random.Random(0)  # a generator passed in is advanced: successive calls differ
    assert len({tuple(ids(mem.select(rng))) for _ in range(5)}) > 1
    with pytest.raises(TypeError, match="rng is a str"):
        mem.select("seed")  # type: ignore[arg-type]
    # every environment turns up among random picks over many seeds
    everything = Counter(
        i.env_id
        for s in range(200)
        for i in memory(registry, k=3, high_regret=0, recent=0, too_easy=0, too_hard=0).select(s)
    )
    assert set(everything) == set(ORDER)


def test_selection_reads_the_index_not_every_record(registry: Registry, monkeypatch: pytest.MonkeyPatch) -> None:
    expected = {seed: ids(memory(registry, k=6).select(seed, setting="game")) for seed in range(5)}

    def no_records(*args: object, **kwargs: object) -> list[EnvRecord]:
        raise AssertionError("select() called Registry.records(): it should scan only the statistics")

    with monkeypatch.context() as patch:
        patch.setattr(registry, "records", no_records)
        assert {seed: ids(memory(registry, k=6).select(seed, setting="game")) for seed in range(5)} == expected


def test_stats_rows_match_the_records(registry: Registry) -> None:
    rows = registry.stats_rows()
    records = registry.records()
    assert [row[1:] for row in rows] == [
        (r.env_id, r.setting, r.stats.mean_return_hint, r.stats.mean_return_nohint, r.stats.regret) for r in records
    ]
    assert [row[0] for row in rows] == sorted(row[0] for row in rows)


# ------------------------------------------------------------------------------------------------
# Verdicts and formatting
# ------------------------------------------------------------------------------------------------


def test_verdicts() -> None:
    assert verdict(EnvStats()) == VERDICT_UNMEASURED
    assert verdict(EnvStats(8, 1.0, 0.9, 0.1)) == VERDICT_TOO_EASY
    assert verdict(EnvStats(8, 0.04, 0.0, 0.04)) == VERDICT_TOO_HARD
    assert verdict(EnvStats(8, 0.8, 0.3, 0.5)) == VERDICT_GOOD
    assert verdict(EnvStats(8, 0.8, 0.3)) == VERDICT_GOOD  # regret from the two means
    assert verdict(EnvStats(8, 0.5, 0.45, 0.05)) == VERDICT_LOW_REGRET
    assert verdict(EnvStats(8, 0.5, None)) == VERDICT_PARTLY_MEASURED
    assert verdict(EnvStats(8, 0.5, 0.45, 0.05), MemoryConfig(low_regret_below=0.05)) == VERDICT_GOOD
    assert verdict(EnvStats(8, 1.0, 0.95), MemoryConfig(too_easy_at=1.0)) == VERDICT_LOW_REGRET


def by_id(registry: Registry, env_id: str, reason: str = "random", config: MemoryConfig | None = None) -> MemoryItem:
    record = registry.get(env_id)
    return MemoryItem(record, reason, verdict(record.stats, config))  # type: ignore[arg-type]


def test_format_shows_name_setting_description_returns_and_verdict(registry: Registry) -> None:
    names = ["ArithmeticChain-v0", "HanoiTowerFinish-v0", "SecretWordCipherDecode-v0", "LightsOut3x3-v0"]
    names += ["FileSystemTaskRunner-v0"]
    text = format_memory([by_id(registry, n) for n in names])
    blocks = text.split("\n\n")
    assert len(blocks) == 5 and not text.endswith("\n")
    first = blocks[0].splitlines()
    description = " ".join(registry.get("ArithmeticChain-v0").description.split())
    assert first[0] == f'[1] ArithmeticChain-v0 (reasoning, max 4 turns): "{description}"'
    assert (
        first[1]
        == "    returns: 0.90 with hint / 0.10 without (regret 0.80, 8 episodes) -> good difficulty (high regret)"
    )
    assert blocks[1].startswith("[2] HanoiTowerFinish-v0 (game, max 90 turns): ")
    assert blocks[1].endswith("returns: 1.00 with hint / 1.00 without (regret 0.00, 8 episodes) -> " + VERDICT_TOO_EASY)
    assert blocks[2].endswith("returns: 0.00 with hint / 0.00 without (regret 0.00, 8 episodes) -> " + VERDICT_TOO_HARD)
    assert blocks[3].startswith("[4] LightsOut3x3-v0 (game, max 12 turns)")
    assert blocks[3].endswith("    returns: not measured yet")
    assert blocks[4].endswith("(regret 0.05, 8 episodes) -> " + VERDICT_LOW_REGRET)
    assert "```" not in text
    # the method uses the memory's config
    mem = memory(registry, max_description_chars=30)
    assert mem.format([by_id(registry, "ArithmeticChain-v0")]) == format_memory(
        [by_id(registry, "ArithmeticChain-v0")], max_description_chars=30
    )


def test_format_truncates_the_description_and_the_source(registry: Registry) -> None:
    item = by_id(registry, "ArithmeticChain-v0")
    header = format_memory([item], max_description_chars=40).splitlines()[0]
    shown = header.split(": ", 1)[1]
    assert len(shown) == 40 + 2 and shown.endswith('..."')  # 40 characters in quotes
    source = item.record.program().source
    text = format_memory([item], include_source=True, max_source_chars=300)
    lines = text.splitlines()
    start = lines.index("```python")
    assert lines[-1] == "```"
    code = "\n".join(lines[start + 1 : -1])
    body, marker = code.rsplit("\n", 1)
    assert marker.startswith("# ... [truncated: ") and marker.endswith(" more characters not shown]")
    assert len(body) <= 300 and source.startswith(body)
    assert int(marker.split(": ")[1].split()[0]) == len(source.rstrip("\n")) - len(body)
    full = format_memory([item], include_source=True, max_source_chars=100_000)
    assert source.rstrip("\n") in full and "# ... [truncated:" not in full
    # a source holding a backtick fence gets a longer fence
    odd = dataclasses.replace(item, source='"""```python```"""\nx = 1\n')
    assert "````python" in format_memory([odd], include_source=True)
    with pytest.raises(ValueError, match="max_source_chars = 5"):
        format_memory([item], include_source=True, max_source_chars=5)
    with pytest.raises(TypeError, match="expected a MemoryItem"):
        format_memory([item.record])  # type: ignore[list-item]


def test_include_source_reads_the_sources_at_selection(registry: Registry) -> None:
    mem = memory(registry, include_source=True, max_source_chars=200)
    items = mem.select(0)
    assert all(item.source == item.record.program().source for item in items)
    text = mem.format(items)
    assert text.count("```python") == 4 and text.count("# ... [truncated: ") == 4


# ------------------------------------------------------------------------------------------------
# Damaged entries
# ------------------------------------------------------------------------------------------------


def test_a_damaged_entry_never_raises(tmp_path: Path) -> None:
    small = Registry(tmp_path / "small", create=True)
    names = ["ArithmeticChain", "CalendarDayOffset", "LightsOut3x3", "HanoiTowerFinish"]
    register(small, names, STATS)
    damaged = small.get("ArithmeticChain-v0")  # the top regret
    damaged.source_path.unlink()
    with pytest.raises(RegistryError):
        damaged.program()
    # without sources it is shown like any other
    items = EnvironmentMemory(small).select(0)
    assert items[0].env_id == "ArithmeticChain-v0"
    text = format_memory(items, include_source=True)
    assert "(source unavailable: the registry entry is damaged)" in text
    assert text.count("```python") == 3
    # edit mode never picks an environment whose source cannot be read
    assert all(pick_parent(items, seed).env_id != "ArithmeticChain-v0" for seed in range(20))  # type: ignore[union-attr]
    assert pick_parent(items[:1], 0) is None
    # with sources, selection skips it
    for seed in range(10):
        items = memory(small, include_source=True).select(seed)
        assert "ArithmeticChain-v0" not in ids(items) and len(items) == 3
        assert items[0].env_id == "CalendarDayOffset-v0"
    # once the registry notices (on reopening), the index no longer lists it
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        reopened = Registry(small.root)
    assert "ArithmeticChain-v0" not in ids(EnvironmentMemory(reopened, MemoryConfig(k=10)).select(0))


# ------------------------------------------------------------------------------------------------
# Edit mode
# ------------------------------------------------------------------------------------------------


def with_source(item: MemoryItem) -> MemoryItem:
    """``item`` with its source attached, as ``select`` with ``include_source`` makes them."""
    return dataclasses.replace(item, source=item.record.program().source)


def test_pick_parent_prefers_high_regret_in_proportion(registry: Registry) -> None:
    names = ["ArithmeticChain-v0", "KeyDoorMazeEscape-v0", "HanoiTowerFinish-v0", "LightsOut3x3-v0"]
    items = [with_source(by_id(registry, n)) for n in names]
    picks = Counter(pick_parent(items, seed).env_id for seed in range(300))  # type: ignore[union-attr]
    assert set(picks) == {"ArithmeticChain-v0", "KeyDoorMazeEscape-v0"}  # good difficulty only
    assert 0.7 < picks["ArithmeticChain-v0"] / 300 < 0.9  # 0.8 / (0.8 + 0.2)
    assert pick_parent(items, 4) == pick_parent(items, 4)
    # nothing of good difficulty: uniform among the rest
    rest = [by_id(registry, n) for n in ["HanoiTowerFinish-v0", "SecretWordCipherDecode-v0", "LightsOut3x3-v0"]]
    rest = [with_source(item) for item in rest]
    assert {pick_parent(rest, seed).env_id for seed in range(60)} == {i.env_id for i in rest}  # type: ignore[union-attr]
    assert pick_parent([], 0) is None
    # the memory's thresholds apply: with too_hard_below 0.5, KeyDoorMazeEscape (hint 0.4) is too hard
    mem = memory(registry, too_hard_below=0.5)
    assert {mem.pick_parent(items, seed).env_id for seed in range(40)} == {"ArithmeticChain-v0"}  # type: ignore[union-attr]
    selected = memory(registry).select(0)
    assert memory(registry).pick_parent(selected, 0) in selected


# ------------------------------------------------------------------------------------------------
# Configuration
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("k", -1, "MemoryConfig.k = -1; expected an int >= 0"),
        ("k", True, "MemoryConfig.k = True; expected an int >= 0"),
        ("k", 2.0, "MemoryConfig.k = 2.0; expected an int >= 0"),
        ("high_regret", -0.5, "MemoryConfig.high_regret = -0.5; expected a finite number >= 0"),
        ("recent", float("inf"), "MemoryConfig.recent = inf; expected a finite number >= 0"),
        ("too_easy", float("nan"), "MemoryConfig.too_easy = nan"),
        ("too_hard", "1", "MemoryConfig.too_hard = '1'"),
        ("too_easy_at", 1.5, "MemoryConfig.too_easy_at = 1.5; expected a number in [0, 1]"),
        ("too_hard_below", -0.1, "MemoryConfig.too_hard_below = -0.1; expected a number in [0, 1]"),
        ("low_regret_below", None, "MemoryConfig.low_regret_below = None"),
        ("same_setting_share", 2, "MemoryConfig.same_setting_share = 2; expected a number in [0, 1]"),
        ("setting", "chess", "MemoryConfig.setting = 'chess'; expected None or one of"),
        ("include_source", 1, "MemoryConfig.include_source = 1; expected a bool"),
        ("max_source_chars", 5, "MemoryConfig.max_source_chars = 5; expected an int >= 10"),
        ("max_description_chars", 0, "MemoryConfig.max_description_chars = 0; expected an int >= 10"),
    ],
)
def test_config_validation_names_the_field(registry: Registry, field: str, value: object, message: str) -> None:
    config = MemoryConfig(**{field: value})  # type: ignore[arg-type]
    with pytest.raises(ValueError) as caught:
        config.validate()
    assert str(caught.value).startswith(message)
    with pytest.raises(ValueError, match=f"MemoryConfig.{field}"):
        EnvironmentMemory(registry, config)


def test_memory_arguments_are_checked(registry: Registry) -> None:
    MemoryConfig().validate()
    with pytest.raises(TypeError, match="expected a spade_gym Registry"):
        EnvironmentMemory("runs/registry")  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="expected a MemoryConfig"):
        EnvironmentMemory(registry, {"k": 4})  # type: ignore[arg-type]
    assert "EnvironmentMemory(Registry(" in repr(EnvironmentMemory(registry))
