"""verl agent loop: train the Reasoning Agent on spade environments with verl's multi-turn rollouts.

:func:`play_token_episode` plays one episode token-in-token-out (framework-independent);
``SpadeAgentLoop`` is the ``AgentLoopBase`` registered as ``"spade_agent"``; :func:`make_rows` and
:func:`write_parquet` write the dataset. API: verl's agent loop (since 0.5,
``verl/experimental/agent_loop/agent_loop.py``); configuration: ``examples/integrations/verl_spade.yaml``.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import uuid4

from spade_gym.errors import Category, SpadeError
from spade_gym.integrations import require
from spade_gym.integrations._episode import (
    ChatTokenizer,
    SpadeEpisode,
    encode_text,
    episode_spec,
    first_observations,
    observation_text,
    register_once,
    render_chat,
    resolve_env_ids,
)
from spade_gym.program import SUCCESS_RETURN
from spade_gym.seeds import draw_seeds

__all__ = [
    "AGENT_NAME",
    "DATA_SOURCE",
    "GenerateFn",
    "GenerateOutput",
    "TokenEpisode",
    "agent_loop_class",
    "make_rows",
    "play_token_episode",
    "write_parquet",
]

#: The name the agent loop is registered under; dataset rows select it with ``agent_name``.
AGENT_NAME = "spade_agent"
#: The ``data_source`` of the rows :func:`make_rows` writes.
DATA_SOURCE = "spade_gym"


@dataclass(frozen=True)
class GenerateOutput:
    """One generation: token ids and, when reported, their natural-log probabilities."""

    token_ids: list[int]
    log_probs: list[float] | None = None


#: ``await generate(token_ids, sampling_params)``: a :class:`GenerateOutput`, anything with its
#: attributes (verl's ``TokenOutput``) or keys, or a plain list of token ids.
GenerateFn = Callable[[list[int], dict[str, Any]], Awaitable[Any]]


def _as_output(out: Any) -> GenerateOutput:
    if isinstance(out, GenerateOutput):
        return out
    if isinstance(out, Mapping):
        ids, logprobs = out.get("token_ids"), out.get("log_probs")
    elif hasattr(out, "token_ids"):
        ids, logprobs = out.token_ids, getattr(out, "log_probs", None)
    else:
        ids, logprobs = out, None
    if ids is None or isinstance(ids, str | bytes):
        raise TypeError(f"generate returned {type(out).__name__}; expected token ids or an object with token_ids")
    token_ids = [int(i) for i in ids]
    if logprobs is not None:
        logprobs = [float(x) for x in logprobs]
        if len(logprobs) != len(token_ids):
            logprobs = None  # misaligned: drop rather than train on shifted values
    return GenerateOutput(token_ids, logprobs)


@dataclass
class TokenEpisode:
    """One episode as token ids, in verl's ``AgentLoopOutput`` layout (its ToolAgentLoop's accounting).

    Attributes:
        prompt_ids: chat-template tokens of the system prompt and first observation.
        response_ids: generated tokens and, between turns, observation tokens.
        response_mask: 1 on generated tokens, 0 on observation tokens.
        response_logprobs: per response token (0.0 on observations); ``[]`` when no turn was
            played; ``None`` when the generator reported none.
        reward: the episode return (0 when the program failed); ``rewards``: per agent turn.
        num_turns: user and assistant messages (verl's meaning); ``agent_turns``: completions.
        stop: ``"terminated"``, ``"truncated"``, ``"max_turns"``, ``"response_length"`` or ``"error"``.
        generation_s, env_s: seconds in ``generate`` and in the environment.
    """

    env_id: str
    seed: int
    hint: bool = False
    prompt_ids: list[int] = field(default_factory=list)
    response_ids: list[int] = field(default_factory=list)
    response_mask: list[int] = field(default_factory=list)
    response_logprobs: list[float] | None = field(default_factory=list)
    reward: float = 0.0
    rewards: list[float] = field(default_factory=list)
    num_turns: int = 0
    agent_turns: int = 0
    terminated: bool = False
    truncated: bool = False
    stop: str = ""
    error: dict[str, Any] | None = None
    messages: list[dict[str, str]] = field(default_factory=list)
    generation_s: float = 0.0
    env_s: float = 0.0

    @property
    def success(self) -> bool:
        """Whether the return reached :data:`~spade_gym.program.SUCCESS_RETURN`."""
        return self.reward >= SUCCESS_RETURN

    def extra_fields(self) -> dict[str, Any]:
        """verl's ``extra_fields``: the ``spade_*`` summary and ``turn_scores``."""
        return {
            "spade_env_id": self.env_id,
            "spade_seed": self.seed,
            "spade_return": self.reward,
            "spade_success": self.success,
            "spade_turns": self.agent_turns,
            "spade_stop": self.stop,
            "spade_error": str(self.error.get("message", "")) if self.error else "",
            "turn_scores": list(self.rewards),
        }

    def agent_loop_output(self, response_length: int | None = None) -> dict[str, Any]:
        """Keyword arguments of verl's ``AgentLoopOutput``, cut to ``response_length`` tokens."""
        cut = len(self.response_ids) if response_length is None else response_length
        return {
            "prompt_ids": list(self.prompt_ids),
            "response_ids": self.response_ids[:cut],
            "response_mask": self.response_mask[:cut],
            "response_logprobs": None if self.response_logprobs is None else self.response_logprobs[:cut],
            "reward_score": self.reward,
            "num_turns": self.num_turns,
            "metrics": {"generate_sequences": self.generation_s, "tool_calls": self.env_s},
            "extra_fields": self.extra_fields(),
        }


async def play_token_episode(
    env_id: str,
    seed: int,
    *,
    generate: GenerateFn,
    tokenizer: ChatTokenizer,
    sampling_params: Mapping[str, Any] | None = None,
    hint: bool = False,
    max_turns: int | None = None,
    response_length: int | None = None,
    budget_key: str | None = None,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> TokenEpisode:
    """Play one episode of ``env_id`` token-in-token-out; each observation but the last is appended
    as the template's user turn.

    Args:
        generate: see :data:`GenerateFn`; called with the whole conversation's tokens (its
            exceptions propagate).
        sampling_params: passed to ``generate`` (a copy per turn).
        hint, max_turns: as :class:`~spade_gym.integrations._episode.SpadeEpisode`.
        response_length: response budget in tokens (``None``: unlimited); an observation that
            would overflow it ends the episode.
        budget_key: when set (e.g. ``"max_tokens"``), ``sampling_params[budget_key]`` gets the
            tokens left each turn.
        chat_template_kwargs: extra keywords for ``apply_chat_template``.

    Raises:
        EnvNotFound / ValueError: ``env_id`` is unknown or not playable, or ``seed`` is invalid.
        TypeError: ``generate`` returned something that is not token ids.
    """
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"seed must be an int >= 0, got {seed!r}")
    if response_length is not None and response_length < 1:
        raise ValueError(f"response_length must be >= 1 or None, got {response_length}")
    result = TokenEpisode(env_id=env_id, seed=seed, hint=hint)
    episode = SpadeEpisode(env_id, seed, hint=hint, max_turns=max_turns)
    began = time.perf_counter()
    try:
        first = await asyncio.to_thread(episode.start)
        result.env_s += time.perf_counter() - began
        result.messages = episode.prompt_messages(first)  # a failure note when it failed to start
        result.prompt_ids = encode_text(
            tokenizer,
            render_chat(
                tokenizer, result.messages, add_generation_prompt=True, chat_template_kwargs=chat_template_kwargs
            ),
        )
        logprobs: list[float] | None = []
        while not episode.done:
            # >= 1: an observation is appended only when it leaves room for a token
            left = None if response_length is None else response_length - len(result.response_ids)
            params = dict(sampling_params or {})
            if budget_key is not None and left is not None:
                params[budget_key] = left
            began = time.perf_counter()
            out = _as_output(await generate(result.prompt_ids + result.response_ids, params))
            result.generation_s += time.perf_counter() - began
            ids = out.token_ids if left is None else out.token_ids[:left]
            result.response_ids += ids
            result.response_mask += [1] * len(ids)
            if logprobs is not None and out.log_probs is not None:
                logprobs += out.log_probs[: len(ids)]
            else:
                logprobs = None
            result.agent_turns += 1
            text = tokenizer.decode(ids, skip_special_tokens=True)
            result.messages.append({"role": "assistant", "content": text})
            began = time.perf_counter()
            step = await asyncio.to_thread(episode.act, text)
            result.env_s += time.perf_counter() - began
            if step.done:
                break
            feedback = encode_text(
                tokenizer, observation_text(tokenizer, step.observation, chat_template_kwargs=chat_template_kwargs)
            )
            result.messages.append({"role": "user", "content": step.observation})
            if response_length is not None and len(result.response_ids) + len(feedback) >= response_length:
                episode.trajectory.truncated, result.stop = True, "response_length"
                break
            result.response_ids += feedback
            result.response_mask += [0] * len(feedback)
            if logprobs is not None:
                logprobs += [0.0] * len(feedback)
    finally:
        began = time.perf_counter()
        await asyncio.to_thread(episode.close)
        result.env_s += time.perf_counter() - began
    result.response_logprobs = logprobs  # [] when no turn was played: verl concatenates every sample's list
    _record_end(result, episode)
    return result


def _record_end(result: TokenEpisode, episode: SpadeEpisode) -> None:
    """Copy the finished ``episode``'s rewards, error, return, end flags and stop reason into ``result``."""
    result.rewards, result.error = list(episode.rewards), episode.error
    result.reward = episode.episode_return
    result.terminated, result.truncated = episode.terminated, episode.truncated
    if not result.stop:
        if episode.error is not None:
            result.stop = "error"
        elif episode.terminated:
            result.stop = "terminated"
        elif episode.turns >= episode.turn_limit:
            result.stop = "max_turns"
        else:
            result.stop = "truncated"
    result.num_turns = sum(1 for m in result.messages if m["role"] != "system")


def make_rows(
    env_ids: Sequence[str] | str | None = None,
    seeds: Iterable[int] | int = 8,
    *,
    registry: str | os.PathLike[str] | None = None,
    split: str = "train",
    hint: bool = False,
    agent_name: str = AGENT_NAME,
) -> list[dict[str, Any]]:
    """Dataset rows for verl (plain dicts): one per (environment, seed), environments outermost.

    ``env_ids`` and ``registry`` are as :func:`~spade_gym.integrations._episode.resolve_env_ids`
    takes them; ``seeds``: reset seeds, or a count of seeds drawn by :func:`~spade_gym.seeds.draw_seeds`.

    Raises:
        EnvNotFound / ValueError: an unknown or unplayable id, or a bad seed.
        SpadeError: an environment fails to start at a seed.
    """
    ids = resolve_env_ids(env_ids, registry)
    seed_list = draw_seeds(seeds, "verl") if isinstance(seeds, int) else list(seeds)
    if not seed_list:
        raise ValueError("no seeds: give reset seeds (ints >= 0) or a count >= 1")
    rows: list[dict[str, Any]] = []
    for env_id in ids:
        for start in first_observations(env_id, seed_list, hint=hint):
            if start.error is not None:
                raise SpadeError(
                    f"{env_id} failed to start at seed {start.seed}: {start.error.get('message', '')}",
                    category=str(start.error.get("category", Category.ENV_EXCEPTION)),
                )
            rows.append(
                {
                    "data_source": DATA_SOURCE,
                    "agent_name": agent_name,
                    "prompt": [
                        {"role": "system", "content": start.system_prompt},
                        {"role": "user", "content": start.observation},
                    ],
                    "ability": start.setting,
                    "reward_model": {"style": "rule", "ground_truth": ""},
                    "extra_info": {
                        "split": split,
                        "index": len(rows),
                        "env_id": env_id,
                        "seed": start.seed,
                        "hint": hint,
                    },
                }
            )
    return rows


def write_parquet(rows: Sequence[Mapping[str, Any]], path: str | os.PathLike[str]) -> Path:
    """Write :func:`make_rows` rows to a parquet file (verl's ``data.train_files``); return its path.

    Raises:
        MissingDependency: pyarrow is not installed (:func:`~spade_gym.errors.install_hint`).
        ValueError: no rows, or a row without the columns of :func:`make_rows`.
    """
    if not rows:
        raise ValueError("no rows to write")
    needed = {"data_source", "agent_name", "prompt", "extra_info"}
    for i, row in enumerate(rows):
        missing = needed - set(row)
        if missing:
            raise ValueError(f"row {i} has no {', '.join(sorted(missing))} column(s); build rows with make_rows")
    pa = require("pyarrow", "data", "spade_gym.integrations.verl.write_parquet")
    pq = require("pyarrow.parquet", "data", "spade_gym.integrations.verl.write_parquet")
    out = Path(path).expanduser()
    out.parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(pa.Table.from_pylist([dict(r) for r in rows]), str(out))
    return out


@functools.cache
def agent_loop_class() -> type:
    """``SpadeAgentLoop``, verl's ``AgentLoopBase`` registered as ``"spade_agent"`` (defined once).

    It plays each sample with :func:`play_token_episode` (one request id per episode, for prefix-cache
    reuse). Config keywords: ``max_turns`` and ``registry`` (a folder to register in each worker).

    Raises:
        MissingDependency: verl is not installed.
    """
    agent_loop: Any = require("verl.experimental.agent_loop.agent_loop", "verl", "spade_gym.integrations.verl")
    base: Any = agent_loop.AgentLoopBase
    output_cls: Any = agent_loop.AgentLoopOutput

    class SpadeAgentLoop(base):
        """Plays one spade environment episode per sample."""

        def __init__(
            self, *args: Any, max_turns: int | None = None, registry: str | None = None, **kwargs: Any
        ) -> None:
            kwargs.pop("name", None)  # the config entry's own name, passed along by hydra
            super().__init__(*args, **kwargs)
            self.response_length = int(self.config.actor_rollout_ref.rollout.response_length)
            self.spade_max_turns = max_turns
            if registry:
                register_once(str(registry))

        async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> Any:
            """Play the sample's episode; return its ``AgentLoopOutput``."""
            env_id, seed, hint = episode_spec(kwargs, where="verl sample")
            request_id = uuid4().hex
            server_manager = self.server_manager

            async def generate(token_ids: list[int], params: dict[str, Any]) -> Any:
                return await server_manager.generate(
                    request_id=request_id, prompt_ids=token_ids, sampling_params=params
                )

            template_kwargs = getattr(self, "apply_chat_template_kwargs", None)
            if template_kwargs is None:
                data = getattr(self.config, "data", None)
                template_kwargs = data.get("apply_chat_template_kwargs", None) if data is not None else None
            episode = await play_token_episode(
                env_id,
                seed,
                generate=generate,
                tokenizer=self.tokenizer,
                sampling_params=sampling_params,
                hint=hint,
                max_turns=self.spade_max_turns,
                response_length=self.response_length,
                chat_template_kwargs=dict(template_kwargs or {}),
            )
            return output_cls(**episode.agent_loop_output(self.response_length))

    SpadeAgentLoop.__module__ = __name__
    SpadeAgentLoop.__qualname__ = SpadeAgentLoop.__name__ = "SpadeAgentLoop"
    agent_loop.register(AGENT_NAME)(SpadeAgentLoop)
    return SpadeAgentLoop


def __getattr__(name: str) -> Any:
    """``SpadeAgentLoop``, defined on first access (it needs verl)."""
    if name == "SpadeAgentLoop":
        return agent_loop_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# In a verl worker verl is imported already: importing this module registers the loop at once, so
# an ``agent_name: spade_agent`` row finds it even without an agent loop config file.
if "verl.experimental.agent_loop.agent_loop" in sys.modules:  # pragma: no cover - needs verl
    agent_loop_class()
