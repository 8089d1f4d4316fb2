# ATTACK x22_from_json_import_decoder
# Attempts : `from json import decoder`. The module is allow-listed, the name is a submodule. When the
#            attribute lookup on the imported object raises AttributeError, CPython's IMPORT_FROM falls
#            back to sys.modules[obj.__name__ + ".decoder"], so a proxy that answers __name__ = "json" and
#            raises a plain AttributeError for "decoder" still hands out the real json.decoder module.
# Phase    : compile (import check) or load (module body: the import runs)
# Expected : REJECT COMPILE_REJECTED or SANDBOX_DENIED (submodule names are refused statically, or the
#            proxy refuses "decoder" with a recorded violation and no sys.modules fallback)
# Outcome  : COMPILE_REJECTED|SANDBOX_DENIED
# Host must: refuse `from M import name` when name is a submodule (or not an exposed attribute), and make
#            the proxy's refusal a violation rather than an AttributeError the import machinery retries.
import json
import random
from json import decoder


class Env:
    """Reply with a JSON object mapping each of four seeded city names to its seeded population rank, 1 for the largest; the agent has three attempts."""

    name = "PopulationRanks"
    setting = "reasoning"
    max_turns = 3
    cities = ["Avalon", "Brindle", "Corvo", "Dunmore", "Elstow", "Fenwick", "Garrow", "Holm"]

    def reset(self, seed):
        rng = random.Random(seed)
        names = rng.sample(self.cities, 4)
        self.pop = {n: rng.randint(10, 999) * 1000 + i for i, n in enumerate(names)}
        order = sorted(names, key=lambda n: -self.pop[n])
        self.answer = {n: order.index(n) + 1 for n in names}
        self.t = 0
        return "Populations: " + json.dumps(self.pop) + '\nReply {"city": rank, ...}.', {}

    def step(self, action):
        self.t += 1
        try:
            got = decoder.JSONDecoder().decode(action)
        except ValueError:
            got = None
        ok = got == self.answer
        return ("correct" if ok else "wrong"), (1.0 if ok else 0.0), ok, (not ok) and self.t >= self.max_turns, {}

    def hint(self):
        big = max(self.pop, key=lambda n: self.pop[n])
        return big + " is the largest city."

    def oracle(self):
        return json.dumps(self.answer)
