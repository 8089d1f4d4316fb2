"""The Designer's prompts: the contract in words, the write-mode prompt variants, the edit format.

Every program a prompt shows whole is in :data:`PROMPT_EXAMPLES`: the novelty check counts them as
registered, so the example is never a new environment (docs/designer.md compares the variants).
"""

from __future__ import annotations

from typing import Literal, get_args

from spade_gym.contract import skeleton
from spade_gym.program import SUCCESS_RETURN
from spade_gym.sandbox.policy import ALLOWED_MODULES

__all__ = [
    "DEFAULT_PROMPT",
    "DESIGNER_EDIT_SYSTEM_PROMPT",
    "DESIGNER_SYSTEM_PROMPT",
    "EDIT_DIVIDER",
    "EDIT_REPLACE",
    "EDIT_SEARCH",
    "EDIT_TASK",
    "PROMPT_EXAMPLES",
    "PROMPT_VARIANTS",
    "WORKED_EXAMPLE",
    "WORKED_EXAMPLES",
    "system_prompt",
    "write_task",
]

#: A write-mode prompt variant.
PromptVariant = Literal["skeleton", "example", "examples", "fill"]
#: The write-mode prompt variants.
PROMPT_VARIANTS: tuple[PromptVariant, ...] = get_args(PromptVariant)
#: The variant a Designer uses unless configured (``designer.prompt``).
DEFAULT_PROMPT: PromptVariant = "skeleton"

WORKED_EXAMPLE = '''import random

COUNT = 3


class Env:
    """Add up COUNT to COUNT + 3 seeded integers; one answer per episode, exact sum pays 1.0."""

    name = "ListSum"
    setting = "reasoning"
    max_turns = 1

    def reset(self, seed):
        rng = random.Random(seed)
        self.numbers = [rng.randint(10, 99) for _ in range(rng.randint(COUNT, COUNT + 3))]
        self.done = False
        return "What is the sum of " + ", ".join(str(n) for n in self.numbers) + "?", {}

    def step(self, action):
        self.done = True
        correct = action.strip() == str(sum(self.numbers))
        return ("Correct." if correct else "Wrong."), (1.0 if correct else 0.0), True, False, {"correct": correct}

    def hint(self):
        return "Add the numbers from left to right; the first two give " + str(sum(self.numbers[:2])) + "."

    def oracle(self):
        return str(sum(self.numbers))
'''

#: The environment program contract of docs/DESIGN.md, in the words a model needs.
_CONTRACT = f"""You design training environments for a reasoning agent. An environment is one Python module that defines exactly one class named Env.

The module may import only: {", ".join(ALLOWED_MODULES)}. No file, network or system access.

class Env must have:
- a docstring: one paragraph saying what the environment is about;
- name (str, CamelCase), setting (str: "reasoning", "tool_use" or "game"), max_turns (int);
- tools (list of OpenAI-style function schemas; tool_use only);
- reset(self, seed) -> (observation: str, info: dict): all randomness from random.Random(seed);
- step(self, action: str) -> (observation: str, reward: float, terminated: bool, truncated: bool, info: dict);
- hint(self) -> str: privileged help for the current episode that does not give the answer away;
- oracle(self) -> str: the action a perfect agent takes now.

Rules: the episode return (sum of rewards) is between 0 and 1 and success means return >= {SUCCESS_RETURN}; every episode ends by max_turns; info holds only JSON values; the same seed and actions give the same observations; different seeds give different tasks; following oracle() succeeds on every seed; trivial actions (empty text, random text, echoing the observation, submitting the hint, one fixed answer) must not succeed. Reasoning and game actions are the agent's final answer text; a tool_use action is a JSON string {{"name": ..., "arguments": {{...}}}}."""

#: The Designer's system prompt in write mode, ``"example"`` variant: the contract and a worked example.
DESIGNER_SYSTEM_PROMPT = f"""{_CONTRACT}

Write the whole module in one ```python code block. Example of a complete, valid module:
```python
{WORKED_EXAMPLE}```"""

#: Markers of one edit block (aider's SEARCH/REPLACE format).
EDIT_SEARCH, EDIT_DIVIDER, EDIT_REPLACE = "<<<<<<< SEARCH", "=======", ">>>>>>> REPLACE"

_EDIT_EXAMPLE = f"""{EDIT_SEARCH}
COUNT = 3
{EDIT_DIVIDER}
COUNT = 5
{EDIT_REPLACE}
{EDIT_SEARCH}
        self.numbers = [rng.randint(10, 99) for _ in range(rng.randint(COUNT, COUNT + 3))]
{EDIT_DIVIDER}
        self.numbers = [rng.randint(100, 999) for _ in range(rng.randint(COUNT, COUNT + 3))]
{EDIT_REPLACE}
"""

#: The Designer's system prompt in edit mode: the contract and the edit-block answer format.
DESIGNER_EDIT_SYSTEM_PROMPT = f"""{_CONTRACT}

You vary an existing environment. Answer with edit blocks only: each block copies some lines of the program exactly as they are, then gives the lines that replace them. Change at least one difficulty knob (a module-level UPPERCASE number) or rule; the variant keeps the name and becomes its next version. Example of an answer:
{_EDIT_EXAMPLE}"""

_WRITE_TASK = (
    "Write a new {setting} environment grounded in the document above: the task should need the knowledge or "
    "the kind of reasoning the document is about. Make it hard enough that the agent needs the hint, "
    "but always solvable by oracle()."
)
EDIT_TASK = (
    "Write a variant of the environment {parent} above: keep what works and change the task so that it is "
    "{direction}{knobs}. It must stay a valid {setting} environment. Answer with edit blocks "
    "(" + EDIT_SEARCH + " ... " + EDIT_DIVIDER + " ... " + EDIT_REPLACE + ") against its program."
)
_ANY_SETTING = "reasoning, tool_use or game (your choice)"

#: A worked example per setting, shown by the ``"examples"`` variant (reasoning: :data:`WORKED_EXAMPLE`).
WORKED_EXAMPLES: dict[str, str] = {
    "reasoning": WORKED_EXAMPLE,
    "tool_use": """import json
import random

ITEMS = ["pen", "cup", "hat", "map", "key", "mug", "fan"]
TOOLS = [
    {"type": "function", "function": {
        "name": "get_price", "description": "The price of one item in cents.",
        "parameters": {"type": "object", "properties": {"item": {"type": "string"}}, "required": ["item"]}}},
    {"type": "function", "function": {
        "name": "submit", "description": "Submit the final answer.",
        "parameters": {"type": "object", "properties": {"answer": {"type": "string"}}, "required": ["answer"]}}},
]


class Env:
    \"\"\"Look up the prices of two seeded items with get_price and submit their total in cents; a right total pays 1.0.\"\"\"

    name = "PriceTotal"
    setting = "tool_use"
    max_turns = 6
    tools = TOOLS

    def reset(self, seed):
        rng = random.Random(seed)
        self.turn = 0
        items = rng.sample(ITEMS, 2)
        self.records = {item: rng.randint(100, 999) for item in items}
        self.answer = str(sum(self.records.values()))
        return "What do the " + " and the ".join(items) + " cost together, in cents? Call get_price, then submit.", {}

    def step(self, action):
        self.turn += 1
        truncated = self.turn >= self.max_turns
        try:
            call = json.loads(action)
            name, args = call["name"], dict(call["arguments"])
        except (ValueError, KeyError, TypeError):
            return 'Call a tool: {"name": ..., "arguments": {...}}', 0.0, False, truncated, {}
        if name == "get_price":
            return str(self.records.get(str(args.get("item")), "not found")), 0.0, False, truncated, {}
        if name == "submit":
            correct = str(args.get("answer", "")).strip() == self.answer
            return ("Correct." if correct else "Wrong."), (1.0 if correct else 0.0), True, False, {"correct": correct}
        return "Unknown tool.", 0.0, False, truncated, {}

    def hint(self):
        return "Call get_price once for each item, then add the two prices."

    def oracle(self):
        return json.dumps({"name": "submit", "arguments": {"answer": self.answer}})
""",
    "game": """import random

SPAN = 20


class Env:
    \"\"\"Guess a seeded number in a range of SPAN + 1; after each guess the game says higher or lower; finding it pays 1.0.\"\"\"

    name = "GuessInRange"
    setting = "game"
    max_turns = 8

    def reset(self, seed):
        rng = random.Random(seed)
        self.turn = 0
        self.low = rng.randint(1, 80)
        self.high = self.low + SPAN
        self.moves = [str(n) for n in range(self.low, self.high + 1)]
        self.secret = rng.randint(self.low, self.high)
        self.said = "Guess a number from " + str(self.low) + " to " + str(self.high) + "."
        return self.said, {}

    def step(self, action):
        self.turn += 1
        move = action.strip()
        if move not in self.moves:
            return "Illegal move. " + self.said, 0.0, False, self.turn >= self.max_turns, {"legal": False}
        guess = int(move)
        won = guess == self.secret
        if guess < self.secret:
            self.low, self.said = max(self.low, guess + 1), "Higher."
        elif guess > self.secret:
            self.high, self.said = min(self.high, guess - 1), "Lower."
        truncated = not won and self.turn >= self.max_turns
        return ("Found it." if won else self.said), (1.0 if won else 0.0), won, truncated, {"legal": True}

    def hint(self):
        return "Guess the middle of the numbers still possible."

    def oracle(self):
        return str((self.low + self.high) // 2)
""",
}

#: Every program a prompt shows whole: the novelty check counts them as registered.
PROMPT_EXAMPLES: tuple[str, ...] = tuple(WORKED_EXAMPLES.values())

#: The Designer's system prompt in write mode, ``"skeleton"`` variant: the contract and how to fill the skeleton.
SKELETON_SYSTEM_PROMPT = f"""{_CONTRACT}

Write the whole module in one ```python code block by filling in the skeleton the task gives: keep `class Env`, every member it sets and every method with exactly its parameters and its return shape; in place of each `# TODO:` line write the code it asks for. The environment must be your own idea, grounded in the document."""

_SKELETON_TASK = (
    "Skeleton to fill (a {setting} environment):\n```python\n{skeleton}```\n"
    "The skeleton is not an answer: replace every # TODO: line with your own code for the task you chose (a "
    "module that still holds one is refused). Answer with the complete, filled module in one ```python code block."
)


_EXAMPLES_SYSTEM_PROMPT = f"""{_CONTRACT}

Write the whole module in one ```python code block. The task shows a complete, valid module of the same setting: follow its form (class Env, its members, the exact signatures and return shapes), never its task: an environment like it is refused as a copy."""

_EXAMPLES_TASK = "Example of a complete, valid {setting} module (its form, not its task):\n```python\n{example}```\n"


_FILL_SYSTEM_PROMPT = f"""{_CONTRACT}

Write the whole module in one ```python code block. Your answer is written with you part by part: the contract's fixed lines are already in it, and you continue it where it stops (a knob, the docstring, the name, a method body), with code for the environment you chose, grounded in the document."""


def system_prompt(mode: str, variant: str = DEFAULT_PROMPT) -> str:
    """The system message of a Designer prompt in ``mode`` (``"write"``/``"edit"``) and write-mode
    ``variant``. ValueError for an unknown variant."""
    if variant not in PROMPT_VARIANTS:
        raise ValueError(f"prompt variant must be one of {PROMPT_VARIANTS}, got {variant!r}")
    if mode == "edit":
        return DESIGNER_EDIT_SYSTEM_PROMPT
    return {"skeleton": SKELETON_SYSTEM_PROMPT, "examples": _EXAMPLES_SYSTEM_PROMPT, "fill": _FILL_SYSTEM_PROMPT}.get(
        variant, DESIGNER_SYSTEM_PROMPT
    )


def write_task(setting: str | None, variant: str, has_document: bool) -> str:
    """The task paragraph of a write-mode prompt for ``setting`` (``None``: the Designer's choice;
    the skeleton variant then shows the reasoning skeleton)."""
    task = _WRITE_TASK.format(setting=setting or _ANY_SETTING)
    if not has_document:
        task = task.replace("grounded in the document above", "unlike the environments above")
    shown = setting or "reasoning"
    if variant == "skeleton":
        return task + "\n\n" + _SKELETON_TASK.format(setting=shown, skeleton=skeleton(shown))
    if variant == "examples":
        example = _EXAMPLES_TASK.format(setting=shown, example=WORKED_EXAMPLES[shown])
        return example + "\n" + task + " Answer with your complete module in one ```python code block."
    return task + " Answer with the complete module in one ```python code block."
