# ATTACK x34_print_amplification
# Attempts : one print() call with a million references to the same 1 KB string. The program holds only
#            ~8 MB, but the printed text is 1 GB: a collector that joins the whole text before checking
#            its size (or a cap checked per print call) is defeated by a single call.
# Phase    : reset
# Expected : REJECT OUTPUT_LIMIT (a bounded collector stops at 64 KiB while writing); a collector that
#            materialises the text first fails with MemoryError instead (MEMORY_LIMIT)
# Outcome  : OUTPUT_LIMIT|MEMORY_LIMIT
# Host must: count printed bytes incrementally (per object / per chunk) and stop at the cap before
#            building the text.
import random


class Env:
    """Reply with the product of two seeded three-digit numbers; the agent has three attempts."""

    name = "ThreeDigitProduct"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.a, self.b = rng.randint(100, 999), rng.randint(100, 999)
        self.answer = self.a * self.b
        row = "-" * 1000
        print(*([row] * 1000000))
        self.t = 0
        return str(self.a) + " * " + str(self.b) + " = ?", {}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return str(self.a) + " * " + str(self.b // 100 * 100) + " = " + str(self.a * (self.b // 100 * 100)) + "; add the rest."

    def oracle(self):
        return str(self.answer)
