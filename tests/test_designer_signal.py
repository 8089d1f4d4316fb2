"""The Designer's reward at small scale: learnability above chance (spade_gym.chance) is nonzero at the
edge of ability even where the hint does not help, and an environment written to game it (one that
pays at random, for the maximal 4 p (1 - p)) earns less than an honest one; played in the real sandbox."""

from __future__ import annotations

import random

import pytest

from spade_gym.agent import Trajectory, Turn
from spade_gym.chance import above_chance, swapped_success
from spade_gym.env import SandboxedEnv
from spade_gym.regret import RewardConfig, designer_reward, summarise

HONEST = '''
import random
import re


class Env:
    """Name the code of the asked colour among two listed codes; the right one pays 1."""

    name = "TwoCodes"
    setting = "reasoning"
    max_turns = 1

    def reset(self, seed):
        rng = random.Random(seed)
        self.codes = {c: str(rng.randint(1000, 9999)) for c in rng.sample(["red", "blue", "green"], 2)}
        self.asked = rng.choice(sorted(self.codes))
        lines = [c + ": " + k for c, k in self.codes.items()]
        return "Codes:\\n" + "\\n".join(lines) + "\\nWhat is the " + self.asked + " code?", {}

    def step(self, action):
        right = re.findall(r"\\d{4}", str(action)) == [self.codes[self.asked]]
        return "Done.", 1.0 if right else 0.0, True, False, {}

    def hint(self):
        return "Find the line that starts with " + self.asked + "."

    def oracle(self):
        return self.codes[self.asked]
'''

RIGHT = 'right = re.findall(r"\\d{4}", str(action)) == [self.codes[self.asked]]'
#: Pays any four-digit answer on about half of the seeds, whatever the question: p = 1/2 for every Agent.
COIN_BY_SEED = HONEST.replace("TwoCodes", "CoinBySeed").replace(
    RIGHT, 'right = bool(re.findall(r"\\d{4}", str(action))) and random.Random(str(self.codes)).random() < 0.5'
)
#: Pays when the answer's digits sum to an even number: a coin flip per answer.
COIN_BY_ANSWER = HONEST.replace("TwoCodes", "CoinByAnswer").replace(
    RIGHT, 'right = sum(int(d) for d in re.findall(r"\\d", str(action))) % 2 == 0'
)
assert RIGHT in HONEST and RIGHT not in COIN_BY_SEED + COIN_BY_ANSWER


def play(source: str, seeds: list[int], skill: float, hint: bool = False) -> list[Trajectory]:
    """A scripted Agent: names the asked code with probability ``skill``, else the other listed one."""
    env = SandboxedEnv(source)
    out = []
    try:
        for seed in seeds:
            obs, _ = env.reset(seed=seed)
            codes = dict(line.split(": ") for line in obs.splitlines()[1:3])
            asked = obs.rsplit("What is the ", 1)[1].split(" code")[0]
            other = next(c for c in codes if c != asked)
            pick = asked if random.Random(f"{seed}-{hint}").random() < skill else other
            _, reward, *_ = env.step(codes[pick])
            turn = Turn(None, None, None, codes[pick], "stop", codes[pick], True, "Done.", reward)
            out.append(Trajectory("env", seed, hint, turns=[turn], rewards=[reward], episode_return=reward))
    finally:
        env.close()
    return out


def reward_of(source: str, config: RewardConfig, seeds: list[int]) -> tuple[float, float]:
    """The Designer's reward and the chance rate, for an Agent at skill 1/2 whom the hint does not help."""
    estimate = summarise(play(source, seeds, 0.5, hint=True) + play(source, seeds, 0.5))
    chance = swapped_success(source, estimate.nohint)
    return designer_reward(True, estimate, config=config, chance=chance).reward, chance


SEEDS = list(range(100, 132))
LEARNABILITY = RewardConfig(shaping="learnability", learnability_times_regret=False)


@pytest.mark.parametrize("coin", [COIN_BY_SEED, COIN_BY_ANSWER], ids=["by-seed", "by-answer"])
def test_an_environment_that_pays_at_random_earns_less_than_an_honest_one(coin: str) -> None:
    honest, honest_chance = reward_of(HONEST, LEARNABILITY, SEEDS)
    gamed, gamed_chance = reward_of(coin, LEARNABILITY, SEEDS)
    assert honest_chance == 0.0 and honest > 0.8  # another instance's code never pays; p about 1/2
    assert gamed_chance > 0.3 and gamed < 0.5 * honest
    # without the chance correction the coin flip is paid as much as the honest environment
    naive = RewardConfig(shaping="learnability", learnability_times_regret=False, above_chance=False)
    assert reward_of(coin, naive, SEEDS)[0] >= 0.8


def test_the_paper_reward_is_zero_where_the_hint_does_not_help_and_learnability_is_not() -> None:
    paper = reward_of(HONEST, RewardConfig(), SEEDS)[0]
    times_regret = reward_of(HONEST, RewardConfig(shaping="learnability"), SEEDS)[0]
    alone = reward_of(HONEST, LEARNABILITY, SEEDS)[0]
    assert paper == pytest.approx(0.0, abs=0.1) and times_regret == pytest.approx(0.0, abs=0.1) and alone > 0.8


def test_above_chance() -> None:
    assert above_chance(0.5, 0.0) == 0.5 and above_chance(0.5, 0.5) == 0.0 and above_chance(0.2, 0.5) == 0.0
    assert above_chance(0.75, 0.5) == 0.5 and above_chance(1.0, 1.0) == 0.0
