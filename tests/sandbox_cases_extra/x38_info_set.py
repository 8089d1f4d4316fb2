# ATTACK x38_info_set
# Attempts : info holds a set (of guesses so far). json.dumps raises TypeError inside the worker's reply
#            code; a worker that does not expect that crashes or reports it as the program's exception.
#            Set iteration order also depends on PYTHONHASHSEED for str members.
# Phase    : step 1
# Expected : REJECT PROTOCOL_ERROR (info values must be JSON types)
# Outcome  : PROTOCOL_ERROR
# Host must: validate info before serialising and classify non-JSON values as PROTOCOL_ERROR.
import random


class Env:
    """Guess which of the twelve months a seeded calendar event falls in; after each wrong guess the agent is told whether the event is earlier or later in the year, and it has four guesses."""

    name = "GuessTheMonth"
    setting = "game"
    max_turns = 4
    months = ["january", "february", "march", "april", "may", "june", "july", "august", "september",
              "october", "november", "december"]

    def reset(self, seed):
        rng = random.Random(seed)
        self.month = rng.randrange(12)
        self.lo, self.hi = 0, 11
        self.tried = set()
        self.t = 0
        return "Which month is the event in? Reply with a month name.", {}

    def step(self, action):
        self.t += 1
        guess = action.strip().lower()
        self.tried.add(guess)
        if guess not in self.months:
            return "not a month", 0.0, False, self.t >= self.max_turns, {"tried": self.tried}
        k = self.months.index(guess)
        if k == self.month:
            return "correct", 1.0, True, False, {"tried": self.tried}
        if k < self.month:
            self.lo = max(self.lo, k + 1)
        else:
            self.hi = min(self.hi, k - 1)
        return ("later" if k < self.month else "earlier"), 0.0, False, self.t >= self.max_turns, {"tried": self.tried}

    def hint(self):
        return "It is between " + self.months[self.lo] + " and " + self.months[self.hi] + "; halve the range."

    def oracle(self):
        return self.months[(self.lo + self.hi) // 2]
