import random
import re

ATTEMPT_REWARDS = [1.0, 0.8, 0.65, 0.5, 0.4, 0.3, 0.2, 0.1]
CODE_RE = re.compile(r"^\s*(\d+)\s*\.?\s*$")
ORDINALS = ["first", "second", "third", "fourth"]
KINDS_BY_LEVEL = [
    ["parity", "gt", "lt", "contains", "absent", "sum"],
    ["parity", "gt", "lt", "contains", "absent", "sum", "cmp", "odd_count", "distinct"],
    ["parity", "gt", "lt", "absent", "sum", "cmp", "odd_count", "distinct", "diff", "divisible"],
    ["parity", "absent", "cmp", "odd_count", "distinct", "diff", "divisible", "product", "sum_pair"],
]


def holds(c, digits):
    kind = c[0]
    if kind == "parity":
        return digits[c[1]] % 2 == c[2]
    if kind == "gt":
        return digits[c[1]] > c[2]
    if kind == "lt":
        return digits[c[1]] < c[2]
    if kind == "contains":
        return c[1] in digits
    if kind == "absent":
        return c[1] not in digits
    if kind == "sum":
        return sum(digits) == c[1]
    if kind == "cmp":
        if c[3] == ">":
            return digits[c[1]] > digits[c[2]]
        if c[3] == "<":
            return digits[c[1]] < digits[c[2]]
        return digits[c[1]] == digits[c[2]]
    if kind == "odd_count":
        return len([d for d in digits if d % 2 == 1]) == c[1]
    if kind == "distinct":
        return (len(sorted(list(dict.fromkeys(digits)))) == len(digits)) == c[1]
    if kind == "diff":
        return digits[c[1]] - digits[c[2]] == c[3]
    if kind == "divisible":
        value = 0
        for d in digits:
            value = value * 10 + d
        return value % c[1] == 0
    if kind == "product":
        p = 1
        for d in digits:
            p *= d
        return p == c[1]
    if kind == "sum_pair":
        return digits[c[1]] + digits[c[2]] == c[3]
    return False


def describe(c):
    kind = c[0]
    if kind == "parity":
        return "The " + ORDINALS[c[1]] + " digit is " + ("odd" if c[2] == 1 else "even") + "."
    if kind == "gt":
        return "The " + ORDINALS[c[1]] + " digit is greater than " + str(c[2]) + "."
    if kind == "lt":
        return "The " + ORDINALS[c[1]] + " digit is less than " + str(c[2]) + "."
    if kind == "contains":
        return "The code contains the digit " + str(c[1]) + "."
    if kind == "absent":
        return "The code does not contain the digit " + str(c[1]) + "."
    if kind == "sum":
        return "The digits add up to " + str(c[1]) + "."
    if kind == "cmp":
        word = {">": "greater than", "<": "less than", "=": "equal to"}[c[3]]
        return "The " + ORDINALS[c[1]] + " digit is " + word + " the " + ORDINALS[c[2]] + " digit."
    if kind == "odd_count":
        return "Exactly " + str(c[1]) + " of the digits are odd."
    if kind == "distinct":
        return "All digits are different." if c[1] else "At least one digit appears more than once."
    if kind == "diff":
        return ("The " + ORDINALS[c[1]] + " digit minus the " + ORDINALS[c[2]] + " digit equals "
                + str(c[3]) + ".")
    if kind == "divisible":
        return "The code, read as a number, is divisible by " + str(c[1]) + "."
    if kind == "product":
        return "The product of the digits is " + str(c[1]) + "."
    if kind == "sum_pair":
        return ("The " + ORDINALS[c[1]] + " digit plus the " + ORDINALS[c[2]] + " digit equals "
                + str(c[3]) + ".")
    return "?"


def make_constraint(rng, kind, digits):
    n = len(digits)
    i = rng.randrange(n)
    j = rng.randrange(n)
    while j == i:
        j = rng.randrange(n)
    if kind == "parity":
        return ["parity", i, digits[i] % 2]
    if kind == "gt":
        if digits[i] == 0:
            return None
        return ["gt", i, rng.randint(max(0, digits[i] - 4), digits[i] - 1)]
    if kind == "lt":
        if digits[i] == 9:
            return None
        return ["lt", i, rng.randint(digits[i] + 1, min(9, digits[i] + 4))]
    if kind == "contains":
        return ["contains", digits[i]]
    if kind == "absent":
        missing = [d for d in range(10) if d not in digits]
        return ["absent", rng.choice(missing)]
    if kind == "sum":
        return ["sum", sum(digits)]
    if kind == "cmp":
        if digits[i] > digits[j]:
            return ["cmp", i, j, ">"]
        if digits[i] < digits[j]:
            return ["cmp", i, j, "<"]
        return ["cmp", i, j, "="]
    if kind == "odd_count":
        return ["odd_count", len([d for d in digits if d % 2 == 1])]
    if kind == "distinct":
        return ["distinct", len(sorted(list(dict.fromkeys(digits)))) == n]
    if kind == "diff":
        return ["diff", i, j, digits[i] - digits[j]]
    if kind == "divisible":
        value = 0
        for d in digits:
            value = value * 10 + d
        options = [k for k in [3, 4, 6, 7, 8, 9, 11] if value % k == 0]
        if not options:
            return None
        return ["divisible", rng.choice(options)]
    if kind == "product":
        p = 1
        for d in digits:
            p *= d
        return ["product", p]
    if kind == "sum_pair":
        return ["sum_pair", min(i, j), max(i, j), digits[i] + digits[j]]
    return None


class Env:
    """Find a secret three- or four-digit code (first digit not zero) that satisfies a seeded list of numbered constraints (digit parity and bounds, digit sums and products, comparisons between positions, divisibility, digits present or absent) chosen so that exactly one code fits; harder levels use longer codes and relational or arithmetic constraints. After each wrong attempt the agent is told which constraint numbers the attempt violates; there are eight attempts and success pays 1.0 on the first attempt, falling to 0.1 on the eighth."""

    name = "DigitCodeConstraintPuzzle"
    setting = "reasoning"
    max_turns = 8

    def __init__(self):
        self.difficulty = 0
        self.length = 3
        self.secret = [1, 2, 3]
        self.constraints = []
        self.hint_pos = 0
        self.turn = 0
        self.done = False

    def reset(self, seed):
        rng = random.Random(seed)
        self.difficulty = rng.randint(0, 3)
        self.length = 3 if self.difficulty <= 1 else 4
        kinds = KINDS_BY_LEVEL[self.difficulty]
        n = self.length
        low = 10 ** (n - 1)
        high = 10 ** n
        all_codes = []
        for v in range(low, high):
            all_codes.append([int(ch) for ch in str(v)])
        secret = [rng.randint(1, 9)] + [rng.randint(0, 9) for k in range(n - 1)]
        constraints = []
        candidates = all_codes
        tries = 0
        while len(candidates) > 1 and tries < 300 and len(constraints) < 14:
            tries += 1
            c = make_constraint(rng, rng.choice(kinds), secret)
            if c is None or c in constraints:
                continue
            kept = [code for code in candidates if holds(c, code)]
            if len(kept) == len(candidates):
                continue
            if len(kept) * 10 < len(candidates) and len(constraints) < 2:
                continue
            constraints.append(c)
            candidates = kept
        pos = 0
        while len(candidates) > 1:
            c = ["cmp", 0, 0, "="]
            others = [code for code in candidates if code[pos] != secret[pos]]
            if others:
                if secret[pos] > 0:
                    c = ["gt", pos, secret[pos] - 1]
                    if not [code for code in candidates if not holds(c, code)]:
                        c = ["lt", pos, secret[pos] + 1]
                else:
                    c = ["lt", pos, 1]
                constraints.append(c)
                candidates = [code for code in candidates if holds(c, code)]
            pos = (pos + 1) % n
        rng.shuffle(constraints)
        self.secret = secret
        self.constraints = constraints
        self.hint_pos = rng.randrange(n)
        self.turn = 0
        self.done = False
        lines = ["Find the secret " + str(n) + "-digit code (its first digit is not 0). Exactly one code satisfies all of these constraints:"]
        for k in range(len(constraints)):
            lines.append(str(k + 1) + ". " + describe(constraints[k]))
        lines.append("Answer with the " + str(n) + " digits only, e.g. " + "1" * n + ". You have " + str(self.max_turns)
                     + " attempts; after a wrong code you are told which constraints it violates.")
        info = {"difficulty": self.difficulty, "digits": n, "constraints": len(constraints),
                "attempts_left": self.max_turns}
        return "\n".join(lines), info

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {"attempt": self.turn, "correct": False}
        self.turn += 1
        match = CODE_RE.match(str(action))
        reward = 0.0
        terminated = False
        correct = False
        left = self.max_turns - self.turn
        violated = []
        n = self.length
        if match is None or len(match.group(1)) != n or match.group(1)[0] == "0":
            obs = ("Your answer must be exactly " + str(n) + " digits with a first digit other than 0 (for example "
                   + "1" * n + "); it counts as an attempt. Attempts left: " + str(left) + ".")
        else:
            digits = [int(ch) for ch in match.group(1)]
            if digits == self.secret:
                correct = True
                terminated = True
                reward = ATTEMPT_REWARDS[self.turn - 1]
                obs = "Correct! The code is " + match.group(1) + "."
            else:
                for k in range(len(self.constraints)):
                    if not holds(self.constraints[k], digits):
                        violated.append(k + 1)
                if violated:
                    obs = ("Wrong: " + match.group(1) + " violates constraint"
                           + ("s " if len(violated) > 1 else " ") + ", ".join([str(v) for v in violated]) + ".")
                else:
                    obs = "Wrong: " + match.group(1) + " is not the code."
                obs = obs + " Attempts left: " + str(left) + "."
        truncated = (not terminated) and self.turn >= self.max_turns
        if terminated or truncated:
            self.done = True
        if truncated:
            obs = obs + " No attempts left."
        info = {"attempt": self.turn, "correct": correct, "attempts_left": left, "violated": violated}
        return obs, reward, terminated, truncated, info

    def hint(self):
        p = self.hint_pos
        return ("The " + ORDINALS[p] + " digit of the code is " + str(self.secret[p])
                + "; substitute it into the constraints first and narrow down the remaining positions one at a time.")

    def oracle(self):
        return "".join([str(d) for d in self.secret])
