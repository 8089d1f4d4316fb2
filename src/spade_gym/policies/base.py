"""The one interface every language-model backend implements: :class:`Policy`.

``policy.generate(prompts, SamplingParams(n=4))`` renders each prompt with the chat template (a
last assistant message is continued, see :func:`continued`) and returns the ``len(prompts) * n``
completions grouped by prompt (GRPO's group layout). ``Completion.logprobs[i]`` is
``log_softmax(logits / T)`` of ``completion_token_ids[i]`` at the sampling temperature ``T`` (1 when
greedy), before top-p truncation: the TRL convention, what ``sequence_logprobs`` recomputes, and
vLLM's ``processed_logprobs`` (equal whenever ``top_p == 1``). An OpenAI-compatible server reports
its own figures, with no token ids.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeGuard, runtime_checkable

from spade_gym.errors import ChatTemplateError, ContextLengthExceeded

__all__ = [
    "ROLES",
    "logprob_temperature",
    "policy_name",
    "Completion",
    "FinishReason",
    "Message",
    "Policy",
    "Prompt",
    "SamplingParams",
    "chat_token_ids",
    "check_prompts",
    "common_prefix_length",
    "continued",
    "cut_at_stop",
    "fit_prompt",
    "resolve_sampling",
    "GREEDY_BELOW",
]

#: A chat message: ``{"role": "user", "content": "..."}``.
Message = Mapping[str, str]
#: A conversation: the messages so far, oldest first.
Prompt = Sequence[Message]
#: Why generation ended: ``"stop"`` (end-of-sequence or a stop string) or ``"length"`` (``max_new_tokens``).
FinishReason = Literal["stop", "length"]

#: Temperatures below this are greedy decoding (vLLM's ``_SAMPLING_EPS``).
GREEDY_BELOW = 1e-5

#: The message roles a prompt may use.
ROLES = frozenset({"system", "user", "assistant", "tool"})


@dataclass(frozen=True)
class SamplingParams:
    """How to sample completions; the same in every backend.

    Attributes:
        temperature: ``>= 0``; below ``1e-5`` is greedy decoding.
        top_p: nucleus mass in ``(0, 1]``.
        max_new_tokens: most tokens per completion, ``>= 1``.
        n: completions per prompt, ``>= 1``; ``n > 1`` needs ``temperature > 0``.
        stop: strings that end a completion (``finish_reason`` ``"stop"``); the text is cut before
            the first one, the token that completed it stays in the token ids.
        seed: sampler seed for this call, in ``[0, 2**63)``; ``None`` draws fresh randomness.
        truncate_prompt: keep a too-long prompt's last tokens (vLLM's ``truncate_prompt_tokens``)
            instead of raising ``ContextLengthExceeded``.

    Raises ValueError for a field out of its range, naming the field and the range.
    """

    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 256
    n: int = 1
    stop: tuple[str, ...] = field(default=())
    seed: int | None = None
    truncate_prompt: bool = False

    def __post_init__(self) -> None:
        stop = self.stop
        if stop is None:
            stop = ()
        elif isinstance(stop, str):  # a lone string is a common slip: treat it as one stop string
            stop = (stop,)
        elif isinstance(stop, bytes) or not isinstance(stop, Iterable):
            raise ValueError(
                f"SamplingParams.stop must be a string or a sequence of strings, got {type(stop).__name__}"
            )
        object.__setattr__(self, "stop", tuple(stop))
        if not is_number(self.temperature) or not math.isfinite(self.temperature) or self.temperature < 0:
            raise ValueError(
                f"SamplingParams.temperature must be a finite number >= 0 (0 = greedy), got {self.temperature!r}"
            )
        if not is_number(self.top_p) or not 0 < self.top_p <= 1:
            raise ValueError(f"SamplingParams.top_p must be in (0, 1], got {self.top_p!r}")
        for name in ("max_new_tokens", "n"):
            value = getattr(self, name)
            if not is_int(value) or value < 1:
                raise ValueError(f"SamplingParams.{name} must be an int >= 1, got {value!r}")
        if self.n > 1 and self.greedy:
            raise ValueError(
                f"SamplingParams(n={self.n}, temperature={self.temperature}) would return {self.n} identical greedy "
                f"completions (temperatures below {GREEDY_BELOW} are greedy); set temperature > 0 to sample a group, "
                "or n=1 for greedy decoding"
            )
        if any(not isinstance(s, str) or not s for s in self.stop):
            raise ValueError(f"SamplingParams.stop must be non-empty strings, got {self.stop!r}")
        if self.seed is not None and not (is_int(self.seed) and 0 <= self.seed < 2**63):
            raise ValueError(f"SamplingParams.seed must be an int in [0, 2**63) or None, got {self.seed!r}")

    @property
    def greedy(self) -> bool:
        """Whether ``temperature`` is below :data:`GREEDY_BELOW` (greedy decoding, as in vLLM)."""
        return self.temperature < GREEDY_BELOW


def is_number(value: object) -> TypeGuard[int | float]:
    """An int or float, not a bool."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def is_int(value: object) -> TypeGuard[int]:
    """An int, not a bool."""
    return isinstance(value, int) and not isinstance(value, bool)


@dataclass(frozen=True)
class Completion:
    """One sampled completion of one prompt.

    Attributes:
        text: the decoded completion, special tokens removed, cut before a stop string.
        prompt_token_ids: the prompt as the model saw it (after any truncation).
        completion_token_ids: the sampled tokens, end-of-sequence token included.
        logprobs: one natural-log probability per completion token, at ``temperature``.
        finish_reason: ``"stop"`` (end-of-sequence or a stop string) or ``"length"``.
        prompt_index: index into the ``prompts`` passed to ``generate``.
        temperature: the ``T > 0`` the logprobs are taken at: the sampling temperature, or 1 for
            greedy decoding and for servers that report raw figures.

    The three lists are ``None`` when the backend reports no tokens (an OpenAI server).
    """

    text: str
    prompt_token_ids: list[int] | None
    completion_token_ids: list[int] | None
    logprobs: list[float] | None
    finish_reason: FinishReason
    prompt_index: int = 0
    temperature: float = 1.0

    @property
    def num_tokens(self) -> int:
        """Number of completion tokens (0 when the backend reports none)."""
        return len(self.completion_token_ids or ())


def logprob_temperature(sampling: SamplingParams) -> float:
    """The temperature ``Completion.logprobs`` are taken at under ``sampling``: its temperature, 1 when greedy."""
    return 1.0 if sampling.greedy else float(sampling.temperature)


@runtime_checkable
class Policy(Protocol):
    """A language model that answers batches of chat prompts.

    Attributes:
        name: the model's id or path, for logs and the registry.
        context_window: most tokens (prompt plus completion) per sequence; ``None`` when unknown.
    """

    name: str
    context_window: int | None

    def generate(self, prompts: Sequence[Prompt], sampling: SamplingParams | None = None) -> list[Completion]:
        """``B * sampling.n`` completions for ``B >= 1`` conversations, grouped by prompt.

        Raises:
            ValueError: malformed prompts (see :func:`check_prompts`).
            ContextLengthExceeded: a prompt too long for the window, without ``truncate_prompt``.
            GenerationError: the backend failed.
        """
        ...


def policy_name(policy: object) -> str:
    """The policy's ``name`` for logs and results, or its class name when it has none."""
    return str(getattr(policy, "name", type(policy).__name__))


def check_prompts(prompts: object) -> list[list[dict[str, str]]]:
    """Check a batch of chat prompts; return it as ``list[list[dict]]`` with ``role`` and ``content`` only.

    Raises:
        ValueError: an empty batch, one conversation where a batch was expected, an empty
            conversation, or a malformed message; the message names the prompt and message index.
    """
    if isinstance(prompts, str | bytes) or not isinstance(prompts, Sequence):
        raise ValueError(
            f"prompts must be a list of conversations (lists of chat messages), got {type(prompts).__name__}"
        )
    if len(prompts) == 0:
        raise ValueError("prompts is empty: generate needs at least one conversation")
    if isinstance(prompts[0], Mapping):
        raise ValueError(
            "prompts must be a list of conversations, got a list of messages: wrap a single conversation in a list, "
            "generate([[{'role': 'user', 'content': ...}]])"
        )
    out: list[list[dict[str, str]]] = []
    for i, prompt in enumerate(prompts):
        if isinstance(prompt, str | bytes) or not isinstance(prompt, Sequence) or len(prompt) == 0:
            raise ValueError(f"prompts[{i}] must be a non-empty list of chat messages, got {prompt!r:.80}")
        messages = []
        for j, message in enumerate(prompt):
            if not isinstance(message, Mapping):
                raise ValueError(
                    f"prompts[{i}][{j}] must be a mapping with 'role' and 'content', got {type(message).__name__}"
                )
            role, content = message.get("role"), message.get("content")
            if role not in ROLES:
                raise ValueError(f"prompts[{i}][{j}]['role'] must be one of {sorted(ROLES)}, got {role!r}")
            if not isinstance(content, str):
                raise ValueError(f"prompts[{i}][{j}]['content'] must be a string, got {type(content).__name__}")
            try:
                content.encode("utf-8")
            except UnicodeEncodeError as exc:
                raise ValueError(
                    f"prompts[{i}][{j}]['content'] is not valid Unicode text (a lone surrogate at index {exc.start})"
                ) from None
            messages.append({"role": role, "content": content})
        out.append(messages)
    return out


def continued(prompt: Prompt) -> tuple[list[dict[str, str]], str | None]:
    """``(messages, None)``, or, when the last message is the assistant's, ``(the messages before it,
    its text)``: rendered with the generation prompt, then that text as it stands (transformers'
    ``continue_final_message``, trailing whitespace kept)."""
    messages = [dict(m) for m in prompt]
    if len(messages) > 1 and messages[-1]["role"] == "assistant":
        return messages[:-1], messages[-1]["content"]
    return messages, None


def resolve_sampling(sampling: object) -> SamplingParams:
    """``sampling``, or ``SamplingParams()`` for ``None``; ValueError for anything else."""
    if sampling is None:
        return SamplingParams()
    if not isinstance(sampling, SamplingParams):
        raise ValueError(
            f"sampling must be a SamplingParams or None, got {type(sampling).__name__}; "
            "e.g. SamplingParams(temperature=0, max_new_tokens=64)"
        )
    return sampling


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """``(text cut before the earliest stop string, whether one occurred)``."""
    cut = min((i for i in (text.find(s) for s in stop) if i >= 0), default=-1)
    return (text[:cut], True) if cut >= 0 else (text, False)


def chat_token_ids(tokenizer: Any, prompt: Prompt) -> list[int]:
    """The token ids of one conversation under ``tokenizer``'s chat template, generation prompt added
    (a last assistant message is continued, see :func:`~spade_gym.policies.base.continued`).

    Raises:
        ChatTemplateError: the template renders it to no token ids (a ``ValueError`` and a
            ``GenerationError``).
    """
    messages, prefix = continued(prompt)
    if prefix is not None:
        text = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
        ids: Any = tokenizer(str(text) + prefix, add_special_tokens=False)["input_ids"]
    else:
        ids = tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=True)
    if isinstance(ids, Mapping):  # transformers 5: a BatchEncoding
        ids = ids["input_ids"]
    ids = ids.tolist() if hasattr(ids, "tolist") else list(ids)
    if len(ids) == 1 and isinstance(ids[0], list | tuple):  # a batch of one
        ids = list(ids[0])
    if len(ids) == 0:
        raise ChatTemplateError("the chat template rendered this prompt to no tokens; check chat_template")
    return [int(t) for t in ids]


def common_prefix_length(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix (a binary search over slice comparisons, which run in C)."""
    a, b = tuple(a), tuple(b)
    low, high = 0, min(len(a), len(b))
    while low < high:
        middle = (low + high + 1) // 2
        if a[:middle] == b[:middle]:
            low = middle
        else:
            high = middle - 1
    return low


def fit_prompt(
    prompt_token_ids: list[int], max_new_tokens: int, context_window: int | None, truncate: bool
) -> list[int]:
    """A new list: the prompt of ``N`` tokens unchanged when ``N + M <= W`` (``M = max_new_tokens``,
    ``W = context_window``, ``None``: no limit), else with ``truncate`` its last ``W - M`` tokens
    (vLLM's ``truncate_prompt_tokens``).

    Raises:
        ContextLengthExceeded: ``N + M > W`` without ``truncate``, or ``M >= W``; ``limit=W``,
            ``needed=N + M``.
    """
    ids = list(prompt_token_ids)
    n, m, w = len(ids), max_new_tokens, context_window
    if w is None or n + m <= w:
        return ids
    if truncate and m < w:
        return ids[n - (w - m) :]
    if m >= w:
        message = (
            f"max_new_tokens {m} leaves no room for the prompt (of {n} tokens) in the model's context window of {w} "
            f"tokens; lower max_new_tokens below {w}"
        )
    else:
        message = (
            f"prompt of {n} tokens + max_new_tokens {m} = {n + m} exceeds the model's context window of {w} tokens; "
            f"shorten the prompt, lower max_new_tokens, or pass SamplingParams(truncate_prompt=True) to keep the last "
            f"{w - m} prompt tokens"
        )
    raise ContextLengthExceeded(message, limit=w, needed=n + m)
