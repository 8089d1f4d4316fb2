"""TRL integration: train the Environment Designer and the Reasoning Agent with TRL's ``GRPOTrainer``.

For TRL >= 1.0 (written against TRL 1.16, https://huggingface.co/docs/trl/main/en/grpo_trainer).

* Designer: :class:`DesignerReward` scores each completion with
  :func:`~spade_gym.designer.evaluate_completion` (gate -> regret -> registry -> reward) on the prompts
  of :func:`designer_dataset`; the Agent is frozen (a ``Policy``) or co-trained (:class:`TrainerPolicy`).
* Agent: :func:`environment_factory` / :func:`environment_factories` build TRL ``environment_factory``
  classes whose methods are the environment's tools; :func:`agent_dataset` writes the matching rows.

A ``None`` reward means "not mine" (not a ``"designer"`` row, or an Agent failure); every program
outcome, crashes included, is a number; a failing environment ends its episode with return 0; only
setup errors raise. Identical programs in one batch share one evaluation. trl, torch, transformers
and datasets are imported when first needed (:class:`~spade_gym.errors.MissingDependency`).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import json
import keyword
import logging
import math
import os
import re
import threading
import weakref
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Union, cast

from spade_gym.agent import Trajectory, env_id_of, start_episode
from spade_gym.designer import DesignerConfig, DesignerPrompt, DesignOutcome, SpadeDesignerEnv, evaluate_completion
from spade_gym.documents import DocumentSource
from spade_gym.env import SandboxedEnv, escape_text
from spade_gym.errors import GenerationError, PolicyError, SandboxSetupError
from spade_gym.integrations import require
from spade_gym.policies.base import Completion, Policy, Prompt, SamplingParams
from spade_gym.program import SETTINGS, EnvProgram
from spade_gym.reasoning_gym import ReasoningGymEnv
from spade_gym.registry.gymnasium import open_registry
from spade_gym.registry.store import Registry
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

_FEATURE = "spade_gym.integrations.trl"

#: The ``spade_role`` of Designer rows; :class:`DesignerReward` returns ``None`` for other rows.
DESIGNER_ROLE = "designer"

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


def _import(module: str) -> Any:
    return require(module, "trl", _FEATURE)


# -- The Designer: reward function, prompts dataset, co-trained Agent


@dataclass(frozen=True)
class _RowPrompt(DesignerPrompt):
    """A :class:`DesignerPrompt` rebuilt from a dataset row: its provenance is the stored one."""

    stored: dict[str, Any] = field(default_factory=dict)

    def provenance(self) -> dict[str, Any]:
        return copy.deepcopy(self.stored)


def _row_prompt(messages: Any, provenance: Any, index: int) -> _RowPrompt:
    where = f"row {index}: the 'provenance' column"
    if isinstance(provenance, str):
        try:
            provenance = json.loads(provenance)
        except ValueError as exc:
            raise ValueError(f"{where} is not JSON ({exc}); build the dataset with designer_dataset()") from None
    if not isinstance(provenance, Mapping) or not {"mode", "setting", "parent"} <= set(provenance):
        raise ValueError(
            f"{where} must be a JSON object with 'mode', 'setting' and 'parent' (DesignerPrompt.provenance()), "
            f"got {provenance!r:.200}"
        )
    setting = provenance["setting"]
    if setting is not None and setting not in SETTINGS:
        raise ValueError(f"{where} names setting {setting!r}; expected one of {SETTINGS} or null")
    chat = [dict(m) for m in messages] if isinstance(messages, list) else [{"role": "user", "content": str(messages)}]
    return _RowPrompt(
        messages=chat,
        mode=str(provenance["mode"]),
        setting=setting,
        document=None,
        parent=provenance["parent"],
        stored=dict(provenance),
    )


def _completion_text(completion: Any) -> str:
    """The text of a TRL completion: a string (standard format) or a list of messages (conversational)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        completion = [completion]
    parts: list[str] = []
    for message in completion or ():
        if not isinstance(message, Mapping) or message.get("role", "assistant") != "assistant":
            continue
        content = message.get("content")
        if isinstance(content, str):
            parts.append(content)
        elif isinstance(content, list):  # content blocks
            parts.extend(str(b.get("text", "")) for b in content if isinstance(b, Mapping) and b.get("type") == "text")
    return "\n".join(parts)


def designer_dataset(
    n: int,
    *,
    registry: Registry | str | os.PathLike[str],
    documents: DocumentSource | str | None = None,
    config: DesignerConfig | None = None,
    seed: int = 0,
    setting: str | None = None,
    mode: str | None = None,
    seed_library: bool = True,
) -> Dataset:
    """A ``datasets.Dataset`` of ``n`` Designer prompts for ``GRPOTrainer``.

    Row ``i`` is what ``spade/Designer-v0`` poses at ``reset(seed=seed + i)``: a document and a
    memory of the registry's environments (a snapshot: rebuild the dataset to show new ones).

    Args:
        n: number of prompts, ``>= 1``.
        registry: a Registry or its folder (created when new, with the seed library when
            ``seed_library``); pass the same one to :class:`DesignerReward`.
        documents: a DocumentSource or a ``load_documents`` spec (``None``: the built-in corpus).
        setting, mode: force every prompt's target setting / mode (``"write"`` or ``"edit"``).

    Returns:
        Columns ``prompt`` (messages), ``spade_role`` (``"designer"``) and ``provenance`` (JSON).

    Raises:
        ValueError: ``n < 1``, or an unknown setting or mode.
        DocumentError: no usable document.
        MissingDependency: ``datasets`` is not installed.
    """
    datasets = _import("datasets")
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ValueError(f"n must be an int >= 1, got {n!r}")
    options = {key: value for key, value in (("setting", setting), ("mode", mode)) if value is not None}
    env = SpadeDesignerEnv(
        agent=None,
        registry=registry if isinstance(registry, Registry) else Path(registry),
        documents=documents,
        config=config,
        seed_library=seed_library,
    )
    rows: dict[str, list[Any]] = {"prompt": [], "spade_role": [], "provenance": []}
    try:
        for i in range(n):
            env.reset(seed=seed + i, options=dict(options))
            prompt = env.prompt
            assert prompt is not None
            rows["prompt"].append([dict(m) for m in prompt.messages])
            rows["spade_role"].append(DESIGNER_ROLE)
            rows["provenance"].append(json.dumps(prompt.provenance(), sort_keys=True))
    finally:
        env.close()
    return datasets.Dataset.from_dict(rows)


class TrainerPolicy:
    """A spade ``Policy`` that samples from the model a TRL trainer is training (the co-trained Agent).

    Generation runs :class:`~spade_gym.policies.transformers.TransformersPolicy` on the trainer's own
    model object, restoring its training mode and ``generation_config`` after each call.

    Args:
        trainer: a ``trl.GRPOTrainer`` (``model``, ``processing_class``, ``accelerator``), or ``None``
            to :meth:`bind` later.
        max_batch_size: most sequences per ``model.generate`` call.
    """

    def __init__(self, trainer: Any = None, *, max_batch_size: int = 32) -> None:
        self._trainer: Any = None
        self._policy: Any = None
        self._model_id: int | None = None
        self._lock = threading.Lock()
        self.max_batch_size = max_batch_size
        #: Completions generated so far (all calls), for logs and tests.
        self.completions_generated = 0
        if trainer is not None:
            self.bind(trainer)

    def bind(self, trainer: Any) -> TrainerPolicy:
        """Sample from ``trainer``'s model from now on; returns ``self``.

        Raises:
            ValueError: ``trainer`` has no ``model``/``processing_class``, or shards its model with
                DeepSpeed or FSDP (use a frozen Agent, e.g. a vLLM policy, there).
        """
        if getattr(trainer, "model", None) is None or getattr(trainer, "processing_class", None) is None:
            raise ValueError(
                f"TrainerPolicy.bind needs a trainer with .model and .processing_class, got {type(trainer).__name__}"
            )
        if getattr(trainer, "is_deepspeed_enabled", False) or getattr(trainer, "is_fsdp_enabled", False):
            raise ValueError(
                "a co-trained Agent cannot sample from a DeepSpeed- or FSDP-sharded model (ranks would have to "
                "generate in lockstep); pass a frozen Agent policy to DesignerReward instead"
            )
        self._trainer = trainer
        self._policy, self._model_id = None, None
        return self

    @property
    def bound(self) -> bool:
        """Whether a trainer is bound."""
        return self._trainer is not None

    @property
    def model(self) -> Any:
        """The trainer's model (unwrapped from the accelerator); RuntimeError when unbound."""
        trainer = self._require()
        accelerator = getattr(trainer, "accelerator", None)
        return accelerator.unwrap_model(trainer.model) if accelerator is not None else trainer.model

    @property
    def name(self) -> str:
        """``"trainer:<model name>"``, or ``"trainer:unbound"``."""
        if self._trainer is None:
            return "trainer:unbound"
        config = getattr(self.model, "config", None)
        return f"trainer:{getattr(config, '_name_or_path', '') or type(self.model).__name__}"

    @property
    def context_window(self) -> int | None:
        """The model config's ``max_position_embeddings`` (``None`` unbound or unknown)."""
        if self._trainer is None:
            return None
        config = getattr(self.model, "config", None)
        value = getattr(config, "max_position_embeddings", None)
        return int(value) if isinstance(value, int) else None

    def _require(self) -> Any:
        if self._trainer is None:
            raise RuntimeError(
                "TrainerPolicy is not bound to a trainer: call DesignerReward.bind(trainer) (or TrainerPolicy.bind) "
                "after building the GRPOTrainer and before trainer.train()"
            )
        return self._trainer

    def _backend(self) -> Any:
        """The TransformersPolicy over the trainer's current model object, built once per model."""
        model = self.model
        if self._policy is None or self._model_id != id(model):
            from spade_gym.policies.transformers import TransformersPolicy

            saved_config, was_training = getattr(model, "generation_config", None), model.training
            parameter = next(model.parameters())
            try:
                self._policy = TransformersPolicy(
                    model,
                    self._require().processing_class,
                    device=str(parameter.device),
                    dtype=parameter.dtype,
                    max_batch_size=self.max_batch_size,
                    name=self.name,
                )
            finally:  # TransformersPolicy sets neutral generation defaults and eval mode: undo both
                if saved_config is not None:
                    model.generation_config = saved_config
                model.train(was_training)
            self._model_id = id(model)
        return self._policy

    def encode(self, prompt: Prompt) -> list[int]:
        """The prompt's token ids under the trainer's chat template (see ``TransformersPolicy.encode``)."""
        with self._lock:
            ids: list[int] = self._backend().encode(prompt)
            return ids

    def generate(self, prompts: Sequence[Prompt], sampling: SamplingParams | None = None) -> list[Completion]:
        """Sample ``B * n`` completions (grouped by prompt) from the trainer's current weights.

        Raises:
            RuntimeError: no trainer is bound.
            ContextLengthExceeded: a prompt too long (unless ``sampling.truncate_prompt``).
        """
        with self._lock:
            backend = self._backend()
            model = backend.model
            was_training = model.training
            model.eval()
            try:
                out: list[Completion] = backend.generate(prompts, sampling)
            finally:
                model.train(was_training)
            self.completions_generated += len(out)
            return out


class _LazyAgent:
    """An Agent given as a ``load_policy`` spec, loaded on the first accepted program."""

    def __init__(self, spec: str) -> None:
        self.name = spec  # the spec, read without loading the policy
        self._policy: Policy | None = None

    @property
    def policy(self) -> Policy:
        if self._policy is None:
            from spade_gym.policies import load_policy

            self._policy = load_policy(self.name)
        return self._policy

    def __getattr__(self, name: str) -> Any:  # generate, context_window and backend extras (encode, ...)
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.policy, name)


class _GuardedAgent:
    """The Agent for the regret rollouts: any failure of its ``generate`` is a :class:`PolicyError`."""

    def __init__(self, agent: Any) -> None:
        self._agent = agent

    def generate(self, prompts: Sequence[Prompt], sampling: SamplingParams | None = None) -> list[Completion]:
        try:
            out: list[Completion] = self._agent.generate(prompts, sampling)
        except PolicyError:
            raise
        except Exception as exc:
            raise GenerationError(f"the Agent policy {self._agent.name!r} failed: {type(exc).__name__}: {exc}") from exc
        return out

    def __getattr__(self, name: str) -> Any:  # name, context_window and backend extras (encode, ...)
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self._agent, name)


@dataclass
class _Scored:
    reward: float | None
    category: str | None = None
    outcome: str | None = None
    regret: float | None = None
    env_id: str | None = None
    error: str | None = None
    design: DesignOutcome | None = None


class DesignerReward:
    """The Designer's reward as a TRL reward function: completion -> gate -> regret -> registry -> reward.

    Use as ``GRPOTrainer(reward_funcs=DesignerReward(...), train_dataset=designer_dataset(...))``
    (TRL's name: ``spade_designer``). Each prompt is rebuilt from the row's ``provenance``; accepted
    programs are registered; the reward is :func:`~spade_gym.regret.designer_reward`. ``log_extra``
    gets ``spade/category``, ``outcome``, ``regret``, ``env_id``, ``error`` per completion;
    ``log_metric`` the fractions ``spade/accepted``, ``invalid``, ``duplicate`` and mean ``regret``.

    Args:
        agent: a ``Policy`` (frozen), a ``load_policy`` spec (loaded on the first accepted program),
            ``"trainer"`` or a :class:`TrainerPolicy` (co-trained; :meth:`bind` it).
        registry, seed_library: as :func:`designer_dataset` (use the registry it read).
        seed: base seed of the Agent's sampling (per completion from ``(seed, step, i)``; ``None``: unseeded).

    Attributes:
        last_outcomes: the DesignOutcome of each completion of the last call (``None``: not scored).
        last_rewards: the rewards returned by the last call.

    Raises:
        ValueError: an ``agent`` that is neither a policy, a spec nor a :class:`TrainerPolicy`.
    """

    __name__ = "spade_designer"

    def __init__(
        self,
        agent: Policy | TrainerPolicy | str,
        registry: Registry | str | os.PathLike[str],
        *,
        config: DesignerConfig | None = None,
        seed: int | None = 0,
        seed_library: bool = True,
    ) -> None:
        if agent == "trainer":
            self.agent: Any = TrainerPolicy()
        elif isinstance(agent, str):
            self.agent = _LazyAgent(agent)
        elif isinstance(agent, TrainerPolicy) or isinstance(agent, Policy):
            self.agent = agent
        else:
            raise ValueError(
                f"agent must be a spade Policy, a load_policy spec, 'trainer' or a TrainerPolicy, got {type(agent).__name__}"
            )
        self.registry = (
            registry if isinstance(registry, Registry) else open_registry(Path(registry), seed_library=seed_library)
        )
        self.config = config or DesignerConfig()
        self.seed = seed
        self.last_outcomes: list[DesignOutcome | None] = []
        self.last_rewards: list[float | None] = []
        self._lock = threading.Lock()

    def bind(self, trainer: Any) -> DesignerReward:
        """Bind a co-trained Agent to ``trainer`` (a no-op for a frozen Agent); returns ``self``."""
        if isinstance(self.agent, TrainerPolicy):
            self.agent.bind(trainer)
        return self

    def _sampling_seed(self, step: int, index: int) -> int | None:
        if self.seed is None:
            return None
        return (self.seed * 1_000_003 + step * 10_007 + index) % (2**62)

    def __call__(
        self,
        prompts: Sequence[Any],
        completions: Sequence[Any],
        completion_ids: Sequence[Sequence[int]] | None = None,
        **kwargs: Any,
    ) -> list[float | None]:
        """Score one batch of Designer completions (messages or text): one reward each, ``None``: not scored.

        ``kwargs``: dataset columns (``provenance``, ``spade_role``, optional) and TRL's
        ``trainer_state``, ``log_extra``, ``log_metric``.

        Raises:
            ValueError: a column whose length differs from ``completions``, or a malformed ``provenance``.
            SandboxSetupError: no sandbox worker can start on this machine.
            RuntimeError: a co-trained Agent that was never bound.
        """
        n = len(completions)
        provenance = kwargs.get("provenance")
        roles = kwargs.get("spade_role")
        for column, values in (("prompts", prompts), ("provenance", provenance), ("spade_role", roles)):
            if values is not None and len(values) != n:
                raise ValueError(f"the {column!r} column has {len(values)} entries for {n} completions")
        if isinstance(self.agent, TrainerPolicy) and not self.agent.bound:
            self.agent._require()  # fail before any work, with the message that says what to do
        state = kwargs.get("trainer_state")
        step = int(getattr(state, "global_step", 0) or 0)
        scored: list[_Scored] = []
        by_program: dict[str, _Scored] = {}
        with self._lock:
            for i in range(n):
                if roles is not None and roles[i] != DESIGNER_ROLE:
                    scored.append(_Scored(None))
                    continue
                prompt = _row_prompt(prompts[i], provenance[i], i) if provenance is not None else None
                scored.append(self._score(_completion_text(completions[i]), prompt, step, i, by_program))
        self.last_outcomes = [s.design for s in scored]
        self.last_rewards = [s.reward for s in scored]
        self._log(scored, kwargs.get("log_extra"), kwargs.get("log_metric"))
        return list(self.last_rewards)

    def _score(
        self, text: str, prompt: DesignerPrompt | None, step: int, index: int, seen: dict[str, _Scored]
    ) -> _Scored:
        from spade_gym.designer import extract_design
        from spade_gym.memory import read_source

        if prompt is not None and prompt.parent and prompt.parent_source is None and prompt.parent in self.registry:
            # edit blocks apply to the parent's program, read from the registry (a parent not in this
            # registry: only a whole module counts)
            prompt = dataclasses.replace(prompt, parent_source=read_source(self.registry.get(prompt.parent)))
        source = extract_design(text, prompt).source
        key = f"{prompt.setting if prompt else None}\n{source}" if source is not None else None
        if key is not None and key in seen:
            return dataclasses.replace(seen[key])
        try:
            outcome = evaluate_completion(
                text,
                prompt,
                registry=self.registry,
                agent=cast(Policy, _GuardedAgent(self.agent)),
                config=self.config,
                sampling_seed=self._sampling_seed(step, index),
            )
        except SandboxSetupError:
            raise
        except PolicyError as exc:  # the Agent failed, not the program: no signal for this completion
            logger.warning("spade_designer: completion %d not scored, the Agent failed: %s", index, exc)
            result = _Scored(None, "AGENT_ERROR", None, error=f"{type(exc).__name__}: {exc}"[:500])
        except Exception as exc:  # a hostile program found a path evaluate_completion did not contain
            logger.warning(
                "spade_designer: completion %d crashed the evaluation: %s: %s", index, type(exc).__name__, exc
            )
            error = f"{type(exc).__name__}: {exc}"[:500]
            result = _Scored(float(self.config.reward.invalid), "EVALUATION_ERROR", "invalid", error=error)
        else:
            estimate = outcome.estimate
            result = _Scored(
                float(outcome.reward.reward),
                outcome.report.category,
                outcome.reward.outcome,
                estimate.regret if estimate is not None else None,
                outcome.record.gym_id if outcome.record is not None else None,
                None,
                outcome,
            )
        if key is not None:
            seen[key] = result
        return result

    def _log(self, scored: list[_Scored], log_extra: Any, log_metric: Any) -> None:
        if callable(log_extra):
            for column in ("category", "outcome", "regret", "env_id", "error"):
                log_extra(f"spade/{column}", [getattr(s, column) for s in scored])
        if callable(log_metric):
            rated = [s for s in scored if s.reward is not None]
            if rated:
                log_metric("spade/accepted", sum(s.env_id is not None for s in rated) / len(rated))
                log_metric("spade/invalid", sum(s.outcome == "invalid" for s in rated) / len(rated))
                log_metric("spade/duplicate", sum(s.outcome == "duplicate" for s in rated) / len(rated))
            regrets = [s.regret for s in rated if s.regret is not None]
            if regrets:
                log_metric("spade/regret", sum(regrets) / len(regrets))


# -- The Agent: environment_factory


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
    """Untrusted schema text as one docstring-safe line."""
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

    TRL creates instances with ``cls()`` (pooled), calls ``reset(**row)`` before each rollout, exposes
    every other public method as a tool and scores with ``get_reward()``. The sandbox worker starts at
    the first ``reset`` and is reused until the instance is garbage collected.

    Class attributes: ``env_id`` (gymnasium id, or the program's name), ``setting``, ``max_turns``,
    ``description`` and ``tool_names`` (``{method name: tool name}``).
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
        """Start an episode from a dataset row (TRL passes the row's columns as keywords).

        Reads ``seed`` (required), ``env_id`` (optional, must be this class's), ``hint`` and ``prompt``.

        Returns:
            ``None`` when the prompt already ends with the first observation (:func:`agent_dataset`
            rows); else the observation for TRL to append (or a note that the environment failed).

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
    env: Any,
    *,
    sandbox: SandboxConfig | None = None,
    check_schemas: bool = True,
) -> type[SpadeEnvironment]:
    """A TRL ``environment_factory`` class for one spade environment.

    The environment is opened once to read its setting, tools and description; each instance opens
    its own worker. Tools: ``reasoning``: ``answer(answer)``; ``game``: ``act(move)``; ``tool_use``:
    one method per tool, stepping with ``{"name": <tool>, "arguments": {...}}`` (hints from the JSON
    schema, nested objects as ``dict``; left-out optional arguments are not sent; names that are not
    identifiers or clash are renamed, e.g. ``class_``: :attr:`SpadeEnvironment.tool_names`). Each
    returns the observation, plus an "episode is over" note at the end.

    Args:
        env: a gymnasium id, a program (path, source or EnvProgram), or a zero-argument callable
            returning a SandboxedEnv or ReasoningGymEnv.
        sandbox: sandbox limits (``None``: the defaults).
        check_schemas: build each tool's schema now with transformers' ``get_json_schema``.

    Returns:
        A :class:`SpadeEnvironment` subclass named after the environment.

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
        get_json_schema = _import("transformers.utils").get_json_schema
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
    envs: Any,
    seeds: int | Iterable[int],
    *,
    hint: bool = False,
    sandbox: SandboxConfig | None = None,
) -> Dataset:
    """A ``datasets.Dataset`` of Agent episodes for :func:`environment_factory`, one row per (env, seed).

    The prompt is :data:`AGENT_SYSTEM_PROMPTS` plus the description, then the first observation of
    ``reset(seed)`` (with the hint when ``hint``). ``envs``: one or a list, as
    :func:`environment_factory` takes them; ``seeds``: reset seeds, or a count ``n`` of seeds drawn
    as the validation gate draws them (:func:`~spade_gym.seeds.draw_seeds`: no program can predict them).

    Returns:
        Columns ``prompt``, ``environment`` and ``env_id`` (the env key), ``seed`` and ``hint``.

    Raises:
        ValueError: no seeds, a negative seed, or see :func:`environment_factory`.
        SandboxError: an environment fails in ``reset``.
        MissingDependency: ``datasets`` is not installed.
    """
    datasets = _import("datasets")
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
    """A logging-only TRL reward function: returns ``[None] * len(completions)``.

    Logs per completion ``spade/env_id``, ``spade/seed``, ``spade/tool_calls``, ``spade/return``
    and ``spade/error`` (``log_extra``), and the batch's ``spade/episode_return``,
    ``spade/tool_calls`` and ``spade/env_errors`` (``log_metric``), from TRL's ``environments``.
    """
    envs = [e for e in environments or () if isinstance(e, SpadeEnvironment)]
    if environments is not None and envs and len(envs) == len(completions):
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
    """Make a ChatML tokenizer render tool calls, for TRL's tool loop; returns the same tokenizer.

    A template that already supports tools is kept; a ChatML one without (e.g. SmolLM2) gets TRL's
    Qwen2.5 template (``<tool_call>`` JSON, spade's own Agent format).

    Raises:
        ValueError: no tool support and not ChatML.
        MissingDependency: trl is not installed.
    """
    utils = _import("trl.chat_template_utils")
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
