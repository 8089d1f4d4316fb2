# ATTACK x27_print_file_redirect
# Attempts : print(..., file=obj). RestrictedPython's stock print collector passes `file` straight to the
#            real print(), which then calls obj.write() from C: the output bypasses the per-call print cap
#            and any object with a write attribute becomes a print target.
# Phase    : reset
# Expected : REJECT SANDBOX_DENIED (print(file=...) is refused; print goes only to the capped collector)
# Outcome  : SANDBOX_DENIED
# Host must: implement print itself for programs: capture into a bounded buffer and refuse file=.
import random


class Sink:
    def __init__(self):
        self.parts = []

    def write(self, text):
        self.parts.append(text)

    def flush(self):
        pass


class Env:
    """Give the length of the longest run of equal consecutive letters in a seeded string of thirty letters from a to c; the agent has three attempts."""

    name = "LongestRun"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.text = "".join(rng.choice("abc") for _ in range(30))
        best, run, self.letter = 1, 1, self.text[0]
        for i in range(1, len(self.text)):
            run = run + 1 if self.text[i] == self.text[i - 1] else 1
            if run > best:
                best, self.letter = run, self.text[i]
        self.answer = best
        self.log = Sink()
        print("debug: answer", self.answer, file=self.log)
        self.t = 0
        return "Longest run of equal letters in " + self.text + "?", {}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "A longest run is made of the letter '" + self.letter + "'."

    def oracle(self):
        return str(self.answer)
