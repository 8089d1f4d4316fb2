"""TRL integration, the Designer's side (imported from :mod:`spade_gym.integrations.trl`): :class:`DesignerReward`
on the prompts of :func:`designer_dataset`, against a frozen or co-trained (:class:`TrainerPolicy`) Agent."""

from __future__ import annotations

import copy
import dataclasses
import json
import logging
import os
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from spade_gym.designer import DesignerConfig, DesignerPrompt, DesignOutcome, SpadeDesignerEnv, evaluate_completion
from spade_gym.documents import DocumentSource
from spade_gym.errors import GenerationError, PolicyError, SandboxSetupError
from spade_gym.integrations import require
from spade_gym.policies.base import Completion, Policy, Prompt, SamplingParams
from spade_gym.program import SETTINGS
from spade_gym.registry.gymnasium import open_registry
from spade_gym.registry.store import Registry

if TYPE_CHECKING:  # pragma: no cover - types only
    from datasets import Dataset

logger = logging.getLogger("spade_gym.integrations.trl")

_FEATURE = "spade_gym.integrations.trl"

#: The ``spade_role`` of Designer rows; :class:`DesignerReward` returns ``None`` for other rows.
DESIGNER_ROLE = "designer"


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
    """A ``datasets.Dataset`` of ``n`` Designer prompts for ``GRPOTrainer``: row ``i`` is what
    ``spade/Designer-v0`` poses at ``reset(seed=seed + i)`` (a snapshot of the registry's memory).

    Args:
        n: number of prompts, ``>= 1``.
        registry: a Registry or its folder (created when new, with the seed library when
            ``seed_library``); pass the same one to :class:`DesignerReward`.
        documents: a DocumentSource or a ``load_documents`` spec (``None``: the built-in corpus).
        setting, mode: force every prompt's target setting / mode (``"write"`` or ``"edit"``).

    Raises:
        ValueError: ``n < 1``, or an unknown setting or mode.
        DocumentError: no usable document.
        MissingDependency: ``datasets`` is not installed.
    """
    datasets = require("datasets", "trl", _FEATURE)
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
    """A spade ``Policy`` that samples from the model a TRL trainer is training (the co-trained Agent),
    through :class:`~spade_gym.policies.transformers.TransformersPolicy`.

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
        """Sample completions (grouped by prompt) from the trainer's current weights.

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

    Use as ``GRPOTrainer(reward_funcs=DesignerReward(...), train_dataset=designer_dataset(...))``.
    A ``None`` reward means not scored (not a Designer row, or the Agent failed); identical programs
    in one batch share one evaluation.

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
        """Score one batch of Designer completions (messages or text); ``kwargs``: dataset columns and
        TRL's ``trainer_state``, ``log_extra``, ``log_metric``.

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
