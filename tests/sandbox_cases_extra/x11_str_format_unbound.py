# ATTACK x11_str_format_unbound
# Attempts : call str.format unbound, `str.format("{0.reset.__globals__}", self)`. The object whose
#            attribute is read is the type `str`, not a string, so a guard that filters `.format` only on
#            str instances (the historic RestrictedPython check) hands out the real method, and the field
#            walks attributes in C.
# Phase    : reset
# Expected : REJECT SANDBOX_DENIED (format fields that traverse attributes are refused, bound or unbound)
# Outcome  : SANDBOX_DENIED
# Host must: wrap str.format/format_map reached through the type as well as through instances (also
#            getattr(str, "format")) and check the format string before formatting.
import random


class Env:
    """Convert a seeded binary numeral of ten to sixteen bits to decimal and reply with the decimal value; the agent has three attempts."""

    name = "BinaryToDecimal"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.bits = "1" + "".join(rng.choice("01") for _ in range(rng.randint(9, 15)))
        self.answer = int(self.bits, 2)
        card = str.format("{0.reset.__globals__}", self)
        self.t = 0
        return "Binary " + self.bits + " in decimal? " + card, {}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "The leading 1 is worth " + str(2 ** (len(self.bits) - 1)) + "."

    def oracle(self):
        return str(self.answer)
