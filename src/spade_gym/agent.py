"""The Reasoning Agent: prompts, action extraction and batched multi-turn rollouts.

A rollout makes one batched ``policy.generate`` call per turn across every running episode and steps
the environments' workers in parallel. An episode ends when its environment terminates or truncates,
after ``max_turns`` agent turns (error turns included), or when the environment fails (``error``
recorded, return 0; the other episodes go on). A conversation that outgrows the context window loses
its oldest exchanges after the first observation, then is left-truncated; never an exception.
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol, runtime_checkable

from spade_gym.env import SandboxedEnv
from spade_gym.errors import Category
from spade_gym.policies.base import Completion, Policy, SamplingParams, logprob_temperature
from spade_gym.program import SUCCESS_RETURN
from spade_gym.sandbox.protocol import RESERVED_INFO_KEY

__all__ = [
    "DECOY_OBSERVATION",
    "start_episode",
    "AGENT_TEMPERATURE",
    "AGENT_TOP_P",
    "PROMPT_EXAMPLES",
    "SYSTEM_PROMPTS",
    "Episode",
    "ParsedAction",
    "RolloutConfig",
    "RolloutStats",
    "Trajectory",
    "Turn",
    "agent_prompt",
    "environment_summary",
    "example_messages",
    "extract_action",
    "format_compliance",
    "rollout",
    "system_prompt",
    "tool_signature",
]

#: The Agent's instruction per setting: the action format of docs/DESIGN.md, short (it is paid on
#: every turn).
SYSTEM_PROMPTS: dict[str, str] = {
    "reasoning": "Solve the problem. Reply with the final answer inside <answer></answer> tags.",
    "game": "You play a game, one move per turn. Reply with your move inside <answer></answer> tags.",
    "tool_use": (
        "You complete tasks by calling tools, one call per turn. Reply with the call as JSON inside "
        "<tool_call></tool_call> tags. The result comes back as the next message."
    ),
}

#: ONE worked example per setting, ``(user message, the exact reply)``, shown as an earlier exchange:
#: a bare-tag reply is what makes a small model use the tag (docs/learning.md, "The Agent's prompt").
PROMPT_EXAMPLES: dict[str, tuple[str, str]] = {
    "reasoning": ("What is the opposite of hot?", "<answer>cold</answer>"),
    "game": ("You see a closed chest. Moves: open, leave.", "<answer>open</answer>"),
    "tool_use": (
        "Get the weather in Paris.",
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}</tool_call>',
    ),
}

#: The Agent's default sampling temperature and nucleus mass, measured (docs/learning.md, "The Agent's prompt").
AGENT_TEMPERATURE: float = 0.5
AGENT_TOP_P: float = 1.0
#: Most new tokens per Agent turn by default.
AGENT_MAX_NEW_TOKENS: int = 256

_ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_TOOL_CALL = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL | re.IGNORECASE)


def _tagged(pattern: re.Pattern[str], text: str) -> list[str]:
    """``pattern.findall(text)`` in linear time: only the text up to the last closing tag is searched
    (an unclosed opening tag would cost a scan to the end each)."""
    close = pattern.pattern.split("(.*?)")[1]
    end = max((m.end() for m in re.finditer(re.escape(close), text, re.IGNORECASE)), default=0)
    return pattern.findall(text, 0, end) if end else []


_CALL = '<tool_call>{"name": ..., "arguments": {...}}</tool_call>'  # the format error messages show
HINT_PREFIX = "\n\nHint: "
#: What the Agent reads in place of an observation of a decoy episode (regret's hint-only arm) when
#: it is given no other decoy (such as another seed's observations), so only the hint informs it.
DECOY_OBSERVATION = "The task is not shown in this episode. Act on the hint alone."


def start_episode(env: PlayableEnv, seed: int | None, hinted: bool, decoy: str | None = None) -> str:
    """Reset ``env`` and return the first observation the Agent reads (or ``decoy``), with
    ``HINT_PREFIX + hint`` when ``hinted``. ``hint()`` is called in every episode, so the program
    cannot tell the regret arms apart. Raises what the program raised."""
    observation, _info = env.reset(seed=seed)
    hint = env.hint()
    shown = observation if decoy is None else decoy
    return shown + HINT_PREFIX + hint if hinted else shown


def system_prompt(
    setting: str, description: str = "", tools: Sequence[dict[str, Any]] = (), *, compact_tools: bool = False
) -> str:
    """The Agent's system prompt for an environment: ``setting`` (``"reasoning"``, ``"tool_use"``
    or ``"game"``, else ValueError), its docstring, and its OpenAI-style tool schemas as JSON (one
    line each, :func:`tool_signature`, with ``compact_tools``)."""
    if setting not in SYSTEM_PROMPTS:
        raise ValueError(f"setting must be one of {sorted(SYSTEM_PROMPTS)}, got {setting!r}")
    parts = [SYSTEM_PROMPTS[setting]]
    if description:
        parts.append(f"Environment: {description.strip()}")
    if tools:
        render = tool_signature if compact_tools else (lambda t: json.dumps(t, sort_keys=True))
        parts.append("Tools:\n" + "\n".join(render(t) for t in tools))
    return "\n\n".join(parts)


def tool_signature(tool: Mapping[str, Any]) -> str:
    """One line for a tool (an OpenAI-style schema or its function): ``name(arg, ...): description``;
    anything else as compact JSON (a small model shown JSON schemas copies them)."""
    function = tool.get("function", tool) if isinstance(tool, Mapping) else tool
    if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
        return json.dumps(tool, sort_keys=True, separators=(",", ":"), default=str)
    parameters = function.get("parameters")
    properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
    args = ", ".join(str(name) for name in properties) if isinstance(properties, Mapping) else ""
    description = function.get("description")
    line = f"{function['name']}({args})"
    return f"{line}: {description}" if isinstance(description, str) and description else line


def example_messages(setting: str) -> list[dict[str, str]]:
    """The worked example of ``setting`` as a (user, assistant) exchange; ValueError for an unknown setting."""
    if setting not in PROMPT_EXAMPLES:
        raise ValueError(f"setting must be one of {sorted(PROMPT_EXAMPLES)}, got {setting!r}")
    question, reply = PROMPT_EXAMPLES[setting]
    return [{"role": "user", "content": question}, {"role": "assistant", "content": reply}]


def environment_summary(description: str) -> str:
    """What the Agent is told of its environment: the description up to its first ``:``, ``;`` or
    sentence end (measured in docs/learning.md, "The Agent's prompt")."""
    return re.split(r"[:;]|\.\s", description.strip(), maxsplit=1)[0].strip()


def agent_prompt(setting: str, description: str = "", tools: Sequence[dict[str, Any]] = ()) -> list[dict[str, str]]:
    """The three messages the Agent sees before the first observation: system prompt (with the
    :func:`environment_summary`, one line per tool) and worked example; ValueError for an unknown setting."""
    system = system_prompt(setting, environment_summary(description), tools, compact_tools=True)
    return [{"role": "system", "content": system}, *example_messages(setting)]


@dataclass(frozen=True)
class ParsedAction:
    """What :func:`extract_action` found: ``action`` for ``env.step`` (``None``: nothing may be
    sent), whether the expected tag was used, and ``error`` for the agent when nothing was sent."""

    action: str | None
    format_ok: bool
    error: str | None = None


def extract_action(text: str, setting: str) -> ParsedAction:
    """The action of a completion: the last ``<answer>`` block, else its last non-empty line
    (``format_ok=False``). Tool use: the last ``<tool_call>`` JSON object, sent as compact JSON; a
    malformed one is not sent (an ``error`` for the Agent); without one, parsed as for reasoning."""
    if setting == "tool_use":
        calls = _tagged(_TOOL_CALL, text)
        if calls:
            raw = calls[-1].strip()
            try:
                call = json.loads(raw)
            except (ValueError, RecursionError) as exc:
                return ParsedAction(None, False, f"Error: the tool call is not valid JSON ({exc}). Send {_CALL}.")
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                error = f'Error: a tool call must be a JSON object with a "name" and "arguments", e.g. {_CALL}.'
                return ParsedAction(None, False, error)
            return ParsedAction(json.dumps(call, ensure_ascii=False), True)
    answers = _tagged(_ANSWER, text)
    if answers:
        return ParsedAction(answers[-1].strip(), True)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    return ParsedAction(lines[-1] if lines else "", False)


#: The observation for a turn whose action could not be sent and whose parser said nothing more.
NO_ACTION = "Error: no action found."


@dataclass
class Turn:
    """One agent turn (one training sample): token ids and logprobs (``None`` for backends without
    tokens), the ``action`` sent (``None``: a malformed tool call, not sent), the next ``observation``."""

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
    """One episode played by the Agent: ``messages``, the whole conversation without the worked
    example; ``rewards`` per turn and ``episode_return``, their sum clipped to [0, 1] (0 with an
    ``error`` record); seconds in ``policy.generate`` (this episode's share) and in the environment;
    the ``temperature`` of its logprobs; ``decoy``: the Agent read decoys (each :class:`Turn` holds
    the environment's own observation)."""

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
    temperature: float = 1.0
    decoy: bool = False

    @property
    def num_turns(self) -> int:
        """Agent turns taken."""
        return len(self.turns)

    @property
    def done(self) -> bool:
        """Whether the episode is over (terminated, truncated or failed)."""
        return self.terminated or self.truncated or self.error is not None

    # The episode rules, defined once: the rollout and every integration end episodes through these.

    def fail(self, error: BaseException | Mapping[str, Any]) -> None:
        """End the episode because the environment failed: ``error`` is recorded (an exception
        becomes :func:`error_record`), the episode is truncated and its return is 0."""
        if isinstance(error, BaseException):
            self.error = error_record(error)
        elif isinstance(error, Mapping) and isinstance(error.get("category"), str):
            self.error = {**error, "message": str(error.get("message", ""))}
        else:  # not a failure record (the host makes these): kept, but as a message
            self.error = {
                "type": "InvalidErrorRecord",
                "category": Category.PROTOCOL_ERROR,
                "message": repr(error)[:500],
            }
        self.truncated = True
        self.episode_return = 0.0

    def end_turn(
        self,
        reward: float,
        *,
        terminated: bool = False,
        truncated: bool = False,
        info: Mapping[str, Any] | None = None,
        error: BaseException | Mapping[str, Any] | None = None,
        turn_limit: int | None = None,
    ) -> None:
        """Record one agent turn's reward and apply the episode rules: a ``"sandbox_error"`` record
        in ``info`` or an ``error`` of ``step`` itself is a failure; after ``turn_limit`` turns
        (counted in :attr:`turns`, or :attr:`rewards` for callers that keep no turns) it truncates."""
        self.rewards.append(float(reward))
        failure = error if error is not None else (info or {}).get(RESERVED_INFO_KEY)
        if failure is not None:
            self.fail(failure)
            return
        self.terminated, self.truncated = bool(terminated), bool(truncated)
        taken = max(len(self.turns), len(self.rewards))
        if not self.done and turn_limit is not None and taken >= turn_limit:
            self.truncated = True
        # within [0, 1]: the sandbox lets a sum of rewards overshoot by RETURN_TOLERANCE (float rounding)
        self.episode_return = min(max(float(sum(self.rewards)), 0.0), 1.0)

    @property
    def success(self) -> bool:
        """Whether the return reached :data:`~spade_gym.program.SUCCESS_RETURN` (docs/DESIGN.md's success)."""
        return self.episode_return >= SUCCESS_RETURN

    @property
    def format_ok_turns(self) -> int:
        """Agent turns whose completion held a parsable action (``Turn.format_ok``)."""
        return sum(turn.format_ok for turn in self.turns)

    @property
    def format_compliance(self) -> float | None:
        """Share of agent turns with a parsable action, in [0, 1]; ``None`` for no turns."""
        return self.format_ok_turns / len(self.turns) if self.turns else None

    def samples(self) -> list[tuple[list[int], list[int], list[float], list[int]]]:
        """One ``(prompt_ids, completion_ids, logprobs, loss_mask)`` per turn with token ids; the mask
        is 1 on every completion token."""
        return [
            (t.prompt_token_ids, t.completion_token_ids, t.logprobs, [1] * len(t.completion_token_ids))
            for t in self.turns
            if t.prompt_token_ids is not None and t.completion_token_ids is not None and t.logprobs is not None
        ]


def format_compliance(trajectories: Sequence[Trajectory]) -> float | None:
    """Share of all agent turns with a parsable action, in [0, 1]; ``None`` when there are none."""
    turns = sum(t.num_turns for t in trajectories)
    return sum(t.format_ok_turns for t in trajectories) / turns if turns else None


@dataclass(frozen=True)
class Episode:
    """One episode to play: ``env`` is a gymnasium id (``"spade/Name-v0"``), a program (path,
    source or :class:`~spade_gym.EnvProgram`) or a zero-argument factory of a playable env;
    ``decoy``: the Agent reads ``decoy_observations`` (the last one repeated; none:
    :data:`DECOY_OBSERVATION`) in place of the environment's observations, turn by turn (with
    ``hint``, regret's hint-only arm)."""

    env: Any
    seed: int
    hint: bool = False
    decoy: bool = False
    decoy_observations: tuple[str, ...] = ()


@dataclass(frozen=True)
class RolloutConfig:
    """Settings of :func:`rollout`: the Agent's ``sampling`` (with a ``seed``, the ``i``-th
    ``generate`` call uses ``seed + i``); ``max_episodes`` alive at once (more play in waves);
    ``max_turns``, a cap on agent turns per episode (``None``: the environment's)."""

    sampling: SamplingParams = field(
        default_factory=lambda: SamplingParams(
            temperature=AGENT_TEMPERATURE, top_p=AGENT_TOP_P, max_new_tokens=AGENT_MAX_NEW_TOKENS
        )
    )
    max_episodes: int = 64
    max_turns: int | None = None

    def __post_init__(self) -> None:
        if self.max_episodes < 1:
            raise ValueError(f"RolloutConfig.max_episodes must be >= 1, got {self.max_episodes}")
        if self.max_turns is not None and self.max_turns < 1:
            raise ValueError(f"RolloutConfig.max_turns must be >= 1 or None, got {self.max_turns}")


@dataclass
class RolloutStats:
    """Figures of one :func:`rollout` call; ``format_ok_turns``: turns with a parsable action."""

    generate_calls: int = 0
    episodes: int = 0
    turns: int = 0
    format_ok_turns: int = 0
    generation_s: float = 0.0
    env_s: float = 0.0
    total_s: float = 0.0

    @property
    def format_compliance(self) -> float | None:
        """Share of agent turns with a parsable action, in [0, 1]; ``None`` for no turns."""
        return self.format_ok_turns / self.turns if self.turns else None

    @property
    def bookkeeping_s(self) -> float:
        """Wall time spent neither generating nor in environments (prompting, parsing, records)."""
        return max(self.total_s - self.generation_s - self.env_s, 0.0)


@runtime_checkable
class PlayableEnv(Protocol):
    """What the Agent plays: a text environment with a hint that can start a step without waiting."""

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


def open_playable_env(spec: Any) -> PlayableEnv:
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


def env_id_of(spec: Any, env: PlayableEnv) -> str:
    if isinstance(spec, str) and spec.startswith("spade/"):
        return spec
    named = getattr(spec, "env_id", None)  # a factory that knows the id it plays (RayExecutor.env)
    return named if isinstance(named, str) else env.name


@dataclass
class _Running:
    env: PlayableEnv
    trajectory: Trajectory
    turn_limit: int
    decoys: tuple[str, ...] = ()

    def shown(self, observation: str) -> str:
        """What the Agent reads of the environment's next observation (a decoy in a decoy episode)."""
        if not self.trajectory.decoy:
            return observation
        return self.decoys[min(len(self.trajectory.turns), len(self.decoys) - 1)]


def _fit_messages(messages: list[dict[str, str]], fits: Callable[[list[dict[str, str]]], bool]) -> list[dict[str, str]]:
    """Drop the oldest (assistant, user) exchanges after the system prompt, the worked example and
    the first observation until ``fits``; the last exchange is kept."""
    kept = list(messages)
    while not fits(kept) and len(kept) > 6:
        del kept[4:6]
    return kept


def _prompt(trajectory: Trajectory, setting: str) -> list[dict[str, str]]:
    """The conversation as sent to the policy: the worked example after the system prompt."""
    return [trajectory.messages[0], *example_messages(setting), *trajectory.messages[1:]]


def rollout(
    episodes: Sequence[Episode],
    policy: Policy,
    config: RolloutConfig | None = None,
    *,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[list[Trajectory], RolloutStats]:
    """Play ``episodes`` with ``policy``: ``(trajectories, stats)``, in the order of ``episodes``.
    ``progress`` gets ``(0, total)``, then ``(finished, total)`` after every turn. Raises ValueError
    for ``sampling.n != 1``, SpadeError when an environment cannot be created (never during one)."""
    config = config or RolloutConfig()
    if config.sampling.n != 1:
        raise ValueError("RolloutConfig.sampling.n must be 1: each episode samples one completion per turn")
    started = time.perf_counter()
    stats = RolloutStats(episodes=len(episodes))
    out: list[Trajectory] = []
    if progress is not None and episodes:
        progress(0, len(episodes))
    for lo in range(0, len(episodes), config.max_episodes):
        wave = episodes[lo : lo + config.max_episodes]
        out += _play_wave(wave, policy, config, stats, progress, len(out), len(episodes))
    stats.total_s = time.perf_counter() - started
    return out, stats


def _start(episode: Episode, config: RolloutConfig) -> _Running:
    began = time.perf_counter()
    env = open_playable_env(episode.env)
    trajectory = Trajectory(
        env_id=env_id_of(episode.env, env), seed=episode.seed, hint=episode.hint, decoy=episode.decoy
    )
    trajectory.temperature = logprob_temperature(config.sampling)
    decoys = episode.decoy_observations or (DECOY_OBSERVATION,)
    running = _Running(env, trajectory, min(env.max_turns, config.max_turns or env.max_turns), decoys)
    trajectory.messages.append(agent_prompt(env.setting, env.description, env.tools)[0])
    try:
        observation = start_episode(env, episode.seed, episode.hint, decoys[0] if episode.decoy else None)
    except Exception as exc:  # the program failed in reset or hint: this episode only
        trajectory.messages.append({"role": "user", "content": ""})
        trajectory.fail(exc)
    else:
        trajectory.messages.append({"role": "user", "content": observation})
    trajectory.env_s += time.perf_counter() - began
    return running


def error_record(exc: BaseException) -> dict[str, Any]:
    """``{"type", "category", "message", "traceback"}`` (JSON values) for an environment's failure:
    a :class:`~spade_gym.SpadeError`'s own record, else category ``ENV_EXCEPTION``."""
    to_dict = getattr(exc, "to_dict", None)
    if callable(to_dict):
        return dict(to_dict())
    return {"type": type(exc).__name__, "category": Category.ENV_EXCEPTION, "message": str(exc), "traceback": ""}


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
            active = [r for r in running if not r.trajectory.done]
            if not active:
                break
            fits = _fits(policy, config.sampling)
            prompts = [_fit_messages(_prompt(r.trajectory, r.env.setting), fits) for r in active]
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
            began = time.perf_counter()
            to_step = [r for r in active if not r.trajectory.done and r.trajectory.turns[-1].action is not None]
            for r in to_step:
                r.env.send_step(r.trajectory.turns[-1].action)
            for r in to_step:
                _collect(r)
            env_seconds = time.perf_counter() - began
            stats.env_s += env_seconds
            for r in to_step:
                r.trajectory.env_s += env_seconds / len(to_step)
            stats.turns += len(active)
            stats.format_ok_turns += sum(r.trajectory.turns[-1].format_ok for r in active)
            if progress is not None:
                progress(done_before + sum(r.trajectory.done for r in running), total)
    finally:
        began = time.perf_counter()
        for r in running:
            r.env.close()
        stats.env_s += time.perf_counter() - began
    return [r.trajectory for r in running]


# Chat-template tokens per message and per conversation, generous for common templates.
_TEMPLATE_TOKENS_PER_MESSAGE, _TEMPLATE_TOKENS = 16, 64


def _fits(policy: Policy, sampling: SamplingParams) -> Callable[[list[dict[str, str]]], bool]:
    """Whether a conversation plus ``max_new_tokens`` fits the policy's window; only conversations
    whose UTF-8 size (a token covers at least one byte) might not fit are tokenized."""
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
        turn.observation = parsed.error or NO_ACTION
        r.trajectory.messages.append({"role": "user", "content": turn.observation})
        r.trajectory.end_turn(0.0, turn_limit=r.turn_limit)


def _collect(r: _Running) -> None:
    turn = r.trajectory.turns[-1]
    try:
        observation, reward, terminated, truncated, info = r.env.step(turn.action)
    except Exception as exc:  # an in-process environment (reasoning-gym) raised: this episode only
        r.trajectory.messages.append({"role": "user", "content": ""})
        r.trajectory.end_turn(0.0, error=exc)
        return
    turn.observation, turn.reward = observation, float(reward)
    r.trajectory.messages.append({"role": "user", "content": r.shown(observation)})
    r.trajectory.end_turn(reward, terminated=terminated, truncated=truncated, info=info, turn_limit=r.turn_limit)
