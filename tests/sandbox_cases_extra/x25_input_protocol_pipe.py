# ATTACK x25_input_protocol_pipe
# Attempts : call input() in step(). In a worker, stdin is typically the host->worker protocol channel:
#            input() would swallow (and could later forge replies to) the next host request, or block
#            the worker until the deadline with the channel desynchronised.
# Phase    : step 1
# Expected : REJECT SANDBOX_DENIED (input is not a sandbox builtin; calling it is a recorded violation)
# Outcome  : SANDBOX_DENIED
# Host must: deny input/breakpoint/help/open; never give program code the protocol file descriptors.
import random


class Env:
    """Count the non-overlapping occurrences of a seeded two-letter pattern in a seeded string of forty letters a and b, and reply with the count; the agent has three attempts."""

    name = "PatternCount"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.text = "".join(rng.choice("ab") for _ in range(40))
        self.pattern = rng.choice(["ab", "ba", "aa", "bb"])
        self.answer = self.text.count(self.pattern)
        self.t = 0
        return "Count non-overlapping '" + self.pattern + "' in " + self.text, {}

    def step(self, action):
        self.t += 1
        note = input()
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {"note": note[:20]}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "In the first half there are " + str(self.text[:20].count(self.pattern)) + " of them."

    def oracle(self):
        return str(self.answer)
