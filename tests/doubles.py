"""The one stand-in for a language model in the tests: :class:`ScriptedPolicy`, a real
:class:`~spade_gym.policies.base.Policy` whose replies come from a script instead of a model.

It stands in only where a scripted policy is the point of a test (an Agent that reads the hint, a
Designer that writes given programs, a backend that fails); everything else uses the embedded model.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from typing import Any

from spade_gym.policies.base import Completion, FinishReason, SamplingParams

#: What a reply function returns for one prompt: its text, the texts of its group (cycled over
#: ``sampling.n``), or ``None`` to keep the wrapped policy's completion.
Reply = str | Sequence[str] | None


class ScriptedPolicy:
    """A Policy answering from a script, recording what it was asked.

    Args:
        replies: the script, one of
            - a string: the text of every completion;
            - a list of strings: every completion of the ``i``-th call is ``replies[i]`` (the last
              one repeated);
            - a function of one prompt (its list of chat messages) returning the text of its
              completions, or a list of texts for the ``n`` completions of its group (cycled), or
              ``None`` (with ``wraps``) to keep the wrapped policy's completion. It may raise, as a
              failing backend would.
        name, context_window: the Policy attributes.
        token_ids, logprobs: each completion's ``completion_token_ids`` and ``logprobs`` (``None``:
            none reported, as an OpenAI server).
        finish_reason: each completion's finish reason.
        error: raised by every call (after it is recorded), as a crashed inference server would.
        wraps: a real policy whose completions are returned, with the text of those the script
            replies to replaced (tokens and logprobs kept); its other attributes show through.

    Attributes:
        batches: the prompts of each call, in order, as lists of message dicts.
        samplings: the ``sampling`` argument of each call.
    """

    def __init__(
        self,
        replies: str | Sequence[str] | Callable[[list[dict[str, str]]], Reply] | None = None,
        *,
        name: str = "scripted",
        context_window: int | None = None,
        token_ids: Sequence[int] | None = None,
        logprobs: Sequence[float] | None = None,
        finish_reason: FinishReason = "stop",
        error: BaseException | None = None,
        wraps: Any = None,
    ) -> None:
        if replies is None and error is None and wraps is None:
            raise ValueError("ScriptedPolicy needs replies, an error to raise or a policy to wrap")
        self.replies = replies
        self.name = name if wraps is None else getattr(wraps, "name", name)
        self.context_window = context_window if wraps is None else getattr(wraps, "context_window", context_window)
        self.token_ids = None if token_ids is None else list(token_ids)
        self.logprobs = None if logprobs is None else list(logprobs)
        self.finish_reason = finish_reason
        self.error = error
        self.wraps = wraps
        self.batches: list[list[list[dict[str, str]]]] = []
        self.samplings: list[SamplingParams | None] = []

    @property
    def calls(self) -> int:
        """How many times ``generate`` was called."""
        return len(self.batches)

    @property
    def prompts(self) -> list[list[dict[str, str]]]:
        """Every prompt asked, in order, across calls."""
        return [prompt for batch in self.batches for prompt in batch]

    def reply(self, prompt: list[dict[str, str]]) -> Reply:
        script = self.replies
        if script is None:
            return None
        if isinstance(script, str):
            return script
        if callable(script):
            return script(prompt)
        return script[min(self.calls - 1, len(script) - 1)]

    def generate(self, prompts: Sequence[Any], sampling: SamplingParams | None = None) -> list[Completion]:
        batch = [[dict(m) for m in prompt] for prompt in prompts]
        self.batches.append(batch)
        self.samplings.append(sampling)
        if self.error is not None:
            raise self.error
        n = 1 if sampling is None else sampling.n
        if self.wraps is not None:
            out = list(self.wraps.generate(prompts, sampling))
            for k, completion in enumerate(out):
                texts = self.reply(batch[completion.prompt_index])
                if texts is not None:
                    texts = [texts] if isinstance(texts, str) else list(texts)
                    out[k] = dataclasses.replace(completion, text=texts[(k % n) % len(texts)])
            return out
        out = []
        for i, prompt in enumerate(batch):
            texts = self.reply(prompt)
            assert texts is not None, "a reply of None keeps a wrapped policy's completion; this one wraps none"
            texts = [texts] if isinstance(texts, str) else list(texts)
            for k in range(n):
                out.append(
                    Completion(
                        texts[k % len(texts)],
                        None,
                        None if self.token_ids is None else list(self.token_ids),
                        None if self.logprobs is None else list(self.logprobs),
                        self.finish_reason,
                        i,
                    )
                )
        return out

    def __getattr__(self, attribute: str) -> Any:
        wraps = self.__dict__.get("wraps")
        if wraps is None or attribute.startswith("__"):
            raise AttributeError(attribute)
        return getattr(wraps, attribute)


def by_turn(texts: Sequence[str], after: int = 3) -> Callable[[list[dict[str, str]]], str]:
    """A reply function for Agents: ``texts[t]`` to a conversation with ``t`` assistant messages
    after its first ``after`` messages (the last text repeated). The default skips the system
    prompt and the worked example exchange that :func:`spade_gym.agent.agent_prompt` puts first."""
    texts = list(texts)

    def reply(prompt: list[dict[str, str]]) -> str:
        turn = sum(m["role"] == "assistant" for m in prompt[after:])
        return texts[min(turn, len(texts) - 1)]

    return reply
