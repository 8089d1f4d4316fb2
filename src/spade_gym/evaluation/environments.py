"""Held-out suites played as episodes (:func:`episode_record` scores one): :class:`ReasoningGymSuite`
on the ``"eval"`` seed split of :class:`~spade_gym.reasoning_gym.ReasoningGymEnv`, and
:class:`ProgramSuite`, environment programs on seeds from :data:`HELD_OUT_SEED_BASE` up (self-play
seeds are below ``2**31``). Items of the seed environments held out of training
(:data:`~spade_gym.registry.gymnasium.HELD_OUT_SEED_ENVS`) carry ``metadata["held_out_task"] = True``.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import asdict
from functools import partial
from pathlib import Path
from typing import Any

from spade_gym.agent import Episode, RolloutConfig, Trajectory, rollout
from spade_gym.evaluation.base import DEFAULT_SAMPLING, ItemRecord, Suite, SuiteResult
from spade_gym.policies.base import SamplingParams
from spade_gym.reasoning_gym import ReasoningGymEnv, check_task
from spade_gym.registry import Registry
from spade_gym.registry.gymnasium import HELD_OUT_SEED_ENVS, bundled_registry_path

__all__ = ["HELD_OUT_SEED_BASE", "HELD_OUT_TASKS", "ProgramSuite", "ReasoningGymSuite", "episode_record"]

#: The documented held-out reasoning-gym selection (played on the ``"eval"`` seed split).
HELD_OUT_TASKS: tuple[str, ...] = (
    "basic_arithmetic",
    "chain_sum",
    "gcd",
    "fraction_simplification",
    "simple_equations",
    "letter_counting",
    "spell_backward",
    "number_sorting",
    "syllogism",
    "family_relationships",
    "calendar_arithmetic",
    "number_sequence",
)
#: First episode seed of held-out program episodes (training seeds are below ``2**31``).
HELD_OUT_SEED_BASE = 2**40


def episode_record(
    item_id: str, trajectory: Trajectory, metadata: dict[str, Any], reference: str | None = None
) -> ItemRecord:
    """One played episode as an :class:`ItemRecord`: score = its return clipped to [0, 1] (0 with an
    error or no text), the first user message as the prompt, the last turn's text as the response,
    ``metadata`` plus the turn count and the return."""
    prompt = next((m["content"] for m in trajectory.messages if m["role"] == "user"), "")
    response = trajectory.turns[-1].text if trajectory.turns else ""
    error = None
    if trajectory.error is not None:
        error = f"{trajectory.error.get('category', 'ERROR')}: {trajectory.error.get('message', '')}"
    elif not trajectory.turns or all(not t.text.strip() for t in trajectory.turns):
        error = "empty response"
    score = 0.0 if error else min(max(trajectory.episode_return, 0.0), 1.0)
    metadata = {**metadata, "turns": trajectory.num_turns, "return": trajectory.episode_return}
    return ItemRecord(item_id, score, prompt, response, reference, error, metadata)


class ReasoningGymSuite(Suite):
    """reasoning-gym ``tasks`` (default :data:`HELD_OUT_TASKS`), ``items_per_task`` problems each on
    ``"eval"`` seeds ``seed, seed + 1, ...``, ``max_episodes`` generated in one batch.

    Raises:
        ValueError: an unknown task, or ``items_per_task < 1``.
        ImportError: reasoning-gym is not installed (the message names the extra).
    """

    name = "reasoning-gym"

    def __init__(
        self,
        tasks: Sequence[str] | None = None,
        *,
        items_per_task: int = 4,
        seed: int = 0,
        sampling: SamplingParams = DEFAULT_SAMPLING,
        max_episodes: int = 64,
    ) -> None:
        if items_per_task < 1:
            raise ValueError(f"items_per_task must be >= 1, got {items_per_task}")
        self.tasks = [check_task(t) for t in (tasks or HELD_OUT_TASKS)]
        if len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"a task is named more than once in {self.tasks}")
        #: results on different task sets are never compared as one suite
        self.name = "reasoning-gym" if tasks is None else f"reasoning-gym:{','.join(self.tasks)}"
        self.items_per_task, self.seed, self.sampling, self.max_episodes = items_per_task, seed, sampling, max_episodes

    def config(self) -> dict[str, Any]:
        return {
            "tasks": self.tasks,
            "items_per_task": self.items_per_task,
            "seed": self.seed,
            "split": "eval",
            "sampling": asdict(self.sampling),
        }

    def run(self, policy: Any, *, progress: Callable[[int, int], None] | None = None) -> SuiteResult:
        """Play every (task, seed) once; returns one record per problem (``metadata["task"]``)."""
        began = time.perf_counter()
        keys = [(t, self.seed + i) for t in self.tasks for i in range(self.items_per_task)]
        envs = {t: partial(ReasoningGymEnv, t, split="eval") for t in self.tasks}
        episodes = [Episode(envs[t], s) for t, s in keys]
        config = RolloutConfig(sampling=self.sampling, max_episodes=self.max_episodes, max_turns=1)
        trajectories, _ = rollout(episodes, policy, config, progress=progress)
        items = []
        for (task, seed), trajectory in zip(keys, trajectories, strict=True):
            env = envs[task]()
            env.reset(seed=seed)
            items.append(episode_record(f"{task}/{seed}", trajectory, {"task": task, "seed": seed}, env.oracle()))
        return self._result(policy, items, began)


class ProgramSuite(Suite):
    """The environment programs of one setting, or named ones, played to the end on held-out seeds.

    Args:
        setting: ``"tool_use"`` (suite ``"tool-use"``), ``"game"`` (suite ``"games"``), or ``None``
            with ``envs`` (suite ``"envs:<name>,..."``, environments of any setting).
        registry: the registry folder (default: the bundled seed library).
        envs: only these environment names (default: all of the setting).
        episodes_per_env: episodes per environment (seeds ``HELD_OUT_SEED_BASE + seed + i``).
        max_turns: cap on agent turns per episode (``None``: the environment's own).
        max_episodes: episodes in flight at once.

    Raises:
        ValueError: an unknown setting, ``setting=None`` without ``envs``, ``episodes_per_env < 1``,
            or no environment to play.
        RegistryError: ``registry`` is not a registry.
    """

    def __init__(
        self,
        setting: str | None,
        *,
        registry: str | Path | None = None,
        envs: Sequence[str] | None = None,
        episodes_per_env: int = 2,
        seed: int = 0,
        sampling: SamplingParams = DEFAULT_SAMPLING,
        max_turns: int | None = None,
        max_episodes: int = 64,
    ) -> None:
        names = {"tool_use": "tool-use", "game": "games"}
        if setting is None:
            if not envs:
                raise ValueError("ProgramSuite(setting=None) plays named environments: pass envs=[...]")
        elif setting not in names:
            raise ValueError(f"setting must be 'tool_use', 'game' or None (with envs), got {setting!r}")
        if episodes_per_env < 1:
            raise ValueError(f"episodes_per_env must be >= 1, got {episodes_per_env}")
        self.setting = setting
        self.name = names[setting] if setting is not None else "envs:" + ",".join(sorted(set(envs or ())))
        self.registry_path = Path(registry) if registry is not None else bundled_registry_path()
        with Registry(self.registry_path) as reg:
            records = reg.records(setting)
        what = f"{setting} environment" if setting is not None else "environment"
        if envs is not None:
            unknown = sorted(set(envs) - {r.name for r in records})
            if unknown:
                raise ValueError(
                    f"no {what} named {', '.join(unknown)} in {self.registry_path} "
                    f"(it has {', '.join(sorted(r.name for r in records)) or 'none'})"
                )
            records = [r for r in records if r.name in set(envs)]
        if not records:
            raise ValueError(f"{self.registry_path} has no {what} to evaluate on")
        self.records = sorted(records, key=lambda r: r.name)
        #: environments no self-play run trains on by default (only meaningful for the seed library)
        self.held_out_tasks = set(HELD_OUT_SEED_ENVS) if registry is None else set()
        self.episodes_per_env, self.seed, self.sampling = episodes_per_env, seed, sampling
        self.max_turns, self.max_episodes = max_turns, max_episodes

    def config(self) -> dict[str, Any]:
        return {
            "setting": self.setting,
            "registry": str(self.registry_path),
            "envs": [r.name for r in self.records],
            "held_out_tasks": sorted(self.held_out_tasks & {r.name for r in self.records}),
            "episodes_per_env": self.episodes_per_env,
            "seeds_from": HELD_OUT_SEED_BASE + self.seed,
            "max_turns": self.max_turns,
            "sampling": asdict(self.sampling),
        }

    def run(self, policy: Any, *, progress: Callable[[int, int], None] | None = None) -> SuiteResult:
        """Play every (environment, seed) once; one record per episode (``metadata["env"]``)."""
        began = time.perf_counter()
        keys = [(r, HELD_OUT_SEED_BASE + self.seed + i) for r in self.records for i in range(self.episodes_per_env)]
        episodes = [Episode(record.source_path, seed) for record, seed in keys]
        config = RolloutConfig(sampling=self.sampling, max_episodes=self.max_episodes, max_turns=self.max_turns)
        trajectories, _ = rollout(episodes, policy, config, progress=progress)
        items = [
            episode_record(
                f"{record.name}/{seed}",
                trajectory,
                {"env": record.name, "seed": seed, "held_out_task": record.name in self.held_out_tasks},
            )
            for (record, seed), trajectory in zip(keys, trajectories, strict=True)
        ]
        return self._result(policy, items, began)
