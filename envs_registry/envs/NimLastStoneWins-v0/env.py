import random
import re

MOVE = re.compile(r"^\s*(\d{1,3})\s*[ ,:/]\s*(\d{1,3})\s*\.?\s*$")
HEAP_COUNTS = [3, 3, 4, 5]
HEAP_MAX = [5, 9, 12, 15]


def nim_sum(heaps):
    total = 0
    for h in heaps:
        total = total ^ h
    return total


def winning_move(heaps):
    """The first (heap index, count) that leaves a nim-sum of zero; None when there is none."""
    x = nim_sum(heaps)
    if x == 0:
        return None
    for i in range(len(heaps)):
        target = heaps[i] ^ x
        if target < heaps[i]:
            return [i, heaps[i] - target]
    return None


def show_heaps(heaps):
    parts = []
    for i in range(len(heaps)):
        parts.append("heap " + str(i + 1) + ": " + str(heaps[i]))
    return ", ".join(parts)


class Env:
    """Play the take-away game Nim against a built-in opponent: seeded heaps of stones, each move removes one or more stones from a single heap, and whoever takes the last stone wins; the agent moves first from a position that is winnable, answers with "HEAP COUNT" (e.g. "2 3" removes three stones from heap 2), the opponent replies at once and plays the perfect nim-sum strategy whenever its position allows it, illegal moves are explained and cost a turn, and only winning the game pays 1.0 (a loss pays 0)."""

    name = "NimLastStoneWins"
    setting = "game"
    max_turns = 30

    def __init__(self):
        self.heaps = []
        self.rng = random.Random(0)
        self.turn = 0
        self.done = False
        self.difficulty = 0
        self.moves = 0

    def reset(self, seed):
        rng = random.Random(seed)
        self.difficulty = rng.randint(0, 3)
        n = HEAP_COUNTS[self.difficulty]
        top = HEAP_MAX[self.difficulty]
        heaps = []
        for attempt in range(200):
            heaps = [rng.randint(1, top) for i in range(n)]
            if nim_sum(heaps) != 0 and max(heaps) >= 2:
                break
        self.heaps = heaps
        self.rng = random.Random(rng.randint(0, 10 ** 9))
        self.turn = 0
        self.done = False
        self.moves = 0
        obs = ("Nim. Heaps: " + show_heaps(self.heaps) + ".\n"
               + "On each move a player removes one or more stones from exactly one heap; the player who takes the last stone wins. "
               + "You move first, then your opponent replies. Answer with two integers \"HEAP COUNT\", e.g. \"1 2\" removes 2 stones from heap 1. "
               + "You have " + str(self.max_turns) + " turns; an illegal move is refused and still uses a turn.")
        info = {"difficulty": self.difficulty, "heaps": list(self.heaps), "turn": 0}
        return obs, info

    def _info(self, legal):
        return {"difficulty": self.difficulty, "heaps": list(self.heaps), "turn": self.turn, "legal": legal}

    def _opponent(self):
        move = winning_move(self.heaps)
        if move is None:
            options = [i for i in range(len(self.heaps)) if self.heaps[i] > 0]
            i = self.rng.choice(options)
            move = [i, self.rng.randint(1, self.heaps[i])]
        self.heaps[move[0]] -= move[1]
        return move

    def step(self, action):
        if self.done:
            return "The game is over.", 0.0, True, False, self._info(False)
        self.turn += 1
        match = MOVE.match(str(action))
        obs = ""
        legal = False
        if match is None:
            obs = "Could not read a move; answer with two integers HEAP COUNT, e.g. \"1 2\". Heaps: " + show_heaps(self.heaps) + "."
        else:
            h = int(match.group(1))
            c = int(match.group(2))
            if h < 1 or h > len(self.heaps):
                obs = "There is no heap " + str(h) + "; heaps are numbered 1 to " + str(len(self.heaps)) + ". Heaps: " + show_heaps(self.heaps) + "."
            elif self.heaps[h - 1] == 0:
                obs = "Heap " + str(h) + " is empty; choose another heap. Heaps: " + show_heaps(self.heaps) + "."
            elif c < 1 or c > self.heaps[h - 1]:
                obs = ("You must remove between 1 and " + str(self.heaps[h - 1]) + " stones from heap " + str(h)
                       + ". Heaps: " + show_heaps(self.heaps) + ".")
            else:
                legal = True
        if legal:
            self.heaps[h - 1] -= c
            self.moves += 1
            if sum(self.heaps) == 0:
                self.done = True
                return ("You removed " + str(c) + " from heap " + str(h) + " and took the last stone. You win!",
                        1.0, True, False, self._info(True))
            reply = self._opponent()
            obs = ("You removed " + str(c) + " from heap " + str(h) + ". Opponent removed " + str(reply[1])
                   + " from heap " + str(reply[0] + 1) + ".")
            if sum(self.heaps) == 0:
                self.done = True
                return obs + " The opponent took the last stone. You lose.", 0.0, True, False, self._info(True)
            obs = obs + " Heaps: " + show_heaps(self.heaps) + ". Your move."
        truncated = self.turn >= self.max_turns
        if truncated:
            self.done = True
            obs = obs + " Out of turns; the game is abandoned."
        return obs, 0.0, False, truncated, self._info(legal)

    def hint(self):
        x = nim_sum(self.heaps)
        if x == 0:
            return ("The XOR of all heap sizes is 0 right now, so no move is safe; remove few stones and hope the opponent errs.")
        return ("Write each heap size in binary and XOR them together: the result is currently " + str(x)
                + " (binary " + bin(x)[2:] + "). Find a heap whose size has that highest bit set and shrink it so the XOR of all heaps becomes 0.")

    def oracle(self):
        move = winning_move(self.heaps)
        if move is None:
            for i in range(len(self.heaps)):
                if self.heaps[i] > 0:
                    return str(i + 1) + " 1"
            return "1 1"
        return str(move[0] + 1) + " " + str(move[1])
