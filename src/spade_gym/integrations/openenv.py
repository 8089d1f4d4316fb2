"""Serve spade environments as OpenEnv environments (``spade serve``; openenv-core >= 0.3,
https://github.com/meta-pytorch/OpenEnv).

Each WebSocket session (``/ws``) gets its own :class:`~spade_gym.integrations._session.EpisodeSession`,
so an episode lasts across steps; OpenEnv's HTTP ``/step`` makes a fresh environment per request and
is answered with an error naming ``/ws``. A failing program ends its episode with return 0, never the session.
"""

from __future__ import annotations

import asyncio
import functools
import os
from collections.abc import Sequence
from typing import Any

from spade_gym.errors import require
from spade_gym.integrations._episode import SpadeEpisode, StepResult
from spade_gym.integrations._session import GENERATED_ID, EpisodeSession, episode_text

_FEATURE = "spade_gym.integrations.openenv"
require("openenv.core.env_server", "openenv", _FEATURE)

from openenv.core.client_types import StepResult as ClientStepResult  # noqa: E402
from openenv.core.env_client import EnvClient  # noqa: E402
from openenv.core.env_server import Action, ConcurrencyConfig, Environment, Observation, State  # noqa: E402
from openenv.core.env_server.types import EnvironmentMetadata  # noqa: E402
from pydantic import Field  # noqa: E402

__all__ = [
    "GENERATED_ID",
    "SpadeAction",
    "SpadeEnvClient",
    "SpadeObservation",
    "SpadeOpenEnv",
    "SpadeState",
    "create_app",
    "serve",
]

#: Longest action text accepted (characters); the sandbox caps what reaches the program far lower.
MAX_ACTION_TEXT = 1_000_000
#: OpenEnv's HTTP endpoints that make (and close) an environment per request; at most
#: :data:`HTTP_AT_ONCE` run at a time, so a flood of requests cannot start a worker process each.
HTTP_PER_REQUEST = frozenset({"/reset", "/step", "/state", "/metadata"})
HTTP_AT_ONCE = 2
_RESET_KEYS = {"env_id", "hint"}


class SpadeAction(Action):
    """One agent turn: the completion (its action extracted by the Agent's rules), or with ``raw`` the
    action itself (for tool use the ``{"name": ..., "arguments": {...}}`` JSON)."""

    text: str = Field(..., max_length=MAX_ACTION_TEXT, description="the completion, or the action with raw=true")
    raw: bool = Field(default=False, description="send text as the action itself, without extracting it")


class SpadeObservation(Observation):
    """What the agent sees after a reset or a step (``reward``: the step's, ``None`` after a reset).

    ``text``: the observation, or a note naming the program's failure. ``action``: what was sent
    (``None``: a malformed tool call). ``episode_return``: in [0, 1], 0 after a failure.
    """

    text: str = ""
    env_id: str = ""
    seed: int = 0
    setting: str = "reasoning"
    system_prompt: str = ""
    tools: list[dict[str, Any]] = Field(default_factory=list)
    turn: int = 0
    max_turns: int = 0
    action: str | None = None
    format_ok: bool = False
    episode_return: float = 0.0
    success: bool = False
    error: dict[str, Any] | None = None


class SpadeState(State):
    """The session's episode (for ``spade/Generated-v0`` the drawn id and seed) and the ids served."""

    env_id: str = ""
    seed: int = 0
    hint: bool = False
    episode_return: float = 0.0
    done: bool = False
    env_ids: list[str] = Field(default_factory=list)


def _observation(episode: SpadeEpisode, text: str, step: StepResult | None = None) -> SpadeObservation:
    return SpadeObservation(
        text=episode_text(episode, text),
        env_id=episode.env_id,
        seed=episode.seed,
        setting=episode.setting,
        system_prompt=episode.system_prompt,
        tools=episode.tools,
        turn=episode.turns,
        max_turns=episode.turn_limit,
        action=step.action if step else None,
        format_ok=step.format_ok if step else False,
        episode_return=episode.episode_return,
        success=episode.success,
        error=episode.error,
        done=episode.done,
        reward=step.reward if step else None,
    )


class SpadeOpenEnv(Environment[SpadeAction, SpadeObservation, SpadeState]):
    """The OpenEnv server environment of one session: episodes of ``env_ids`` (see :class:`EpisodeSession`)."""

    SUPPORTS_CONCURRENT_SESSIONS = True  # each session has its own workers

    def __init__(
        self,
        env_ids: Sequence[str] | str = (GENERATED_ID,),
        registry: str | os.PathLike[str] | None = None,
        max_turns: int | None = None,
    ) -> None:
        super().__init__()
        self.session = EpisodeSession(env_ids, registry=registry, max_turns=max_turns)
        self._state = SpadeState(env_ids=list(self.session.env_ids))

    def reset(self, seed: int | None = None, episode_id: str | None = None, **kwargs: Any) -> SpadeObservation:
        """Start an episode; keywords ``env_id`` and ``hint`` (others: ValueError, naming them)."""
        unknown = sorted(set(kwargs) - _RESET_KEYS)
        if unknown:
            raise ValueError(f"reset got unknown parameter(s) {unknown}; it takes seed, episode_id, env_id and hint")
        hint = kwargs.get("hint", False)
        if not isinstance(hint, bool):
            raise ValueError(f"hint must be true or false, got {hint!r}")
        episode = self.session.reset(seed, kwargs.get("env_id"), hint)
        self._state = SpadeState(
            episode_id=episode_id,
            env_id=episode.env_id,
            seed=episode.seed,
            hint=hint,
            done=episode.done,
            env_ids=list(self.session.env_ids),
        )
        return _observation(episode, episode.first_observation)

    def step(self, action: SpadeAction, timeout_s: float | None = None, **kwargs: Any) -> SpadeObservation:
        """One agent turn. RuntimeError before a reset (always over OpenEnv's HTTP ``/step``)."""
        if self.session.episode is None:
            raise RuntimeError(
                "no episode: reset starts one first; OpenEnv's HTTP /step makes a fresh environment per request, "
                "so play episodes over the WebSocket endpoint /ws (spade_gym.integrations.openenv.SpadeEnvClient)"
            )
        result = self.session.step(action.text, raw=action.raw)
        episode = self.session.episode
        self._state.step_count = episode.turns
        self._state.episode_return, self._state.done = episode.episode_return, episode.done
        return _observation(episode, result.observation, result)

    @property
    def state(self) -> SpadeState:
        """The current episode (see :class:`SpadeState`)."""
        return self._state

    def get_metadata(self) -> EnvironmentMetadata:
        """Name, description and version of what this server plays."""
        from spade_gym import __version__

        return EnvironmentMetadata(
            name="spade_gym",
            description=f"SPADE environment programs: {', '.join(self.session.env_ids)}",
            version=__version__,
        )

    def close(self) -> None:
        """Reap the session's workers."""
        self.session.close()


class SpadeEnvClient(EnvClient[SpadeAction, SpadeObservation, SpadeState]):
    """OpenEnv's WebSocket client for ``spade serve`` (async; ``.sync()`` for blocking calls)."""

    def _step_payload(self, action: SpadeAction) -> dict[str, Any]:
        return action.model_dump(exclude={"metadata"})

    def _parse_result(self, payload: dict[str, Any]) -> ClientStepResult[SpadeObservation]:
        reward, done = payload.get("reward"), bool(payload.get("done", False))
        observation = SpadeObservation(**payload.get("observation", {}), reward=reward, done=done)
        return ClientStepResult(observation=observation, reward=reward, done=done)

    def _parse_state(self, payload: dict[str, Any]) -> SpadeState:
        return SpadeState(**payload)


def create_app(
    env_ids: Sequence[str] | str = (GENERATED_ID,),
    *,
    registry: str | os.PathLike[str] | None = None,
    max_turns: int | None = None,
    max_sessions: int = 8,
    session_timeout_s: float | None = 600.0,
) -> Any:
    """OpenEnv's FastAPI app serving ``env_ids`` (see :class:`EpisodeSession`).

    Args:
        max_sessions: WebSocket sessions at once (each holds up to 4 worker processes).
        session_timeout_s: idle sessions are closed after this many seconds (``None``: never).

    Raises:
        EnvNotFound / ValueError / RegistryError: as :class:`EpisodeSession`, checked now.
    """
    from openenv.core.env_server import create_app as openenv_app

    SpadeOpenEnv(env_ids, registry, max_turns).close()  # fail now, not at the first session
    factory = functools.partial(SpadeOpenEnv, env_ids, registry, max_turns)
    config = ConcurrencyConfig(max_concurrent_envs=max_sessions, session_timeout=session_timeout_s)
    app = openenv_app(factory, SpadeAction, SpadeObservation, env_name="spade_gym", concurrency_config=config)
    at_once = asyncio.Semaphore(HTTP_AT_ONCE)

    @app.middleware("http")  # HTTP only: WebSocket sessions are counted by OpenEnv's max_concurrent_envs
    async def _bounded(request: Any, call_next: Any) -> Any:
        if request.url.path not in HTTP_PER_REQUEST:
            return await call_next(request)
        async with at_once:
            return await call_next(request)

    return app


def serve(app: Any, host: str = "127.0.0.1", port: int = 8000) -> None:
    """Run ``app`` with uvicorn until interrupted (``host="0.0.0.0"`` to accept other machines)."""
    uvicorn = require("uvicorn", "openenv", "spade serve")
    uvicorn.run(_QuietClose(app), host=host, port=port, log_level="warning", ws_max_size=16 * 2**20)


class _QuietClose:
    """ASGI wrapper that drops the ``WebSocketDisconnect`` OpenEnv 0.3 raises by closing a socket the
    client already closed (logged as a server error per finished session otherwise)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        from starlette.websockets import WebSocketDisconnect

        try:
            await self.app(scope, receive, send)
        except WebSocketDisconnect:
            if scope.get("type") != "websocket":
                raise
