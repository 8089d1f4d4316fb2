"""verifiers environment (verifiers 0.4, ``verifiers.v1``): spade episodes as a taskset, for evaluation and prime-rl.

Tasks are (environment id, seed) episodes; each assistant reply is an action and the observation
comes back as the next user message. Reward ``episode_return`` (0 when the program failed;
``trace.info["spade"]`` says why), metrics ``success`` and ``turns``. ``vf-eval`` and prime-rl
import the taskset as the top-level module ``spade_gym_verifiers``.
"""

import asyncio
import functools
import math
import sys
import types
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from spade_gym.integrations import require
from spade_gym.integrations._episode import SpadeEpisode, failed_start_text, first_observations, resolve_env_ids
from spade_gym.seeds import draw_seeds

__all__ = ["TASKSET_ID", "env_config", "load_environment", "verifiers_classes"]

#: The verifiers id of the spade taskset, env and harness: their module's name in ``sys.modules``.
TASKSET_ID = "spade_gym_verifiers"
_FEATURE = "spade_gym.integrations.verifiers"


@functools.cache
def verifiers_classes() -> dict[str, type]:
    """The verifiers classes of the spade taskset, by name; defined once, registered as :data:`TASKSET_ID`.

    Raises:
        MissingDependency: verifiers is not installed.
    """
    vf: Any = require("verifiers.v1", "verifiers", _FEATURE)
    pydantic: Any = require("pydantic", "verifiers", _FEATURE)
    runtimes: Any = require("verifiers.v1.runtimes", "verifiers", _FEATURE)
    dialects: Any = require("verifiers.v1.dialects.chat", "verifiers", _FEATURE)
    openai: Any = require("openai", "verifiers", _FEATURE)
    classes = {**_taskset_classes(vf, pydantic), **_env_classes(vf, runtimes, dialects, openai)}
    module = types.ModuleType(TASKSET_ID, f"The verifiers taskset of {_FEATURE} (generated).")
    for name, cls in classes.items():
        cls.__module__ = TASKSET_ID
        cls.__qualname__ = name
        setattr(module, name, cls)
    # verifiers finds the taskset, env and harness as the one subclass of each exported here
    module.__all__ = ["SpadeTaskset", "SpadeEnv", "SpadeChatHarness"]  # type: ignore[attr-defined]
    sys.modules.setdefault(TASKSET_ID, module)
    return classes


def _taskset_classes(vf: Any, pydantic: Any) -> dict[str, type]:
    """``SpadeTasksetConfig``, ``SpadeTaskData``, ``SpadeTask`` and ``SpadeTaskset`` on verifiers ``vf``."""

    class SpadeTasksetConfig(vf.TasksetConfig):
        """Which spade episodes the taskset holds (``--env.taskset.*``)."""

        env_ids: list[str] = []
        registry: str | None = None
        seeds: list[int] | None = None
        seed: int | None = pydantic.Field(None, ge=0)
        num_rows: int | None = pydantic.Field(None, ge=1)
        hint: bool = False
        max_turns: int | None = pydantic.Field(None, ge=1)

        @pydantic.field_validator("seeds")
        @classmethod
        def _seeds_are_natural(cls, seeds: list[int] | None) -> list[int] | None:
            if seeds is not None and any(s < 0 for s in seeds):
                raise ValueError(f"seeds must be ints >= 0, got {seeds}")
            return seeds

    class SpadeTaskData(vf.TaskData):
        """One spade episode: ``info = {"env_id", "seed", "hint"}``."""

        info: dict[str, Any] = {}

    class SpadeTask(vf.Task[SpadeTaskData, vf.State, vf.TaskConfig]):
        """A spade episode; scored by the episode the env's ``run`` recorded in ``trace.info["spade"]``."""

        @vf.reward
        async def episode_return(self, trace: Any) -> float:
            """The episode return in [0, 1] (0 when the program failed or the episode never ran)."""
            return float((trace.info.get("spade") or {}).get("return", 0.0))

        @vf.metric
        async def success(self, trace: Any) -> float:
            """1 when the episode succeeded (its return reached ``SUCCESS_RETURN``), else 0."""
            return float(bool((trace.info.get("spade") or {}).get("success", False)))

        @vf.metric
        async def turns(self, trace: Any) -> float:
            """Agent turns taken."""
            return float((trace.info.get("spade") or {}).get("turns", 0))

    class SpadeTaskset(vf.Taskset[SpadeTask, SpadeTasksetConfig]):
        """spade episodes as verifiers tasks (see ``SpadeTasksetConfig``)."""

        def load(self) -> Iterator[Any]:
            config = self.config
            ids = resolve_env_ids(config.env_ids or None, config.registry)
            rows = _rows(ids, config.seeds, config.seed, config.num_rows)
            by_env: dict[str, list[int]] = {}
            for env_id, seed in rows:
                by_env.setdefault(env_id, []).append(seed)
            starts = {}
            for env_id, seeds in by_env.items():
                for start in first_observations(env_id, seeds, hint=config.hint):
                    starts[env_id, start.seed] = start
            for env_id, seed in rows:
                start = starts[env_id, seed]
                prompt = start.observation
                if start.error is not None:  # played anyway: the episode fails the same way, return 0
                    prompt = failed_start_text(env_id, start.error)
                yield SpadeTask(
                    SpadeTaskData(
                        id=f"{env_id}#{seed}",
                        name=f"{env_id}#{seed}",
                        prompt=prompt,
                        system_prompt=start.system_prompt,
                        info={"env_id": env_id, "seed": seed, "hint": config.hint},
                    ),
                    config.task,
                )

    return {
        "SpadeTasksetConfig": SpadeTasksetConfig,
        "SpadeTaskData": SpadeTaskData,
        "SpadeTask": SpadeTask,
        "SpadeTaskset": SpadeTaskset,
    }


def _env_classes(vf: Any, runtimes: Any, dialects: Any, openai: Any) -> dict[str, type]:
    """``SpadeEnvConfig``, ``SpadeEnv``, ``SpadeChatHarnessConfig`` and ``SpadeChatHarness`` on verifiers ``vf``."""

    class SpadeChatHarnessConfig(vf.HarnessConfig):
        """No settings: the harness sends the conversation and returns the reply."""

    class SpadeChatHarness(vf.Harness[SpadeChatHarnessConfig]):
        """A tool-less in-process chat loop: one completion per segment through the interception endpoint."""

        APPENDS_SYSTEM_PROMPT = True
        SUPPORTS_RESUME = True
        EXECUTES_CODE = False
        NEEDS_CONTAINER = False

        async def launch(
            self,
            ctx: Any,
            trace: Any,
            runtime: Any,
            endpoint: str,
            secret: str,
            mcp_urls: dict[str, str],
            data: Any,
            **kwargs: Any,
        ) -> Any:
            system, prompt = self.resolve_prompt(data)
            messages: list[dict[str, Any]] = [{"role": "system", "content": system}] if system else []
            if isinstance(prompt, str):
                messages.append({"role": "user", "content": prompt})
            else:
                messages += [dialects.message_to_wire(m) for m in prompt or []]
            client = openai.AsyncOpenAI(base_url=endpoint, api_key=secret, max_retries=0)
            try:
                await client.chat.completions.create(model=ctx.model, messages=messages)
            finally:
                await client.close()
            return runtimes.ProgramResult(exit_code=0, stdout="", stderr="")

    class SpadeEnvConfig(vf.EnvConfig):
        """The spade env: one ``agent`` seat, in a local subprocess runtime (its harness runs no code)."""

        agent: vf.AgentConfig = vf.AgentConfig(runtime=vf.SubprocessConfig())

    class SpadeEnv(vf.Env[SpadeEnvConfig]):
        """Plays each task's spade episode with the agent seat, turn by turn."""

        async def run(self, task: Any, agents: Any) -> None:
            info = task.data.info
            max_turns = getattr(self.taskset.config, "max_turns", None)
            episode = SpadeEpisode(
                str(info["env_id"]), int(info["seed"]), hint=bool(info.get("hint")), max_turns=max_turns
            )
            try:
                first = await asyncio.to_thread(episode.start)
                async with agents.agent.interaction(task) as interaction:
                    stopped_by_agent = False
                    if episode.error is None:
                        segment = await interaction.turn()
                        while True:
                            if segment.terminated:  # a limit or the harness ended the exchange
                                stopped_by_agent = True
                                break
                            step = await asyncio.to_thread(episode.act, segment.last_reply)
                            if step.done:
                                break
                            segment = await interaction.turn(step.observation)
                    summary = episode.summary()
                    summary["stopped_by_agent"] = stopped_by_agent
                    summary["prompt_matches"] = episode.error is not None or first == task.data.prompt
                    interaction.trace.info["spade"] = summary
            finally:
                await asyncio.to_thread(episode.close)

    return {
        "SpadeEnvConfig": SpadeEnvConfig,
        "SpadeEnv": SpadeEnv,
        "SpadeChatHarnessConfig": SpadeChatHarnessConfig,
        "SpadeChatHarness": SpadeChatHarness,
    }


def _rows(
    ids: Sequence[str], seeds: Sequence[int] | None, seed: int | None, num_rows: int | None
) -> list[tuple[str, int]]:
    """(env_id, seed) pairs, seed-major, without repeats; ``num_rows`` cuts them."""
    if seeds is None:
        per_env = math.ceil(num_rows / len(ids)) if num_rows else 8
        seeds = draw_seeds(per_env, "verifiers") if seed is None else range(seed, seed + per_env)
    unique = list(dict.fromkeys(seeds))
    rows = [(env_id, s) for s in unique for env_id in ids]
    if num_rows is not None:
        if num_rows > len(rows):
            raise ValueError(
                f"num_rows={num_rows} but {len(ids)} environment(s) x {len(unique)} seed(s) make only {len(rows)} rows"
            )
        rows = rows[:num_rows]
    return rows


def env_config(
    env_ids: Sequence[str] | str | None = None,
    *,
    registry: str | None = None,
    num_rows: int | None = None,
    seeds: Sequence[int] | None = None,
    seed: int | None = None,
    hint: bool = False,
    max_turns: int | None = None,
    agent: Mapping[str, Any] | None = None,
) -> Any:
    """The verifiers ``EnvConfig`` (``SpadeEnvConfig``) of spade environments.

    Args:
        env_ids, registry: as :func:`~spade_gym.integrations._episode.resolve_env_ids` takes them.
        num_rows: number of tasks; ``None``: every (environment, seed) pair.
        seeds: reset seeds; ``None``: as many as ``num_rows`` needs (8 per env), from ``seed`` on, or
            with ``seed=None`` drawn by :func:`~spade_gym.seeds.draw_seeds`.
        hint, max_turns: as :class:`~spade_gym.integrations._episode.SpadeEpisode`.
        agent: overrides of the agent seat's ``vf.AgentConfig``.

    Raises:
        EnvNotFound / ValueError: an unknown or unplayable id, or bad numbers.
        MissingDependency: verifiers is not installed.
    """
    verifiers_classes()
    vf: Any = require("verifiers.v1", "verifiers", _FEATURE)
    ids = resolve_env_ids(env_ids, registry)
    _rows(ids, list(seeds) if seeds is not None else None, seed, num_rows)  # fail early on bad numbers
    taskset = {
        "id": TASKSET_ID,
        "env_ids": ids,
        "registry": None if registry is None else str(registry),
        "seeds": None if seeds is None else list(seeds),
        "seed": seed,
        "num_rows": num_rows,
        "hint": hint,
        "max_turns": max_turns,
    }
    data: dict[str, Any] = {"taskset": taskset}
    if agent:
        data["agent"] = dict(agent)
    return vf.resolve_env_config(data)


def load_environment(**kwargs: Any) -> Any:
    """The ``SpadeEnv`` for :func:`env_config`'s keywords, built through ``vf.load_environment``.

    Raises:
        TypeError: an unknown keyword.
        EnvNotFound / ValueError / MissingDependency: as :func:`env_config`.
    """
    known = {"env_ids", "registry", "num_rows", "seeds", "seed", "hint", "max_turns", "agent"}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise TypeError(f"load_environment got unknown keyword(s) {unknown}; it takes {sorted(known)}")
    config = env_config(**kwargs)
    return require("verifiers.v1", "verifiers", _FEATURE).load_environment(config)
