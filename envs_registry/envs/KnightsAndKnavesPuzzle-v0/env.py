import itertools
import random
import re

ATTEMPT_REWARDS = [1.0, 0.5, 0.25, 0.1]
NAMES = ["A", "B", "C", "D"]
ENTRY = re.compile(r"^\s*([A-Za-z]+)\s*[=:]\s*(knight|knave)\s*\.?\s*$", re.IGNORECASE)


def kind_word(is_knight):
    if is_knight:
        return "knight"
    return "knave"


def truth_of(stmt, assign):
    kind = stmt[0]
    if kind == "is":
        return assign[stmt[1]] == stmt[2]
    if kind == "same":
        return assign[stmt[1]] == assign[stmt[2]]
    if kind == "diff":
        return assign[stmt[1]] != assign[stmt[2]]
    if kind == "exactly_one":
        return sum(1 for v in assign if v) == 1
    if kind == "count":
        return sum(1 for v in assign if v) == stmt[1]
    if kind == "at_least_one_knave":
        return (not assign[stmt[1]]) or (not assign[stmt[2]])
    if kind == "if_then":
        return (not assign[stmt[1]]) or (not assign[stmt[2]] if stmt[3] == "knave" else assign[stmt[2]])
    return False


def describe(stmt, n):
    kind = stmt[0]
    if kind == "is":
        return NAMES[stmt[1]] + " is a " + kind_word(stmt[2]) + "."
    if kind == "same":
        return NAMES[stmt[1]] + " and " + NAMES[stmt[2]] + " are the same kind."
    if kind == "diff":
        return NAMES[stmt[1]] + " and " + NAMES[stmt[2]] + " are different kinds."
    if kind == "exactly_one":
        return "Exactly one of us is a knight."
    if kind == "count":
        return "Exactly " + str(stmt[1]) + " of us " + ("is a knight" if stmt[1] == 1 else "are knights") + "."
    if kind == "at_least_one_knave":
        return "At least one of " + NAMES[stmt[1]] + " and " + NAMES[stmt[2]] + " is a knave."
    if kind == "if_then":
        return "If " + NAMES[stmt[1]] + " is a knight, then " + NAMES[stmt[2]] + " is a " + stmt[3] + "."
    return "Nothing."


def random_statement(rng, speaker, n, level):
    others = [i for i in range(n) if i != speaker]
    kinds = ["is", "is", "same", "diff", "exactly_one"]
    if level >= 2:
        kinds = kinds + ["count", "at_least_one_knave"]
    if level >= 3:
        kinds = kinds + ["if_then", "if_then", "at_least_one_knave"]
    kind = rng.choice(kinds)
    if kind == "is":
        return ["is", rng.choice(others), rng.random() < 0.5]
    if kind in ("same", "diff"):
        if len(others) >= 2 and rng.random() < 0.5:
            pair = rng.sample(others, 2)
        else:
            pair = [speaker, rng.choice(others)]
        return [kind, pair[0], pair[1]]
    if kind == "exactly_one":
        return ["exactly_one"]
    if kind == "count":
        return ["count", rng.randint(0, n)]
    pair = rng.sample(list(range(n)), 2)
    if kind == "at_least_one_knave":
        return ["at_least_one_knave", pair[0], pair[1]]
    return ["if_then", pair[0], pair[1], rng.choice(["knight", "knave"])]


def consistent(statements, assign):
    for i in range(len(statements)):
        if truth_of(statements[i], assign) != assign[i]:
            return False
    return True


class Env:
    """Solve a seeded knights-and-knaves logic puzzle: two to four islanders (more and with compound statements at higher difficulty) each make one statement about the others, knights always tell the truth and knaves always lie, and exactly one assignment of kinds is consistent; the agent answers with one NAME=knight or NAME=knave entry per islander, separated by commas, gets told how many islanders it classified correctly after a wrong answer, and earns 1.0, 0.5, 0.25 or 0.1 for solving it on the first, second, third or fourth attempt."""

    name = "KnightsAndKnavesPuzzle"
    setting = "reasoning"
    max_turns = 4

    def __init__(self):
        self.n = 0
        self.statements = []
        self.solution = []
        self.hint_index = 0
        self.turn = 0
        self.done = False
        self.difficulty = 0

    def reset(self, seed):
        rng = random.Random(seed)
        self.difficulty = rng.randint(0, 3)
        self.n = [2, 3, 4, 4][self.difficulty]
        n = self.n
        solution = None
        statements = None
        for attempt in range(2000):
            target = [rng.random() < 0.5 for i in range(n)]
            stmts = []
            for speaker in range(n):
                stmt = None
                for tries in range(50):
                    cand = random_statement(rng, speaker, n, self.difficulty)
                    if truth_of(cand, target) == target[speaker]:
                        stmt = cand
                        break
                if stmt is None:
                    break
                stmts.append(stmt)
            if len(stmts) < n:
                continue
            found = []
            for combo in itertools.product([True, False], repeat=n):
                assign = list(combo)
                if consistent(stmts, assign):
                    found.append(assign)
            if len(found) == 1:
                solution = found[0]
                statements = stmts
                break
        if solution is None:
            statements = [["is", 1, False], ["same", 0, 1]]
            self.n = 2
            n = 2
            solution = [True, False]
        self.statements = statements
        self.solution = solution
        self.hint_index = rng.randrange(n)
        self.turn = 0
        self.done = False
        names = ", ".join(NAMES[:n])
        lines = ["On this island every inhabitant is either a knight (always tells the truth) or a knave (always lies).",
                 "You meet " + str(n) + " islanders: " + names + ". Each says one thing (\"us\" means all " + str(n) + " islanders):"]
        for i in range(n):
            lines.append(NAMES[i] + " says: \"" + describe(statements[i], n) + "\"")
        lines.append("Exactly one assignment of kinds is consistent. Determine the kind of every islander and answer with one entry per islander "
                     "in the form NAME=knight or NAME=knave, separated by commas, naming each islander exactly once. You have "
                     + str(self.max_turns) + " attempts; after a wrong answer you are told how many islanders you got right.")
        info = {"islanders": n, "difficulty": self.difficulty, "attempts_left": self.max_turns}
        return "\n".join(lines), info

    def parse(self, text):
        parts = [p for p in re.split(r"[,;\n]", text) if p.strip() != ""]
        if len(parts) == 0:
            return None, "Your answer was empty."
        guess = {}
        for part in parts:
            m = ENTRY.match(part)
            if m is None:
                return None, "Could not read the entry '" + part.strip()[:40] + "'; use NAME=knight or NAME=knave."
            name = m.group(1).upper()
            if name not in NAMES[:self.n]:
                return None, "'" + m.group(1)[:20] + "' is not one of the islanders (" + ", ".join(NAMES[:self.n]) + ")."
            if name in guess:
                return None, "Islander " + name + " was named more than once."
            guess[name] = m.group(2).lower() == "knight"
        missing = [nm for nm in NAMES[:self.n] if nm not in guess]
        if len(missing) > 0:
            return None, "You did not classify every islander; missing: " + ", ".join(missing) + "."
        return [guess[nm] for nm in NAMES[:self.n]], ""

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {"attempt": self.turn, "correct": False}
        self.turn += 1
        guess, err = self.parse(str(action))
        reward = 0.0
        terminated = False
        correct = False
        left = self.max_turns - self.turn
        right = 0
        if guess is None:
            obs = err + " It counts as an attempt. Attempts left: " + str(left) + "."
        else:
            right = sum(1 for i in range(self.n) if guess[i] == self.solution[i])
            if right == self.n:
                correct = True
                terminated = True
                reward = ATTEMPT_REWARDS[self.turn - 1]
                obs = "Correct! " + self.oracle() + "."
            else:
                obs = ("Wrong: you classified " + str(right) + " of " + str(self.n)
                       + " islanders correctly. Attempts left: " + str(left) + ".")
        truncated = (not terminated) and self.turn >= self.max_turns
        if terminated or truncated:
            self.done = True
        if truncated:
            obs = obs + " No attempts left."
        info = {"attempt": self.turn, "correct": correct, "attempts_left": left, "num_right": right}
        return obs, reward, terminated, truncated, info

    def hint(self):
        i = self.hint_index
        return ("Start from this fact: islander " + NAMES[i] + " is a " + kind_word(self.solution[i])
                + ", so " + NAMES[i] + "'s statement is " + ("true" if self.solution[i] else "false")
                + "; deduce the other islanders from there.")

    def oracle(self):
        return ", ".join(NAMES[i] + "=" + kind_word(self.solution[i]) for i in range(self.n))
