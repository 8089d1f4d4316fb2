# ATTACK x13_format_index_traversal
# Attempts : item traversal in a format field, "{0[__builtins__]}". The lookup happens in C, outside the
#            `_getitem_` hook that RestrictedPython routes every subscript through, and a field filter
#            that looks only for "." (attribute walks) lets "[...]" fields through; on a globals-like
#            mapping this reads __builtins__.
# Phase    : reset
# Expected : REJECT SANDBOX_DENIED (format fields with item traversal are refused, like attribute walks)
# Outcome  : SANDBOX_DENIED
# Host must: refuse "[" as well as "." in every format field name (top level and nested in specs).
import random
import string


class Env:
    """Score a seeded six-letter word by adding its letter values (a = 1 up to z = 26) and reply with the total; the agent has three attempts."""

    name = "WordValue"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.word = "".join(rng.choice(string.ascii_lowercase) for _ in range(6))
        self.answer = sum(string.ascii_lowercase.index(c) + 1 for c in self.word)
        scope = {"__builtins__": {"len": len}, "word": self.word}
        banner = "{0[__builtins__]}".format(scope)
        self.t = 0
        return "Value of '" + self.word + "'? " + banner, {}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "'" + self.word[0] + "' is worth " + str(string.ascii_lowercase.index(self.word[0]) + 1) + "."

    def oracle(self):
        return str(self.answer)
