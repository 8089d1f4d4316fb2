import random
import re

ATTEMPT_REWARDS = [1.0, 0.5, 0.25, 0.1]
INT_ANSWER = re.compile(r"^\s*(-?\d{1,30})\s*\.?\s*$")


def apply_op(value, op, k):
    if op == "add":
        return value + k
    if op == "subtract":
        return value - k
    return value * k


def describe_op(op, k):
    if op == "add":
        return "add " + str(k)
    if op == "subtract":
        return "subtract " + str(k)
    return "multiply by " + str(k)


class Env:
    """Evaluate a seeded chain of three to six integer operations (add, subtract, multiply) applied in order to a starting number and answer with the final value as a single integer; the agent has four attempts, a wrong answer is answered with "too high" or "too low", and a correct answer pays 1.0 on the first attempt, 0.5 on the second, 0.25 on the third and 0.1 on the fourth."""

    name = "ArithmeticChain"
    setting = "reasoning"
    max_turns = 4

    def __init__(self):
        self.start = 0
        self.ops = []
        self.values = []
        self.answer = 0
        self.turn = 0
        self.done = False
        self.difficulty = 0

    def reset(self, seed):
        rng = random.Random(seed)
        self.difficulty = rng.randint(0, 3)
        n_ops = 3 + self.difficulty
        for attempt in range(100):
            start = rng.randint(100, 999)
            value = start
            ops = []
            values = []
            for i in range(n_ops):
                choices = ["add", "subtract", "multiply"]
                if value > 2500:
                    choices = ["add", "subtract", "subtract"]
                op = rng.choice(choices)
                if op == "multiply":
                    k = rng.randint(2, 5 + self.difficulty)
                elif op == "subtract":
                    high = min(value - 2, 99 + 150 * self.difficulty)
                    if high < 11:
                        op = "add"
                        k = rng.randint(11, 99 + 150 * self.difficulty)
                    else:
                        k = rng.randint(11, high)
                else:
                    k = rng.randint(11, 99 + 150 * self.difficulty)
                value = apply_op(value, op, k)
                ops.append([op, k])
                values.append(value)
            mid = n_ops // 2 - 1
            if values[-1] >= 100 and values[mid] != values[-1] and values[-1] != start:
                break
        self.start = start
        self.ops = ops
        self.values = values
        self.answer = values[-1]
        self.turn = 0
        self.done = False
        lines = ["Start with the number " + str(start) + " and apply these operations in order:"]
        for i in range(n_ops):
            lines.append("Step " + str(i + 1) + ": " + describe_op(ops[i][0], ops[i][1]))
        lines.append("What is the final value? Answer with a single integer. You have "
                     + str(self.max_turns) + " attempts; after a wrong answer you are told whether it was too high or too low.")
        info = {"steps": n_ops, "difficulty": self.difficulty, "attempts_left": self.max_turns}
        return "\n".join(lines), info

    def step(self, action):
        if self.done:
            return "The episode is over.", 0.0, True, False, {"attempt": self.turn, "correct": False}
        self.turn += 1
        text = str(action)
        match = INT_ANSWER.match(text)
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
                obs = "Correct! The final value is " + str(self.answer) + "."
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
        mid = len(self.ops) // 2 - 1
        return ("Work step by step and keep the running value: after step " + str(mid + 1)
                + " the running value is " + str(self.values[mid]) + "; continue from there with step "
                + str(mid + 2) + ".")

    def oracle(self):
        return str(self.answer)
