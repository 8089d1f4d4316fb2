"""The environment memory: which earlier environments the Environment Designer sees, and how.

The Designer writes each new environment grounded on a document and on a few environments from
the registry (docs/DESIGN.md, "The data flow"). :class:`EnvironmentMemory` picks them and
:func:`format_memory` turns them into compact prompt text::

    memory = EnvironmentMemory(registry, MemoryConfig(k=4))
    items = memory.select(rng=7, setting="reasoning", exclude=["ArithmeticChain-v0"])
    prompt_part = memory.format(items)
    parent = memory.pick_parent(items, rng=7)  # edit mode: the environment to make a variant of

Each pick has a *reason*, one of :data:`REASONS`:

``high_regret``
    the environments with the highest regret (ties broken at random) among those measured with a
    regret above 0 that are neither too easy nor too hard: examples of the difficulty the
    Designer is rewarded for.
``recent``
    the newest environments, measured or not: the last ones added to the registry's index (its
    order is creation order, as :meth:`Registry.records` lists it): what the Designer made lately,
    so that it does not repeat itself.
``too_easy``
    drawn at random among environments whose mean return *without* the hint is at least
    ``too_easy_at``: what the Agent already solves.
``too_hard``
    drawn at random among environments whose mean return *with* the hint is below
    ``too_hard_below``: what the Agent fails even when told how.
``random``
    backfill, drawn at random among the environments left (measured or not).

Environments nothing has been measured for are candidates only for ``recent`` and ``random``.
The rule that splits the ``k`` slots among the categories and backfills short ones is in
:class:`MemoryConfig`; the setting preference is in :meth:`EnvironmentMemory.select`.

Cost: selection reads only the setting and statistics columns of the registry's SQLite index (one
scan of a narrow table) and then the full record of each environment picked; it reads no
``meta.json``, no ``env.py`` (unless ``include_source``) and does not call
:meth:`Registry.records`, which decodes every validation report (about 1 s for 10,000
environments). A selection from 10,000 environments takes about 15 ms to 30 ms.
"""

from __future__ import annotations

import itertools
import math
import operator
import random
import re
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

from spade_gym.errors import EnvNotFound, SpadeError
from spade_gym.program import OUT_OF_REACH_BELOW, SETTINGS, TOO_EASY_AT
from spade_gym.registry.records import EnvRecord, EnvStats
from spade_gym.registry.store import Registry

__all__ = [
    "CATEGORIES",
    "REASONS",
    "Reason",
    "MemoryConfig",
    "MemoryItem",
    "EnvironmentMemory",
    "verdict",
    "format_memory",
    "pick_parent",
    "read_source",
    "VERDICT_UNMEASURED",
    "VERDICT_PARTLY_MEASURED",
    "VERDICT_TOO_EASY",
    "VERDICT_TOO_HARD",
    "VERDICT_GOOD",
    "VERDICT_LOW_REGRET",
]

#: Why an environment was picked: a category of :class:`MemoryConfig`, or ``"random"`` backfill.
Reason = Literal["high_regret", "recent", "too_easy", "too_hard", "random"]
#: The categories with a weight in :class:`MemoryConfig`, in the order their quotas are filled.
CATEGORIES: tuple[Reason, ...] = ("high_regret", "recent", "too_easy", "too_hard")
#: Every reason a :class:`MemoryItem` can carry.
REASONS: tuple[Reason, ...] = CATEGORIES + ("random",)
#: The categories that backfill a short one, round robin, before random picks do (``recent`` is not
#: one: every environment is a recent candidate, so it would leave nothing to chance).
_BACKFILL: tuple[Reason, ...] = ("high_regret", "too_easy", "too_hard")

VERDICT_UNMEASURED = "not measured yet"
VERDICT_PARTLY_MEASURED = "partly measured"
VERDICT_TOO_EASY = "too easy: solved without the hint"
VERDICT_TOO_HARD = "too hard: failed even with the hint"
VERDICT_GOOD = "good difficulty (high regret)"
VERDICT_LOW_REGRET = "low regret: the hint barely helps"

_GYM_PREFIX = "spade/"
_SOURCE_UNAVAILABLE = "(source unavailable: the registry entry is damaged)"


# ------------------------------------------------------------------------------------------------
# Configuration
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryConfig:
    """How many earlier environments the Designer sees, which ones, and how they are shown.

    **The mix.** ``high_regret``, ``recent``, ``too_easy`` and ``too_hard`` are relative weights
    (numbers >= 0; only their ratios matter): category ``c`` gets the quota
    ``n * weight[c] / sum(weights)`` of the ``n`` slots being filled (``n = k``, or a part of
    ``k`` under a setting preference), rounded by the largest-remainder rule: every category gets
    the integer part of its quota, and the slots left go one each to the categories with the
    largest fractional parts, ties broken at random by the ``rng`` given to
    :meth:`EnvironmentMemory.select`. The defaults (2, 1, 0.5, 0.5) give, for ``k = 4``, two
    high-regret environments, the newest one, and one too-easy *or* too-hard one (a coin flip);
    for ``k = 8``: 4, 2, 1, 1.

    **Backfill.** The quotas are filled in the order of :data:`CATEGORIES`, never picking an
    environment twice. When a category has fewer candidates than its quota, the slots left go
    round robin to ``high_regret`` (the next-highest regret), ``too_easy`` and ``too_hard`` (more
    random draws), skipping those of weight 0 and those with no candidate left, and then to
    random environments among all the rest (reason ``"random"``, measured or not). ``recent``
    never backfills, and a category of weight 0 is never used; with every weight 0 the memory is
    ``k`` random environments.

    Attributes:
        k: environments shown (int >= 0; 0 turns the memory off).
        high_regret: weight of the highest-regret environments.
        recent: weight of the newest environments.
        too_easy: weight of environments the Agent solves without the hint.
        too_hard: weight of environments the Agent fails even with the hint.
        too_easy_at: no-hint mean return (in [0, 1]) at or above which an environment is too easy.
        too_hard_below: hint mean return (in [0, 1]) below which an environment is too hard.
        low_regret_below: regret (in [0, 1]) below which a measured environment that is neither
            too easy nor too hard is shown as "low regret" instead of "good difficulty" (display
            only: it is still a ``high_regret`` candidate when its regret is above 0).
        setting: the setting (``"reasoning"``, ``"tool_use"``, ``"game"``) to prefer when
            :meth:`EnvironmentMemory.select` is given none; ``None``: no preference.
        same_setting_share: with a preferred setting, the share (in [0, 1]) of the ``k`` slots
            reserved for environments of that setting, ``floor(share * k + 0.5)`` of them; the
            other slots are for environments of other settings. Either side that has too few
            candidates is filled from the other. The default 1.0 shows other settings only when
            the preferred one has fewer than ``k`` environments.
        include_source: :meth:`EnvironmentMemory.format` shows each program's source, and
            :meth:`EnvironmentMemory.select` reads it and skips environments whose ``env.py``
            cannot be read.
        max_source_chars: characters of source shown per environment (int >= 10); longer
            sources are cut (at a line end when one is near) and end with a marker comment.
        max_description_chars: characters of description shown per environment (int >= 10),
            including the ``"..."`` that ends a cut one.
    """

    k: int = 4
    high_regret: float = 2.0
    recent: float = 1.0
    too_easy: float = 0.5
    too_hard: float = 0.5
    too_easy_at: float = TOO_EASY_AT
    too_hard_below: float = OUT_OF_REACH_BELOW
    low_regret_below: float = 0.1
    setting: str | None = None
    same_setting_share: float = 1.0
    include_source: bool = False
    max_source_chars: int = 6000
    max_description_chars: int = 500

    def validate(self) -> None:
        """Check every field.

        Raises:
            ValueError: naming the first field of the wrong type or range, e.g.
                ``"MemoryConfig.k = -1; expected an int >= 0"``.
        """
        _check_int("MemoryConfig.k", self.k, 0)
        for name in CATEGORIES:
            _check_number(f"MemoryConfig.{name}", getattr(self, name), 0.0, math.inf, "a finite number >= 0")
        for field_name in ("too_easy_at", "too_hard_below", "low_regret_below", "same_setting_share"):
            _check_number(f"MemoryConfig.{field_name}", getattr(self, field_name), 0.0, 1.0, "a number in [0, 1]")
        if self.setting is not None and self.setting not in SETTINGS:
            raise ValueError(f"MemoryConfig.setting = {self.setting!r}; expected None or one of {SETTINGS}")
        if not isinstance(self.include_source, bool):
            raise ValueError(f"MemoryConfig.include_source = {self.include_source!r}; expected a bool")
        _check_int("MemoryConfig.max_source_chars", self.max_source_chars, 10)
        _check_int("MemoryConfig.max_description_chars", self.max_description_chars, 10)

    def quotas(self, n: int | None = None, rng: random.Random | int | None = None) -> dict[Reason, int]:
        """How many of ``n`` slots each category gets before backfill (the rule in the class docstring).

        Args:
            n: slots to split (int >= 0; default ``k``).
            rng: breaks ties between equal fractional parts (a ``random.Random``, a seed, or
                ``None``: ties go to the category listed first in :data:`CATEGORIES`).

        Returns:
            ``{category: count}`` for every category of :data:`CATEGORIES`, summing to ``n``
            (to 0 when every weight is 0).

        Raises:
            ValueError: if ``n`` is not an int >= 0, or the config is invalid.
        """
        self.validate()
        n = self.k if n is None else n
        _check_int("n", n, 0)
        weights = {c: float(getattr(self, c)) for c in CATEGORIES}
        total = sum(weights.values())
        if total <= 0 or n == 0:
            return {c: 0 for c in CATEGORIES}
        exact = {c: n * w / total for c, w in weights.items()}
        counts = {c: math.floor(q + 1e-9) for c, q in exact.items()}
        left = n - sum(counts.values())
        if left > 0:
            generator = None if rng is None else _as_rng(rng)
            ties = {c: (generator.random() if generator is not None else -i) for i, c in enumerate(CATEGORIES)}
            # Fractional parts rounded so that float noise (0.4999999) does not break a tie.
            order = sorted(CATEGORIES, key=lambda c: (round(exact[c] - counts[c], 9), ties[c]), reverse=True)
            for c in order[:left]:
                counts[c] += 1
        return counts


def _check_int(what: str, value: object, low: int) -> None:
    if type(value) is not int or value < low:
        raise ValueError(f"{what} = {value!r}; expected an int >= {low}")


def _check_number(what: str, value: object, low: float, high: float, expected: str) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not low <= value <= high
    ):
        raise ValueError(f"{what} = {value!r}; expected {expected}")


def _as_rng(rng: random.Random | int | None) -> random.Random:
    if isinstance(rng, random.Random):
        return rng
    if rng is None:
        return random.Random()
    if isinstance(rng, int) and not isinstance(rng, bool):
        return random.Random(rng)
    raise TypeError(f"rng is a {type(rng).__name__}; expected a random.Random, an int seed or None")


# ------------------------------------------------------------------------------------------------
# Items and verdicts
# ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryItem:
    """One environment chosen for the Designer's prompt.

    Attributes:
        record: the registry record (statistics as of the selection).
        reason: why it was picked, one of :data:`REASONS`.
        verdict: what its statistics say, in plain words (see :func:`verdict`).
        source: the program source, read at selection time when the config's ``include_source``
            is set; ``None`` otherwise (:func:`format_memory` then reads it if it needs it).
    """

    record: EnvRecord
    reason: Reason
    verdict: str
    source: str | None = None

    @property
    def env_id(self) -> str:
        """The environment's id, e.g. ``"ArithmeticChain-v0"`` (what goes into a variant's ``parents``)."""
        return self.record.env_id


def _effective_regret(hint: float | None, nohint: float | None, regret: float | None) -> float | None:
    """The recorded regret, or ``max(hint - nohint, 0)`` when only the two means were recorded."""
    if regret is not None:
        return regret
    if hint is not None and nohint is not None:
        return max(hint - nohint, 0.0)
    return None


def verdict(stats: EnvStats, config: MemoryConfig | None = None) -> str:
    """What an environment's statistics say about its difficulty, in plain words.

    In order: :data:`VERDICT_UNMEASURED` when nothing is measured; :data:`VERDICT_TOO_EASY` when
    the no-hint mean return is at least ``config.too_easy_at``; :data:`VERDICT_TOO_HARD` when the
    hint mean return is below ``config.too_hard_below``; :data:`VERDICT_PARTLY_MEASURED` when no
    regret is known (it is taken as ``max(hint - nohint, 0)`` when only the two means are);
    :data:`VERDICT_GOOD` when the regret is at least ``config.low_regret_below``; else
    :data:`VERDICT_LOW_REGRET`.

    Args:
        stats: the environment's statistics.
        config: the thresholds (default ``MemoryConfig()``).
    """
    config = config or MemoryConfig()
    hint, nohint = stats.mean_return_hint, stats.mean_return_nohint
    regret = _effective_regret(hint, nohint, stats.regret)
    if hint is None and nohint is None and stats.regret is None:
        return VERDICT_UNMEASURED
    if nohint is not None and nohint >= config.too_easy_at:
        return VERDICT_TOO_EASY
    if hint is not None and hint < config.too_hard_below:
        return VERDICT_TOO_HARD
    if regret is None:
        return VERDICT_PARTLY_MEASURED
    return VERDICT_GOOD if regret >= config.low_regret_below else VERDICT_LOW_REGRET


# ------------------------------------------------------------------------------------------------
# Reading the registry cheaply
# ------------------------------------------------------------------------------------------------

#: One environment as selection sees it: ``(seq, setting, mean_return_hint, mean_return_nohint,
#: regret)``; ``seq`` is its place in the index, which is creation order (higher: newer).
_Row = tuple[int, str, float | None, float | None, float | None]


class _Table:
    """The statistics of every environment (one narrow index query, :meth:`Registry.stats_rows`)
    and the full records of the few picked."""

    def __init__(self, registry: Registry) -> None:
        self.registry = registry
        rows = registry.stats_rows()
        self.ids = {seq: env_id for seq, env_id, *_ in rows}
        self.rows: list[_Row] = [(seq, setting, hint, nohint, regret) for seq, _, setting, hint, nohint, regret in rows]

    def seqs_of(self, env_ids: Collection[str]) -> set[int]:
        """The ``seq`` of each of ``env_ids`` that is registered."""
        wanted = set(env_ids)
        return {seq for seq, env_id in self.ids.items() if env_id in wanted}

    def record(self, seq: int) -> EnvRecord | None:
        """The full record of ``seq``; ``None`` if it has gone from the registry since the scan."""
        try:
            return self.registry.get(self.ids[seq])
        except (KeyError, EnvNotFound):
            return None


def read_source(record: EnvRecord) -> str | None:
    """The program source, or ``None`` when ``env.py`` is missing, changed or unreadable."""
    try:
        return record.program().source
    except (SpadeError, OSError, UnicodeDecodeError):
        return None


# ------------------------------------------------------------------------------------------------
# Selection
# ------------------------------------------------------------------------------------------------


def _lazy_shuffle(items: Sequence[_Row], rng: random.Random) -> Iterator[_Row]:
    """``items`` in a uniformly random order, drawn one at a time (incremental Fisher-Yates)."""
    pool = list(items)
    for end in range(len(pool) - 1, -1, -1):
        j = rng.randint(0, end)
        pool[j], pool[end] = pool[end], pool[j]
        yield pool[end]


def _by_regret(ranked: list[tuple[float, _Row]], rng: random.Random) -> Iterator[_Row]:
    """Highest regret first; rows of equal regret in random order."""
    first = operator.itemgetter(0)
    ranked.sort(key=first, reverse=True)
    for _value, group in itertools.groupby(ranked, key=first):
        yield from _lazy_shuffle([row for _, row in group], rng)


class _Selection:
    """The picks of one :meth:`EnvironmentMemory.select` call, filled pool by pool."""

    def __init__(self, table: _Table, config: MemoryConfig, rng: random.Random) -> None:
        self.table = table
        self.config = config
        self.rng = rng
        self.items: list[MemoryItem] = []
        self.seen: set[int] = set()  # seqs picked, excluded, or found unusable

    def _use(self, row: _Row, reason: Reason) -> bool:
        """Add ``row``'s environment as a pick if it is new and usable; whether it was added."""
        seq = row[0]
        if seq in self.seen:
            return False
        self.seen.add(seq)
        record = self.table.record(seq)
        if record is None:
            return False
        source = None
        if self.config.include_source:
            source = read_source(record)
            if source is None:
                return False
        self.items.append(MemoryItem(record, reason, verdict(record.stats, self.config), source))
        return True

    def fill(self, pool: Sequence[_Row], n: int) -> None:
        """Pick up to ``n`` more environments from ``pool`` (in seq order) by the mix and backfill rules."""
        config, rng, seen = self.config, self.rng, self.seen
        rows = [row for row in pool if row[0] not in seen]
        if n <= 0 or not rows:
            return
        goal = len(self.items) + n
        quotas = config.quotas(n, rng)
        # One pass over the rows: the candidates of each statistics category.
        good: list[tuple[float, _Row]] = []
        easy: list[_Row] = []
        hard: list[_Row] = []
        easy_at, hard_below = config.too_easy_at, config.too_hard_below
        for row in rows:
            hint, nohint, regret = row[2], row[3], row[4]
            is_easy = nohint is not None and nohint >= easy_at
            is_hard = hint is not None and hint < hard_below
            if is_easy:
                easy.append(row)
            if is_hard:
                hard.append(row)
            if not (is_easy or is_hard):
                if regret is None and hint is not None and nohint is not None:
                    regret = max(hint - nohint, 0.0)
                if regret is not None and regret > 0:
                    good.append((regret, row))
        streams: dict[Reason, Iterator[_Row]] = {
            "high_regret": _by_regret(good, rng),
            "recent": reversed(rows),
            "too_easy": _lazy_shuffle(easy, rng),
            "too_hard": _lazy_shuffle(hard, rng),
            "random": _lazy_shuffle(rows, rng),
        }

        def take(reason: Reason, count: int) -> int:
            """Pick up to ``count`` of ``reason``'s candidates; how many were picked."""
            got = 0
            while got < count:
                row = next(streams[reason], None)
                if row is None:
                    break
                got += self._use(row, reason)
            return got

        for reason in CATEGORIES:
            if quotas[reason]:
                take(reason, quotas[reason])
        active = [r for r in _BACKFILL if getattr(config, r) > 0]
        while len(self.items) < goal and active:
            for reason in list(active):
                if len(self.items) >= goal:
                    break
                if not take(reason, 1):
                    active.remove(reason)
        if len(self.items) < goal:
            take("random", goal - len(self.items))


class EnvironmentMemory:
    """Picks earlier environments from a registry for the Designer's prompt, and formats them.

    Args:
        registry: the registry to read (read-only use: nothing is written or marked).
        config: the mix, thresholds and formatting (default ``MemoryConfig()``).

    Raises:
        ValueError: if ``config`` is invalid (naming the field).
        TypeError: if ``registry`` is not a :class:`Registry` or ``config`` not a :class:`MemoryConfig`.
    """

    def __init__(self, registry: Registry, config: MemoryConfig | None = None) -> None:
        if not isinstance(registry, Registry):
            raise TypeError(f"registry is a {type(registry).__name__}; expected a spade_gym Registry")
        config = config if config is not None else MemoryConfig()
        if not isinstance(config, MemoryConfig):
            raise TypeError(f"config is a {type(config).__name__}; expected a MemoryConfig")
        config.validate()
        self.registry = registry
        self.config = config

    def __repr__(self) -> str:
        return f"EnvironmentMemory({self.registry!r}, {self.config!r})"

    def select(
        self,
        rng: random.Random | int | None = None,
        *,
        setting: str | None = None,
        exclude: Collection[str] = (),
    ) -> list[MemoryItem]:
        """Pick at most ``k`` distinct environments for the Designer's prompt.

        The mix and backfill rules are in :class:`MemoryConfig`. With a preferred setting
        (``setting``, else ``config.setting``), the ``floor(same_setting_share * k + 0.5)`` slots
        for that setting are filled first (by those rules, from the environments of that setting),
        then the other slots from the environments of other settings (by the same rules), then any
        slot still open from whatever is left of the preferred setting.

        Args:
            rng: a ``random.Random`` (used and advanced), an int seed, or ``None`` (fresh OS
                entropy). The same seed on the same registry contents gives the same picks.
            setting: the setting to prefer, overriding ``config.setting``.
            exclude: env ids (``"Name-v0"``) or gymnasium ids (``"spade/Name-v0"``) never to pick,
                such as the environment being edited.

        Returns:
            The picks in the order they were made: quota picks by category in the order of
            :data:`CATEGORIES` (within ``high_regret``, highest regret first; within ``recent``,
            newest first), then backfill picks. Fewer than ``k`` only when fewer environments are
            available; ``[]`` for an empty registry or ``k = 0``. An environment whose record has
            gone from the registry since the index was read, or (with ``include_source``) whose
            ``env.py`` cannot be read, is skipped.

        Raises:
            ValueError: if ``setting`` is not ``None``, ``"reasoning"``, ``"tool_use"`` or ``"game"``.
            TypeError: if ``exclude`` is a single str or holds a non-str, or ``rng`` is of another type.
        """
        config = self.config
        if setting is not None and setting not in SETTINGS:
            raise ValueError(f"setting = {setting!r}; expected None or one of {SETTINGS}")
        if isinstance(exclude, str):
            raise TypeError(
                f"exclude = {exclude!r} is a single str; expected a collection of ids such as [{exclude!r}]"
            )
        excluded = set()
        for key in exclude:
            if not isinstance(key, str):
                raise TypeError(f"exclude holds {key!r} ({type(key).__name__}); expected only str ids")
            excluded.add(key[len(_GYM_PREFIX) :] if key.startswith(_GYM_PREFIX) else key)
        generator = _as_rng(rng)
        preferred = setting if setting is not None else config.setting
        if config.k == 0:
            return []
        table = _Table(self.registry)
        selection = _Selection(table, config, generator)
        selection.seen.update(table.seqs_of(excluded))
        pool = table.rows
        if preferred is None:
            selection.fill(pool, config.k)
        else:
            same = [row for row in pool if row[1] == preferred]
            other = [row for row in pool if row[1] != preferred]
            selection.fill(same, math.floor(config.same_setting_share * config.k + 0.5))
            selection.fill(other, config.k - len(selection.items))
            selection.fill(same, config.k - len(selection.items))
        return selection.items

    def format(self, items: Sequence[MemoryItem]) -> str:
        """:func:`format_memory` with this memory's ``include_source``, ``max_source_chars`` and
        ``max_description_chars``."""
        return format_memory(
            items,
            include_source=self.config.include_source,
            max_source_chars=self.config.max_source_chars,
            max_description_chars=self.config.max_description_chars,
        )

    def pick_parent(self, items: Sequence[MemoryItem], rng: random.Random | int | None = None) -> MemoryItem | None:
        """:func:`pick_parent` with this memory's thresholds."""
        return pick_parent(items, rng, config=self.config)


# ------------------------------------------------------------------------------------------------
# Formatting
# ------------------------------------------------------------------------------------------------


def _truncate(text: str, limit: int) -> str:
    """``text`` with runs of whitespace made single spaces, cut to ``limit`` characters ending in ``...``."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    return flat[: limit - 3].rstrip() + "..."


def _truncate_source(source: str, limit: int) -> str:
    """``source`` cut to at most ``limit`` characters (at a line end when one is in the last
    quarter), followed by a marker comment saying how much was left out."""
    source = source.rstrip("\n")
    if len(source) <= limit:
        return source
    cut = source.rfind("\n", 0, limit + 1)
    if cut < limit * 3 // 4:
        cut = limit
    return f"{source[:cut].rstrip()}\n# ... [truncated: {len(source) - cut} more characters not shown]"


def _fence(source: str) -> str:
    """A backtick fence longer than any run of backticks in ``source``."""
    longest = max((len(run) for run in re.findall(r"`+", source)), default=0)
    return "`" * max(3, longest + 1)


def _number(value: float | None) -> str:
    return "?" if value is None else f"{value:.2f}"


def _returns_line(item: MemoryItem) -> str:
    stats = item.record.stats
    hint, nohint = stats.mean_return_hint, stats.mean_return_nohint
    if hint is None and nohint is None and stats.regret is None:
        return f"returns: {VERDICT_UNMEASURED}"
    regret = _effective_regret(hint, nohint, stats.regret)
    episodes = f"{stats.episodes} episode{'' if stats.episodes == 1 else 's'}"
    return (
        f"returns: {_number(hint)} with hint / {_number(nohint)} without "
        f"(regret {_number(regret)}, {episodes}) -> {item.verdict}"
    )


def format_memory(
    items: Sequence[MemoryItem],
    *,
    include_source: bool = False,
    max_source_chars: int = MemoryConfig.max_source_chars,
    max_description_chars: int = MemoryConfig.max_description_chars,
) -> str:
    """Compact text describing ``items`` for the Designer's prompt, one block per environment.

    Each block reads::

        [1] ArithmeticChain-v0 (reasoning, max 4 turns): "A chain of integer operations ..."
            returns: 0.75 with hint / 0.25 without (regret 0.50, 8 episodes) -> good difficulty (high regret)

    Numbers have two decimals (``?`` for one not measured); an environment with no statistics
    reads ``returns: not measured yet``. The verdict is :attr:`MemoryItem.verdict`. The
    description has its whitespace collapsed and is cut to ``max_description_chars`` (ending in
    ``...``). With ``include_source`` the program follows in a ```` ```python ```` fence, cut to
    ``max_source_chars`` with a last line ``# ... [truncated: N more characters not shown]``; an
    item whose ``env.py`` cannot be read shows ``(source unavailable: the registry entry is
    damaged)`` instead (never an error). Blocks are separated by a blank line.

    Args:
        items: the environments, e.g. from :meth:`EnvironmentMemory.select`.
        include_source: show each program's source (:attr:`MemoryItem.source`, else read from
            the registry).
        max_source_chars: characters of source shown per environment (int >= 10).
        max_description_chars: characters of description shown per environment (int >= 10).

    Returns:
        The text, without a trailing newline; ``""`` for no items.

    Raises:
        ValueError: if a limit is not an int >= 10.
        TypeError: if an item is not a :class:`MemoryItem`.
    """
    _check_int("max_source_chars", max_source_chars, 10)
    _check_int("max_description_chars", max_description_chars, 10)
    blocks = []
    for number, item in enumerate(items, start=1):
        if not isinstance(item, MemoryItem):
            raise TypeError(f"items[{number - 1}] is a {type(item).__name__}; expected a MemoryItem")
        record = item.record
        turns = f"max {record.max_turns} turn{'' if record.max_turns == 1 else 's'}"
        lines = [
            f'[{number}] {record.env_id} ({record.setting}, {turns}): "{_truncate(record.description, max_description_chars)}"',
            f"    {_returns_line(item)}",
        ]
        if include_source:
            source = item.source if item.source is not None else read_source(record)
            if source is None:
                lines.append(f"    {_SOURCE_UNAVAILABLE}")
            else:
                shown = _truncate_source(source, max_source_chars)
                fence = _fence(shown)
                lines += [f"{fence}python", shown, fence]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)


# ------------------------------------------------------------------------------------------------
# Edit mode
# ------------------------------------------------------------------------------------------------


def pick_parent(
    items: Sequence[MemoryItem],
    rng: random.Random | int | None = None,
    *,
    config: MemoryConfig | None = None,
) -> MemoryItem | None:
    """The environment the Designer should make a variant of, in edit mode (ACCEL-style editing).

    Rule: among the items whose program can be read, those of good difficulty (a regret above 0,
    neither too easy nor too hard by ``config``'s thresholds) are preferred, one drawn with
    probability proportional to its regret; when there is none, one drawn uniformly among the
    readable rest (editing a too-easy or too-hard environment toward the edge is useful too).

    Args:
        items: the memory shown to the Designer.
        rng: a ``random.Random``, an int seed, or ``None`` (fresh OS entropy).
        config: the thresholds (default ``MemoryConfig()``).

    Returns:
        The item (its :attr:`MemoryItem.env_id` goes into the variant's ``parents``), or ``None``
        when ``items`` is empty or no item's program can be read.

    Raises:
        TypeError: if ``rng`` is of another type.
    """
    config = config or MemoryConfig()
    generator = _as_rng(rng)
    good: list[tuple[float, MemoryItem]] = []
    rest: list[MemoryItem] = []
    for item in items:
        stats = item.record.stats
        regret = _effective_regret(stats.mean_return_hint, stats.mean_return_nohint, stats.regret)
        easy = stats.mean_return_nohint is not None and stats.mean_return_nohint >= config.too_easy_at
        hard = stats.mean_return_hint is not None and stats.mean_return_hint < config.too_hard_below
        if regret is not None and regret > 0 and not easy and not hard:
            good.append((regret, item))
        else:
            rest.append(item)
    while good:
        i = generator.choices(range(len(good)), weights=[r for r, _ in good])[0]
        item = good.pop(i)[1]
        if item.source is not None or read_source(item.record) is not None:
            return item
    while rest:
        item = rest.pop(generator.randrange(len(rest)))
        if item.source is not None or read_source(item.record) is not None:
            return item
    return None
