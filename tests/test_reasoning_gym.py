"""reasoning-gym tasks as spade environments: the real reasoning-gym package, played through the
Agent's rollout and the regret estimator."""

from __future__ import annotations

import re
from functools import partial

import gymnasium
import pytest
from doubles import ScriptedPolicy
from gymnasium.utils.env_checker import check_env

pytest.importorskip("reasoning_gym")

from spade_gym.agent import Episode, RolloutConfig, rollout  # noqa: E402
from spade_gym.policies.base import SamplingParams  # noqa: E402
from spade_gym.reasoning_gym import ReasoningGymEnv, dataset_seed, task_names  # noqa: E402
from spade_gym.regret import estimate_regret  # noqa: E402


def copy_answer(prompt: list[dict[str, str]]) -> str:
    """An Agent's reply that copies the answer out of a hint (``The answer is X.``), else says ``0``."""
    found = re.search(r"Hint: The answer is (.*)\.$", prompt[-1]["content"], re.DOTALL)
    return f"<answer>{found.group(1) if found else '0'}</answer>"


def test_the_task_list_is_reasoning_gyms() -> None:
    names = task_names()
    assert len(names) > 50 and "leg_counting" in names and names == sorted(names)


def test_made_through_gymnasium_and_checked() -> None:
    env = gymnasium.make("spade/ReasoningGym-v0", task="leg_counting")
    check_env(env.unwrapped, skip_render_check=True)
    question, info = env.reset(seed=5)
    assert "legs" in question and info == {"task": "leg_counting", "split": "train", "dataset_seed": 10}
    env.close()


def test_the_reference_answer_scores_one_and_a_wrong_one_zero() -> None:
    env = ReasoningGymEnv("basic_arithmetic")
    env.reset(seed=1)
    answer = env.oracle()
    feedback, reward, terminated, truncated, info = env.step(answer)
    assert (feedback, reward, terminated, truncated) == ("Correct.", 1.0, True, False) and info["answer"] == answer
    assert env.episode_return == 1.0
    env.reset(seed=1)
    feedback, reward, *_ = env.step(answer + "1")
    assert feedback == "Incorrect." and reward < 1.0  # reasoning-gym's scorers may give partial credit
    # after the episode the environment says so rather than scoring again
    assert env.step(answer)[1:4] == (0.0, False, True)


def test_seeds_are_reproducible_and_the_splits_never_share_a_generator_seed() -> None:
    train, held_out = ReasoningGymEnv("basic_arithmetic"), ReasoningGymEnv("basic_arithmetic", split="eval")
    assert train.reset(seed=7)[0] == ReasoningGymEnv("basic_arithmetic").reset(seed=7)[0]
    train_seeds = {train.reset(seed=s)[1]["dataset_seed"] for s in range(200)}
    eval_seeds = {held_out.reset(seed=s)[1]["dataset_seed"] for s in range(200)}
    assert not train_seeds & eval_seeds and len(train_seeds) == len(eval_seeds) == 200
    assert dataset_seed(3, "train") == 6 and dataset_seed(3, "eval") == 7


def test_bad_arguments_are_named() -> None:
    with pytest.raises(ValueError, match="did you mean 'leg_counting'"):
        ReasoningGymEnv("leg_countin")
    with pytest.raises(ValueError, match="split must be 'train' or 'eval'"):
        ReasoningGymEnv("leg_counting", split="test")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="rejected task_config"):
        ReasoningGymEnv("leg_counting", task_config={"no_such_knob": 1})
    with pytest.raises(RuntimeError, match="reset"):
        ReasoningGymEnv("leg_counting").hint()


def test_odd_actions_score_zero_without_raising() -> None:
    env = ReasoningGymEnv("basic_arithmetic")
    for action in (None, "", "\x00\ud800", "9" * 100_000, b"12"):
        env.reset(seed=2)
        _, reward, terminated, _, _ = env.step(action)
        assert reward == 0.0 and terminated


def test_the_agent_plays_them_and_the_hint_is_the_answer() -> None:
    env = partial(ReasoningGymEnv, "leg_counting", task_config={"min_animals": 2})
    trajectories, stats = rollout(
        [Episode(env, seed) for seed in range(3)] + [Episode(env, seed, hint=True) for seed in range(3)],
        ScriptedPolicy(copy_answer, name="answer-copier"),
        RolloutConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=8)),
    )
    assert [t.episode_return for t in trajectories] == [0.0, 0.0, 0.0, 1.0, 1.0, 1.0]
    assert {t.env_id for t in trajectories} == {"ReasoningGym-leg_counting"} and stats.turns == 6
    estimate = estimate_regret(env, ScriptedPolicy(copy_answer, name="answer-copier"), k=3)
    # a hint that is the answer helps as much alone: no regret (the Designer is paid for none)
    assert (estimate.mean_hint, estimate.mean_nohint, estimate.mean_hint_only, estimate.regret) == (1, 0, 1, 0)
    assert estimate_regret(env, ScriptedPolicy(copy_answer, name="answer-copier"), k=3, hint_only="never").regret == 1.0


def test_the_answer_is_stripped_and_a_task_must_be_a_name() -> None:
    env = ReasoningGymEnv("leg_counting")
    env.reset(seed=0)
    answer = env.oracle()
    assert env.step(f"  {answer}\n")[1] == 1.0
    with pytest.raises(ValueError, match="task must be a reasoning-gym task name"):
        ReasoningGymEnv(None)  # type: ignore[arg-type]


def test_gym_make_without_a_task_says_how() -> None:
    with pytest.raises(ValueError, match="task='leg_counting'"):
        gymnasium.make("spade/ReasoningGym-v0")
