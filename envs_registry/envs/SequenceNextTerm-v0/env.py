import random
import re

ATTEMPT_REWARDS = [1.0, 0.5, 0.25, 0.1]
INT_ANSWER = re.compile(r"^\s*(-?\d{1,40})\s*\.?\s*$")

FAMILIES_BY_LEVEL = [
    ["arithmetic", "geometric"],
    ["arithmetic", "geometric", "interleaved", "alternating_ops"],
    ["geometric", "interleaved", "alternating_ops", "quadratic", "fibonacci"],
    ["quadratic", "fibonacci", "double_minus", "growing_ratio", "interleaved_geometric"],
]

FAMILY_HINTS = {
    "arithmetic": "Look at the differences between consecutive terms: they are all the same.",
    "geometric": "Look at the ratio between consecutive terms: each term is the previous one times the same whole number.",
    "interleaved": "The sequence is two separate sequences woven together: the terms in odd positions follow one rule and the terms in even positions another; each of the two changes by a constant step.",
    "alternating_ops": "Two operations alternate: the step from term 1 to term 2 is an addition, the step from term 2 to term 3 a multiplication, and so on in turn with the same two operations.",
    "quadratic": "Take the differences between consecutive terms, then the differences of those differences: the second differences are constant.",
    "fibonacci": "From the third term on, every term is built from the two terms just before it with the same fixed recipe (a sum of the two, possibly with a constant added).",
    "double_minus": "Each term is the previous term multiplied by the same whole number and then decreased (or increased) by the same constant.",
    "growing_ratio": "Each term is the previous term times a multiplier, and the multiplier grows by one at every step.",
    "interleaved_geometric": "The terms in odd positions and the terms in even positions form two separate sequences; one grows by multiplication, the other by a constant addition.",
}


def build(rng, family, level, count):
    terms = []
    if family == "arithmetic":
        a = rng.randint(-20, 60)
        d = rng.choice([-1, 1]) * rng.randint(3, 9 + 6 * level) if level >= 1 else rng.randint(3, 15)
        terms = [a + d * i for i in range(count + 1)]
    elif family == "geometric":
        a = rng.randint(1, 9)
        r = rng.randint(2, 3 + level)
        if level >= 2 and rng.random() < 0.4:
            r = -r
        terms = [a * r ** i for i in range(count + 1)]
    elif family == "interleaved":
        a = rng.randint(1, 50)
        b = rng.randint(1, 50)
        da = rng.choice([-1, 1]) * rng.randint(2, 12)
        db = rng.choice([-1, 1]) * rng.randint(2, 12)
        while db == da:
            db = rng.choice([-1, 1]) * rng.randint(2, 12)
        for i in range(count + 1):
            if i % 2 == 0:
                terms.append(a + da * (i // 2))
            else:
                terms.append(b + db * (i // 2))
    elif family == "alternating_ops":
        v = rng.randint(1, 9)
        add = rng.randint(1, 9)
        mul = rng.randint(2, 3)
        terms = [v]
        for i in range(count):
            if i % 2 == 0:
                v = v + add
            else:
                v = v * mul
            terms.append(v)
    elif family == "quadratic":
        a = rng.randint(-10, 30)
        d = rng.randint(-8, 10)
        s = rng.choice([-1, 1]) * rng.randint(2, 4 + level) if level >= 3 else rng.randint(2, 5)
        v = a
        terms = [v]
        for i in range(count):
            v = v + d + s * i
            terms.append(v)
    elif family == "fibonacci":
        x = rng.randint(1, 9)
        y = rng.randint(1, 12)
        c = rng.randint(-3, 5) if level >= 3 else 0
        terms = [x, y]
        while len(terms) < count + 1:
            terms.append(terms[-1] + terms[-2] + c)
    elif family == "double_minus":
        v = rng.randint(4, 15)
        m = rng.randint(2, 3)
        k = rng.choice([-1, 1]) * rng.randint(1, 7)
        terms = [v]
        for i in range(count):
            v = v * m - k
            terms.append(v)
    elif family == "growing_ratio":
        v = rng.randint(1, 5)
        m = rng.randint(1, 2)
        terms = [v]
        for i in range(count):
            v = v * (m + i)
            terms.append(v)
    else:
        a = rng.randint(1, 6)
        r = rng.randint(2, 3)
        b = rng.randint(-20, 40)
        db = rng.choice([-1, 1]) * rng.randint(3, 15)
        for i in range(count + 1):
            if i % 2 == 0:
                terms.append(a * r ** (i // 2))
            else:
                terms.append(b + db * (i // 2))
    return terms


class Env:
    """Find the next term of a seeded integer sequence shown by its first five to seven terms; the hidden rule comes from a family chosen by difficulty (arithmetic and geometric at the easy end, then interleaved sequences, alternating add/multiply steps, constant second differences, Fibonacci-like recurrences, multiply-then-shift and growing ratios), the agent answers with one integer, has four attempts with "too high" / "too low" feedback, and a correct answer pays 1.0, 0.5, 0.25 or 0.1 by attempt."""

    name = "SequenceNextTerm"
    setting = "reasoning"
    max_turns = 4

    def __init__(self):
        self.family = "arithmetic"
        self.terms = []
        self.answer = 0
        self.turn = 0
        self.done = False
        self.difficulty = 0

    def reset(self, seed):
        rng = random.Random(seed)
        self.difficulty = rng.randint(0, 3)
        level = self.difficulty
        count = rng.randint(5, 6) if level < 2 else rng.randint(6, 7)
        family = rng.choice(FAMILIES_BY_LEVEL[level])
        terms = build(rng, family, level, count)
        for attempt in range(50):
            if len(set(terms)) >= count - 1 and terms[-1] not in terms[:-1]:
                break
            terms = build(rng, family, level, count)
        self.family = family
        self.terms = terms[:count]
        self.answer = terms[count]
        self.turn = 0
        self.done = False
        lines = ["Here are the first " + str(count) + " terms of a sequence that follows a fixed rule:"]
        lines.append(", ".join([str(t) for t in self.terms]) + ", ?")
        lines.append("What is the next term? Answer with a single integer. You have " + str(self.max_turns)
                     + " attempts; after a wrong answer you are told whether it was too high or too low.")
        info = {"difficulty": level, "shown_terms": count, "attempts_left": self.max_turns}
        return "\n".join(lines), info

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {"attempt": self.turn, "correct": False}
        self.turn += 1
        match = INT_ANSWER.match(str(action).replace(",", ""))
        reward = 0.0
        terminated = False
        correct = False
        left = self.max_turns - self.turn
        if match is None:
            obs = "Could not read a single integer from your answer; it counts as an attempt. Attempts left: " + str(left) + "."
        else:
            guess = int(match.group(1))
            if guess == self.answer:
                correct = True
                terminated = True
                reward = ATTEMPT_REWARDS[self.turn - 1]
                obs = "Correct! The next term is " + str(self.answer) + "."
            elif guess > self.answer:
                obs = "Wrong: " + str(guess) + " is too high. Attempts left: " + str(left) + "."
            else:
                obs = "Wrong: " + str(guess) + " is too low. Attempts left: " + str(left) + "."
        truncated = (not terminated) and self.turn >= self.max_turns
        if terminated or truncated:
            self.done = True
        if truncated:
            obs = obs + " No attempts left."
        info = {"attempt": self.turn, "correct": correct, "attempts_left": left}
        return obs, reward, terminated, truncated, info

    def hint(self):
        return FAMILY_HINTS[self.family] + " Find the rule from the early terms, check it on every shown term, then apply it once more."

    def oracle(self):
        return str(self.answer)
