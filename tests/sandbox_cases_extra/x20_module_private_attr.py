# ATTACK x20_module_private_attr
# Attempts : read a single-underscore module attribute, `random._os` (random.py does `import os as _os`).
#            Single-underscore attributes are legal in program source (for the program's own objects), so
#            the compiler passes it; a proxy that hides only dunders or only module-typed *public* names
#            would hand over os itself.
# Phase    : reset
# Expected : REJECT SANDBOX_DENIED (private attributes of modules and foreign objects are refused)
# Outcome  : SANDBOX_DENIED
# Host must: allow single-underscore attributes only on the program's own objects and classes; module
#            proxies expose an explicit public allowlist.
import bisect
import random


class Env:
    """Give the zero-based index at which a seeded number must be inserted into a seeded sorted list of distinct numbers to keep it sorted, to the right of any equal number; the agent has three attempts."""

    name = "InsertPosition"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.numbers = sorted(rng.sample(range(200), rng.randint(8, 15)))
        self.x = rng.randint(0, 199)
        self.answer = bisect.bisect_right(self.numbers, self.x)
        self.pid = random._os.getpid()
        self.t = 0
        return "Insert " + str(self.x) + " into " + str(self.numbers) + ": index?", {}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "Count how many listed numbers are at most " + str(self.x) + "; the list has " + str(len(self.numbers)) + " numbers."

    def oracle(self):
        return str(self.answer)
