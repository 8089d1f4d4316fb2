"""The environment registry: a folder of accepted environments, indexed for queries and replay.

Layout of a registry rooted at ``root`` (docs/DESIGN.md, "Registry")::

    root/envs/<env_id>/env.py      the program, byte for byte as registered
    root/envs/<env_id>/meta.json   EnvRecord.to_meta(): provenance, validation report, statistics
    root/index.sqlite              rebuildable index (WAL): queries, statistics, sampling, dedup signatures
    root/.lock                     fcntl.flock'ed by every writer
    root/.tmp/                     files being written; anything left there is a dead writer's, and removed

The folders are the source of truth. A new entry is written (fsync'ed) into ``.tmp/<uuid>/`` and
renamed onto ``envs/<env_id>/`` under the ``flock``, which also covers version allocation and the
index insert: readers see a whole entry or none. Opening rebuilds a bad index and re-reads changed
folders (with a ``RuntimeWarning``). Sampling counts live in the index and reach ``meta.json`` when
the entry is rewritten. A registry this process cannot write is read and sampled with ``mark=False``.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import os
import shutil
import sqlite3
import tempfile
import threading
import time
import uuid
import warnings
import weakref
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from datasketch import MinHash

from spade_gym.errors import DuplicateEnvironment, EnvNotFound, ProgramError, RegistryError
from spade_gym.files import fsync_dir, locked, replace_atomically, write_durably
from spade_gym.program import EnvProgram
from spade_gym.registry.dedup import SIGNATURE_VERSION, IndexedNearDuplicates, minhash_to_bytes, signatures
from spade_gym.registry.index import FLAGGED_TAG, Index, IndexRow
from spade_gym.registry.records import (
    ENV_ID_PATTERN,
    ENVS_DIR,
    GYM_PREFIX,
    META_FILE,
    META_SCHEMA_VERSION,
    PROGRAM_ID_PATTERN,
    SOURCE_FILE,
    EnvRecord,
    EnvStats,
    check_fields,
    check_setting,
    check_threshold,
)
from spade_gym.registry.sampler import Population, ReplayConfig, check_strategy

__all__ = ["EnvStats", "EnvRecord", "Registry", "META_SCHEMA_VERSION"]

#: Largest meta.json read; a bigger one is a damaged entry (skipped with a warning).
MAX_META_BYTES = 4 * 1024 * 1024
INDEX_FILE = "index.sqlite"
LOCK_FILE = ".lock"
TMP_DIR = ".tmp"
#: Default Jaccard similarity from which a program counts as a near duplicate.
NEAR_DUPLICATE_THRESHOLD = 0.9

_CHUNK = 1000
#: Written to ``root/.gitignore``: the index, lock and temporary files are derived, not content.
_GITIGNORE = "# written by spade_gym: derived files\nindex.sqlite*\n.lock\n.tmp/\n"


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def _meta_bytes(meta: Mapping[str, Any]) -> bytes:
    return (json.dumps(meta, ensure_ascii=False, allow_nan=False, indent=2) + "\n").encode("utf-8")


def _row(record: EnvRecord, ast_hash: str, minhash: bytes) -> IndexRow:
    r = record  # IndexRow's columns: the record's fields in order, ast_hash after program_id, then stats, minhash
    return IndexRow(
        *(r.env_id, r.name, r.version, r.program_id, ast_hash, r.setting, r.max_turns, r.description),
        *(_json(list(r.tags)), r.created, None if r.document is None else _json(r.document)),
        *(_json(list(r.parents)), None if r.validation is None else _json(r.validation)),
        **dataclasses.asdict(r.stats),
        minhash=minhash,
    )


def _stat_print(path: Path) -> str:
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return "-"
    return f"{st.st_ino}:{st.st_mtime_ns}:{st.st_size}"


def _fingerprint(directory: Path) -> str:
    """Changes whenever ``meta.json`` or ``env.py`` in ``directory`` is replaced, rewritten or removed."""
    return f"{_stat_print(directory / META_FILE)}|{_stat_print(directory / SOURCE_FILE)}"


def _read_entry(directory: Path) -> IndexRow | str:
    """Read and check one environment folder: its index row, or what is wrong with it (never raises)."""
    name = directory.name
    if not directory.is_dir():
        return "not a folder; expected a folder holding env.py and meta.json"
    meta_path, source_path = directory / META_FILE, directory / SOURCE_FILE
    try:
        size = meta_path.stat().st_size
        if size > MAX_META_BYTES:
            return f"{META_FILE} is {size:,} bytes; at most {MAX_META_BYTES:,} are read"
        text = meta_path.read_bytes().decode("utf-8")
    except FileNotFoundError:
        return f"{META_FILE} is missing; expected the JSON file Registry.add writes"
    except (OSError, UnicodeDecodeError) as exc:
        return f"{META_FILE} cannot be read ({exc})"
    try:
        meta = json.loads(text)
    except json.JSONDecodeError as exc:
        return f"{META_FILE} is not valid JSON ({exc}); expected the JSON object Registry.add writes"
    except RecursionError:
        return f"{META_FILE} is nested too deeply to read"
    try:
        record = EnvRecord.from_meta(meta, directory)
        json.dumps(record.to_meta())  # what the index stores must encode back
    except RegistryError as exc:
        return exc.message
    except (RecursionError, ValueError, TypeError) as exc:
        return f"{META_FILE} cannot be indexed ({type(exc).__name__}: {exc})"[:300]
    if record.env_id != name:
        return f"{META_FILE} says env_id {record.env_id!r} but the folder is named {name!r}"
    try:
        program = EnvProgram.from_file(source_path)
    except FileNotFoundError:
        return f"{SOURCE_FILE} is missing; expected the environment's program"
    except (OSError, ProgramError) as exc:
        return f"{SOURCE_FILE} cannot be read ({exc})"
    if program.id != record.program_id:
        return (
            f"{SOURCE_FILE} does not match {META_FILE}: its program id is {program.id}, "
            f"{META_FILE} records {record.program_id}"
        )
    sig = signatures(program.source)
    return _row(record, sig.ast_hash, minhash_to_bytes(sig.minhash()))


class Registry:
    """A folder of accepted environments with a SQLite index (layout: the module docstring).

    ``root`` becomes ``self.root`` (absolute); ``create`` makes the folder if missing, or a registry
    in a non-empty folder without ``envs/``. ``read_only`` is true when this process cannot write the
    folder: reads and ``sample(mark=False)`` work (a stale index is rebuilt in a private temporary
    folder); writes raise :class:`RegistryError`.

    Raises:
        RegistryError: ``root`` is missing or a non-empty non-registry (without ``create``), is a
            file, or cannot be opened.
    """

    def __init__(self, root: str | os.PathLike[str], *, create: bool = False) -> None:
        self.root = Path(root).expanduser().absolute()
        self.envs_dir = self.root / ENVS_DIR
        self.tmp_dir = self.root / TMP_DIR
        self.index_path = self.root / INDEX_FILE
        self._thread_lock = threading.RLock()
        self._lock_depth = 0
        self._pops: dict[str | None, Population] = {}
        self._near: dict[float, IndexedNearDuplicates] = {}
        self._rng = np.random.default_rng()
        self._index = Index(self.index_path, signature=SIGNATURE_VERSION)
        self._index_inode: int | None = None
        if not self.root.exists():
            if not create:
                raise RegistryError(
                    f"no environment registry at {self.root}: the folder does not exist; "
                    "pass create=True to make a new registry there"
                )
        elif not self.root.is_dir():
            raise RegistryError(f"cannot open a registry at {self.root}: it is a file, not a folder")
        if self.root.is_dir() and not self.envs_dir.is_dir() and not create and any(self.root.iterdir()):
            raise RegistryError(
                f"{self.root} is not an environment registry: it has no {ENVS_DIR}/ folder and is not empty; "
                "pass create=True to make a new registry there"
            )
        try:
            self.root.mkdir(parents=True, exist_ok=True)
            if os.access(self.root, os.W_OK):  # an empty folder is an empty registry
                self.envs_dir.mkdir(exist_ok=True)
            existing = [p for p in (self.root, self.envs_dir, self.index_path) if p.exists()]
            self.read_only = not all(os.access(p, os.W_OK) for p in existing)  # false on a read-only mount
            if self.read_only:
                self._index = Index(self.index_path, signature=SIGNATURE_VERSION, read_only=True)
            else:
                self.tmp_dir.mkdir(exist_ok=True)
                ignore = self.root / ".gitignore"
                if not ignore.exists():
                    ignore.write_text(_GITIGNORE)
            with self._locked():
                if not self.read_only:
                    self._clean_tmp()
                self._open_index()
        except OSError as exc:
            raise RegistryError(f"cannot open the registry at {self.root}: {exc}") from exc

    def close(self) -> None:
        """Close the index connection (the registry reopens it if used again)."""
        with self._thread_lock:
            self._index.close()

    def __enter__(self) -> Registry:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"Registry({str(self.root)!r})"

    @contextmanager
    def _locked(self, *, check: bool = False) -> Iterator[None]:
        """Hold the thread lock and (outermost, writable: .lock cannot be created read-only) the flock;
        ``check``: then reconnect if another process replaced the index file."""
        with self._thread_lock:
            flock = self._lock_depth == 0 and not self.read_only
            with locked(self.root / LOCK_FILE) if flock else nullcontext():
                self._lock_depth += 1
                try:
                    if check:
                        self._check_index_file()
                    yield
                finally:
                    self._lock_depth -= 1

    @contextmanager
    def _current(self) -> Iterator[None]:
        """Hold the thread lock, reconnected if another process replaced the index file."""
        with self._thread_lock:
            self._check_index_file()
            yield

    def _clean_tmp(self) -> None:
        for entry in os.scandir(self.tmp_dir):
            if entry.is_dir(follow_symlinks=False):
                shutil.rmtree(entry.path, ignore_errors=True)
            else:
                Path(entry.path).unlink(missing_ok=True)

    def _warn(self, message: str) -> None:
        warnings.warn(f"spade_gym registry {self.root}: {message}", RuntimeWarning, stacklevel=4)

    def _open_index(self) -> None:
        """Check the index against the folders and repair it (called under the lock)."""
        reason = self._index.problem()
        if self.read_only:
            self._open_read_only(reason)
        elif reason is not None:
            new_registry = not self.index_path.exists() and not self._scan()
            count = self._rebuild(replace=True)
            if not new_registry:
                self._warn(f"{reason}; rebuilt {INDEX_FILE} from the {count} readable environment folder(s)")
        else:
            self._index_inode = self._inode()
            self._sync()
        problems = self._index.problems()
        if problems:
            shown = "; ".join(f"{self.envs_dir / d}: {m[:300]}" for d, m in problems[:3])
            more = f" (and {len(problems) - 3} more)" if len(problems) > 3 else ""
            self._warn(
                f"{len(problems)} environment folder(s) cannot be read and are skipped "
                f"(see Registry.problems()): {shown}{more}"
            )

    def _open_read_only(self, reason: str | None) -> None:
        """Use the shipped index if it matches the folders, else index them in a private temporary folder."""
        shipped = self.index_path.exists()
        if reason is None:
            disk, known = self._scan(), self._index.entries()
            if disk.keys() != known.keys() or any(known[d][0] != f for d, f in disk.items()):
                reason = f"{INDEX_FILE} does not match the environment folders"
            else:
                self._index_inode = self._inode()
                return
        self._index.close()
        private = Path(tempfile.mkdtemp(prefix="spade_gym-registry-"))
        weakref.finalize(self, shutil.rmtree, private, True)
        self._index = Index(private / INDEX_FILE, signature=SIGNATURE_VERSION)
        self.index_path = self._index.path
        count = self._rebuild(replace=True)
        if shipped:  # a registry shipped without an index is normal; one with a bad index is not
            self._warn(
                f"{reason}; the registry is read-only, so its {count} readable environment folder(s) were "
                f"indexed in {private}"
            )

    def _require_writable(self, what: str) -> None:
        if self.read_only:
            raise RegistryError(
                f"cannot {what}: the registry at {self.root} is read-only for this process "
                "(copy it to a writable folder to change it)"
            )

    def _inode(self) -> int | None:
        try:
            return os.stat(self.index_path).st_ino
        except FileNotFoundError:
            return None

    def _check_index_file(self) -> None:
        """Reconnect if another process replaced ``index.sqlite`` (a rebuild of a damaged index)."""
        inode = self._inode()
        if inode != self._index_inode:
            self._index.close()
            self._drop_caches()
            if inode is None:
                with self._locked():
                    self._open_index()
            else:
                self._index_inode = inode

    def _drop_caches(self) -> None:
        self._pops.clear()
        self._near.clear()

    def _scan(self) -> dict[str, str]:
        """``{folder name: fingerprint}`` of every entry of ``envs/`` (hidden names skipped)."""
        found: dict[str, str] = {}
        if not self.envs_dir.is_dir():  # an empty, read-only folder
            return found
        for entry in os.scandir(self.envs_dir):
            if entry.name.startswith("."):
                continue
            found[entry.name] = _fingerprint(Path(entry.path)) if entry.is_dir() else "not-a-folder"
        return found

    def _read(
        self, names: Iterable[str], disk: Mapping[str, str]
    ) -> tuple[list[IndexRow], list[str], list[tuple[str, str, str]]]:
        """Read folders: their rows and fingerprints in creation order, and ``(dir, fingerprint, problem)``."""
        rows: list[tuple[IndexRow, str]] = []
        problems = []
        for name in names:
            found = _read_entry(self.envs_dir / name)
            if isinstance(found, str):
                problems.append((name, disk[name], found))
            else:
                rows.append((found, disk[name]))
        rows.sort(key=lambda item: (item[0].created, item[0].env_id))
        return [row for row, _ in rows], [fingerprint for _, fingerprint in rows], problems

    def _sync(self) -> None:
        """Bring the index in line with the folders, re-reading only what changed (under the lock)."""
        disk = self._scan()
        known = self._index.entries()
        new = [d for d in disk if d not in known]
        gone = [d for d in known if d not in disk]
        changed = [d for d in disk if d in known and known[d][0] != disk[d]]
        if not (new or gone or changed):
            return
        rows, fingerprints, problems = self._read(sorted(new) + sorted(changed), disk)
        with self._index.write():
            self._index.remove_dirs(gone)
            self._index.upsert_rows(rows, fingerprints)
            self._index.set_problems(problems)
            self._index.bump_epoch()
        self._drop_caches()
        if len(known) != len(disk):
            what = f"{INDEX_FILE} lists {len(known)} environment folder(s) but {ENVS_DIR}/ holds {len(disk)}"
        elif new or gone:
            what = f"{INDEX_FILE} and {ENVS_DIR}/ list different environment folders"
        else:
            what = f"{len(changed)} environment folder(s) changed since they were indexed"
        self._warn(f"{what}; re-indexed {len(new)} new, {len(changed)} changed and {len(gone)} removed folder(s)")

    def _rebuild(self, *, replace: bool) -> int:
        """Rebuild the index from the folders (under the lock), in place keeping the sampling counts unless
        ``replace`` (or the index cannot be read); return how many were indexed."""
        disk = self._scan()
        rows, fingerprints, problems = self._read(sorted(disk), disk)

        def fill(index: Index, old_stats: Mapping[str, tuple[int, int | None]], old_counter: int) -> None:
            merged = list(rows)
            for i, row in enumerate(merged):
                if row.env_id in old_stats:
                    times, last = old_stats[row.env_id]
                    last = row.last_sampled if last is None else max(last, row.last_sampled or 0)
                    merged[i] = dataclasses.replace(row, times_sampled=max(times, row.times_sampled), last_sampled=last)
            index.clear()
            index.insert_rows(merged, fingerprints)
            index.set_problems(problems)
            index.raise_counter(max([old_counter] + [r.last_sampled or 0 for r in merged]))
            index.bump_epoch()

        if not replace:
            with self._index.write():  # the counts read in the transaction that replaces them: no draw is lost
                try:
                    old = self._index.sampling_stats(), self._index.state().counter
                except (sqlite3.DatabaseError, KeyError, TypeError):
                    replace = True
                else:
                    fill(self._index, *old)
        if replace:
            tmp_dir = self.index_path.parent if self.read_only else self.tmp_dir
            tmp = tmp_dir / f"index-{uuid.uuid4().hex}.sqlite"
            fresh = Index(tmp, signature=SIGNATURE_VERSION)
            fresh.create()
            with fresh.write():
                fill(fresh, {}, 0)
            fresh.close()
            self._index.close()
            for suffix in ("-wal", "-shm", "-journal"):
                Path(f"{self.index_path}{suffix}").unlink(missing_ok=True)
            os.replace(tmp, self.index_path)
            fsync_dir(self.index_path.parent)
        self._index_inode = self._inode()
        self._drop_caches()
        return len(rows)

    def add(
        self,
        program: EnvProgram,
        *,
        name: str,
        setting: str,
        max_turns: int,
        description: str,
        tags: Iterable[str] = (),
        document: Mapping[str, Any] | None = None,
        parents: Iterable[str] = (),
        validation: Mapping[str, Any] | None = None,
        stats: EnvStats | None = None,
        allow_near_duplicates: bool = False,
        near_duplicate_threshold: float = NEAR_DUPLICATE_THRESHOLD,
    ) -> EnvRecord:
        """Register a program (not run, only compared with the registered ones) as ``<name>-v<k>``,
        ``k`` the next free version; return the new record.

        Args:
            name: CamelCase (ASCII letters, digits, ``_``; at most 100 characters).
            setting: ``"reasoning"``, ``"tool_use"`` or ``"game"``.
            max_turns: agent actions per episode before truncation (1 to 100,000).
            tags, parents: free-form labels; ids of the environments it was derived from.
            document, validation: JSON objects (the grounding document's provenance; the validation
                report), or ``None``.
            allow_near_duplicates: register even if a registered program is at least
                ``near_duplicate_threshold`` similar (Jaccard of token 5-shingles, in (0, 1]);
                exact duplicates are refused regardless.

        Raises:
            DuplicateEnvironment: an exact duplicate (same program id or normalised AST; ``similarity``
                1.0) or a near one of a registered program, named by ``existing``.
            ValueError, TypeError: an argument of the wrong type or range.
            RegistryError: the entry could not be written.
        """
        if not isinstance(program, EnvProgram):
            raise TypeError(f"program is a {type(program).__name__}; expected an EnvProgram")
        fields = check_fields(name, setting, max_turns, description, tags, parents, document, validation)
        tag_tuple, parent_tuple, document_dict, validation_dict = fields
        stats = stats.normalised() if stats is not None else EnvStats()
        check_threshold(near_duplicate_threshold)
        self._require_writable(f"add {name}")
        try:
            source_bytes = program.source.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise ValueError(f"the program source cannot be encoded as UTF-8 ({exc})") from None
        sig = signatures(program.source)
        sketch = sig.minhash()
        with self._locked(check=True):
            self._refuse_duplicate(
                program.id, sig.ast_hash, None if allow_near_duplicates else sketch, near_duplicate_threshold
            )
            version = self._next_version(name)
            env_id = f"{name}-v{version}"
            record = EnvRecord(
                env_id=env_id,
                name=name,
                version=version,
                program_id=program.id,
                setting=setting,
                max_turns=max_turns,
                description=description,
                tags=tag_tuple,
                path=self.envs_dir / env_id,
                created=time.time(),
                document=document_dict,
                parents=parent_tuple,
                validation=validation_dict,
                stats=stats,
            )
            self._write_entry(record, source_bytes)
            try:
                with self._index.write():
                    self._index.insert_rows(
                        [_row(record, sig.ast_hash, minhash_to_bytes(sketch))], [_fingerprint(record.path)]
                    )
            except sqlite3.DatabaseError as exc:
                raise RegistryError(
                    f"{env_id} was written to {record.path} but could not be added to {INDEX_FILE} ({exc}); "
                    "it will be indexed when the registry is next opened"
                ) from exc
        return record

    def _refuse_duplicate(self, program_id: str, ast_hash: str, sketch: MinHash | None, threshold: float) -> None:
        """Raise DuplicateEnvironment for an exact duplicate, or (``sketch`` given) a near one."""
        found = self._exact_duplicate(program_id, ast_hash)
        if found is not None:
            raise DuplicateEnvironment(
                f"the program is an exact duplicate of {found[0]} ({found[1]}); "
                "register an environment whose rules differ, not only its names, comments or layout",
                existing=found[0],
                similarity=1.0,
            )
        near = None if sketch is None else next(iter(self._near_duplicates(sketch, threshold)), None)
        if near is not None:
            raise DuplicateEnvironment(
                f"the program is a near duplicate of {near[0]}: the estimated Jaccard similarity of "
                f"their token 5-shingles is {near[1]:.3f}, at least the threshold {threshold}; "
                "register an environment whose mechanics differ, not only its names, constants or comments, "
                "or pass allow_near_duplicates=True (the validation gate's novelty check does so for a near "
                "duplicate that behaves differently: a size, rule or wording variant)",
                existing=near[0],
                similarity=near[1],
            )

    def _write_entry(self, record: EnvRecord, source: bytes) -> None:
        """Write ``env.py`` and ``meta.json`` into ``.tmp`` and rename the folder into place."""
        tmp = self.tmp_dir / uuid.uuid4().hex
        try:
            tmp.mkdir()
            write_durably(tmp / SOURCE_FILE, source, exclusive=True)
            write_durably(tmp / META_FILE, _meta_bytes(record.to_meta()), exclusive=True)
            fsync_dir(tmp)
            os.rename(tmp, record.path)
            fsync_dir(self.envs_dir)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise RegistryError(f"could not write {record.path}: {exc}") from exc

    def _next_version(self, name: str) -> int:
        top = self._index.max_version(name)
        version = 0 if top is None else top + 1
        while (self.envs_dir / f"{name}-v{version}").exists():  # a folder not indexed (yet)
            version += 1
        return version

    def _exact_duplicate(self, program_id: str, ast_hash: str) -> tuple[str, str] | None:
        row = self._index.record_row("program_id", program_id)
        if row is not None:
            return row[1], "the same program id: identical up to comments and layout"
        row = self._index.record_row("ast_hash", ast_hash)
        if row is not None:
            return row[1], "the same structure up to docstrings, comments, layout and renamed identifiers"
        return None

    def _near_duplicates(self, sketch: MinHash, threshold: float) -> list[tuple[str, float]]:
        cache = self._near[threshold] = IndexedNearDuplicates.current(self._near.get(threshold), self._index, threshold)
        return cache.query(sketch)

    def find_duplicate(
        self, program: EnvProgram, threshold: float = NEAR_DUPLICATE_THRESHOLD
    ) -> tuple[EnvRecord, float] | None:
        """``(record, similarity)`` of the registered environment most like ``program`` (an exact
        duplicate: 1.0; else as :meth:`near_duplicates`), or ``None``."""
        check_threshold(threshold)
        sig = signatures(program.source)
        with self._current():  # one view of the index for both lookups
            exact = self._exact_duplicate(program.id, sig.ast_hash)
            if exact is not None:
                return self.get(exact[0]), 1.0
            near = self._near_duplicates(sig.minhash(), threshold)
            return (self.get(near[0][0]), near[0][1]) if near else None

    def exact_duplicate(self, program: EnvProgram) -> EnvRecord | None:
        """The registered environment that ``program`` exactly duplicates (the same program id, or
        the same :func:`~spade_gym.registry.dedup.ast_hash`: equal up to names, the environment's
        name, docstrings, comments and layout), or ``None``."""
        sig = signatures(program.source)
        with self._current():
            exact = self._exact_duplicate(program.id, sig.ast_hash)
            return None if exact is None else self.get(exact[0])

    def near_duplicates(
        self, program: EnvProgram, threshold: float = NEAR_DUPLICATE_THRESHOLD
    ) -> list[tuple[EnvRecord, float]]:
        """``(record, similarity)`` of every registered environment at least ``threshold`` (in (0, 1], else
        ValueError) similar to ``program`` (Jaccard of token 5-shingles), most similar first, ties by env id."""
        check_threshold(threshold)
        sketch = signatures(program.source).minhash()
        with self._current():
            found = self._near_duplicates(sketch, threshold)
            return [(self.get(env_id), similarity) for env_id, similarity in found]

    def _record(self, row: tuple) -> EnvRecord:
        """The record of an ``index.RECORD_COLUMNS`` row: seq, the ``envs`` columns, the ``stats`` columns."""
        env_id, name, version, program_id, _ast_hash, setting, max_turns, description = row[1:9]
        tags, created, document, parents, validation = row[9:14]
        return EnvRecord(
            env_id=env_id,
            name=name,
            version=version,
            program_id=program_id,
            setting=setting,
            max_turns=max_turns,
            description=description,
            tags=() if tags == "[]" else tuple(json.loads(tags)),
            path=self.envs_dir / env_id,
            created=created,
            document=None if document is None else json.loads(document),
            parents=() if parents == "[]" else tuple(json.loads(parents)),
            validation=None if validation is None else json.loads(validation),
            stats=EnvStats(*row[14:]),
        )

    def _lookup(self, key: str) -> tuple | None:
        k = key.removeprefix(GYM_PREFIX)
        row = self._index.record_row("env_id", k)
        if row is None and PROGRAM_ID_PATTERN.fullmatch(k):
            row = self._index.record_row("program_id", k)
        return row

    def get(self, key: str) -> EnvRecord:
        """The environment with id ``key``: ``"Name-v0"``, ``"spade/Name-v0"`` or a 64-hex program id.

        Raises:
            EnvNotFound: if there is none; the message suggests the closest ids.
            TypeError: if ``key`` is not a str.
        """
        if not isinstance(key, str):
            raise TypeError(f"registry keys are str; got {type(key).__name__}")
        with self._current():
            row = self._lookup(key)
            if row is None:
                raise EnvNotFound(self._not_found(key))
            return self._record(row)

    def _not_found(self, key: str) -> str:
        head = f"no environment {key!r} in the registry at {self.root}"
        if self._index.count() == 0:
            return f"{head}: the registry is empty"
        k = key.removeprefix(GYM_PREFIX)
        match = ENV_ID_PATTERN.fullmatch(k)
        if match is not None:
            versions = self._index.versions(match["name"])
            if versions:
                listed = ", ".join(f"v{v}" for v in versions[:20]) + (", ..." if len(versions) > 20 else "")
                return (
                    f"{head}; {match['name']} has version(s) {listed}: did you mean '{match['name']}-v{versions[-1]}'?"
                )
        if PROGRAM_ID_PATTERN.fullmatch(k):
            return f"{head}: no environment has that program id"
        names = self._index.names()
        close = difflib.get_close_matches(match["name"] if match else k, names, n=3, cutoff=0.6)
        if close:
            wanted = int(match["version"]) if match else -1
            known = {close_name: self._index.versions(close_name) for close_name in close}
            suggestions = " or ".join(f"'{n}-v{wanted if wanted in v else v[-1]}'" for n, v in known.items())
            return f"{head}; did you mean {suggestions}?"
        return f"{head}; ids look like 'Name-v0', 'spade/Name-v0' or a 64-character program id"

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, str):
            return False
        with self._current():
            return self._lookup(key) is not None

    def __len__(self) -> int:
        with self._current():
            return self._index.count()

    def __iter__(self) -> Iterator[EnvRecord]:
        """Every environment, in creation order (read in chunks, so adds during the loop may show)."""
        last = 0
        while True:
            with self._current():
                rows = self._index.record_rows("seq > ?", (last,), order=f"seq LIMIT {_CHUNK}")
            if not rows:
                return
            for row in rows:
                yield self._record(row)
            last = rows[-1][0]

    def records(self, setting: str | None = None) -> list[EnvRecord]:
        """Every environment (of ``setting``, if given; ValueError for an unknown one), in creation order."""
        if setting is not None:
            check_setting(setting)
        with self._current():
            rows = self._index.record_rows("setting = ?", (setting,)) if setting else self._index.record_rows()
        return [self._record(row) for row in rows]

    def stats_rows(self) -> list[tuple[int, str, str, float | None, float | None, float | None]]:
        """``(seq, env_id, setting, mean_return_hint, mean_return_nohint, regret)`` per environment, in
        creation order: about 10 ms for 10,000 environments (:meth:`records`: about 1 s)."""
        with self._current():
            return self._index.stats_rows()

    def problems(self) -> list[tuple[str, str]]:
        """``(folder path, message)`` of the unreadable folders in ``envs/``, sorted, after a re-check;
        the message names the file and its fault (``"meta.json is not valid JSON (...)"``)."""
        with self._locked(check=True):
            if not self.read_only:
                self._sync()
            return [(str(self.envs_dir / d), message) for d, message in self._index.problems()]

    def rebuild_index(self) -> int:
        """Rebuild ``index.sqlite`` from the folders (keeping a readable index's sampling counts);
        return how many environments were indexed."""
        self._require_writable("rebuild the index")
        with self._locked(check=True):
            self._clean_tmp()
            replace = self._index.problem(thorough=False) is not None
            return self._rebuild(replace=replace)

    def update_stats(self, env_id: str, **fields: Any) -> EnvRecord:
        """Set some :class:`EnvStats` fields (``episodes=8, regret=0.5``) of ``env_id`` (any :meth:`get`
        key); rewrite its ``meta.json`` atomically, with the index's sampling counts; return the record.

        Raises:
            TypeError: a name that is not an :class:`EnvStats` field. ValueError: a bad value.
            EnvNotFound: no such environment. RegistryError: ``meta.json`` could not be written.
        """
        known = {f.name for f in dataclasses.fields(EnvStats)}
        unknown = sorted(set(fields) - known)
        if unknown:
            raise TypeError(
                f"update_stats() got unknown field(s) {', '.join(map(repr, unknown))}; EnvStats fields are {sorted(known)}"
            )
        with self._editing(env_id, f"update the statistics of {env_id}") as (seq, current):
            stats = dataclasses.replace(current.stats, **fields).normalised()
            record = dataclasses.replace(current, stats=stats)
            self._rewrite_meta(record)
            self._index.update_stats(seq, record.setting, **stats.to_dict())
        return record

    def flag(self, env_id: str, reason: str) -> EnvRecord:
        """Flag ``env_id`` (any :meth:`get` key) for breaking the contract after registration: tag
        :data:`FLAGGED_TAG`, ``reason`` (up to 500 characters) as the validation report's ``"flagged"``;
        :meth:`sample` never draws it again. Return the flagged record (unchanged if already flagged).
        EnvNotFound if there is none; RegistryError if ``meta.json`` could not be written."""
        with self._editing(env_id, f"flag {env_id}") as (seq, current):
            if FLAGGED_TAG in current.tags:
                return current
            validation = {**(current.validation or {}), "flagged": str(reason)[:500]}
            record = dataclasses.replace(current, tags=(*current.tags, FLAGGED_TAG), validation=validation)
            self._rewrite_meta(record)
            self._index.flag(seq, _json(list(record.tags)), _json(validation))
        return record

    @contextmanager
    def _editing(self, env_id: str, what: str) -> Iterator[tuple[int, EnvRecord]]:
        """Hold the registry's lock and an index write transaction for a change of ``env_id``; yield its
        index ``seq`` and record, read inside the transaction (so no other process's draw is lost)."""
        self._require_writable(what)
        with self._locked(check=True), self._index.write():
            row = self._lookup(env_id)
            if row is None:
                raise EnvNotFound(self._not_found(env_id))
            yield row[0], self._record(row)

    def _rewrite_meta(self, record: EnvRecord) -> None:
        """Rewrite ``meta.json`` (keeping keys the record does not hold: a difficulty ladder) and its
        fingerprint in the index (inside an index write transaction)."""
        meta = record.to_meta()
        try:
            old = json.loads(record.meta_path.read_bytes())
        except (OSError, ValueError):
            old = None
        if isinstance(old, dict):
            meta.update((k, v) for k, v in old.items() if k not in meta)
        try:
            replace_atomically(record.meta_path, _meta_bytes(meta), tmp_dir=self.tmp_dir)
        except OSError as exc:
            raise RegistryError(f"could not rewrite {record.meta_path}: {exc}") from exc
        self._index.set_fingerprint(record.env_id, _fingerprint(record.path))

    def sample(
        self,
        n: int = 1,
        *,
        strategy: str = "uniform",
        setting: str | None = None,
        rng: np.random.Generator | None = None,
        mark: bool = True,
        config: ReplayConfig | None = None,
    ) -> list[EnvRecord]:
        """Draw ``n`` >= 0 environments (with replacement) to train on; return them in draw order.

        Args:
            strategy: ``"uniform"``, or ``"replay"``: rank-based Prioritized Level Replay
                (:func:`~spade_gym.registry.sampler.replay_probabilities`; Jiang et al., ICML 2021).
            setting: draw only environments of this setting.
            rng: default: the registry's own, seeded from the OS.
            mark: record each draw (sample counter ``c`` + 1, ``times_sampled`` + 1, ``last_sampled = c``),
                one after another as ``n`` calls would; ``False``: ``n`` independent draws, nothing written.
            config: the replay settings (default ``ReplayConfig()``: β = 0.1, ρ = 0.1).

        Raises:
            RegistryError: no environment (of ``setting``) to draw.
            ValueError: an unknown strategy or setting, or ``n`` < 0.
        """
        check_strategy(strategy)
        if setting is not None:
            check_setting(setting)
        if type(n) is not int or n < 0:
            raise ValueError(f"n = {n!r}; expected an int >= 0")
        if n == 0:
            return []
        if mark:
            self._require_writable("record samples (pass mark=False)")
        config = config or ReplayConfig()
        rng = rng if rng is not None else self._rng
        with self._current():
            transaction = self._index.write() if mark else self._index.read()
            try:
                with transaction:
                    state = self._index.state()
                    pop = self._pops[setting] = Population.current(
                        self._pops.get(setting), self._index, setting, state, config
                    )
                    if len(pop.sampler) == 0:
                        where = f" with setting {setting!r}" if setting else ""
                        raise RegistryError(f"no environment{where} to sample in the registry at {self.root}")
                    if mark:
                        draws = []
                        for _ in range(n):
                            i = pop.sampler.draw(rng, strategy, mark=True)
                            draws.append((int(pop.seqs[i]), pop.sampler.counter))
                        self._index.mark(draws, setting or "")
                        pop.gen = self._index.state().gen
                        seqs = [seq for seq, _ in draws]
                    elif n <= 8:
                        seqs = [int(pop.seqs[pop.sampler.draw(rng, strategy, mark=False)]) for _ in range(n)]
                    else:
                        seqs = pop.seqs[pop.sampler.draw_many(rng, n, strategy)].tolist()
                    by_seq = self._records_by_seq(set(seqs))
            except BaseException:
                self._pops.pop(setting, None)  # the draws may have moved it past what was committed
                raise
        return [by_seq[seq] for seq in seqs]

    def _records_by_seq(self, seqs: set[int]) -> dict[int, EnvRecord]:
        out: dict[int, EnvRecord] = {}
        ordered = sorted(seqs)
        for start in range(0, len(ordered), 500):
            chunk = ordered[start : start + 500]
            rows = self._index.record_rows(f"seq IN ({', '.join('?' for _ in chunk)})", chunk)
            out.update((row[0], self._record(row)) for row in rows)
        return out
