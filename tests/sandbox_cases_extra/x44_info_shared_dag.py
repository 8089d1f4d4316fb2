# ATTACK x44_info_shared_dag
# Attempts : "billion laughs" for info: 26 lists, each holding the previous one twice. In memory it is 26
#            objects; expanded as JSON it is 2**26 leaves (hundreds of MB to encode), 28 containers deep, so
#            the depth bound (32) does not catch it and a size check done after json.dumps comes too late.
# Phase    : reset
# Expected : REJECT PROTOCOL_ERROR (more than 10k nodes counted on the expanded tree); a host that
#            files node-count overflow as an output-size problem reports OUTPUT_LIMIT
# Outcome  : PROTOCOL_ERROR|OUTPUT_LIMIT
# Host must: count nodes while walking (every visit of a shared object counts) and stop at the bound
#            before serialising anything.
import random


class Env:
    """Reply with two to the power of a seeded exponent between 10 and 60; the agent has three attempts."""

    name = "PowerOfTwo"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.k = rng.randint(10, 60)
        self.answer = 2 ** self.k
        tree = [0]
        for _ in range(26):
            tree = [tree, tree]
        self.t = 0
        return "2 ** " + str(self.k) + " = ?", {"tree": tree}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "2 ** 10 = 1024; the answer has " + str(len(str(self.answer))) + " digits."

    def oracle(self):
        return str(self.answer)
