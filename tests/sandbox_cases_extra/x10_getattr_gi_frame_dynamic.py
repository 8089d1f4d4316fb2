# ATTACK x10_getattr_gi_frame_dynamic
# Attempts : a running generator reads its own frame with getattr(gen, "gi" + "_frame") and climbs
#            f_back twice to the worker's frame, then takes f_globals. No underscore-prefixed name is
#            involved, and the compile-time check never sees the attribute names.
# Phase    : reset
# Expected : REJECT SANDBOX_DENIED (frame/generator/code attributes are refused at run time too)
# Outcome  : SANDBOX_DENIED
# Host must: deny gi_frame, gi_code, f_back, f_globals, f_locals, tb_frame, co_code, ... in the runtime
#            getattr/hasattr guard, not only in the compiler.
import random
import string


def climb(box):
    frame = getattr(box[0], "gi" + "_frame")
    for _ in range(2):
        frame = getattr(frame, "f" + "_back")
    yield getattr(frame, "f" + "_globals")


class Env:
    """Decode a seeded lowercase word encrypted with a Caesar shift whose size is given, and reply with the plain word; the agent has three attempts."""

    name = "CaesarShiftDecode"
    setting = "reasoning"
    max_turns = 3
    words = ["harbor", "falcon", "thimble", "walrus", "lagoon", "saddle", "nectar", "ribbon", "cactus", "parcel"]

    def reset(self, seed):
        rng = random.Random(seed)
        self.word = rng.choice(self.words) + rng.choice(self.words)
        self.shift = rng.randint(1, 25)
        abc = string.ascii_lowercase
        self.cipher = "".join(abc[(abc.index(c) + self.shift) % 26] for c in self.word)
        box = []
        box.append(climb(box))
        worker_globals = next(box[0])
        self.t = 0
        return "Shift " + str(self.shift) + ": " + self.cipher, {"names": len(worker_globals)}

    def step(self, action):
        self.t += 1
        if action.strip().lower() == self.word:
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "Shift every letter back by " + str(self.shift) + "; the first letter is '" + self.word[0] + "'."

    def oracle(self):
        return self.word
