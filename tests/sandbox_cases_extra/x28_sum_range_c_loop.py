# ATTACK x28_sum_range_c_loop
# Attempts : sum(range(10**12)) in step(): a single C call that runs for hours without returning to the
#            bytecode loop, so in-process deadlines (signal.alarm handlers, sys.settrace/instruction
#            counters, a watchdog thread raising an exception) never get to run.
# Phase    : step 1
# Expected : REJECT TIMEOUT (the per-call deadline kills the worker from outside)
# Outcome  : TIMEOUT
# Host must: enforce the per-call deadline from the host process (kill and replace the worker), not by
#            anything that needs the worker's interpreter to cooperate.
import random


class Env:
    """Compute the n-th Fibonacci number modulo 1000 for a seeded n between 50 and 5000, with F(1) = F(2) = 1, and reply with it; the agent has three attempts."""

    name = "FibonacciMod"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.n = rng.randint(50, 5000)
        a, b = 0, 1
        for _ in range(self.n):
            a, b = b, (a + b) % 1000
        self.answer = a
        self.t = 0
        return "F(" + str(self.n) + ") mod 1000 = ?", {}

    def step(self, action):
        self.t += 1
        checksum = sum(range(10 ** 12)) % 1000
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {"checksum": checksum}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "Iterate a, b = b, (a + b) mod 1000 exactly " + str(self.n) + " times from (0, 1)."

    def oracle(self):
        return str(self.answer)
