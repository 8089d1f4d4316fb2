# ATTACK x05_guard_hook_rebind_walrus
# Attempts : rebind the write-guard hook `_write_` in the module globals. RestrictedPython-compiled code
#            looks its hooks up by name, so `_write_ = lambda ob: ob` would switch the write guard off for
#            the whole program. The binding hides in an assignment expression inside a comprehension,
#            which binds in the module scope; the payload then patches a foreign class.
# Phase    : compile
# Expected : REJECT COMPILE_REJECTED (guard-hook names such as _write_ / _getattr_ may not be bound)
# Outcome  : COMPILE_REJECTED
# Host must: refuse binding any hook name (`_x_` form, `_print`) in every binding position: assignment,
#            walrus, for/with/except targets, parameters, imports, def/class names.
import random

hooks = [(_write_ := (lambda ob: ob)) for ob in [0]]


class Env:
    """Sort the letters of a seeded word of seven to ten letters alphabetically and reply with the sorted string; the agent has three attempts."""

    name = "SortedLetters"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(7, 10)))
        self.answer = "".join(sorted(self.word))
        random.Random.shuffle = lambda rng_self, x: None
        self.t = 0
        return "Sort the letters of '" + self.word + "'.", {}

    def step(self, action):
        self.t += 1
        if action.strip() == self.answer:
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "The first letter of the sorted string is '" + self.answer[0] + "'."

    def oracle(self):
        return self.answer
