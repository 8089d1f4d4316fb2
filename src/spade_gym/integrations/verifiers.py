"""verifiers environment: spade environments as a verifiers taskset, for evaluation and prime-rl.

:func:`load_environment` returns a verifiers ``Env`` whose tasks are spade episodes: each task is an
(environment id, seed) row whose prompt is the environment's first observation under the Agent's
system prompt (:func:`~spade_gym.agent.system_prompt`). The env's ``run`` plays the episode as a
multi-turn exchange: every assistant reply goes through :func:`~spade_gym.agent.extract_action` to
``env.step``, and the observation comes back as the next user message, until the environment
terminates or truncates or the turn limit. The task's ``@vf.reward`` ``episode_return`` is the
episode return (0 when the program failed; ``trace.info["spade"]["error"]`` then says why); metrics
``success`` and ``turns`` ride along. A program that crashes, hangs or breaks the contract ends its
episode and nothing else.

The API followed is the installed verifiers 0.4.0, whose stack is ``verifiers.v1``: a taskset
package (``Taskset`` yielding ``Task``\\s of ``TaskData``) paired with an ``Env`` subclass whose
``run(task, agents)`` drives ``agents.agent.interaction(task)`` turn by turn (the pattern of its
TextArena taskset), scored by ``@vf.reward`` methods on the task. verifiers loads tasksets,
environments and harnesses by a top-level module id (``verifiers.v1.utils.loaders``); this module
registers one, :data:`TASKSET_ID` (module ``spade_gym_verifiers``), in ``sys.modules`` when
:func:`load_environment` or :func:`env_config` runs. Its agent seat uses :class:`SpadeChatHarness`
(defined with the other classes), a tool-less chat loop that runs in-process and makes each model
call through verifiers' interception endpoint (so traces, token ids and training see every call),
in a local subprocess runtime; pin ``agent={"harness": ...}`` to use another.

For the ``vf-eval`` CLI or prime-rl's environment workers, which import the taskset id in fresh
processes, spade-gym ships the top-level module ``spade_gym_verifiers`` exporting these classes;
then ``vf-eval spade_gym_verifiers --env.taskset.env-ids '["spade/ArithmeticChain-v0"]'
--env.taskset.num-rows 8 -m MODEL --client.base-url URL --client.api-key-var VAR --no-push``.
"""

import asyncio
import math
import sys
import types
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from spade_gym.integrations import require
from spade_gym.integrations._episode import SpadeEpisode, first_observations, resolve_env_ids

__all__ = [
    "TASKSET_ID",
    "env_config",
    "load_environment",
    "verifiers_classes",
]

#: The verifiers id of the spade taskset (and of its env and harness): the name of the module
#: registered in ``sys.modules`` (``spade_gym_verifiers``).
TASKSET_ID = "spade_gym_verifiers"
_FEATURE = "spade_gym.integrations.verifiers"
_CLASSES: dict[str, type] | None = None


def verifiers_classes() -> dict[str, type]:
    """The verifiers classes of the spade taskset, defined on first call and registered as the
    module :data:`TASKSET_ID`.

    Returns:
        ``{"SpadeTasksetConfig", "SpadeTaskData", "SpadeTask", "SpadeTaskset", "SpadeEnvConfig",
        "SpadeEnv", "SpadeChatHarnessConfig", "SpadeChatHarness"}``:

        * ``SpadeTasksetConfig`` (``vf.TasksetConfig``): ``env_ids`` (list of Gymnasium ids; empty:
          every environment of ``registry``), ``registry`` (a registry folder, or ``None`` for
          ``$SPADE_REGISTRY`` / the bundled seed library), ``seeds`` (reset seeds, or ``None``),
          ``seed`` (first seed when ``seeds`` is ``None``), ``num_rows`` (number of tasks, or
          ``None``: 8 seeds per environment), ``hint`` (show the privileged hint), ``max_turns``
          (cap on agent turns).
        * ``SpadeTaskData`` (``vf.TaskData``) with ``info = {"env_id", "seed", "hint"}``.
        * ``SpadeTask``: rewards ``episode_return`` (weight 1), metrics ``success`` and ``turns``.
        * ``SpadeTaskset``: tasks ordered seed-major (the first rows cover every environment), prompt
          the first observation, system prompt the Agent's.
        * ``SpadeEnvConfig``: one ``agent`` seat (local subprocess runtime by default).
        * ``SpadeEnv``: plays each task's episode (see the module docstring).
        * ``SpadeChatHarness``: the seat's default harness, a chat loop run in-process.

    Raises:
        MissingDependency: verifiers is not installed (``pip install 'spade-gym[verifiers]'``).
    """
    global _CLASSES
    if _CLASSES is not None:
        return _CLASSES
    vf: Any = require("verifiers.v1", "verifiers", _FEATURE)
    pydantic: Any = require("pydantic", "verifiers", _FEATURE)
    runtimes: Any = require("verifiers.v1.runtimes", "verifiers", _FEATURE)
    dialects: Any = require("verifiers.v1.dialects.chat", "verifiers", _FEATURE)
    openai: Any = require("openai", "verifiers", _FEATURE)

    class SpadeTasksetConfig(vf.TasksetConfig):
        """Which spade episodes the taskset holds (``--env.taskset.*``)."""

        env_ids: list[str] = []
        registry: str | None = None
        seeds: list[int] | None = None
        seed: int = pydantic.Field(0, ge=0)
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
                    prompt = f"(the environment {env_id} failed to start: {start.error.get('message', '')})"
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

    class SpadeChatHarnessConfig(vf.HarnessConfig):
        """No settings: the harness sends the conversation and returns the reply."""

    class SpadeChatHarness(vf.Harness[SpadeChatHarnessConfig]):
        """A tool-less chat loop run in-process: one chat completion per segment, through the
        rollout's interception endpoint (so the trace records every model call)."""

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

    classes: dict[str, type] = {
        "SpadeTasksetConfig": SpadeTasksetConfig,
        "SpadeTaskData": SpadeTaskData,
        "SpadeTask": SpadeTask,
        "SpadeTaskset": SpadeTaskset,
        "SpadeEnvConfig": SpadeEnvConfig,
        "SpadeEnv": SpadeEnv,
        "SpadeChatHarnessConfig": SpadeChatHarnessConfig,
        "SpadeChatHarness": SpadeChatHarness,
    }
    module = types.ModuleType(TASKSET_ID, f"The verifiers taskset of {_FEATURE} (generated).")
    for name, cls in classes.items():
        cls.__module__ = TASKSET_ID
        cls.__qualname__ = name
        setattr(module, name, cls)
    # verifiers finds the taskset, env and harness as the one subclass of each exported here
    module.__all__ = ["SpadeTaskset", "SpadeEnv", "SpadeChatHarness"]  # type: ignore[attr-defined]
    sys.modules.setdefault(TASKSET_ID, module)
    _CLASSES = classes
    return classes


def _rows(ids: Sequence[str], seeds: Sequence[int] | None, seed: int, num_rows: int | None) -> list[tuple[str, int]]:
    """(env_id, seed) pairs, seed-major, without repeats; ``num_rows`` cuts them."""
    if seeds is None:
        per_env = math.ceil(num_rows / len(ids)) if num_rows else 8
        seeds = range(seed, seed + per_env)
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
    seed: int = 0,
    hint: bool = False,
    max_turns: int | None = None,
    agent: Mapping[str, Any] | None = None,
) -> Any:
    """The verifiers ``EnvConfig`` of a spade environment (what :func:`load_environment` builds).

    Args:
        env_ids: Gymnasium ids (a str for one); ``None``: every environment of ``registry``.
        registry: a registry folder (``None``: ``$SPADE_REGISTRY``, else the bundled seed library).
        num_rows: number of tasks; ``None``: every (environment, seed) pair.
        seeds: reset seeds; ``None``: ``seed, seed + 1, ...`` as many as ``num_rows`` needs (8 per
            environment when ``num_rows`` is ``None`` too).
        seed: the first seed when ``seeds`` is ``None``.
        hint: show the privileged hint in the first observation.
        max_turns: cap on agent turns below each environment's own ``max_turns``.
        agent: overrides of the agent seat's ``vf.AgentConfig`` (e.g. ``{"max_turns": 8}`` or a
            ``harness``); its ``model``, client and sampling come from the run.

    Returns:
        A ``SpadeEnvConfig`` with ``taskset.id = TASKSET_ID``.

    Raises:
        EnvNotFound / ValueError: an unknown or unplayable id, or bad numbers (also
            ``pydantic.ValidationError``, a ``ValueError``, for bad field values).
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
    """A verifiers environment over spade environments.

    Args:
        **kwargs: those of :func:`env_config` (``env_ids``, ``registry``, ``num_rows``, ``seeds``,
            ``seed``, ``hint``, ``max_turns``, ``agent``).

    Returns:
        The ``SpadeEnv`` (a ``vf.Env``), built through ``vf.load_environment``; its ``taskset``
        iterates the tasks. Run episodes inside ``async with env.serving():`` with
        ``await env.run_episode(task, vf.ModelContext(model=..., client=vf.EvalClientConfig(...)))``,
        or hand the env to ``vf eval`` / prime-rl.

    Raises:
        TypeError: an unknown keyword.
        EnvNotFound / ValueError / MissingDependency: as :func:`env_config`.

    Example:
        >>> env = load_environment(env_ids=["spade/ArithmeticChain-v0"], num_rows=4)  # doctest: +SKIP
        >>> [t.data.name for t in env.taskset]  # doctest: +SKIP
    """
    known = {"env_ids", "registry", "num_rows", "seeds", "seed", "hint", "max_turns", "agent"}
    unknown = sorted(set(kwargs) - known)
    if unknown:
        raise TypeError(f"load_environment got unknown keyword(s) {unknown}; it takes {sorted(known)}")
    config = env_config(**kwargs)
    vf: Any = require("verifiers.v1", "verifiers", _FEATURE)
    return vf.load_environment(config)
