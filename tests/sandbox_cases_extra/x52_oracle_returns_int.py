# ATTACK x52_oracle_returns_int
# Attempts : oracle() returns the answer as an int, not the action string. reset/step/hint are fine and
#            step() even coerces with str(action), so a host that feeds oracle() straight into step() sees
#            a working oracle episode; actions are text everywhere else (agents, logs, replay files).
# Phase    : oracle (first oracle() call)
# Expected : REJECT PROTOCOL_ERROR (oracle() must return exactly str)
# Outcome  : PROTOCOL_ERROR
# Host must: type-check hint() and oracle() results per call (`type(x) is str`, strict UTF-8, bounded) like
#            observations.
import random


class Env:
    """Reply with the number of edges of a complete graph on a seeded number of vertices between 3 and 200; the agent has three attempts."""

    name = "CompleteGraphEdges"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.n = rng.randint(3, 200)
        self.answer = self.n * (self.n - 1) // 2
        self.t = 0
        return "How many edges does the complete graph on " + str(self.n) + " vertices have?", {}

    def step(self, action):
        self.t += 1
        if str(action).strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "Every pair of distinct vertices is joined once; there are " + str(self.n) + " vertices."

    def oracle(self):
        return self.answer
