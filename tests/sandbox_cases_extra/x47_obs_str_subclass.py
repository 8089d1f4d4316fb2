# ATTACK x47_obs_str_subclass
# Attempts : the observation is an instance of a str subclass that overrides encode(), __len__ and
#            __str__, so a host calling obs.encode() / len(obs) / str(obs) to check it sees a short clean
#            text while the real value ends in a lone surrogate; pickling it to the host would also make
#            the host import the program's class.
# Phase    : load (class creation, where str is not an allowed base) or reset (the returned observation)
# Expected : REJECT SANDBOX_DENIED (deriving from str is refused) or PROTOCOL_ERROR (obs must be exactly
#            str: `type(obs) is str`)
# Outcome  : SANDBOX_DENIED|PROTOCOL_ERROR
# Host must: check `type(obs) is str` and measure the real value (str.encode(obs)), never call methods on
#            what the program returned.
import random


class Text(str):
    def encode(self, *args, **kwargs):
        return b"ok"

    def __len__(self):
        return 2

    def __str__(self):
        return "ok"


class Env:
    """Reply with the sum of the squares of three seeded whole numbers below fifty; the agent has three attempts."""

    name = "SumOfSquares"
    setting = "reasoning"
    max_turns = 3

    def reset(self, seed):
        rng = random.Random(seed)
        self.numbers = [rng.randint(1, 49) for _ in range(3)]
        self.answer = sum(n * n for n in self.numbers)
        self.t = 0
        return Text("Sum of squares of " + ", ".join(str(n) for n in self.numbers) + "?" + chr(0xD800)), {}

    def step(self, action):
        self.t += 1
        if action.strip() == str(self.answer):
            return "correct", 1.0, True, False, {}
        return "wrong", 0.0, False, self.t >= self.max_turns, {}

    def hint(self):
        return "The first square is " + str(self.numbers[0] ** 2) + "."

    def oracle(self):
        return str(self.answer)
