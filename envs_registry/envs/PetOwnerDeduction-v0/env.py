import itertools
import json
import random
import re

ATTEMPT_REWARDS = [1.0, 0.5, 0.25, 0.1]

PEOPLE = ["Alice", "Bruno", "Chen", "Dalia", "Emeka", "Farah", "Goran", "Hana", "Ivo", "Jun", "Kira", "Luca", "Mona", "Nils"]
PETS = ["cat", "dog", "parrot", "hamster", "goldfish", "rabbit", "turtle", "ferret", "lizard", "canary", "snake", "pony"]


def clue_holds(clue, perm):
    kind = clue[0]
    if kind == "owns":
        return perm[clue[1]] == clue[2]
    if kind == "not":
        return perm[clue[1]] != clue[2]
    if kind == "either":
        return perm[clue[1]] == clue[3] or perm[clue[2]] == clue[3]
    where = {}
    for house in range(len(perm)):
        where[perm[house]] = house
    a = where[clue[1]]
    b = where[clue[2]]
    if kind == "next":
        return abs(a - b) == 1
    if kind == "left":
        return a < b
    if kind == "apart":
        return abs(a - b) >= 2
    return False


def clue_text(clue, people, pets):
    kind = clue[0]
    if kind == "owns":
        return people[clue[1]] + " owns the " + pets[clue[2]] + "."
    if kind == "not":
        return people[clue[1]] + " does not own the " + pets[clue[2]] + "."
    if kind == "either":
        return "The " + pets[clue[3]] + " belongs to either " + people[clue[1]] + " or " + people[clue[2]] + "."
    if kind == "next":
        return "The " + pets[clue[1]] + " lives in a house right next to the house of the " + pets[clue[2]] + "."
    if kind == "left":
        return "The " + pets[clue[1]] + " lives somewhere to the left of the " + pets[clue[2]] + "."
    if kind == "apart":
        return "The " + pets[clue[1]] + " and the " + pets[clue[2]] + " do not live in neighbouring houses."
    return ""


def random_clue(rng, kinds, solution):
    n = len(solution)
    kind = rng.choice(kinds)
    if kind == "owns":
        h = rng.randrange(n)
        return ["owns", h, solution[h]]
    if kind == "not":
        h = rng.randrange(n)
        p = rng.randrange(n)
        while p == solution[h]:
            p = rng.randrange(n)
        return ["not", h, p]
    if kind == "either":
        h = rng.randrange(n)
        o = rng.randrange(n)
        while o == h:
            o = rng.randrange(n)
        pair = sorted([h, o])
        return ["either", pair[0], pair[1], solution[h]]
    a = rng.randrange(n)
    b = rng.randrange(n)
    while b == a:
        b = rng.randrange(n)
    pa = solution[a]
    pb = solution[b]
    if kind == "left":
        if a < b:
            return ["left", pa, pb]
        return ["left", pb, pa]
    if abs(a - b) == 1:
        return ["next", pa, pb]
    return ["apart", pa, pb]


class Env:
    """Solve a seeded pet-ownership logic puzzle: three to six people live in a row of numbered houses and each owns a different pet, and the agent deduces from a minimal set of clues (direct ownership, exclusions, either-or, next-to, left-of and not-neighbouring clues) which pet lives in each house, answering with the pets as a comma-separated list in house order; difficulty sets the number of houses and removes the easy direct clues, the agent has four attempts and after a wrong answer is told how many houses it got right, and a correct answer pays 1.0, 0.5, 0.25 or 0.1 by attempt."""

    name = "PetOwnerDeduction"
    setting = "reasoning"
    max_turns = 4

    def __init__(self):
        self.people = []
        self.pets = []
        self.solution = []
        self.clues = []
        self.turn = 0
        self.done = False
        self.difficulty = 0

    def reset(self, seed):
        rng = random.Random(seed)
        self.difficulty = rng.randint(0, 3)
        level = self.difficulty
        n = 3 + level
        people = rng.sample(PEOPLE, n)
        pets = rng.sample(PETS, n)
        solution = list(range(n))
        rng.shuffle(solution)
        if level == 0:
            kinds = ["owns", "not", "not", "either", "left"]
        elif level == 1:
            kinds = ["owns", "not", "not", "either", "next", "left", "apart"]
        else:
            kinds = ["not", "either", "either", "next", "left", "left", "apart"]
        candidates = [list(p) for p in itertools.permutations(range(n))]
        clues = []
        guard = 0
        while len(candidates) > 1 and guard < 2000:
            guard += 1
            clue = random_clue(rng, kinds, solution)
            kept = [p for p in candidates if clue_holds(clue, p)]
            if len(kept) < len(candidates):
                clues.append(clue)
                candidates = kept
        if len(candidates) > 1:
            h = 0
            clues.append(["owns", h, solution[h]])
        all_perms = [list(p) for p in itertools.permutations(range(n))]
        i = 0
        while i < len(clues):
            trial = clues[:i] + clues[i + 1:]
            count = 0
            for p in all_perms:
                ok = True
                for c in trial:
                    if not clue_holds(c, p):
                        ok = False
                        break
                if ok:
                    count += 1
                    if count > 1:
                        break
            if count == 1:
                clues = trial
            else:
                i += 1
        rng.shuffle(clues)
        self.people = people
        self.pets = pets
        self.solution = solution
        self.clues = clues
        self.turn = 0
        self.done = False
        lines = [str(n) + " people live in a row of houses numbered 1 to " + str(n) + " from left to right:"]
        lines.append(", ".join(["house " + str(h + 1) + ": " + people[h] for h in range(n)]) + ".")
        lines.append("Each owns exactly one pet, all different. The pets are: " + ", ".join(sorted(pets)) + ".")
        lines.append("Clues:")
        for k in range(len(clues)):
            lines.append(str(k + 1) + ". " + clue_text(clues[k], people, pets))
        lines.append("Which pet lives in each house? Answer with the " + str(n)
                     + " pets as a comma-separated list in house order (house 1 first), e.g. \"" + ", ".join(sorted(pets)) + "\". "
                     + "You have " + str(self.max_turns) + " attempts; after a wrong answer you are told how many houses you got right.")
        info = {"difficulty": level, "houses": n, "clues": len(clues), "attempts_left": self.max_turns}
        return "\n".join(lines), info

    def _parse(self, text):
        text = text.strip()
        items = None
        if text.startswith("["):
            try:
                data = json.loads(text)
            except ValueError:
                data = None
            if isinstance(data, list):
                items = [str(x) for x in data]
        if items is None:
            items = re.split(r"[,;\n]+", text)
        out = []
        for item in items:
            word = item.strip().strip(".\"'`").strip().lower()
            if ":" in word:
                word = word.split(":")[-1].strip()
            if word.startswith("the "):
                word = word[4:].strip()
            if word:
                out.append(word)
        return out

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {"attempt": self.turn, "correct": False}
        self.turn += 1
        n = len(self.solution)
        left = self.max_turns - self.turn
        reward = 0.0
        terminated = False
        correct = False
        items = self._parse(str(action))
        unknown = [w for w in items if w not in self.pets]
        if len(items) != n:
            obs = ("Your answer must list exactly " + str(n) + " pets separated by commas, in house order; I read "
                   + str(len(items)) + " item(s). It counts as an attempt. Attempts left: " + str(left) + ".")
        elif unknown:
            obs = ("Unknown pet name(s): " + ", ".join(unknown[:5]) + ". Use only: " + ", ".join(sorted(self.pets))
                   + ". It counts as an attempt. Attempts left: " + str(left) + ".")
        elif len(set(items)) != n:
            obs = "Each pet must appear exactly once in your list. It counts as an attempt. Attempts left: " + str(left) + "."
        else:
            right = 0
            for h in range(n):
                if items[h] == self.pets[self.solution[h]]:
                    right += 1
            if right == n:
                correct = True
                terminated = True
                reward = ATTEMPT_REWARDS[self.turn - 1]
                obs = "Correct! Every pet is in the right house."
            else:
                obs = ("Wrong: " + str(right) + " of " + str(n) + " houses are right. Attempts left: " + str(left) + ".")
        truncated = (not terminated) and self.turn >= self.max_turns
        if terminated or truncated:
            self.done = True
        if truncated:
            obs = obs + " No attempts left."
        info = {"attempt": self.turn, "correct": correct, "attempts_left": left}
        return obs, reward, terminated, truncated, info

    def hint(self):
        n = len(self.solution)
        given = []
        for c in self.clues:
            if c[0] == "owns":
                given.append(c[1])
        house = 0
        for h in range(n):
            if h not in given:
                house = h
                break
        return ("Eliminate house by house and test each remaining arrangement against every clue. One fact to anchor on: house "
                + str(house + 1) + " (" + self.people[house] + ") keeps the " + self.pets[self.solution[house]] + ".")

    def oracle(self):
        return ", ".join([self.pets[self.solution[h]] for h in range(len(self.solution))])
