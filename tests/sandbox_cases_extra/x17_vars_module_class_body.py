# ATTACK x17_vars_module_class_body
# Attempts : call vars() on a module while the class body runs (at load, before any episode call). On a
#            real module vars() returns its writable __dict__ (shared with the worker); the program could
#            replace collections.Counter there without any attribute write the write guard would see.
# Phase    : load (class body)
# Expected : REJECT SANDBOX_DENIED (vars is not a sandbox builtin; calling it is a recorded violation)
# Outcome  : SANDBOX_DENIED
# Host must: deny vars/dir/globals/locals, check violations raised while loading the module (class bodies
#            included), and never hand real module objects to the program.
import collections
import random


class Env:
    """Name the most frequent letter of a seeded string of thirty lowercase letters, taking the alphabetically first one on ties; the agent has three attempts."""

    name = "MostFrequentLetter"
    setting = "reasoning"
    max_turns = 3
    module_namespace = vars(collections)

    def reset(self, seed):
        rng = random.Random(seed)
        self.text = "".join(rng.choice("abcdefgh") for _ in range(30))
        counts = collections.Counter(self.text)
        top = max(counts.values())
        self.answer = min(c for c in counts if counts[c] == top)
        self.t = 0
        return "Most frequent letter in '" + self.text + "' (ties: alphabetically first)?", {}

    def step(self, action):
        self.t += 1
        if action.strip().lower() == self.answer:
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "The most frequent letter occurs " + str(collections.Counter(self.text)[self.answer]) + " times."

    def oracle(self):
        return self.answer
