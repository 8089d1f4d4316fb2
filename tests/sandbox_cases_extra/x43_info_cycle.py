# ATTACK x43_info_cycle
# Attempts : info contains itself (info["self"] = info). A recursive validator recurses until
#            RecursionError (or overflows the C stack if the limit was raised), a naive iterative walker
#            loops forever, and json.dumps raises ValueError("Circular reference detected") in the reply code.
# Phase    : reset
# Expected : REJECT PROTOCOL_ERROR (the depth bound of 32 is exceeded; cycles are not JSON)
# Outcome  : PROTOCOL_ERROR
# Host must: validate info iteratively with a depth bound (and a node bound), which also stops cycles.
import random


class Env:
    """Reply with the number of words in a seeded sentence of five to fifteen short words; the agent has three attempts."""

    name = "WordCount"
    setting = "reasoning"
    max_turns = 3
    vocabulary = ["red", "fox", "ran", "up", "the", "hill", "and", "sat", "on", "a", "log", "by", "sea"]

    def reset(self, seed):
        rng = random.Random(seed)
        self.words = [rng.choice(self.vocabulary) for _ in range(rng.randint(5, 15))]
        self.answer = len(self.words)
        info = {"turn": 0}
        info["self"] = info
        self.t = 0
        return "How many words: '" + " ".join(self.words) + "'?", info

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "The sentence starts with '" + self.words[0] + "' and ends with '" + self.words[-1] + "'; count the spaces."

    def oracle(self):
        return str(self.answer)
