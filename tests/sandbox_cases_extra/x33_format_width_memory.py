# ATTACK x33_format_width_memory
# Attempts : an f-string whose format spec asks for a two-billion-character field width,
#            `f"{title:^2000000000}"`. The source is tiny and has no traversal (so any format check passes
#            it); the C formatter allocates 2 GB in one request.
# Phase    : reset
# Expected : REJECT MEMORY_LIMIT (MemoryError under the 1 GiB address-space cap)
# Outcome  : MEMORY_LIMIT
# Host must: cap worker memory and classify MemoryError raised anywhere in a call as MEMORY_LIMIT.
import random


class Env:
    """Convert a seeded temperature in whole degrees Celsius between -40 and 120 to Fahrenheit, rounded down to a whole number, and reply with it; the agent has three attempts."""

    name = "CelsiusToFahrenheit"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.celsius = rng.randint(-40, 120)
        self.answer = (self.celsius * 9) // 5 + 32
        title = "Temperature"
        banner = f"{title:^2000000000}"
        self.t = 0
        return banner.strip() + ": " + str(self.celsius) + " C in F (round down)?", {}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "F = C * 9 / 5 + 32; " + str(self.celsius) + " * 9 = " + str(self.celsius * 9) + "."

    def oracle(self):
        return str(self.answer)
