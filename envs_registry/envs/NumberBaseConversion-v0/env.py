import random
import re

ATTEMPT_REWARDS = [1.0, 0.5, 0.25, 0.1]
DIGITS = "0123456789abcdef"
BASE_NAMES = {2: "binary (base 2)", 8: "octal (base 8)", 10: "decimal (base 10)", 16: "hexadecimal (base 16)"}
PREFIXES = {2: "0b", 8: "0o", 16: "0x"}
TOKEN_RE = re.compile(r"^[0-9a-z]+$")


def to_base(value, base):
    if value == 0:
        return "0"
    out = []
    while value > 0:
        out.append(DIGITS[value % base])
        value = value // base
    return "".join(reversed(out))


def parse_base(text, base):
    value = 0
    for ch in text:
        k = DIGITS.find(ch)
        if k < 0 or k >= base:
            return None
        value = value * base + k
    return value


class Env:
    """Convert a seeded non-negative integer between number bases 2, 8, 10 and 16 (for example hexadecimal to binary or decimal to octal); the number grows from ten bits on easy levels to over twenty bits on the hardest, and easy levels always go to or from decimal while hard levels also pair two non-decimal bases. The answer is the numeral in the target base; after each wrong attempt the agent is told whether its value is too high or too low and whether the digit count is right, with four attempts paying 1.0, 0.5, 0.25 or 0.1."""

    name = "NumberBaseConversion"
    setting = "reasoning"
    max_turns = 4

    def __init__(self):
        self.difficulty = 0
        self.value = 0
        self.src = 10
        self.dst = 2
        self.shown = ""
        self.answer = ""
        self.turn = 0
        self.done = False

    def reset(self, seed):
        rng = random.Random(seed)
        self.difficulty = rng.randint(0, 3)
        ranges = [[256, 1023], [1024, 4095], [4096, 65535], [65536, 4194303]]
        low, high = ranges[self.difficulty]
        self.value = rng.randint(low, high)
        if self.difficulty == 0:
            pair = [10, rng.choice([2, 16])]
        elif self.difficulty == 1:
            pair = [10, rng.choice([2, 8, 16])]
        else:
            bases = [2, 8, 10, 16]
            a = rng.choice(bases)
            b = rng.choice([x for x in bases if x != a])
            if self.difficulty == 3 and 10 in [a, b] and rng.random() < 0.5:
                a = rng.choice([2, 8, 16])
                b = rng.choice([x for x in [2, 8, 16] if x != a])
            pair = [a, b]
        if rng.random() < 0.5:
            pair = [pair[1], pair[0]]
        self.src = pair[0]
        self.dst = pair[1]
        self.shown = to_base(self.value, self.src)
        self.answer = to_base(self.value, self.dst)
        self.turn = 0
        self.done = False
        lines = ["Convert the " + BASE_NAMES[self.src] + " number " + self.shown + " to " + BASE_NAMES[self.dst] + "."]
        lines.append("Answer with the " + BASE_NAMES[self.dst] + " numeral only (digits " + {2: "0-1", 8: "0-7", 10: "0-9", 16: "0-9 and a-f"}[self.dst] + ", no spaces"
                     + ("; an optional " + PREFIXES[self.dst] + " prefix is allowed" if self.dst in PREFIXES else "")
                     + "). You have " + str(self.max_turns) + " attempts; after a wrong answer you are told whether "
                     + "its value is too high or too low and whether it has the right number of digits.")
        info = {"difficulty": self.difficulty, "from_base": self.src, "to_base": self.dst,
                "attempts_left": self.max_turns}
        return "\n".join(lines), info

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {"attempt": self.turn, "correct": False}
        self.turn += 1
        text = str(action).strip().lower().rstrip(".")
        if self.dst in PREFIXES and text.startswith(PREFIXES[self.dst]):
            text = text[2:]
        reward = 0.0
        terminated = False
        correct = False
        left = self.max_turns - self.turn
        value = None
        if text != "" and TOKEN_RE.match(text) is not None:
            value = parse_base(text, self.dst)
        if value is None:
            obs = ("Could not read a " + BASE_NAMES[self.dst] + " numeral from your answer; it counts as an attempt. "
                   + "Attempts left: " + str(left) + ".")
        elif value == self.value:
            correct = True
            terminated = True
            reward = ATTEMPT_REWARDS[self.turn - 1]
            obs = "Correct! " + self.shown + " in " + BASE_NAMES[self.src] + " is " + self.answer + " in " + BASE_NAMES[self.dst] + "."
        else:
            where = "too high" if value > self.value else "too low"
            digits = len(to_base(value, self.dst))
            size = "the right number of digits" if digits == len(self.answer) else (
                "too many digits" if digits > len(self.answer) else "too few digits")
            obs = "Wrong: the value of " + text + " is " + where + " and it has " + size + ". Attempts left: " + str(left) + "."
        truncated = (not terminated) and self.turn >= self.max_turns
        if terminated or truncated:
            self.done = True
        if truncated:
            obs = obs + " No attempts left."
        info = {"attempt": self.turn, "correct": correct, "attempts_left": left}
        return obs, reward, terminated, truncated, info

    def hint(self):
        lead = 4 if self.dst == 2 else 1
        text = ("In " + BASE_NAMES[self.dst] + " the answer has " + str(len(self.answer)) + " digits and "
                + ("starts with " if lead > 1 else "its leading digit is ") + self.answer[:lead] + ".")
        if self.src in [2, 8, 16] and self.dst in [2, 8, 16]:
            text = text + " Go through binary: each hexadecimal digit is 4 bits and each octal digit is 3 bits, grouped from the right."
        else:
            text = text + " Use repeated division (or powers of the base) and write the remainders in reverse order."
        return text

    def oracle(self):
        return self.answer
