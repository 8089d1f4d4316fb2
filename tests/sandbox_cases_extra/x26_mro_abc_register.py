# ATTACK x26_mro_abc_register
# Attempts : Fraction.mro() reaches numbers.Rational/numbers.Real (the numbers module itself is never
#            exposed). ABCMeta.register() is a public method, not an attribute write, yet it mutates the
#            worker-wide ABC registry: afterwards isinstance(Points(...), numbers.Real) is True in the worker,
#            so a host that validates rewards with numbers.Real would take a program object as a reward.
# Phase    : reset
# Expected : REJECT SANDBOX_DENIED (mro is a denied attribute at run time)
# Outcome  : SANDBOX_DENIED
# Host must: deny `mro` (and other class-graph accessors) at run time; validate outputs with exact type
#            checks (`type(x) is float`), never with ABCs the program could register into.
import fractions
import math
import random


class Points:
    def __init__(self, value):
        self.value = value


class Env:
    """Reduce a seeded fraction with numerator and denominator below five hundred to lowest terms and reply with it as p/q; the agent has three attempts."""

    name = "ReduceFraction"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        k = rng.randint(2, 12)
        self.p, self.q = k * rng.randint(1, 40), k * rng.randint(1, 40)
        f = fractions.Fraction(self.p, self.q)
        self.answer = str(f.numerator) + "/" + str(f.denominator)
        fractions.Fraction.mro()[2].register(Points)
        self.t = 0
        return "Reduce " + str(self.p) + "/" + str(self.q) + " to lowest terms (p/q).", {}

    def step(self, action):
        self.t += 1
        if action.strip().replace(" ", "") == self.answer:
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "The greatest common divisor of " + str(self.p) + " and " + str(self.q) + " is " + str(math.gcd(self.p, self.q)) + "."

    def oracle(self):
        return self.answer
