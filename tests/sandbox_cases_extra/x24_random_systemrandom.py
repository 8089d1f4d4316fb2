# ATTACK x24_random_systemrandom
# Attempts : random.SystemRandom draws from os.urandom: an OS entropy source reachable from the sandbox
#            (and an unseedable RNG that makes every episode differ while looking like a seeded one).
# Phase    : reset
# Expected : REJECT SANDBOX_DENIED (random.SystemRandom is not exposed by the random proxy)
# Outcome  : SANDBOX_DENIED
# Host must: withhold SystemRandom (and random's private urandom/os references) from the random proxy.
import random


class Env:
    """Convert a seeded whole number below one million to hexadecimal and reply with lowercase digits and no prefix; the agent has three attempts."""

    name = "DecimalToHex"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        salt = random.SystemRandom().randint(0, 9)
        self.number = rng.randint(4096, 999999) + salt
        self.answer = hex(self.number)[2:]
        self.t = 0
        return "Write " + str(self.number) + " in hexadecimal (lowercase, no 0x).", {}

    def step(self, action):
        self.t += 1
        if action.strip().lower() == self.answer:
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "The answer has " + str(len(self.answer)) + " hex digits; the last one is " + self.answer[-1] + "."

    def oracle(self):
        return self.answer
