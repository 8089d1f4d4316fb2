# ATTACK x39_info_int_keys
# Attempts : info holds a dict with int keys (and a bool key). json.dumps silently turns 3 into "3" and
#            True into "true", so serialisation succeeds with different keys than the program returned
#            (and {1: .., "1": ..} would collide).
# Phase    : reset
# Expected : REJECT PROTOCOL_ERROR (every dict key in info must be exactly str)
# Outcome  : PROTOCOL_ERROR
# Host must: check `type(k) is str` for the keys of every dict inside info, at every depth.
import collections
import random


class Env:
    """Reply with the face that came up most often in a seeded series of thirty rolls of a six-sided die, taking the smallest face on ties; the agent has three attempts."""

    name = "MostCommonRoll"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.rolls = [rng.randint(1, 6) for _ in range(30)]
        counts = collections.Counter(self.rolls)
        top = max(counts.values())
        self.answer = min(face for face in counts if counts[face] == top)
        self.t = 0
        info = {"faces": {face: 0 for face in range(1, 7)}, "flags": {True: "rolled"}}
        return "Rolls: " + " ".join(str(r) for r in self.rolls) + ". Most common face?", info

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "The most common face came up " + str(collections.Counter(self.rolls)[self.answer]) + " times."

    def oracle(self):
        return str(self.answer)
