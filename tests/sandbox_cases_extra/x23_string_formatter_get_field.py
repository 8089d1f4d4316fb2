# ATTACK x23_string_formatter_get_field
# Attempts : string.Formatter is pure Python; its get_field() resolves "0.reset.__globals__" with the real
#            builtin getattr inside the string module, so the attribute guard never runs. No format string
#            is even formatted: get_field returns the object itself.
# Phase    : reset
# Expected : REJECT SANDBOX_DENIED (string.Formatter is not exposed by the string proxy)
# Outcome  : SANDBOX_DENIED
# Host must: withhold string.Formatter (and anything else that performs attribute lookups on
#            program-supplied names with the unguarded getattr).
import random
import string


class Env:
    """Reply with the seeded lowercase word of eight to twelve letters with every vowel removed; the agent has three attempts."""

    name = "StripVowels"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.word = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(8, 12)))
        self.answer = "".join(c for c in self.word if c not in "aeiou")
        scope, _ = string.Formatter().get_field("0.reset.__globals__", [self], {})
        self.t = 0
        return "Remove the vowels from '" + self.word + "'.", {"names": len(scope)}

    def step(self, action):
        self.t += 1
        if action.strip() == self.answer:
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "The word has " + str(len(self.word) - len(self.answer)) + " vowels to remove."

    def oracle(self):
        return self.answer
