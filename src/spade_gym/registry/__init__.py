"""The environment registry: accepted environments on disk, a SQLite index, dedup and replay sampling.

- :mod:`~spade_gym.registry.store`: :class:`Registry`, :class:`EnvRecord`, :class:`EnvStats` (the
  folder store, its atomic writes and its locking).
- :mod:`~spade_gym.registry.index`: the rebuildable ``index.sqlite``.
- :mod:`~spade_gym.registry.dedup`: exact (normalised AST) and near (MinHash/LSH) duplicate detection.
- :mod:`~spade_gym.registry.sampler`: uniform and rank-based Prioritized Level Replay sampling.
"""

from spade_gym.registry.index import FLAGGED_TAG
from spade_gym.registry.sampler import ReplayConfig, replay_probabilities
from spade_gym.registry.store import EnvRecord, EnvStats, Registry

__all__ = ["FLAGGED_TAG", "EnvRecord", "EnvStats", "Registry", "ReplayConfig", "replay_probabilities"]
