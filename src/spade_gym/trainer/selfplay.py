"""The self-play loop: one model designs environments and learns to solve them (SPADE).

One iteration, scheduled as ACCEL/PLR (Parker-Holder et al. 2022; Jiang et al. 2021; the data flow
of docs/DESIGN.md):

1. **Design** (:meth:`SelfPlay.design`): G designs per prompt, one GRPO group each, judged by the
   stages of :mod:`spade_gym.stages` with the calls and random draws of
   :class:`~spade_gym.designer.SpadeDesignerEnv`.
2. **The Designer's update**, once per design phase, while its samples are on-policy.
3. **Agent steps**, ``agent.updates_per_iteration`` of them: environments drawn by prioritised
   replay are played (the first step adds the accepted designs' no-hint regret episodes), one GRPO
   update, the weights synced to a separate generation backend (``policy.spec = "vllm:<id>"``), the
   replay scores refreshed (:func:`refresh_scores`).
4. **Held-out evaluation** (:mod:`spade_gym.evaluation.heldout`): before iteration 0, every
   ``eval.every`` iterations and after the last.
5. **Checkpoint, then log**, so that a killed run loses at most the current iteration.

``run.designer = "off"`` skips phases 1 and 2: the baseline Agent trains on ``run.fixed_pool``.
"""

from __future__ import annotations

import dataclasses
import difflib
import math
import statistics
import time
import warnings
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any, Literal

import numpy as np

from spade_gym.agent import Episode, Trajectory, format_compliance, rollout
from spade_gym.designer import (
    DesignerPrompt,
    DesignOutcome,
    draw_group,
    evaluate_completion,
    generate_designs,
    validate_designs,
)
from spade_gym.documents import load_documents
from spade_gym.errors import Category, DocumentError, EnvNotFound, PolicyError, install_hint
from spade_gym.evaluation.base import load_results, save_results
from spade_gym.evaluation.heldout import (
    HeldOut,
    evaluate_heldout,
    gain_metrics,
    graded,
    heldout_items,
    ladders_of,
    save_path,
    seed_records,
    seen_levels,
)
from spade_gym.files import replace_atomically
from spade_gym.memory import EnvironmentMemory
from spade_gym.policies.base import Completion, SamplingParams
from spade_gym.reasoning_gym import ReasoningGymEnv, check_task
from spade_gym.registry.gymnasium import open_registry, register_record
from spade_gym.registry.store import Registry
from spade_gym.trainer.budget import check_budget
from spade_gym.trainer.config import ConfigError, SelfPlayConfig, parse_fixed_pool
from spade_gym.trainer.credit import merge_updates, samples_by_turn
from spade_gym.trainer.grpo import (
    GRPOTrainer,
    TrainSample,
    UpdateStats,
    samples_from_completions,
    samples_from_trajectories,
)
from spade_gym.trainer.run import DESIGN_TEXT_CHARS, Checkpoint, RunDir, capture_rng_state, restore_rng_state
from spade_gym.trainer.state import load_trainable_state, trainable_state
from spade_gym.trainer.summary import MOVED_KEYS, designer_summary, summary_line, training_state, what_moved
from spade_gym.trainer.warmstart import check_warmstart_config, run_warmstart

__all__ = [
    "MOVED_KEYS",
    "AgentStep",
    "SelfPlay",
    "refresh_scores",
    "flag_contract_breakers",
    "AgentPhase",
    "DesignPhase",
    "IterationResult",
    "STALL_WARNING_AFTER",
    "load_run_policy",
    "designer_summary",
    "what_moved",
]

#: Iterations in a row without an accepted design after which the loop warns.
STALL_WARNING_AFTER = 3


@dataclass(frozen=True)
class DesignPhase:
    """What phase 1 produced: every design, the Designer's samples, the regret episodes the Agent
    trains on, new tokens, wall time and (of it) the gate's time."""

    outcomes: tuple[DesignOutcome, ...] = ()
    samples: tuple[TrainSample, ...] = ()
    regret_episodes: tuple[Trajectory, ...] = ()
    tokens: int = 0
    seconds: float = 0.0
    validate_s: float = 0.0


@dataclass(frozen=True)
class AgentPhase:
    """What phase 2 produced: replayed episodes, environments ``flagged`` for a return outside
    [0, 1], the Agent's samples, new tokens and the rollout's wall time."""

    replayed: tuple[Trajectory, ...] = ()
    flagged: tuple[str, ...] = ()
    samples: tuple[TrainSample, ...] = ()
    tokens: int = 0
    seconds: float = 0.0

    @property
    def mean_return(self) -> float | None:
        """Mean return of the replayed episodes (``None`` without any)."""
        return statistics.fmean(t.episode_return for t in self.replayed) if self.replayed else None


@dataclass(frozen=True)
class AgentStep:
    """One Agent step: its episodes and samples (``phase``), its ``update`` (``None`` without
    samples) and the update's wall seconds (sync included)."""

    phase: AgentPhase
    update: UpdateStats | None
    update_s: float


@dataclass(frozen=True)
class IterationResult:
    """What one iteration did: its ``metrics.jsonl`` row, designs, registered ids, replayed
    episodes and messages for the user."""

    iteration: int
    metrics: dict[str, Any]
    outcomes: tuple[DesignOutcome, ...] = field(default=(), repr=False)
    accepted: tuple[str, ...] = ()
    replayed: tuple[Trajectory, ...] = field(default=(), repr=False)
    messages: tuple[str, ...] = ()


def _design_line(p: int, prompt: Any, outcome: DesignOutcome) -> dict[str, Any]:
    """One line of ``designs.jsonl``."""
    report, cut = outcome.report, DESIGN_TEXT_CHARS
    return {
        "prompt": p,
        "mode": prompt.mode,
        "parent": prompt.parent,
        "setting": prompt.setting,
        "messages": prompt.messages,  # the prompt shown: `spade export designs` makes Designer SFT data of it
        "completion": outcome.completion[:cut],
        "program": outcome.source[:cut] if outcome.source is not None else None,
        "category": report.category,
        "feedback": None if report.accepted else report.feedback()[:2000],
        "reward": outcome.reward.reward,
        "outcome": outcome.reward.outcome,
        # what the reward was computed from: both arms' mean returns and the success rate p it used
        "return_hint": outcome.estimate.mean_hint if outcome.estimate is not None else None,
        "return_nohint": outcome.estimate.mean_nohint if outcome.estimate is not None else None,
        "p": outcome.reward.p_nohint,
        "env_id": outcome.record.env_id if outcome.record is not None else None,
        "regret": outcome.estimate.summary() if outcome.estimate is not None else None,
    }


def refresh_scores(registry: Registry, trajectories: Sequence[Trajectory]) -> None:
    """PLR's score update after the Agent played: each registry environment in ``trajectories``
    gets their mean return as its no-hint return and its regret recomputed against its recorded
    hint return (Jiang et al. 2021 score a level again each time it is replayed)."""
    by_env: dict[str, list[float]] = {}
    for trajectory in trajectories:
        if not trajectory.hint and trajectory.error is None:
            by_env.setdefault(trajectory.env_id, []).append(trajectory.episode_return)
    for env_id, returns in by_env.items():
        try:
            stats = registry.get(env_id).stats
        except EnvNotFound:  # a reasoning-gym task
            continue
        nohint = statistics.fmean(returns)
        regret = None if stats.mean_return_hint is None else max(stats.mean_return_hint - nohint, 0.0)
        registry.update_stats(env_id, mean_return_nohint=nohint, regret=regret, episodes=stats.episodes + len(returns))


def flag_contract_breakers(registry: Registry, trajectories: list[Trajectory]) -> list[str]:
    """Flag each registry environment whose episode ended with ``INVALID_REWARD`` (a return
    outside [0, 1]), so replay never draws it again; returns the ids flagged, in order."""
    flagged: list[str] = []
    for trajectory in trajectories:
        error = trajectory.error or {}
        if error.get("category") != Category.INVALID_REWARD:
            continue
        try:
            record = registry.flag(trajectory.env_id, f"seed {trajectory.seed}: {error.get('message', '')}")
        except EnvNotFound:  # not a registry environment (a reasoning-gym task)
            continue
        if record.env_id not in flagged:
            flagged.append(record.env_id)
    return flagged


class SelfPlay:
    """A self-play run: the policy, its trainer, the Designer env, the registry and the run folder.

    ``policy``: the shared trainable policy of both roles, used as it is (``config.policy`` is then
    not applied); default: loaded from ``config.policy``. ``progress(phase, done, total)`` is called
    for ``"design"``, ``"rollout"``, ``"update"`` and ``"warmstart"``. ``apply_warmstart``: with
    ``warmstart.enabled``, apply the cold-start adapters before iteration 0 (:meth:`resume` passes
    ``False`` when a checkpoint follows).

    Raises:
        ConfigError: a setting this loop cannot run (e.g. ``ray.address`` unreachable, an unknown
            reasoning-gym task).
        PolicyError: the policy cannot be loaded.
    """

    def __init__(
        self,
        config: SelfPlayConfig,
        run: RunDir,
        *,
        policy: Any = None,
        say: Callable[[str], None] = print,
        progress: Callable[[str, int, int], None] | None = None,
        apply_warmstart: bool = True,
    ) -> None:
        self.config, self.run, self.say = config, run, say
        self.progress = progress or (lambda phase, done, total: None)
        run.lock()  # one process per run folder
        self.executor: Any = None
        try:
            self._build(policy, apply_warmstart)
        except BaseException:
            if self.executor is not None:
                self.executor.close()
            run.close()
            raise

    def _build(self, policy: Any, apply_warmstart: bool = True) -> None:
        config, run = self.config, self.run
        #: the designer='off' baseline's reasoning-gym tasks
        self.fixed_tasks: list[str] = []
        if config.run.designer == "off":
            kind, tasks = parse_fixed_pool(config.run.fixed_pool)
            if kind == "reasoning-gym":
                try:
                    self.fixed_tasks = [check_task(t) for t in tasks]
                except (ImportError, ValueError) as exc:
                    raise ConfigError(f"config key 'run.fixed_pool': {exc}", key="run.fixed_pool") from None
        # the cheap settings first, so that a mistake fails before the model loads
        if policy is None:  # (a policy passed in is the caller's)
            if config.policy.lora is not None:
                check_lora(config.policy.lora)
            config.check_design_budget()  # a design budget too small for any program
        check_budget(config)  # run.budget_minutes, before any work
        warm = config.warmstart.enabled and apply_warmstart
        if warm:
            check_warmstart_config(config)  # an empty or oracle-less pool fails before the model loads
        try:
            self.documents = load_documents(
                config.designer.documents, seed=config.run.seed, max_tokens=config.designer.document_max_tokens
            )
        except DocumentError as exc:
            raise ConfigError(f"config key 'designer.documents': {exc}", key="designer.documents") from exc
        try:
            #: where validation and the Agent's environments run (run.executor; the ray section)
            self.executor = config.make_executor()
        except ImportError as exc:
            raise ConfigError(f"config key 'run.executor': {exc}", key="run.executor") from None
        except ConnectionError as exc:
            raise ConfigError(f"config key 'ray.address': {exc}", key="ray.address") from None
        spec = config.policy.spec
        given = policy is not None
        if not given:
            try:
                policy = load_config_policy(config, spec.removeprefix("vllm:"))
            except PolicyError as exc:
                raise ConfigError(f"config key 'policy.spec' = {spec!r}: {exc}", key="policy.spec") from exc
            except (TypeError, ValueError) as exc:
                if config.policy.lora is None:
                    raise
                raise ConfigError(f"config key 'policy.lora': {exc}", key="policy.lora") from exc
        self.policy = policy
        from spade_gym.policies.transformers import is_peft  # lazily: it imports torch

        if given and config.policy.lora is not None and not is_peft(getattr(policy, "model", None)):
            warnings.warn(
                "SelfPlay(policy=...) got a policy without LoRA adapters while config.policy.lora is set: the "
                "given policy is trained as it is (all its parameters); leave policy unset to load config.policy",
                stacklevel=2,
            )
        self._load_generators(given)
        if not hasattr(self.policy, "sequence_logprobs"):
            raise ConfigError(
                f"policy.spec = {config.policy.spec!r} gives a {type(self.policy).__name__}, which cannot be "
                "trained: self-play needs a transformers model (a hub id, a local path or 'default')",
                key="policy.spec",
            )
        #: the cold start applied before iteration 0 (:class:`~spade_gym.trainer.warmstart.WarmstartResult`)
        self.warmstart: Any = None
        if warm:
            self._warmstart()
        self.trainer = GRPOTrainer(self.policy, config.train, seed=config.run.seed)
        self.registry = open_registry(
            run.registry_dir, seed_library=True, exclude=config.run.held_out_envs, include_tags=config.run.seed_tags
        )
        self.designer_config = config.designer_config()
        self.memory = EnvironmentMemory(self.registry, self.designer_config.memory)
        self.rng = np.random.default_rng(config.run.seed)
        self.start = 0
        self.stalled = 0
        #: steps taken so far: Agent steps (a rollout and its update), Designer updates
        self.agent_steps = self.designer_steps = 0
        #: the held-out episodes (spade_gym.evaluation.heldout), fixed when the run starts
        self.heldout = (
            heldout_items(
                config.eval,
                [r for r in self.registry.records() if "seed" in r.tags],
                seed_records(config.eval.envs or graded(config.run.held_out_envs)),
                ladders_of([r.name for r in self.registry.records() if "seed" in r.tags]),
            )
            if config.eval.enabled
            else {}
        )

    def _load_generators(self, given: bool) -> None:
        """The policies that generate, besides the trained one: a separate generation backend, and a
        Designer of its own."""
        config, spec = self.config, self.config.policy.spec
        #: generates designs and Agent turns: the trained policy, or a colocated vLLM engine (``vllm:<id>``)
        self.generator: Any = self.policy
        if not given and spec.startswith("vllm:"):
            if self.executor.kind == "ray":  # the engine in a Ray actor with its own GPU(s)
                from spade_gym.policies.ray import RayPolicy

                self.generator = RayPolicy(spec, num_gpus=config.ray.generation_gpus)
            else:
                from spade_gym.policies import load_policy

                self.generator = load_policy(spec)
        #: writes the designs: the generator, or a frozen Designer model of its own (``designer.policy``)
        self.designer_policy: Any = self.generator
        if config.designer.policy:
            from spade_gym.policies import load_policy

            try:
                self.designer_policy = load_policy(config.designer.policy)
            except PolicyError as exc:
                raise ConfigError(
                    f"config key 'designer.policy' = {config.designer.policy!r}: {exc}", key="designer.policy"
                ) from exc

    def _warmstart(self) -> None:
        """Apply the cold-start adapters, sync them to the generator, record ``<run>/warmstart.json``."""
        import json

        result = run_warmstart(
            self.config,
            self.policy,
            say=self.say,
            progress=lambda phase, done, total: self.progress("warmstart" if phase == "train" else phase, done, total),
        )
        self.warmstart = result
        if self.generator is not self.policy:
            self.generator.load_weights(self.policy.state_dict_for_inference())
        replace_atomically(self.run.path / "warmstart.json", json.dumps(result.to_dict(), indent=1))

    # -- life cycle ------------------------------------------------------------------------------

    @classmethod
    def resume(
        cls,
        path: str | Path,
        *,
        policy: Any = None,
        say: Callable[[str], None] = print,
        progress: Callable[[str, int, int], None] | None = None,
    ) -> SelfPlay:
        """Reopen a run folder at its newest complete checkpoint (see :mod:`spade_gym.trainer.run`).

        Raises:
            RunDirError: ``path`` is not a run folder, or another process is running it.
            ConfigError: its ``config.yaml`` is invalid.
        """
        run = RunDir.open(path)
        run.lock()  # before prepare_resume touches the folder
        try:
            checkpoint = run.prepare_resume()
        except BaseException:
            run.close()
            raise
        # the checkpoint's weights already hold the cold start: it is not applied over them again
        loop = cls(run.config, run, policy=policy, say=say, progress=progress, apply_warmstart=checkpoint is None)
        if checkpoint is not None:
            loop._restore(checkpoint)
            say(f"resuming {run.path} after iteration {checkpoint.iteration}")
        return loop

    def train(self, iterations: int | None = None) -> list[IterationResult]:
        """Run iterations from ``start`` (all that are left, or ``iterations`` of them), checkpointing
        and logging each."""
        last = self.config.run.iterations
        end = last if iterations is None else min(self.start + iterations, last)
        results = []
        every = self.config.eval.every
        if self.heldout and self.start == 0 and self.start < end:
            self.evaluate("before")
        for i in range(self.start, end):
            started = time.perf_counter()
            result = self.iteration(i)
            if self.heldout and (i == last - 1 or (every and (i + 1) % every == 0)):
                held = self.evaluate("after" if i == last - 1 else f"iteration-{i}", curve=i != last - 1)
                result.metrics.update(held.metrics())
                result.metrics.update(gain_metrics(held, self.evaluate("before")))
                result.metrics["time/eval"] = held.seconds
            result.metrics["time/total"] = time.perf_counter() - started
            if (i + 1) % self.config.run.checkpoint_every == 0 or i == last - 1:
                began = time.perf_counter()
                self._checkpoint(i, result.metrics)
                result.metrics["time/checkpoint"] = time.perf_counter() - began
            self.run.log_metrics(i, result.metrics)
            if i % self.config.run.log_every == 0 or i == end - 1:
                self.say(summary_line(i, result.metrics))
            for line in result.messages:
                self.say(line)
            results.append(result)
            self.start = i + 1
        return results

    # -- one iteration ---------------------------------------------------------------------------

    def iteration(self, i: int) -> IterationResult:
        """One self-play iteration (phases 1-5 of the module docstring)."""
        cfg = self.config
        seed = cfg.run.seed * 1_000_003 + i
        before = len(self.registry)
        design = self.design(i, seed) if cfg.run.designer == "on" else DesignPhase()
        designer_update, designer_s = self._update(list(design.samples))
        steps = [
            self.agent_step((seed << 8) + u, design.regret_episodes if u == 0 else (), u)
            for u in range(cfg.agent.updates_per_iteration)
        ]
        replayed = tuple(t for s in steps for t in s.phase.replayed)
        flagged = tuple(dict.fromkeys(e for s in steps for e in s.phase.flagged))
        # a step is a rollout and its update (none of whose optimizer steps may be taken when every
        # group's returns are equal: train/optimizer_steps counts those)
        self.designer_steps += int(designer_update is not None)
        self.agent_steps += len(steps)

        outcomes = list(design.outcomes)
        accepted = tuple(o.record.env_id for o in outcomes if o.record is not None)
        metrics = {**self._design_metrics(outcomes, len(self.registry) - before), **_agent_metrics(outcomes, replayed)}
        metrics["agent/return_steps"] = [s.phase.mean_return for s in steps]
        metrics["tokens/designer"], metrics["tokens/agent"] = design.tokens, sum(s.phase.tokens for s in steps)
        update = merge_updates([u for u in (designer_update, *(s.update for s in steps)) if u is not None])
        if update is not None:
            metrics["tokens/train"] = update.tokens
            metrics.update({f"train/{k}": v for k, v in update.as_dict().items()})
            if update.skipped_nan:
                warnings.warn(
                    f"iteration {i}: {update.skipped_nan} update step(s) skipped (NaN or inf loss)", stacklevel=2
                )
        metrics["steps/designer"], metrics["steps/agent"] = int(designer_update is not None), len(steps)
        metrics["steps/designer_total"], metrics["steps/agent_total"] = self.designer_steps, self.agent_steps
        validate_s = design.validate_s + sum(o.validation_s for o in outcomes)
        regret_s = sum(o.regret_s for o in outcomes)
        metrics["time/design"] = max(design.seconds - validate_s - regret_s, 0.0)
        metrics["time/validate"], metrics["time/regret"] = validate_s, regret_s
        metrics["time/designer_update"] = designer_s
        metrics["time/rollout"] = sum(s.phase.seconds for s in steps)
        metrics["time/update"] = sum(s.update_s for s in steps)
        messages = []
        if flagged:
            messages.append(
                f"flagged {len(flagged)} registered environment(s) whose episodes paid a return outside "
                f"[0, 1] (never replayed again): {', '.join(flagged)}"
            )
        if cfg.run.designer == "on":
            self.stalled = 0 if accepted else self.stalled + 1
            metrics["designer/iterations_without_accept"] = self.stalled
            if self.stalled >= STALL_WARNING_AFTER:
                messages.append(
                    f"warning: no design accepted for {self.stalled} iterations in a row (the last refusals: "
                    f"{', '.join(sorted({o.report.category for o in outcomes}))}); " + training_state(update)
                )
        return IterationResult(i, metrics, design.outcomes, accepted, replayed, tuple(messages))

    def agent_step(self, seed: int, regret_episodes: tuple[Trajectory, ...], u: int) -> AgentStep:
        """One Agent step: :meth:`play`, one update on its samples, the sync, and the replay scores
        of the environments played refreshed with its returns (PLR's score update)."""
        phase = self.play(seed, regret_episodes)
        update, seconds = self._update(list(phase.samples), (u, self.config.agent.updates_per_iteration))
        refresh_scores(self.registry, phase.replayed)
        return AgentStep(phase, update, seconds)

    def _update(self, samples: list[TrainSample], step: tuple[int, int] = (0, 1)) -> tuple[UpdateStats | None, float]:
        """One GRPO update on ``samples`` (``None`` when there are none) and the sync of its weights
        to a separate generation backend; returns it and its wall seconds."""
        if not samples:
            return None, 0.0
        began = time.perf_counter()
        self.progress("update", step[0], step[1])
        update = self.trainer.update(samples)
        self.progress("update", step[0] + 1, step[1])
        # the transformers policy generates with the weights it trains; a vLLM engine loads them in place
        if update.optimizer_steps and self.generator is not self.policy:
            self.generator.load_weights(self.policy.state_dict_for_inference())
        return update, time.perf_counter() - began

    def design(self, i: int, seed: int) -> DesignPhase:
        """Phase 1, in order: draw each prompt's group (:func:`~spade_gym.designer.draw_group`: the
        prompt, and an Agent seed per design); generate every group's designs; validate a group's
        programs at once (:func:`~spade_gym.designer.validate_designs`); judge each design
        (:func:`~spade_gym.stages.evaluate_completion`: extract -> gate -> audit -> regret -> admit ->
        reward). Logs ``designs.jsonl``."""
        cfg, designer = self.config, self.designer_config
        began = time.perf_counter()
        group_size = cfg.designer.group_size
        designs = cfg.designer.prompts_per_iteration * group_size
        outcomes: list[DesignOutcome] = []
        samples: list[TrainSample] = []
        regret_episodes: list[Trajectory] = []
        tokens, validate_s = 0, 0.0
        groups = [
            draw_group(seed * 100 + p, group_size, documents=self.documents, memory=self.memory, config=designer)
            for p in range(cfg.designer.prompts_per_iteration)
        ]
        self.progress("design", 0, designs)  # generation is most of it
        generated = self._generate_designs([draws.prompt for draws in groups], seed * 100)
        for p, (draws, completions) in enumerate(zip(groups, generated, strict=True)):
            prompt = draws.prompt
            started = time.perf_counter()
            reports = validate_designs([c.text for c in completions], prompt, designer, self.executor)
            validate_s += time.perf_counter() - started
            group: list[DesignOutcome] = []
            for g, completion in enumerate(completions):
                tokens += len(completion.completion_token_ids or ())
                outcome = evaluate_completion(
                    completion.text,
                    prompt,
                    registry=self.registry,
                    agent=self.generator,
                    config=designer,
                    sampling_seed=draws.agent_seeds[g],
                    validated=reports.pop(completion.text, None),
                    executor=self.executor,
                )
                group.append(outcome)
                self.progress("design", p * group_size + g + 1, designs)
                if outcome.record is not None and outcome.estimate is not None and cfg.agent.train_on_regret_episodes:
                    regret_episodes.extend(outcome.estimate.nohint)
            if self.designer_policy is self.generator:  # a frozen Designer of its own is not trained
                rewards = [float(o.reward.reward) for o in group]
                samples += samples_from_completions(completions, rewards, group=f"designer:{i}:{p}")
            self.run.log_designs(i, [_design_line(p, prompt, o) for o in group])
            outcomes += group
        seconds = time.perf_counter() - began
        return DesignPhase(tuple(outcomes), tuple(samples), tuple(regret_episodes), tokens, seconds, validate_s)

    def evaluate(self, tag: str, *, curve: bool = False) -> HeldOut:
        """The held-out evaluation ``tag`` of the current policy (``<run>/eval/<tag>.json``; read
        back when it exists, so a resumed run does not play it again): every part, sampled and (with
        ``eval.greedy``) greedy; with ``curve`` only the unseen seeds, sampled (a point of the curve)."""
        path = save_path(self.run.path, tag)
        if path.is_file():
            return HeldOut.from_results(load_results(path))
        a = self.config.agent
        sampling = a.rollout(self.config.eval.seed).sampling
        items = {p: v for p, v in self.heldout.items() if p == "seeds"} if curve else self.heldout
        greedy = self.config.eval.greedy and not curve
        self.say(f"held-out evaluation '{tag}': {sum(map(len, items.values())) * (1 + greedy)} episodes")
        held = evaluate_heldout(
            self.generator,
            items,
            sampling,
            greedy=greedy,
            max_turns=None,  # the environment's own: a harder level may need more turns than training allows
            max_episodes=a.max_episodes,
            progress=lambda done, total: self.progress("eval", done, total),
        )
        seen = seen_levels(items.get("levels", []), self.registry.records())
        extra = {"tag": tag, "seconds": held.seconds, "agent_steps": self.agent_steps, "seen_levels": seen}
        save_results(held.results(), path, extra=extra)
        return held

    def _generate_designs(self, prompts: list[DesignerPrompt], seed: int) -> list[list[Completion]]:
        """``group_size`` completions per prompt: one ``generate`` call per sampling setting (write
        and edit budgets differ), seeded ``seed`` plus the index of its first prompt."""
        size = self.config.designer.group_size
        by_sampling: dict[SamplingParams, list[int]] = {}
        for p, prompt in enumerate(prompts):
            by_sampling.setdefault(self.designer_config.sampling_for(prompt.mode), []).append(p)
        out: list[list[Completion]] = [[] for _ in prompts]
        for sampling, members in by_sampling.items():
            call = replace(sampling, n=size, seed=seed + members[0])
            done = generate_designs(self.designer_policy, [prompts[p] for p in members], call)
            for j, p in enumerate(members):
                out[p] = done[j * size : (j + 1) * size]
        return out

    def play(self, seed: int, regret_episodes: tuple[Trajectory, ...] = ()) -> AgentPhase:
        """Phase 2. Replay environments, flag contract breakers, and turn regret and replayed
        episodes into the Agent's samples (replayed ones grouped by seed, or by env with several)."""
        cfg = self.config.agent
        began = time.perf_counter()
        replayed = self._replay(seed) if cfg.replay_envs else []
        seconds = time.perf_counter() - began
        flagged = flag_contract_breakers(self.registry, replayed)
        replay_group: Literal["seed", "env"] = "seed" if cfg.replay_seeds == 1 else "env"
        make = samples_by_turn if cfg.credit == "turn" else samples_from_trajectories
        samples = [*make(list(regret_episodes), group_by="env"), *make(replayed, group_by=replay_group)]
        tokens = sum(len(t.completion_token_ids or ()) for tr in (*regret_episodes, *replayed) for t in tr.turns)
        return AgentPhase(tuple(replayed), tuple(flagged), tuple(samples), tokens, seconds)

    def _replay(self, seed: int) -> list[Trajectory]:
        """``agent.replay_envs`` environments from the registry, ``agent.episodes_per_env`` episodes each."""
        cfg = self.config.agent
        envs: list[Any] = []
        if self.fixed_tasks:  # the baseline on reasoning-gym tasks, drawn uniformly
            for index in self.rng.integers(len(self.fixed_tasks), size=cfg.replay_envs):
                envs.append(self.executor.env(partial(ReasoningGymEnv, self.fixed_tasks[int(index)])))
        elif len(self.registry):
            records = self.registry.sample(
                cfg.replay_envs, strategy=cfg.replay_strategy, rng=self.rng, config=self.config.replay_config()
            )
            for record in records:
                with warnings.catch_warnings():  # the run's copy of a seed environment replaces the bundled id
                    warnings.simplefilter("ignore")
                    register_record(record)
                envs.append(self.executor.env(record.gym_id))
        episodes = []
        for env in envs:  # episodes_per_env episodes spread evenly over replay_seeds seeds
            seeds = [int(self.rng.integers(1 << 31)) for _ in range(cfg.replay_seeds)]
            episodes += [Episode(env, seeds[j % cfg.replay_seeds]) for j in range(cfg.episodes_per_env)]
        if not episodes:
            return []
        config = cfg.rollout(seed)
        trajectories, _ = rollout(
            episodes, self.generator, config, progress=lambda done, total: self.progress("rollout", done, total)
        )
        return trajectories

    def _design_metrics(self, outcomes: list[DesignOutcome], added: int) -> dict[str, Any]:
        if not outcomes:
            return {"registry/size": len(self.registry), "registry/added": added}
        rewards = [o.reward.reward for o in outcomes]
        accepted = [o for o in outcomes if o.accepted]
        rejections = Counter(_first_failed(o) for o in outcomes if not o.accepted)
        regrets = [o.estimate.regret for o in accepted if o.estimate is not None]
        valid = [o for o in outcomes if o.report.category in (Category.ACCEPT, Category.DUPLICATE) or o.accepted]
        duplicates = sum(o.report.category == Category.DUPLICATE for o in outcomes)
        return {
            "designer/reward_mean": statistics.fmean(rewards),
            "designer/reward_std": statistics.pstdev(rewards),
            "designer/designs": len(outcomes),
            "designer/accepted": len(accepted),
            "designer/acceptance_rate": len(accepted) / len(outcomes),
            "designer/valid_rate": len(valid) / len(outcomes),  # passed the gate (duplicates included)
            "designer/rejections": dict(rejections),
            "designer/outcomes": dict(Counter(o.reward.outcome for o in outcomes)),
            "regret/mean": statistics.fmean(regrets) if regrets else math.nan,
            "regret/max": max(regrets) if regrets else math.nan,
            "registry/size": len(self.registry),
            "registry/added": added,
            "novelty/mean": 1.0 - duplicates / len(valid) if valid else math.nan,
        }

    # -- checkpoints -----------------------------------------------------------------------------

    def _checkpoint(self, i: int, metrics: dict[str, Any]) -> None:
        self.run.save_checkpoint(
            i,
            policy_state=trainable_state(self.policy),
            optimizer_state=self.trainer.state_dict(),
            sampler_state={"documents": self.documents.state_dict()},
            rng_state=capture_rng_state({"run": self.rng}),
            extra={"stalled": self.stalled, "agent_steps": self.agent_steps, "designer_steps": self.designer_steps},
            metrics=metrics,
        )

    def _restore(self, checkpoint: Checkpoint) -> None:
        load_trainable_state(self.policy, checkpoint.load_policy_state())
        optimizer = checkpoint.load_optimizer_state()
        if optimizer is not None:
            self.trainer.load_state_dict(optimizer)
        documents = checkpoint.sampler_state["documents"]
        saved_seed = documents.get("config", {}).get("seed") if isinstance(documents, dict) else None
        if isinstance(saved_seed, int) and not isinstance(saved_seed, bool):
            self.documents.reseed(saved_seed)  # each Designer reset reseeds the stream: the seed is state too
        self.documents.load_state_dict(documents)
        restore_rng_state(checkpoint.rng_state, {"run": self.rng})
        self.stalled = int(checkpoint.extra.get("stalled", 0))
        self.agent_steps = int(checkpoint.extra.get("agent_steps", 0))
        self.designer_steps = int(checkpoint.extra.get("designer_steps", 0))
        self.start = checkpoint.iteration + 1

    def close(self) -> None:
        """Close the registry, the generation backend, the executor (Ray actors) and the run folder."""
        self.registry.close()
        if self.generator is not self.policy and hasattr(self.generator, "close"):
            self.generator.close()
        if self.designer_policy is not self.generator and hasattr(self.designer_policy, "close"):
            self.designer_policy.close()
        self.executor.close()
        self.run.close()


def load_run_policy(path: str | Path, which: str | int = "latest") -> Any:
    """The policy a run folder trained, at checkpoint ``which`` (``"latest"`` or an iteration): a
    ``TransformersPolicy`` named ``"<run folder name>@<iteration>"``.

    Raises:
        RunDirError: ``path`` is not a run folder or has no such complete checkpoint.
        PolicyError: the base model cannot be loaded.
    """
    run = RunDir.open(path)
    checkpoint = run.load_checkpoint(which)
    policy = load_config_policy(run.config, run.config.policy.spec.removeprefix("vllm:"))
    load_trainable_state(policy, checkpoint.load_policy_state())
    policy.name = f"{run.path.name}@{checkpoint.iteration}"
    return policy


def load_config_policy(config: SelfPlayConfig, spec: str) -> Any:
    """The trained policy: ``spec`` on the transformers backend with ``config.policy``'s settings."""
    from spade_gym.policies import load_policy

    p = config.policy
    kwargs: dict[str, Any] = {"max_batch_size": p.max_batch_size}
    if p.device is not None:
        kwargs["device"] = p.device
    if p.dtype != "auto":
        kwargs["dtype"] = p.dtype
    if p.lora is not None:
        kwargs["lora"] = dict(p.lora)
    return load_policy(spec, **kwargs)


def check_lora(lora: dict[str, Any]) -> None:
    """Refuse ``policy.lora`` keys that ``peft.LoraConfig`` does not have, before the model loads."""
    try:
        import peft
    except ImportError:
        raise ConfigError(
            f"config key 'policy.lora' needs the peft package: {install_hint('train')}", key="policy.lora"
        ) from None
    known = {f.name for f in dataclasses.fields(peft.LoraConfig)}
    unknown = sorted(set(lora) - known)
    if unknown:
        close = {k: difflib.get_close_matches(k, sorted(known), n=1) for k in unknown}
        hints = "; ".join(f"{k!r}" + (f" (did you mean {c[0]!r}?)" if c else "") for k, c in close.items())
        raise ConfigError(
            f"config key 'policy.lora' has keys peft.LoraConfig does not know: {hints}", key="policy.lora"
        )


def _first_failed(outcome: DesignOutcome) -> str:
    """The rejection reason for the metrics: ``no_code`` or the first failed check's name."""
    if outcome.report.category in (Category.NO_CODE, Category.TOO_LONG):
        return outcome.report.category.lower()
    failed = outcome.report.failures
    return failed[0].name if failed else outcome.report.category.lower()


def _agent_metrics(outcomes: list[DesignOutcome], replayed: Sequence[Trajectory]) -> dict[str, Any]:
    estimates = [o.estimate for o in outcomes if o.estimate is not None]
    out: dict[str, Any] = {
        "agent/return_hint": statistics.fmean(e.mean_hint for e in estimates) if estimates else None,
        "agent/return_nohint": statistics.fmean(e.mean_nohint for e in estimates) if estimates else None,
    }
    if replayed:
        out["agent/return_replay"] = statistics.fmean(t.episode_return for t in replayed)
        out["agent/success_rate"] = statistics.fmean(t.success for t in replayed)
    # share of Agent turns with a parsable action, over the regret episodes and the replayed ones
    played = [t for e in estimates for t in (*e.hint, *e.nohint)] + list(replayed)
    out["agent/format_compliance"] = format_compliance(played)
    return out
