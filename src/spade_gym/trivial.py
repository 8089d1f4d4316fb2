"""The trivial policies the validation gate, its audit and the novelty probe play: blind to the
program, ``(observation, episode seed, turn) -> action``, the same in every worker for a seed."""

from __future__ import annotations

import random
import string
from collections.abc import Callable

__all__ = ["GARBAGE", "blind_policies", "constant", "garbage_action", "random_text_action"]

#: A trivial policy: ``(observation, episode seed, turn) -> action``.
Policy = Callable[[str, int, int], str]


def constant(text: str) -> Policy:
    """The policy that always sends ``text``."""
    return lambda obs, seed, turn: text


def random_text_action(seed: int, episode_seed: int, turn: int) -> str:
    """One to twelve random lowercase letters, a function of the three seeds."""
    rng = random.Random(f"{seed}-{episode_seed}-{turn}")  # the same whichever worker
    return "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(1, 12)))


#: Malformed actions of the kinds agents produce: numbers out of range, broken JSON, odd whitespace.
GARBAGE = (
    "-1",
    "9",
    "99",
    "1000000",
    "0.5",
    "{",
    "}",
    "[]",
    "null",
    '{"name": "x"}',
    '{"name": 1, "arguments": []}',
    " ",
    "\n",
    "a b c",
    "A1",
    "Z9",
    "up up",
    "\u00e9\u2603",
    "<answer></answer>",
    "None",
)


def garbage_action(seed: int, episode_seed: int, turn: int) -> str:
    """One of :data:`GARBAGE`, a function of the three seeds."""
    return random.Random(f"garbage-{seed}-{episode_seed}-{turn}").choice(GARBAGE)


def blind_policies(seed: int) -> dict[str, Policy]:
    """The trivial policies blind to the program: empty, random text, garbage and echo."""
    return {
        "empty": constant(""),
        "random_text": lambda obs, s, turn: random_text_action(seed, s, turn),
        "garbage": lambda obs, s, turn: garbage_action(seed, s, turn),
        "echo": lambda obs, s, turn: obs,
    }
