"""Regret estimation and the Designer's reward: exact values for every case, a scripted Agent whose
returns are known, and the embedded model on a seed environment."""

from __future__ import annotations

from typing import Any

import pytest
from doubles import ScriptedPolicy
from programs import program

from spade_gym.agent import RolloutConfig
from spade_gym.policies import SamplingParams
from spade_gym.regret import RegretEstimate, RewardConfig, designer_reward, estimate_regret, standard_error

# answer 7 succeeds; odd seeds crash in step when the answer is wrong
SAY7 = program(
    reset='self.seed = seed\nreturn "say a number", {}',
    step=(
        'if action == "7":\n    return "right", 1.0, True, False, {}\n'
        'if self.seed % 2:\n    raise ValueError("odd seed, wrong answer")\n'
        'return "wrong", 0.0, True, False, {}'
    ),
    hint='return "say 7"',
    name="SaySeven",
    max_turns=1,
)


def hint_reader(guess: str = "1") -> ScriptedPolicy:
    """A scripted Agent: answers 7 when the first observation carries the hint, else ``guess``."""

    def reply(prompt: list[dict[str, str]]) -> str:
        hinted = any("Hint: say 7" in m["content"] for m in prompt if m["role"] == "user")
        return f"<answer>{'7' if hinted else guess}</answer>"

    return ScriptedPolicy(reply, name="hint-reader")


def estimate(mean_hint: float, mean_nohint: float) -> RegretEstimate:
    return RegretEstimate(
        "E-v0", 4, [0, 1, 2, 3], mean_hint, mean_nohint, 0.0, 0.0, max(mean_hint - mean_nohint, 0.0), 0
    )


@pytest.mark.parametrize(
    ("accepted", "duplicate", "means", "reward", "outcome"),
    [
        (False, False, None, -1.0, "invalid"),
        (False, True, None, -0.5, "duplicate"),
        (True, True, (0.9, 0.1), -0.5, "duplicate"),
        (True, False, (1.0, 1.0), 0.0, "trivial"),
        (True, False, (0.5, 1.0), 0.0, "trivial"),
        (True, False, (0.04, 0.0), 0.0, "out_of_reach"),
        (True, False, (0.0, 0.0), 0.0, "out_of_reach"),
        (True, False, (0.75, 0.25), 0.5, "regret"),
        (True, False, (0.25, 0.5), 0.0, "regret"),  # the hint hurt: regret is clipped at 0
        (True, False, (0.05, 0.0), 0.05, "regret"),  # exactly at the out-of-reach threshold
    ],
)
def test_designer_reward_cases(accepted: bool, duplicate: bool, means: Any, reward: float, outcome: str) -> None:
    result = designer_reward(accepted, estimate(*means) if means else None, duplicate=duplicate)
    assert (result.reward, result.outcome) == (pytest.approx(reward), outcome)


def test_every_threshold_is_configurable() -> None:
    config = RewardConfig(
        invalid=-2.0, duplicate=-0.25, trivial=-0.1, trivial_at=0.9, out_of_reach=-0.2, out_of_reach_below=0.3
    )
    assert designer_reward(False, config=config).reward == -2.0
    assert designer_reward(True, estimate(0.9, 0.1), duplicate=True, config=config).reward == -0.25
    assert designer_reward(True, estimate(1.0, 0.9), config=config).reward == -0.1
    assert designer_reward(True, estimate(0.25, 0.0), config=config).reward == -0.2
    assert designer_reward(True, estimate(0.5, 0.25), config=config).reward == 0.25
    with pytest.raises(ValueError, match="needs a RegretEstimate"):
        designer_reward(True)


def shaped(mean_hint: float, p: float, **config: Any) -> tuple[float, str, float | None]:
    """The reward of an estimate whose no-hint success rate (and mean return) is ``p``."""
    result = designer_reward(True, estimate(mean_hint, p), config=RewardConfig(**config))
    return result.reward, result.outcome, result.p_nohint


@pytest.mark.parametrize(
    ("mean_hint", "p", "expected"),
    [
        (1.0, 0.0, (0.0, "outside_window", 0.0)),  # the hint gives the answer away: regret 1, nothing to learn
        (1.0, 0.25, (0.0, "outside_window", 0.25)),
        (1.0, 0.3, (0.7, "regret", 0.3)),  # the low edge is inside
        (1.0, 0.5, (0.5, "regret", 0.5)),
        (1.0, 0.8, (pytest.approx(0.2), "regret", 0.8)),  # the high edge is inside
        (0.9, 0.85, (0.0, "outside_window", 0.85)),
        (1.0, 1.0, (0.0, "trivial", 1.0)),  # solved without the hint: trivial before the window
        (0.04, 0.0, (0.0, "out_of_reach", 0.0)),  # hint below out_of_reach_below: out of reach first
        (0.05, 0.0, (0.0, "outside_window", 0.0)),  # exactly at the threshold: reachable, p outside
    ],
)
def test_window_shaping_pays_regret_only_inside_the_window(mean_hint: float, p: float, expected: Any) -> None:
    assert shaped(mean_hint, p, shaping="window") == expected


def test_window_edges_and_outside_reward_are_configurable() -> None:
    config = {"shaping": "window", "window_low": 0.25, "window_high": 0.75, "outside_window": -0.1}
    assert shaped(1.0, 0.25, **config) == (0.75, "regret", 0.25)
    assert shaped(1.0, 0.75, **config) == (0.25, "regret", 0.75)
    assert shaped(1.0, 0.0, **config) == (-0.1, "outside_window", 0.0)
    assert shaped(0.9, 0.76, **config) == (-0.1, "outside_window", 0.76)
    with pytest.raises(ValueError, match="window_low"):
        RewardConfig(window_low=0.9, window_high=0.8)
    with pytest.raises(ValueError, match="shaping"):
        RewardConfig(shaping="regret")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("mean_hint", "p", "times_regret", "expected"),
    [
        (1.0, 0.0, True, (0.0, "learnability", 0.0)),  # p = 0: nothing to learn, whatever the regret
        (1.0, 0.0, False, (0.0, "learnability", 0.0)),
        (1.0, 0.5, True, (0.5, "learnability", 0.5)),  # 4 * 0.5 * 0.5 = 1, times regret 0.5
        (1.0, 0.5, False, (1.0, "learnability", 0.5)),
        (1.0, 0.25, True, (0.5625, "learnability", 0.25)),  # 0.75 * 0.75
        (1.0, 0.75, False, (0.75, "learnability", 0.75)),
        (0.5, 0.5, True, (0.0, "learnability", 0.5)),  # the hint does not help: regret 0
        (0.5, 0.5, False, (1.0, "learnability", 0.5)),
        (1.0, 1.0, True, (0.0, "trivial", 1.0)),  # p = 1: trivial
        (0.0, 0.0, True, (0.0, "out_of_reach", 0.0)),
    ],
)
def test_learnability_shaping(mean_hint: float, p: float, times_regret: bool, expected: Any) -> None:
    assert shaped(mean_hint, p, shaping="learnability", learnability_times_regret=times_regret) == expected


def test_shaping_uses_the_success_rate_when_known() -> None:
    """Partial returns: a mean no-hint return of 0.5 from episodes that never reach 0.99 is p = 0."""
    partial = RegretEstimate("E-v0", 4, [0, 1, 2, 3], 1.0, 0.5, 0.0, 0.0, 0.5, 0, success_hint=1.0, success_nohint=0.0)
    assert partial.p_nohint == 0.0
    assert designer_reward(True, partial).outcome == "regret"  # the default keeps the paper's regret
    assert designer_reward(True, partial, config=RewardConfig(shaping="window")).outcome == "outside_window"


def test_standard_error() -> None:
    assert standard_error([1.0, 0.0, 1.0, 0.0]) == pytest.approx((1 / 3) ** 0.5 / 2)
    assert standard_error([0.5]) == 0.0


def test_estimate_regret_with_a_known_agent() -> None:
    """The hint makes the scripted Agent succeed on every seed; without it, it fails, and on odd
    seeds the environment crashes (return 0, counted as errors)."""
    result = estimate_regret(SAY7, hint_reader(), k=4, seeds=[10, 11, 12, 13], hint_only="never")
    assert (result.mean_hint, result.mean_nohint, result.regret) == (1.0, 0.0, 1.0)
    # "say 7" gives the answer away: with the hint alone (another seed's observation in place of
    # the episode's own) the Agent succeeds as well, and the default estimate pays nothing for it
    default = estimate_regret(SAY7, hint_reader(), k=4, seeds=[10, 11, 12, 13])
    assert (default.mean_hint, default.mean_nohint, default.mean_hint_only, default.regret) == (1.0, 0.0, 1.0, 0.0)
    assert "a leak" in default.reason
    assert (result.se_hint, result.se_nohint) == (0.0, 0.0)
    assert result.errors == 2 and result.seeds == [10, 11, 12, 13] and result.env_id == "SaySeven"
    assert [t.seed for t in result.nohint] == [10, 11, 12, 13] and not any(t.hint for t in result.nohint)
    assert all(t.hint for t in result.hint)
    assert result.stats is not None and result.stats.generate_calls == 1  # both arms in one batch
    assert set(result.summary()) == {
        "k",
        "seeds",
        "mean_hint",
        "mean_nohint",
        "se_hint",
        "se_nohint",
        "regret",
        "errors",
        "success_hint",
        "success_nohint",
        "mean_hint_only",
        "se_hint_only",
        "success_hint_only",
        "reason",
    }
    assert (result.success_hint, result.success_nohint, result.p_nohint) == (1.0, 0.0, 0.0)
    solved = estimate_regret(SAY7, hint_reader(guess="7"), k=2)
    assert (solved.mean_nohint, solved.regret) == (1.0, 0.0)
    assert designer_reward(True, solved).outcome == "trivial"


def test_estimate_regret_refuses_degenerate_settings() -> None:
    with pytest.raises(ValueError, match="k must be"):
        estimate_regret(SAY7, hint_reader(), k=0)
    with pytest.raises(ValueError, match="k=2 seeds"):
        estimate_regret(SAY7, hint_reader(), k=2, seeds=[1, 2, 3])
    with pytest.raises(ValueError, match="needs sampling"):
        estimate_regret(SAY7, hint_reader(), k=2, config=RolloutConfig(sampling=SamplingParams(temperature=0)))


@pytest.mark.slow
def test_estimate_regret_with_the_embedded_model(embedded_policy: Any) -> None:
    config = RolloutConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=32, seed=0), max_turns=2)
    result = estimate_regret("spade/ArithmeticChain-v0", embedded_policy, k=2, config=config)
    assert 0.0 <= result.mean_nohint <= 1.0 and 0.0 <= result.mean_hint <= 1.0
    assert result.regret == max(result.mean_hint - result.mean_nohint, 0.0)
    assert len(result.nohint) == 2 and all(t.samples() for t in result.nohint)


def test_the_difficulty_bands_are_defined_once() -> None:
    from spade_gym.memory import MemoryConfig
    from spade_gym.program import LEARNING_WINDOW, OUT_OF_REACH_BELOW, TOO_EASY_AT, TRIVIAL_AT

    reward, memory = RewardConfig(), MemoryConfig()
    assert reward.out_of_reach_below == memory.too_hard_below == OUT_OF_REACH_BELOW  # failed even with the hint
    assert reward.trivial_at == TRIVIAL_AT and memory.too_easy_at == TOO_EASY_AT
    assert (reward.window_low, reward.window_high) == LEARNING_WINDOW
    assert 0 < OUT_OF_REACH_BELOW < LEARNING_WINDOW[0] < LEARNING_WINDOW[1] < TOO_EASY_AT <= TRIVIAL_AT <= 1
