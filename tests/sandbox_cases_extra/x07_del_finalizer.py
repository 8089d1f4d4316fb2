# ATTACK x07_del_finalizer
# Attempts : a helper class defines __del__. A finalizer runs whenever the object is collected: between
#            calls, inside the worker's own serialisation or exception handling, or at interpreter exit,
#            i.e. outside every per-call deadline and violation record. This one never returns.
# Phase    : compile
# Expected : REJECT COMPILE_REJECTED (__del__ is a dunder name outside the allowed magic methods)
# Outcome  : COMPILE_REJECTED
# Host must: allow only an explicit list of magic-method definitions; __del__ (and __getattr__,
#            __init_subclass__, __set_name__, __class_getitem__, ...) stay refused.
import random


class Scratch:
    def __init__(self, items):
        self.items = list(items)

    def __del__(self):
        while True:
            self.items.append(0)


class Env:
    """Find the one number missing from a seeded shuffled list containing every whole number from 1 to n except one, with n between 10 and 30; the agent has three attempts."""

    name = "MissingNumber"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        n = rng.randint(10, 30)
        self.answer = rng.randint(1, n)
        self.numbers = [k for k in range(1, n + 1) if k != self.answer]
        rng.shuffle(self.numbers)
        self.scratch = Scratch(self.numbers)
        self.t = 0
        return "1.." + str(n) + " minus one number: " + " ".join(str(k) for k in self.numbers), {}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "The numbers shown add up to " + str(sum(self.numbers)) + "; compare with 1 + 2 + ... + n."

    def oracle(self):
        return str(self.answer)
