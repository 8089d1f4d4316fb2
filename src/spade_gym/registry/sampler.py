"""Replay sampling: which registered environment the Agent trains on next.

Two strategies:

- ``"uniform"``: every environment equally likely.
- ``"replay"``: rank-based Prioritized Level Replay (Jiang, Grefenstette & Rocktäschel,
  "Prioritized Level Replay", ICML 2021, Sec. 3, Eq. 1-2). With score ``S_i`` = the environment's
  regret (docs/DESIGN.md, "Regret and the Designer's reward"), global sample counter ``c`` and ``C_i`` the
  value of ``c`` when environment ``i`` was last sampled (0 if never)::

      P_S(i) = h(S_i)^(1/β) / Σ_j h(S_j)^(1/β),    h(S_i) = 1 / rank(S_i)   (rank 1 = highest score)
      P_C(i) = (c - C_i) / Σ_j (c - C_j)
      P(i)   = (1 - ρ) · P_S(i) + ρ · P_C(i)

Choices the paper leaves open, made here (and tested):

- Ties share the best rank among them ("competition" ranking: scores 0.9, 0.5, 0.5, 0.1 have ranks
  1, 2, 2, 4), so equal scores get equal probability whatever their order in the registry. (The
  authors' code, ``LevelSampler._score_transform`` in facebookresearch/level-replay, ranks by
  ``np.argsort`` position instead, so there tied levels get different probabilities.)
- An environment without a regret estimate ranks above every measured one (tied with the other
  unmeasured ones) by default, so that new environments get measured;
  ``ReplayConfig(unmeasured_first=False)`` ranks them below every measured one instead.
- When every ``C_i == c`` (``Σ_j (c - C_j) == 0``, e.g. before anything was sampled), all
  environments are equally stale and ``P_C`` is uniform.

:func:`replay_probabilities` is the pure function; :class:`ReplaySampler` draws from it over a large
population, updating ranks in O(N) when one score changes instead of sorting again.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from spade_gym.registry.index import Index, IndexState

__all__ = [
    "STRATEGIES",
    "Population",
    "check_strategy",
    "ReplayConfig",
    "ReplaySampler",
    "competition_ranks",
    "replay_probabilities",
    "score_probabilities",
    "staleness_probabilities",
]

#: The sampling strategies :meth:`ReplaySampler.draw` and ``Registry.sample`` accept.
STRATEGIES = ("uniform", "replay")


@dataclass(frozen=True)
class ReplayConfig:
    """Settings of rank-based Prioritized Level Replay (Jiang et al., ICML 2021, Sec. 3); ValueError
    unless ``beta`` is finite and > 0 and ``rho`` in [0, 1]."""

    beta: float = field(
        default=0.1,
        metadata={
            "help": "temperature β > 0 of the rank prioritisation: P_S(i) ∝ (1/rank_i)^(1/β); smaller β "
            "concentrates replay on the highest-regret environments (the paper's default 0.1)"
        },
    )
    rho: float = field(
        default=0.1,
        metadata={
            "help": "staleness coefficient ρ in [0, 1]: P = (1 - ρ) P_S + ρ P_C; 0 ignores staleness, 1 "
            "samples by staleness alone (the paper's default 0.1)"
        },
    )
    unmeasured_first: bool = field(
        default=True,
        metadata={
            "help": "rank environments without a regret estimate above every measured one (optimistic, "
            "so that new environments get measured); False ranks them below every measured one"
        },
    )

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first field out of range."""
        if not (isinstance(self.beta, (int, float)) and math.isfinite(self.beta) and self.beta > 0):
            raise ValueError(f"ReplayConfig.beta = {self.beta!r}; expected a finite number > 0 (default 0.1)")
        if not (isinstance(self.rho, (int, float)) and 0.0 <= self.rho <= 1.0):
            raise ValueError(f"ReplayConfig.rho = {self.rho!r}; expected a number in [0, 1] (default 0.1)")


def _as_scores(scores: Sequence[float | None] | np.ndarray) -> np.ndarray:
    """Scores as float64 with ``NaN`` for a missing one (``None`` or ``NaN`` in the input)."""
    if isinstance(scores, np.ndarray):
        return scores.astype(np.float64, copy=False)
    return np.array([math.nan if s is None else float(s) for s in scores], dtype=np.float64)


def _as_last(last_sampled: Sequence[int | None] | np.ndarray) -> np.ndarray:
    """``C_i`` values as a new int64 array, ``None`` (never sampled) as 0."""
    if isinstance(last_sampled, np.ndarray):
        return last_sampled.astype(np.int64, copy=True)
    return np.array([0 if v is None else v for v in last_sampled], dtype=np.int64)


def _effective(scores: np.ndarray, unmeasured_first: bool) -> np.ndarray:
    """Scores with a missing one replaced by +inf (ranked first) or -inf (ranked last)."""
    missing = np.isnan(scores)
    if not missing.any():
        return scores
    out = scores.copy()
    out[missing] = math.inf if unmeasured_first else -math.inf
    return out


def competition_ranks(scores: Sequence[float | None] | np.ndarray, unmeasured_first: bool = True) -> np.ndarray:
    """int64 ranks ``1 + #{j : S_j > S_i}`` of N scores (ties share the best rank), a missing score
    (``None``, ``NaN``) ranked above (``unmeasured_first``) or below every present one."""
    eff = _effective(_as_scores(scores), unmeasured_first)
    descending = np.sort(-eff)
    return np.searchsorted(descending, -eff, side="left").astype(np.int64) + 1


def _rank_weights(ranks: np.ndarray, beta: float) -> np.ndarray:
    """h(S_i)^(1/β) = rank_i^(-1/β) (rank 1 gives exactly 1.0; far ranks underflow to 0.0, never NaN)."""
    return np.power(ranks.astype(np.float64), -1.0 / beta)


def score_probabilities(scores: Sequence[float | None] | np.ndarray, config: ReplayConfig | None = None) -> np.ndarray:
    """``P_S``, Eq. 1 (h(S) = 1/rank(S), temperature β), of N scores (``None``/``NaN``: unmeasured):
    float64 probabilities summing to 1 (empty for N = 0)."""
    config = config or ReplayConfig()
    ranks = competition_ranks(scores, config.unmeasured_first)
    if ranks.size == 0:
        return np.zeros(0)
    weights = _rank_weights(ranks, config.beta)
    return weights / weights.sum()


def staleness_probabilities(last_sampled: Sequence[int | None] | np.ndarray, counter: int) -> np.ndarray:
    """``P_C``, Eq. 2: float64 ``(c - C_i) / Σ_j (c - C_j)`` (uniform when every ``C_i == c``).

    ``last_sampled`` holds the N ``C_i`` (0 or ``None``: never), ``counter`` is ``c``; ValueError
    if some ``C_i`` lies outside ``[0, c]``.
    """
    last = _as_last(last_sampled)
    n = last.size
    if n == 0:
        return np.zeros(0)
    if last.min() < 0 or last.max() > counter:
        raise ValueError(
            f"last_sampled values must lie in [0, counter={counter}]; got min {last.min()}, max {last.max()}"
        )
    staleness = (counter - last).astype(np.float64)
    total = staleness.sum()
    if total == 0:
        return np.full(n, 1.0 / n)
    return staleness / total


def replay_probabilities(
    scores: Sequence[float | None] | np.ndarray,
    last_sampled: Sequence[int | None] | np.ndarray,
    counter: int,
    config: ReplayConfig | None = None,
) -> np.ndarray:
    """The replay distribution ``P = (1 - ρ) P_S + ρ P_C`` of Prioritized Level Replay.

    Jiang, Grefenstette & Rocktäschel, "Prioritized Level Replay", ICML 2021, Sec. 3, Eq. 1-2, with
    the rank transform ``h(S_i) = 1/rank(S_i)``; see the module docstring for ties, unmeasured
    environments and the all-equally-stale case.

    Args:
        scores: N scores ``S_i`` (regrets); ``None`` or ``NaN`` for one not measured yet.
        last_sampled: N values ``C_i`` (0 or ``None``: never sampled); ``counter`` is ``c``.

    Returns:
        float64 array of N probabilities summing to 1 (empty for N = 0).

    Raises:
        ValueError: the lengths differ, or a ``C_i`` is outside ``[0, counter]``.

    Example:
        >>> replay_probabilities([0.5, 0.1], [0, 0], 0, ReplayConfig(beta=1.0, rho=0.0)).tolist()
        [0.6666666666666666, 0.3333333333333333]
    """
    config = config or ReplayConfig()
    p_s = score_probabilities(scores, config)
    p_c = staleness_probabilities(last_sampled, counter)
    if p_s.size != p_c.size:
        raise ValueError(f"{p_s.size} scores but {p_c.size} last_sampled values; expected one of each per environment")
    return (1.0 - config.rho) * p_s + config.rho * p_c


class ReplaySampler:
    """Draws from N environments, uniformly or by :func:`replay_probabilities` (same arguments and
    errors), keeping ranks and cumulative weights between draws: O(log N) per draw from ``P_S``."""

    def __init__(
        self,
        scores: Sequence[float | None] | np.ndarray,
        last_sampled: Sequence[int | None] | np.ndarray,
        counter: int,
        config: ReplayConfig | None = None,
    ) -> None:
        self.config = config or ReplayConfig()
        self.scores = _as_scores(scores).copy()
        self.last_sampled = _as_last(last_sampled)
        if self.scores.size != self.last_sampled.size:
            raise ValueError(f"{self.scores.size} scores but {self.last_sampled.size} last_sampled values")
        if self.last_sampled.size and (self.last_sampled.min() < 0 or self.last_sampled.max() > counter):
            raise ValueError(f"last_sampled values must lie in [0, counter={counter}]")
        self.counter = int(counter)
        self._last_sum = int(self.last_sampled.sum())
        self._eff = _effective(self.scores, self.config.unmeasured_first).copy()
        self._ranks: np.ndarray | None = None  # float64: exact for integers, and what the weights need
        self._weights: np.ndarray | None = None
        self._cumulative: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.scores.size)

    def set_config(self, config: ReplayConfig) -> None:
        """Use other replay settings from now on (the ranks are recomputed on the next draw)."""
        if config != self.config:
            if config.unmeasured_first != self.config.unmeasured_first:
                self._eff = _effective(self.scores, config.unmeasured_first).copy()
            self.config = config
            self._ranks = self._weights = self._cumulative = None

    def _ensure_ranks(self) -> tuple[np.ndarray, np.ndarray]:
        if self._ranks is None or self._weights is None:
            self._ranks = competition_ranks(self._eff).astype(np.float64)
            self._weights = _rank_weights(self._ranks, self.config.beta)
            self._cumulative = None
        return self._ranks, self._weights

    def set_score(self, i: int, score: float | None) -> None:
        """Set environment ``i``'s score (``None``: not measured); the ranks between old and new move by one."""
        new = math.nan if score is None else float(score)
        self.scores[i] = new
        a = float(self._eff[i])
        b = (math.inf if self.config.unmeasured_first else -math.inf) if math.isnan(new) else new
        if a == b:
            return
        eff = self._eff
        eff[i] = b
        if self._ranks is None or self._weights is None:
            return
        # rank_j = 1 + #{k : S_k > S_j}: i counted for j before iff a > S_j, after iff b > S_j.
        moved = (eff >= min(a, b)) & (eff < max(a, b))
        moved[i] = False
        # Whole-array operations: numpy's masked (``where=``) forms are several times slower here.
        if b > a:
            self._ranks += moved
        else:
            self._ranks -= moved
        self._ranks[i] = 1 + np.count_nonzero(eff > b)
        np.power(self._ranks, -1.0 / self.config.beta, out=self._weights)
        self._cumulative = None

    def set_last_sampled(self, i: int, value: int | None) -> None:
        """Set ``C_i`` (``None``: never); raises the counter to it if needed."""
        value = 0 if value is None else int(value)
        self._last_sum += value - int(self.last_sampled[i])
        self.last_sampled[i] = value
        self.counter = max(self.counter, value)

    def append(self, score: float | None, last_sampled: int | None) -> None:
        """Add one environment at the end of the population (O(N))."""
        new = math.nan if score is None else float(score)
        b = (math.inf if self.config.unmeasured_first else -math.inf) if math.isnan(new) else new
        self.scores = np.append(self.scores, new)
        self._eff = np.append(self._eff, b)
        self.last_sampled = np.append(self.last_sampled, 0)
        self.set_last_sampled(len(self) - 1, last_sampled)
        if self._ranks is not None and self._weights is not None:
            below = self._eff[:-1] < b  # these move down one place
            ranks = np.append(self._ranks + below, 1 + np.count_nonzero(self._eff[:-1] > b))
            self._ranks, self._weights, self._cumulative = ranks, _rank_weights(ranks, self.config.beta), None

    def ranks(self) -> np.ndarray:
        """The current competition ranks (int64, a copy)."""
        return self._ensure_ranks()[0].astype(np.int64)

    def probabilities(self, strategy: str = "replay") -> np.ndarray:
        """The distribution the next draw follows (equal to :func:`replay_probabilities` for
        ``"replay"``)."""
        n = len(self)
        if strategy == "uniform":
            return np.full(n, 1.0 / n) if n else np.zeros(0)
        check_strategy(strategy)
        if n == 0:
            return np.zeros(0)
        _ranks, weights = self._ensure_ranks()
        p_s = weights / weights.sum()
        p_c = staleness_probabilities(self.last_sampled, self.counter)
        return (1.0 - self.config.rho) * p_s + self.config.rho * p_c

    def _draw_replay(self, rng: np.random.Generator) -> int:
        n = len(self)
        if self.config.rho > 0 and rng.random() < self.config.rho:
            total = n * self.counter - self._last_sum
            if total <= 0:
                return int(rng.integers(n))
            cumulative = np.cumsum(self.counter - self.last_sampled)
            return _search(cumulative, rng.random() * float(cumulative[-1]))
        _ranks, weights = self._ensure_ranks()
        if self._cumulative is None:
            self._cumulative = np.cumsum(weights)
        return _search(self._cumulative, rng.random() * float(self._cumulative[-1]))

    def _check_draw(self, strategy: str) -> None:
        check_strategy(strategy)
        if len(self) == 0:
            raise ValueError("cannot draw from an empty population")

    def draw(self, rng: np.random.Generator, strategy: str = "replay", mark: bool = True) -> int:
        """Draw one index in ``[0, N)`` (``mark``: the counter goes up by one and becomes its ``C_i``);
        ValueError if the population is empty or ``strategy`` is unknown."""
        self._check_draw(strategy)
        i = int(rng.integers(len(self))) if strategy == "uniform" else self._draw_replay(rng)
        if mark:
            self.counter += 1
            self.set_last_sampled(i, self.counter)
        return i

    def draw_many(self, rng: np.random.Generator, n: int, strategy: str = "replay") -> np.ndarray:
        """Draw ``n`` independent indices, marking nothing; ValueError as :meth:`draw`."""
        self._check_draw(strategy)
        size = len(self)
        if strategy == "uniform":
            return rng.integers(size, size=n)
        cumulative = np.cumsum(self.probabilities(strategy))
        picks = np.searchsorted(cumulative, rng.random(n) * cumulative[-1], side="right")
        return np.minimum(picks, size - 1)


@dataclass
class Population:
    """A :class:`ReplaySampler` over the unflagged environments of one setting (``None``: all) as of
    index ``epoch`` and change ``gen``: sampler row ``i`` is the environment with index sequence
    number ``seqs[i]`` (int64, ascending)."""

    seqs: np.ndarray
    sampler: ReplaySampler
    epoch: int
    gen: int

    @classmethod
    def current(
        cls, cached: Population | None, index: Index, setting: str | None, state: IndexState, config: ReplayConfig
    ) -> Population:
        """``cached`` brought up to the index's ``state`` by replaying its change log (O(changes)), or a
        new population read from the index when there is none, the epoch moved, the log was pruned or
        is longer than an eighth of the population, or an environment was added out of ``seq`` order."""
        pop = cached
        if pop is not None and pop.epoch == state.epoch and pop.gen != state.gen:
            changes = index.changes_since(pop.gen, limit=max(1000, len(pop.sampler) // 8))
            if changes is None:
                pop = None
            else:
                for change in changes:
                    if change.kind == "add":
                        if setting is not None and change.setting != setting:
                            continue
                        if pop.seqs.size and change.seq <= pop.seqs[-1]:
                            pop = None
                            break
                        pop.seqs = np.append(pop.seqs, change.seq)
                        pop.sampler.append(change.regret, change.last_sampled)
                        continue
                    i = int(np.searchsorted(pop.seqs, change.seq))
                    if i < pop.seqs.size and pop.seqs[i] == change.seq:
                        if change.kind == "stats":
                            pop.sampler.set_score(i, change.regret)
                        pop.sampler.set_last_sampled(i, change.last_sampled)
        if pop is None or pop.epoch != state.epoch:
            seqs, regrets, last = index.population(setting)
            pop = cls(seqs, ReplaySampler(regrets, last, state.counter, config), state.epoch, state.gen)
        pop.gen = state.gen
        pop.sampler.counter = state.counter
        pop.sampler.set_config(config)
        return pop


def _search(cumulative: np.ndarray, x: float) -> int:
    """The index i with cumulative[i-1] <= x < cumulative[i] (zero-weight entries never chosen)."""
    return min(int(np.searchsorted(cumulative, x, side="right")), cumulative.size - 1)


def check_strategy(strategy: str) -> None:
    """Raise ValueError unless ``strategy`` is one of :data:`STRATEGIES`."""
    if strategy not in STRATEGIES:
        raise ValueError(f"sampling strategy {strategy!r}; expected one of {STRATEGIES}")
