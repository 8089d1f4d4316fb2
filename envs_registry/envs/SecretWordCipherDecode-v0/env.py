import random
import re
import string

ATTEMPT_REWARDS = [1.0, 0.6, 0.4, 0.25, 0.1]
LETTERS = string.ascii_lowercase
WORDS = [
    "anchor", "bakery", "balcony", "bandit", "basket", "blanket", "bottle", "bridge", "bucket", "butter",
    "cabinet", "camera", "candle", "canyon", "carpet", "castle", "cattle", "cellar", "channel", "chimney",
    "circus", "clover", "cobweb", "compass", "copper", "cotton", "cousin", "crystal", "dagger", "desert",
    "dolphin", "donkey", "dragon", "drawer", "eagle", "engine", "falcon", "feather", "fiddle", "forest",
    "fossil", "fountain", "garden", "garlic", "ginger", "glacier", "goblet", "gravel", "harbor", "harvest",
    "helmet", "hermit", "hollow", "honey", "island", "jacket", "jungle", "kettle", "kitchen", "ladder",
    "lantern", "lemon", "lizard", "lobster", "magnet", "mammoth", "marble", "meadow", "mirror", "monkey",
    "mustard", "napkin", "needle", "nickel", "orchard", "oyster", "paddle", "palace", "parrot", "pebble",
    "pepper", "pickle", "pillow", "planet", "pocket", "puzzle", "quartz", "rabbit", "racket", "ribbon",
    "rocket", "saddle", "salmon", "school", "shadow", "silver", "spider", "sponge", "statue", "summit",
    "tablet", "teapot", "thunder", "timber", "tomato", "tunnel", "turtle", "velvet", "violin", "volcano",
    "wagon", "walnut", "window", "winter", "wizard", "yogurt", "zebra", "zipper", "jigsaw", "quiver",
]
ANSWER_RE = re.compile(r"^[a-z ]+$")


def caesar(text, shift):
    out = []
    for ch in text:
        if ch in LETTERS:
            out.append(LETTERS[(LETTERS.index(ch) + shift) % 26])
        else:
            out.append(ch)
    return "".join(out)


def substitute(text, key):
    out = []
    for ch in text:
        if ch in key:
            out.append(key[ch])
        else:
            out.append(ch)
    return "".join(out)


def normalise(text):
    t = str(text).strip().lower()
    t = t.strip(".!\"'`")
    t = " ".join(t.split())
    return t


class Env:
    """Decode a seeded secret message of English words encrypted with a seeded key: on easy levels a Caesar shift (stated, or to be inferred from one known plaintext/ciphertext pair), on hard levels a full letter substitution to be reconstructed from several known word pairs and then applied to a one- to three-word ciphertext; the answer is the lowercase plaintext, and after each wrong attempt the agent is told how many letters stand correct in their position, with five attempts and a reward of 1.0, 0.6, 0.4, 0.25 or 0.1 depending on the attempt that succeeds."""

    name = "SecretWordCipherDecode"
    setting = "reasoning"
    max_turns = 5

    def __init__(self):
        self.difficulty = 0
        self.kind = "caesar"
        self.shift = 0
        self.key = {}
        self.plain = ""
        self.cipher = ""
        self.examples = []
        self.revealed = []
        self.turn = 0
        self.done = False

    def reset(self, seed):
        rng = random.Random(seed)
        self.difficulty = rng.randint(0, 3)
        n_words = [1, 2, 1, 3][self.difficulty]
        pool = list(WORDS)
        rng.shuffle(pool)
        targets = pool[:n_words]
        rest = pool[n_words:]
        self.plain = " ".join(targets)
        self.examples = []
        self.revealed = []
        self.key = {}
        self.shift = rng.randint(3, 23)
        if self.difficulty <= 1:
            self.kind = "caesar"
            self.cipher = caesar(self.plain, self.shift)
            if self.difficulty == 1:
                word = rest[0]
                self.examples.append([word, caesar(word, self.shift)])
        else:
            self.kind = "substitution"
            perm = list(LETTERS)
            rng.shuffle(perm)
            for i in range(26):
                self.key[LETTERS[i]] = perm[i]
            self.cipher = substitute(self.plain, self.key)
            needed = []
            for ch in self.plain:
                if ch in LETTERS and ch not in needed:
                    needed.append(ch)
            uncovered = list(needed)
            candidates = list(rest)
            max_examples = 4 if self.difficulty == 2 else 6
            while uncovered and len(self.examples) < max_examples:
                best = None
                best_gain = 0
                for w in candidates:
                    gain = 0
                    for ch in uncovered:
                        if ch in w:
                            gain += 1
                    if gain > best_gain:
                        best = w
                        best_gain = gain
                if best is None:
                    break
                candidates.remove(best)
                self.examples.append([best, substitute(best, self.key)])
                uncovered = [ch for ch in uncovered if ch not in best]
            rng.shuffle(self.examples)
            for ch in uncovered:
                self.revealed.append([self.key[ch], ch])
        self.turn = 0
        self.done = False
        lines = []
        if self.kind == "caesar":
            if self.difficulty == 0:
                lines.append("A message was encrypted with a Caesar cipher: every letter was shifted "
                             + str(self.shift) + " places forward in the alphabet (wrapping from z to a).")
            else:
                lines.append("A message was encrypted with a Caesar cipher with an unknown shift (every letter moved "
                             + "the same number of places forward in the alphabet, wrapping from z to a).")
                lines.append("Known pair: the word '" + self.examples[0][0] + "' encrypts to '" + self.examples[0][1] + "'.")
        else:
            lines.append("A message was encrypted with a secret letter-substitution cipher (each plaintext letter is "
                         + "always replaced by the same ciphertext letter, different letters by different letters).")
            lines.append("Known pairs (plaintext -> ciphertext):")
            for pair in self.examples:
                lines.append("  " + pair[0] + " -> " + pair[1])
            for pair in self.revealed:
                lines.append("  Also: ciphertext letter '" + pair[0] + "' stands for '" + pair[1] + "'.")
        lines.append("Ciphertext: " + self.cipher)
        lines.append("Decode it and answer with the plaintext in lowercase letters (words separated by single spaces). "
                     + "You have " + str(self.max_turns) + " attempts; after a wrong answer you are told how many letters "
                     + "are correct in their position.")
        info = {"difficulty": self.difficulty, "cipher": self.kind, "words": n_words,
                "attempts_left": self.max_turns}
        return "\n".join(lines), info

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {"attempt": self.turn, "correct": False}
        self.turn += 1
        guess = normalise(action)
        reward = 0.0
        terminated = False
        correct = False
        left = self.max_turns - self.turn
        if guess == "" or ANSWER_RE.match(guess) is None:
            obs = ("Your answer must be the plaintext in lowercase letters and spaces only; it counts as an attempt. "
                   + "Attempts left: " + str(left) + ".")
        elif guess == self.plain:
            correct = True
            terminated = True
            reward = ATTEMPT_REWARDS[self.turn - 1]
            obs = "Correct! The message is '" + self.plain + "'."
        else:
            hits = 0
            for i in range(min(len(guess), len(self.plain))):
                if guess[i] == self.plain[i] and guess[i] != " ":
                    hits += 1
            total = len(self.plain.replace(" ", ""))
            obs = ("Wrong: " + str(hits) + " of the " + str(total) + " letters are correct in their position.")
            if len(guess) != len(self.plain):
                obs = obs + " Your answer has a different length from the message (" + str(len(self.cipher)) + " characters including spaces)."
            obs = obs + " Attempts left: " + str(left) + "."
        truncated = (not terminated) and self.turn >= self.max_turns
        if terminated or truncated:
            self.done = True
        if truncated:
            obs = obs + " No attempts left."
        info = {"attempt": self.turn, "correct": correct, "attempts_left": left}
        return obs, reward, terminated, truncated, info

    def hint(self):
        first = self.plain.split(" ")[0]
        shown = first[:3]
        if self.kind == "caesar":
            return ("Decrypt by shifting each letter " + str(self.shift) + " places backward (equivalently "
                    + str(26 - self.shift) + " forward); for example ciphertext '" + self.cipher[:3]
                    + "' becomes '" + shown + "', the start of the first word.")
        pairs = []
        for ch in first[:4]:
            entry = "'" + self.key[ch] + "'->'" + ch + "'"
            if entry not in pairs:
                pairs.append(entry)
        return ("Build a decoding table letter by letter from the known pairs; the first word starts with '"
                + shown + "' (decoding " + ", ".join(pairs) + ").")

    def oracle(self):
        return self.plain
