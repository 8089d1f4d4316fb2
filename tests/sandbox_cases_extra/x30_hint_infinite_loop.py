# ATTACK x30_hint_infinite_loop
# Attempts : hint() never returns. reset/step/oracle are all fine, so a host that puts deadlines only
#            on reset and step (or calls hint() in the host process or without a deadline) hangs.
# Phase    : hint (first hint() call)
# Expected : REJECT TIMEOUT (every program call, hint included, has the per-call deadline)
# Outcome  : TIMEOUT
# Host must: run hint() and oracle() in the worker under the same per-call deadline as reset/step.
import random


class Env:
    """Find the smallest prime number greater than a seeded whole number between 100 and 20000 and reply with it; the agent has three attempts."""

    name = "NextPrime"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.n = rng.randint(100, 20000)
        k = self.n + 1
        while any(k % d == 0 for d in range(2, int(k ** 0.5) + 1)):
            k += 1
        self.answer = k
        self.t = 0
        return "Smallest prime greater than " + str(self.n) + "?", {}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        while True:
            pass
        return "It is less than " + str(2 * self.n) + "."

    def oracle(self):
        return str(self.answer)
