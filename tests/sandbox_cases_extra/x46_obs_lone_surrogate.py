# ATTACK x46_obs_lone_surrogate
# Attempts : the step observation contains a lone surrogate ('\ud800'), a valid Python str that is not
#            valid Unicode text. Encoding it as UTF-8 raises UnicodeEncodeError in the worker's reply code;
#            json.dumps with ensure_ascii escapes it silently and the host decodes a broken string.
# Phase    : step 1
# Expected : REJECT PROTOCOL_ERROR (observations must encode as strict UTF-8)
# Outcome  : PROTOCOL_ERROR
# Host must: check obs.encode("utf-8") (strict) per call and classify failure as PROTOCOL_ERROR rather
#            than crashing the worker's reply path.
import random


class Env:
    """Reply with the seeded word of six to ten lowercase letters written in uppercase; the agent has three attempts."""

    name = "Uppercase"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(6, 10)))
        self.t = 0
        return "Write '" + self.word + "' in uppercase.", {}

    def step(self, action):
        self.t += 1
        marker = chr(0xD800)
        if action.strip() == self.word.upper():
            return "correct " + marker, 1.0, True, False, {}
        return "wrong " + marker, 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "Only the case changes; the reply has " + str(len(self.word)) + " capital letters."

    def oracle(self):
        return self.word.upper()
