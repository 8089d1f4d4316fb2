# ATTACK x42_info_nan
# Attempts : info holds float('nan') and float('inf'). json.dumps writes them as NaN / Infinity by default
#            (allow_nan=True): not JSON, and many JSON parsers on the other side reject or mangle them.
# Phase    : step 1
# Expected : REJECT PROTOCOL_ERROR (info floats must be finite)
# Outcome  : PROTOCOL_ERROR
# Host must: reject non-finite floats anywhere in info (and serialise with allow_nan=False).
import random


class Env:
    """Reply with the average of a seeded list of five whole numbers, rounded down to a whole number; the agent has three attempts."""

    name = "FloorAverage"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.numbers = [rng.randint(0, 1000) for _ in range(5)]
        self.answer = sum(self.numbers) // 5
        self.t = 0
        return "Average (rounded down) of " + " ".join(str(n) for n in self.numbers) + "?", {}

    def step(self, action):
        self.t += 1
        ok = action.strip() == str(self.answer)
        info = {"error_estimate": float("nan"), "error_bound": float("inf")}
        return ("correct" if ok else "wrong"), (1.0 if ok else 0.0), ok, (not ok) and self.t >= self.max_turns, info

    def hint(self):
        return "The numbers add up to " + str(sum(self.numbers)) + "."

    def oracle(self):
        return str(self.answer)
