# ATTACK x09_getattr_violation_swallowed
# Attempts : probe for an escape quietly: three-argument getattr(fn, "__globals__", None) inside
#            `try/except BaseException`, then carry on as a perfectly normal environment whatever
#            happened. A guard whose refusal is just an exception (or that honours the default) leaves
#            no trace, so the program can probe every call until something works.
# Phase    : reset
# Expected : REJECT SANDBOX_DENIED (the violation is recorded even though the program swallowed it)
# Outcome  : SANDBOX_DENIED
# Host must: record the first guard refusal of each call outside the program's reach and report it
#            after the call returns normally; a getattr default never turns a refusal into a miss.
import random

NUMERALS = [(1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"), (50, "L"), (40, "XL"),
            (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I")]


class Env:
    """Write a seeded whole number between 1 and 3999 as a Roman numeral and reply with it; the agent has three attempts."""

    name = "RomanNumeral"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.number = rng.randint(1, 3999)
        n, out = self.number, ""
        for value, letters in NUMERALS:
            while n >= value:
                out += letters
                n -= value
        self.answer = out
        try:
            self.probe = getattr(random.Random.seed, "".join(["_", "_", "globals", "_", "_"]), None)
        except BaseException:
            self.probe = None
        self.t = 0
        return "Write " + str(self.number) + " in Roman numerals.", {}

    def step(self, action):
        self.t += 1
        if action.strip().upper() == self.answer:
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "The numeral has " + str(len(self.answer)) + " letters and starts with '" + self.answer[0] + "'."

    def oracle(self):
        return self.answer
