"""GEM: spade environments under GEM ids, made and stepped by the real ``gem-llm`` package
(``gem.make``, ``gem.make_vec`` in sync and async mode, GEM's own wrappers), with the real sandbox
and registries on disk."""

from __future__ import annotations

import functools
from collections.abc import Iterator
from pathlib import Path

import gymnasium
import pytest
from integration_helpers import ShadowOracle, register_hostile_envs

from spade_gym.integrations._episode import SpadeEpisode
from spade_gym.registry.gymnasium import open_registry

gem = pytest.importorskip(
    "gem", reason="gem-llm is not installed: pip install --no-deps gem-llm (see docs/serving.md, GEM)"
)

from spade_gym.integrations.gem import gem_id, register_gem  # noqa: E402

ARITH, BANK = "spade/ArithmeticChain-v0", "spade/BankTransferReport-v0"


@pytest.fixture(autouse=True)
def clean_ids() -> Iterator[None]:
    """Put back Gymnasium's and GEM's ids (registries in tmp_path re-register the bundled names)."""
    saved, saved_gem = dict(gymnasium.registry), dict(gem.envs.registration.ENV_REGISTRY)
    yield
    gymnasium.registry.clear()
    gymnasium.registry.update(saved)
    gem.envs.registration.ENV_REGISTRY.clear()
    gem.envs.registration.ENV_REGISTRY.update(saved_gem)


def play(env: object, env_id: str, seed: int) -> tuple[list[str], list[float], dict]:
    """Play one episode with the oracle through a gem env; the replies, rewards and last info."""
    oracle, replies, rewards = ShadowOracle(env_id, seed), [], []
    done, info = False, {}
    while not done:
        replies.append(oracle.reply(replies))
        _, reward, terminated, truncated, info = env.step(replies[-1])  # type: ignore[attr-defined]
        rewards.append(reward)
        done = terminated or truncated
    return replies, rewards, info


def test_register_gem_names_every_seed_environment_and_generated() -> None:
    ids = register_gem()
    assert gem_id(ARITH) == "spade:ArithmeticChain-v0" and "spade:ArithmeticChain-v0" in ids
    assert "spade:Generated-v0" in ids and "spade:LightsOut3x3-v0" not in ids  # held out of training
    assert set(ids) <= set(gem.envs.registration.ENV_REGISTRY)
    assert register_gem([ARITH]) == ["spade:ArithmeticChain-v0"]  # again: re-registered, not refused


@pytest.mark.parametrize("env_id", [ARITH, BANK])
def test_gem_make_plays_the_episode_the_agent_would(env_id: str) -> None:
    register_gem([env_id])
    env = gem.make(gem_id(env_id))
    try:
        obs, info = env.reset(seed=4)
        local = SpadeEpisode(env_id, 4)
        local.start()
        assert obs == f"{local.system_prompt}\n\n{local.first_observation}"  # the action format comes with it
        assert (info["env_id"], info["seed"], info["observation"]) == (env_id, 4, local.first_observation)
        replies, rewards, last = play(env, env_id, 4)
        for reply in replies:
            local.act(reply)
        local.close()
        assert rewards == local.rewards and last["episode_return"] == local.episode_return == 1.0
        assert last["success"] and last["error"] is None and last["format_ok"]
    finally:
        env.close()


def test_make_vec_async_and_sync_agree_and_autoreset() -> None:
    register_gem([ARITH, BANK])
    ids = [gem_id(ARITH), gem_id(BANK), gem_id(ARITH)]
    runs = []
    for async_mode in (False, True):
        vec = gem.make_vec(ids, async_mode=async_mode, seed=7)
        try:
            assert type(vec).__name__ == ("AsyncVectorEnv" if async_mode else "SyncVectorEnv")
            first, infos = vec.reset()
            seeds = [i["seed"] for i in infos]
            assert [i["env_id"] for i in infos] == [ARITH, BANK, ARITH] and len(set(seeds)) == 3
            replies = ["<answer>0</answer>"] * 3
            obs, rewards, terminated, truncated, step_infos = vec.step(replies)
            runs.append((first, seeds, obs, list(rewards), list(terminated), list(truncated)))
            # play env 0 to its end with the oracle: GEM resets it in the same step (SAME_STEP autoreset)
            oracle = ShadowOracle(ARITH, seeds[0])
            played = [replies[0]]
            while True:
                played.append(oracle.reply(played))
                obs, rewards, terminated, truncated, step_infos = vec.step({0: played[-1]})
                if terminated[0] or truncated[0]:
                    break
            assert (
                step_infos[0]["seed"] != seeds[0] and step_infos[0]["env_id"] == ARITH
            )  # the next episode's reset info
        finally:
            for env in vec.envs:
                env.close()
    assert runs[0] == runs[1]  # threads or not, the same seeds play the same episodes


def test_gems_own_wrappers_accept_spade_environments() -> None:
    # GEM's "concat_with_action,episode_tracking" wrappers (its wrapper_factory also imports its search tools)
    from gem.wrappers.episode_tracking_wrapper import EpisodeTrackingWrapper
    from gem.wrappers.observation_wrapper import ObservationWrapper

    register_gem([ARITH])
    concat = functools.partial(ObservationWrapper, include_action=True, include_chat_template=False)
    vec = gem.make_vec([gem_id(ARITH)], wrappers=[concat, EpisodeTrackingWrapper], seed=3)
    try:
        first, infos = vec.reset()
        local = SpadeEpisode(ARITH, infos[0]["seed"])
        local.start()
        stepped, _, _, _, infos = vec.step(["I would say <answer>12</answer>"])
        reply = local.act("<answer>12</answer>").observation
        local.close()
        assert stepped[0] == f"{first[0]}12\n{reply}\n"  # history: first observation, parsed action, observation
        assert infos[0]["step_counter"] == 1 and infos[0]["parsed_action"] == "12"
    finally:
        vec.envs[0].close()


def test_generated_draws_from_a_registry_and_failures_end_the_episode_only(tmp_path: Path) -> None:
    open_registry(tmp_path / "reg", include_tags=["graded"]).close()
    (generated,) = register_gem(["spade/Generated-v0"], registry=tmp_path / "reg")
    env = gem.make(generated, seed=0)
    try:
        drawn = {env.reset()[1]["env_id"] for _ in range(6)}
        assert len(drawn) > 1 and all(d.split("/")[1].split("-")[0] in _GRADED for d in drawn)
    finally:
        env.close()
    hostile = register_hostile_envs()
    ids = register_gem([hostile["crash_step"], hostile["no_load"]])
    crash, no_load = gem.make(ids[0]), gem.make(ids[1])
    try:
        crash.reset(seed=0)
        assert crash.step("<answer>a</answer>")[1] == 0.5
        obs, reward, terminated, truncated, info = crash.step("<answer>b</answer>")
        assert (reward, terminated, truncated, info["episode_return"]) == (0.0, False, True, 0.0)
        assert info["error"]["category"] == "ENV_EXCEPTION" and "boom at step two" in obs
        obs, info = no_load.reset(seed=0)
        assert "failed to start" in obs and no_load.episode.done
    finally:
        crash.close()
        no_load.close()


_GRADED = {"ColorCodeLookup", "CountListItems", "LargerOfTwo", "ColorDoorRooms", "OrderStatusLookup"}


def test_the_docs_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    from readme import readme_example

    exec(compile(readme_example("## GEM", doc="docs/serving.md"), "docs/serving.md", "exec"), {})  # noqa: S102
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "0.0 42 0.0" and out[-1].startswith("['spade/")
    assert len(eval(out[-1])) == 4  # noqa: S307 - the printed list of drawn ids
