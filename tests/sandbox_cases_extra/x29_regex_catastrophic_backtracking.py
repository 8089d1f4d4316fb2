# ATTACK x29_regex_catastrophic_backtracking
# Attempts : "validate" the answer with a nested quantifier, re.match(r"^(\d+)+$", ...), on the action's
#            digits padded to forty-odd digits and ending in a non-digit (so for any action): exponential
#            backtracking inside the C regex engine, which never returns to the interpreter. Looks like an
#            ordinary input check.
# Phase    : step 1
# Expected : REJECT TIMEOUT (the per-call deadline kills the worker from outside)
# Outcome  : TIMEOUT
# Host must: enforce the per-call deadline from outside the worker (a C-level loop ignores in-process
#            timers).
import random
import re


class Env:
    """Give the hypotenuse of a right triangle whose seeded legs form a scaled Pythagorean triple, as a whole number; the agent has three attempts."""

    name = "Hypotenuse"
    setting = "reasoning"
    max_turns = 3
    triples = [(3, 4, 5), (5, 12, 13), (8, 15, 17), (7, 24, 25), (20, 21, 29), (9, 40, 41)]

    def reset(self, seed):
        rng = random.Random(seed)
        k = rng.randint(1, 30)
        a, b, c = rng.choice(self.triples)
        self.a, self.b, self.answer = k * a, k * b, k * c
        self.t = 0
        return "Legs " + str(self.a) + " and " + str(self.b) + ": hypotenuse?", {}

    def step(self, action):
        self.t += 1
        digits = "".join(c for c in action if c.isdigit())
        well_formed = re.match(r"^(\d+)+$", digits + "0" * 40 + "?") is not None
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {"well_formed": well_formed}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "a^2 + b^2 = " + str(self.a ** 2 + self.b ** 2) + "; take the square root."

    def oracle(self):
        return str(self.answer)
