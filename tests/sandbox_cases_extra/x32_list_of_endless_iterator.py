# ATTACK x32_list_of_endless_iterator
# Attempts : list(itertools.count()) - materialise an endless iterator. One C call grows the list (plus a
#            fresh int per element) until memory runs out; nothing in it returns to the interpreter.
# Phase    : reset
# Expected : REJECT MEMORY_LIMIT (the 1 GiB address-space cap ends it within about a second); a slower
#            worker may hit the per-call deadline first (TIMEOUT)
# Outcome  : MEMORY_LIMIT|TIMEOUT
# Host must: cap the worker's memory (RLIMIT_AS or cgroup) and keep the per-call deadline outside it;
#            report MemoryError / an OOM kill as MEMORY_LIMIT, not as a crash.
import itertools
import random


class Env:
    """Compute the alternating sum of a seeded list of ten whole numbers below one hundred (first minus second plus third and so on) and reply with it; the agent has three attempts."""

    name = "AlternatingSum"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.numbers = [rng.randint(0, 99) for _ in range(10)]
        self.answer = sum(n if i % 2 == 0 else -n for i, n in enumerate(self.numbers))
        self.index = list(itertools.count())
        self.t = 0
        return "Alternating sum of " + " ".join(str(n) for n in self.numbers) + "?", {}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "The first two numbers contribute " + str(self.numbers[0] - self.numbers[1]) + "."

    def oracle(self):
        return str(self.answer)
