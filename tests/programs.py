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
