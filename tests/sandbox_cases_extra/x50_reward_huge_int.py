# ATTACK x50_reward_huge_int
# Attempts : the reward is a 5000-digit int (10**4999, negated for a wrong answer). float(r) and
#            math.isfinite(r) raise OverflowError, str(r)/json.dumps(r) raise ValueError (3.11's
#            4300-digit limit), so a validator that converts before comparing crashes in the worker.
# Phase    : step 1 (any action)
# Expected : REJECT INVALID_REWARD (out of bounds, decided without converting the int)
# Outcome  : INVALID_REWARD
# Host must: check `type(r) is int` then compare `-10**6 <= r <= 10**6` on the int itself (or check the
#            bound first), before any float()/str()/JSON conversion.
import random


class Env:
    """Reply with the number of letters in the seeded English name of a number from one to twenty; the agent has three attempts."""

    name = "NumberNameLength"
    setting = "reasoning"
    max_turns = 3
    names = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve",
             "thirteen", "fourteen", "fifteen", "sixteen", "seventeen", "eighteen", "nineteen", "twenty"]

    def reset(self, seed):
        rng = random.Random(seed)
        self.n = rng.randint(1, 20)
        self.answer = len(self.names[self.n - 1])
        self.t = 0
        return "How many letters are in the English word for " + str(self.n) + "?", {}

    def step(self, action):
        self.t += 1
        score = 10 ** 4999
        if action.strip() == str(self.answer):
            return "correct", score, True, False, {}
        return "wrong", -score, False, self.t >= self.max_turns, {}

    def hint(self):
        return "The word starts with '" + self.names[self.n - 1][0] + "'."

    def oracle(self):
        return str(self.answer)
