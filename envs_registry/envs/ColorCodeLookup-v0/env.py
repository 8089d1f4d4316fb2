import random
import re

N_ITEMS = 2
COLORS = ["red", "blue", "green", "yellow", "black", "white", "orange", "purple", "pink", "brown"]
ORDINALS = ["first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth", "tenth"]


class Env:
    """Look up one code in a short list: the observation lists N_ITEMS colour-labelled four-digit codes (one more on harder seeds) and asks for the code of one colour; an answer naming that code and no other listed code pays 1.0 on the first attempt and 0.5 on the second. The hint says where in the list the asked code is, then asks again (a small model copies the last line it read)."""

    name = "ColorCodeLookup"
    setting = "reasoning"
    max_turns = 2

    def __init__(self):
        self.colors = []
        self.codes = {}
        self.asked = ""
        self.turn = 0
        self.done = False

    def reset(self, seed):
        rng = random.Random(seed)
        n = N_ITEMS + rng.randint(0, 1)
        self.colors = rng.sample(COLORS, n)
        self.codes = {c: str(k) for c, k in zip(self.colors, rng.sample(range(1000, 10000), n))}
        self.asked = rng.choice(self.colors)
        self.turn = 0
        self.done = False
        lines = [c + ": " + self.codes[c] for c in self.colors]
        obs = "Codes:\n" + "\n".join(lines) + "\nWhat is the " + self.asked + " code? Answer with the code only."
        return obs, {"difficulty": n, "items": n}

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {"correct": False}
        self.turn += 1
        named = set(re.findall(r"\d{4}", str(action))) & set(self.codes.values())
        correct = named == {self.codes[self.asked]}
        reward = [1.0, 0.5][self.turn - 1] if correct else 0.0
        truncated = not correct and self.turn >= self.max_turns
        self.done = correct or truncated
        obs = "Correct." if correct else "Wrong. What is the " + self.asked + " code?"
        return obs, reward, correct, truncated, {"correct": correct}

    def hint(self):
        place = ORDINALS[self.colors.index(self.asked)]
        return "The " + self.asked + " code is the " + place + " code in the list. What is the " + self.asked + " code?"

    def oracle(self):
        return self.codes[self.asked]
