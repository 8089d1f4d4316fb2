import random
import re

N_ITEMS = 2
WORDS = ["apple", "pear", "plum", "lemon", "grape", "melon", "peach", "mango", "kiwi", "fig", "lime", "date"]
NUMBER_WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven"]


class Env:
    """Count the words in a short comma-separated list of fruits (N_ITEMS words, up to three more on harder seeds) and answer with the count; the last number in the answer (digits or a number word) counts, paying 1.0 on the first attempt and 0.5 on the second. The hint counts along the list up to, not including, the last word, then asks again."""

    name = "CountListItems"
    setting = "reasoning"
    max_turns = 2

    def __init__(self):
        self.items = []
        self.turn = 0
        self.done = False

    def reset(self, seed):
        rng = random.Random(seed)
        n = N_ITEMS + rng.randint(0, 3)
        self.items = rng.sample(WORDS, n)
        self.turn = 0
        self.done = False
        obs = "List: " + ", ".join(self.items) + "\nHow many words are in the list? Answer with a number."
        return obs, {"difficulty": n, "items": n}

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {"correct": False}
        self.turn += 1
        pattern = r"\d+|" + "|".join(r"\b" + w + r"\b" for w in NUMBER_WORDS)
        found = re.findall(pattern, str(action).lower())
        value = -1 if not found else (int(found[-1]) if found[-1].isdigit() else NUMBER_WORDS.index(found[-1]))
        correct = value == len(self.items)
        reward = [1.0, 0.5][self.turn - 1] if correct else 0.0
        truncated = not correct and self.turn >= self.max_turns
        self.done = correct or truncated
        obs = "Correct." if correct else "Wrong. Count the words again."
        return obs, reward, correct, truncated, {"correct": correct}

    def hint(self):
        marks = [w + " is " + NUMBER_WORDS[i + 1] for i, w in enumerate(self.items[:-1])]
        return "Count along the list: " + ", ".join(marks) + ", and " + self.items[-1] + " comes next. How many words are in the list?"

    def oracle(self):
        return str(len(self.items))
