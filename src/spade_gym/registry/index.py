"""The registry's SQLite index (WAL): a rebuildable copy of the folders for queries, statistics and sampling.

Each readable folder has a row, keyed by ``seq`` (creation order), in ``envs`` (``meta.json``),
``stats`` (rewritten by every sample) and ``signatures`` (MinHash); ``entries`` fingerprints every
folder to see later changes; ``changes`` logs what samplers need, so a process's sampler cache applies
other processes' changes instead of reloading.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import astuple, dataclass, fields
from pathlib import Path
from typing import Any

import numpy as np

__all__ = [
    "SCHEMA_VERSION",
    "FLAGGED_TAG",
    "APPLICATION_ID",
    "Index",
    "IndexRow",
    "IndexState",
    "Change",
    "ROW_COLUMNS",
]

#: ``PRAGMA user_version`` of the index layout; an index with another version is rebuilt.
SCHEMA_VERSION = 2
#: The tag of an environment that broke the contract after it was registered (never drawn again).
FLAGGED_TAG = "flagged"
#: How the tag appears in an environment's ``tags`` JSON text: the one test of "flagged" in the index.
_FLAGGED_JSON = f'"{FLAGGED_TAG}"'
#: ``PRAGMA application_id`` marking the file as a spade_gym index ("SPAD").
APPLICATION_ID = 0x53504144
#: Keep this many entries of the change log; a sampler cache further behind reloads.
CHANGE_LOG_KEEP = 100_000


@dataclass(frozen=True)
class IndexRow:
    """One environment's columns of ``envs``, ``stats`` and ``signatures`` (``seq`` aside); ``tags``,
    ``document``, ``parents`` and ``validation`` as JSON text (the last two ``None`` when absent)."""

    env_id: str
    name: str
    version: int
    program_id: str
    ast_hash: str
    setting: str
    max_turns: int
    description: str
    tags: str
    created: float
    document: str | None
    parents: str
    validation: str | None
    episodes: int
    mean_return_hint: float | None
    mean_return_nohint: float | None
    regret: float | None
    times_sampled: int
    last_sampled: int | None
    format_compliance: float | None
    minhash: bytes


#: Columns of :class:`IndexRow`, in order.
ROW_COLUMNS = tuple(f.name for f in fields(IndexRow))
_STATIC_COLUMNS = ROW_COLUMNS[: ROW_COLUMNS.index("episodes")]
_STATS_COLUMNS = ROW_COLUMNS[ROW_COLUMNS.index("episodes") : ROW_COLUMNS.index("minhash")]
#: Columns of the ``records`` view a record is built from (``seq`` first, no signature).
RECORD_COLUMNS = ("seq",) + _STATIC_COLUMNS + _STATS_COLUMNS
_RECORD_SELECT = ", ".join(RECORD_COLUMNS)

_SCHEMA = f"""
CREATE TABLE state (key TEXT PRIMARY KEY, value) WITHOUT ROWID;
CREATE TABLE envs (
    seq INTEGER PRIMARY KEY,
    env_id TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    version INTEGER NOT NULL,
    program_id TEXT NOT NULL,
    ast_hash TEXT NOT NULL,
    setting TEXT NOT NULL,
    max_turns INTEGER NOT NULL,
    description TEXT NOT NULL,
    tags TEXT NOT NULL,
    created REAL NOT NULL,
    document TEXT,
    parents TEXT NOT NULL,
    validation TEXT
);
CREATE INDEX envs_program_id ON envs (program_id);
CREATE INDEX envs_ast_hash ON envs (ast_hash);
CREATE INDEX envs_name ON envs (name, version);
CREATE INDEX envs_setting ON envs (setting, seq);
CREATE TABLE stats (
    seq INTEGER PRIMARY KEY,
    setting TEXT NOT NULL,
    episodes INTEGER NOT NULL,
    mean_return_hint REAL,
    mean_return_nohint REAL,
    regret REAL,
    times_sampled INTEGER NOT NULL,
    last_sampled INTEGER,
    format_compliance REAL
);
CREATE TABLE signatures (seq INTEGER PRIMARY KEY, minhash BLOB NOT NULL);
CREATE VIEW records AS SELECT envs.seq AS seq, {", ".join("envs." + c for c in _STATIC_COLUMNS)},
    {", ".join("stats." + c for c in _STATS_COLUMNS)} FROM envs JOIN stats ON stats.seq = envs.seq;
CREATE TABLE entries (dir TEXT PRIMARY KEY, fingerprint TEXT NOT NULL, problem TEXT) WITHOUT ROWID;
CREATE TABLE changes (
    gen INTEGER PRIMARY KEY,
    kind TEXT NOT NULL,
    seq INTEGER NOT NULL,
    setting TEXT NOT NULL,
    regret REAL,
    last_sampled INTEGER
);
PRAGMA user_version = {SCHEMA_VERSION};
PRAGMA application_id = {APPLICATION_ID};
"""
_INSERT_ENV = f"INSERT INTO envs ({', '.join(_STATIC_COLUMNS)}) VALUES ({', '.join('?' for _ in _STATIC_COLUMNS)})"
_UPDATE_ENV = f"UPDATE envs SET {', '.join(c + ' = ?' for c in _STATIC_COLUMNS)} WHERE seq = ?"
_INSERT_STATS = f"INSERT INTO stats (seq, setting, {', '.join(_STATS_COLUMNS)}) VALUES (?, ?, {', '.join('?' for _ in _STATS_COLUMNS)})"
_UPDATE_STATS = f"UPDATE stats SET {', '.join(c + ' = ?' for c in _STATS_COLUMNS)} WHERE seq = ?"
#: Keeps the larger ``times_sampled`` and ``last_sampled`` of the index and the folder.
_UPSERT_STATS = (
    "UPDATE stats SET setting = :setting, episodes = :episodes, mean_return_hint = :mean_return_hint, "
    "mean_return_nohint = :mean_return_nohint, regret = :regret, times_sampled = max(times_sampled, :times_sampled), "
    "last_sampled = ifnull(max(last_sampled, :last_sampled), ifnull(last_sampled, :last_sampled)), "
    "format_compliance = :format_compliance WHERE seq = :seq"
)
_TABLES = ("state", "envs", "stats", "signatures", "entries", "changes")


@dataclass(frozen=True)
class IndexState:
    """``epoch`` (bumped when rows may be renumbered), ``gen`` (bumped by every change) and the global
    sample ``counter`` ``c`` of Prioritized Level Replay."""

    epoch: int
    gen: int
    counter: int


@dataclass(frozen=True)
class Change:
    """One entry of the change log: ``kind`` is ``"add"``, ``"stats"`` or ``"mark"``; ``regret``
    and ``last_sampled`` are the environment's values after the change."""

    gen: int
    kind: str
    seq: int
    setting: str
    regret: float | None
    last_sampled: int | None


class Index:
    """A connection to ``index.sqlite`` (reopened after ``fork``) and the registry's queries.

    ``signature`` names the registry's signature format (:meth:`problem` compares it); ``timeout_s``
    is the wait for another process's write lock, in seconds; ``read_only`` opens the file immutable.
    """

    def __init__(self, path: Path, *, signature: str, timeout_s: float = 60.0, read_only: bool = False) -> None:
        self.path = Path(path)
        self.signature = signature
        self.timeout_s = timeout_s
        self.read_only = read_only
        self._conn: sqlite3.Connection | None = None
        self._pid = 0

    @property
    def conn(self) -> sqlite3.Connection:
        """The open connection (opened on first use, and again in a forked child)."""
        if self._conn is None or self._pid != os.getpid():
            if self.read_only:
                uri = f"{self.path.absolute().as_uri()}?mode=ro&immutable=1"
                self._conn = sqlite3.connect(uri, uri=True, isolation_level=None, check_same_thread=False)
            else:
                self._conn = sqlite3.connect(
                    self.path, timeout=self.timeout_s, isolation_level=None, check_same_thread=False
                )
                self._conn.execute(f"PRAGMA busy_timeout = {int(self.timeout_s * 1000)}")
                self._conn.execute("PRAGMA journal_mode = WAL")
                self._conn.execute("PRAGMA synchronous = NORMAL")
            self._pid = os.getpid()
        return self._conn

    def close(self) -> None:
        """Close the connection (a later call reopens it)."""
        if self._conn is not None and self._pid == os.getpid():
            self._conn.close()
        self._conn = None

    def create(self) -> None:
        """Create the tables in a new, empty database file."""
        conn = self.conn
        conn.executescript(_SCHEMA)
        with self.write():
            conn.executemany(
                "INSERT INTO state (key, value) VALUES (?, ?)",
                [("epoch", 0), ("gen", 0), ("counter", 0), ("signature", self.signature)],
            )

    def problem(self, *, thorough: bool = True) -> str | None:
        """Why this index cannot be used (``thorough``: also ``PRAGMA quick_check``), or ``None``."""
        if not self.path.exists():
            return f"{self.path.name} is missing"
        try:
            conn = self.conn
            app_id = conn.execute("PRAGMA application_id").fetchone()[0]
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            if app_id != APPLICATION_ID:
                return f"{self.path.name} is not a spade_gym index (application_id {app_id:#x})"
            if version != SCHEMA_VERSION:
                return f"{self.path.name} has schema version {version}; this spade_gym reads version {SCHEMA_VERSION}"
            tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            missing = [t for t in _TABLES if t not in tables]
            if missing:
                return f"{self.path.name} lacks the table(s) {', '.join(missing)}"
            signature = self._get("signature")
            if signature != self.signature:
                return f"{self.path.name} holds {signature} signatures; this spade_gym computes {self.signature}"
            if thorough:
                result = conn.execute("PRAGMA quick_check").fetchall()
                if result != [("ok",)]:
                    detail = "; ".join(str(r[0]) for r in result[:3])
                    return f"{self.path.name} is damaged (quick_check: {detail})"
            conn.execute("SELECT count(*) FROM records").fetchone()
        except sqlite3.DatabaseError as exc:
            self.close()
            return f"{self.path.name} is not a readable SQLite database ({exc})"
        return None

    @contextmanager
    def write(self) -> Iterator[sqlite3.Connection]:
        """A write transaction (``BEGIN IMMEDIATE``), committed on success, rolled back on error."""
        conn = self.conn
        conn.execute("BEGIN IMMEDIATE")
        try:
            yield conn
        except BaseException:
            conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")

    @contextmanager
    def read(self) -> Iterator[sqlite3.Connection]:
        """A read transaction: every query inside sees the same snapshot."""
        conn = self.conn
        conn.execute("BEGIN")
        try:
            yield conn
        finally:
            conn.execute("COMMIT")

    def _get(self, key: str) -> Any:
        row = self.conn.execute("SELECT value FROM state WHERE key = ?", (key,)).fetchone()
        return None if row is None else row[0]

    def state(self) -> IndexState:
        """The current epoch, generation and sample counter."""
        values = dict(self.conn.execute("SELECT key, value FROM state WHERE key IN ('epoch', 'gen', 'counter')"))
        return IndexState(int(values["epoch"]), int(values["gen"]), int(values["counter"]))

    def raise_counter(self, value: int | None) -> None:
        """Raise the sample counter to ``value`` if it is lower (inside a write transaction)."""
        if value is not None:
            self.conn.execute("UPDATE state SET value = max(value, ?) WHERE key = 'counter'", (int(value),))

    def bump_epoch(self) -> None:
        """Mark every cached view of the rows as stale (inside a write transaction)."""
        self.conn.execute("UPDATE state SET value = value + 1 WHERE key IN ('epoch', 'gen')")

    def _log(self, kind: str, seq: int, setting: str, regret: float | None, last_sampled: int | None) -> int:
        conn = self.conn
        conn.execute("UPDATE state SET value = value + 1 WHERE key = 'gen'")
        gen = int(self._get("gen"))
        conn.execute(
            "INSERT INTO changes (gen, kind, seq, setting, regret, last_sampled) VALUES (?, ?, ?, ?, ?, ?)",
            (gen, kind, seq, setting, regret, last_sampled),
        )
        return gen

    def changes_since(self, gen: int, limit: int) -> list[Change] | None:
        """The change log after generation ``gen``, oldest first; ``None`` if part of it was pruned
        or more than ``limit`` entries follow (reload instead)."""
        rows = self.conn.execute(
            "SELECT gen, kind, seq, setting, regret, last_sampled FROM changes WHERE gen > ? ORDER BY gen LIMIT ?",
            (gen, limit + 1),
        ).fetchall()
        if len(rows) > limit or (rows and rows[0][0] != gen + 1):
            return None
        return [Change(*row) for row in rows]

    def _insert(self, row: IndexRow) -> int:
        conn = self.conn
        values = astuple(row)
        seq = int(conn.execute(_INSERT_ENV, values[: len(_STATIC_COLUMNS)]).lastrowid or 0)
        conn.execute(_INSERT_STATS, (seq, row.setting) + values[len(_STATIC_COLUMNS) : -1])
        conn.execute("INSERT INTO signatures (seq, minhash) VALUES (?, ?)", (seq, row.minhash))
        return seq

    def _seq_of(self, env_id: str) -> int | None:
        found = self.conn.execute("SELECT seq FROM envs WHERE env_id = ?", (env_id,)).fetchone()
        return None if found is None else int(found[0])

    def _delete(self, env_id: str) -> None:
        seq = self._seq_of(env_id)
        if seq is not None:
            for table in ("signatures", "stats", "envs"):
                self.conn.execute(f"DELETE FROM {table} WHERE seq = ?", (seq,))

    def _set_entry(self, directory: str, fingerprint: str, problem: str | None) -> None:
        self.conn.execute(
            "INSERT OR REPLACE INTO entries (dir, fingerprint, problem) VALUES (?, ?, ?)",
            (directory, fingerprint, problem),
        )

    def insert_rows(self, rows: Sequence[IndexRow], fingerprints: Sequence[str]) -> None:
        """Insert environments and log (``"add"``) those :meth:`population` includes (not flagged), inside a
        write transaction; sqlite3.IntegrityError if an ``env_id`` is already present."""
        for row, fingerprint in zip(rows, fingerprints, strict=True):
            seq = self._insert(row)
            self._set_entry(row.env_id, fingerprint, None)
            if _FLAGGED_JSON not in row.tags:
                self._log("add", seq, row.setting, row.regret, row.last_sampled)
        self.raise_counter(max((r.last_sampled for r in rows if r.last_sampled is not None), default=None))

    def upsert_rows(self, rows: Sequence[IndexRow], fingerprints: Sequence[str]) -> None:
        """Insert environments, or replace those present keeping ``seq`` (inside a write transaction)."""
        conn = self.conn
        for row, fingerprint in zip(rows, fingerprints, strict=True):
            seq = self._seq_of(row.env_id)
            if seq is None:
                self._insert(row)
            else:
                conn.execute(_UPDATE_ENV, astuple(row)[: len(_STATIC_COLUMNS)] + (seq,))
                conn.execute(_UPSERT_STATS, {**vars(row), "seq": seq})
                conn.execute("UPDATE signatures SET minhash = ? WHERE seq = ?", (row.minhash, seq))
            self._set_entry(row.env_id, fingerprint, None)
            self.raise_counter(row.last_sampled)

    def set_problems(self, problems: Iterable[tuple[str, str, str]]) -> None:
        """Record unreadable folders ``(dir, fingerprint, message)``, removing their rows."""
        for directory, fingerprint, message in problems:
            self._delete(directory)
            self._set_entry(directory, fingerprint, message)

    def remove_dirs(self, dirs: Iterable[str]) -> None:
        """Forget folders that no longer exist (inside a write transaction)."""
        for directory in dirs:
            self._delete(directory)
            self.conn.execute("DELETE FROM entries WHERE dir = ?", (directory,))

    def clear(self) -> None:
        """Delete every row (inside a write transaction), keeping the counter."""
        for table in ("signatures", "stats", "envs", "entries", "changes"):
            self.conn.execute(f"DELETE FROM {table}")

    def set_fingerprint(self, directory: str, fingerprint: str) -> None:
        """Record the new fingerprint of a folder's files (inside a write transaction)."""
        self.conn.execute("UPDATE entries SET fingerprint = ? WHERE dir = ?", (fingerprint, directory))

    def update_stats(self, seq: int, setting: str, **stats: Any) -> None:
        """Replace one environment's statistics (every ``stats`` column, by name) and log a ``"stats"``
        change (inside a write transaction)."""
        self.conn.execute(_UPDATE_STATS, (*(stats[c] for c in _STATS_COLUMNS), seq))
        self._log("stats", seq, setting, stats["regret"], stats["last_sampled"])
        self.raise_counter(stats["last_sampled"])

    def flag(self, seq: int, tags: str, validation: str) -> None:
        """Set a flagged environment's tags and validation (JSON text); cached samplers go stale."""
        self.conn.execute("UPDATE envs SET tags = ?, validation = ? WHERE seq = ?", (tags, validation, seq))
        self.bump_epoch()

    def mark(self, draws: Sequence[tuple[int, int]], setting: str) -> None:
        """Record and log (``"mark"``) draws ``(seq, counter after the draw)`` (inside a write transaction)."""
        conn = self.conn
        for seq, counter in draws:
            conn.execute(
                "UPDATE stats SET times_sampled = times_sampled + 1, last_sampled = ? WHERE seq = ?", (counter, seq)
            )
            gen = self._log("mark", seq, setting, None, counter)
        if draws:
            self.raise_counter(draws[-1][1])
            if gen % 4096 == 0:
                conn.execute("DELETE FROM changes WHERE gen <= ?", (gen - CHANGE_LOG_KEEP,))

    def entries(self) -> dict[str, tuple[str, str | None]]:
        """Every folder the index knows: ``{dir: (fingerprint, problem or None)}``."""
        return {d: (f, p) for d, f, p in self.conn.execute("SELECT dir, fingerprint, problem FROM entries")}

    def problems(self) -> list[tuple[str, str]]:
        """``(dir, message)`` of the folders that could not be read, sorted by folder."""
        return list(self.conn.execute("SELECT dir, problem FROM entries WHERE problem IS NOT NULL ORDER BY dir"))

    def count(self) -> int:
        """How many environments."""
        return int(self.conn.execute("SELECT count(*) FROM envs").fetchone()[0])

    def record_rows(self, where: str = "", params: Sequence[object] = (), order: str = "seq") -> list[tuple]:
        """Rows of :data:`RECORD_COLUMNS` matching an SQL ``where`` clause (``""``: all)."""
        clause = f" WHERE {where}" if where else ""
        return self.conn.execute(f"SELECT {_RECORD_SELECT} FROM records{clause} ORDER BY {order}", params).fetchall()

    def record_row(self, column: str, value: object) -> tuple | None:
        """The first row (by ``seq``) whose ``column`` equals ``value``, or ``None``."""
        return self.conn.execute(
            f"SELECT {_RECORD_SELECT} FROM records WHERE {column} = ? ORDER BY seq LIMIT 1", (value,)
        ).fetchone()

    def stats_rows(self) -> list[tuple[int, str, str, float | None, float | None, float | None]]:
        """``(seq, env_id, setting, mean_return_hint, mean_return_nohint, regret)`` in ``seq`` order."""
        return self.conn.execute(
            "SELECT envs.seq, envs.env_id, envs.setting, stats.mean_return_hint, stats.mean_return_nohint, "
            "stats.regret FROM envs JOIN stats ON stats.seq = envs.seq ORDER BY envs.seq"
        ).fetchall()

    def max_version(self, name: str) -> int | None:
        """The highest version registered under ``name``, or ``None``."""
        value = self.conn.execute("SELECT max(version) FROM envs WHERE name = ?", (name,)).fetchone()[0]
        return None if value is None else int(value)

    def versions(self, name: str) -> list[int]:
        """Every version registered under ``name``, ascending."""
        return [r[0] for r in self.conn.execute("SELECT version FROM envs WHERE name = ? ORDER BY version", (name,))]

    def names(self) -> list[str]:
        """Every registered name, once."""
        return [r[0] for r in self.conn.execute("SELECT DISTINCT name FROM envs")]

    def signatures_after(self, seq: int) -> list[tuple[int, str, bytes]]:
        """``(seq, env_id, minhash)`` of the environments with ``seq`` above the given one."""
        return self.conn.execute(
            "SELECT envs.seq, envs.env_id, signatures.minhash FROM envs JOIN signatures ON signatures.seq = envs.seq "
            "WHERE envs.seq > ? ORDER BY envs.seq",
            (seq,),
        ).fetchall()

    def sampling_stats(self) -> dict[str, tuple[int, int | None]]:
        """``{env_id: (times_sampled, last_sampled)}`` of every environment."""
        return {e: (t, s) for e, t, s in self.conn.execute("SELECT env_id, times_sampled, last_sampled FROM records")}

    def population(self, setting: str | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``seq`` (int64), ``regret`` (float64, ``NaN``: none) and ``last_sampled`` (int64, 0: never) of
        the unflagged environments (of ``setting``), in ``seq`` order."""
        # NULLs become numbers in SQL (regret is never negative), so numpy converts the rows in one go.
        columns = "seq, ifnull(regret, -1.0), ifnull(last_sampled, 0)"
        playable = f"seq NOT IN (SELECT seq FROM envs WHERE instr(tags, '{_FLAGGED_JSON}') > 0)"  # case-sensitive
        where, params = ("", ()) if setting is None else ("setting = ? AND ", (setting,))
        rows = self.conn.execute(f"SELECT {columns} FROM stats WHERE {where}{playable} ORDER BY seq", params).fetchall()
        if not rows:
            return np.zeros(0, np.int64), np.zeros(0, np.float64), np.zeros(0, np.int64)
        table = np.array(rows, dtype=np.float64)
        regret = table[:, 1]
        regret[regret < 0] = np.nan
        return table[:, 0].astype(np.int64), regret.copy(), table[:, 2].astype(np.int64)
