"""verl agent loop: train the Reasoning Agent on spade environments with verl's multi-turn rollouts.

verl (volcengine/verl) runs each training sample through an *agent loop* (``AgentLoopBase``, in
``verl.experimental.agent_loop``): the loop chats with verl's inference servers token-in-token-out
and returns an ``AgentLoopOutput`` (prompt ids, response ids, a response mask that is 1 on tokens
the model generated and 0 on tokens the environment wrote, and optionally the reward). This module
gives:

* :func:`play_token_episode`: the episode logic, framework-independent: given an async
  ``generate(token_ids, sampling_params)`` and a Hugging Face tokenizer it plays one episode of a
  spade environment (generate, :func:`~spade_gym.agent.extract_action`, ``env.step``, append the
  observation as the next user turn) until the environment terminates or truncates, the turn limit,
  or the response budget, and returns a :class:`TokenEpisode`. Its reward is the episode return;
  a program that fails ends the episode with return 0 and ``error`` set, never an exception.
* ``SpadeAgentLoop`` (attribute of this module, defined when verl imports): the ``AgentLoopBase``
  subclass, registered with verl's ``@register("spade_agent")``, whose ``run(sampling_params,
  **kwargs)`` reads the environment id and seed of the sample (``extra_info.env_id`` and
  ``extra_info.seed``) and plays it with verl's server manager.
* :func:`make_rows` and :func:`write_parquet`: the dataset: one row per (environment, seed), with
  ``agent_name = "spade_agent"`` so verl routes it to this loop.

The API followed is verl's agent loop as read from its repository (``main``; the parts used are
stable since verl 0.5): ``AgentLoopBase.__init__(trainer_config, server_manager, tokenizer,
processor, **kwargs)`` (passed through untouched, so the later ``dataset_cls``/``data_config``
arguments work too), ``run(sampling_params, **kwargs)`` with the dataset row's fields as keywords,
``server_manager.generate(request_id=, prompt_ids=, sampling_params=)`` returning a ``TokenOutput``
with ``token_ids``/``log_probs`` (``AsyncLLMServerManager``, renamed ``LLMServerClient`` later; a
plain list of ids in the earliest versions is accepted), ``AgentLoopOutput`` with ``prompt_ids``,
``response_ids``, ``response_mask``, ``response_logprobs``, ``reward_score``, ``num_turns``,
``metrics``, ``extra_fields``, and ``register(name)``. Sources: ``verl/experimental/agent_loop/agent_loop.py``,
``tool_agent_loop.py``, ``verl/workers/rollout/llm_server.py``, ``docs/advance/agent_loop.rst``.
Configuration: ``examples/integrations/verl_spade.yaml`` and ``verl_agent_loop.yaml``.

Token accounting follows verl's ToolAgentLoop: the prompt is the chat template of the system prompt
and the first observation (with the generation prompt); each observation after an agent turn is
the text the chat template adds for a user turn (:func:`~spade_gym.integrations._episode.observation_text`),
tokenized and appended with mask 0 (log-probability 0.0); the final observation is not appended
(nothing is generated after it); an observation that would overflow ``response_length`` ends the
episode (truncated) instead.
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from uuid import uuid4

from spade_gym.errors import SpadeError
from spade_gym.integrations import require
from spade_gym.integrations._episode import (
    ChatTokenizer,
    SpadeEpisode,
    encode_text,
    episode_spec,
    first_observations,
    observation_text,
    render_chat,
    resolve_env_ids,
)
from spade_gym.program import SUCCESS_RETURN

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
    """One generation: the completion's token ids and, when the server reports them, their
    log-probabilities (one float per token, natural log)."""

    token_ids: list[int]
    log_probs: list[float] | None = None


#: ``await generate(token_ids, sampling_params)``: the completion of a prompt given as token ids.
#: It may return a :class:`GenerateOutput`, anything with ``token_ids`` (and ``log_probs``)
#: attributes such as verl's ``TokenOutput``, a mapping with those keys, or a plain list of ids.
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
    """One episode as token ids, in verl's ``AgentLoopOutput`` layout.

    Attributes:
        env_id, seed, hint: what was played.
        prompt_ids: the chat-template tokens of the system prompt and the first observation,
            generation prompt included.
        response_ids: the agent's generated tokens and, between turns, the observations' tokens.
        response_mask: 1 on generated tokens, 0 on observation tokens; same length as ``response_ids``.
        response_logprobs: per response token (0.0 on observation tokens); ``[]`` when no turn was
            played (a program that failed to start); ``None`` when the generator reported none.
        reward: the episode return (sum of rewards; 0 when the program failed).
        rewards: per agent turn.
        num_turns: chat turns in the conversation (user and assistant messages, the system prompt
            not counted), verl's meaning.
        agent_turns: completions generated.
        terminated, truncated: how the episode ended (truncated also when the turn limit or the
            response budget ended it).
        stop: ``"terminated"``, ``"truncated"``, ``"max_turns"``, ``"response_length"`` or ``"error"``.
        error: ``{"type", "category", "message", "traceback"}`` when the program failed, else ``None``.
        messages: the conversation as text.
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
        """Per-sample values for verl's ``extra_fields`` (JSON values; the same keys every sample):
        ``spade_env_id``, ``spade_seed``, ``spade_return``, ``spade_success``, ``spade_turns``,
        ``spade_stop``, ``spade_error`` (the error message or ``""``) and ``turn_scores``."""
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
        """The keyword arguments of verl's ``AgentLoopOutput``, cut to ``response_length`` tokens.

        ``reward_score`` is the episode return (verl then skips its reward manager for the sample);
        ``metrics`` holds ``generate_sequences`` and ``tool_calls`` seconds (``AgentLoopMetrics``).
        """
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
    """Play one episode of ``env_id`` token-in-token-out.

    Args:
        env_id: a Gymnasium id, e.g. ``"spade/ArithmeticChain-v0"``.
        seed: the reset seed (int >= 0).
        generate: ``await generate(token_ids, sampling_params)``, the completion of the whole
            conversation so far (prompt and response tokens); see :data:`GenerateFn`. Its
            exceptions propagate (a dead inference server is the trainer's failure, not the
            environment's).
        tokenizer: a Hugging Face tokenizer with a chat template (verl's ``self.tokenizer``).
        sampling_params: passed to ``generate`` (a copy per turn).
        hint: append the privileged hint to the first observation.
        max_turns: cap on agent turns below the environment's own ``max_turns``.
        response_length: the response budget in tokens (verl's ``rollout.response_length``):
            generation stops once the response holds this many tokens, and an observation that
            would overflow it ends the episode. ``None``: unlimited.
        budget_key: when set (e.g. ``"max_tokens"``), ``sampling_params[budget_key]`` is set to the
            tokens left in the budget each turn. verl's vLLM server sets ``max_tokens`` itself and
            refuses a second one, so its loop leaves this ``None``.
        chat_template_kwargs: extra keywords for ``apply_chat_template`` (verl's
            ``data.apply_chat_template_kwargs``, e.g. ``{"enable_thinking": False}``).

    Returns:
        A :class:`TokenEpisode`.

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
        if episode.error is not None:
            # the program failed to load or reset: a prompt saying so, no response, return 0
            first = f"(the environment {env_id} failed to start: {episode.error.get('message', '')})"
        result.messages = [
            {"role": "system", "content": episode.system_prompt},
            {"role": "user", "content": first},
        ]
        result.prompt_ids = encode_text(
            tokenizer,
            render_chat(
                tokenizer, result.messages, add_generation_prompt=True, chat_template_kwargs=chat_template_kwargs
            ),
        )
        logprobs: list[float] | None = []
        while not episode.done:
            left = None if response_length is None else response_length - len(result.response_ids)
            if left is not None and left <= 0:
                episode.trajectory.truncated, result.stop = True, "response_length"
                break
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
    return result


# ------------------------------------------------------------------------------------- dataset


def make_rows(
    env_ids: Sequence[str] | str | None = None,
    seeds: Iterable[int] | int = range(8),
    *,
    registry: str | os.PathLike[str] | None = None,
    split: str = "train",
    hint: bool = False,
    agent_name: str = AGENT_NAME,
) -> list[dict[str, Any]]:
    """Dataset rows for verl: one per (environment, seed), environments outermost.

    Each row has verl's RLHF dataset columns: ``data_source`` (``"spade_gym"``), ``agent_name``
    (routes the sample to ``SpadeAgentLoop``), ``prompt`` (the chat messages the episode starts
    from: the Agent's system prompt and the first observation; verl filters and logs by it, the
    loop rebuilds it from the environment), ``ability`` (the setting), ``reward_model`` (unused:
    the loop returns the reward) and ``extra_info`` (``split``, ``index``, ``env_id``, ``seed``,
    ``hint``; the loop reads ``env_id``, ``seed`` and ``hint`` from here).

    Args:
        env_ids: Gymnasium ids; ``None``: every environment of ``registry``.
        seeds: reset seeds (ints >= 0), or a count ``n`` for seeds ``0 .. n-1``; use disjoint
            ranges for training and validation.
        registry: a registry folder to register and draw ids from (``None``: ``$SPADE_REGISTRY``,
            else the bundled seed library).
        split: written into ``extra_info.split``.
        hint: rows whose episodes show the privileged hint.
        agent_name: the agent loop name (as registered in ``verl_agent_loop.yaml``).

    Returns:
        The rows (plain dicts of JSON values).

    Raises:
        EnvNotFound / ValueError: an unknown or unplayable id, or a bad seed.
        SpadeError: an environment fails to start at a seed (its program is broken: fix or drop it).
    """
    ids = resolve_env_ids(env_ids, registry)
    seed_list = list(range(seeds)) if isinstance(seeds, int) else list(seeds)
    if not seed_list:
        raise ValueError("no seeds: give reset seeds (ints >= 0) or a count >= 1")
    rows: list[dict[str, Any]] = []
    for env_id in ids:
        for start in first_observations(env_id, seed_list, hint=hint):
            if start.error is not None:
                raise SpadeError(
                    f"{env_id} failed to start at seed {start.seed}: {start.error.get('message', '')}",
                    category=str(start.error.get("category", "ENV_EXCEPTION")),
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
        MissingDependency: pyarrow is not installed (``pip install 'spade-gym[data]'``).
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


# ----------------------------------------------------------------------------- the verl class

_AGENT_LOOP: type | None = None
_REGISTERED: set[str] = set()


def agent_loop_class() -> type:
    """verl's agent loop for spade environments: ``SpadeAgentLoop``, an ``AgentLoopBase`` subclass
    registered as ``"spade_agent"`` (defined on first call, once per process).

    The loop reads ``env_id``, ``seed`` and ``hint`` from the sample (``extra_info``, or the top
    level), plays it with :func:`play_token_episode` through ``self.server_manager.generate`` (one
    request id per episode, so its turns stick to one server and reuse its prefix cache), and
    returns an ``AgentLoopOutput`` whose ``reward_score`` is the episode return. Keywords of its
    entry in the agent loop config (``verl_agent_loop.yaml``): ``max_turns`` (cap on agent turns)
    and ``registry`` (a registry folder whose environments to register with Gymnasium in each
    worker, for ids outside the bundled seed library).

    Returns:
        The class (also ``spade_gym.integrations.verl.SpadeAgentLoop``, the ``_target_`` verl's
        config names).

    Raises:
        MissingDependency: verl is not installed.
    """
    global _AGENT_LOOP
    if _AGENT_LOOP is not None:
        return _AGENT_LOOP
    agent_loop: Any = require("verl.experimental.agent_loop.agent_loop", "verl", "spade_gym.integrations.verl")
    base: Any = agent_loop.AgentLoopBase
    output_cls: Any = agent_loop.AgentLoopOutput

    class SpadeAgentLoop(base):
        """verl agent loop that plays one spade environment episode per sample (see
        :func:`spade_gym.integrations.verl.agent_loop_class`)."""

        def __init__(
            self, *args: Any, max_turns: int | None = None, registry: str | None = None, **kwargs: Any
        ) -> None:
            kwargs.pop("name", None)  # the config entry's own name, passed along by hydra
            super().__init__(*args, **kwargs)
            rollout = self.config.actor_rollout_ref.rollout
            self.response_length = int(rollout.response_length)
            self.spade_max_turns = max_turns
            if registry and str(registry) not in _REGISTERED:
                resolve_env_ids(None, registry)
                _REGISTERED.add(str(registry))

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
    _AGENT_LOOP = SpadeAgentLoop
    return SpadeAgentLoop


def __getattr__(name: str) -> Any:
    """``SpadeAgentLoop`` is defined on first access (it needs verl); see :func:`agent_loop_class`."""
    if name == "SpadeAgentLoop":
        return agent_loop_class()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# In a verl worker verl is imported already: importing this module registers the loop at once, so
# an ``agent_name: spade_agent`` row finds it even without an agent loop config file.
if "verl.experimental.agent_loop.agent_loop" in sys.modules:  # pragma: no cover - needs verl
    agent_loop_class()
