# ATTACK x36_exception_str_raises
# Attempts : step() raises an exception whose __str__ and __repr__ raise again. The worker's handler that
#            turns the exception into text (str(exc), traceback formatting, repr in a log line) itself
#            raises, and an unguarded handler crashes the worker or loses the reply.
# Phase    : step 1
# Expected : REJECT ENV_EXCEPTION (reported with the type name and a fallback message)
# Outcome  : ENV_EXCEPTION
# Host must: stringify program exceptions defensively (try str(), fall back to the type name), never
#            call program code in the host process.
import random


class PuzzleError(Exception):
    def __str__(self):
        raise PuzzleError("while describing a puzzle error")

    def __repr__(self):
        raise PuzzleError("while describing a puzzle error")


class Env:
    """Reply with the number of distinct letters in a seeded string of twenty lowercase letters; the agent has three attempts."""

    name = "DistinctLetters"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.text = "".join(rng.choice("abcdefghijklmnop") for _ in range(20))
        self.answer = len(set(self.text))
        self.t = 0
        return "How many distinct letters in '" + self.text + "'?", {}

    def step(self, action):
        self.t += 1
        raise PuzzleError("step " + str(self.t) + " cannot be scored")

    def hint(self):
        return "The first five letters contain " + str(len(set(self.text[:5]))) + " distinct ones."

    def oracle(self):
        return str(self.answer)
