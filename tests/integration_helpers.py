"""Shared pieces of the trainer-integration tests (verl, OpenRLHF, verifiers): a real byte-level
Hugging Face tokenizer with a ChatML template, a scripted oracle policy that plays a shadow copy of
the environment, and hostile environment programs registered as Gymnasium ids."""

from __future__ import annotations

import json
from typing import Any

import gymnasium
from programs import program

from spade_gym.agent import extract_action

CHATML = (
    "{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def byte_tokenizer() -> Any:
    """A lossless byte-level BPE tokenizer (no merges: one token per byte) with ChatML special
    tokens and chat template, as ``transformers.PreTrainedTokenizerFast``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    alphabet = sorted(pre_tokenizers.ByteLevel.alphabet())
    tok = Tokenizer(models.BPE(vocab={c: i for i, c in enumerate(alphabet)}, merges=[]))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tok.decoder = decoders.ByteLevel()
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|pad|>",
        additional_special_tokens=["<|im_start|>"],
    )
    fast.chat_template = CHATML
    return fast


def tagged(env: Any, action: str) -> str:
    """``action`` in the tags the Agent's rules expect for ``env``'s setting, after a bit of thought."""
    if env.setting == "tool_use" and action.lstrip().startswith("{"):
        return f"Let me call a tool.\n<tool_call>{action}</tool_call>"
    return f"Thinking it over.\n<answer>{action}</answer>"


class ShadowOracle:
    """A scripted policy: plays a private copy of the environment and answers with its ``oracle()``.

    ``reply(previous_replies)`` resets the shadow copy at the seed, replays the actions of the
    earlier replies, and returns the oracle's next action in tags (``garbage=True``: an untagged
    wrong answer instead).
    """

    def __init__(self, env_id: str, seed: int, *, garbage: bool = False) -> None:
        self.env_id, self.seed, self.garbage = env_id, seed, garbage

    def reply(self, previous: list[str]) -> str:
        if self.garbage:
            return "I have no idea, sorry: 12345 banana"
        env = gymnasium.make(self.env_id).unwrapped
        try:
            env.reset(seed=self.seed)
            for text in previous:
                action = extract_action(text, env.setting).action
                if action is not None:
                    env.step(action)
            return tagged(env, env.oracle())
        finally:
            env.close()


def register_hostile_envs() -> dict[str, str]:
    """Register hostile programs with Gymnasium; return ``{kind: id}``.

    * ``crash_step``: the first step pays 0.5 and goes on, the second raises.
    * ``crash_reset``: ``reset`` raises.
    * ``no_load``: imports ``os`` (refused by the static check: the program never loads).
    """
    sources = {
        "crash_step": program(
            reset='self.t = 0\nreturn "start " + str(seed), {}',
            step='self.t += 1\nif self.t >= 2:\n    raise ValueError("boom at step two")\nreturn "go on", 0.5, False, False, {}',
            oracle='return "next"',
            name="TestCrashStep",
        ),
        "crash_reset": program(reset='raise RuntimeError("no reset for you")', name="TestCrashReset"),
        "no_load": program(preamble="import os", name="TestNoLoad"),
    }
    ids = {}
    for kind, source in sources.items():
        env_id = f"spade/Test{kind.title().replace('_', '')}-v0"
        if env_id not in gymnasium.registry:
            gymnasium.register(id=env_id, entry_point="spade_gym.env:SandboxedEnv", kwargs={"program": source})
        ids[kind] = env_id
    return ids


def label(env_id: str, seed: int, hint: bool = False) -> str:
    """An OpenRLHF label naming an episode."""
    return json.dumps({"env_id": env_id, "seed": seed, "hint": hint})
