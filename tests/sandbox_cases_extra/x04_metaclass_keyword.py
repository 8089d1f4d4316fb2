# ATTACK x04_metaclass_keyword
# Attempts : `class Env(metaclass=Meta)`. The restricted compiler adds `metaclass=__metaclass__` to every
#            class so the host's class builder can check the bases; an explicit metaclass replaces that
#            hook, so classes are built without the base allow-list (and Meta.__call__ controls Env()).
# Phase    : compile
# Expected : REJECT COMPILE_REJECTED (the keyword argument "metaclass" is not allowed)
# Outcome  : COMPILE_REJECTED
# Host must: refuse any `metaclass=` keyword in a class statement at compile time.
import random


class Meta(type):
    """Builds classes without going through the host's class builder."""


class Env(metaclass=Meta):
    """Compute a seeded base raised to a seeded exponent modulo a seeded modulus, all below one thousand, and reply with the result; the agent has three attempts."""

    name = "ModularPower"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.a, self.b, self.m = rng.randint(2, 999), rng.randint(2, 999), rng.randint(7, 999)
        self.answer = pow(self.a, self.b, self.m)
        self.t = 0
        return str(self.a) + " ** " + str(self.b) + " mod " + str(self.m) + " = ?", {}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "Square and multiply: " + str(self.a) + " ** 2 mod " + str(self.m) + " = " + str(self.a * self.a % self.m) + "."

    def oracle(self):
        return str(self.answer)
