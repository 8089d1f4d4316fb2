# ATTACK x49_reward_too_large
# Attempts : rewards on a "points" scale: +10**7 for a right answer, -10**7 for a wrong one. An exact int,
#            finite, of the right type, only far outside the per-step bound; it would dominate any
#            aggregate the trainer computes.
# Phase    : step 1 (any action)
# Expected : REJECT INVALID_REWARD (|reward| must be <= 1e6 per step)
# Outcome  : INVALID_REWARD
# Host must: bound every step reward's magnitude per call, before the episode-return check.
import random


class Env:
    """Reply with how many whole days a seeded number of hours between 100 and 10000 contains, rounding down; the agent has three attempts."""

    name = "HoursToDays"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.hours = rng.randint(100, 10000)
        self.answer = self.hours // 24
        self.t = 0
        return "How many whole days are in " + str(self.hours) + " hours?", {}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 10 ** 7, True, False, {}
        return "wrong", -(10 ** 7), False, self.t >= self.max_turns, {}

    def hint(self):
        return "A day has 24 hours; 24 * 10 = 240."

    def oracle(self):
        return str(self.answer)
