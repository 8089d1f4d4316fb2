# ATTACK x35_nested_list_repr
# Attempts : build a list nested 100000 levels deep (cheap, iterative) and str() it for the observation.
#            repr recurses in C; with the recursion limit at 1000 it raises RecursionError, and a worker
#            that raised the limit (or catches too little) would overflow the C stack and die.
# Phase    : reset
# Expected : REJECT ENV_EXCEPTION (RecursionError inside the call, reported as the program's error)
# Outcome  : ENV_EXCEPTION
# Host must: keep the default recursion limit in the worker, catch every BaseException of a call and
#            report it as text; a dead worker must not take the host down.
import random


class Env:
    """Reply with how deep a seeded nesting of square brackets around a number goes, i.e. the number of opening brackets before the number; the agent has three attempts."""

    name = "BracketDepth"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.depth = rng.randint(3, 12)
        self.inner = rng.randint(0, 9)
        board = self.inner
        for _ in range(self.depth):
            board = [board]
        deep = board
        for _ in range(100000):
            deep = [deep]
        self.preview = str(deep)[:10]
        self.t = 0
        return "How deep is " + str(board) + "?", {}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.depth):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "Count the '[' characters before the digit " + str(self.inner) + "."

    def oracle(self):
        return str(self.depth)
