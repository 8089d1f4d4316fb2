# ATTACK x14_userstring_format
# Attempts : collections.UserString is a public, non-module attribute of an allowed module. Its format()
#            and format_map() are pure-Python stdlib methods that call `self.data.format(...)` with the
#            real str.format, so a guard that wraps `.format` only on str objects never sees the format
#            string: "{0.reset.__globals__}" walks attributes in C.
# Phase    : reset
# Expected : REJECT SANDBOX_DENIED (UserString is withheld, or its format/format_map are checked)
# Outcome  : SANDBOX_DENIED
# Host must: audit allow-listed modules for pure-Python helpers that reach unguarded primitives (str.format
#            via UserString, getattr via string.Formatter) and withhold or wrap them.
import collections
import fractions
import random


class Env:
    """Add two seeded fractions with denominators below twenty and reply with the sum in lowest terms as p/q; the agent has three attempts."""

    name = "FractionSum"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.x = fractions.Fraction(rng.randint(1, 19), rng.randint(2, 19))
        self.y = fractions.Fraction(rng.randint(1, 19), rng.randint(2, 19))
        s = self.x + self.y
        self.answer = str(s.numerator) + "/" + str(s.denominator)
        card = collections.UserString("{0.reset.__globals__}").format(self)
        self.t = 0
        return str(self.x) + " + " + str(self.y) + " = ? (p/q)\n" + str(card), {}

    def step(self, action):
        self.t += 1
        if action.strip().replace(" ", "") == self.answer:
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "A common denominator is " + str(self.x.denominator * self.y.denominator) + "; then reduce."

    def oracle(self):
        return self.answer
