"""Episodes of a fixed set of environments, one after another: what ``spade serve`` (OpenEnv) and GEM play.

Each reset starts a :class:`~spade_gym.integrations._episode.SpadeEpisode` (the Agent's rules); a few
environments per session stay loaded, their workers reused across resets.
"""

from __future__ import annotations

import contextlib
import os
import random
from collections import OrderedDict
from collections.abc import Sequence
from typing import Any

from spade_gym.agent import PlayableEnv, open_playable_env
from spade_gym.integrations._episode import SpadeEpisode, StepResult, failed_start_text
from spade_gym.registry.gymnasium import resolve_env_ids

__all__ = ["GENERATED_ID", "EpisodeSession", "episode_text"]

#: The id that draws a registry environment at every reset.
GENERATED_ID = "spade/Generated-v0"
_SEED_RANGE = 2**31  # program seeds drawn when none is given, as GeneratedEnv draws them
#: Characters of each turn's action a session keeps (the sandbox passes at most 64 Ki to the program).
KEPT_ACTION_CHARS = 1 << 16


def episode_text(episode: SpadeEpisode, observation: str) -> str:
    """``observation``, or a note naming the failure when the episode's program failed."""
    if episode.error is None:
        return observation
    if not episode.trajectory.turns and not episode.rewards:
        return failed_start_text(episode.env_id, episode.error)
    return f"(the environment {episode.env_id} failed: {episode.error.get('message', '')})"


class EpisodeSession:
    """Play episodes of ``env_ids`` one at a time (not thread-safe: one session per client).

    Args:
        env_ids: the Gymnasium ids to play (a str for one); ``"spade/Generated-v0"`` draws from ``registry``.
        registry: a registry folder whose environments are registered first (and the pool of
            ``spade/Generated-v0``); ``None``: ``$SPADE_REGISTRY``, else the seed library.
        max_turns: cap on agent turns per episode (``None``: each environment's own).
        seed: seeds the program seeds drawn when :meth:`reset` is given none.
        cache_size: environments kept loaded (one worker process each) between episodes.

    Raises:
        EnvNotFound: an unknown id (the message suggests the closest). ValueError: no ids, or an id
        that is not playable. RegistryError: ``registry`` cannot be opened.
    """

    def __init__(
        self,
        env_ids: Sequence[str] | str,
        *,
        registry: str | os.PathLike[str] | None = None,
        max_turns: int | None = None,
        seed: int | None = None,
        cache_size: int = 4,
    ) -> None:
        ids = [env_ids] if isinstance(env_ids, str) else list(env_ids)
        if not ids:
            raise ValueError(
                f"no environments to play: give Gymnasium ids, e.g. spade/ArithmeticChain-v0 or {GENERATED_ID}"
            )
        programs = [env_id for env_id in ids if env_id != GENERATED_ID]
        if programs or registry is not None:
            resolve_env_ids(programs or None, registry)
        self.env_ids: tuple[str, ...] = tuple(ids)
        self.registry, self.max_turns, self.cache_size = registry, max_turns, max(1, cache_size)
        self.episode: SpadeEpisode | None = None
        self._rng = random.Random(seed)
        self._envs: OrderedDict[str, PlayableEnv] = OrderedDict()
        self._generated: Any = None
        if GENERATED_ID in ids:
            from spade_gym.generated import GeneratedEnv

            self._generated = GeneratedEnv(registry=registry)

    def reset(self, seed: int | None = None, env_id: str | None = None, hint: bool = False) -> SpadeEpisode:
        """Start an episode of ``env_id`` (default: the first id) at ``seed`` (default: drawn).

        For ``spade/Generated-v0`` the seed seeds the draw (:meth:`~spade_gym.generated.GeneratedEnv.draw`)
        and the episode has the drawn id and program seed. A program that fails to start gives an
        episode already over (``error`` set, return 0).

        Raises:
            ValueError: ``env_id`` is not one of this session's, or ``seed`` is not an int in [0, 2**63).
        """
        env_id = self.env_ids[0] if env_id is None else env_id
        if env_id not in self.env_ids:
            raise ValueError(f"env_id {env_id!r:.100} is not played here; choose one of {list(self.env_ids)}")
        if seed is None:
            seed = self._rng.randrange(_SEED_RANGE)
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**63:
            raise ValueError(f"seed must be an int in [0, 2**63) or None, got {seed!r:.40}")
        self._end()
        if env_id == GENERATED_ID:
            record, seed = self._generated.draw(seed)
            from spade_gym.registry.gymnasium import register_record

            env_id = register_record(record)
        episode = self.episode = SpadeEpisode(env_id, seed, hint=hint, max_turns=self.max_turns)
        episode.start(self._loaded(env_id))
        return episode

    def step(self, text: str, *, raw: bool = False) -> StepResult:
        """One agent turn (see :meth:`SpadeEpisode.act`); the trajectory keeps no completion text and
        at most :data:`KEPT_ACTION_CHARS` of each action (a client may send megabytes).

        Raises:
            RuntimeError: no episode was started.
        """
        if self.episode is None:
            raise RuntimeError("reset() starts an episode before step()")
        result = self.episode.act(text, raw=raw)
        if self.episode.trajectory.turns:
            last = self.episode.trajectory.turns[-1]
            last.text, last.action = "", last.action if last.action is None else last.action[:KEPT_ACTION_CHARS]
        return result

    def close(self) -> None:
        """End the episode and reap every worker; safe to call more than once."""
        self._end()
        for env in self._envs.values():
            with contextlib.suppress(Exception):
                env.close()
        self._envs.clear()
        if self._generated is not None:
            self._generated.close()

    def _loaded(self, env_id: str) -> PlayableEnv | None:
        """The open environment of ``env_id`` (opened now if need be); ``None`` when it fails to open."""
        env = self._envs.pop(env_id, None)
        if env is None:
            try:
                env = open_playable_env(env_id)
            except Exception:  # the program fails its static check or to load: SpadeEpisode.start says so
                return None
        self._envs[env_id] = env
        while len(self._envs) > self.cache_size:
            _, evicted = self._envs.popitem(last=False)
            evicted.close()
        return env

    def _end(self) -> None:
        """Finish the current episode; a failed program's worker is not kept."""
        episode, self.episode = self.episode, None
        if episode is None:
            return
        episode.close()
        if episode.error is not None and episode.env_id in self._envs:
            self._envs.pop(episode.env_id).close()
