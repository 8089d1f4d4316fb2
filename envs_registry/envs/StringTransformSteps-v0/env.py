import random
import string

ATTEMPT_REWARDS = [1.0, 0.5, 0.25, 0.1]

WORDS = ["garden", "planet", "rocket", "silver", "window", "bridge", "candle", "forest", "hammer", "jungle",
         "lantern", "marble", "orchid", "pepper", "quartz", "ribbon", "saddle", "tunnel", "velvet", "walrus",
         "anchor", "blanket", "compass", "dolphin", "emerald", "falcon", "glacier", "harbor", "island", "kettle",
         "meadow", "nectar", "oyster", "puzzle", "spider", "thunder", "voyage", "wizard", "yogurt", "zephyr",
         "castle", "button", "mirror", "pillow", "turnip", "cobalt", "basket", "copper", "magnet", "sphinx"]
VOWELS = "aeiouAEIOU"


def apply_op(s, op):
    kind = op[0]
    if kind == "reverse":
        return s[::-1]
    if kind == "rotate_left":
        k = op[1] % len(s)
        return s[k:] + s[:k]
    if kind == "rotate_right":
        k = op[1] % len(s)
        return s[len(s) - k:] + s[:len(s) - k]
    if kind == "upper":
        return s.upper()
    if kind == "lower":
        return s.lower()
    if kind == "swapcase":
        return s.swapcase()
    if kind == "replace":
        return s.replace(op[1], op[2])
    if kind == "swap_ends":
        if len(s) < 2:
            return s
        return s[-1] + s[1:-1] + s[0]
    if kind == "upper_even":
        return "".join([s[i].upper() if i % 2 == 1 else s[i] for i in range(len(s))])
    if kind == "drop_vowels":
        return "".join([c for c in s if c not in VOWELS])
    if kind == "append":
        return s + op[1]
    if kind == "prepend":
        return op[1] + s
    if kind == "sort":
        return "".join(sorted(s))
    return s


def describe(op):
    kind = op[0]
    if kind == "reverse":
        return "reverse the whole string"
    if kind == "rotate_left":
        return "rotate left by " + str(op[1]) + " (move the first " + str(op[1]) + " character(s) to the end)"
    if kind == "rotate_right":
        return "rotate right by " + str(op[1]) + " (move the last " + str(op[1]) + " character(s) to the front)"
    if kind == "upper":
        return "convert every letter to uppercase"
    if kind == "lower":
        return "convert every letter to lowercase"
    if kind == "swapcase":
        return "swap the case of every letter (upper becomes lower and lower becomes upper)"
    if kind == "replace":
        return "replace every '" + op[1] + "' with '" + op[2] + "' (case-sensitive)"
    if kind == "swap_ends":
        return "swap the first and the last character"
    if kind == "upper_even":
        return "uppercase the characters in even positions (2nd, 4th, 6th, ... counting from 1); leave the others unchanged"
    if kind == "drop_vowels":
        return "delete every vowel (a, e, i, o, u in either case)"
    if kind == "append":
        return "append '" + op[1] + "' at the end"
    if kind == "prepend":
        return "put '" + op[1] + "' at the front"
    if kind == "sort":
        return "sort the characters by their character code (all uppercase letters come before all lowercase letters)"
    return kind


def random_op(rng, level, s):
    kinds = ["reverse", "rotate_left", "rotate_right", "upper", "swap_ends", "replace", "append"]
    if level >= 1:
        kinds = kinds + ["swapcase", "lower", "upper_even", "prepend"]
    if level >= 2:
        kinds = kinds + ["drop_vowels", "rotate_left", "replace"]
    if level >= 3:
        kinds = kinds + ["sort"]
    kind = rng.choice(kinds)
    if kind in ["rotate_left", "rotate_right"]:
        return [kind, rng.randint(1, max(1, len(s) - 1))]
    if kind == "replace":
        present = sorted(set(s))
        old = rng.choice(present)
        pool = string.ascii_lowercase if old.islower() else string.ascii_uppercase
        new = rng.choice(pool)
        while new == old:
            new = rng.choice(pool)
        return [kind, old, new]
    if kind in ["append", "prepend"]:
        n = rng.randint(1, 1 + level // 2)
        return [kind, "".join([rng.choice(string.ascii_lowercase) for i in range(n)])]
    return [kind]


class Env:
    """Apply a seeded list of two to five string operations (reverse, rotations, upper/lower/swap case, case changes at even positions, letter replacement, swapping the ends, deleting vowels, appending or prepending letters, sorting characters) in order to a starting word and answer with the exact final string, case-sensitive; difficulty sets the word length, the number of operations and which operations appear, the agent has four attempts and after a wrong answer is told the expected length and how many positions match, and a correct answer pays 1.0, 0.5, 0.25 or 0.1 by attempt."""

    name = "StringTransformSteps"
    setting = "reasoning"
    max_turns = 4

    def __init__(self):
        self.word = ""
        self.ops = []
        self.states = []
        self.answer = ""
        self.turn = 0
        self.done = False
        self.difficulty = 0

    def reset(self, seed):
        rng = random.Random(seed)
        self.difficulty = rng.randint(0, 3)
        level = self.difficulty
        n_ops = 2 + level
        if level >= 2 and rng.random() < 0.5:
            length = rng.randint(6, 8 + level)
            word = "".join([rng.choice(string.ascii_lowercase) for i in range(length)])
        else:
            word = rng.choice(WORDS)
        for attempt in range(100):
            ops = []
            states = []
            s = word
            ok = True
            for i in range(n_ops):
                op = random_op(rng, level, s)
                tries = 0
                while (apply_op(s, op) == s or len(apply_op(s, op)) < 3) and tries < 30:
                    op = random_op(rng, level, s)
                    tries += 1
                nxt = apply_op(s, op)
                if nxt == s or len(nxt) < 3:
                    ok = False
                ops.append(op)
                states.append(nxt)
                s = nxt
            if ok and s != word and s.lower() != word and s != word[::-1] and s not in states[:-1]:
                break
        self.word = word
        self.ops = ops
        self.states = states
        self.answer = states[-1]
        self.turn = 0
        self.done = False
        lines = ["Start with the string \"" + word + "\" and apply these operations in order, each to the result of the previous one:"]
        for i in range(n_ops):
            lines.append("Step " + str(i + 1) + ": " + describe(ops[i]))
        lines.append("What is the final string? Answer with the string only (no quotes), exactly, case-sensitive. You have "
                     + str(self.max_turns) + " attempts; after a wrong answer you are told the expected length and how many positions match.")
        info = {"difficulty": level, "steps": n_ops, "word_length": len(word), "attempts_left": self.max_turns}
        return "\n".join(lines), info

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {"attempt": self.turn, "correct": False}
        self.turn += 1
        guess = str(action).strip()
        if len(guess) >= 2 and guess[0] == guess[-1] and guess[0] in "\"'`":
            guess = guess[1:-1].strip()
        reward = 0.0
        terminated = False
        correct = False
        left = self.max_turns - self.turn
        if guess == self.answer:
            correct = True
            terminated = True
            reward = ATTEMPT_REWARDS[self.turn - 1]
            obs = "Correct! The final string is " + self.answer + "."
        elif guess == "":
            obs = "Empty answer; write the final string. It counts as an attempt. Attempts left: " + str(left) + "."
        else:
            same = 0
            for i in range(min(len(guess), len(self.answer))):
                if guess[i] == self.answer[i]:
                    same += 1
            shown = guess if len(guess) <= 40 else guess[:40] + "..."
            obs = ("Wrong: \"" + shown + "\" is not the final string. The final string has " + str(len(self.answer))
                   + " characters; yours has " + str(len(guess)) + ", and " + str(same)
                   + " position(s) match. Attempts left: " + str(left) + ".")
            if guess.lower() == self.answer.lower():
                obs = obs + " The letters are right but the upper/lower case is not."
        truncated = (not terminated) and self.turn >= self.max_turns
        if terminated or truncated:
            self.done = True
        if truncated:
            obs = obs + " No attempts left."
        info = {"attempt": self.turn, "correct": correct, "attempts_left": left}
        return obs, reward, terminated, truncated, info

    def hint(self):
        # the latest state up to the middle step that is not already the answer (up to case): a
        # partial result, never the final string itself
        mid = (len(self.ops) - 1) // 2
        while mid >= 0 and self.states[mid].lower() == self.answer.lower():
            mid -= 1
        if mid < 0:
            return ("Write the string down after every step. The final string has " + str(len(self.answer))
                    + " characters and starts with \"" + self.answer[0] + "\".")
        return ("Write the string down after every step. After step " + str(mid + 1) + " the string is \""
                + self.states[mid] + "\"; continue from there with step " + str(mid + 2) + ".")

    def oracle(self):
        return self.answer
