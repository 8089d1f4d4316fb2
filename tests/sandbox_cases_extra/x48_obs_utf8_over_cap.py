# ATTACK x48_obs_utf8_over_cap
# Attempts : an observation of about 300000 characters, almost all U+1D11E (4 bytes each in UTF-8): under
#            a 1 Mi *character* check, but about 1.2 MB once encoded, over the 1 MiB wire bound.
# Phase    : step 1
# Expected : REJECT OUTPUT_LIMIT (the observation bound is on UTF-8 bytes)
# Outcome  : OUTPUT_LIMIT
# Host must: measure observations (and info strings) in encoded bytes, not in characters.
import random


class Env:
    """Reply with the number of beats in a seeded bar of music written as note letters with durations in quarter beats, summed over all notes; the agent has three attempts."""

    name = "BeatCounter"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.notes = [(rng.choice("CDEFGAB"), rng.choice([1, 2, 4])) for _ in range(rng.randint(4, 9))]
        self.answer = sum(d for _, d in self.notes)
        self.t = 0
        return "Bar: " + " ".join(n + str(d) for n, d in self.notes) + " (durations in quarter beats). Total?", {}

    def step(self, action):
        self.t += 1
        staff = chr(0x1D11E) * 300000
        if action.strip() == str(self.answer):
            return staff + "\ncorrect", 1.0, True, False, {}
        return staff + "\nwrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "The first note, " + self.notes[0][0] + ", lasts " + str(self.notes[0][1]) + " quarter beats."

    def oracle(self):
        return str(self.answer)
