# ATTACK x51_reward_fraction
# Attempts : the reward is a fractions.Fraction (1 or 0). It is a numbers.Real, compares equal to 1.0 and
#            0.0, and float() works, so isinstance/number-protocol checks accept it; it is neither int
#            nor float, and json.dumps cannot encode it.
# Phase    : step 1 (any action)
# Expected : REJECT INVALID_REWARD (reward must be exactly int or float)
# Outcome  : INVALID_REWARD
# Host must: check `type(r) in (int, float)` exactly, not isinstance(r, numbers.Real) or float(r).
import fractions
import random


class Env:
    """Reply with the probability, as a fraction p/q in lowest terms, that a fair die shows a number greater than a seeded threshold from 1 to 5; the agent has three attempts."""

    name = "DieProbability"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.k = rng.randint(1, 5)
        p = fractions.Fraction(6 - self.k, 6)
        self.answer = str(p.numerator) + "/" + str(p.denominator)
        self.t = 0
        return "A fair six-sided die: probability of rolling more than " + str(self.k) + "? (p/q)", {}

    def step(self, action):
        self.t += 1
        if action.strip().replace(" ", "") == self.answer:
            return "correct", fractions.Fraction(1), True, False, {}
        return "wrong", fractions.Fraction(0), False, self.t >= self.max_turns, {}

    def hint(self):
        return str(6 - self.k) + " of the 6 faces qualify; reduce the fraction."

    def oracle(self):
        return self.answer
