# ATTACK x15_str_subclass_attr_name
# Attempts : pass getattr() a str subclass whose startswith() always answers False. A guard written as
#            `if name.startswith("_"): deny` calls the program's override and waves "__globals__" through,
#            while the real getattr() uses the underlying string value.
# Phase    : load (class creation) or reset (the getattr call)
# Expected : REJECT SANDBOX_DENIED (deriving from str is refused, or the guard requires type(name) is str)
# Outcome  : SANDBOX_DENIED
# Host must: require `type(name) is str` in every attribute guard and never call methods of a
#            program-supplied name object; keep str out of the allowed base classes.
import random


class Name(str):
    def startswith(self, prefix, *args):
        return False


class Env:
    """Count the positions at which two seeded sixteen-bit binary strings differ (their Hamming distance) and reply with the count; the agent has three attempts."""

    name = "HammingDistance"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.a = "".join(rng.choice("01") for _ in range(16))
        self.b = "".join(rng.choice("01") for _ in range(16))
        self.answer = sum(1 for x, y in zip(self.a, self.b) if x != y)
        scope = getattr(self.reset, Name("__globals__"))
        self.t = 0
        return self.a + "\n" + self.b + "\nHow many positions differ?", {"names": len(scope)}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "In the first eight positions they differ " + str(sum(1 for x, y in zip(self.a[:8], self.b[:8]) if x != y)) + " times."

    def oracle(self):
        return str(self.answer)
