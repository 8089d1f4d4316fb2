"""Build small environment programs for tests from the parts that matter to each test."""

from __future__ import annotations

import textwrap

# A model's sampled answers have varied lengths, so the returns of a group differ and a GRPO
# update has non-zero advantages to train on (self-play tests and benchmarks).
EVEN_LENGTH = '''import random

class Env:
    """Say anything of an even number of characters."""

    name = "EvenLength"
    setting = "reasoning"
    max_turns = 1

    def reset(self, seed):
        self.round = random.Random(seed).randint(1, 999)
        return "Round " + str(self.round) + ": say anything.", {}

    def step(self, action):
        ok = len(action.strip()) % 2 == 0
        return ("Even." if ok else "Odd."), (1.0 if ok else 0.0), True, False, {}

    def hint(self):
        return "An even number of characters wins."

    def oracle(self):
        return "ab"
'''


def program(
    reset: str = 'return "start " + str(seed), {}',
    step: str = "return 'obs', 1.0, True, False, {}",
    *,
    preamble: str = "import random",
    members: str = "",
    hint: str = 'return "a hint"',
    oracle: str = 'return "go"',
    name: str = "TestEnv",
    setting: str = "reasoning",
    max_turns: int = 5,
) -> str:
    """Source of a complete program whose ``reset``/``step``/... bodies are the given snippets."""

    def body(code: str) -> str:
        return textwrap.indent(textwrap.dedent(code).strip("\n"), " " * 8)

    tools = (
        '    tools = [{"type": "function", "function": {"name": "f", "parameters": {}}}]\n'
        if setting == "tool_use"
        else ""
    )
    return (
        f"{textwrap.dedent(preamble).strip()}\n\n\n"
        "class Env:\n"
        '    """A test environment."""\n\n'
        f'    name = "{name}"\n    setting = "{setting}"\n    max_turns = {max_turns}\n{tools}\n'
        f"{textwrap.indent(textwrap.dedent(members).strip(), '    ')}\n\n"
        f"    def reset(self, seed):\n{body(reset)}\n\n"
        f"    def step(self, action):\n{body(step)}\n\n"
        f"    def hint(self):\n{body(hint)}\n\n"
        f"    def oracle(self):\n{body(oracle)}\n"
    )


def long_episode(turns: int, padding: int = 0) -> str:
    """A valid game whose perfect episode lasts exactly ``turns`` turns (each correct term pays
    ``1 / turns``, the last one the rest up to 1.0; a wrong term ends the episode), every
    observation padded with ``padding`` characters: long episodes with large observations."""
    return f'''import random

TURNS = {turns}
PAD = "." * {padding}


class Env:
    """Count along a seeded arithmetic sequence for a fixed number of turns, one term a turn."""

    name = "LongCount"
    setting = "game"
    max_turns = TURNS

    def reset(self, seed):
        rng = random.Random(seed)
        self.start, self.k, self.t = rng.randint(1, 100000), rng.randint(2, 9), 0
        return "Start at " + str(self.start) + ", add " + str(self.k) + ". Say term 1." + PAD, {{"t": 0}}

    def step(self, action):
        want = self.start + self.t * self.k
        if action.strip() != str(want):
            return "wrong", 0.0, True, False, {{"t": self.t}}
        self.t += 1
        done = self.t >= TURNS
        reward = 1.0 - (TURNS - 1) / TURNS if done else 1.0 / TURNS
        return "ok " + str(want) + ". Say term " + str(self.t + 1) + "." + PAD, reward, done, False, {{"t": self.t}}

    def hint(self):
        return "Add " + str(self.k) + " to the last term."

    def oracle(self):
        return str(self.start + self.t * self.k)
'''
