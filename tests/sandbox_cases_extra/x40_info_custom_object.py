# ATTACK x40_info_custom_object
# Attempts : info holds an instance of a program class whose __repr__/__str__ never return and whose
#            __eq__/__hash__ raise. A validator or error message that calls repr()/str()/== on the bad
#            value (f"bad info value {v!r}", json default=str, `v in seen`) runs program code outside the
#            program's own call, and hangs or crashes there.
# Phase    : step 1
# Expected : REJECT PROTOCOL_ERROR (decided by exact type checks alone)
# Outcome  : PROTOCOL_ERROR
# Host must: validate info by `type(v)` only and describe bad values by type name; never call a method of
#            a program object while checking outputs.
import random


class Cell:
    def __init__(self, value):
        self.value = value

    def __repr__(self):
        while True:
            pass

    def __str__(self):
        while True:
            pass

    def __eq__(self, other):
        raise ValueError("no comparison")

    def __hash__(self):
        raise ValueError("no hashing")


class Env:
    """Reply with the sum of the numbers on the main diagonal of a seeded four-by-four grid of numbers from 1 to 9; the agent has three attempts."""

    name = "DiagonalSum"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.grid = [[rng.randint(1, 9) for _ in range(4)] for _ in range(4)]
        self.answer = sum(self.grid[i][i] for i in range(4))
        self.t = 0
        return "\n".join(" ".join(str(v) for v in row) for row in self.grid) + "\nDiagonal sum?", {}

    def step(self, action):
        self.t += 1
        ok = action.strip() == str(self.answer)
        info = {"corner": Cell(self.grid[0][0])}
        return ("correct" if ok else "wrong"), (1.0 if ok else 0.0), ok, (not ok) and self.t >= self.max_turns, info

    def hint(self):
        return "The top-left number is " + str(self.grid[0][0]) + "; go down and right from there."

    def oracle(self):
        return str(self.answer)
