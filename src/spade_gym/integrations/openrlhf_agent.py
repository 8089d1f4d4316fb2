"""OpenRLHF agent function: train the Reasoning Agent on spade environments with OpenRLHF.

Give this file to ``--train.agent_func_path`` (``--agent_func_path`` before 0.10)::

    python -c "import spade_gym.integrations.openrlhf_agent as m; print(m.__file__)"

Each prompt plays the episode its JSON ``label`` names (:func:`make_rows`); a failing program ends it
with a total of 0 and ``extra_logs["spade_error"] = 1``. API: OpenRLHF 0.10 (``openrlhf/utils/agent.py``).
Settings from the process environment: ``SPADE_REGISTRY`` (a registry folder to register) and
``SPADE_OPENRLHF_MAX_TURNS`` (cap on agent turns).
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import functools
import json
import os
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from spade_gym.integrations import MissingDependency, require
from spade_gym.integrations._episode import (
    ChatTokenizer,
    SpadeEpisode,
    episode_spec,
    observation_text,
    register_once,
    render_chat,
)

__all__ = ["SpadeAgentSession", "agent_classes", "make_rows"]

# The tokenizer of the executor's current ``execute`` call, for the instances it makes.
_TOKENIZER: contextvars.ContextVar[Any] = contextvars.ContextVar("spade_openrlhf_tokenizer", default=None)


def _max_turns_setting() -> int | None:
    raw = os.environ.get("SPADE_OPENRLHF_MAX_TURNS", "").strip()
    if not raw:
        return None
    with contextlib.suppress(ValueError):
        if int(raw) >= 1:
            return int(raw)
    raise ValueError(f"SPADE_OPENRLHF_MAX_TURNS must be an int >= 1, got {raw!r}")


class SpadeAgentSession:
    """One episode behind OpenRLHF's ``reset``/``step`` contract, without OpenRLHF (rewards as floats).

    Args:
        tokenizer: the model's tokenizer. ``None``: ``reset`` returns the dataset prompt and
            observations are appended as ``"\\n\\n<observation>\\n\\n"`` (for base models only).
        max_turns: cap on agent turns below the environment's own.
    """

    def __init__(
        self,
        *,
        tokenizer: ChatTokenizer | None = None,
        max_turns: int | None = None,
        chat_template_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.max_turns = max_turns
        self.chat_template_kwargs = dict(chat_template_kwargs or {})
        self.episode: SpadeEpisode | None = None
        self._paid = 0.0  # rewards handed to OpenRLHF so far

    async def reset(self, states: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        """Start the episode ``states["label"]`` names; ``{"observation": prompt text}`` (a failure
        note when the program fails to start: the first ``step`` then ends with 0).

        Raises:
            ValueError: the label has no ``env_id`` or ``seed``.
            EnvNotFound: an unknown environment.
        """
        env_id, seed, hint = episode_spec(dict(states), where="OpenRLHF sample (label)")
        await self.close()
        self.episode = SpadeEpisode(env_id, seed, hint=hint, max_turns=self.max_turns)
        self._paid = 0.0
        first = await asyncio.to_thread(self.episode.start)
        prompt = states.get("observation")
        if self.tokenizer is None:
            return {"observation": prompt if isinstance(prompt, str) and prompt else first}
        messages = self.episode.prompt_messages(first)
        text = render_chat(
            self.tokenizer, messages, add_generation_prompt=True, chat_template_kwargs=self.chat_template_kwargs
        )
        return {"observation": text}

    async def step(self, states: Mapping[str, Any], **kwargs: Any) -> dict[str, Any]:
        """One agent turn on ``states["action_text"]``.

        Returns:
            ``rewards`` (this turn's; on a failure minus what was paid, so the total is 0), ``scores``
            (the return so far), ``environment_feedback`` (the next user turn; ``""`` when done),
            ``done``, ``sampling_params`` (passed through) and ``extra_logs`` (``spade_return``,
            ``spade_success``, ``spade_turns``, ``spade_error``, ``spade_format_ok``), floats.

        Raises:
            RuntimeError: ``step`` before ``reset``.
        """
        episode = self.episode
        if episode is None:
            raise RuntimeError("SpadeAgentSession.step called before reset")
        action_text = states.get("action_text")
        result = await asyncio.to_thread(episode.act, action_text if isinstance(action_text, str) else "")
        total = episode.episode_return
        reward, self._paid = total - self._paid, total
        if result.done:
            feedback = ""
            await self.close()
        elif self.tokenizer is None:
            feedback = f"\n\n{result.observation}\n\n"
        else:
            feedback = observation_text(
                self.tokenizer, result.observation, chat_template_kwargs=self.chat_template_kwargs
            )
        return {
            "rewards": float(reward),
            "scores": float(total),
            "environment_feedback": feedback,
            "done": bool(result.done),
            "sampling_params": states.get("sampling_params"),
            "extra_logs": {
                "spade_return": float(total),
                "spade_success": float(episode.success),
                "spade_turns": float(episode.turns),
                "spade_error": float(episode.error is not None),
                "spade_format_ok": float(result.format_ok),
            },
        }

    async def close(self) -> None:
        """Reap the environment's worker (done automatically at the end)."""
        if self.episode is not None:
            await asyncio.to_thread(self.episode.close)


def make_rows(
    env_ids: Sequence[str] | str | None = None,
    seeds: Iterable[int] | int = range(8),
    *,
    registry: str | os.PathLike[str] | None = None,
    hint: bool = False,
) -> list[dict[str, Any]]:
    """OpenRLHF rows ``{"prompt": [system, first observation], "label": JSON}``, per (env, seed).

    Train with ``--data.input_key prompt --data.label_key label --data.apply_chat_template``.

    Raises:
        EnvNotFound / ValueError: an unknown or unplayable id, or a bad seed.
        SpadeError: an environment fails to start at a seed.
    """
    from spade_gym.integrations.verl import make_rows as verl_rows

    rows = verl_rows(env_ids, seeds, registry=registry, hint=hint)
    return [
        {
            "prompt": row["prompt"],
            "label": json.dumps(
                {"env_id": row["extra_info"]["env_id"], "seed": row["extra_info"]["seed"], "hint": hint},
                sort_keys=True,
            ),
        }
        for row in rows
    ]


@functools.cache
def agent_classes() -> tuple[type, type]:
    """``(AgentInstance, AgentExecutor)`` over :class:`SpadeAgentSession` (defined once; ``step`` returns tensors).

    Raises:
        MissingDependency: OpenRLHF or torch is missing, or OpenRLHF is older than 0.10.
    """
    feature = "spade_gym.integrations.openrlhf_agent"
    agent: Any = require("openrlhf.utils.agent", "openrlhf", feature)
    torch: Any = require("torch", "train", feature)
    base_executor: Any = getattr(agent, "MultiTurnAgentExecutor", None)
    if base_executor is None:
        raise MissingDependency(
            f"{feature} needs OpenRLHF's MultiTurnAgentExecutor (OpenRLHF >= 0.10): pip install -U openrlhf"
        )
    if os.environ.get("SPADE_REGISTRY"):
        register_once(os.environ["SPADE_REGISTRY"])

    class AgentInstance(agent.AgentInstanceBase):
        """One spade episode per prompt (see :class:`SpadeAgentSession`)."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            self.session = SpadeAgentSession(tokenizer=_TOKENIZER.get(), max_turns=_max_turns_setting())

        async def reset(self, states: dict, **kwargs: Any) -> dict[str, Any]:
            return await self.session.reset(states, **kwargs)

        async def step(self, states: dict, **kwargs: Any) -> dict[str, Any]:
            out = await self.session.step(states, **kwargs)
            out["rewards"] = torch.tensor(out["rewards"], dtype=torch.float32)
            out["scores"] = torch.tensor(out["scores"], dtype=torch.float32)
            out["extra_logs"] = {k: torch.tensor(v, dtype=torch.float32) for k, v in out["extra_logs"].items()}
            return out

    class AgentExecutor(base_executor):
        """``MultiTurnAgentExecutor`` over spade episodes."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(AgentInstance)

        async def execute(self, *args: Any, **kwargs: Any) -> Any:
            # execute(prompt, label, sampling_params, max_length, hf_tokenizer, llm_engine[, images]),
            # positional or (as OpenRLHF 0.10 calls it) by keyword
            tokenizer = kwargs.get("hf_tokenizer", args[4] if len(args) > 4 else None)
            token = _TOKENIZER.set(tokenizer)
            try:
                return await super().execute(*args, **kwargs)
            finally:
                _TOKENIZER.reset(token)

    for cls in (AgentInstance, AgentExecutor):
        cls.__module__ = __name__
    return AgentInstance, AgentExecutor


def __getattr__(name: str) -> Any:
    """``AgentInstance`` and ``AgentExecutor``, defined on first access."""
    if name == "AgentInstance":
        return agent_classes()[0]
    if name == "AgentExecutor":
        return agent_classes()[1]
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
