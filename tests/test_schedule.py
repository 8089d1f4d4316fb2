"""The self-play schedule (ACCEL/PLR): a design phase, the Designer's update once, then
``agent.updates_per_iteration`` Agent steps on prioritised replay, each scored back into the
registry; per-turn credit; the budget refusal. Real parts: the sandbox, the registry on disk, a tiny
randomly initialised Llama with the embedded model's tokenizer."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from test_selfplay import even_length_run, tiny_policy, tokenizer  # noqa: E402, F401

from spade_gym.agent import Trajectory, Turn  # noqa: E402
from spade_gym.trainer.budget import check_budget, estimate_run  # noqa: E402
from spade_gym.trainer.config import ConfigError, SelfPlayConfig  # noqa: E402
from spade_gym.trainer.credit import merge_updates, samples_by_turn  # noqa: E402
from spade_gym.trainer.grpo import UpdateStats, group_advantages, samples_from_trajectories  # noqa: E402
from spade_gym.trainer.run import RunDir  # noqa: E402
from spade_gym.trainer.selfplay import SelfPlay  # noqa: E402


def config(out: Path, **agent: Any) -> SelfPlayConfig:
    return SelfPlayConfig.from_dict(
        {
            "agent": {"max_new_tokens": 6, "replay_envs": 1, "episodes_per_env": 4, "replay_seeds": 4, **agent},
            "train": {"learning_rate": 1e-3, "micro_batch_tokens": 1024},
            "run": {"out": str(out), "iterations": 2, "designer": "off", "tensorboard": False},
        }
    )


def test_an_iteration_takes_many_agent_steps_each_replayed_and_scored_back(
    tmp_path: Path,
    tokenizer: Any,  # noqa: F811 - the fixture of test_selfplay
) -> None:
    cfg = config(tmp_path / "r", updates_per_iteration=3)
    calls: list[tuple[str, int, int]] = []
    loop = SelfPlay(
        cfg,
        even_length_run(tmp_path / "r", cfg),
        policy=tiny_policy(tokenizer),
        say=lambda _: None,
        progress=lambda *a: calls.append(a),
    )
    first, second = loop.train()
    m = first.metrics
    # three Agent steps: three draws by replay, three rollouts of 4 episodes, three updates
    assert len(first.replayed) == 12 and len(m["agent/return_steps"]) == 3
    assert m["train/agent/samples"] == 12 and m["steps/designer"] == 0 and m["steps/agent"] == 3
    assert [c for c in calls if c[0] == "update"][:6] == [("update", u + d, 3) for u in range(3) for d in (0, 1)]
    assert second.metrics["steps/agent_total"] == 6 and m["train/optimizer_steps"] <= 3
    assert {"time/rollout", "time/update", "time/designer_update"} <= set(m)
    # PLR's score update: the environment's no-hint return is the last step's, its episodes counted
    record = loop.registry.get("EvenLength-v0")
    last = [t.episode_return for t in second.replayed[-4:]]
    assert record.stats.mean_return_nohint == pytest.approx(sum(last) / 4) and record.stats.episodes == 24
    assert record.stats.times_sampled == 6
    loop.close()
    # the step counters survive a resume
    resumed = SelfPlay.resume(tmp_path / "r", policy=tiny_policy(tokenizer), say=lambda _: None)
    assert resumed.agent_steps == second.metrics["steps/agent_total"]
    resumed.close()


def test_per_turn_credit_scores_each_turn_against_the_same_turn_of_other_episodes() -> None:
    def episode(rewards: list[float], seed: int) -> Trajectory:
        turns = [Turn([1, 2], [3 + k], [-0.5], "a", "stop", "a", True) for k in range(len(rewards))]
        return Trajectory("Env-v0", seed, False, turns=turns, rewards=rewards, episode_return=min(sum(rewards), 1.0))

    # right at once, right at the second attempt, wrong twice: the second attempt's right answer is
    # pushed down under episode credit (its return 0.5 is below the group's mean, 0.625)
    played = [episode([1.0], 0), episode([1.0], 1), episode([0.0, 0.5], 2), episode([0.0, 0.0], 3)]
    by_episode = samples_from_trajectories(played, group_by="env")
    group_advantages(by_episode)
    by_turn = samples_by_turn(played, group_by="env")
    group_advantages(by_turn)
    assert [s.group.rsplit(":", 1)[1] for s in by_turn] == ["turn0", "turn0", "turn0", "turn1", "turn0", "turn1"]
    assert [s.reward for s in by_turn] == [1.0, 1.0, 0.5, 0.5, 0.0, 0.0]
    right_second = by_episode[3].advantage, by_turn[3].advantage
    assert right_second[0] is not None and right_second[0] < 0 < right_second[1]


def test_merged_updates_add_counts_and_average_losses() -> None:
    a = UpdateStats(loss=1.0, grad_norm=2.0, tokens=10, optimizer_steps=1, samples={"agent": 4})
    a.reward_mean["agent"], a.advantage_mean["agent"], a.advantage_std["agent"] = 0.5, 0.0, 1.0
    b = UpdateStats(loss=3.0, grad_norm=4.0, tokens=30, optimizer_steps=1, samples={"agent": 12, "designer": 2})
    b.reward_mean.update(agent=0.25, designer=-1.0)
    b.advantage_mean.update(agent=0.0, designer=0.0)
    b.advantage_std.update(agent=1.0, designer=0.0)
    merged = merge_updates([a, b])
    assert merged is not None and merged.loss == 2.0 and merged.tokens == 40 and merged.optimizer_steps == 2
    assert merged.samples == {"agent": 16, "designer": 2} and merged.reward_mean["agent"] == pytest.approx(0.3125)
    assert merge_updates([]) is None


def test_a_schedule_that_cannot_fit_the_budget_is_refused_naming_the_key(tmp_path: Path) -> None:
    cpu = Path(__file__).resolve().parent.parent / "examples" / "selfplay_cpu.yaml"
    base = SelfPlayConfig.from_yaml(cpu).with_overrides([f"run.out={tmp_path / 'a'}"])
    assert estimate_run(base).total <= base.run.budget_minutes  # the example fits its own budget
    many = base.with_overrides(["agent.updates_per_iteration=64"])
    # refused before any work: the model is never loaded (policy None would load the embedded one)
    with pytest.raises(ConfigError, match=r"'agent.updates_per_iteration' = 64: .*estimated about \d+\.\d min") as info:
        SelfPlay(many, RunDir.create(tmp_path / "a", many))
    assert info.value.key == "agent.updates_per_iteration" and "at most" in str(info.value)
    with pytest.raises(ConfigError, match="'eval.half_width' = 0.02") as info:
        check_budget(base.with_overrides(["eval.half_width=0.02"]))
    assert check_budget(base.with_overrides(["run.budget_minutes=null", "agent.updates_per_iteration=64"])) is None
