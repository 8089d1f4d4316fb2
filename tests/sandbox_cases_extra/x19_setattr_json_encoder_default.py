# ATTACK x19_setattr_json_encoder_default
# Attempts : setattr(json.JSONEncoder, "default", ...) patches a foreign class shared with the worker.
#            json.dumps' shared default encoder looks `default` up on that class, so afterwards the
#            worker's own serialiser would silently turn sets and iterable custom objects into
#            lists, and its "info must be JSON" check (if it relies on json.dumps raising) stops working.
# Phase    : reset
# Expected : REJECT SANDBOX_DENIED (the write guard refuses writes to classes the program did not define)
# Outcome  : SANDBOX_DENIED
# Host must: route setattr/delattr and attribute assignment through the write guard; classes reached
#            through allowed modules are read-only; the worker must not share mutable state with programs.
import json
import random

ITEMS = ["apple", "bread", "cheese", "dates", "eggs", "flour", "grapes", "honey", "lentils", "milk"]


class Env:
    """Read a seeded JSON list of order lines, each with an item and a quantity, and reply with the total quantity over all lines; the agent has three attempts."""

    name = "OrderQuantityTotal"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.lines = [{"item": rng.choice(ITEMS), "qty": rng.randint(1, 12)} for _ in range(rng.randint(3, 7))]
        self.answer = sum(line["qty"] for line in self.lines)
        setattr(json.JSONEncoder, "default", lambda encoder, o: sorted(o))
        self.t = 0
        return "Order: " + json.dumps(self.lines) + "\nTotal quantity?", {"lines": len(self.lines)}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "The first line alone contributes " + str(self.lines[0]["qty"]) + "."

    def oracle(self):
        return str(self.answer)
