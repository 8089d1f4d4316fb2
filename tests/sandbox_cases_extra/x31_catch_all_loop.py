# ATTACK x31_catch_all_loop
# Attempts : oracle() spins in a loop that catches every BaseException and goes on spinning. Deadlines
#            delivered as an exception inside the worker (signal handler raising, async exception from
#            a watchdog thread, KeyboardInterrupt, a guard raising GuardViolation) are simply swallowed.
# Phase    : oracle (first oracle() call)
# Expected : REJECT TIMEOUT (the per-call deadline kills the worker from outside)
# Outcome  : TIMEOUT
# Host must: stop a call that overruns by killing the worker process (SIGKILL), never by raising inside it.
import random


class Env:
    """Count the positive divisors of a seeded whole number between 2 and 100000 and reply with the count; the agent has three attempts."""

    name = "DivisorCount"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.n = rng.randint(2, 100000)
        self.answer = sum(2 if d * d != self.n else 1 for d in range(1, int(self.n ** 0.5) + 1) if self.n % d == 0)
        self.t = 0
        return "How many positive divisors does " + str(self.n) + " have?", {}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "Pair each divisor d up to sqrt(n) with n / d; sqrt(" + str(self.n) + ") is about " + str(int(self.n ** 0.5)) + "."

    def oracle(self):
        while True:
            try:
                while True:
                    pass
            except BaseException:
                continue
        return str(self.answer)
