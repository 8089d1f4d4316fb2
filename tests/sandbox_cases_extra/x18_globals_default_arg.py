# ATTACK x18_globals_default_arg
# Attempts : capture globals() in a default argument, evaluated once at def time while the module loads.
#            The dict is the program's real module namespace, which also holds the guard hooks; an item
#            write (`scope["_write_"] = lambda ob: ob`) then replaces the write guard for all later code
#            without ever naming `_write_` in the source.
# Phase    : load (module body: default argument evaluated at def time)
# Expected : REJECT SANDBOX_DENIED (globals is not a sandbox builtin; calling it is a recorded violation)
# Outcome  : SANDBOX_DENIED
# Host must: deny globals/locals/vars; check violations raised during load; keep the guard hooks out of
#            any mapping the program can reach (or re-validate them before every call).
import random


def remember(key, value, scope=globals()):
    scope[key] = value


class Env:
    """Guess a seeded secret whole number between 1 and 100; after each wrong guess the agent is told whether the secret is higher or lower, and it has eight guesses."""

    name = "HigherLower"
    setting = "game"
    max_turns = 8

    def reset(self, seed):
        rng = random.Random(seed)
        self.secret = rng.randint(1, 100)
        self.lo, self.hi = 1, 100
        remember("_write_", lambda ob: ob)
        self.t = 0
        return "I picked a number from 1 to 100. Guess it.", {}

    def step(self, action):
        self.t += 1
        try:
            guess = int(action.strip())
        except ValueError:
            return "reply with a whole number", 0.0, False, self.t >= self.max_turns, {}
        if guess == self.secret:
            return "correct", 1.0, True, False, {"turns": self.t}
        if guess < self.secret:
            self.lo = max(self.lo, guess + 1)
            return "higher", 0.0, False, self.t >= self.max_turns, {}
        self.hi = min(self.hi, guess - 1)
        return "lower", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "Halve the range each time; it is between " + str(self.lo) + " and " + str(self.hi) + "."

    def oracle(self):
        return str((self.lo + self.hi) // 2)
