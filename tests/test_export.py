"""``spade export`` and ``spade envs import``: rollouts, registries and designs as JSONL files and
dataset folders, read back with Hugging Face ``datasets``; registries round-trip through the
validation gate with the real sandbox and registries on disk."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium
import pytest
from doubles import ScriptedPolicy, by_turn
from integration_helpers import register_hostile_envs
from programs import program
from typer.testing import CliRunner

from spade_gym import export
from spade_gym.agent import Episode, rollout
from spade_gym.cli import app
from spade_gym.program import EnvProgram
from spade_gym.registry.gymnasium import open_registry
from spade_gym.registry.records import EnvRecord

ARITH = "spade/ArithmeticChain-v0"


@pytest.fixture(autouse=True)
def gymnasium_ids() -> Iterator[None]:
    """Registries in tmp_path register their environments over the bundled ids: put those back."""
    saved = dict(gymnasium.registry)
    yield
    gymnasium.registry.clear()
    gymnasium.registry.update(saved)


def test_rollouts_are_written_as_played_and_read_back_by_datasets(tmp_path: Path) -> None:
    datasets = pytest.importorskip("datasets")
    crash = register_hostile_envs()["crash_step"]
    episodes = [Episode(ARITH, 3), Episode(ARITH, 4, hint=True), Episode(crash, 0)]
    trajectories, _ = rollout(
        episodes, ScriptedPolicy(by_turn(["<answer>12</answer>", "garbage", "<answer>b</answer>"]))
    )
    rows = export.rollout_rows(trajectories)
    path = export.write_rows(rows, tmp_path / "rollouts", name="rollouts", about="three episodes")
    assert path == tmp_path / "rollouts" / "rollouts.jsonl" and export.read_rows(tmp_path / "rollouts") == rows
    loaded = datasets.load_dataset(str(tmp_path / "rollouts"), split="train")
    assert loaded.num_rows == 3 and loaded[0]["messages"] == rows[0]["messages"]
    for row, t in zip(loaded, trajectories, strict=True):
        assert (row["env_id"], row["seed"], row["hint"]) == (t.env_id, t.seed, t.hint)
        assert row["rewards"] == t.rewards and row["episode_return"] == t.episode_return
        assert row["actions"] == [turn.action for turn in t.turns] and row["turns"] == t.num_turns
        assert row["messages"][0]["role"] == "system" and row["messages"][1]["content"].startswith(
            t.messages[1]["content"]
        )
        assert [m["role"] for m in row["messages"][1:]] == ["user", "assistant"] * t.num_turns + ["user"] * (
            len(row["messages"]) - 1 - 2 * t.num_turns
        )
    assert "Hint: " in rows[1]["messages"][1]["content"] and rows[1]["actions"][1] == "garbage"
    assert rows[2]["rewards"] == [0.5, 0.0] and rows[2]["episode_return"] == 0.0
    assert json.loads(rows[2]["error"])["category"] == "ENV_EXCEPTION" and rows[0]["error"] is None
    export.write_rows(rows[2:], tmp_path / "rollouts", name="rollouts", about="written again")
    assert datasets.load_dataset(str(tmp_path / "rollouts"), split="train")["env_id"] == [crash]  # not a stale cache
    single = export.write_rows(rows[:1], tmp_path / "one.jsonl", name="rollouts", about="")
    assert single == tmp_path / "one.jsonl" and not (tmp_path / "README.md").exists()


def test_a_registry_round_trips_through_a_dataset_folder(tmp_path: Path) -> None:
    source = open_registry(tmp_path / "a", include_tags=["graded"])
    source.update_stats("CountListItems-v0", episodes=8, mean_return_hint=0.5, mean_return_nohint=0.25, regret=0.25)
    source.sample(3, mark=True)
    rows = export.registry_rows(source)
    export.write_rows(rows, tmp_path / "pool", name="environments", about="five graded seeds")
    target = open_registry(tmp_path / "b", seed_library=False)
    outcomes = export.import_registry(tmp_path / "pool", target)
    assert [o.status for o in outcomes] == ["added"] * 5
    for before in source:
        after = target.get(before.env_id)
        assert after.program_id == before.program_id and after.tags == before.tags and after.setting == before.setting
        assert after.stats.regret == before.stats.regret and after.stats.times_sampled == 0
        assert after.validation is not None and after.validation["accepted"]  # the gate ran here
        assert gymnasium.registry[after.gym_id].kwargs["program"] == str(after.source_path)
    env = gymnasium.make("spade/CountListItems-v0")
    env.reset(seed=0)
    env.close()
    again = export.import_registry(rows, target)
    assert [o.status for o in again] == ["duplicate"] * 5 and "exact duplicate" in again[0].message


def meta_row(source: str, name: str) -> dict[str, Any]:
    """A row as registry_rows writes it, for a program that was never registered."""
    meta = EnvRecord(name + "-v0", name, 0, EnvProgram(source).id, "reasoning", 5, "", (), Path("."), 0, None, (), None)
    return {"env_id": meta.env_id, "program": source, "meta": json.dumps(meta.to_meta())}


def test_import_refuses_tampered_and_hostile_rows(tmp_path: Path) -> None:
    infeasible = program(step="return 'no', 0.0, True, False, {}", name="NeverWins")  # its oracle never succeeds
    rows = [meta_row(infeasible, "NeverWins"), meta_row(program(preamble="import os", name="Hostile"), "Hostile")]
    tampered = {**rows[0], "program": rows[0]["program"].replace("'no'", "'yes'")}  # code edited after export
    target = open_registry(tmp_path / "t", seed_library=False)
    gated = export.import_registry([*rows, tampered, {"env_id": "X-v0"}], target)
    assert [o.status for o in gated] == ["refused"] * 4
    assert "feasibility" in gated[0].message and "os" in gated[1].message
    assert "not the one its meta names" in gated[2].message and "malformed" in gated[3].message
    trusted = export.import_registry(rows, target, validate=False)  # the static check still runs
    assert [o.status for o in trusted] == ["added", "refused"] and len(target) == 1


def test_import_refuses_hostile_files_before_adding_anything(tmp_path: Path) -> None:
    good = meta_row(program(name="Fine"), "Fine")
    target = open_registry(tmp_path / "t", seed_library=False)
    cases = {
        "long": ('{"x": 1}\n{"x": "' + "y" * 200 + '"}\n', "longer than 100 bytes"),
        "deep": (json.dumps(good) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n", "is not JSON"),
        "list": (json.dumps(good) + "\n[1]\n", "a JSON list, not an object"),
    }
    for name, (text, message) in cases.items():
        (tmp_path / f"{name}.jsonl").write_text(text)
        with pytest.raises(ValueError, match=f"{name}.jsonl:2 .*{message}"):
            list(export.iter_rows(tmp_path / f"{name}.jsonl", max_row_bytes=100 if name == "long" else 2**20))
        if name != "long":
            with pytest.raises(ValueError, match=f"{name}.jsonl:2"):
                export.import_registry(tmp_path / f"{name}.jsonl", target, validate=False)
    assert len(target) == 0  # the good first row of a bad file was not added
    huge = tmp_path / "huge.jsonl"
    with open(huge, "w") as fh:  # a row past MAX_ROW_BYTES is refused without being read into memory
        fh.write('{"program": "' + "#" * (export.MAX_ROW_BYTES + 10) + '"}\n')
    with pytest.raises(ValueError, match="huge.jsonl:1 is longer than 8,388,608 bytes"):
        export.import_registry(huge, target)
    meta = json.loads(good["meta"])
    hostile = [
        {**good, "meta": json.dumps({**meta, "name": "../../Evil", "env_id": "../../Evil-v0"})},
        {**good, "meta": json.dumps({**meta, "max_turns": 10**9})},
        {**good, "meta": json.dumps({**meta, "description": "d" * 200_000})},
    ]
    outcomes = export.import_registry(hostile, target, validate=False)
    assert [o.status for o in outcomes] == ["refused"] * 3 and len(target) == 0
    assert [p.name for p in tmp_path.iterdir() if p.name == "Evil"] == []


def test_designs_become_designer_sft_data(tmp_path: Path) -> None:
    prompt = [{"role": "system", "content": "You write environments."}, {"role": "user", "content": "Document: ..."}]
    lines = [
        {
            "iteration": 0,
            "mode": "write",
            "setting": "game",
            "messages": prompt,
            "completion": "```python\nA\n```",
            "reward": 0.4,
            "env_id": "A-v0",
        },
        {
            "iteration": 0,
            "mode": "write",
            "setting": "game",
            "messages": prompt,
            "completion": "no code",
            "reward": -1.0,
            "env_id": None,
        },
        {
            "iteration": 1,
            "mode": "edit",
            "setting": "game",
            "messages": prompt,
            "completion": "<<<<<<< SEARCH",
            "reward": 0.0,
            "env_id": "A-v1",
        },
        {"iteration": 1, "mode": "write", "setting": "game", "completion": "old line", "reward": 0.5, "env_id": "B-v0"},
    ]
    run = tmp_path / "run"
    run.mkdir()
    (run / "designs.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    rows, skipped = export.designer_sft_rows(run)
    assert [r["env_id"] for r in rows] == ["A-v0", "A-v1"]
    assert rows[0]["messages"] == [*prompt, {"role": "assistant", "content": "```python\nA\n```"}]
    assert skipped == {"not accepted": 1, "below min_reward": 0, "no prompt recorded": 1, "completion cut": 0}
    rows, skipped = export.designer_sft_rows(run / "designs.jsonl", min_reward=0.1)
    assert [r["env_id"] for r in rows] == ["A-v0"] and skipped["below min_reward"] == 1
    result = CliRunner().invoke(app, ["export", "designs", str(run), "--out", str(tmp_path / "sft")])
    assert result.exit_code == 0, result.output
    assert "wrote 2 design(s)" in result.output and "1 not accepted, 1 no prompt recorded" in result.output
    assert export.read_rows(tmp_path / "sft")[1]["mode"] == "edit"


def test_the_commands_export_and_import_a_registry(tmp_path: Path) -> None:
    open_registry(tmp_path / "a", include_tags=["graded"]).close()
    runner = CliRunner()
    result = runner.invoke(app, ["export", "registry", "-r", str(tmp_path / "a"), "-o", str(tmp_path / "pool")])
    assert result.exit_code == 0 and "wrote 5 environment(s)" in result.output, result.output
    result = runner.invoke(app, ["envs", "import", str(tmp_path / "pool"), "-r", str(tmp_path / "b")])
    assert result.exit_code == 0 and "added 5 of 5" in result.output, result.output
    result = runner.invoke(app, ["envs", "import", str(tmp_path / "nowhere"), "-r", str(tmp_path / "b")])
    assert result.exit_code == 2 and "neither a .jsonl file nor a dataset folder" in result.output


@pytest.mark.slow
def test_spade_export_rollouts_with_the_embedded_model(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["export", "rollouts", ARITH, "--seeds", "2", "-o", str(tmp_path / "r.jsonl"), "-p", "default"]
    )
    assert result.exit_code == 0, result.output
    rows = export.read_rows(tmp_path / "r.jsonl")
    assert [(r["env_id"], r["seed"]) for r in rows] == [(ARITH, 0), (ARITH, 1)]
    assert all(r["turns"] >= 1 and len(r["rewards"]) == r["turns"] for r in rows)


def test_the_docs_example_reads_exported_rollouts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    pytest.importorskip("datasets")
    from readme import readme_example

    monkeypatch.chdir(tmp_path)
    trajectories, _ = rollout([Episode(ARITH, 5)], ScriptedPolicy("<answer>7</answer>"))
    export.write_rows(export.rollout_rows(trajectories), "runs/rollouts", name="rollouts", about="")
    exec(compile(readme_example("## Export", doc="docs/serving.md"), "docs/serving.md", "exec"), {})  # noqa: S102
    assert capsys.readouterr().out.split()[:3] == [ARITH, "5", "0.0"]
