# ATTACK x16_type_three_arg
# Attempts : create a class with the three-argument form of type(). The class statement is routed through
#            the host's class builder, which checks the bases; type("Tag", (str,), {...}) builds a str
#            subclass (with a lying startswith) without that check.
# Phase    : reset
# Expected : REJECT SANDBOX_DENIED (type is not a sandbox builtin; calling it is a recorded violation)
# Outcome  : SANDBOX_DENIED
# Host must: replace type (and other class factories) in the program's builtins with a denying stub.
import random


class Env:
    """Compute the digital root of a seeded number below ten billion, i.e. add its digits repeatedly until one digit is left, and reply with it; the agent has three attempts."""

    name = "DigitalRoot"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.number = rng.randint(10 ** 6, 10 ** 10)
        n = self.number
        while n >= 10:
            n = sum(int(c) for c in str(n))
        self.answer = n
        Tag = type("Tag", (str,), {"startswith": lambda s, *a: False})
        self.tag = Tag("root")
        self.t = 0
        return "Digital root of " + str(self.number) + "?", {}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "One round of adding the digits gives " + str(sum(int(c) for c in str(self.number))) + "."

    def oracle(self):
        return str(self.answer)
