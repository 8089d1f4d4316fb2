# ATTACK x41_info_dict_subclass
# Attempts : info is a dict subclass whose keys()/items()/__iter__/__len__ lie: they show one harmless
#            entry while the real storage also holds a set and a non-str key. isinstance(info, dict) holds,
#            a validator walking info.items() sees only the harmless entry, and json's C encoder (which
#            reads the real storage) or the pickler ships the rest.
# Phase    : reset
# Expected : REJECT PROTOCOL_ERROR (info must be exactly dict, checked with type(), not isinstance())
# Outcome  : PROTOCOL_ERROR
# Host must: require `type(x) is dict` / `is list` at every level and never call overridable methods of
#            the object being validated.
import random


class Info(dict):
    def keys(self):
        return ["moves"]

    def items(self):
        return [("moves", 0)]

    def __iter__(self):
        return iter(["moves"])

    def __len__(self):
        return 1


class Env:
    """Reply with the minimum number of moves to solve the Tower of Hanoi with a seeded number of disks between three and twelve; the agent has three attempts."""

    name = "HanoiMoves"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.disks = rng.randint(3, 12)
        self.answer = 2 ** self.disks - 1
        info = Info(moves=0)
        info["seen"] = {1, 2, 3}
        info[7] = "seven"
        self.t = 0
        return "Minimum moves for Tower of Hanoi with " + str(self.disks) + " disks?", info

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "With n disks it takes twice the moves for n - 1 disks, plus one; 3 disks take 7."

    def oracle(self):
        return str(self.answer)
