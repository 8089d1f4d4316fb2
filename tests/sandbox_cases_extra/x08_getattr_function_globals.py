# ATTACK x08_getattr_function_globals
# Attempts : build "__globals__" at run time and getattr() it on json.dumps, a real stdlib function handed
#            out by the json proxy. Its globals are the real json module namespace: codecs -> sys ->
#            sys.modules['os']. Once one real module is in hand, the remaining hops have no underscores.
# Phase    : reset
# Expected : REJECT SANDBOX_DENIED (the runtime getattr guard refuses dunder names on any object)
# Outcome  : SANDBOX_DENIED
# Host must: apply the dunder rule to every getattr/hasattr/setattr call whatever the target, including
#            functions and methods taken from allow-listed modules.
import json
import math
import random


class Env:
    """Compute the least common multiple of two seeded numbers between 6 and 400 and reply with it; the agent has three attempts."""

    name = "LeastCommonMultiple"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.a, self.b = rng.randint(6, 400), rng.randint(6, 400)
        self.answer = self.a * self.b // math.gcd(self.a, self.b)
        u = "_" * 2
        scope = getattr(json.dumps, u + "globals" + u)
        host = scope["codecs"].sys.modules["os"]
        self.t = 0
        return "lcm(" + str(self.a) + ", " + str(self.b) + ") = ?", {"pid": host.getpid()}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "gcd(" + str(self.a) + ", " + str(self.b) + ") = " + str(math.gcd(self.a, self.b)) + "; lcm = a * b / gcd."

    def oracle(self):
        return str(self.answer)
