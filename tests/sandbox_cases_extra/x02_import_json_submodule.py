# ATTACK x02_import_json_submodule
# Attempts : `import json.decoder`. json is allow-listed, json.decoder is not; a check that compares only
#            the first dotted component with the allowlist lets it through, and a host that then calls the
#            real __import__ binds the real `json` package (not a proxy), with codecs -> sys behind it.
# Phase    : compile (import allowlist)
# Expected : REJECT COMPILE_REJECTED (submodule imports are outside the allowlist)
# Outcome  : COMPILE_REJECTED
# Host must: compare the full dotted module name with the allowlist; the runtime import hook must refuse
#            dotted names too (backstop).
import json.decoder
import random


class Env:
    """Reply with a JSON object {"min": a, "max": b} giving the smallest and the largest number of a seeded list of eight integers; the agent has three attempts."""

    name = "MinMaxJson"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.numbers = [rng.randint(-500, 500) for _ in range(8)]
        self.t = 0
        return "Numbers: " + " ".join(str(n) for n in self.numbers) + '. Reply {"min": .., "max": ..}.', {}

    def step(self, action):
        self.t += 1
        try:
            got = json.decoder.JSONDecoder().decode(action)
        except ValueError:
            got = None
        ok = got == {"min": min(self.numbers), "max": max(self.numbers)}
        return ("correct" if ok else "wrong"), (1.0 if ok else 0.0), ok, (not ok) and self.t >= self.max_turns, {}

    def hint(self):
        return "Both values are in the list; the first number, " + str(self.numbers[0]) + ", is neither unless it is an extreme."

    def oracle(self):
        return json.dumps({"min": min(self.numbers), "max": max(self.numbers)})
