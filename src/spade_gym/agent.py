"""The Reasoning Agent: prompts, action extraction and batched multi-turn rollouts.

The Agent plays environments through the standard Gymnasium API (``reset()``/``step()``). A rollout
steps many episodes at once and makes **one** batched ``policy.generate`` call per turn across
every episode still running, so generation (the expensive part) runs at the batch size the policy
likes, and the environments' workers step in parallel (``send_step`` to all, then collect).

Rules (documented here, tested in ``tests/test_agent.py``):

* **Prompt.** A system prompt per setting (:data:`SYSTEM_PROMPTS`) states the action format of
  DESIGN.md, then the environment's description and, for tool use, its tool schemas. The first
  observation is the first user message; with ``hint=True`` the environment's privileged hint is
  appended to it (``"\\n\\nHint: ..."``). Each later observation is a user message.
* **Action extraction** (:func:`extract_action`). Reasoning and games: the text of the last
  ``<answer>...</answer>`` block; with no block, the last non-empty line of the completion (small
  models often forget the tags), marked ``format_ok=False``; an empty completion is the action
  ``""``. Tool use: the last ``<tool_call>{...}</tool_call>`` JSON object, passed to ``step`` as
  compact JSON; malformed JSON, or a tool call without ``name``, is *not* sent to the environment:
  the agent gets an error observation instead and the turn counts (reward 0). A completion with
  no ``<tool_call>`` passes its ``<answer>`` (or last line) as for reasoning.
* **Turns.** An episode ends when the environment terminates or truncates, or after the
  environment's ``max_turns`` agent turns (error turns included), whichever comes first.
* **Context.** When the conversation plus ``max_new_tokens`` outgrows the policy's context window,
  the oldest (agent, observation) exchanges after the first observation are dropped, the system
  prompt and first observation always kept; if that is still too long the prompt is
  left-truncated (``SamplingParams(truncate_prompt=True)``). Never an exception.
* **Failures.** An environment that crashes, times out or breaks the contract mid-episode ends
  that episode with ``error`` recorded and a return of 0; the other episodes go on. Endless text
  is cut at ``max_new_tokens`` (``finish_reason == "length"``) and its action extracted as usual.

Each episode gives a :class:`Trajectory`: the messages, one :class:`Turn` per agent turn (the
prompt and completion token ids and logprobs as the policy produced them, the action, the reward),
the return, and time split into generation and environment time.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from spade_gym.env import SandboxedEnv
from spade_gym.policies.base import Completion, Policy, SamplingParams

__all__ = [
    "SYSTEM_PROMPTS",
    "Episode",
    "ParsedAction",
    "RolloutConfig",
    "RolloutStats",
    "Trajectory",
    "Turn",
    "extract_action",
    "rollout",
    "system_prompt",
]

SYSTEM_PROMPTS: dict[str, str] = {
    "reasoning": (
        "You solve reasoning problems step by step. Think briefly, then give your final answer "
        "inside <answer></answer> tags, for example <answer>42</answer>. Only the last <answer> "
        "block counts."
    ),
    "game": (
        "You play a game by taking one move per turn. Think briefly, then give your move inside "
        "<answer></answer> tags, for example <answer>up</answer>. Only the last <answer> block counts."
    ),
    "tool_use": (
        "You complete tasks by calling tools, one call per turn. Write the call as a JSON object "
        'inside <tool_call></tool_call> tags, for example <tool_call>{"name": "search", '
        '"arguments": {"query": "weather"}}</tool_call>. The tool\'s result comes back as the next message.'
    ),
}

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL | re.IGNORECASE)
HINT_PREFIX = "\n\nHint: "


def system_prompt(setting: str, description: str = "", tools: Sequence[dict[str, Any]] = ()) -> str:
    """The Agent's system prompt for an environment.

    Args:
        setting: ``"reasoning"``, ``"tool_use"`` or ``"game"``.
        description: the environment's docstring (one paragraph).
        tools: the environment's OpenAI-style tool schemas (tool use).

    Returns:
        The prompt text.

    Raises:
        ValueError: an unknown setting.
    """
    if setting not in SYSTEM_PROMPTS:
        raise ValueError(f"setting must be one of {sorted(SYSTEM_PROMPTS)}, got {setting!r}")
    parts = [SYSTEM_PROMPTS[setting]]
    if description:
        parts.append(f"Environment: {description.strip()}")
    if tools:
        parts.append("Tools:\n" + "\n".join(json.dumps(t, sort_keys=True) for t in tools))
    return "\n\n".join(parts)


@dataclass(frozen=True)
class ParsedAction:
    """What :func:`extract_action` found in a completion.

    Attributes:
        action: the string to pass to ``env.step`` (``None`` when nothing may be sent).
        format_ok: whether the completion used the expected tag.
        error: for the agent: why nothing was sent (malformed tool call), else ``None``.
    """

    action: str | None
    format_ok: bool
    error: str | None = None


def extract_action(text: str, setting: str) -> ParsedAction:
    """Extract the action from a completion by the rules of the module docstring.

    Args:
        text: the completion text.
        setting: the environment's setting.

    Returns:
        A :class:`ParsedAction`.
    """
    if setting == "tool_use":
        calls = _TOOL_CALL.findall(text)
        if calls:
            raw = calls[-1].strip()
            try:
                call = json.loads(raw)
            except (ValueError, RecursionError) as exc:
                return ParsedAction(
                    None,
                    False,
                    f"Error: the tool call is not valid JSON ({exc}). Send "
                    '<tool_call>{"name": ..., "arguments": {...}}</tool_call>.',
                )
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                return ParsedAction(
                    None,
                    False,
                    'Error: a tool call must be a JSON object with a "name" and '
                    '"arguments", e.g. <tool_call>{"name": ..., "arguments": {...}}</tool_call>.',
                )
            return ParsedAction(json.dumps(call, ensure_ascii=False), True)
    answers = _ANSWER.findall(text)
    if answers:
        return ParsedAction(answers[-1].strip(), True)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return ParsedAction(lines[-1] if lines else "", False)


@dataclass
class Turn:
    """One agent turn of an episode.

    Attributes:
        prompt_token_ids, completion_token_ids, logprobs: as the policy produced them (``None``
            for backends that report no tokens); one (prompt, completion) training sample whose
            loss mask is the completion tokens (:meth:`Trajectory.samples`).
        text: the completion text; ``finish_reason``: ``"stop"`` or ``"length"``.
        action: what was sent to ``step`` (``None`` for a malformed tool call, not sent).
        format_ok: whether the completion used the expected tag.
        observation: what the agent saw next (the environment's, or the runner's error message).
        reward: this turn's reward (0 for an unsent or failed step).
    """

    prompt_token_ids: list[int] | None
    completion_token_ids: list[int] | None
    logprobs: list[float] | None
    text: str
    finish_reason: str
    action: str | None
    format_ok: bool
    observation: str = ""
    reward: float = 0.0


@dataclass
class Trajectory:
    """One episode played by the Agent.

    Attributes:
        env_id: the environment's id or name; ``seed``: the reset seed; ``hint``: whether the
            hint was shown.
        messages: the whole conversation (system, observations as user messages, completions as
            assistant messages), untruncated.
        turns: one :class:`Turn` per agent turn.
        rewards: per-turn rewards; ``episode_return``: their sum, or 0 when ``error`` is set.
        terminated, truncated: how the episode ended (truncated also when the runner stopped it).
        error: ``{"type", "category", "message", ...}`` when the environment failed, else ``None``.
        generation_s, env_s: seconds spent in ``policy.generate`` (this episode's share of each
            batched call, split by completion tokens) and in the environment (reset and steps).
    """

    env_id: str
    seed: int
    hint: bool
    messages: list[dict[str, str]] = field(default_factory=list)
    turns: list[Turn] = field(default_factory=list)
    rewards: list[float] = field(default_factory=list)
    episode_return: float = 0.0
    terminated: bool = False
    truncated: bool = False
    error: dict[str, Any] | None = None
    generation_s: float = 0.0
    env_s: float = 0.0

    @property
    def num_turns(self) -> int:
        """Agent turns taken."""
        return len(self.turns)

    @property
    def success(self) -> bool:
        """Whether the return reached 0.99 (DESIGN.md's success)."""
        return self.episode_return >= 0.99

    def samples(self) -> list[tuple[list[int], list[int], list[float], list[int]]]:
        """The trainer's view: one ``(prompt_ids, completion_ids, logprobs, loss_mask)`` per turn.

        The prompt is the conversation as the model saw it at that turn (earlier agent turns
        included, not trained on here: each is trained in its own sample); the loss mask is 1 on
        every completion token. Turns without token ids (an OpenAI backend) are skipped.
        """
        out = []
        for turn in self.turns:
            if turn.prompt_token_ids is None or turn.completion_token_ids is None or turn.logprobs is None:
                continue
            ids = turn.completion_token_ids
            out.append((turn.prompt_token_ids, ids, turn.logprobs, [1] * len(ids)))
        return out


@dataclass(frozen=True)
class Episode:
    """One episode to play: ``env`` is a gymnasium id (``"spade/Name-v0"``), a program (path,
    source or :class:`~spade_gym.EnvProgram`) or a zero-argument factory returning a
    :class:`~spade_gym.SandboxedEnv` or :class:`~spade_gym.reasoning_gym.ReasoningGymEnv`; ``seed`` the reset seed; ``hint`` whether to show the hint."""

    env: Any
    seed: int
    hint: bool = False


@dataclass(frozen=True)
class RolloutConfig:
    """Settings of :func:`rollout`.

    Attributes:
        sampling: the Agent's sampling settings (temperature > 0 for regret estimates). With a
            ``seed``, the ``i``-th ``generate`` call of the rollout uses ``seed + i``: the rollout
            is reproducible and its turns are not sampled with one repeated seed.
        max_episodes: most episodes (environment workers) alive at once; more are played in waves.
        max_turns: cap on agent turns per episode, below the environment's own (``None``: the
            environment's ``max_turns``).
    """

    sampling: SamplingParams = field(default_factory=lambda: SamplingParams(temperature=1.0, max_new_tokens=256))
    max_episodes: int = 64
    max_turns: int | None = None

    def __post_init__(self) -> None:
        if self.max_episodes < 1:
            raise ValueError(f"RolloutConfig.max_episodes must be >= 1, got {self.max_episodes}")
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(f"RolloutConfig.max_turns must be >= 1 or None, got {self.max_turns}")


@dataclass
class RolloutStats:
    """Figures of one :func:`rollout` call: ``generate_calls``, ``episodes``, ``turns`` (agent
    turns in all), and seconds in ``generation_s``, ``env_s`` and ``total_s`` (wall)."""

    generate_calls: int = 0
    episodes: int = 0
    turns: int = 0
    generation_s: float = 0.0
    env_s: float = 0.0
    total_s: float = 0.0

    @property
    def bookkeeping_s(self) -> float:
        """Wall time spent neither generating nor in environments (prompting, parsing, records)."""
        return max(self.total_s - self.generation_s - self.env_s, 0.0)


@runtime_checkable
class PlayableEnv(Protocol):
    """What the Agent plays: environment programs in the sandbox (:class:`~spade_gym.SandboxedEnv`),
    reasoning-gym tasks (:class:`~spade_gym.reasoning_gym.ReasoningGymEnv`), and either hosted
    elsewhere (:class:`~spade_gym.integrations.ray.RayEnv`): text environments that declare their
    setting, tools and turn limit, give a privileged hint, and can start a step without waiting."""

    name: str
    setting: str
    max_turns: int
    tools: Any
    description: str

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]: ...

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]: ...

    def send_step(self, action: Any) -> None: ...

    def hint(self) -> str: ...

    def close(self) -> None: ...


def _make_env(spec: Any) -> PlayableEnv:
    """The environment ``spec`` names (see :class:`Episode`), checked to be playable."""
    if callable(spec) and not isinstance(spec, str | bytes):
        env = spec()
    elif isinstance(spec, str) and spec.startswith("spade/") and "\n" not in spec:
        import gymnasium

        env = gymnasium.make(spec).unwrapped
    else:
        env = SandboxedEnv(spec)
    if not isinstance(env, PlayableEnv):
        env = getattr(env, "unwrapped", env)
    if not isinstance(env, PlayableEnv):
        env.close()
        raise ValueError(
            f"{spec!r} makes a {type(env).__name__}, not an environment program: the Agent plays environment "
            "programs (spade/<Name>-v<k> ids, program files or sources) and reasoning-gym tasks "
            "(ReasoningGymEnv); to play environments drawn from a registry, draw their ids with Registry.sample"
        )
    return env


def _env_id(spec: Any, env: PlayableEnv) -> str:
    if isinstance(spec, str) and spec.startswith("spade/"):
        return spec
    named = getattr(spec, "env_id", None)  # a factory that knows the id it plays (RayExecutor.env)
    return named if isinstance(named, str) else env.name


class _Running:
    """An episode in flight: its environment, its trajectory and its turn limit."""

    def __init__(self, env: PlayableEnv, trajectory: Trajectory, turn_limit: int) -> None:
        self.env = env
        self.trajectory = trajectory
        self.turn_limit = turn_limit
        self.done = False

    def finish(self, *, terminated: bool = False, truncated: bool = False, error: dict[str, Any] | None = None) -> None:
        t = self.trajectory
        t.terminated, t.truncated, t.error = terminated, truncated, error
        t.episode_return = 0.0 if error else float(sum(t.rewards))
        self.done = True


def _fit_messages(messages: list[dict[str, str]], fits: Callable[[list[dict[str, str]]], bool]) -> list[dict[str, str]]:
    """Drop the oldest (assistant, user) exchanges after the first observation until ``fits``."""
    kept = list(messages)
    while not fits(kept) and len(kept) > 4:  # system, first user, and at least the last exchange
        del kept[2:4]
    return kept


def rollout(
    episodes: Sequence[Episode],
    policy: Policy,
    config: RolloutConfig | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[Trajectory], RolloutStats]:
    """Play ``episodes`` with ``policy``: one batched ``generate`` per turn over every running episode.

    Args:
        episodes: what to play (see :class:`Episode`); trajectories come back in this order.
        policy: the Agent's policy.
        config: sampling and batching settings.
        progress: called after every turn with ``(episodes finished, episodes in all)``.

    Returns:
        ``(trajectories, stats)``: one :class:`Trajectory` per episode, and the call's figures.

    Raises:
        ValueError: ``sampling.n != 1`` (each episode samples one completion per turn).
        SpadeError: an environment cannot be created (its program fails the static check or to
            load). Failures *during* an episode never raise (see the module docstring).
    """
    config = config or RolloutConfig()
    if config.sampling.n != 1:
        raise ValueError("RolloutConfig.sampling.n must be 1: each episode samples one completion per turn")
    started = time.perf_counter()
    stats = RolloutStats(episodes=len(episodes))
    out: list[Trajectory] = []
    for lo in range(0, len(episodes), config.max_episodes):
        out.extend(
            _play_wave(
                episodes[lo : lo + config.max_episodes], policy, config, stats, progress, len(out), len(episodes)
            )
        )
    stats.total_s = time.perf_counter() - started
    return out, stats


def _start(episode: Episode, config: RolloutConfig) -> _Running:
    began = time.perf_counter()
    env = _make_env(episode.env)
    trajectory = Trajectory(env_id=_env_id(episode.env, env), seed=episode.seed, hint=episode.hint)
    limit = min(env.max_turns, config.max_turns or env.max_turns)
    running = _Running(env, trajectory, limit)
    trajectory.messages.append({"role": "system", "content": system_prompt(env.setting, env.description, env.tools)})
    try:
        observation, _info = env.reset(seed=episode.seed)
        if episode.hint:
            observation += HINT_PREFIX + env.hint()
    except Exception as exc:  # the program failed in reset or hint: this episode only
        trajectory.messages.append({"role": "user", "content": ""})
        running.finish(truncated=True, error=error_record(exc))
    else:
        trajectory.messages.append({"role": "user", "content": observation})
    trajectory.env_s += time.perf_counter() - began
    return running


def error_record(exc: BaseException) -> dict[str, Any]:
    """``{"type", "category", "message", "traceback"}`` (JSON values) for an environment's failure:
    a :class:`~spade_gym.SpadeError`'s own record, else category ``ENV_EXCEPTION``."""
    to_dict = getattr(exc, "to_dict", None)
    if callable(to_dict):
        record: dict[str, Any] = to_dict()
        return record
    return {"type": type(exc).__name__, "category": "ENV_EXCEPTION", "message": str(exc), "traceback": ""}


def _play_wave(
    episodes: Sequence[Episode],
    policy: Policy,
    config: RolloutConfig,
    stats: RolloutStats,
    progress: Callable[[int, int], None] | None,
    done_before: int,
    total: int,
) -> list[Trajectory]:
    began = time.perf_counter()
    running: list[_Running] = []
    try:
        for episode in episodes:
            running.append(_start(episode, config))
        stats.env_s += time.perf_counter() - began
        while True:
            active = [r for r in running if not r.done]
            if not active:
                break
            fits = _fits(policy, config.sampling)
            prompts = [_fit_messages(r.trajectory.messages, fits) for r in active]
            # a seeded rollout is reproducible, and its turns still differ: seed + index of the call
            seed = config.sampling.seed
            sampling = replace(
                config.sampling, truncate_prompt=True, seed=None if seed is None else seed + stats.generate_calls
            )
            began = time.perf_counter()
            completions = policy.generate(prompts, sampling)
            seconds = time.perf_counter() - began
            stats.generate_calls += 1
            stats.generation_s += seconds
            tokens = sum(max(c.num_tokens, 1) for c in completions)
            for r, completion in zip(active, completions, strict=True):
                r.trajectory.generation_s += seconds * max(completion.num_tokens, 1) / tokens
                _apply(r, completion)
            # step every environment that got an action: send all, then collect (workers run in parallel)
            began = time.perf_counter()
            to_step = [r for r in active if not r.done and r.trajectory.turns[-1].action is not None]
            for r in to_step:
                r.env.send_step(r.trajectory.turns[-1].action)
            for r in to_step:
                _collect(r)
            env_seconds = time.perf_counter() - began
            stats.env_s += env_seconds
            for r in to_step:
                r.trajectory.env_s += env_seconds / len(to_step)
            for r in active:
                stats.turns += 1
                if not r.done and r.trajectory.num_turns >= r.turn_limit:
                    r.finish(truncated=True)
            if progress is not None:
                progress(done_before + sum(r.done for r in running), total)
    finally:
        began = time.perf_counter()
        for r in running:
            r.env.close()
        stats.env_s += time.perf_counter() - began
    return [r.trajectory for r in running]


# Chat-template tokens per message and per conversation, generous for common templates.
_TEMPLATE_TOKENS_PER_MESSAGE, _TEMPLATE_TOKENS = 16, 64


def _fits(policy: Policy, sampling: SamplingParams) -> Callable[[list[dict[str, str]]], bool]:
    """Whether a conversation plus ``max_new_tokens`` fits the policy's window.

    A token covers at least one byte of text, so a conversation whose UTF-8 size plus the
    template's tokens fits is accepted without tokenizing it (``generate`` tokenizes it anyway);
    only conversations near the window are encoded to decide.
    """
    window = policy.context_window
    encode = getattr(policy, "encode", None)
    if window is None or encode is None:
        return lambda _messages: True
    budget = window - sampling.max_new_tokens

    def fits(messages: list[dict[str, str]]) -> bool:
        bound = _TEMPLATE_TOKENS + sum(len(m["content"].encode()) + _TEMPLATE_TOKENS_PER_MESSAGE for m in messages)
        return bound <= budget or len(encode(messages)) <= budget

    return fits


def _apply(r: _Running, completion: Completion) -> None:
    """Record the completion as an agent turn and work out what to send."""
    parsed = extract_action(completion.text, r.env.setting)
    turn = Turn(
        prompt_token_ids=completion.prompt_token_ids,
        completion_token_ids=completion.completion_token_ids,
        logprobs=completion.logprobs,
        text=completion.text,
        finish_reason=completion.finish_reason,
        action=parsed.action,
        format_ok=parsed.format_ok,
    )
    r.trajectory.turns.append(turn)
    r.trajectory.messages.append({"role": "assistant", "content": completion.text})
    if parsed.action is None:  # a malformed tool call: the agent is told, the environment is not stepped
        turn.observation = parsed.error or "Error: no action found."
        r.trajectory.rewards.append(0.0)
        r.trajectory.messages.append({"role": "user", "content": turn.observation})


def _collect(r: _Running) -> None:
    turn = r.trajectory.turns[-1]
    observation, reward, terminated, truncated, info = r.env.step(turn.action)
    turn.observation, turn.reward = observation, float(reward)
    r.trajectory.rewards.append(float(reward))
    r.trajectory.messages.append({"role": "user", "content": observation})
    if "sandbox_error" in info:
        r.finish(truncated=True, error=info["sandbox_error"])
    elif terminated or truncated:
        r.finish(terminated=terminated, truncated=truncated)
