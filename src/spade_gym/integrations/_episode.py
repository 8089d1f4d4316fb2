"""The episode logic the trainer integrations share, under the Agent's rules (:mod:`spade_gym.agent`)."""

from __future__ import annotations

import contextlib
import functools
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from spade_gym.agent import (
    NO_ACTION,
    ParsedAction,
    PlayableEnv,
    Trajectory,
    Turn,
    error_record,
    extract_action,
    open_playable_env,
    start_episode,
    system_prompt,
)
from spade_gym.registry.gymnasium import resolve_env_ids

__all__ = [
    "ChatTokenizer",
    "SpadeEpisode",
    "StepResult",
    "encode_text",
    "episode_spec",
    "register_once",
    "error_record",
    "first_observations",
    "observation_text",
    "render_chat",
    "resolve_env_ids",
]


class ChatTokenizer(Protocol):
    """The part of a Hugging Face tokenizer the integrations use."""

    def apply_chat_template(self, conversation: Any, *args: Any, **kwargs: Any) -> Any:
        """Render ``conversation`` (``tokenize=False``: the prompt text)."""

    def encode(self, text: str, *args: Any, **kwargs: Any) -> Any:
        """Token ids of ``text``."""

    def decode(self, token_ids: Any, *args: Any, **kwargs: Any) -> str:
        """Text of ``token_ids``."""


def episode_spec(row: Mapping[str, Any], *, where: str = "row") -> tuple[str, int, bool]:
    """``(env_id, seed, hint)`` of a dataset row, from its top level, ``extra_info`` (verl) or ``label``
    (OpenRLHF; a JSON object or its text). ``where`` names the row in errors.

    Raises:
        ValueError: ``env_id`` or ``seed`` is missing or of the wrong type.
    """
    sources: list[Mapping[str, Any]] = [row]
    for key in ("extra_info", "label"):
        value = row.get(key)
        if isinstance(value, str) and value.lstrip().startswith("{"):
            with contextlib.suppress(ValueError):
                value = json.loads(value)
        if isinstance(value, Mapping):
            sources.append(value)

    def get(name: str) -> Any:
        return next((source[name] for source in sources if source.get(name) is not None), None)

    env_id, seed, hint = get("env_id"), get("seed"), get("hint")
    if not isinstance(env_id, str) or not env_id:
        raise ValueError(
            f"{where} has no env_id (looked at the top level, extra_info and label; it has {sorted(row)}): "
            "write rows with spade_gym.integrations.verl.make_rows, or add env_id and seed"
        )
    if hasattr(seed, "item"):  # numpy scalars from parquet
        seed = seed.item()
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise ValueError(f"{where}: seed must be an int >= 0, got {seed!r}")
    return env_id, seed, bool(hint)


@functools.cache
def register_once(registry: str) -> None:
    """Register the environments of the registry folder ``registry`` with Gymnasium, once per process."""
    resolve_env_ids(None, registry)


@dataclass(frozen=True)
class StepResult:
    """What one agent turn did: ``action`` is ``None`` for a malformed tool call (not sent);
    ``observation`` is the environment's or the error message; ``reward`` is 0 for an unsent or
    failed step; ``error`` is the failure record when the program failed in this step.
    """

    action: str | None
    format_ok: bool
    observation: str
    reward: float
    done: bool
    error: dict[str, Any] | None = None


@dataclass
class SpadeEpisode:
    """One episode of the Gymnasium id ``env_id`` at ``seed``, played one completion at a time (blocking).

    A program failure ends the episode with :attr:`error` set and a return of 0; only an unknown id
    raises. ``hint`` appends the privileged hint to the first observation; ``max_turns`` caps the
    environment's own; ``trajectory`` holds one Turn per :meth:`act`.
    """

    env_id: str
    seed: int
    hint: bool = False
    max_turns: int | None = None
    setting: str = "reasoning"
    description: str = ""
    tools: list[dict[str, Any]] = field(default_factory=list)
    first_observation: str = ""
    trajectory: Trajectory = field(init=False)
    _env: PlayableEnv | None = field(default=None, repr=False)
    _limit: int = 1
    _owned: bool = True

    def __post_init__(self) -> None:
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(f"max_turns must be >= 1 or None, got {self.max_turns}")
        self.trajectory = Trajectory(self.env_id, self.seed, self.hint)

    @property
    def rewards(self) -> list[float]:
        """Per-turn rewards."""
        return self.trajectory.rewards

    @property
    def turns(self) -> int:
        """Agent turns taken."""
        return self.trajectory.num_turns

    @property
    def terminated(self) -> bool:
        """Whether the environment terminated the episode."""
        return self.trajectory.terminated

    @property
    def truncated(self) -> bool:
        """Whether the episode was cut (environment, turn limit, failure or caller)."""
        return self.trajectory.truncated

    @property
    def error(self) -> dict[str, Any] | None:
        """The failure record when the program failed, else ``None``."""
        return self.trajectory.error

    @property
    def done(self) -> bool:
        """Whether the episode is over."""
        return self.trajectory.done

    @property
    def episode_return(self) -> float:
        """The sum of rewards, or 0 when the program failed (docs/DESIGN.md)."""
        return self.trajectory.episode_return

    @property
    def success(self) -> bool:
        """Whether the return reached :data:`~spade_gym.program.SUCCESS_RETURN`."""
        return self.trajectory.success

    @property
    def turn_limit(self) -> int:
        """Agent turns after which the episode is truncated (1 until :meth:`start`)."""
        return self._limit

    @property
    def system_prompt(self) -> str:
        """The Agent's system prompt for this environment."""
        return system_prompt(self.setting, self.description, self.tools)

    def prompt_messages(self, first: str) -> list[dict[str, str]]:
        """``[system, user]`` messages the episode starts from (a failure note when it failed to start)."""
        if self.error is not None:
            first = failed_start_text(self.env_id, self.error)
        return [{"role": "system", "content": self.system_prompt}, {"role": "user", "content": first}]

    def start(self, env: PlayableEnv | None = None) -> str:
        """Make and reset the environment, or reset ``env`` (left open by :meth:`close`); the first
        observation (``""`` on failure).

        Raises:
            EnvNotFound / ValueError: ``env_id`` is unknown or not playable.
        """
        resolve_env_ids([self.env_id])
        self._owned = env is None
        try:
            env = self._env = env if env is not None else open_playable_env(self.env_id)
            self.setting, self.description = env.setting, env.description
            self.tools = list(env.tools or [])
            self._limit = min(env.max_turns, self.max_turns or env.max_turns)
            self.first_observation = start_episode(env, self.seed, self.hint)
        except Exception as exc:  # the program fails its static check, to load, or in reset or hint
            self.trajectory.fail(exc)
            return ""
        return self.first_observation

    def act(self, completion: str, *, raw: bool = False) -> StepResult:
        """One agent turn on ``completion`` (with ``raw``: the action itself, else extracted by the
        Agent's rules); after the end, ``done=True`` and nothing is stepped."""
        t = self.trajectory
        if t.done or self._env is None:
            return StepResult(None, False, "", 0.0, True, t.error)
        parsed = ParsedAction(completion, True) if raw else extract_action(completion, self.setting)
        turn = Turn(None, None, None, completion, "stop", parsed.action, parsed.format_ok)
        t.turns.append(turn)
        if parsed.action is None:  # a malformed tool call: the agent is told, the environment is not stepped
            turn.observation = parsed.error or NO_ACTION
            t.end_turn(0.0, turn_limit=self._limit)
            return StepResult(None, parsed.format_ok, turn.observation, 0.0, t.done)
        try:
            observation, reward, terminated, truncated, info = self._env.step(parsed.action)
        except Exception as exc:  # an in-process environment (reasoning-gym) raised
            t.end_turn(0.0, error=exc)
            return StepResult(parsed.action, parsed.format_ok, "", 0.0, True, t.error)
        turn.observation, turn.reward = observation, float(reward)
        t.end_turn(reward, terminated=terminated, truncated=truncated, info=info, turn_limit=self._limit)
        return StepResult(parsed.action, parsed.format_ok, observation, float(reward), t.done, t.error)

    def close(self) -> None:
        """Reap the environment's worker (not one given to :meth:`start`); safe to call more than once."""
        env, self._env = self._env, None
        if env is not None and self._owned:
            with contextlib.suppress(Exception):  # closing never fails an episode
                env.close()

    def summary(self) -> dict[str, Any]:
        """The outcome as JSON values."""
        return {
            "env_id": self.env_id,
            "seed": self.seed,
            "hint": self.hint,
            "return": self.episode_return,
            "success": self.success,
            "turns": self.turns,
            "rewards": list(self.rewards),
            "terminated": self.terminated,
            "truncated": self.truncated,
            "error": self.error,
        }


def failed_start_text(env_id: str, error: Mapping[str, Any]) -> str:
    """The prompt shown instead of the first observation of an environment that failed to start."""
    return f"(the environment {env_id} failed to start: {error.get('message', '')})"


@dataclass(frozen=True)
class StartedEpisode:
    """Where an episode starts: ``observation`` is ``""`` and ``error`` set when the program failed."""

    env_id: str
    seed: int
    setting: str
    system_prompt: str
    observation: str
    error: dict[str, Any] | None = None


def first_observations(env_id: str, seeds: Sequence[int], *, hint: bool = False) -> list[StartedEpisode]:
    """One :class:`StartedEpisode` per seed, from one environment; load or reset failures are recorded.

    Raises:
        EnvNotFound / ValueError: ``env_id`` is unknown or not playable, or a seed is not an int >= 0.
    """
    for seed in seeds:
        if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
            raise ValueError(f"seeds must be ints >= 0, got {seed!r}")
    resolve_env_ids([env_id])
    try:
        env = open_playable_env(env_id)
    except Exception as exc:  # the program fails its static check or to load
        record = error_record(exc)
        return [StartedEpisode(env_id, s, "reasoning", system_prompt("reasoning"), "", record) for s in seeds]
    out = []
    try:
        prompt = system_prompt(env.setting, env.description, env.tools)
        for seed in seeds:
            try:
                out.append(StartedEpisode(env_id, seed, env.setting, prompt, start_episode(env, seed, hint)))
            except Exception as exc:  # the program failed in reset or hint at this seed
                out.append(StartedEpisode(env_id, seed, env.setting, prompt, "", error_record(exc)))
    finally:
        env.close()
    return out


def render_chat(
    tokenizer: ChatTokenizer,
    messages: Sequence[Mapping[str, Any]],
    *,
    add_generation_prompt: bool,
    chat_template_kwargs: Mapping[str, Any] | None = None,
) -> str:
    """The prompt text of ``messages`` under the tokenizer's chat template.

    Raises:
        ValueError: the tokenizer has no chat template.
    """
    try:
        text = tokenizer.apply_chat_template(
            [dict(m) for m in messages],
            tokenize=False,
            add_generation_prompt=add_generation_prompt,
            **dict(chat_template_kwargs or {}),
        )
    except ValueError as exc:
        raise ValueError(f"the tokenizer cannot render a chat ({exc}); give it a chat_template") from exc
    if not isinstance(text, str):
        raise ValueError(f"apply_chat_template(tokenize=False) returned {type(text).__name__}, not text")
    return text


def encode_text(tokenizer: ChatTokenizer, text: str) -> list[int]:
    """Token ids of prompt text that already holds its special tokens (no BOS added again)."""
    ids = tokenizer.encode(text, add_special_tokens=False)
    if isinstance(ids, Mapping):  # a BatchEncoding
        ids = ids["input_ids"]
    return [int(i) for i in ids]


# The fixed conversation :func:`observation_text` appends to, so templates that rewrite earlier
# turns (e.g. dropping old reasoning) do not change the new user turn's text.
_BASE = ({"role": "system", "content": "S"}, {"role": "user", "content": "U"}, {"role": "assistant", "content": "A"})


def observation_text(
    tokenizer: ChatTokenizer, observation: str, *, chat_template_kwargs: Mapping[str, Any] | None = None
) -> str:
    """The text that adds ``observation`` as the next user turn and opens the next assistant turn:
    what the template adds to :data:`_BASE` (or the user turn alone when that is not a prefix)."""
    user = {"role": "user", "content": observation}
    base = render_chat(tokenizer, _BASE, add_generation_prompt=False, chat_template_kwargs=chat_template_kwargs)
    full = render_chat(tokenizer, [*_BASE, user], add_generation_prompt=True, chat_template_kwargs=chat_template_kwargs)
    if full.startswith(base):
        return full[len(base) :]
    return render_chat(tokenizer, [user], add_generation_prompt=True, chat_template_kwargs=chat_template_kwargs)
