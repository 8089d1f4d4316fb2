import random
import re

PEGS = ["A", "B", "C"]
MOVE_TEXT = re.compile(r"^\s*([ABCabc])\s*(?:->|to|,|-)?\s*([ABCabc])\s*\.?\s*$")


def next_move(where, k, target):
    """First move of the optimal way to gather disks 1..k (1 = smallest) on peg target.

    where[d] is the peg index of disk d. Returns [from_peg, to_peg] or None when already done."""
    while k >= 1:
        if where[k] == target:
            k -= 1
            continue
        spare = 3 - where[k] - target
        # disks 1..k-1 must first be stacked on the spare peg
        sub = next_move(where, k - 1, spare)
        if sub is None:
            return [where[k], target]
        return sub
    return None


def distance(where, k, target):
    """Number of moves of the optimal way to gather disks 1..k on peg target."""
    total = 0
    while k >= 1:
        if where[k] == target:
            k -= 1
            continue
        spare = 3 - where[k] - target
        # move k-1 tower to spare, move disk k, then the full k-1 tower onto target
        total += distance(where, k - 1, spare) + 1 + (2 ** (k - 1) - 1)
        return total
    return total


class Env:
    """Finish a seeded Tower of Hanoi position: three pegs A, B and C hold three to six disks (more with higher difficulty) in a random legal arrangement, and the agent must gather all disks on the named target peg by moving one top disk per turn with actions like "A C", never placing a larger disk on a smaller one; illegal or unreadable moves are explained and wasted, the episode allows a limited number of turns, and stacking every disk on the target peg pays 1.0."""

    name = "HanoiTowerFinish"
    setting = "game"
    max_turns = 90

    def __init__(self):
        self.n = 3
        self.where = [0, 0, 0, 0]
        self.target = 2
        self.turn = 0
        self.done = False
        self.difficulty = 0
        self.optimal = 0

    def reset(self, seed):
        rng = random.Random(seed)
        self.difficulty = rng.randint(0, 3)
        self.n = 3 + self.difficulty
        self.target = rng.randrange(3)
        full = 2 ** self.n - 1
        lowest = full // 2 + 1
        for attempt in range(200):
            where = [0]
            for d in range(self.n):
                where.append(rng.randrange(3))
            if distance(where, self.n, self.target) >= lowest:
                break
        self.where = where
        self.turn = 0
        self.done = False
        self.optimal = distance(self.where, self.n, self.target)
        info = {"difficulty": self.difficulty, "disks": self.n, "target": PEGS[self.target],
                "optimal_moves": self.optimal}
        intro = ("Tower of Hanoi with " + str(self.n) + " disks numbered 1 (smallest) to " + str(self.n)
                 + " (largest). Move every disk onto peg " + PEGS[self.target] + ". Each turn move the top disk "
                 "of one peg onto another peg, written as two peg letters such as \"A C\" (from A to C). "
                 "A disk may never be placed on a smaller disk. You have " + str(self.max_turns) + " turns.")
        return intro + "\n" + self._render(), info

    def _stack(self, peg):
        return [d for d in range(self.n, 0, -1) if self.where[d] == peg]

    def _render(self):
        lines = []
        for p in range(3):
            disks = self._stack(p)
            body = " ".join(str(d) for d in disks) if disks else "(empty)"
            lines.append("Peg " + PEGS[p] + " (bottom to top): " + body)
        lines.append("Target peg: " + PEGS[self.target] + ". Turns used: " + str(self.turn) + "/" + str(self.max_turns) + ".")
        return "\n".join(lines)

    def _solved(self):
        return all(self.where[d] == self.target for d in range(1, self.n + 1))

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {"difficulty": self.difficulty, "turn": self.turn}
        self.turn += 1
        text = str(action)
        match = MOVE_TEXT.match(text)
        reward = 0.0
        terminated = False
        if match is None:
            msg = ("Could not read a move from " + repr(text[:30]) + "; write two peg letters such as \"A C\" "
                   "to move the top disk of A onto C. The turn is wasted.")
        else:
            src = PEGS.index(match.group(1).upper())
            dst = PEGS.index(match.group(2).upper())
            src_stack = self._stack(src)
            dst_stack = self._stack(dst)
            if src == dst:
                msg = "The two pegs must differ. The turn is wasted."
            elif not src_stack:
                msg = "Peg " + PEGS[src] + " is empty; nothing to move. The turn is wasted."
            elif dst_stack and dst_stack[-1] < src_stack[-1]:
                msg = ("Illegal: disk " + str(src_stack[-1]) + " cannot go on the smaller disk "
                       + str(dst_stack[-1]) + " on peg " + PEGS[dst] + ". The turn is wasted.")
            else:
                disk = src_stack[-1]
                self.where[disk] = dst
                msg = "Moved disk " + str(disk) + " from " + PEGS[src] + " to " + PEGS[dst] + "."
                if self._solved():
                    terminated = True
                    reward = 1.0
                    msg = msg + " All disks are on peg " + PEGS[self.target] + " after " + str(self.turn) + " turns. Solved!"
        truncated = (not terminated) and self.turn >= self.max_turns
        if terminated or truncated:
            self.done = True
        obs = msg + "\n" + self._render()
        if truncated:
            obs = obs + "\nNo turns left; the tower was not finished."
        info = {"difficulty": self.difficulty, "turn": self.turn, "solved": terminated,
                "moves_left_optimal": distance(self.where, self.n, self.target)}
        return obs, reward, terminated, truncated, info

    def hint(self):
        k = self.n
        while k >= 1 and self.where[k] == self.target:
            k -= 1
        if k < 1:
            return "Every disk is already on the target peg."
        spare = 3 - self.where[k] - self.target
        left = distance(self.where, self.n, self.target)
        if k == 1:
            return ("Only disk 1 is out of place; put it on peg " + PEGS[self.target] + ". " + str(left) + " move(s) remain.")
        return ("Work from the largest misplaced disk: disk " + str(k) + " must reach peg " + PEGS[self.target]
                + ", so first stack disks 1 to " + str(k - 1) + " on peg " + PEGS[spare]
                + " (solve that smaller tower the same way). The best finish takes " + str(left) + " more moves.")

    def oracle(self):
        mv = next_move(self.where, self.n, self.target)
        if mv is None:
            return "A B"
        return PEGS[mv[0]] + " " + PEGS[mv[1]]
