"""TRL integration (TRL >= 1.0): train the Environment Designer and the Reasoning Agent with TRL's ``GRPOTrainer``.

Designer: :class:`DesignerReward` on the prompts of :func:`designer_dataset` (from
:mod:`spade_gym.integrations.trl_designer`). Agent: :func:`environment_factory` builds TRL
``environment_factory`` classes whose methods are the environment's tools; :func:`agent_dataset`
writes the matching rows. A failing environment ends its episode with return 0; only setup errors raise.
"""

from __future__ import annotations

import copy
import inspect
import json
import keyword
import logging
import math
import os
import re
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Union

from spade_gym.agent import Trajectory, env_id_of, start_episode
from spade_gym.env import SandboxedEnv, escape_text
from spade_gym.errors import SandboxSetupError
from spade_gym.integrations import require
from spade_gym.integrations.trl_designer import DESIGNER_ROLE, DesignerReward, TrainerPolicy, designer_dataset
from spade_gym.program import EnvProgram
from spade_gym.reasoning_gym import ReasoningGymEnv
from spade_gym.sandbox import SandboxConfig
from spade_gym.seeds import draw_seeds

if TYPE_CHECKING:  # pragma: no cover - types only
    from datasets import Dataset

__all__ = [
    "AGENT_SYSTEM_PROMPTS",
    "DESIGNER_ROLE",
    "EPISODE_OVER",
    "DesignerReward",
    "SpadeEnvironment",
    "TrainerPolicy",
    "agent_dataset",
    "designer_dataset",
    "environment_factories",
    "environment_factory",
    "log_episodes",
    "tool_calling_tokenizer",
]

logger = logging.getLogger(__name__)


def _require(module: str) -> Any:
    return require(module, "trl", "spade_gym.integrations.trl")


#: The Agent's system prompt per setting under TRL's tool loop (no call format: the chat template renders the tools).
AGENT_SYSTEM_PROMPTS: dict[str, str] = {
    "reasoning": (
        "You solve reasoning problems. Think briefly, then submit your final answer by calling the answer "
        "tool. The result comes back as the next message."
    ),
    "game": (
        "You play a game by calling the act tool with one move per call. The game's reply comes back as the "
        "next message; keep playing until the game is over."
    ),
    "tool_use": (
        "You complete tasks by calling the tools you are given, one call at a time. Each tool's result comes "
        "back as the next message; keep calling tools until the task is done."
    ),
}

#: Text returned by a tool called after the episode ended (the environment is not stepped).
EPISODE_OVER = "The episode is over; no further tool calls are accepted."


class _Missing:
    """Default of optional tool arguments the model left out (they are not sent to the environment)."""

    def __repr__(self) -> str:
        return "<missing>"


_MISSING = _Missing()
_SCHEMA_TYPES: dict[str, Any] = dict(string=str, integer=int, number=float, boolean=bool, object=dict, null=type(None))
# Words that end a Google-style docstring section; kept out of generated descriptions.
_SECTION = re.compile(r"\b(Args|Arguments|Returns|Raises|Yields)\s*:", re.IGNORECASE)
_CHOICES = re.compile(r"\(\s*choices\s*:", re.IGNORECASE)


def _one_line(text: Any, limit: int = 1000) -> str:
    """Untrusted schema text as one line that cannot open a docstring section."""
    line = " ".join(str(text).split())[:limit]
    line = _SECTION.sub(lambda m: m.group(1) + " -", line)
    return _CHOICES.sub("(choices -", line)


def _annotation(schema: Any, depth: int = 0) -> Any:
    """A type hint that ``get_json_schema`` turns back into (most of) ``schema``; objects become ``dict``."""
    if not isinstance(schema, Mapping) or depth > 8:
        return Any
    enum = schema.get("enum")
    if isinstance(enum, list) and enum and all(isinstance(v, str | int | float | bool) for v in enum):
        return Literal[tuple(dict.fromkeys(enum))]
    kind = schema.get("type")
    if isinstance(kind, list):
        members = [_annotation({**schema, "type": k}, depth + 1) for k in kind if isinstance(k, str)]
        members = [m for m in members if m is not Any]
        return Union[tuple(dict.fromkeys(members))] if members else Any  # noqa: UP007
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list) and options:
            members = [_annotation(o, depth + 1) for o in options]
            if any(m is Any for m in members):
                return Any
            return Union[tuple(dict.fromkeys(members))]  # noqa: UP007
    if kind == "array":
        items = schema.get("items")
        return list[_annotation(items, depth + 1)] if isinstance(items, Mapping) else list  # type: ignore[misc]
    return _SCHEMA_TYPES.get(kind, Any) if isinstance(kind, str) else Any


def _identifier(name: str, taken: set[str], reserved: set[str]) -> str:
    """``name`` as a Python identifier, not a keyword, not private, not in ``taken`` or ``reserved``."""
    out = re.sub(r"\W", "_", name, flags=re.ASCII).strip("_") or "arg"
    if out[0].isdigit():
        out = "n" + out
    while keyword.iskeyword(out) or out in reserved or out in taken or out == "self":
        out += "_"
    return out


@dataclass(frozen=True)
class _ToolSpec:
    """One environment tool as a method: the names the model sees and the names the program expects."""

    tool: str  # the environment's tool name
    method: str  # the Python method name (the tool name TRL shows the model)
    description: str
    params: tuple[tuple[str, str, Any, bool, str], ...]  # (python name, JSON name, hint, required, description)


#: The one tool of a reasoning environment and of a game.
_FIXED_TOOLS = {
    "reasoning": _ToolSpec(
        "answer",
        "answer",
        "Submit your final answer to the problem.",
        (("answer", "answer", str, True, "your final answer, e.g. 42"),),
    ),
    "game": _ToolSpec(
        "act",
        "act",
        "Make your next move in the game.",
        (("move", "move", str, True, "your move, as the game asks for it"),),
    ),
}


def _tool_specs(setting: str, tools: Any, reserved: set[str]) -> list[_ToolSpec]:
    if setting in _FIXED_TOOLS:
        return [_FIXED_TOOLS[setting]]
    specs: list[_ToolSpec] = []
    methods: set[str] = set()
    for entry in tools if isinstance(tools, list | tuple) else ():
        function = entry.get("function", entry) if isinstance(entry, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str) or not function["name"]:
            continue
        name = function["name"]
        if any(s.tool == name for s in specs):
            continue
        method = _identifier(name, methods, reserved)
        methods.add(method)
        parameters = function.get("parameters")
        properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
        required = parameters.get("required") if isinstance(parameters, Mapping) else None
        required_names = {r for r in required if isinstance(r, str)} if isinstance(required, list) else set()
        params: list[tuple[str, str, Any, bool, str]] = []
        taken: set[str] = set()
        for json_name, schema in properties.items() if isinstance(properties, Mapping) else ():
            if not isinstance(json_name, str):
                continue
            py = _identifier(json_name, taken, set())
            taken.add(py)
            described = schema.get("description") if isinstance(schema, Mapping) else None
            params.append((py, json_name, _annotation(schema), json_name in required_names, str(described or "")))
        description = _one_line(function.get("description") or f"The {name} tool.")
        specs.append(_ToolSpec(name, method, description, tuple(params)))
    return specs


def _make_method(spec: _ToolSpec) -> Callable[..., str]:
    """A method ``spec.method(self, *, <params>) -> str`` that calls the environment's tool."""
    names = {py: json_name for py, json_name, _hint, _req, _desc in spec.params}

    def method(self: SpadeEnvironment, **kwargs: Any) -> str:
        arguments = {names.get(k, k): v for k, v in kwargs.items() if v is not _MISSING}
        return self._call_tool(spec.tool, arguments)

    lines = [spec.description or f"Call {spec.tool}."]
    if spec.params:
        lines += ["", "Args:"]
        for py, json_name, _hint, required, description in spec.params:
            text = _one_line(description) or f"the {json_name} argument"
            lines.append(f"    {py}: {text}{'' if required else ' (optional)'}")
    lines += ["", "Returns:", "    The environment's reply."]
    parameters = [inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)]
    for py, _json_name, hint, required, _desc in spec.params:
        default = inspect.Parameter.empty if required else _MISSING
        parameters.append(inspect.Parameter(py, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint))
    method.__name__ = method.__qualname__ = spec.method
    method.__doc__ = "\n".join(lines)
    method.__annotations__ = {p.name: p.annotation for p in parameters[1:]} | {"return": str}
    method.__signature__ = inspect.Signature(parameters, return_annotation=str)  # type: ignore[attr-defined]
    return method


def _open_env(spec: Any, sandbox: SandboxConfig | None) -> SandboxedEnv | ReasoningGymEnv:
    if callable(spec) and not isinstance(spec, str | bytes | os.PathLike | EnvProgram):
        env = spec()
    elif isinstance(spec, str) and "\n" not in spec and not Path(spec).is_file() and not spec.endswith(".py"):
        import gymnasium

        try:
            kwargs: dict[str, Any] = {"config": sandbox} if sandbox is not None else {}
            env = gymnasium.make(spec, **kwargs).unwrapped
        except gymnasium.error.Error as exc:
            raise ValueError(f"unknown environment {spec!r}: {exc}") from None
    else:
        env = SandboxedEnv(spec, config=sandbox)
    env = getattr(env, "unwrapped", env)
    if not isinstance(env, SandboxedEnv | ReasoningGymEnv):
        getattr(env, "close", lambda: None)()
        raise ValueError(
            f"{spec!r} makes a {type(env).__name__}, not one environment program: TRL needs each environment's tools "
            "when the trainer starts, so pass spade/<Name>-v<k> ids or programs (for spade/Generated-v0, draw ids "
            "from the registry with Registry.sample)"
        )
    return env


class SpadeEnvironment:
    """Base class of the classes :func:`environment_factory` builds: one spade episode per TRL rollout.

    TRL calls ``reset(**row)`` before each rollout, exposes every other public method as a tool and
    scores with ``get_reward()``. The sandbox worker starts at the first ``reset`` and lives as long
    as the instance. ``tool_names`` maps method names to tool names.
    """

    env_id: ClassVar[str] = ""
    setting: ClassVar[str] = ""
    max_turns: ClassVar[int] = 0
    description: ClassVar[str] = ""
    tool_names: ClassVar[dict[str, str]] = {}
    _spec: ClassVar[Any] = None
    _sandbox: ClassVar[SandboxConfig | None] = None

    def __init__(self) -> None:
        self._env: SandboxedEnv | ReasoningGymEnv | None = None
        self._finalizer: Any = None
        self._seed: int | None = None
        self._history: list[dict[str, Any]] = []
        self._trajectory: Trajectory | None = None  # the episode's rules and record; None before reset

    def reset(self, **kwargs: Any) -> str | None:
        """Start an episode from a dataset row's ``seed``, ``env_id`` (optional), ``hint`` and ``prompt``.

        Returns:
            ``None`` when the prompt already ends with the first observation; else the observation
            for TRL to append (or a note that the environment failed).

        Raises:
            ValueError: no ``seed``, a seed not an int in ``[0, 2**63)``, or an ``env_id`` for another
                environment (route rows with :func:`environment_factories`).
        """
        if "seed" not in kwargs:
            raise ValueError(
                f"{type(self).__name__}.reset needs a 'seed' column in the dataset row (got columns {sorted(kwargs)}); "
                "build the dataset with agent_dataset()"
            )
        seed = kwargs["seed"]
        if hasattr(seed, "item") and not isinstance(seed, int | bool):
            seed = seed.item()  # a numpy or torch scalar
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
            raise ValueError(f"the 'seed' column must hold ints in [0, 2**63), got {seed!r:.40}")
        env_id = kwargs.get("env_id")
        if env_id is not None and env_id != self.env_id:
            raise ValueError(
                f"a row for {env_id!r} reached the environment {self.env_id!r}: pass "
                "environment_factories([...]) (a dict) to GRPOTrainer so rows are routed by their 'environment' column"
            )
        hint = bool(kwargs.get("hint"))
        self._seed, self._history = seed, []
        self._trajectory = trajectory = Trajectory(self.env_id, seed, hint)
        try:
            if self._env is None:
                self._env = _open_env(self._spec, self._sandbox)
                self._finalizer = weakref.finalize(self, self._env.close)
            observation = start_episode(self._env, seed, hint)
        except SandboxSetupError:
            raise
        except Exception as exc:  # the program failed to load, reset or hint: this episode only
            trajectory.fail(exc)
            self._log_failure()
            return "\n\n" + self._error_text()
        content = _last_content(kwargs.get("prompt"))
        if content.endswith(observation):
            return None
        return ("\n\n" if content else "") + observation

    def get_reward(self) -> float:
        """The episode return (0 when the environment failed or never started)."""
        return 0.0 if self._trajectory is None else self._trajectory.episode_return

    @property
    def seed(self) -> int | None:
        """The current episode's seed (``None`` before the first ``reset``)."""
        return self._seed

    @property
    def history(self) -> list[dict[str, Any]]:
        """The tool calls: ``{"tool", "arguments", "action", "observation", "reward"}`` each."""
        return copy.deepcopy(self._history)

    @property
    def error(self) -> dict[str, Any] | None:
        """``{"type", "category", "message", ...}`` when the environment failed this episode, else ``None``."""
        return None if self._trajectory is None else copy.deepcopy(self._trajectory.error)

    @property
    def done(self) -> bool:
        """Whether the episode has ended (terminated, truncated, failed, or never started)."""
        return self._trajectory is None or self._trajectory.done

    @property
    def episode_return(self) -> float:
        """Same as :meth:`get_reward`."""
        return self.get_reward()

    def _log_failure(self) -> None:
        error = self.error or {}
        logger.warning("%s (seed %s) failed: %s", self.env_id, self._seed, escape_text(str(error.get("message")), 300))

    def _error_text(self) -> str:
        error = self.error or {}
        message = escape_text(str(error.get("message", "")), 500)
        return f"The environment failed ({error.get('category', 'ENV_EXCEPTION')}): {message}. The episode is over."

    def _call_tool(self, tool: str, arguments: dict[str, Any]) -> str:
        """Step the environment with one tool call; the observation (or an end/error note) is the result."""
        record: dict[str, Any] = {
            "tool": tool,
            "arguments": arguments,
            "action": None,
            "observation": "",
            "reward": 0.0,
        }
        self._history.append(record)
        trajectory = self._trajectory
        if trajectory is None or trajectory.done or self._env is None:
            record["observation"] = self._error_text() if self.error is not None else EPISODE_OVER
            return str(record["observation"])
        if self.setting == "tool_use":
            action = json.dumps({"name": tool, "arguments": arguments}, ensure_ascii=False, default=str)
        else:
            action = str(next(iter(arguments.values()), ""))
        record["action"] = action
        try:
            observation, reward, terminated, truncated, info = self._env.step(action)
        except Exception as exc:  # on_error="truncate" never raises; a ReasoningGymEnv might
            trajectory.end_turn(0.0, error=exc)
        else:
            reward = float(reward) if isinstance(reward, int | float) and math.isfinite(reward) else 0.0
            trajectory.end_turn(reward, terminated=terminated, truncated=truncated, info=info)
        if trajectory.error is not None:
            self._log_failure()
            record["observation"] = self._error_text()
            return str(record["observation"])
        record["observation"], record["reward"] = observation, reward
        if trajectory.done:
            return f"{observation}\n\n{EPISODE_OVER}"
        return str(observation)

    def _close(self) -> None:
        """Stop the sandbox worker now (it is also stopped when the instance is garbage collected)."""
        if self._finalizer is not None:
            self._finalizer()
        self._env, self._finalizer = None, None


def _last_content(prompt: Any) -> str:
    if isinstance(prompt, str):
        return prompt
    if isinstance(prompt, list) and prompt and isinstance(prompt[-1], Mapping):
        content = prompt[-1].get("content")
        return content if isinstance(content, str) else ""
    return ""


def environment_factory(
    env: Any, *, sandbox: SandboxConfig | None = None, check_schemas: bool = True
) -> type[SpadeEnvironment]:
    """A TRL ``environment_factory`` class (a :class:`SpadeEnvironment` named after it) for one spade environment.

    Tools: ``reasoning``: ``answer(answer)``; ``game``: ``act(move)``; ``tool_use``: one method per
    tool (hints from the JSON schema; left-out optional arguments are not sent; names that are not
    identifiers or clash are renamed, e.g. ``class_``). Each returns the observation.

    Args:
        env: a gymnasium id, a program (path, source or EnvProgram), or a zero-argument callable
            returning a SandboxedEnv or ReasoningGymEnv.
        sandbox: sandbox limits (``None``: the defaults).
        check_schemas: build each tool's schema now with transformers' ``get_json_schema``.

    Raises:
        ValueError: an unknown id, something that is not one environment program, or a ``tool_use``
            environment without a usable tool.
        ProgramError, SandboxError: the program fails the static check or to load.
    """
    opened = _open_env(env, sandbox)
    try:
        key = env_id_of(env, opened)
        setting, tools = opened.setting, list(opened.tools or ())
        name, description, max_turns = opened.name, str(opened.description or ""), int(opened.max_turns)
    finally:
        opened.close()
    reserved = set(dir(SpadeEnvironment)) | {"reset", "get_reward"}
    specs = _tool_specs(setting, tools, reserved)
    if not specs:
        raise ValueError(
            f"{key!r} is a tool_use environment without a usable tool (its 'tools' holds no function schema with a "
            "name): TRL's tool loop has nothing to call"
        )
    namespace: dict[str, Any] = {
        "env_id": key,
        "setting": setting,
        "max_turns": max_turns,
        "description": description,
        "tool_names": {s.method: s.tool for s in specs},
        "_spec": env,
        "_sandbox": sandbox,
        "__doc__": f"The spade environment {key!r} for TRL's GRPOTrainer (environment_factory). {_one_line(description, 500)}",
        "__module__": __name__,
    }
    for spec in specs:
        namespace[spec.method] = _make_method(spec)
    class_name = _identifier(name, set(), set()) if name else "SpadeEnv"
    cls = type(class_name, (SpadeEnvironment,), namespace)
    if check_schemas:
        get_json_schema = _require("transformers.utils").get_json_schema
        for spec in specs:
            try:
                get_json_schema(getattr(cls, spec.method))
            except Exception as exc:
                raise ValueError(f"{key!r}: the tool {spec.tool!r} has no usable JSON schema for TRL: {exc}") from exc
    return cls


def environment_factories(
    envs: Iterable[Any], *, sandbox: SandboxConfig | None = None
) -> dict[str, type[SpadeEnvironment]]:
    """``{env key: factory}`` for TRL's multi-environment routing by the ``environment`` column.

    Raises:
        ValueError: two environments with the same key, no environments, or see
            :func:`environment_factory`.
    """
    out: dict[str, type[SpadeEnvironment]] = {}
    for env in envs:
        cls = environment_factory(env, sandbox=sandbox)
        if cls.env_id in out:
            raise ValueError(f"two environments share the key {cls.env_id!r}; give programs distinct names")
        out[cls.env_id] = cls
    if not out:
        raise ValueError("environment_factories needs at least one environment")
    return out


def agent_dataset(
    envs: Any, seeds: int | Iterable[int], *, hint: bool = False, sandbox: SandboxConfig | None = None
) -> Dataset:
    """A ``datasets.Dataset`` of Agent episodes for :func:`environment_factory`, one row per (env, seed).

    The prompt is :data:`AGENT_SYSTEM_PROMPTS` plus the description, then the first observation.
    ``envs``: one or a list, as :func:`environment_factory` takes them; ``seeds``: reset seeds, or a
    count of seeds drawn by :func:`~spade_gym.seeds.draw_seeds`.

    Raises:
        ValueError: no seeds, a negative seed, or see :func:`environment_factory`.
        SandboxError: an environment fails in ``reset``.
        MissingDependency: ``datasets`` is not installed.
    """
    datasets = _require("datasets")
    specs = list(envs) if isinstance(envs, list | tuple) else [envs]
    if isinstance(seeds, int) and not isinstance(seeds, bool):
        seed_list: list[Any] = draw_seeds(seeds, "agent_dataset")
    elif isinstance(seeds, Iterable) and not isinstance(seeds, str | bytes):
        seed_list = list(seeds)
    else:
        raise ValueError(f"seeds must be an int n (n drawn seeds) or an iterable of ints, got {seeds!r:.80}")
    if not seed_list or not specs:
        raise ValueError("agent_dataset needs at least one environment and one seed")
    if any(isinstance(s, bool) or not isinstance(s, int) or s < 0 for s in seed_list):
        raise ValueError(f"seeds must be ints >= 0, got {seed_list!r:.200}")
    rows: dict[str, list[Any]] = {"prompt": [], "environment": [], "env_id": [], "seed": [], "hint": []}
    for spec in specs:
        env = _open_env(spec, sandbox)
        try:
            key = env_id_of(spec, env)
            system = AGENT_SYSTEM_PROMPTS[env.setting]
            if env.description:
                system += f"\n\nEnvironment: {str(env.description).strip()}"
            for seed in seed_list:
                observation = start_episode(env, seed, hint)
                rows["prompt"].append([{"role": "system", "content": system}, {"role": "user", "content": observation}])
                rows["environment"].append(key)
                rows["env_id"].append(key)
                rows["seed"].append(seed)
                rows["hint"].append(bool(hint))
        finally:
            env.close()
    return datasets.Dataset.from_dict(rows)


def log_episodes(
    prompts: Sequence[Any],
    completions: Sequence[Any],
    completion_ids: Sequence[Sequence[int]] | None = None,
    *,
    environments: Sequence[Any] | None = None,
    log_extra: Callable[[str, list[Any]], None] | None = None,
    log_metric: Callable[[str, float], None] | None = None,
    **kwargs: Any,
) -> list[float | None]:
    """A logging-only TRL reward function (returns ``None`` each): logs the ``spade/*`` episode
    statistics of TRL's ``environments`` per completion and per batch."""
    envs = [e for e in environments or () if isinstance(e, SpadeEnvironment)]
    if envs and len(envs) == len(completions):
        if callable(log_extra):
            log_extra("spade/env_id", [e.env_id for e in envs])
            log_extra("spade/seed", [e.seed for e in envs])
            log_extra("spade/tool_calls", [len(e.history) for e in envs])
            log_extra("spade/return", [e.get_reward() for e in envs])
            log_extra("spade/error", [(e.error or {}).get("message") for e in envs])
        if callable(log_metric):
            log_metric("spade/episode_return", sum(e.get_reward() for e in envs) / len(envs))
            log_metric("spade/tool_calls", sum(len(e.history) for e in envs) / len(envs))
            log_metric("spade/env_errors", sum(e.error is not None for e in envs) / len(envs))
    return [None] * len(completions)


def tool_calling_tokenizer(tokenizer: Any) -> Any:
    """``tokenizer``, given TRL's Qwen2.5 template (``<tool_call>`` JSON) when it is ChatML without tool support.

    Raises:
        ValueError: no tool support and not ChatML.
        MissingDependency: trl is not installed.
    """
    utils = _require("trl.chat_template_utils")
    if getattr(tokenizer, "chat_template", None) and utils.supports_tool_calling(tokenizer):
        return tokenizer
    vocab = tokenizer.get_vocab()
    if "<|im_start|>" not in vocab or "<|im_end|>" not in vocab:
        raise ValueError(
            "the tokenizer's chat template cannot render tool calls and the tokenizer is not ChatML "
            "(<|im_start|>/<|im_end|>); give it a tool-calling chat template (see TRL's chat_templates)"
        )
    tokenizer.chat_template = utils.qwen2_5_chat_template
    return tokenizer
