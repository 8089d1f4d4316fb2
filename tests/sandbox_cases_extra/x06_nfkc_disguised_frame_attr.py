# ATTACK x06_nfkc_disguised_frame_attr
# Attempts : spell frame attributes in fullwidth letters (`gen.ｇｉ_ｆｒａｍｅ.ｆ_ｂａｃｋ...ｆ_ｇｌｏｂａｌｓ`). Python
#            NFKC-normalises identifiers while parsing, so this is `gen.gi_frame.f_back...f_globals` (the
#            running generator walks up to the worker's globals), but a checker that scans the source
#            text (regex / substring / tokenizer) for forbidden names sees none of them.
# Phase    : compile
# Expected : REJECT COMPILE_REJECTED (gi_frame / f_back / f_globals are restricted attribute names)
# Outcome  : COMPILE_REJECTED
# Host must: run every name check on the parsed (normalised) AST, never on the raw source text.
import random


def peek(box):
    yield box[0].ｇｉ_ｆｒａｍｅ.ｆ_ｂａｃｋ.ｆ_ｂａｃｋ.ｆ_ｇｌｏｂａｌｓ


class Env:
    """Count the vowels (a, e, i, o, u) in a seeded phrase of four lowercase words and reply with the count; the agent has three attempts."""

    name = "VowelCounter"
    setting = "reasoning"
    max_turns = 3
    words = ["lantern", "meadow", "copper", "orchard", "pebble", "velvet", "harbor", "quiet", "audio", "rhythm"]

    def reset(self, seed):
        rng = random.Random(seed)
        self.phrase = " ".join(rng.choice(self.words) for _ in range(4))
        self.answer = sum(1 for c in self.phrase if c in "aeiou")
        box = []
        box.append(peek(box))
        scope = next(box[0])
        self.t = 0
        return "How many vowels in '" + self.phrase + "'?", {"scope_size": len(scope)}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        first = self.phrase.split()[0]
        return "The first word, '" + first + "', has " + str(sum(1 for c in first if c in "aeiou")) + " vowels."

    def oracle(self):
        return str(self.answer)
