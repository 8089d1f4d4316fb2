"""The run folder: layout, create/refuse/open, metrics (torn lines, TensorBoard), atomic checkpoints
with keep-N, RNG round trips, resumption after a kill at every step of an iteration (exactly the
same metrics as an unkilled run), and the plots (real matplotlib PNGs)."""

from __future__ import annotations

import json
import random
import sys
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

from spade_gym.trainer.config import ConfigError, SelfPlayConfig
from spade_gym.trainer.plot import PLOTS, plot_run
from spade_gym.trainer.run import (
    Checkpoint,
    RunDir,
    RunDirError,
    capture_rng_state,
    read_metrics,
    restore_rng_state,
)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def quiet_config(**run: Any) -> SelfPlayConfig:
    """The default config without TensorBoard (faster; TensorBoard has its own tests)."""
    return SelfPlayConfig().with_overrides(["run.tensorboard=false", *(f"run.{k}={v}" for k, v in run.items())])


@pytest.fixture()
def run(tmp_path: Path) -> RunDir:
    return RunDir.create(tmp_path / "run", quiet_config())


# ------------------------------------------------------------------------------------------------
# Create / open
# ------------------------------------------------------------------------------------------------


def test_create_lays_out_the_folder_and_writes_a_strict_config(tmp_path: Path) -> None:
    config = quiet_config().with_overrides(["train.learning_rate=3e-6", "run.out=elsewhere"])
    path = tmp_path / "a" / "run"
    run = RunDir.create(path, config)
    for name in ("registry", "checkpoints", "plots"):
        assert (path / name).is_dir()
    assert run.config.run.out == str(path)  # the folder it is in, whatever run.out said
    back = SelfPlayConfig.from_yaml(path / "config.yaml")
    assert back == run.config and back.train.learning_rate == 3e-6
    assert RunDir.open(path).config == run.config


def test_create_accepts_an_empty_folder_and_refuses_a_used_one(tmp_path: Path) -> None:
    (tmp_path / "empty").mkdir()
    RunDir.create(tmp_path / "empty", quiet_config())
    with pytest.raises(RunDirError, match=r"already exists and is not empty; continue it with `spade resume"):
        RunDir.create(tmp_path / "empty", quiet_config())
    (tmp_path / "file").write_text("x")
    with pytest.raises(RunDirError, match="is a file"):
        RunDir.create(tmp_path / "file", quiet_config())
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("x")
    with pytest.raises(RunDirError, match="not empty"):
        RunDir.create(tmp_path / "other", quiet_config())


def test_create_with_resume_opens_the_same_run_and_refuses_another_config(tmp_path: Path) -> None:
    path = tmp_path / "run"
    RunDir.create(path, quiet_config())
    assert RunDir.create(path, quiet_config(), resume=True).config == RunDir.open(path).config
    with pytest.raises(RunDirError, match=r"another config \(run.iterations: 3 -> 9\)"):
        RunDir.create(path, quiet_config(iterations=9), resume=True)


def test_create_validates_the_config(tmp_path: Path) -> None:
    config = SelfPlayConfig()
    config.run.iterations = 0
    with pytest.raises(ConfigError, match="run.iterations"):
        RunDir.create(tmp_path / "run", config)
    assert not (tmp_path / "run").exists()


def test_open_needs_a_valid_run_folder(tmp_path: Path) -> None:
    with pytest.raises(RunDirError, match="is not a run folder"):
        RunDir.open(tmp_path)
    (tmp_path / "config.yaml").write_text("train:\n  learning_rate: 1e-5\n  lr_warmup: 3\n")
    with pytest.raises(ConfigError, match=r"config.yaml: unknown config key 'train.lr_warmup'") as info:
        RunDir.open(tmp_path)
    assert info.value.key == "train.lr_warmup"


def test_a_run_folder_of_an_older_version_opens_without_its_retired_keys(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run", quiet_config())
    saved = run.path / "config.yaml"
    saved.write_text(saved.read_text().replace("designer:\n", "designer:\n  repair_rounds: 0\n", 1))
    assert RunDir.open(run.path).config == run.config  # `spade resume` of a run written before the key went
    saved.write_text(saved.read_text().replace("repair_rounds: 0", "repair_rounds: 2"))
    with pytest.raises(ConfigError, match="unknown config key 'designer.repair_rounds'"):
        RunDir.open(run.path)  # a value the old key never allowed in self-play is not silently dropped
    with pytest.raises(ConfigError, match="unknown config key 'designer.repair_rounds'"):
        SelfPlayConfig.from_dict({"designer": {"repair_rounds": 0}})  # a user's config file: refused


# ------------------------------------------------------------------------------------------------
# Metrics
# ------------------------------------------------------------------------------------------------


def test_log_and_read_metrics(run: RunDir) -> None:
    record = run.log_metrics(
        0,
        {
            "regret/mean": np.float32(0.25),
            "nan": float("nan"),
            "inf": float("inf"),
            "n": np.int64(3),
            "designer/rejections": {"static": 2},
            "t": torch.tensor(1.5),
            "v": np.array([1, 2]),
        },
    )
    assert record["iteration"] == 0 and isinstance(record["wall_time"], float)
    run.log_metrics(1, {"regret/mean": 0.5})
    lines = run.metrics_path.read_text().splitlines()
    assert len(lines) == 2
    first = json.loads(lines[0])  # standard JSON: NaN and infinities became null
    assert "NaN" not in lines[0] and "Infinity" not in lines[0]
    assert first["nan"] is None and first["inf"] is None
    assert first["regret/mean"] == 0.25 and first["n"] == 3 and first["t"] == 1.5 and first["v"] == [1, 2]
    assert first["designer/rejections"] == {"static": 2}
    assert [r["iteration"] for r in run.read_metrics()] == [0, 1]


def test_log_metrics_refuses_reserved_keys_and_non_json(run: RunDir) -> None:
    with pytest.raises(RunDirError, match="iteration"):
        run.log_metrics(0, {"iteration": 3})
    with pytest.raises(RunDirError, match=r"metrics.designer.bad = .*is not JSON data"):
        run.log_metrics(0, {"designer": {"bad": object()}})
    with pytest.raises(ValueError, match="iteration must be an int >= 0"):
        run.log_metrics(-1, {})
    assert run.read_metrics() == []


def test_a_torn_last_line_is_dropped_and_the_next_line_starts_clean(run: RunDir) -> None:
    run.log_metrics(0, {"x": 0.0})
    run.log_metrics(1, {"x": 1.0})
    with open(run.metrics_path, "ab") as fh:
        fh.write(b'{"iteration": 2, "x": 0.')  # the run was killed mid-write
    with pytest.warns(RuntimeWarning, match="torn last line"):
        records = run.read_metrics()
    assert [r["iteration"] for r in records] == [0, 1]

    reopened = RunDir.open(run.path)  # a later process appends
    with pytest.warns(RuntimeWarning, match="dropping a torn last line"):
        reopened.log_metrics(2, {"x": 2.0})
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert [r["x"] for r in reopened.read_metrics()] == [0.0, 1.0, 2.0]


def test_a_bad_middle_line_is_skipped_and_a_repeated_iteration_wins(tmp_path: Path) -> None:
    path = tmp_path / "metrics.jsonl"
    path.write_text(
        '{"iteration": 0, "x": 0}\nnot json\n{"iteration": 1, "x": 1}\n{"iteration": 2, "x": 2}\n'
        '{"iteration": 1, "x": 10}\n{"iteration": 2, "x": 20}\n'
    )
    with pytest.warns(RuntimeWarning, match="line 2"):
        records = read_metrics(path)
    assert [(r["iteration"], r["x"]) for r in records] == [(0, 0), (1, 10), (2, 20)]
    assert read_metrics(tmp_path / "missing.jsonl") == []


def test_tensorboard_events(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run", SelfPlayConfig())
    with run:
        run.log_metrics(0, {"regret/mean": 0.1, "designer": {"rejections": {"static": 2}}, "label": "x"})
    events = list((tmp_path / "run" / "tb").glob("events.out.tfevents.*"))
    assert len(events) == 1 and events[0].stat().st_size > 0

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    acc = EventAccumulator(str(tmp_path / "run" / "tb"))
    acc.Reload()
    assert set(acc.Tags()["scalars"]) == {"regret/mean", "designer/rejections/static"}


def test_tensorboard_missing_warns_once(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # import fails as if not installed
    run = RunDir.create(tmp_path / "run", SelfPlayConfig())
    with pytest.warns(RuntimeWarning, match="TensorBoard events are not written") as record:
        run.log_metrics(0, {"x": 1.0})
        run.log_metrics(1, {"x": 2.0})
    assert len([w for w in record if "TensorBoard" in str(w.message)]) == 1
    assert len(run.read_metrics()) == 2
    assert not (tmp_path / "run" / "tb").exists()


# ------------------------------------------------------------------------------------------------
# RNG state
# ------------------------------------------------------------------------------------------------


def draws(gens: dict[str, Any]) -> list[Any]:
    return [
        random.random(),
        float(np.random.rand()),
        np.random.randn(3).tolist(),  # exercises numpy's cached gaussian
        torch.rand(3).tolist(),
        gens["py"].random(),
        gens["np"].random(2).tolist(),
        torch.rand(2, generator=gens["torch"]).tolist(),
    ]


def test_rng_round_trip_through_json() -> None:
    gens = {"py": random.Random(1), "np": np.random.default_rng(2), "torch": torch.Generator().manual_seed(3)}
    draws(gens)
    state = json.loads(json.dumps(capture_rng_state(gens)))  # what a checkpoint stores
    expected = draws(gens)
    draws(gens)  # move everything on
    restore_rng_state(state, gens)
    assert draws(gens) == expected


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_cuda_rng_round_trip() -> None:
    torch.rand(1, device="cuda")
    state = json.loads(json.dumps(capture_rng_state()))
    assert state["cuda"] is not None and len(state["cuda"]) == torch.cuda.device_count()
    expected = torch.rand(4, device="cuda").tolist()
    torch.rand(4, device="cuda")
    restore_rng_state(state)
    assert torch.rand(4, device="cuda").tolist() == expected


def test_restore_rng_state_names_a_missing_or_mismatched_generator() -> None:
    state = capture_rng_state({"a": random.Random(0)})
    with pytest.raises(RunDirError, match="no generator 'b'"):
        restore_rng_state(state, {"b": random.Random(0)})
    with pytest.raises(RunDirError, match="saved as a python generator, not numpy"):
        restore_rng_state(state, {"a": np.random.default_rng(0)})
    with pytest.raises(TypeError, match="expected random.Random"):
        capture_rng_state({"c": object()})


# ------------------------------------------------------------------------------------------------
# Checkpoints
# ------------------------------------------------------------------------------------------------


def test_checkpoint_round_trip(run: RunDir) -> None:
    model = torch.nn.Linear(3, 2)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.ones(1, 3)).sum().backward()
    optimizer.step()
    path = run.save_checkpoint(
        4,
        policy_state=model.state_dict(),
        optimizer_state=optimizer.state_dict(),
        sampler_state={"last_sampled": {"A-v0": 3}, "documents": {"position": 17}},
        extra={"note": "x", "nan": float("nan")},
        metrics={"regret/mean": 0.5},
    )
    assert path == run.checkpoints_dir / "iter_000004"
    assert (run.checkpoints_dir / "latest").read_text() == "iter_000004\n"
    ckpt = run.load_checkpoint()
    assert isinstance(ckpt, Checkpoint) and ckpt.iteration == 4 and ckpt.path == path
    assert ckpt.sampler_state == {"last_sampled": {"A-v0": 3}, "documents": {"position": 17}}
    assert ckpt.extra["note"] == "x" and ckpt.extra["nan"] != ckpt.extra["nan"]  # NaN kept in states
    assert ckpt.metrics == {"regret/mean": 0.5}
    assert set(ckpt.rng_state) == {"python", "numpy", "torch", "cuda", "generators"}
    restored = torch.nn.Linear(3, 2)
    restored.load_state_dict(ckpt.load_policy_state())
    assert torch.equal(restored.weight, model.weight)
    opt2 = torch.optim.AdamW(restored.parameters(), lr=1e-3)
    optimizer_state = ckpt.load_optimizer_state()
    assert optimizer_state is not None
    opt2.load_state_dict(optimizer_state)
    assert torch.equal(opt2.state_dict()["state"][0]["exp_avg"], optimizer.state_dict()["state"][0]["exp_avg"])
    assert run.load_checkpoint(4).iteration == 4


def test_checkpoint_with_a_policy_save_callable_and_no_optimizer(run: RunDir) -> None:
    def save(folder: Path) -> None:
        (folder / "adapter_config.json").write_text("{}")
        (folder / "weights.bin").write_bytes(b"\0" * 10)

    run.save_checkpoint(0, policy_state=save)
    ckpt = run.load_checkpoint()
    assert sorted(p.name for p in ckpt.policy_dir.iterdir()) == ["adapter_config.json", "weights.bin"]
    assert ckpt.load_optimizer_state() is None and not ckpt.has_optimizer_state
    with pytest.raises(RunDirError, match="no policy state dict"):
        ckpt.load_policy_state()


def test_keep_the_newest_n(run: RunDir) -> None:
    for i in range(5):
        run.save_checkpoint(i)
    assert run.checkpoints() == [3, 4]  # run.keep_checkpoints = 2
    run.save_checkpoint(5, keep=1)
    assert run.checkpoints() == [5]
    assert sorted(p.name for p in run.checkpoints_dir.iterdir()) == ["iter_000005", "latest"]
    run.save_checkpoint(5, extra={"again": True})  # the same iteration saved again replaces it
    assert run.load_checkpoint().extra == {"again": True}
    with pytest.raises(RunDirError, match=r"already has one of iteration 5; resume from an older checkpoint"):
        run.save_checkpoint(4)


def test_missing_checkpoints(run: RunDir) -> None:
    with pytest.raises(RunDirError, match="holds no complete checkpoint"):
        run.load_checkpoint()
    run.save_checkpoint(1)
    with pytest.raises(RunDirError, match=r"no complete checkpoint of iteration 7 \(it has: 1\)"):
        run.load_checkpoint(7)


def test_a_leftover_temporary_folder_is_ignored_and_cleaned(run: RunDir) -> None:
    run.save_checkpoint(1, policy_state={"w": torch.zeros(2)})
    tmp = run.checkpoints_dir / ".tmp-iter_000002-deadbeef"  # a save killed half-way
    (tmp / "policy").mkdir(parents=True)
    (tmp / "policy" / "policy.pt").write_bytes(b"partial")
    incomplete = run.checkpoints_dir / "iter_000003"  # a folder without its meta.json
    incomplete.mkdir()
    assert run.checkpoints() == [1]
    assert run.load_checkpoint().iteration == 1
    ckpt = run.prepare_resume()
    assert ckpt is not None and ckpt.iteration == 1
    assert not tmp.exists() and not incomplete.exists()
    assert torch.equal(ckpt.load_policy_state()["w"], torch.zeros(2))


def test_a_failed_save_leaves_nothing_and_latest_unchanged(run: RunDir) -> None:
    run.save_checkpoint(1)

    def crash(folder: Path) -> None:
        (folder / "half.bin").write_bytes(b"x")
        raise KeyboardInterrupt  # killed while the policy is written

    with pytest.raises(KeyboardInterrupt):
        run.save_checkpoint(2, policy_state=crash)
    assert sorted(p.name for p in run.checkpoints_dir.iterdir()) == ["iter_000001", "latest"]
    assert (run.checkpoints_dir / "latest").read_text() == "iter_000001\n"
    with pytest.raises(RunDirError, match=r"sampler_state.bad = .*is not JSON data"):
        run.save_checkpoint(2, sampler_state={"bad": {1, 2}})
    assert run.checkpoints() == [1]


def test_latest_lagging_after_a_kill_between_rename_and_pointer(run: RunDir, monkeypatch: pytest.MonkeyPatch) -> None:
    run.save_checkpoint(1)

    def killed(name: str) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(run, "_write_latest", killed)
    with pytest.raises(KeyboardInterrupt):
        run.save_checkpoint(2)
    monkeypatch.undo()
    assert (run.checkpoints_dir / "latest").read_text() == "iter_000001\n"  # the pointer lags
    assert run.load_checkpoint().iteration == 2  # the newest complete checkpoint is taken
    run.prepare_resume()
    assert (run.checkpoints_dir / "latest").read_text() == "iter_000002\n"  # and the pointer repaired


# ------------------------------------------------------------------------------------------------
# Resumption: a kill at every step of an iteration
# ------------------------------------------------------------------------------------------------


class Killed(BaseException):
    """The process was killed (SIGKILL runs no cleanup; neither does this test's loop)."""


def toy_loop(run: RunDir, iterations: int, kill: tuple[int, str] | None = None) -> None:
    """A miniature self-play loop in the documented order: work, checkpoint, metrics. Its "work"
    draws from the global RNGs and a named generator, so an inexact resume changes the metrics."""
    ckpt = run.prepare_resume()
    rng = np.random.default_rng(run.config.run.seed)
    random.seed(run.config.run.seed)
    np.random.seed(run.config.run.seed)
    torch.manual_seed(run.config.run.seed)
    weights = torch.zeros(2)
    total, start = 0.0, 0
    if ckpt is not None:
        restore_rng_state(ckpt.rng_state, {"rng": rng})
        weights = ckpt.load_policy_state()["w"]
        total, start = ckpt.extra["total"], ckpt.iteration + 1
    for i in range(start, iterations):
        # 1. work
        x = float(rng.random()) + random.random() + float(np.random.rand()) + float(torch.rand(1))
        weights = weights + x
        total += x
        if kill == (i, "work"):
            raise Killed
        metrics = {"x": x, "total": total, "w": float(weights[0])}

        # 2. checkpoint
        def save_policy(folder: Path, w: torch.Tensor = weights, i: int = i) -> None:
            torch.save({"w": w}, folder / "policy.pt")
            if kill == (i, "checkpoint"):
                raise Killed

        if i % run.config.run.checkpoint_every == 0 or i == iterations - 1:
            run.save_checkpoint(
                i,
                policy_state=save_policy,
                rng_state=capture_rng_state({"rng": rng}),
                extra={"total": total},
                metrics=metrics,
            )
        if kill == (i, "between"):
            raise Killed
        # 3. metrics
        if kill == (i, "torn"):
            with open(run.metrics_path, "ab") as fh:
                fh.write(json.dumps({"iteration": i, **metrics}).encode()[:15])
            raise Killed
        run.log_metrics(i, metrics)


def plain(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [{k: v for k, v in r.items() if k != "wall_time"} for r in records]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    run = RunDir.create(tmp_path_factory.mktemp("ref") / "run", quiet_config(iterations=5))
    toy_loop(run, 5)
    return plain(run.read_metrics())


@pytest.mark.parametrize("step", ["work", "checkpoint", "between", "torn"])
@pytest.mark.parametrize("iteration", [0, 2, 4])
def test_resume_after_a_kill_gives_exactly_the_unkilled_run(
    tmp_path: Path, reference: list[dict[str, Any]], step: str, iteration: int
) -> None:
    run = RunDir.create(tmp_path / "run", quiet_config(iterations=5))
    with pytest.raises(Killed):
        toy_loop(run, 5, kill=(iteration, step))
    done = [r["iteration"] for r in read_metrics_quietly(run)]
    assert done == list(range(iteration))  # what was logged before the kill

    resumed = RunDir.open(run.path)  # a new process: `spade resume RUN_DIR`
    lost_before = resumed.latest_iteration()
    # at most the current iteration is lost: the checkpoint is the previous iteration or this one
    assert lost_before in ({iteration - 1, None} if step in ("work", "checkpoint") else {iteration})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # the torn line
        toy_loop(resumed, 5)
    assert plain(resumed.read_metrics()) == reference
    assert resumed.checkpoints() == [3, 4]
    assert not [p for p in resumed.checkpoints_dir.iterdir() if p.name.startswith(".tmp-")]


def read_metrics_quietly(run: RunDir) -> list[dict[str, Any]]:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return run.read_metrics()


def test_resume_with_checkpoints_every_two_iterations_truncates_later_metrics(
    tmp_path: Path, reference: list[dict[str, Any]]
) -> None:
    run = RunDir.create(tmp_path / "run", quiet_config(iterations=5, checkpoint_every=2, keep_checkpoints=5))
    with pytest.raises(Killed):
        toy_loop(run, 5, kill=(4, "work"))
    assert [r["iteration"] for r in run.read_metrics()] == [0, 1, 2, 3]
    assert run.checkpoints() == [0, 2]
    ckpt = RunDir.open(run.path).prepare_resume()
    assert ckpt is not None and ckpt.iteration == 2
    assert [r["iteration"] for r in run.read_metrics()] == [0, 1, 2]  # iteration 3 runs again
    toy_loop(RunDir.open(run.path), 5)
    assert plain(run.read_metrics()) == reference


def test_prepare_resume_without_a_checkpoint_starts_over(run: RunDir) -> None:
    run.log_metrics(0, {"x": 1.0})  # logged, but its checkpoint never finished
    assert run.prepare_resume() is None
    assert run.read_metrics() == []


def test_prepare_resume_from_an_older_checkpoint_drops_the_newer_ones(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run", quiet_config(keep_checkpoints=5))
    for i in range(4):
        run.save_checkpoint(i, metrics={"x": i})
        run.log_metrics(i, {"x": i})
    ckpt = run.prepare_resume(1)
    assert ckpt is not None and ckpt.iteration == 1
    assert run.checkpoints() == [0, 1]
    assert [r["x"] for r in run.read_metrics()] == [0, 1]
    run.save_checkpoint(2, metrics={"x": 20})
    assert run.load_checkpoint().metrics == {"x": 20}


def test_resume_restores_a_missing_metrics_line_and_hides_later_tensorboard_events(tmp_path: Path) -> None:
    run = RunDir.create(tmp_path / "run", SelfPlayConfig())
    for i in range(3):
        run.save_checkpoint(i, metrics={"regret/mean": float(i)})
        run.log_metrics(i, {"regret/mean": float(i)})
    run.save_checkpoint(3, metrics={"regret/mean": 3.0})  # killed before its metrics line
    run.close()
    resumed = RunDir.open(run.path)
    ckpt = resumed.prepare_resume(2)  # e.g. resumed from an older checkpoint on purpose
    assert ckpt is not None
    assert resumed._purge_step == 3
    with resumed:
        resumed.log_metrics(3, {"regret/mean": 30.0})
    assert [r["regret/mean"] for r in resumed.read_metrics()] == [0.0, 1.0, 2.0, 30.0]

    run2 = RunDir.create(tmp_path / "run2", quiet_config())
    run2.save_checkpoint(0, metrics={"regret/mean": 0.5})
    ckpt2 = RunDir.open(run2.path).prepare_resume()
    assert ckpt2 is not None
    (record,) = run2.read_metrics()
    assert record["iteration"] == 0 and record["regret/mean"] == 0.5 and record["wall_time"] == ckpt2.time


# ------------------------------------------------------------------------------------------------
# Plots
# ------------------------------------------------------------------------------------------------


def synthetic_metrics(n: int) -> list[dict[str, Any]]:
    out = []
    for i in range(n):
        out.append(
            {
                "designer/reward_mean": -1 + 0.3 * i,
                "designer/reward_std": 0.2,
                "designer/designs": 8,
                "designer/accepted": i,
                "designer/acceptance_rate": i / 8,
                "designer/rejections": {"static": 8 - i - 1, "feasibility": 1} if i < 7 else {"feasibility": 1},
                "designer/outcomes": {"invalid": 8 - i, "regret": i},
                "regret/mean": 0.1 * i,
                "regret/max": 0.2 * i,
                "agent/return_hint": 0.6,
                "agent/return_nohint": 0.3,
                "agent/return_replay": 0.4,
                "registry/size": 18 + i,
                "registry/added": 1,
                "novelty/mean": 0.7,
                "tokens": {"designer": 12000, "agent": 3000},
                "time": {"design": 30.0, "validate": 5.0, "regret": 20.0, "update": 12.0, "total": 70.0},
                "train/loss": 0.1,
                "train/grad_norm": 1.2,
            }
        )
    return out


def write_metrics(path: Path, records: list[dict[str, Any]]) -> None:
    path.mkdir(parents=True, exist_ok=True)
    with open(path / "metrics.jsonl", "w") as fh:
        for i, r in enumerate(records):
            fh.write(json.dumps({"iteration": i, "wall_time": 0.0, **r}) + "\n")


def assert_png(path: Path) -> None:
    assert path.read_bytes()[:8] == PNG_MAGIC
    from PIL import Image

    with Image.open(path) as image:
        image.verify()
        assert image.size[0] > 100 and image.size[1] > 100


def test_plot_every_curve(tmp_path: Path) -> None:
    write_metrics(tmp_path, synthetic_metrics(6))
    files = plot_run(tmp_path)  # a folder with only metrics.jsonl is enough
    assert sorted(p.name for p in files) == sorted(PLOTS)
    for path in files:
        assert path.parent == tmp_path / "plots"
        assert_png(path)
    assert sorted(p.name for p in (tmp_path / "plots").iterdir()) == sorted(PLOTS)  # no temporary files left


def test_plot_one_iteration_with_missing_keys(tmp_path: Path) -> None:
    write_metrics(
        tmp_path, [{"agent/return_nohint": 0.3, "registry/size": 18, "time/update": 3.0, "regret/mean": None}]
    )
    files = plot_run(tmp_path)
    assert sorted(p.name for p in files) == ["agent_return.png", "registry.png", "time.png"]
    for path in files:
        assert_png(path)


def test_one_iteration_is_drawn_on_whole_iteration_ticks() -> None:
    from spade_gym.trainer.plot import _figure, _widen_iterations

    fig, (ax,) = _figure()
    ax.plot([0], [0.3], marker="o")
    _widen_iterations(ax)
    ticks = [t for t in ax.get_xticks() if ax.get_xlim()[0] <= t <= ax.get_xlim()[1]]
    assert ticks == [0.0]  # not -0.04, -0.02, ...


def test_plot_a_run_dir_with_gaps(run: RunDir) -> None:
    records = synthetic_metrics(4)
    del records[1]["regret/mean"], records[2]["designer/rejections"]
    for i, r in enumerate(records):
        run.log_metrics(i, r)
    files = plot_run(run)
    assert len(files) == len(PLOTS)
    for path in files:
        assert_png(path)


def test_plot_without_metrics(tmp_path: Path) -> None:
    with pytest.warns(RuntimeWarning, match="no metrics yet"):
        assert plot_run(tmp_path) == []
    with pytest.raises(RunDirError, match="does not exist"):
        plot_run(tmp_path / "missing")
