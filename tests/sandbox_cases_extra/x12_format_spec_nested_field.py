# ATTACK x12_format_spec_nested_field
# Attempts : hide the traversal in a nested replacement field inside the format spec:
#            "{0:{1.reset.__globals__}}". The top-level field name is a plain "0", so a checker that
#            inspects only field names (string.Formatter().parse's second item) accepts the string, while
#            str.format evaluates the nested field, attribute walk included, in C.
# Phase    : reset
# Expected : REJECT SANDBOX_DENIED (nested fields in format specs are checked like top-level fields)
# Outcome  : SANDBOX_DENIED
# Host must: recurse into format specs when checking format strings (bounded depth).
import heapq
import random


class Env:
    """Find the k-th smallest number of a seeded list of twelve distinct numbers below one thousand and reply with it; the agent has three attempts."""

    name = "KthSmallest"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.numbers = rng.sample(range(1000), 12)
        self.k = rng.randint(2, 10)
        self.answer = heapq.nsmallest(self.k, self.numbers)[-1]
        try:
            banner = "{0:{1.reset.__globals__}}".format("KthSmallest", self)
        except ValueError as exc:
            banner = str(exc)
        self.t = 0
        return banner + "\nk = " + str(self.k) + ", numbers: " + " ".join(str(n) for n in self.numbers), {}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "The smallest number is " + str(min(self.numbers)) + "; count up from there."

    def oracle(self):
        return str(self.answer)
