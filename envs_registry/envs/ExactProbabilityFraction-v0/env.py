import itertools
import math
import random
import re
from fractions import Fraction

ATTEMPT_REWARDS = [1.0, 0.5, 0.25, 0.1]
FRACTION_ANSWER = re.compile(r"^\s*(-?\d{1,30})\s*/\s*(\d{1,30})\s*\.?\s*$")
INT_ONLY = re.compile(r"^\s*(-?\d{1,30})\s*\.?\s*$")
DECIMAL = re.compile(r"^\s*-?\d*\.\d+\s*%?\s*$|^\s*-?\d+(\.\d+)?\s*%\s*$")
COLORS = ["red", "blue", "green", "yellow", "white", "black"]
ORDINAL = ["first", "second", "third"]


def dice_outcomes(sides):
    return [list(t) for t in itertools.product(*[range(1, s + 1) for s in sides])]


def q_single_die(rng):
    s = rng.choice([6, 8, 10, 12, 20])
    if rng.random() < 0.5:
        k = rng.randint(2, s - 2)
        fav = s - k
        return ("A fair " + str(s) + "-sided die (faces 1 to " + str(s) + ") is rolled once. What is the probability that the result is greater than " + str(k) + "?",
                Fraction(fav, s), "There are " + str(s) + " equally likely faces; count the faces above " + str(k) + ".")
    m = rng.choice([3, 4, 5]) if s >= 10 else rng.choice([3, 4])
    fav = s // m
    return ("A fair " + str(s) + "-sided die (faces 1 to " + str(s) + ") is rolled once. What is the probability that the result is a multiple of " + str(m) + "?",
            Fraction(fav, s), "There are " + str(s) + " equally likely faces; list the multiples of " + str(m) + " among 1.." + str(s) + ".")


def q_urn_single(rng):
    colors = rng.sample(COLORS, 3)
    counts = [rng.randint(2, 9) for c in colors]
    total = sum(counts)
    t = rng.randrange(3)
    desc = ", ".join([str(counts[i]) + " " + colors[i] for i in range(3)])
    return ("An urn holds " + desc + " balls. One ball is drawn at random. What is the probability that it is " + colors[t] + "?",
            Fraction(counts[t], total), "Every ball is equally likely; there are " + str(total) + " balls in all.")


def q_two_dice_sum(rng, level):
    sides = [6, 6] if level <= 1 else [rng.choice([4, 6, 8]), rng.choice([6, 8, 10])]
    outs = dice_outcomes(sides)
    lo = len(sides)
    hi = sum(sides)
    if rng.random() < 0.5:
        target = rng.randint(lo + 1, hi - 1)
        fav = len([o for o in outs if sum(o) == target])
        cond = "the sum is exactly " + str(target)
    else:
        target = rng.randint(lo + 2, hi - 1)
        fav = len([o for o in outs if sum(o) >= target])
        cond = "the sum is at least " + str(target)
    names = " and ".join(["a fair " + str(s) + "-sided die" for s in sides])
    return ("You roll " + names + " (faces numbered from 1). What is the probability that " + cond + "?",
            Fraction(fav, len(outs)), "There are " + str(len(outs)) + " equally likely ordered outcomes (" + " x ".join([str(s) for s in sides]) + "); count those where " + cond + ".")


def q_coins_exact(rng, level):
    n = rng.randint(3, 4 + 2 * level)
    k = rng.randint(1, n - 1)
    if level >= 2 and rng.random() < 0.5:
        k = rng.randint(1, n - 1)
        fav = sum([math.comb(n, j) for j in range(k, n + 1)])
        return ("A fair coin is tossed " + str(n) + " times. What is the probability of getting at least " + str(k) + " heads?",
                Fraction(fav, 2 ** n), "There are 2^" + str(n) + " = " + str(2 ** n) + " equally likely sequences; the number with exactly j heads is C(" + str(n) + ", j). Add them up for j = " + str(k) + ".." + str(n) + ".")
    return ("A fair coin is tossed " + str(n) + " times. What is the probability of getting exactly " + str(k) + " heads?",
            Fraction(math.comb(n, k), 2 ** n), "There are 2^" + str(n) + " = " + str(2 ** n) + " equally likely sequences; count the ones with " + str(k) + " heads using a binomial coefficient.")


def q_urn_draws(rng, level):
    n_colors = 2 if level <= 1 else 3
    colors = rng.sample(COLORS, n_colors)
    counts = [rng.randint(2, 6 + level) for c in colors]
    total = sum(counts)
    draws = 2 if level <= 2 else 3
    desc = ", ".join([str(counts[i]) + " " + colors[i] for i in range(n_colors)])
    t = rng.randrange(n_colors)
    kind = rng.choice(["all", "exactly"]) if level >= 2 else "all"
    combos = math.comb(total, draws)
    if kind == "all":
        fav = math.comb(counts[t], draws)
        cond = ("both balls are " if draws == 2 else "all " + str(draws) + " balls are ") + colors[t]
    else:
        j = rng.randint(1, draws - 1)
        fav = math.comb(counts[t], j) * math.comb(total - counts[t], draws - j)
        cond = "exactly " + str(j) + " of the " + str(draws) + " balls are " + colors[t]
    return ("An urn holds " + desc + " balls. " + str(draws) + " balls are drawn at random at the same time (without replacement). What is the probability that " + cond + "?",
            Fraction(fav, combos), "Count unordered draws: there are C(" + str(total) + ", " + str(draws) + ") = " + str(combos) + " equally likely sets of balls; count the sets where " + cond + ".")


def q_at_least_one(rng, level):
    s = rng.choice([4, 6, 8])
    n = rng.randint(2, 2 + level)
    face = rng.randint(1, s)
    p = 1 - Fraction(s - 1, s) ** n
    return ("A fair " + str(s) + "-sided die (faces 1 to " + str(s) + ") is rolled " + str(n) + " times. What is the probability that at least one roll shows a " + str(face) + "?",
            p, "Use the complement: the chance that no roll shows a " + str(face) + " is (" + str(s - 1) + "/" + str(s) + ")^" + str(n) + ".")


def q_two_dice_other(rng):
    s = rng.choice([6, 8])
    outs = dice_outcomes([s, s])
    kind = rng.choice(["product_even", "max", "diff"])
    if kind == "product_even":
        fav = len([o for o in outs if (o[0] * o[1]) % 2 == 0])
        cond = "the product of the two results is even"
    elif kind == "max":
        m = rng.randint(2, s)
        fav = len([o for o in outs if max(o) == m])
        cond = "the larger of the two results is exactly " + str(m)
    else:
        d = rng.randint(1, s - 2)
        fav = len([o for o in outs if abs(o[0] - o[1]) == d])
        cond = "the two results differ by exactly " + str(d)
    return ("Two fair " + str(s) + "-sided dice (faces 1 to " + str(s) + ") are rolled. What is the probability that " + cond + "?",
            Fraction(fav, len(outs)), "There are " + str(len(outs)) + " equally likely ordered pairs; count the pairs where " + cond + ".")


def q_three_dice(rng):
    outs = dice_outcomes([6, 6, 6])
    target = rng.randint(5, 16)
    fav = len([o for o in outs if sum(o) == target])
    return ("Three fair six-sided dice are rolled. What is the probability that their sum is exactly " + str(target) + "?",
            Fraction(fav, 216), "There are 6^3 = 216 equally likely ordered outcomes; count the ordered triples that add up to " + str(target) + ".")


def q_biased_coin(rng):
    den = rng.choice([3, 4, 5])
    num = rng.randint(1, den - 1)
    p = Fraction(num, den)
    n = rng.randint(3, 5)
    k = rng.randint(1, n - 1)
    val = math.comb(n, k) * p ** k * (1 - p) ** (n - k)
    return ("A biased coin lands heads with probability " + str(num) + "/" + str(den) + ". It is tossed " + str(n) + " times independently. What is the probability of exactly " + str(k) + " heads?",
            val, "Use the binomial formula C(n, k) p^k (1-p)^(n-k) with n = " + str(n) + ", k = " + str(k) + "; here C(" + str(n) + ", " + str(k) + ") = " + str(math.comb(n, k)) + ".")


def q_conditional(rng):
    outs = dice_outcomes([6, 6])
    cond_kind = rng.choice(["first_even", "one_is", "sum_ge"])
    if cond_kind == "first_even":
        given = [o for o in outs if o[0] % 2 == 0]
        gtext = "the first die shows an even number"
    elif cond_kind == "one_is":
        v = rng.randint(1, 6)
        given = [o for o in outs if o[0] == v or o[1] == v]
        gtext = "at least one die shows a " + str(v)
    else:
        g = rng.randint(7, 10)
        given = [o for o in outs if sum(o) >= g]
        gtext = "the sum is at least " + str(g)
    for attempt in range(20):
        target = rng.randint(4, 11)
        fav = len([o for o in given if sum(o) == target])
        if 0 < fav < len(given):
            break
    if fav == 0 or fav == len(given):
        target = sum(given[0])
        fav = len([o for o in given if sum(o) == target])
    return ("Two fair six-sided dice are rolled. Given that " + gtext + ", what is the probability that the sum is exactly " + str(target) + "?",
            Fraction(fav, len(given)), "Restrict to the outcomes where " + gtext + ": there are " + str(len(given)) + " equally likely ordered pairs left; count those with sum " + str(target) + ".")


class Env:
    """Answer a seeded probability question about dice, coins or an urn with the exact probability as a fraction in lowest terms such as 5/36; difficulty moves from a single die or single draw, through two-dice sums, exact head counts and drawing two balls, to at-least-one and at-least-k events, three-dice sums, biased-coin binomials and conditional probabilities, the agent has four attempts and after a wrong answer is told whether it was too high or too low (or that it is not reduced), and a correct answer pays 1.0, 0.5, 0.25 or 0.1 by attempt."""

    name = "ExactProbabilityFraction"
    setting = "reasoning"
    max_turns = 4

    def __init__(self):
        self.question = ""
        self.answer = Fraction(1, 2)
        self.hint_text = ""
        self.kind = ""
        self.turn = 0
        self.done = False
        self.difficulty = 0

    def reset(self, seed):
        rng = random.Random(seed)
        self.difficulty = rng.randint(0, 3)
        level = self.difficulty
        if level == 0:
            kinds = ["single_die", "urn_single"]
        elif level == 1:
            kinds = ["two_dice_sum", "coins", "urn_draws"]
        elif level == 2:
            kinds = ["coins", "urn_draws", "at_least_one", "two_dice_other", "two_dice_sum"]
        else:
            kinds = ["three_dice", "urn_draws", "biased_coin", "conditional", "at_least_one"]
        kind = rng.choice(kinds)
        for attempt in range(30):
            if kind == "single_die":
                q = q_single_die(rng)
            elif kind == "urn_single":
                q = q_urn_single(rng)
            elif kind == "two_dice_sum":
                q = q_two_dice_sum(rng, level)
            elif kind == "coins":
                q = q_coins_exact(rng, level)
            elif kind == "urn_draws":
                q = q_urn_draws(rng, level)
            elif kind == "at_least_one":
                q = q_at_least_one(rng, level)
            elif kind == "two_dice_other":
                q = q_two_dice_other(rng)
            elif kind == "three_dice":
                q = q_three_dice(rng)
            elif kind == "biased_coin":
                q = q_biased_coin(rng)
            else:
                q = q_conditional(rng)
            if 0 < q[1] < 1 and q[1] != Fraction(1, 2):
                break
        self.question = q[0]
        self.answer = q[1]
        self.hint_text = q[2]
        self.kind = kind
        self.turn = 0
        self.done = False
        lines = [self.question,
                 "Answer with the exact probability as a fraction a/b in lowest terms (for example 3/29). You have "
                 + str(self.max_turns) + " attempts; after a wrong answer you are told whether it was too high or too low."]
        info = {"difficulty": level, "kind": kind, "attempts_left": self.max_turns}
        return "\n".join(lines), info

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {"attempt": self.turn, "correct": False}
        self.turn += 1
        text = str(action).strip()
        reward = 0.0
        terminated = False
        correct = False
        left = self.max_turns - self.turn
        match = FRACTION_ANSWER.match(text)
        guess = None
        if match is not None and int(match.group(2)) != 0:
            guess = Fraction(int(match.group(1)), int(match.group(2)))
        elif INT_ONLY.match(text) is not None:
            guess = Fraction(int(INT_ONLY.match(text).group(1)), 1)
        if guess is None:
            if DECIMAL.match(text) is not None:
                obs = "Decimals and percentages are not accepted; give an exact fraction a/b in lowest terms. It counts as an attempt. Attempts left: " + str(left) + "."
            else:
                obs = "Could not read a fraction a/b from your answer; it counts as an attempt. Attempts left: " + str(left) + "."
        elif guess == self.answer:
            num = int(match.group(1)) if match is not None else -1
            den = int(match.group(2)) if match is not None else -1
            if num == self.answer.numerator and den == self.answer.denominator:
                correct = True
                terminated = True
                reward = ATTEMPT_REWARDS[self.turn - 1]
                obs = "Correct! The probability is " + str(self.answer) + "."
            else:
                obs = "Your value is right but the fraction is not in lowest terms; reduce it. It counts as an attempt. Attempts left: " + str(left) + "."
        elif guess > self.answer:
            obs = "Wrong: " + text[:40] + " is too high. Attempts left: " + str(left) + "."
        else:
            obs = "Wrong: " + text[:40] + " is too low. Attempts left: " + str(left) + "."
        truncated = (not terminated) and self.turn >= self.max_turns
        if terminated or truncated:
            self.done = True
        if truncated:
            obs = obs + " No attempts left."
        info = {"attempt": self.turn, "correct": correct, "attempts_left": left}
        return obs, reward, terminated, truncated, info

    def hint(self):
        return self.hint_text + " Then reduce the fraction to lowest terms."

    def oracle(self):
        return str(self.answer.numerator) + "/" + str(self.answer.denominator)
