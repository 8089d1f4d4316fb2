"""The environment memory: which earlier environments the Environment Designer sees, and how.

:class:`EnvironmentMemory` picks a few registry environments (docs/DESIGN.md, "The data flow"), each
for a reason (:data:`REASONS`, rules in :class:`MemoryConfig`), and :func:`format_memory` turns them
into prompt text::

    memory = EnvironmentMemory(registry, MemoryConfig(k=4))
    items = memory.select(rng=7, setting="reasoning", exclude=["ArithmeticChain-v0"])
    prompt_part = memory.format(items)
    parent = memory.pick_parent(items, rng=7)  # edit mode: the environment to make a variant of
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
from spade_gym.registry.records import GYM_PREFIX, EnvRecord, EnvStats, check_strings
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
#: The categories that backfill a short one, round robin, before random picks do.
_BACKFILL: tuple[Reason, ...] = ("high_regret", "too_easy", "too_hard")

VERDICT_UNMEASURED = "not measured yet"
VERDICT_PARTLY_MEASURED = "partly measured"
VERDICT_TOO_EASY = "too easy: solved without the hint"
VERDICT_TOO_HARD = "too hard: failed even with the hint"
VERDICT_GOOD = "good difficulty (high regret)"
VERDICT_LOW_REGRET = "low regret: the hint barely helps"

_SOURCE_UNAVAILABLE = "(source unavailable: the registry entry is damaged)"


# -- Configuration -------------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryConfig:
    """How many earlier environments the Designer sees (``k``, 0: off), which ones, and how shown.

    **The mix.** ``high_regret``, ``recent``, ``too_easy`` and ``too_hard`` are relative weights
    (>= 0): category ``c`` gets ``n * weight[c] / sum(weights)`` of the ``n`` slots, rounded by the
    largest-remainder rule (ties at random). The defaults give, for ``k = 4``, two high-regret, the
    newest, and one too-easy *or* too-hard environment.

    **Picks.** ``high_regret``: highest regret above 0 among environments neither too easy nor too
    hard (ties at random); ``recent``: newest, measured or not; ``too_easy`` / ``too_hard``: random
    among those. Quotas are filled in :data:`CATEGORIES` order, never picking twice. A short
    category's slots go round robin to ``high_regret``, ``too_easy`` and ``too_hard`` (weight > 0,
    candidates left), then to ``"random"`` picks. With every weight 0 the memory is ``k`` random
    environments.

    Thresholds in [0, 1]: ``too_easy_at`` (no-hint mean), ``too_hard_below`` (hint mean),
    ``low_regret_below`` (display only: "low regret" instead of "good difficulty"). ``setting``:
    the setting to prefer when :meth:`EnvironmentMemory.select` is given none; it gets
    ``floor(same_setting_share * k + 0.5)`` slots, the rest go to other settings, each side filling
    the other's shortfall. ``include_source``: show (and require readable) each ``env.py``;
    ``max_source_chars`` and ``max_description_chars`` (>= 10) cut what is shown.
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
        """Raise ValueError naming the first field of the wrong type or range."""
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
        """``{category: slots}`` of ``n`` (default ``k``) before backfill, summing to ``n`` (0 if no
        weight); ``rng`` (a ``random.Random`` or seed) breaks ties, else the category listed first
        wins. Raises ValueError for a bad ``n`` or config."""
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


# -- Items and verdicts --------------------------------------------------------------------------


@dataclass(frozen=True)
class MemoryItem:
    """One environment chosen for the Designer's prompt: why (:data:`REASONS`), its :func:`verdict`,
    and its source when read at selection time (``include_source``)."""

    record: EnvRecord
    reason: Reason
    verdict: str
    source: str | None = None

    @property
    def env_id(self) -> str:
        """The environment's id, e.g. ``"ArithmeticChain-v0"``."""
        return self.record.env_id


def _effective_regret(hint: float | None, nohint: float | None, regret: float | None) -> float | None:
    """The recorded regret, or ``max(hint - nohint, 0)`` when only the two means were recorded."""
    if regret is not None:
        return regret
    if hint is not None and nohint is not None:
        return max(hint - nohint, 0.0)
    return None


def _grade(
    hint: float | None, nohint: float | None, regret: float | None, config: MemoryConfig
) -> tuple[bool, bool, float | None]:
    """(too easy, too hard, effective regret) by ``config``'s thresholds."""
    easy = nohint is not None and nohint >= config.too_easy_at
    hard = hint is not None and hint < config.too_hard_below
    return easy, hard, _effective_regret(hint, nohint, regret)


def verdict(stats: EnvStats, config: MemoryConfig | None = None) -> str:
    """An environment's difficulty in plain words, by ``config``'s thresholds (default ``MemoryConfig()``).

    In order: :data:`VERDICT_UNMEASURED`, :data:`VERDICT_TOO_EASY`, :data:`VERDICT_TOO_HARD`,
    :data:`VERDICT_PARTLY_MEASURED` (no regret known), :data:`VERDICT_GOOD` (regret ``>=
    low_regret_below``), else :data:`VERDICT_LOW_REGRET`.
    """
    config = config or MemoryConfig()
    hint, nohint = stats.mean_return_hint, stats.mean_return_nohint
    easy, hard, regret = _grade(hint, nohint, stats.regret, config)
    if hint is None and nohint is None and stats.regret is None:
        return VERDICT_UNMEASURED
    if easy:
        return VERDICT_TOO_EASY
    if hard:
        return VERDICT_TOO_HARD
    if regret is None:
        return VERDICT_PARTLY_MEASURED
    return VERDICT_GOOD if regret >= config.low_regret_below else VERDICT_LOW_REGRET


#: One environment as selection sees it: ``(seq, setting, mean_return_hint, mean_return_nohint,
#: regret)``; ``seq`` is its place in the index, which is creation order (higher: newer).
_Row = tuple[int, str, float | None, float | None, float | None]


def read_source(record: EnvRecord) -> str | None:
    """The program source, or ``None`` when ``env.py`` is missing, changed or unreadable."""
    try:
        return record.program().source
    except (SpadeError, OSError, UnicodeDecodeError):
        return None


# -- Selection: reads only the narrow statistics columns of the index ----------------------------


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
    """The picks of one :meth:`EnvironmentMemory.select` call (about 15-30 ms for 10,000 environments)."""

    def __init__(self, registry: Registry, config: MemoryConfig, rng: random.Random, excluded: set[str]) -> None:
        self.registry = registry
        self.config = config
        self.rng = rng
        rows = registry.stats_rows()
        self.ids = {seq: env_id for seq, env_id, *_ in rows}
        self.rows: list[_Row] = [(seq, setting, hint, nohint, regret) for seq, _, setting, hint, nohint, regret in rows]
        self.items: list[MemoryItem] = []
        # seqs picked, excluded, or found unusable
        self.seen: set[int] = {seq for seq, env_id in self.ids.items() if env_id in excluded}

    def _use(self, row: _Row, reason: Reason) -> bool:
        """Add ``row``'s environment as a pick if it is new and usable; whether it was added."""
        seq = row[0]
        if seq in self.seen:
            return False
        self.seen.add(seq)
        try:
            record = self.registry.get(self.ids[seq])
        except (KeyError, EnvNotFound):  # gone from the registry since the scan
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
        good: list[tuple[float, _Row]] = []
        easy: list[_Row] = []
        hard: list[_Row] = []
        for row in rows:
            is_easy, is_hard, regret = _grade(row[2], row[3], row[4], config)
            if is_easy:
                easy.append(row)
            if is_hard:
                hard.append(row)
            if not (is_easy or is_hard) and regret is not None and regret > 0:
                good.append((regret, row))
        streams: dict[Reason, Iterator[_Row]] = {
            "high_regret": _by_regret(good, rng),
            "recent": reversed(rows),
            "too_easy": _lazy_shuffle(easy, rng),
            "too_hard": _lazy_shuffle(hard, rng),
            "random": _lazy_shuffle(rows, rng),
        }

        def take(reason: Reason, count: int) -> int:
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
    """Picks earlier environments from a registry (read only) for the Designer's prompt, and formats them.

    Raises ValueError for an invalid ``config`` (naming the field), TypeError for a ``registry`` not
    a :class:`Registry` or a ``config`` not a :class:`MemoryConfig`.
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
        self, rng: random.Random | int | None = None, *, setting: str | None = None, exclude: Collection[str] = ()
    ) -> list[MemoryItem]:
        """Pick at most ``k`` distinct environments, by the rules of :class:`MemoryConfig`.

        ``rng``: a ``random.Random`` (advanced), a seed, or ``None`` (OS entropy); the same seed on
        the same registry gives the same picks. ``setting`` overrides ``config.setting``.
        ``exclude``: env ids or ``"spade/..."`` ids never to pick. Returns the picks in the order
        made (quotas by category, then backfill); records gone since the scan, or unreadable
        sources under ``include_source``, are skipped. Raises ValueError for an unknown ``setting``,
        TypeError for an ``exclude`` that is a single str or holds a non-str, or an ``rng`` of another type.
        """
        config = self.config
        if setting is not None and setting not in SETTINGS:
            raise ValueError(f"setting = {setting!r}; expected None or one of {SETTINGS}")
        excluded = {key.removeprefix(GYM_PREFIX) for key in check_strings("exclude", exclude)}
        generator = _as_rng(rng)
        preferred = setting if setting is not None else config.setting
        if config.k == 0:
            return []
        selection = _Selection(self.registry, config, generator, excluded)
        pool = selection.rows
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
        """:func:`format_memory` with this memory's settings."""
        return format_memory(
            items,
            include_source=self.config.include_source,
            max_source_chars=self.config.max_source_chars,
            max_description_chars=self.config.max_description_chars,
        )

    def pick_parent(self, items: Sequence[MemoryItem], rng: random.Random | int | None = None) -> MemoryItem | None:
        """:func:`pick_parent` with this memory's thresholds."""
        return pick_parent(items, rng, config=self.config)


# -- Formatting ----------------------------------------------------------------------------------


def _truncate(text: str, limit: int) -> str:
    """``text`` with runs of whitespace made single spaces, cut to ``limit`` characters ending in ``...``."""
    flat = " ".join(text.split())
    if len(flat) <= limit:
        return flat
    return flat[: limit - 3].rstrip() + "..."


def _truncate_source(source: str, limit: int) -> str:
    """``source`` cut to ``limit`` characters (at a line end in the last quarter) plus a marker comment."""
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
    """Prompt text for ``items``, blank-line separated blocks without a trailing newline, such as::

        [1] ArithmeticChain-v0 (reasoning, max 4 turns): "A chain of integer operations ..."
            returns: 0.75 with hint / 0.25 without (regret 0.50, 8 episodes) -> good difficulty (high regret)

    ``?`` marks a number not measured. With ``include_source`` the program follows in a fence, cut
    to ``max_source_chars``; an unreadable one shows a note instead. Raises ValueError for a limit
    that is not an int >= 10, TypeError for an item that is not a :class:`MemoryItem`.
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


# -- Edit mode -----------------------------------------------------------------------------------


def pick_parent(
    items: Sequence[MemoryItem], rng: random.Random | int | None = None, *, config: MemoryConfig | None = None
) -> MemoryItem | None:
    """The item to make a variant of in edit mode (ACCEL-style), or ``None`` if none is readable.

    Among items whose program can be read: one of good difficulty (regret above 0, neither too easy
    nor too hard) drawn with probability proportional to its regret, else one drawn uniformly.
    Raises TypeError for an ``rng`` of another type.
    """
    config = config or MemoryConfig()
    generator = _as_rng(rng)
    good: list[tuple[float, MemoryItem]] = []
    rest: list[MemoryItem] = []
    for item in items:
        stats = item.record.stats
        easy, hard, regret = _grade(stats.mean_return_hint, stats.mean_return_nohint, stats.regret, config)
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
