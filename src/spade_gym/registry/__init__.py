"""The environment registry: accepted environments on disk, a SQLite index, dedup and replay sampling.

- :mod:`~spade_gym.registry.records`: :class:`EnvRecord` and :class:`EnvStats`, an entry's
  ``meta.json``.
- :mod:`~spade_gym.registry.store`: :class:`Registry` (the folder store, its atomic writes and
  locking, and keeping the index in step with the folders).
- :mod:`~spade_gym.registry.index`: the rebuildable ``index.sqlite``.
- :mod:`~spade_gym.registry.dedup`: exact (normalised AST) and near (MinHash/LSH) duplicate detection,
  and the near-duplicate cache kept in step with the index.
- :mod:`~spade_gym.registry.sampler`: uniform and rank-based Prioritized Level Replay sampling, and
  the population kept in step with the index's change log.
"""

from spade_gym.registry.index import FLAGGED_TAG
from spade_gym.registry.records import EnvRecord, EnvStats
from spade_gym.registry.sampler import ReplayConfig, replay_probabilities
from spade_gym.registry.store import Registry

__all__ = ["FLAGGED_TAG", "EnvRecord", "EnvStats", "Registry", "ReplayConfig", "replay_probabilities"]
