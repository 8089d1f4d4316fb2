import random
import re

ROUNDS = 1
DIGITS = 2


class Env:
    """Compare two DIGITS-digit numbers (DIGITS >= 2) and answer with the larger one, for ROUNDS rounds (one more on harder seeds); an answer naming exactly one of the two numbers counts. Each right answer pays an equal share and a wrong one ends the episode, so success needs every round right. The hint says which digits to compare, then asks again."""

    name = "LargerOfTwo"
    setting = "reasoning"
    max_turns = ROUNDS + 1

    def __init__(self):
        self.pairs = []
        self.round = 0
        self.done = False

    def reset(self, seed):
        rng = random.Random(seed)
        n = ROUNDS + rng.randint(0, 1)
        self.pairs = []
        while len(self.pairs) < n:
            a, b = rng.sample(range(10 ** (DIGITS - 1), 10 ** DIGITS), 2)
            if str(a)[0] != str(b)[0]:
                self.pairs.append((a, b))
        self.round = 0
        self.done = False
        return self._question(), {"difficulty": n, "rounds": n}

    def _question(self):
        a, b = self.pairs[self.round]
        return ("Round " + str(self.round + 1) + " of " + str(len(self.pairs)) + ": which is larger, " + str(a)
                + " or " + str(b) + "? Answer with the larger number.")

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {"correct": False}
        a, b = self.pairs[self.round]
        named = set(re.findall(r"\d+", str(action))) & {str(a), str(b)}
        if named != {str(max(a, b))}:
            self.done = True
            return "Wrong. The game is over.", 0.0, True, False, {"correct": False}
        self.round += 1
        reward = 1.0 / len(self.pairs)
        if self.round == len(self.pairs):
            self.done = True
            return "Correct. All rounds done.", reward, True, False, {"correct": True}
        return "Correct. " + self._question(), reward, False, False, {"correct": True}

    def hint(self):
        return ("Look only at the first digit of each number: the number whose first digit is bigger is the "
                "larger one. Which number is larger?")

    def oracle(self):
        return str(max(self.pairs[self.round]))
