import random
import re

INT_GUESS = re.compile(r"^\s*(-?\d{1,12})\s*\.?\s*$")
WIDTHS = [100, 1000, 10000, 100000]
SLACK = [2, 1, 1, 0]


def guesses_needed(width):
    """Worst-case number of guesses binary search needs on a range of width numbers."""
    count = 0
    while width > 0:
        width = width // 2
        count += 1
    return count


class Env:
    """Find a seeded secret integer in a higher/lower guessing game: the range grows from 100 to 100000 numbers with difficulty and is shifted by a seeded offset, the agent answers one integer per turn and is told "higher" or "lower" after each wrong guess, the guess budget is only the binary-search worst case plus at most two spare guesses (none at the top difficulty), so the agent must halve the range consistently with all feedback so far; guessing the secret pays 1.0."""

    name = "HigherLowerSecret"
    setting = "game"
    max_turns = 20

    def __init__(self):
        self.low = 1
        self.high = 100
        self.lo_known = 1
        self.hi_known = 100
        self.secret = 1
        self.budget = 1
        self.turn = 0
        self.done = False
        self.difficulty = 0
        self.history = []

    def reset(self, seed):
        rng = random.Random(seed)
        self.difficulty = rng.randint(0, 3)
        width = WIDTHS[self.difficulty]
        self.low = rng.randint(0, 9) * width // 10 + rng.randint(0, 5)
        self.high = self.low + width - 1
        self.secret = rng.randint(self.low, self.high)
        self.lo_known = self.low
        self.hi_known = self.high
        self.budget = min(self.max_turns, guesses_needed(width) + SLACK[self.difficulty])
        self.turn = 0
        self.done = False
        self.history = []
        info = {"difficulty": self.difficulty, "low": self.low, "high": self.high, "guesses": self.budget}
        obs = ("I picked a secret whole number from " + str(self.low) + " to " + str(self.high)
               + " (both included). Guess it: answer with one integer per turn. After each wrong guess I say "
               "whether the secret is higher or lower. You have " + str(self.budget) + " guesses.")
        return obs, info

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, {"difficulty": self.difficulty, "turn": self.turn}
        self.turn += 1
        text = str(action)
        match = INT_GUESS.match(text)
        reward = 0.0
        terminated = False
        left = self.budget - self.turn
        if match is None:
            msg = ("Could not read a single integer from " + repr(text[:30]) + "; the guess is wasted.")
        else:
            guess = int(match.group(1))
            self.history.append(guess)
            if guess == self.secret:
                terminated = True
                reward = 1.0
                msg = "Correct! The secret was " + str(self.secret) + ", found in " + str(self.turn) + " guesses."
            elif guess < self.secret:
                self.lo_known = max(self.lo_known, guess + 1)
                msg = str(guess) + " is too low: the secret is higher."
            else:
                self.hi_known = min(self.hi_known, guess - 1)
                msg = str(guess) + " is too high: the secret is lower."
        truncated = (not terminated) and (self.turn >= self.budget or self.turn >= self.max_turns)
        if terminated or truncated:
            self.done = True
        if not terminated:
            if truncated:
                msg = msg + " No guesses left; the secret was " + str(self.secret) + "."
            else:
                msg = msg + " Guesses left: " + str(left) + "."
        info = {"difficulty": self.difficulty, "turn": self.turn, "guesses_left": max(left, 0),
                "solved": terminated}
        return msg, reward, terminated, truncated, info

    def hint(self):
        # bounds are stated exclusively (never the secret itself, which would give the answer away)
        lo, hi = self.lo_known, self.hi_known
        size = hi - lo + 1
        if size <= 4:
            mid = (lo + hi) // 2
            half = "below " + str(mid + 1) if self.secret <= mid else "above " + str(mid)
            return ("Everything so far leaves at most four numbers possible; the secret is " + half
                    + ". Always guess the middle of the numbers still possible.")
        quarter = (size + 3) // 4
        index = (self.secret - lo) // quarter
        a = lo + index * quarter
        b = min(hi, a + quarter - 1)
        return ("The secret is above " + str(a - 1) + " and below " + str(b + 1) + ", a quarter of the numbers "
                "the feedback so far allows. Keep guessing the middle of the numbers still possible so that every "
                "answer halves them.")

    def oracle(self):
        return str((self.lo_known + self.hi_known) // 2)
