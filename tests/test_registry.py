"""The environment registry: real folders on disk, real SQLite, real processes."""

from __future__ import annotations

import json
import math
import os
import random
import re
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from cases import EXAMPLES
from programs import program

from spade_gym import EnvProgram
from spade_gym.errors import DuplicateEnvironment, EnvNotFound, RegistryError
from spade_gym.registry import FLAGGED_TAG, EnvRecord, EnvStats, Registry, ReplayConfig, replay_probabilities
from spade_gym.registry.dedup import (
    SIGNATURE_VERSION,
    ast_hash,
    jaccard,
    lsh_params,
    minhash,
    minhash_from_bytes,
    minhash_to_bytes,
)
from spade_gym.registry.index import SCHEMA_VERSION, Index
from spade_gym.registry.sampler import Population, ReplaySampler, competition_ranks

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent


def distinct_source(i: int, name: str | None = None) -> str:
    """A valid program that differs from every other ``i``'s (token-shingle similarity below 0.7)."""
    return program(
        reset=f"""
            self.target = (seed * {i + 2} + {7 * i + 3}) % {97 + i}
            return "round {i}: find " + str(self.target), {{}}
        """,
        step=f"""
            ok = action.strip() == str(self.target)
            return "checked {i}", {(i % 9 + 1) / 10} if ok else 0.0, True, False, {{}}
        """,
        hint=f'return "it is below {100 + i}"',
        oracle="return str(self.target)",
        name=name or f"Gen{i}",
    )


def add(registry: Registry, i: int, name: str | None = None, setting: str = "reasoning", **kwargs: Any) -> EnvRecord:
    """Register ``distinct_source(i)`` under ``name`` (default ``Gen<i>``)."""
    name = name or f"Gen{i}"
    return registry.add(
        EnvProgram(distinct_source(i, name)),
        name=name,
        setting=setting,
        max_turns=5,
        description=f"find the target of round {i}",
        **kwargs,
    )


def reopen(root: Path) -> tuple[Registry, list[str]]:
    """Open the registry at ``root`` again; return it and the warnings the open gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        registry = Registry(root)
    return registry, [str(w.message) for w in caught]


@pytest.fixture()
def registry(tmp_path: Path) -> Registry:
    return Registry(tmp_path / "reg", create=True)


ARITHMETIC = (EXAMPLES / "arithmetic_chain.py").read_text()
BANK = (EXAMPLES / "bank_account.py").read_text()


# ------------------------------------------------------------------------------------------------
# Adding, reading, iterating
# ------------------------------------------------------------------------------------------------


def test_add_get_iterate(registry: Registry) -> None:
    records = [add(registry, i, setting=s) for i, s in enumerate(["reasoning", "game", "reasoning"])]
    assert [r.env_id for r in records] == ["Gen0-v0", "Gen1-v0", "Gen2-v0"]
    first = records[0]
    assert first.path == registry.root / "envs" / "Gen0-v0"
    assert first.source_path.read_text() == distinct_source(0)
    assert first.program().source == distinct_source(0)
    assert first.program_id == EnvProgram(distinct_source(0)).id
    assert first.gym_id == "spade/Gen0-v0"
    assert first.stats == EnvStats()
    assert json.loads(first.meta_path.read_text()) == first.to_meta()

    assert registry.get("Gen0-v0") == first
    assert registry.get("spade/Gen0-v0") == first
    assert registry.get(first.program_id) == first
    assert len(registry) == 3
    assert [r.env_id for r in registry] == ["Gen0-v0", "Gen1-v0", "Gen2-v0"]
    assert "Gen1-v0" in registry and "spade/Gen1-v0" in registry and "Gen9-v0" not in registry and 3 not in registry
    assert [r.env_id for r in registry.records(setting="reasoning")] == ["Gen0-v0", "Gen2-v0"]
    assert [r.env_id for r in registry.records(setting="tool_use")] == []
    with pytest.raises(ValueError, match=r"setting = 'tool-use'; expected one of \('reasoning', 'tool_use', 'game'\)"):
        registry.records(setting="tool-use")

    again = Registry(registry.root)  # a second instance reads the same index
    assert list(again) == list(registry)


def test_provenance_is_stored(registry: Registry) -> None:
    record = add(
        registry,
        0,
        tags=("arithmetic", "short"),
        document={"source": "wikipedia", "title": "Modular arithmetic", "offset": 3},
        parents=("Other-v1",),
        validation={"accepted": True, "checks": [{"name": "static", "passed": True}]},
        stats=EnvStats(episodes=8, mean_return_hint=0.75, mean_return_nohint=0.25, regret=0.5),
    )
    got = registry.get(record.env_id)
    assert got == record
    assert got.tags == ("arithmetic", "short") and got.parents == ("Other-v1",)
    assert got.document == {"source": "wikipedia", "title": "Modular arithmetic", "offset": 3}
    assert got.validation == {"accepted": True, "checks": [{"name": "static", "passed": True}]}
    assert got.stats.regret == 0.5 and got.stats.episodes == 8


@pytest.mark.parametrize(
    ("kwargs", "error", "message"),
    [
        ({"name": "lower"}, ValueError, "name = 'lower'; expected a CamelCase identifier"),
        ({"name": "Bad-v1"}, ValueError, "name = 'Bad-v1'; expected a CamelCase identifier"),
        ({"setting": "games"}, ValueError, "setting = 'games'; expected one of"),
        ({"max_turns": 0}, ValueError, "max_turns = 0; expected an int from 1 to 100000"),
        ({"tags": "solo"}, TypeError, "tags = 'solo' is a single str; expected an iterable of str"),
        ({"document": {"x": math.nan}}, ValueError, "document is not JSON-serialisable"),
        ({"document": {"x": object()}}, ValueError, "document is not JSON-serialisable"),
        ({"stats": EnvStats(regret=-0.1)}, ValueError, "EnvStats.regret = -0.1; expected None or a number >= 0"),
        ({"near_duplicate_threshold": 1.5}, ValueError, r"threshold = 1.5; expected a number in \(0, 1\]"),
    ],
)
def test_add_rejects_bad_arguments(registry: Registry, kwargs: dict, error: type, message: str) -> None:
    arguments = {"name": "Good", "setting": "reasoning", "max_turns": 5, "description": "d", **kwargs}
    with pytest.raises(error, match=message):
        registry.add(EnvProgram(distinct_source(0)), **arguments)
    assert len(registry) == 0 and list((registry.root / "envs").iterdir()) == []


def test_versions_for_the_same_name(registry: Registry) -> None:
    assert add(registry, 0, name="Alpha").env_id == "Alpha-v0"
    assert add(registry, 1, name="Alpha").env_id == "Alpha-v1"
    assert add(registry, 2, name="Beta").env_id == "Beta-v0"
    assert add(registry, 3, name="Alpha").env_id == "Alpha-v2"
    assert [(r.name, r.version) for r in registry] == [("Alpha", 0), ("Alpha", 1), ("Beta", 0), ("Alpha", 2)]
    # A folder that is on disk but not indexed (a writer died after its rename) keeps its version.
    (registry.root / "envs" / "Alpha-v3").mkdir()
    assert add(registry, 4, name="Alpha").env_id == "Alpha-v4"


def test_not_found_suggests_close_ids(registry: Registry, tmp_path: Path) -> None:
    with pytest.raises(EnvNotFound, match="no environment 'Gen0-v0' in the registry at .*: the registry is empty"):
        registry.get("Gen0-v0")
    add(registry, 0, name="ArithmeticChain")
    add(registry, 1, name="ArithmeticChain")
    with pytest.raises(EnvNotFound, match=r"did you mean 'ArithmeticChain-v0'\?"):
        registry.get("ArithmeticChian-v0")
    with pytest.raises(
        EnvNotFound, match=r"ArithmeticChain has version\(s\) v0, v1: did you mean 'ArithmeticChain-v1'"
    ):
        registry.get("spade/ArithmeticChain-v7")
    with pytest.raises(EnvNotFound, match="ids look like 'Name-v0', 'spade/Name-v0' or a 64-character program id"):
        registry.get("zzz")
    with pytest.raises(EnvNotFound, match="no environment has that program id"):
        registry.get("0" * 64)


# ------------------------------------------------------------------------------------------------
# Duplicates
# ------------------------------------------------------------------------------------------------

#: ARITHMETIC with its functions, globals and local variables renamed, comments and the docstring
#: rewritten, and the layout changed: the same program to a reader.
RENAMED = ARITHMETIC
for _old, _new in [
    ("apply_op", "run_step"),
    ("describe_op", "explain_step"),
    ("INT_ANSWER", "NUMBER"),
    ("n_ops", "count"),
    ("choices", "menu"),
    ("guess", "given"),
    ("lines", "parts"),
]:
    RENAMED = re.sub(rf"\b{_old}\b", _new, RENAMED)
RENAMED = RENAMED.replace('"""Evaluate a seeded chain', '"""Work out a seeded sequence').replace(
    "import re\n", "import re  # regular expressions\n\n"
)


def test_exact_duplicates_are_refused(registry: Registry) -> None:
    original = registry.add(
        EnvProgram(ARITHMETIC), name="ArithmeticChain", setting="reasoning", max_turns=4, description="d"
    )
    relaid = ARITHMETIC.replace("import re\n", "import re   # layout and comments only\n\n\n")
    with pytest.raises(DuplicateEnvironment, match="exact duplicate of ArithmeticChain-v0 .the same program id") as exc:
        registry.add(EnvProgram(relaid), name="Copy", setting="reasoning", max_turns=4, description="d")
    assert exc.value.existing == "ArithmeticChain-v0" and exc.value.similarity == 1.0

    assert RENAMED != ARITHMETIC and EnvProgram(RENAMED).id != original.program_id
    assert ast_hash(RENAMED) == ast_hash(ARITHMETIC)
    with pytest.raises(DuplicateEnvironment, match="exact duplicate of ArithmeticChain-v0 .the same structure") as exc:
        registry.add(
            EnvProgram(RENAMED),
            name="Copy",
            setting="reasoning",
            max_turns=4,
            description="d",
            allow_near_duplicates=True,
        )
    assert exc.value.existing == "ArithmeticChain-v0" and exc.value.similarity == 1.0
    assert exc.value.category == "DUPLICATE"
    found = registry.find_duplicate(EnvProgram(RENAMED))
    assert found is not None and found[0] == original and found[1] == 1.0
    assert len(registry) == 1


def test_near_duplicates_are_refused_unless_allowed(registry: Registry) -> None:
    registry.add(EnvProgram(ARITHMETIC), name="ArithmeticChain", setting="reasoning", max_turns=4, description="d")
    registry.add(EnvProgram(BANK), name="BankAccount", setting="tool_use", max_turns=8, description="d")
    # Renamed attributes (kept by the structural hash), a changed constant, a new comment.
    near = (
        RENAMED.replace("self.ops", "self.operations")
        .replace("self.turn", "self.attempt")
        .replace("randint(100, 999)", "randint(100, 899)")
        .replace("    def reset(self, seed):\n", "    # a fresh episode\n    def reset(self, seed):\n")
    )
    assert ast_hash(near) != ast_hash(ARITHMETIC)
    similarity = jaccard(minhash(near), minhash(ARITHMETIC))
    assert 0.9 <= similarity < 1.0
    with pytest.raises(
        DuplicateEnvironment, match="near duplicate of ArithmeticChain-v0: the estimated Jaccard"
    ) as exc:
        registry.add(EnvProgram(near), name="Copy", setting="reasoning", max_turns=4, description="d")
    assert exc.value.existing == "ArithmeticChain-v0" and exc.value.similarity == pytest.approx(similarity)
    found = registry.find_duplicate(EnvProgram(near))
    assert found is not None and found[0].env_id == "ArithmeticChain-v0" and found[1] == pytest.approx(similarity)
    assert registry.find_duplicate(EnvProgram(near), threshold=1.0) is None

    record = registry.add(
        EnvProgram(near), name="Copy", setting="reasoning", max_turns=4, description="d", allow_near_duplicates=True
    )
    assert record.env_id == "Copy-v0" and len(registry) == 3
    # Distinct programs are not near duplicates of each other.
    assert jaccard(minhash(ARITHMETIC), minhash(BANK)) < 0.3
    assert registry.find_duplicate(EnvProgram(distinct_source(7))) is None


def test_minhash_signature_round_trip_and_lsh_bands() -> None:
    sketch = minhash(ARITHMETIC)
    data = minhash_to_bytes(sketch)
    assert len(data) == 8 * 128
    assert jaccard(minhash_from_bytes(data), sketch) == 1.0
    with pytest.raises(ValueError, match="a MinHash signature is 1024 bytes; got 3"):
        minhash_from_bytes(b"abc")
    for threshold in (0.5, 0.8, 0.9, 0.95):
        b, r = lsh_params(threshold)
        assert b * r <= 128 and 1 - (1 - threshold**r) ** b >= 0.999


# ------------------------------------------------------------------------------------------------
# Records and meta.json
# ------------------------------------------------------------------------------------------------


def test_record_json_round_trip(registry: Registry) -> None:
    record = add(
        registry,
        0,
        tags=("a",),
        document={"title": "Ünïcode ✓", "n": [1, 2.5, None, True]},
        parents=("P-v0",),
        stats=EnvStats(episodes=3, mean_return_hint=1, mean_return_nohint=0.0, regret=1.0),
    )
    meta = json.loads(json.dumps(record.to_meta()))
    assert meta["schema_version"] == 1
    assert EnvRecord.from_meta(meta, record.path) == record
    assert EnvRecord.from_meta(json.loads(record.meta_path.read_text()), record.path) == record


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda m: m.pop("setting"), "meta.json lacks the field 'setting'; expected one of"),
        (lambda m: m.update(max_turns="five"), "meta.json: field 'max_turns' is 'five'; expected an int in"),
        (lambda m: m.update(max_turns=0), r"field 'max_turns' is 0; expected an int in \[1, 100,000\]"),
        (lambda m: m.update(max_turns=-3), r"field 'max_turns' is -3; expected an int in \[1, 100,000\]"),
        (lambda m: m.update(version=True), "meta.json: field 'version' is True; expected an int >= 0"),
        (lambda m: m.update(schema_version=99), "meta.json has schema_version 99; this spade_gym reads version 1"),
        (lambda m: m.update(env_id="Other-v0"), "env_id 'Other-v0' does not match name 'Gen0' and version 0"),
        (lambda m: m["stats"].update(speed=1), "field 'stats' is invalid: unknown statistics field"),
    ],
)
def test_from_meta_names_the_bad_field(registry: Registry, edit: object, message: str) -> None:
    meta = add(registry, 0).to_meta()
    edit(meta)  # type: ignore[operator]
    with pytest.raises(RegistryError, match=message):
        EnvRecord.from_meta(meta, registry.root / "envs" / "Gen0-v0")


def test_update_stats_rewrites_meta_and_index(registry: Registry) -> None:
    add(registry, 0)
    updated = registry.update_stats("Gen0-v0", episodes=8, mean_return_hint=0.9, mean_return_nohint=0.4, regret=0.5)
    assert updated.stats == EnvStats(episodes=8, mean_return_hint=0.9, mean_return_nohint=0.4, regret=0.5)
    assert registry.get("Gen0-v0") == updated
    assert json.loads(updated.meta_path.read_text())["stats"]["regret"] == 0.5
    assert list((registry.root / ".tmp").iterdir()) == []
    with pytest.raises(TypeError, match=r"unknown field\(s\) 'regrets'; EnvStats fields are"):
        registry.update_stats("Gen0-v0", regrets=0.1)
    with pytest.raises(ValueError, match="EnvStats.mean_return_hint = nan; expected None or a finite number"):
        registry.update_stats("Gen0-v0", mean_return_hint=math.nan)
    with pytest.raises(EnvNotFound, match="no environment 'Gen5-v0'"):
        registry.update_stats("Gen5-v0", regret=0.1)
    # the statistics survive a rebuild from the folders
    (registry.root / "index.sqlite").unlink()
    reopened, _ = reopen(registry.root)
    assert reopened.get("Gen0-v0").stats == updated.stats


# ------------------------------------------------------------------------------------------------
# Damage: every kind is repaired or isolated, with a message
# ------------------------------------------------------------------------------------------------


def _three(registry: Registry) -> list[EnvRecord]:
    records = [add(registry, i) for i in range(3)]
    registry.close()
    return records


def test_missing_root(tmp_path: Path) -> None:
    missing = tmp_path / "nowhere"
    with pytest.raises(
        RegistryError, match=f"no environment registry at {missing}: the folder does not exist; pass create=True"
    ):
        Registry(missing)
    assert not missing.exists()
    (tmp_path / "file").write_text("x")
    with pytest.raises(RegistryError, match="it is a file, not a folder"):
        Registry(tmp_path / "file")
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(RegistryError, match="has no envs/ folder and is not empty; pass create=True"):
        Registry(tmp_path / "other")
    assert len(Registry(tmp_path / "empty", create=True)) == 0
    (tmp_path / "empty2").mkdir()
    assert len(Registry(tmp_path / "empty2")) == 0  # an empty folder is an empty registry


def test_corrupt_meta_json_is_skipped(registry: Registry) -> None:
    records = _three(registry)
    records[1].meta_path.write_text("{not json")
    reopened, caught = reopen(registry.root)
    assert any("1 environment folder(s) changed since they were indexed" in w for w in caught)
    assert any("1 environment folder(s) cannot be read and are skipped" in w for w in caught)
    assert [r.env_id for r in reopened] == ["Gen0-v0", "Gen2-v0"]
    assert reopened.problems() == [
        (
            str(records[1].path),
            "meta.json is not valid JSON (Expecting property name enclosed in double quotes: line 1 column 2 (char 1)); "
            "expected the JSON object Registry.add writes",
        )
    ]
    with pytest.raises(EnvNotFound):
        reopened.get("Gen1-v0")
    assert reopened.sample(3, strategy="uniform")  # the rest works
    assert add(reopened, 3).env_id == "Gen3-v0"
    # Mending the file brings the entry back.
    records[1].meta_path.write_text(json.dumps(records[1].to_meta()))
    with pytest.warns(RuntimeWarning, match="re-indexed 0 new, 1 changed and 0 removed"):
        assert reopened.problems() == []
    assert reopened.get("Gen1-v0") == records[1]


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        ("deep", "nested too deeply"),
        ("huge", "bytes; at most"),
        ("latin1", "cannot be read"),
    ],
)
def test_any_damaged_meta_json_is_skipped_with_a_warning(registry: Registry, damage: str, problem: str) -> None:
    records = _three(registry)
    meta = records[1].meta_path
    if damage == "deep":
        meta.write_text("[" * 200_000 + "]" * 200_000)
    elif damage == "huge":
        meta.write_text(json.dumps({**records[1].to_meta(), "pad": "x" * (5 * 1024 * 1024)}))
    else:
        meta.write_bytes(json.dumps(records[1].to_meta()).encode().replace(b'"', b'\xff"', 1))
    reopened, caught = reopen(registry.root)
    assert any("cannot be read and are skipped" in w for w in caught)
    assert [r.env_id for r in reopened] == ["Gen0-v0", "Gen2-v0"]
    ((directory, message),) = reopened.problems()
    assert directory == str(records[1].path) and problem in message


@pytest.mark.parametrize("field", ["description", "tags", "name"])
def test_a_huge_meta_json_field_gets_a_short_warning_naming_the_file(registry: Registry, field: str) -> None:
    records = _three(registry)
    huge = "x" * 3_900_000  # within the 4 MiB a meta.json may have: read, then refused
    records[1].meta_path.write_text(json.dumps({**records[1].to_meta(), field: [huge] if field == "tags" else huge}))
    reopened, caught = reopen(registry.root)
    (warning,) = [w for w in caught if "cannot be read and are skipped" in w]
    assert str(records[1].meta_path.parent) in warning and "meta.json" in warning and len(warning) < 1000
    ((_directory, message),) = reopened.problems()
    assert len(message) < 400 and [r.env_id for r in reopened] == ["Gen0-v0", "Gen2-v0"]


def test_missing_env_py_is_skipped(registry: Registry) -> None:
    records = _three(registry)
    records[0].source_path.unlink()
    reopened, caught = reopen(registry.root)
    assert any("cannot be read and are skipped (see Registry.problems())" in w for w in caught)
    assert reopened.problems() == [(str(records[0].path), "env.py is missing; expected the environment's program")]
    assert len(reopened) == 2 and "Gen0-v0" not in reopened
    with pytest.raises(RegistryError, match="env.py is missing: the registry entry Gen0-v0 is damaged"):
        records[0].program()


def test_changed_env_py_is_reported(registry: Registry) -> None:
    records = _three(registry)
    records[2].source_path.write_text(distinct_source(9))
    reopened, _ = reopen(registry.root)
    ((directory, message),) = reopened.problems()
    assert directory == str(records[2].path)
    assert message.startswith("env.py does not match meta.json: its program id is")
    with pytest.raises(RegistryError, match="was changed after registration"):
        records[2].program()


def test_deleted_index_is_rebuilt(registry: Registry) -> None:
    records = _three(registry)
    registry.update_stats("Gen1-v0", regret=0.25)
    registry.close()
    for path in registry.root.glob("index.sqlite*"):
        path.unlink()
    reopened, caught = reopen(registry.root)
    assert caught == [
        f"spade_gym registry {registry.root}: index.sqlite is missing; "
        "rebuilt index.sqlite from the 3 readable environment folder(s)"
    ]
    assert [r.env_id for r in reopened] == [r.env_id for r in records]
    assert reopened.get("Gen1-v0").stats.regret == 0.25
    assert reopened.get(records[2].program_id).env_id == "Gen2-v0"
    with pytest.raises(DuplicateEnvironment):
        reopened.add(EnvProgram(distinct_source(0)), name="Again", setting="reasoning", max_turns=5, description="d")


def test_junk_index_is_rebuilt(registry: Registry) -> None:
    _three(registry)
    (registry.root / "index.sqlite").write_bytes(bytes(random.Random(0).randrange(256) for _ in range(100)))
    reopened, caught = reopen(registry.root)
    assert len(caught) == 1
    assert "index.sqlite is not a readable SQLite database (file is not a database); rebuilt index.sqlite" in caught[0]
    assert len(reopened) == 3 and reopened.get("Gen2-v0").name == "Gen2"


def test_truncated_index_is_rebuilt(registry: Registry) -> None:
    for i in range(12):  # enough rows that the file spans many pages
        add(registry, i, validation={"report": "x" * 3000})
    registry.close()
    path = registry.root / "index.sqlite"
    size = path.stat().st_size
    with path.open("r+b") as f:
        f.truncate(size // 2)
    reopened, caught = reopen(registry.root)
    assert len(caught) == 1 and "rebuilt index.sqlite from the 12 readable environment folder(s)" in caught[0]
    assert "index.sqlite is" in caught[0]  # damaged / not readable, as SQLite reports it
    assert len(reopened) == 12


def test_index_of_another_schema_is_rebuilt(registry: Registry) -> None:
    _three(registry)
    with sqlite3.connect(registry.root / "index.sqlite") as conn:
        conn.execute("PRAGMA user_version = 99")
    reopened, caught = reopen(registry.root)
    assert f"index.sqlite has schema version 99; this spade_gym reads version {SCHEMA_VERSION}; rebuilt" in caught[0]
    assert len(reopened) == 3


def test_folders_changed_behind_the_index_are_reindexed(registry: Registry, tmp_path: Path) -> None:
    records = _three(registry)
    # A writer that died after its rename, before its index insert, leaves a complete, unindexed folder.
    other = Registry(tmp_path / "other", create=True)
    extra = add(other, 5)
    shutil.copytree(extra.path, registry.root / "envs" / extra.env_id)
    shutil.rmtree(records[0].path)
    reopened, caught = reopen(registry.root)
    assert caught == [
        f"spade_gym registry {registry.root}: index.sqlite and envs/ list different environment folders; "
        "re-indexed 1 new, 0 changed and 1 removed folder(s)"
    ]
    assert [r.env_id for r in reopened] == ["Gen1-v0", "Gen2-v0", "Gen5-v0"]


def test_rebuild_index_restores_queries_and_keeps_sampling_counts(registry: Registry) -> None:
    records = _three(registry)
    registry.sample(5, strategy="uniform", rng=np.random.default_rng(0))
    before = list(registry)
    assert sum(r.stats.times_sampled for r in before) == 5
    assert registry.rebuild_index() == 3  # an intact index: the sampling counts it holds are kept
    assert list(registry) == before
    with sqlite3.connect(registry.root / "index.sqlite") as conn:  # rows lost behind the registry's back
        conn.execute("DELETE FROM envs")
    assert len(registry) == 0 and "Gen1-v0" not in registry
    assert registry.rebuild_index() == 3
    assert [r.env_id for r in registry] == [r.env_id for r in records]
    assert registry.get(records[1].program_id) == registry.get("spade/Gen1-v0")
    assert [r.program_id for r in registry.records(setting="reasoning")] == [r.program_id for r in records]
    with pytest.raises(DuplicateEnvironment):
        add(registry, 2, name="Again")


def test_tmp_leftovers_are_ignored_and_cleaned(registry: Registry) -> None:
    add(registry, 0)
    registry.close()
    leftover = registry.root / ".tmp" / "0123abcd"
    leftover.mkdir()
    (leftover / "env.py").write_text("half a progr")
    (registry.root / ".tmp" / "x.json").write_text("{")
    reopened, caught = reopen(registry.root)
    assert caught == [] and len(reopened) == 1
    assert list((registry.root / ".tmp").iterdir()) == []


def script_env() -> dict[str, str]:
    """The environment of a child Python that imports this module's helpers."""
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(TESTS), os.environ.get("PYTHONPATH", "")])}


def run_script(code: str, *args: str, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a child Python with ``args``; its output is captured as text."""
    return subprocess.run(
        [sys.executable, "-W", "ignore", "-c", code, *args],
        capture_output=True,
        text=True,
        env=script_env(),
        cwd=ROOT,
        timeout=120,
        **kwargs,
    )


#: Opens a registry this process cannot write: reads, draws without marking, and a refused add.
READ_ONLY = """
import sys
from test_registry import add
from spade_gym.errors import RegistryError
from spade_gym.registry import Registry

registry = Registry(sys.argv[1])
drawn = registry.sample(3, mark=False)
print(registry.read_only, " ".join(r.env_id for r in registry), all(r.program().id == r.program_id for r in drawn))
try:
    add(registry, 7)
except RegistryError as exc:
    print("refused:", exc)
"""


def _without_root_file_access() -> None:
    """In the child before exec: drop CAP_DAC_OVERRIDE (1) and CAP_DAC_READ_SEARCH (2) from the capability
    bounding set (PR_CAPBSET_DROP = 24), so that root, too, meets the permission bits."""
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for capability in (1, 2):
        if libc.prctl(24, capability, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_CAPBSET_DROP) failed")


def test_read_only_registry(registry: Registry) -> None:
    """The user who needs read-only mode: a registry they may not write, such as the seed library of an
    installation owned by root, or a team's registry on a read-only mount."""
    records = _three(registry)
    modes = {p: p.stat().st_mode for p in [registry.root, *registry.root.rglob("*")]}
    try:
        for path in modes:
            path.chmod(0o555 if path.is_dir() else 0o444)
        done = run_script(
            READ_ONLY,
            str(registry.root),
            preexec_fn=_without_root_file_access if os.geteuid() == 0 else None,
        )
    finally:
        for path, mode in modes.items():
            path.chmod(mode)
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == f"True {' '.join(r.env_id for r in records)} True"
    assert lines[1] == (
        f"refused: cannot add Gen7: the registry at {registry.root} is read-only for this process "
        "(copy it to a writable folder to change it)"
    )
    assert sorted(os.listdir(registry.root / "envs")) == sorted(r.env_id for r in records)


REBUILD = """
import sys
from test_registry import add
from spade_gym.registry import Registry

registry = Registry(sys.argv[1])
print(len(registry), add(registry, 5).env_id, flush=True)
"""


def test_an_open_registry_follows_an_index_another_process_rebuilt(registry: Registry) -> None:
    """The user who needs the reconnection: a trainer keeps its registry open while the user deletes a
    damaged ``index.sqlite`` and another process rebuilds it; what the trainer writes afterwards must
    reach the new index, and it must see what the other process added."""
    add(registry, 0)
    add(registry, 1)
    registry.sample(2)
    registry.index_path.unlink()
    done = run_script(REBUILD, str(registry.root))
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["2", "Gen5-v0"]
    assert "Gen5-v0" in registry
    add(registry, 2)
    drawn = registry.sample(4)
    reopened, caught = reopen(registry.root)
    assert caught == []  # nothing the trainer wrote went to the deleted file
    assert [r.env_id for r in reopened] == ["Gen0-v0", "Gen1-v0", "Gen5-v0", "Gen2-v0"]
    assert sum(r.stats.times_sampled for r in reopened) == len(drawn)  # the counts in the deleted file are gone


# ------------------------------------------------------------------------------------------------
# Processes: concurrent writers, killed writers
# ------------------------------------------------------------------------------------------------

WRITER = """
import sys
from test_registry import distinct_source
from spade_gym import EnvProgram
from spade_gym.registry import Registry

root, worker, count = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
registry = Registry(root)
print("ready", flush=True)
sys.stdin.readline()
for k in range(count):
    i = 1000 * worker + k
    record = registry.add(
        EnvProgram(distinct_source(i, "Race")), name="Race", setting="reasoning", max_turns=5, description=str(i)
    )
    print(record.env_id, flush=True)
"""


def start_writer(root: Path, worker: int, count: int) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(root), str(worker), str(count)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=script_env(),
        cwd=ROOT,
    )
    assert process.stdout is not None and process.stdout.readline() == "ready\n"
    return process


def test_two_processes_add_at_the_same_time(registry: Registry) -> None:
    writers = [start_writer(registry.root, worker, 20) for worker in (1, 2)]
    for writer in writers:  # both are ready; let them go together
        assert writer.stdin is not None
        writer.stdin.write("go\n")
        writer.stdin.flush()
    outputs = [writer.communicate(timeout=120)[0].split() for writer in writers]
    assert [writer.returncode for writer in writers] == [0, 0]
    ids = outputs[0] + outputs[1]
    assert len(ids) == 40 and len(set(ids)) == 40
    assert len(registry) == 40
    assert sorted(r.version for r in registry) == list(range(40))
    assert {r.env_id for r in registry} == set(ids)
    assert sorted(int(r.description) for r in registry) == sorted(1000 * w + k for w in (1, 2) for k in range(20))
    assert registry.problems() == []


MARKER = """
import sys, time
from spade_gym.registry import Registry

registry = Registry(sys.argv[1])
print("ready", flush=True)
sys.stdin.readline()
n, end = 0, time.monotonic() + float(sys.argv[2])
while time.monotonic() < end:
    n += len(registry.sample(1, strategy="replay", mark=True))
print(n, flush=True)
"""


@pytest.mark.parametrize("change", ["update_stats", "rebuild_index"])
def test_no_draw_is_lost_to_a_concurrent_change(registry: Registry, change: str) -> None:
    """One process marks draws while another updates statistics or rebuilds the index in place: every
    draw is counted (each change reads the counts in the transaction that writes them)."""
    for i in range(3):
        add(registry, i)
    marker = subprocess.Popen(
        [sys.executable, "-c", MARKER, str(registry.root), "3"],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert marker.stdin is not None and marker.stdout is not None and marker.stdout.readline() == "ready\n"
    marker.stdin.write("go\n")
    marker.stdin.flush()
    changes = 0
    while marker.poll() is None:
        if change == "update_stats":
            registry.update_stats(f"Gen{changes % 3}-v0", regret=0.1 * (changes % 7))
        else:
            registry.rebuild_index()
        changes += 1
        time.sleep(0.002)  # a tight loop of writes starves the marker's lock waits on a loaded machine
    draws = int(marker.communicate(timeout=60)[0])
    reopened, caught = reopen(registry.root)
    assert caught == [] and changes > 3 and draws > 3
    assert sum(r.stats.times_sampled for r in reopened) == draws


def test_an_environment_added_flagged_is_never_drawn(registry: Registry) -> None:
    """Handles already open (whose population catches up from the change log) and fresh ones agree."""
    add(registry, 0)
    add(registry, 1)
    assert len(registry.sample(5, mark=False)) == 5  # the population is cached
    add(Registry(registry.root), 2, tags=[FLAGGED_TAG])  # another handle
    add(registry, 3, tags=[FLAGGED_TAG])  # this one
    for handle in (registry, Registry(registry.root)):
        assert {r.env_id for r in handle.sample(200, mark=False)} == {"Gen0-v0", "Gen1-v0"}
        assert {r.env_id for r in handle.sample(20, mark=True)} == {"Gen0-v0", "Gen1-v0"}


#: Adds two environments, then SIGKILLs itself at a chosen point of the third add: the first C
#: function call named ``point`` (``write``, ``fsync``, ``rename``), the first call of any kind after
#: ``os.rename`` returned (``after_rename``: the folder is in place, the index does not know it), or
#: the third ``execute`` after it (``mid_transaction``: inside the index insert's transaction).
KILL_AT = """
import os, signal, sys
from test_registry import distinct_source
from spade_gym import EnvProgram
from spade_gym.registry import Registry

root, point, first = sys.argv[1], sys.argv[2], int(sys.argv[3])
registry = Registry(root)

def add(i):
    program = EnvProgram(distinct_source(i, "Crash"))
    return registry.add(program, name="Crash", setting="reasoning", max_turns=5, description=str(i))

for i in range(first, first + 2):
    print(add(i).env_id, flush=True)
after_rename = []

def profile(frame, event, arg):
    name = getattr(arg, "__name__", "")
    if event == "c_return" and name == "rename":
        after_rename.append(name)
    elif event == "c_call":
        if after_rename:
            after_rename.append(name)
        hit = name == point
        hit |= point == "after_rename" and len(after_rename) > 1
        hit |= point == "mid_transaction" and after_rename.count("execute") == 3
        if hit:
            os.kill(os.getpid(), signal.SIGKILL)

sys.setprofile(profile)
add(first + 2)
print("not killed", flush=True)
"""


@pytest.mark.parametrize(
    ("point", "third_present"),
    [("write", False), ("fsync", False), ("rename", False), ("after_rename", True), ("mid_transaction", True)],
)
def test_writer_killed_at_each_step_of_an_add(registry: Registry, point: str, third_present: bool) -> None:
    add(registry, 0)
    done = run_script(KILL_AT, str(registry.root), point, "100")
    assert done.returncode == -signal.SIGKILL, done.stderr
    assert done.stdout.split() == ["Crash-v0", "Crash-v1"]
    leftovers = list((registry.root / ".tmp").iterdir())
    assert bool(leftovers) == (point in ("write", "fsync", "rename"))
    reopened, caught = reopen(registry.root)
    expected = ["Gen0-v0", "Crash-v0", "Crash-v1"] + (["Crash-v2"] if third_present else [])
    assert [r.env_id for r in reopened] == expected
    if third_present:  # the folder was complete: the open indexes it
        assert caught == [
            f"spade_gym registry {registry.root}: index.sqlite lists 3 environment folder(s) but envs/ holds 4; "
            "re-indexed 1 new, 0 changed and 0 removed folder(s)"
        ]
        assert reopened.get("Crash-v2").program().source == distinct_source(102, "Crash")
    else:
        assert caught == []
    assert reopened.problems() == []
    assert list((registry.root / ".tmp").iterdir()) == []
    assert sorted(os.listdir(registry.root / "envs")) == sorted(expected)
    assert add(reopened, 1, name="Crash").env_id == ("Crash-v3" if third_present else "Crash-v2")


def test_writer_killed_mid_add_loses_nothing(registry: Registry) -> None:
    rng = random.Random(1234)
    accepted: list[str] = []
    for worker in range(1, 4):
        writer = start_writer(registry.root, worker, 10_000)
        assert writer.stdin is not None and writer.stdout is not None
        writer.stdin.write("go\n")
        writer.stdin.flush()
        for _ in range(rng.randint(1, 4)):  # some adds return; then kill during a later one
            accepted.append(writer.stdout.readline().strip())
        time.sleep(rng.uniform(0.0, 0.03))  # an add takes about 10-30 ms: land anywhere in one
        os.kill(writer.pid, signal.SIGKILL)
        writer.wait(timeout=30)
        accepted += [line for line in writer.stdout.read().split() if line]  # printed before the kill
        writer.stdin.close()
        writer.stdout.close()
        reopened, _ = reopen(registry.root)
        ids = {r.env_id for r in reopened}
        assert set(accepted) <= ids
        assert reopened.problems() == []  # no partial entry is visible
        for record in reopened:
            assert record.program().id == record.program_id
        assert list((registry.root / ".tmp").iterdir()) == []
        assert sorted(os.listdir(registry.root / "envs")) == sorted(ids)
        reopened.close()


# ------------------------------------------------------------------------------------------------
# Replay sampling: the distribution, exactly
# ------------------------------------------------------------------------------------------------


def test_replay_probabilities_rank_prioritisation() -> None:
    no_staleness = ReplayConfig(beta=1.0, rho=0.0)
    # ranks 1, 3, 2 -> h = 1, 1/3, 1/2 (sum 11/6)
    p = replay_probabilities([0.3, 0.1, 0.2], [0, 0, 0], 0, no_staleness)
    np.testing.assert_allclose(p, [6 / 11, 2 / 11, 3 / 11], rtol=1e-12)
    # ties share the best rank: ranks 1, 1, 3; beta 0.5 -> h^2 = 1, 1, 1/9 (sum 19/9)
    p = replay_probabilities([0.5, 0.5, 0.1], [0, 0, 0], 0, ReplayConfig(beta=0.5, rho=0.0))
    np.testing.assert_allclose(p, [9 / 19, 9 / 19, 1 / 19], rtol=1e-12)
    assert competition_ranks([0.9, 0.5, 0.5, 0.1]).tolist() == [1, 2, 2, 4]
    # defaults beta = 0.1, rho = 0.1: ranks 1, 2 -> 1, 2^-10; nothing sampled yet -> P_C uniform
    p = replay_probabilities([0.2, 0.1], [0, 0], 0)
    np.testing.assert_allclose(p, [0.9 * 1024 / 1025 + 0.05, 0.9 * 1 / 1025 + 0.05], rtol=1e-12)


def test_replay_probabilities_unmeasured_environments() -> None:
    # unmeasured first (default): ranks 1, 3, 1 -> 1, 1/3, 1 (sum 7/3)
    p = replay_probabilities([None, 0.9, math.nan], [0, 0, 0], 0, ReplayConfig(beta=1.0, rho=0.0))
    np.testing.assert_allclose(p, [3 / 7, 1 / 7, 3 / 7], rtol=1e-12)
    # unmeasured last: ranks 2, 1, 2 -> 1/2, 1, 1/2 (sum 2)
    p = replay_probabilities([None, 0.9, None], [0, 0, 0], 0, ReplayConfig(beta=1.0, rho=0.0, unmeasured_first=False))
    np.testing.assert_allclose(p, [0.25, 0.5, 0.25], rtol=1e-12)


def test_replay_probabilities_staleness_and_mixture() -> None:
    # c = 4, C = 1, 3, 0 -> staleness 3, 1, 4 (sum 8)
    p = replay_probabilities([0.3, 0.1, 0.2], [1, 3, None], 4, ReplayConfig(beta=1.0, rho=1.0))
    np.testing.assert_allclose(p, [3 / 8, 1 / 8, 4 / 8], rtol=1e-12)
    p = replay_probabilities([0.3, 0.1, 0.2], [1, 3, 0], 4, ReplayConfig(beta=1.0, rho=0.25))
    expected = 0.75 * np.array([6 / 11, 2 / 11, 3 / 11]) + 0.25 * np.array([3 / 8, 1 / 8, 4 / 8])
    np.testing.assert_allclose(p, expected, rtol=1e-12)
    assert p.sum() == pytest.approx(1.0, abs=1e-12)


def test_replay_probabilities_degenerate_cases() -> None:
    # every C_i == c: all equally stale -> P_C uniform
    p = replay_probabilities([0.3, 0.1, 0.2], [5, 5, 5], 5, ReplayConfig(beta=1.0, rho=0.5))
    np.testing.assert_allclose(p, 0.5 * np.array([6 / 11, 2 / 11, 3 / 11]) + 0.5 / 3, rtol=1e-12)
    # n == 1
    for scores, last, counter in (([0.7], [3], 3), ([None], [0], 0), ([0.0], [1], 9)):
        assert replay_probabilities(scores, last, counter).tolist() == [1.0]
    assert replay_probabilities([], [], 0).size == 0
    # all scores equal and all equally stale: uniform
    np.testing.assert_allclose(replay_probabilities([0.2] * 4, [0] * 4, 0), [0.25] * 4, rtol=1e-12)
    # tiny beta: no underflow to an all-zero distribution
    p = replay_probabilities(list(np.linspace(0, 1, 1000)), [0] * 1000, 0, ReplayConfig(beta=1e-3, rho=0.0))
    assert p[-1] == 1.0 and p.sum() == 1.0


def test_replay_probabilities_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match=r"last_sampled values must lie in \[0, counter=2\]; got min 0, max 3"):
        replay_probabilities([0.1, 0.2], [0, 3], 2)
    with pytest.raises(ValueError, match="2 scores but 3 last_sampled values"):
        replay_probabilities([0.1, 0.2], [0, 0, 0], 0)
    with pytest.raises(ValueError, match=r"ReplayConfig.beta = 0; expected a finite number > 0"):
        ReplayConfig(beta=0)
    with pytest.raises(ValueError, match=r"ReplayConfig.rho = 1.5; expected a number in \[0, 1\]"):
        ReplayConfig(rho=1.5)


def test_sampler_incremental_updates_match_a_fresh_computation() -> None:
    rng = np.random.default_rng(7)
    values = [None, 0.0, 0.1, 0.25, 0.5, 0.9]  # few values: many ties
    n = 40
    for unmeasured_first in (True, False):
        config = ReplayConfig(beta=0.3, rho=0.2, unmeasured_first=unmeasured_first)
        scores = [values[k] for k in rng.integers(len(values), size=n)]
        sampler = ReplaySampler(scores, [0] * n, 0, config)
        for step in range(300):
            action = rng.integers(3)
            if action == 0:
                i = int(rng.integers(len(sampler)))
                new = values[int(rng.integers(len(values)))]
                sampler.set_score(i, new)
                scores[i] = new
            elif action == 1:
                value = values[int(rng.integers(len(values)))]
                sampler.append(value, None)
                scores.append(value)
            else:
                sampler.draw(rng, "replay", mark=True)
            expected = replay_probabilities(scores, sampler.last_sampled, sampler.counter, config)
            np.testing.assert_allclose(sampler.probabilities(), expected, rtol=1e-9, err_msg=f"step {step}")
            assert sampler.ranks().tolist() == competition_ranks(scores, unmeasured_first).tolist()


# ------------------------------------------------------------------------------------------------
# Registry.sample
# ------------------------------------------------------------------------------------------------

#: Pearson chi-square critical value at significance 0.001 for 5 degrees of freedom.
CHI2_CRIT_DF5 = 20.515


def _chi_square(counts: np.ndarray, probabilities: np.ndarray) -> float:
    expected = probabilities * counts.sum()
    return float(((counts - expected) ** 2 / expected).sum())


def test_sample_frequencies_follow_replay_probabilities(registry: Registry) -> None:
    regrets = [0.5, 0.2, 0.2, None, 0.0, 0.9]
    last = [3, None, 7, 0, 5, 7]
    for i, (regret, c) in enumerate(zip(regrets, last, strict=True)):
        add(registry, i, stats=EnvStats(regret=regret, last_sampled=c, times_sampled=0 if c is None else 1))
    records = list(registry)
    config = ReplayConfig(beta=0.5, rho=0.3)
    expected = replay_probabilities(
        [r.stats.regret for r in records], [r.stats.last_sampled for r in records], max(c or 0 for c in last), config
    )
    draws = 30_000
    got = registry.sample(draws, strategy="replay", mark=False, config=config, rng=np.random.default_rng(42))
    index = {r.env_id: k for k, r in enumerate(records)}
    counts = np.bincount([index[r.env_id] for r in got], minlength=len(records)).astype(float)
    assert _chi_square(counts, expected) < CHI2_CRIT_DF5
    tolerance = 5 * np.sqrt(expected * (1 - expected) / draws)
    assert np.all(np.abs(counts / draws - expected) < tolerance)
    # one draw at a time (the O(log N) path) follows the same distribution
    rng = np.random.default_rng(43)
    singles = [registry.sample(1, strategy="replay", mark=False, config=config, rng=rng)[0] for _ in range(3000)]
    counts = np.bincount([index[r.env_id] for r in singles], minlength=len(records)).astype(float)
    assert _chi_square(counts, expected) < CHI2_CRIT_DF5
    # uniform
    got = registry.sample(draws, strategy="uniform", mark=False, rng=np.random.default_rng(44))
    counts = np.bincount([index[r.env_id] for r in got], minlength=len(records)).astype(float)
    assert _chi_square(counts, np.full(len(records), 1 / len(records))) < CHI2_CRIT_DF5
    assert all(r.stats.times_sampled == (0 if c is None else 1) for r, c in zip(registry, last, strict=True))


def test_marked_samples_update_staleness(registry: Registry) -> None:
    add(registry, 0)
    add(registry, 1)
    staleness_only = ReplayConfig(rho=1.0)
    rng = np.random.default_rng(0)
    drawn = [r.env_id for r in registry.sample(10, strategy="replay", config=staleness_only, rng=rng)]
    # with two environments and only staleness, each draw makes the other one the only stale one
    assert all(a != b for a, b in zip(drawn, drawn[1:], strict=False))
    stats = {r.env_id: r.stats for r in registry}
    assert sorted(s.times_sampled for s in stats.values()) == [5, 5]
    assert sorted(s.last_sampled or 0 for s in stats.values()) == [9, 10]
    # marks persist: another instance continues the alternation
    again = Registry(registry.root)
    nxt = again.sample(1, strategy="replay", config=staleness_only, rng=rng)[0]
    assert nxt.env_id != drawn[-1] and nxt.stats.last_sampled == 11 and nxt.stats.times_sampled == 6


def test_sample_sees_changes_from_other_instances(registry: Registry) -> None:
    for i in range(5):
        add(registry, i, stats=EnvStats(regret=0.1 * i))
    greedy = ReplayConfig(beta=0.01, rho=0.0)  # almost all mass on rank 1
    rng = np.random.default_rng(0)
    assert {r.env_id for r in registry.sample(20, strategy="replay", config=greedy, rng=rng)} == {"Gen4-v0"}
    other = Registry(registry.root)
    other.update_stats("Gen1-v0", regret=0.95)
    assert {r.env_id for r in registry.sample(20, strategy="replay", config=greedy, rng=rng)} == {"Gen1-v0"}
    add(other, 7)  # a new, unmeasured environment ranks first
    assert {r.env_id for r in registry.sample(20, strategy="replay", config=greedy, rng=rng)} == {"Gen7-v0"}
    other.update_stats("Gen7-v0", regret=0.0)
    assert {r.env_id for r in registry.sample(5, strategy="replay", config=greedy, rng=rng)} == {"Gen1-v0"}
    assert registry.get("Gen1-v0").stats.times_sampled == 25


def test_a_population_kept_in_step_with_the_change_log_equals_a_fresh_one(registry: Registry) -> None:
    """``Population.current`` replays adds, statistics and marks from the change log (in place, not
    reread) and ends where reading the index afresh does, for every setting and for all."""
    rng = random.Random(5)
    index = Index(registry.index_path, signature=SIGNATURE_VERSION)
    config = ReplayConfig(beta=0.3, rho=0.2)
    pops: dict[str | None, Population | None] = {None: None, "game": None, "reasoning": None}
    for step in range(60):
        ids = [r.env_id for r in registry]
        op = rng.random()
        if op < 0.3 or not ids:
            add(registry, step, setting=rng.choice(["game", "reasoning"]))
        elif op < 0.6:
            registry.update_stats(rng.choice(ids), regret=rng.choice([None, rng.random()]))
        else:
            registry.sample(rng.randint(1, 3), strategy="replay", rng=np.random.default_rng(step))
        state = index.state()
        for setting, cached in pops.items():
            pop = pops[setting] = Population.current(cached, index, setting, state, config)
            assert cached is None or pop is cached  # caught up in place
            fresh = Population.current(None, index, setting, state, config)
            assert pop.seqs.tolist() == fresh.seqs.tolist() and pop.gen == fresh.gen == state.gen
            np.testing.assert_array_equal(pop.sampler.scores, fresh.sampler.scores)
            assert pop.sampler.last_sampled.tolist() == fresh.sampler.last_sampled.tolist()
            assert pop.sampler.ranks().tolist() == fresh.sampler.ranks().tolist()
            assert pop.sampler.probabilities().tolist() == fresh.sampler.probabilities().tolist()
    assert len(pops[None].sampler) == len(registry) > 10  # type: ignore[union-attr]
    index.close()


def test_sample_by_setting_and_errors(registry: Registry) -> None:
    with pytest.raises(RegistryError, match="no environment to sample in the registry at"):
        registry.sample()
    add(registry, 0, setting="game")
    add(registry, 1, setting="reasoning")
    assert {r.env_id for r in registry.sample(30, setting="game", mark=False)} == {"Gen0-v0"}
    with pytest.raises(RegistryError, match="no environment with setting 'tool_use' to sample"):
        registry.sample(setting="tool_use")
    with pytest.raises(ValueError, match=r"sampling strategy 'plr'; expected one of \('uniform', 'replay'\)"):
        registry.sample(strategy="plr")
    with pytest.raises(ValueError, match="n = -1; expected an int >= 0"):
        registry.sample(-1)
    assert registry.sample(0) == []
