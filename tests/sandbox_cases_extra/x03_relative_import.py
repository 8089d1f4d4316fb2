# ATTACK x03_relative_import
# Attempts : `from . import protocol`. A relative import resolves against the __package__/__name__ of the
#            globals the program runs in; if the host execs it with globals that name its own package, the
#            program receives the host's sibling modules (worker protocol, policy) instead of an error.
# Phase    : compile (import allowlist)
# Expected : REJECT COMPILE_REJECTED (relative imports are refused statically)
# Outcome  : COMPILE_REJECTED
# Host must: refuse ImportFrom with level > 0 in the static check; the runtime import hook must refuse
#            level != 0 as well.
import random
from . import protocol


class Env:
    """Reverse a seeded string of eight to twelve lowercase letters and reply with the reversed string; the agent has three attempts."""

    name = "ReverseLetters"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.text = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(8, 12)))
        self.channel = protocol
        self.t = 0
        return "Reverse: " + self.text, {"length": len(self.text)}

    def step(self, action):
        self.t += 1
        if action.strip() == self.text[::-1]:
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "Your reply starts with '" + self.text[-1] + "' and ends with '" + self.text[0] + "'."

    def oracle(self):
        return self.text[::-1]
