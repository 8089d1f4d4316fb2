# ATTACK x37_info_tuple
# Attempts : info holds a tuple. json.dumps silently writes it as a list, so a host that "validates" info
#            by serialising it accepts a value that is not a JSON type and changes on a round trip.
# Phase    : reset
# Expected : REJECT PROTOCOL_ERROR (info values must be exactly dict/list/str/int/float/bool/None)
# Outcome  : PROTOCOL_ERROR
# Host must: walk info and check exact types (`type(v) is list`), not rely on json.dumps succeeding.
import random


class Env:
    """Reply with the number of cells in a seeded rectangular grid given by its row and column counts plus a seeded number of blocked cells to subtract; the agent has three attempts."""

    name = "OpenCells"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.rows, self.cols = rng.randint(3, 30), rng.randint(3, 30)
        self.blocked = rng.randint(0, self.rows)
        self.answer = self.rows * self.cols - self.blocked
        self.t = 0
        obs = "Grid " + str(self.rows) + " x " + str(self.cols) + " with " + str(self.blocked) + " blocked cells: open cells?"
        return obs, {"shape": (self.rows, self.cols)}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "The grid has " + str(self.rows) + " rows of " + str(self.cols) + " cells."

    def oracle(self):
        return str(self.answer)
