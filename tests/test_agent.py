"""The Reasoning Agent's rollouts (``spade_gym.agent``): real sandboxed environments, the real
embedded model, and a scripted policy where a test needs exact completions (a malformed tool
call, a crash at a known turn). The scripted policy is a test tool, not the model: it answers with
fixed texts so that the runner's rules can be checked exactly."""

from __future__ import annotations

import json
from typing import Any

import pytest
from doubles import ScriptedPolicy, by_turn
from programs import program

from spade_gym.agent import (
    AGENT_TEMPERATURE,
    AGENT_TOP_P,
    PROMPT_EXAMPLES,
    SYSTEM_PROMPTS,
    Episode,
    RolloutConfig,
    agent_prompt,
    extract_action,
    format_compliance,
    rollout,
    system_prompt,
    tool_signature,
)
from spade_gym.policies import SamplingParams

ECHO = program(
    reset='return "task " + str(seed), {}',
    step='return "you said: " + action, 0.0, False, False, {}',
    hint='return "the answer is 7"',
    name="EchoEnv",
    max_turns=3,
)
SOLVE = program(
    reset='return "say 7", {}',
    step='return ("right", 1.0, True, False, {}) if action == "7" else ("wrong", 0.0, False, False, {})',
    name="SayEnv",
    max_turns=2,
)
CRASH = program(
    reset='self.t = 0\nreturn "start", {}',
    step='self.t += 1\nif self.t >= 2:\n    raise ValueError("boom")\nreturn "ok", 0.5, False, False, {}',
    name="CrashEnv",
    max_turns=4,
)
TOOLS = program(
    reset='return "use the tool", {}',
    step='return "called " + action, 0.0, False, False, {}',
    name="ToolEnv",
    setting="tool_use",
    max_turns=3,
)


@pytest.mark.parametrize(
    ("text", "setting", "action", "ok"),
    [
        ("I think <answer>5</answer> no, <answer> 7 </answer>", "reasoning", "7", True),
        ("<ANSWER>up</ANSWER>", "game", "up", True),
        ("first line\n\n  the last line  \n", "reasoning", "the last line", False),
        ("", "reasoning", "", False),
        (
            '<tool_call>{"name": "f", "arguments": {"x": 1}}</tool_call>',
            "tool_use",
            '{"name": "f", "arguments": {"x": 1}}',
            True,
        ),
        ("<answer>done</answer>", "tool_use", "done", True),
    ],
)
def test_extract_action(text: str, setting: str, action: str, ok: bool) -> None:
    parsed = extract_action(text, setting)
    assert (parsed.action, parsed.format_ok, parsed.error) == (action, ok, None)


def test_extract_action_takes_linear_time_and_keeps_the_tag_rules() -> None:
    import re
    import time

    from spade_gym.agent import _ANSWER

    # many opening tags with no closing tag after them (a client of `spade serve` may send any text):
    # the regex alone scanned to the end from each one (35 s of CPU for 256 KB)
    for text, setting in [
        ("<answer>" * 125_000, "reasoning"),
        ("<tool_call>" * 90_000, "tool_use"),
        ("<answer>a" * 60_000 + "</answer>" + "<answer>" * 60_000, "reasoning"),
    ]:
        started = time.process_time()
        extract_action(text, setting)
        assert time.process_time() - started < 1.0
    for text in [
        "<answer>a<answer>b</answer>",
        "x <ANSWER>1</Answer> <answer>2</answer><answer>3",
        "<answer>\n</answer>",
    ]:
        assert extract_action(text, "reasoning").action == re.findall(_ANSWER, text)[-1].strip()


@pytest.mark.parametrize(
    "text",
    ["<tool_call>{not json}</tool_call>", '<tool_call>["f"]</tool_call>', '<tool_call>{"arguments": {}}</tool_call>'],
)
def test_a_malformed_tool_call_is_not_an_action(text: str) -> None:
    parsed = extract_action(text, "tool_use")
    assert parsed.action is None and not parsed.format_ok and parsed.error and parsed.error.startswith("Error:")


def test_system_prompts_state_the_action_format() -> None:
    assert "<answer>" in system_prompt("reasoning") and "<answer>" in system_prompt("game")
    tools = [{"type": "function", "function": {"name": "lookup"}}]
    prompt = system_prompt("tool_use", "Find things.", tools)
    assert "<tool_call>" in prompt and "Find things." in prompt and '"lookup"' in prompt
    assert "\nlookup()" in system_prompt("tool_use", "Find things.", tools, compact_tools=True)
    tool = {
        "type": "function",
        "function": {
            "name": "get_status",
            "description": "Look up an order.",
            "parameters": {"type": "object", "properties": {"order_id": {"type": "string"}}},
        },
    }
    assert tool_signature(tool) == "get_status(order_id): Look up an order."
    assert tool_signature({"weird": 1}) == '{"weird":1}'  # not a function schema: shown as compact JSON
    with pytest.raises(ValueError, match="setting"):
        system_prompt("chess")


@pytest.mark.parametrize("setting", sorted(SYSTEM_PROMPTS))
def test_each_setting_shows_one_worked_example_whose_reply_parses(setting: str) -> None:
    system, question, reply = agent_prompt(setting, "About.", [{"type": "function", "function": {"name": "f"}}])
    assert system["content"] == system_prompt(
        setting, "About.", [{"type": "function", "function": {"name": "f"}}], compact_tools=True
    )
    assert (question["role"], reply["role"]) == ("user", "assistant")
    assert (question["content"], reply["content"]) == PROMPT_EXAMPLES[setting]
    parsed = extract_action(reply["content"], setting)
    assert parsed.format_ok and parsed.action and parsed.error is None
    tag = "<tool_call>" if setting == "tool_use" else "<answer>"
    assert tag in system["content"] and reply["content"].startswith(tag)
    with pytest.raises(ValueError, match="setting"):
        agent_prompt("chess")


def test_the_policy_sees_the_worked_example_before_the_first_observation() -> None:
    policy = ScriptedPolicy(by_turn(["<answer>1</answer>", "<answer>7</answer>"]))
    (trajectory,), _ = rollout([Episode(SOLVE, 0)], policy)
    first, second = policy.prompts
    assert first[:3] == agent_prompt("reasoning", trajectory.messages[0]["content"].split("Environment: ")[1])
    assert "Environment: " in first[0]["content"]
    assert first[3:] == trajectory.messages[1:2] and second[3:] == trajectory.messages[1:4]
    # the trajectory records the episode's own conversation: the example is not repeated there
    assert [m["role"] for m in trajectory.messages] == ["system", "user", "assistant", "user", "assistant", "user"]


def test_format_compliance_is_the_share_of_turns_with_a_parsable_action() -> None:
    policy = ScriptedPolicy(by_turn(["<answer>1</answer>", "no tags here", "<answer>3</answer>"]))
    (one, two), stats = rollout([Episode(ECHO, 0), Episode(ECHO, 1)], policy)
    assert [t.format_ok for t in one.turns] == [True, False, True]
    assert one.format_ok_turns == 2 and one.format_compliance == pytest.approx(2 / 3)
    assert stats.turns == 6 and stats.format_ok_turns == 4 and stats.format_compliance == pytest.approx(2 / 3)
    assert format_compliance([one, two]) == pytest.approx(2 / 3) and format_compliance([]) is None
    (tools,), tool_stats = rollout([Episode(TOOLS, 0)], ScriptedPolicy("<tool_call>{bad}</tool_call>"))
    assert tools.format_compliance == 0.0 and tool_stats.format_compliance == 0.0  # malformed calls count


def test_self_play_reports_the_format_compliance_of_regret_and_replayed_episodes() -> None:
    pytest.importorskip("torch")
    from spade_gym.regret import regret_episodes, summarise
    from spade_gym.trainer.selfplay import _agent_metrics

    class Outcome:  # what _agent_metrics reads of a DesignOutcome
        def __init__(self, estimate: Any) -> None:
            self.estimate = estimate

    regret, _ = rollout(regret_episodes(SOLVE, [0, 1]), ScriptedPolicy(by_turn(["<answer>1</answer>", "no tag"])))
    replayed, _ = rollout(
        [Episode(ECHO, 0)], ScriptedPolicy(by_turn(["<answer>1</answer>", "none", "<answer>2</answer>"]))
    )
    metrics = _agent_metrics([Outcome(summarise(regret)), Outcome(None)], replayed)  # type: ignore[list-item]
    assert metrics["agent/format_compliance"] == pytest.approx(format_compliance(regret + replayed))
    assert metrics["agent/format_compliance"] == pytest.approx((4 + 2) / (8 + 3))  # SayEnv: 2 turns each
    assert _agent_metrics([], [])["agent/format_compliance"] is None


def test_the_agent_sampling_defaults_live_in_one_place() -> None:
    import inspect

    from spade_gym.cli import envs_measure
    from spade_gym.trainer.config import AgentSection

    sampling = RolloutConfig().sampling
    assert (sampling.temperature, sampling.top_p) == (AGENT_TEMPERATURE, AGENT_TOP_P)
    assert (AgentSection().temperature, AgentSection().top_p) == (AGENT_TEMPERATURE, AGENT_TOP_P)
    parameters = inspect.signature(envs_measure).parameters
    assert (parameters["temperature"].default, parameters["top_p"].default) == (AGENT_TEMPERATURE, AGENT_TOP_P)
    assert 0 < AGENT_TEMPERATURE and 0 < AGENT_TOP_P <= 1


def test_the_designer_sampling_default_lives_in_one_place() -> None:
    import inspect

    from spade_gym.cli import design
    from spade_gym.designer import DESIGNER_TEMPERATURE, DesignerConfig
    from spade_gym.trainer.config import SelfPlayConfig

    assert DesignerConfig().sampling.temperature == DESIGNER_TEMPERATURE
    assert SelfPlayConfig().designer_config().sampling.temperature == DESIGNER_TEMPERATURE
    assert inspect.signature(design).parameters["temperature"].default == DESIGNER_TEMPERATURE
    assert 0 < DESIGNER_TEMPERATURE <= 1


def test_the_regret_episode_count_and_memory_size_live_in_one_place() -> None:
    import inspect

    from spade_gym.cli import design, envs_measure, regret
    from spade_gym.designer import DesignerConfig
    from spade_gym.memory import MemoryConfig
    from spade_gym.regret import REGRET_EPISODES, estimate_regret
    from spade_gym.trainer.config import AgentSection

    assert DesignerConfig().k == AgentSection().k == REGRET_EPISODES
    assert inspect.signature(estimate_regret).parameters["k"].default == REGRET_EPISODES
    for command in (design, envs_measure, regret):
        assert inspect.signature(command).parameters["k"].default == REGRET_EPISODES, command.__name__
    assert DesignerConfig().memory_k == DesignerConfig().memory.k == MemoryConfig().k
    assert inspect.signature(design).parameters["memory_k"].default == MemoryConfig().k


def test_the_hint_is_appended_to_the_first_observation_only_when_asked() -> None:
    policy = ScriptedPolicy("<answer>x</answer>")
    (plain, hinted), _ = rollout([Episode(ECHO, 3), Episode(ECHO, 3, hint=True)], policy)
    assert plain.messages[1]["content"] == "task 3"
    assert hinted.messages[1]["content"] == "task 3\n\nHint: the answer is 7"
    assert plain.messages[0]["role"] == "system" and "<answer>" in plain.messages[0]["content"]


def test_one_generate_call_per_turn_across_every_running_episode() -> None:
    policy = ScriptedPolicy(by_turn(["<answer>1</answer>", "<answer>7</answer>"]))
    episodes = [Episode(SOLVE, s) for s in range(3)] + [Episode(ECHO, s) for s in range(3)]
    trajectories, stats = rollout(episodes, policy)
    assert [len(batch) for batch in policy.batches] == [
        6,
        6,
        3,
    ]  # SayEnv episodes end at turn 2, EchoEnv ones run 3 turns
    assert stats.generate_calls == 3 and stats.turns == 15 and stats.episodes == 6
    solved = trajectories[0]
    assert solved.rewards == [0.0, 1.0] and solved.episode_return == 1.0 and solved.success and solved.terminated
    echo = trajectories[3]
    assert echo.num_turns == 3 and echo.truncated and not echo.terminated and echo.episode_return == 0.0
    assert [t.observation for t in echo.turns] == ["you said: 1", "you said: 7", "you said: 7"]
    assert stats.generation_s > 0 and stats.env_s > 0 and stats.total_s >= stats.generation_s + stats.env_s


def test_a_crash_mid_episode_ends_that_episode_with_return_zero_and_the_batch_goes_on() -> None:
    policy = ScriptedPolicy("<answer>a</answer>")
    crashed, echo = rollout([Episode(CRASH, 0), Episode(ECHO, 0)], policy)[0]
    assert (
        crashed.error is not None
        and crashed.error["category"] == "ENV_EXCEPTION"
        and "boom" in crashed.error["message"]
    )
    assert crashed.num_turns == 2 and crashed.rewards[0] == 0.5 and crashed.episode_return == 0.0 and crashed.truncated
    assert echo.error is None and echo.num_turns == 3


def test_a_malformed_tool_call_comes_back_as_an_error_observation() -> None:
    policy = ScriptedPolicy(
        by_turn(["<tool_call>{oops}</tool_call>", '<tool_call>{"name": "f", "arguments": {}}</tool_call>'])
    )
    (trajectory,), _ = rollout([Episode(TOOLS, 0)], policy)
    first, second = trajectory.turns[:2]
    assert first.action is None and first.observation.startswith("Error: the tool call is not valid JSON")
    assert second.action == json.dumps({"name": "f", "arguments": {}})
    assert second.observation == "called " + second.action
    assert trajectory.num_turns == 3  # the error turn counts toward max_turns


def test_max_turns_of_the_config_caps_episodes() -> None:
    policy = ScriptedPolicy("<answer>1</answer>")
    (trajectory,), stats = rollout([Episode(ECHO, 0)], policy, RolloutConfig(max_turns=1))
    assert trajectory.num_turns == 1 and trajectory.truncated and stats.generate_calls == 1


@pytest.mark.parametrize(
    ("source", "texts"),
    [
        (SOLVE, ["<answer>1</answer>", "<answer>7</answer>"]),  # terminated with return 1
        (ECHO, ["<answer>1</answer>"]),  # truncated at the turn limit
        (CRASH, ["<answer>a</answer>"]),  # failed mid-episode: return 0
        (TOOLS, ["<tool_call>{oops}</tool_call>", '<tool_call>{"name": "f", "arguments": {}}</tool_call>']),
    ],
)
def test_the_rollout_and_the_integrations_episode_play_by_the_same_rules(source: str, texts: list[str]) -> None:
    import gymnasium

    from spade_gym.integrations._episode import SpadeEpisode

    env_id = "spade/RulesCheck-v0"
    gymnasium.register(id=env_id, entry_point="spade_gym.env:SandboxedEnv", kwargs={"program": source})
    try:
        (batched,), _ = rollout([Episode(env_id, 3)], ScriptedPolicy(by_turn(texts)))
        episode = SpadeEpisode(env_id, 3)
        first = episode.start()
        assert episode.first_observation == first  # read by adapters (OpenRLHF's `.episode`)
        while not episode.done:
            episode.act(texts[min(episode.turns, len(texts) - 1)])
        episode.close()
    finally:
        gymnasium.registry.pop(env_id)
    one = episode.trajectory
    assert [(t.action, t.observation, t.reward, t.format_ok) for t in one.turns] == [
        (t.action, t.observation, t.reward, t.format_ok) for t in batched.turns
    ]
    assert (one.rewards, one.episode_return, one.terminated, one.truncated) == (
        batched.rewards,
        batched.episode_return,
        batched.terminated,
        batched.truncated,
    )
    assert (one.error or {}).get("category") == (batched.error or {}).get("category")


def test_the_episode_rules() -> None:
    from spade_gym.agent import Trajectory

    t = Trajectory("x", 0, False)
    t.end_turn(0.5, turn_limit=2)
    assert not t.done and t.episode_return == 0.5
    t.end_turn(0.25, turn_limit=2)  # the turn limit truncates
    assert t.truncated and not t.terminated and t.done and t.episode_return == 0.75
    t = Trajectory("x", 0, False)
    t.end_turn(1.0, terminated=True, info={"sandbox_error": {"category": "INVALID_REWARD", "message": "m"}})
    assert t.error == {"category": "INVALID_REWARD", "message": "m"}  # a failure wins over termination
    assert t.truncated and not t.terminated and t.episode_return == 0.0 and t.rewards == [1.0]
    t = Trajectory("x", 0, False)
    t.end_turn(1.0, terminated=True)
    assert t.terminated and t.success and t.episode_return == 1.0
    t.fail(ValueError("late"))
    assert t.error is not None and t.error["category"] == "ENV_EXCEPTION" and t.episode_return == 0.0
    t = Trajectory("x", 0, False)
    t.end_turn(0.6 + 0.4000005, terminated=True)  # within the sandbox's rounding tolerance
    assert t.episode_return == 1.0


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="n must be 1"):
        rollout([Episode(ECHO, 0)], ScriptedPolicy("x"), RolloutConfig(sampling=SamplingParams(n=2)))
    with pytest.raises(ValueError, match="max_episodes"):
        RolloutConfig(max_episodes=0)


@pytest.mark.slow
def test_the_embedded_model_plays_a_seed_environment(embedded_policy: Any) -> None:
    """Real model, real registered environment: trajectories carry what the trainer needs."""
    config = RolloutConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=32, seed=0), max_turns=2)
    episodes = [Episode("spade/ArithmeticChain-v0", seed, hint) for seed in (0, 1) for hint in (False, True)]
    trajectories, stats = rollout(episodes, embedded_policy, config)
    assert stats.generate_calls == 2 < len(episodes) * 2
    for trajectory in trajectories:
        assert trajectory.num_turns >= 1 and trajectory.error is None
        for prompt_ids, completion_ids, logprobs, mask in trajectory.samples():
            assert len(completion_ids) == len(logprobs) == len(mask) >= 1 and set(mask) == {1}
            assert embedded_policy.tokenizer.decode(prompt_ids).rstrip().endswith("assistant")
        assert trajectory.generation_s > 0
    # the two turns of an episode were sampled with different seeds: not one repeated completion
    assert any(t.turns[0].text != t.turns[-1].text for t in trajectories if t.num_turns == 2)
    # same seeds, same settings: the rollout repeats
    again, _ = rollout(episodes, embedded_policy, config)
    assert [t.turns[0].completion_token_ids for t in again] == [t.turns[0].completion_token_ids for t in trajectories]


@pytest.mark.slow
def test_a_conversation_longer_than_the_window_is_shortened_not_refused(embedded_policy: Any) -> None:
    from spade_gym.policies.transformers import TransformersPolicy

    small = TransformersPolicy(embedded_policy.model, embedded_policy.tokenizer, context_window=200, name="small")
    config = RolloutConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=48, seed=1), max_turns=3)
    (trajectory,), _ = rollout([Episode(ECHO, 0)], small, config)
    assert trajectory.num_turns == 3 and trajectory.error is None
    for turn in trajectory.turns:
        assert len(turn.prompt_token_ids or []) + 48 <= 200


@pytest.mark.parametrize("gym_id", ["spade/Generated-v0", "spade/Designer-v0"])
def test_rollout_refuses_environments_that_are_not_programs(gym_id: str) -> None:
    with pytest.raises(ValueError, match="not an environment program"):
        rollout([Episode(gym_id, 0)], ScriptedPolicy("<answer>1</answer>"), RolloutConfig())
