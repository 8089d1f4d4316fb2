# ATTACK x21_module_attr_fractions_sys
# Attempts : fractions.py does `import sys`, so the real fractions module has a public attribute `sys`:
#            one hop, no underscore, to sys.modules and every loaded module (os, subprocess, the worker).
#            A different module and a shorter route than json.codecs.sys.
# Phase    : reset
# Expected : REJECT SANDBOX_DENIED (module proxies expose no module-valued attributes)
# Outcome  : SANDBOX_DENIED
# Host must: build each proxy from an allowlist that excludes module-typed values (for every allowed
#            module, not only the ones with known chains).
import fractions
import random


class Env:
    """Count the trailing zeros of n factorial for a seeded n between 30 and 3000 and reply with the count; the agent has three attempts."""

    name = "FactorialTrailingZeros"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.n = rng.randint(30, 3000)
        k, self.answer = 5, 0
        while k <= self.n:
            self.answer += self.n // k
            k *= 5
        loaded = sorted(fractions.sys.modules)
        self.t = 0
        return "How many trailing zeros does " + str(self.n) + "! have?", {"modules": len(loaded)}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "Count factors of 5: multiples of 5 alone give " + str(self.n // 5) + "."

    def oracle(self):
        return str(self.answer)
