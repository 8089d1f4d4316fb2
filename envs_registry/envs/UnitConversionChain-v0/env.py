import random
import re

ATTEMPT_REWARDS = [1.0, 0.5, 0.25, 0.1]
INT_ANSWER = re.compile(r"^\s*(-?\d{1,30})\s*\.?\s*$")

REAL_SYSTEMS = [
    ["length", [["kilometre", "kilometres"], ["metre", "metres"], ["centimetre", "centimetres"], ["millimetre", "millimetres"]], [1000, 100, 10]],
    ["time", [["day", "days"], ["hour", "hours"], ["minute", "minutes"], ["second", "seconds"]], [24, 60, 60]],
    ["mass", [["tonne", "tonnes"], ["kilogram", "kilograms"], ["gram", "grams"], ["milligram", "milligrams"]], [1000, 1000, 1000]],
    ["distance", [["league", "leagues"], ["mile", "miles"], ["furlong", "furlongs"], ["chain", "chains"]], [3, 8, 10]],
]

ONSETS = ["b", "d", "g", "k", "l", "m", "n", "p", "r", "s", "t", "v", "z", "br", "gl", "kr", "pl", "st", "tr", "zn"]
VOWELS = ["a", "e", "i", "o", "u", "oo", "ai"]
CODAS = ["", "n", "p", "rk", "sh", "t", "x", "m", "ld"]
REALMS = ["Vellmar", "Ostrava Reach", "the Quill Isles", "Dunmere", "Sarn", "the Amber Coast", "Kethria", "Low Wend"]


def make_word(rng):
    word = rng.choice(ONSETS) + rng.choice(VOWELS) + rng.choice(CODAS)
    if rng.random() < 0.5:
        word = word + rng.choice(VOWELS) + rng.choice(CODAS)
    return word


def plural_form(word):
    if word.endswith("sh") or word.endswith("x") or word.endswith("s"):
        return word + "es"
    return word + "s"


def plural(unit, count):
    if count == 1:
        return unit[0]
    return unit[1]


def describe_quantity(units, amounts):
    parts = []
    for i in range(len(amounts)):
        if amounts[i] > 0:
            parts.append(str(amounts[i]) + " " + plural(units[i], amounts[i]))
    return " ".join(parts)


class Env:
    """Convert seeded compound quantities down a chain of units (real ones like kilometres to metres to centimetres, or invented units whose conversion facts are stated in shuffled order) into the smallest unit of the chain and answer with one integer; difficulty sets the chain length, whether units are real or invented and how many quantities are summed, the agent has four attempts with "too high" / "too low" feedback, and a correct answer pays 1.0, 0.5, 0.25 or 0.1 by attempt."""

    name = "UnitConversionChain"
    setting = "reasoning"
    max_turns = 4

    def __init__(self):
        self.units = []
        self.factors = []
        self.quantities = []
        self.target_index = 0
        self.per_unit = []
        self.answer = 0
        self.turn = 0
        self.done = False
        self.difficulty = 0

    def reset(self, seed):
        rng = random.Random(seed)
        self.difficulty = rng.randint(0, 3)
        level = self.difficulty
        if level <= 1:
            system = rng.choice(REAL_SYSTEMS)
            topic = system[0]
            all_units = [list(u) for u in system[1]]
            all_factors = list(system[2])
            steps = 2 + level
            start = rng.randint(0, 3 - steps)
            units = all_units[start:start + steps + 1]
            factors = all_factors[start:start + steps]
            realm = ""
        else:
            steps = level + 1
            names = []
            while len(names) < steps + 1:
                w = make_word(rng)
                if w not in names and len(w) >= 3:
                    names.append(w)
            units = [[w, plural_form(w)] for w in names]
            factors = [rng.randint(3, 12) for i in range(steps)]
            topic = "measure"
            realm = rng.choice(REALMS)
        per_unit = [1] * (steps + 1)
        for i in range(steps - 1, -1, -1):
            per_unit[i] = per_unit[i + 1] * factors[i]
        n_quantities = 1 if level < 3 else 2
        quantities = []
        for q in range(n_quantities):
            amounts = [0] * (steps + 1)
            amounts[0] = rng.randint(2, 9 + 3 * level)
            if level >= 1:
                n_extra = rng.randint(1, min(level, steps))
                positions = rng.sample(list(range(1, steps + 1)), n_extra)
                for p in sorted(positions):
                    amounts[p] = rng.randint(1, factors[p - 1] - 1)
            quantities.append(amounts)
        answer = 0
        for amounts in quantities:
            for i in range(steps + 1):
                answer += amounts[i] * per_unit[i]
        self.units = units
        self.factors = factors
        self.quantities = quantities
        self.target_index = steps
        self.per_unit = per_unit
        self.answer = answer
        self.turn = 0
        self.done = False
        facts = []
        for i in range(steps):
            if level >= 3 and rng.random() < 0.5:
                facts.append(str(factors[i]) + " " + units[i + 1][1] + " make one " + units[i][0] + ".")
            else:
                facts.append("1 " + units[i][0] + " = " + str(factors[i]) + " " + units[i + 1][1] + ".")
        if level >= 2:
            rng.shuffle(facts)
        target = units[steps][1]
        lines = []
        if realm:
            lines.append("In " + realm + " people use their own units of " + topic + ". The conversion facts are:")
        else:
            lines.append("Unit conversion (" + topic + "). Use these conversion facts:")
        for f in facts:
            lines.append("- " + f)
        if n_quantities == 1:
            lines.append("How many " + target + " are there in " + describe_quantity(units, quantities[0]) + "?")
        else:
            lines.append("A delivery is made of two parts: " + describe_quantity(units, quantities[0]) + " and "
                         + describe_quantity(units, quantities[1]) + ". How many " + target + " is the whole delivery in total?")
        lines.append("Answer with a single integer (the number of " + target + " only). You have "
                     + str(self.max_turns) + " attempts; after a wrong answer you are told whether it was too high or too low.")
        info = {"difficulty": level, "steps": steps, "quantities": n_quantities, "attempts_left": self.max_turns}
        return "\n".join(lines), info

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {"attempt": self.turn, "correct": False}
        self.turn += 1
        text = str(action).replace(",", "")
        match = INT_ANSWER.match(text)
        reward = 0.0
        terminated = False
        correct = False
        left = self.max_turns - self.turn
        target = self.units[self.target_index][1]
        if match is None:
            obs = ("Could not read a single integer (the number of " + target
                   + ") from your answer; it counts as an attempt. Attempts left: " + str(left) + ".")
        else:
            guess = int(match.group(1))
            if guess == self.answer:
                correct = True
                terminated = True
                reward = ATTEMPT_REWARDS[self.turn - 1]
                obs = "Correct! The total is " + str(self.answer) + " " + target + "."
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
        parts = []
        for i in range(self.target_index):
            parts.append("1 " + self.units[i][0] + " = " + str(self.per_unit[i]) + " " + self.units[self.target_index][1])
        return ("Chain the facts by multiplying from the largest unit down: " + "; ".join(parts)
                + ". Multiply each amount by its value in the target unit and add everything up.")

    def oracle(self):
        return str(self.answer)
