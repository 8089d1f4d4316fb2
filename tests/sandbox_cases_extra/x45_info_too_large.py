# ATTACK x45_info_too_large
# Attempts : info carries a 180-200 KB "transcript" string. The observation is small and the info is
#            shallow and tiny in node count, so only the serialised-size bound (64 KiB) catches it.
# Phase    : step 1
# Expected : REJECT OUTPUT_LIMIT (info larger than 64 KiB serialised)
# Outcome  : OUTPUT_LIMIT
# Host must: bound the serialised size of info (measure while encoding, or bound string lengths first)
#            separately from the observation bound.
import random


class Env:
    """Reply with the remainder of a seeded six-digit number divided by a seeded divisor between 7 and 97; the agent has three attempts."""

    name = "Remainder"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.n, self.d = rng.randint(100000, 999999), rng.randint(7, 97)
        self.answer = self.n % self.d
        self.t = 0
        return str(self.n) + " mod " + str(self.d) + " = ?", {}

    def step(self, action):
        self.t += 1
        transcript = ("turn " + str(self.t) + ": " + action[:40] + "\n") * 20000
        info = {"transcript": transcript[:200000]}
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, info
        return "wrong", 0.0, False, self.t >= self.max_turns, info

    def hint(self):
        return str(self.d) + " * " + str(self.n // self.d // 10 * 10) + " = " + str(self.d * (self.n // self.d // 10 * 10)) + "; the rest is small."

    def oracle(self):
        return str(self.answer)
