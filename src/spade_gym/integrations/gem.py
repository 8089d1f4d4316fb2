"""GEM (gem-llm >= 0.1, https://github.com/axon-rl/gem): spade environments as ``gem.Env``s under
GEM ids ``spade:<Name>-v<k>``, for ``gem.make`` and ``gem.make_vec``.

As in GEM, the agent's text is the action and the Agent's rules extract it; the first observation
carries the Agent's system prompt, so a trainer that shows only observations shows the action format.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Any

from spade_gym.errors import require
from spade_gym.integrations._episode import SpadeEpisode
from spade_gym.integrations._session import GENERATED_ID, EpisodeSession, episode_text

_FEATURE = "spade_gym.integrations.gem"
gem: Any = require("gem", "gem", _FEATURE)

__all__ = ["GEM_PREFIX", "SpadeGemEnv", "gem_id", "register_gem"]

#: The GEM id family of spade environments: ``spade/Name-v0`` is ``spade:Name-v0``.
GEM_PREFIX = "spade:"


def gem_id(env_id: str) -> str:
    """The GEM id of a spade Gymnasium id (``spade/ArithmeticChain-v0`` -> ``spade:ArithmeticChain-v0``)."""
    return GEM_PREFIX + env_id.removeprefix("spade/")


class SpadeGemEnv(gem.Env):
    """One spade environment (or ``spade/Generated-v0``) as a ``gem.Env``.

    Args:
        spade_id: the Gymnasium id to play (GEM's ``register`` keeps ``env_id`` for the GEM id).
        registry, max_turns, seed: as :class:`~spade_gym.integrations._session.EpisodeSession`.
        hint: append the privileged hint to every first observation.

    ``step`` ends the episode with return 0 on a program failure (the observation names it); its
    ``info`` has ``parsed_action`` (absent for a malformed tool call, not sent), ``format_ok``,
    ``episode_return``, ``success`` and ``error``.
    """

    def __init__(
        self,
        spade_id: str,
        registry: str | os.PathLike[str] | None = None,
        hint: bool = False,
        max_turns: int | None = None,
        seed: int | None = None,
        **_: Any,
    ) -> None:
        super().__init__()
        self.hinted = hint
        self.session = EpisodeSession(spade_id, registry=registry, max_turns=max_turns, seed=seed)

    @property
    def episode(self) -> SpadeEpisode | None:
        """The current episode (``None`` before the first reset)."""
        return self.session.episode

    def reset(self, seed: int | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode at ``seed`` (``None``: drawn); ``(system prompt + first observation, info)``."""
        episode = self.session.reset(seed, hint=self.hinted)
        first = episode_text(episode, episode.first_observation)
        info = {
            "env_id": episode.env_id,
            "seed": episode.seed,
            "setting": episode.setting,
            "system_prompt": episode.system_prompt,
            "observation": first,
            "tools": episode.tools,
        }
        return f"{episode.system_prompt}\n\n{first}", info

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """One agent turn on the completion ``action`` (see the class docstring)."""
        result = self.session.step(str(action))
        episode = self.session.episode
        assert episode is not None
        info: dict[str, Any] = {} if result.action is None else {"parsed_action": result.action}
        info |= {
            "format_ok": result.format_ok,
            "episode_return": episode.episode_return,
            "success": episode.success,
            "error": episode.error,
        }
        text = episode_text(episode, result.observation)
        return text, result.reward, episode.terminated, episode.truncated, info

    def sample_random_action(self) -> str:
        """A well-formed action that is almost never right (GEM's random baseline)."""
        episode = self.session.episode
        if episode is not None and episode.setting == "tool_use" and episode.tools:
            name = episode.tools[0].get("function", episode.tools[0]).get("name", "noop")
            return f'<tool_call>{{"name": "{name}", "arguments": {{}}}}</tool_call>'
        return "<answer>0</answer>"

    def close(self) -> None:
        """Reap the workers."""
        self.session.close()


def register_gem(env_ids: Sequence[str] | None = None, *, registry: str | os.PathLike[str] | None = None) -> list[str]:
    """Register spade environments with GEM (again if already there); return their GEM ids.

    ``env_ids`` and ``registry`` are as :func:`~spade_gym.registry.gymnasium.resolve_env_ids` takes
    them; the default ids include ``spade/Generated-v0``.

    Raises:
        EnvNotFound / ValueError / RegistryError: as :func:`~spade_gym.registry.gymnasium.resolve_env_ids`.
    """
    from spade_gym.registry.gymnasium import resolve_env_ids

    ids = [i for i in (env_ids or []) if i != GENERATED_ID]
    playable = resolve_env_ids(ids or None, registry) if ids or not env_ids else []
    if not env_ids or GENERATED_ID in env_ids:
        playable.append(GENERATED_ID)
    registration = gem.envs.registration
    registered = []
    for env_id in playable:
        key = gem_id(env_id)
        registration.ENV_REGISTRY.pop(key, None)
        where = None if registry is None else str(registry)
        registration.register(key, f"{__name__}:SpadeGemEnv", spade_id=env_id, registry=where)
        registered.append(key)
    return registered
