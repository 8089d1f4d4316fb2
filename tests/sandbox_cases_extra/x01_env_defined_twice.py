# ATTACK x01_env_defined_twice
# Attempts : define `class Env` twice. The module binds the second definition, so a checker that looks at
#            the first `class Env` it finds (or stops after one) approves a class that is never run; here
#            the two differ only in the puzzle, but the second could be anything.
# Phase    : compile (interface check)
# Expected : REJECT COMPILE_REJECTED (the module must define exactly one class named Env)
# Outcome  : COMPILE_REJECTED
# Host must: count every `class Env` statement in the module and refuse unless there is exactly one.
import random


class Env:
    """Add up the decimal digits of a seeded twelve-digit number and reply with the sum; the agent has three attempts."""

    name = "DigitSum"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.number = rng.randint(10 ** 11, 10 ** 12 - 1)
        self.answer = sum(int(c) for c in str(self.number))
        self.t = 0
        return "Sum of the digits of " + str(self.number) + "?", {}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "The first six digits add up to " + str(sum(int(c) for c in str(self.number)[:6])) + "."

    def oracle(self):
        return str(self.answer)


class Env:
    """Multiply the nonzero decimal digits of a seeded eight-digit number and reply with the product; the agent has three attempts."""
    name = "DigitProduct"
    setting = "reasoning"
    max_turns = 3
    def reset(self, seed):
        rng = random.Random(seed)
        self.number = rng.randint(10 ** 7, 10 ** 8 - 1)
        self.answer = 1
        for c in str(self.number):
            self.answer *= max(int(c), 1)
        self.t = 0
        return "Product of the nonzero digits of " + str(self.number) + "?", {}
    def step(self, action):
        self.t += 1
        ok = action.strip() == str(self.answer)
        return ("correct" if ok else "wrong"), (1.0 if ok else 0.0), ok, (not ok) and self.t >= self.max_turns, {}
    def hint(self):
        return "Skip the zeros; the first digit is " + str(self.number)[0] + "."
    def oracle(self):
        return str(self.answer)
