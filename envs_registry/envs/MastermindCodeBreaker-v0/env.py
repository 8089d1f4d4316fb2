import itertools
import random
from collections import Counter

PALETTE = "RGBYOPCM"
COLOR_NAMES = {"R": "red", "G": "green", "B": "blue", "Y": "yellow", "O": "orange", "P": "purple", "C": "cyan", "M": "magenta"}
LEVELS = [[3, 4], [4, 5], [4, 6], [5, 6]]


def score(guess, secret):
    """Mastermind feedback: [black, white] pegs."""
    black = 0
    for i in range(len(guess)):
        if guess[i] == secret[i]:
            black += 1
    cg = Counter(guess)
    cs = Counter(secret)
    common = 0
    for c in sorted(cg.keys()):
        common += min(cg[c], cs[c])
    return [black, common - black]


class Env:
    """Crack a seeded Mastermind code by deduction: the secret is a row of three to five colour pegs (colours may repeat) drawn from a seeded set of four to six colours written as letters, the agent guesses a full row such as "RGBY" and after each guess is told how many pegs are the right colour in the right place (black) and how many more are the right colour in the wrong place (white); malformed guesses are explained and cost a turn, and guessing the exact code within the turn limit pays 1.0."""

    name = "MastermindCodeBreaker"
    setting = "game"
    max_turns = 12

    def __init__(self):
        self.length = 3
        self.colors = "RGBY"
        self.secret = ""
        self.history = []
        self.turn = 0
        self.done = False
        self.difficulty = 0
        self.reveal = 0

    def reset(self, seed):
        rng = random.Random(seed)
        self.difficulty = rng.randint(0, 3)
        self.length = LEVELS[self.difficulty][0]
        chosen = rng.sample(list(range(len(PALETTE))), LEVELS[self.difficulty][1])
        self.colors = "".join([PALETTE[i] for i in sorted(chosen)])
        self.secret = "".join([rng.choice(self.colors) for i in range(self.length)])
        self.reveal = rng.randint(0, self.length - 1)
        self.history = []
        self.turn = 0
        self.done = False
        names = [c + "=" + COLOR_NAMES[c] for c in self.colors]
        obs = ("Mastermind. A secret code of " + str(self.length) + " pegs is hidden; each peg is one of the colours "
               + ", ".join(names) + " (colours may repeat).\n"
               + "Guess the code as " + str(self.length) + " letters, e.g. \"" + self.colors[:self.length].ljust(self.length, self.colors[0])
               + "\". After each guess you get black = pegs of the right colour in the right place and white = further pegs of a right colour in the wrong place. "
               + "You have " + str(self.max_turns) + " turns; a malformed guess is refused and still uses a turn.")
        info = {"difficulty": self.difficulty, "length": self.length, "colors": self.colors, "turn": 0}
        return obs, info

    def _info(self, valid):
        return {"difficulty": self.difficulty, "length": self.length, "colors": self.colors,
                "turn": self.turn, "valid": valid, "guesses": len(self.history)}

    def _parse(self, action):
        text = str(action).strip().upper()
        for ch in " ,-|[]\"'.":
            text = text.replace(ch, "")
        if len(text) != self.length:
            return None
        for ch in text:
            if ch not in self.colors:
                return None
        return text

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, self._info(False)
        self.turn += 1
        guess = self._parse(action)
        if guess is None:
            obs = ("Malformed guess: write exactly " + str(self.length) + " letters from " + self.colors
                   + " (e.g. \"" + self.colors[0] * self.length + "\").")
            valid = False
        else:
            valid = True
            if guess == self.secret:
                self.done = True
                return ("Guess " + guess + ": black=" + str(self.length) + " white=0. You cracked the code!",
                        1.0, True, False, self._info(True))
            fb = score(guess, self.secret)
            self.history.append([guess, fb[0], fb[1]])
            obs = "Guess " + guess + ": black=" + str(fb[0]) + " white=" + str(fb[1]) + "."
        truncated = self.turn >= self.max_turns
        if truncated:
            self.done = True
            obs = obs + " Out of turns; the code was not cracked."
        else:
            obs = obs + " Turns left: " + str(self.max_turns - self.turn) + "."
        return obs, 0.0, False, truncated, self._info(valid)

    def hint(self):
        c = self.secret[self.reveal]
        return ("Peg " + str(self.reveal + 1) + " of the code is " + COLOR_NAMES[c] + "; the code uses "
                + str(len(set(self.secret))) + " distinct colour(s). Only guess codes consistent with every feedback so far.")

    def oracle(self):
        for combo in itertools.product(self.colors, repeat=self.length):
            code = "".join(combo)
            ok = True
            for past in self.history:
                fb = score(past[0], code)
                if fb[0] != past[1] or fb[1] != past[2]:
                    ok = False
                    break
            if ok:
                return code
        return self.secret
