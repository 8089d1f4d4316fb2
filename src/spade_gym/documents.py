"""Document sources: the text the Environment Designer grounds each new environment on.

A :class:`DocumentSource` (:class:`BuiltinDocuments`, :class:`LocalDocuments`, :class:`HFDocuments`,
or one :func:`load_documents` builds from a spec string) streams cleaned, token-capped
:class:`Document` objects (:mod:`spade_gym.document_text`); junk, too short texts and malformed
records are skipped and counted.
"""

from __future__ import annotations

import codecs
import importlib
import json
import os
import random
import warnings
from collections.abc import Generator, Iterator
from dataclasses import asdict, dataclass, field, replace
from importlib import resources
from itertools import islice
from pathlib import Path
from typing import Any, Literal, Protocol, runtime_checkable

from spade_gym.document_text import (
    DEFAULT_MAX_TOKENS,
    MIN_CHARS,
    RAW_CHARS_PER_TOKEN,
    Document,
    Tokenizer,
    cap_tokens,
    capped_document,
    clean_text,
    make_document,
    one_line,
)
from spade_gym.errors import DocumentError, install_hint

__all__ = [
    "DEFAULT_MAX_TOKENS",
    "BuiltinDocuments",
    "Document",
    "DocumentError",
    "DocumentSource",
    "HFDocuments",
    "LocalDocuments",
    "Tokenizer",
    "cap_tokens",
    "clean_text",
    "load_documents",
    "make_document",
]

#: A source that rejects this many documents in a row raises :class:`DocumentError`.
MAX_CONSECUTIVE_REJECTS = 10_000
#: Default size of the shuffle buffer of :class:`LocalDocuments` and :class:`HFDocuments`, in documents.
DEFAULT_SHUFFLE_BUFFER = 10_000
#: The file types :class:`LocalDocuments` reads.
SUPPORTED_SUFFIXES = (".jsonl", ".parquet", ".txt")


_DATA_EXTRA = install_hint("data")
_ID_CHARS = 200
_PARQUET_BATCH = 1024


@runtime_checkable
class DocumentSource(Protocol):
    """An endless, shuffled, resumable stream of documents: a finite corpus is cycled, each pass (an
    *epoch*) in its own order, deterministic for the seed."""

    def sample(self, n: int = 1) -> list[Document]:
        """The next ``n >= 0`` documents; DocumentError if there is no usable one or reading failed."""

    def state_dict(self) -> dict[str, Any]:
        """The stream position, a small JSON-serialisable dict (for a checkpoint)."""

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at a ``state_dict`` of an equally built source (else DocumentError)."""

    def reseed(self, seed: int) -> None:
        """Restart at epoch 0 shuffled with ``seed``: the stream of a fresh source with that seed."""

    def describe(self) -> str:
        """One line for logs: what the source reads and how far it got."""


def _import_optional(module: str, what: str) -> Any:
    """Import an optional dependency of the ``data`` extra, or raise one clear DocumentError."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise DocumentError(f"{what} needs the optional package {module!r}: {_DATA_EXTRA}") from exc


def _check_seed(seed: object) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TypeError(f"seed must be an int, got {type(seed).__name__}")


@dataclass
class _Counts:
    read: int = 0
    accepted: int = 0
    rejected: int = 0  # junk or too short after cleaning
    malformed: int = 0  # not a JSON value, no text field, text not a string


_END = object()


class _StreamSource:
    """Epochs, cleaning, counting and resume for every source. A subclass gives ``_records(epoch)`` (one
    epoch's raw records, shuffled by the seed) and ``_document(record, index)`` (via :meth:`_finish`)."""

    _kind = ""

    def __init__(self, *, seed: int, max_tokens: int, tokenizer: Tokenizer | None, shuffle_buffer: int = 0) -> None:
        _check_seed(seed)
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
        if shuffle_buffer < 0:
            raise ValueError(f"shuffle_buffer must be >= 0, got {shuffle_buffer}")
        self.seed = seed
        self.max_tokens = max_tokens
        self.tokenizer = tokenizer
        self.shuffle_buffer = shuffle_buffer
        self._raw_limit = max_tokens * RAW_CHARS_PER_TOKEN + 4096
        self._epoch = self._emitted = self._epoch_accepted = self._consecutive_rejects = 0
        self._partial_epoch = False
        self._it: Iterator[Any] | None = None
        self._counts = _Counts()
        self._first_problem: str | None = None

    def _records(self, epoch: int) -> Iterator[Any]:
        raise NotImplementedError

    def _document(self, record: Any, index: int) -> Document | None:
        raise NotImplementedError

    def _name(self) -> str:
        raise NotImplementedError

    def _open(self, epoch: int, skip: int) -> Iterator[Any]:
        """The epoch's record iterator, advanced past ``skip`` records (replayed, not cleaned)."""
        it = self._records(epoch)
        next(islice(it, skip, skip), None)
        return it

    def _problem(self, message: str, *, count: bool = True) -> None:
        """Count one malformed record (if ``count``); warn about the first problem of this source."""
        if count:
            self._counts.malformed += 1
        if self._first_problem is None:
            self._first_problem = message
            warnings.warn(
                f"{message} (skipped; further problems of this source are counted, not warned: see .stats)",
                stacklevel=4,
            )

    def _finish(self, raw: Any, source: dict[str, Any], title: Any = None, record_id: Any = None) -> Document | None:
        """Clean and cap ``raw``; None when it is not text, junk, or too short."""
        if not isinstance(raw, str):
            return None
        if isinstance(record_id, int) and not isinstance(record_id, bool):
            source.setdefault("id", record_id)
        elif (ident := one_line(record_id, _ID_CHARS)) is not None:
            source.setdefault("id", ident)
        doc = capped_document(raw, source, title, self.max_tokens, self.tokenizer)
        if doc is None:
            self._counts.rejected += 1
        return doc

    def sample(self, n: int = 1) -> list[Document]:
        """The next ``n >= 0`` documents (ValueError for ``n < 0``); DocumentError when a full epoch
        gave none, :data:`MAX_CONSECUTIVE_REJECTS` in a row were rejected, or reading failed (a later
        call retries there)."""
        if n < 0:
            raise ValueError(f"n must be >= 0, got {n}")
        out: list[Document] = []
        while len(out) < n:
            try:
                if self._it is None:
                    self._partial_epoch = self._emitted > 0
                    self._epoch_accepted = 0
                    self._it = self._open(self._epoch, self._emitted)
                record = next(self._it, _END)
            except Exception as exc:
                raise self._reading_failed(exc) from exc
            if record is _END:
                if self._epoch_accepted == 0 and not self._partial_epoch:
                    raise DocumentError(f"no usable document in {self._name()}: {self._tally()}")
                self._epoch += 1
                self._emitted = 0
                self._it = None
                continue
            index = self._emitted
            self._emitted += 1
            self._counts.read += 1
            doc = self._document(record, index)
            if doc is None:
                self._consecutive_rejects += 1
                if self._consecutive_rejects >= MAX_CONSECUTIVE_REJECTS:
                    self._consecutive_rejects = 0
                    raise DocumentError(
                        f"{MAX_CONSECUTIVE_REJECTS} documents in a row were unusable in {self._name()}: {self._tally()}"
                    )
                continue
            self._consecutive_rejects = 0
            self._counts.accepted += 1
            self._epoch_accepted += 1
            out.append(doc)
        return out

    def _reading_failed(self, exc: Exception) -> DocumentError:
        """Drop the broken iterator (the next sample reopens at the same position) and say what failed."""
        self._it = None
        if isinstance(exc, DocumentError):
            return exc
        return DocumentError(f"reading {self._name()} failed: {type(exc).__name__}: {exc}")

    def _tally(self) -> str:
        c = self._counts
        text = (
            f"read {c.read} record(s): {c.rejected} rejected as junk or too short "
            f"(< {MIN_CHARS} characters after cleaning), {c.malformed} malformed or without text"
        )
        if self._first_problem:
            text += f"; first problem: {self._first_problem}"
        return text

    @property
    def stats(self) -> dict[str, int]:
        """``read``, ``accepted``, ``rejected`` (junk, too short), ``malformed`` and the current ``epoch``."""
        return {**asdict(self._counts), "epoch": self._epoch}

    def _config(self) -> dict[str, Any]:
        return {"seed": self.seed, "shuffle_buffer": self.shuffle_buffer}

    def state_dict(self) -> dict[str, Any]:
        """``{"kind", "config", "epoch", "emitted", "counts"}`` (``emitted``: records of the epoch taken)."""
        return {
            "kind": self._kind,
            "config": self._config(),
            "epoch": self._epoch,
            "emitted": self._emitted,
            "counts": asdict(self._counts),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at :meth:`state_dict` ``state`` (the next :meth:`sample` replays, without cleaning, the
        epoch's first ``emitted`` records); DocumentError if it is malformed or from another kind of
        source, seed or shuffle buffer."""
        if not isinstance(state, dict) or state.get("kind") != self._kind:
            kind = state.get("kind") if isinstance(state, dict) else type(state).__name__
            raise DocumentError(f"cannot load a {kind!r} document-source state into {self._name()}")
        config = state.get("config")
        config = config if isinstance(config, dict) else {}
        for key, value in self._config().items():
            if key in config and config[key] != value:
                raise DocumentError(
                    f"document-source state was saved with {key}={config[key]!r}, this source has {key}={value!r}: "
                    "build the source with the same arguments to resume its stream"
                )
        try:
            epoch, emitted = int(state["epoch"]), int(state["emitted"])
        except (KeyError, TypeError, ValueError) as exc:
            raise DocumentError(f"malformed document-source state: {exc!r}") from exc
        if epoch < 0 or emitted < 0:
            raise DocumentError(f"malformed document-source state: epoch {epoch}, emitted {emitted}")
        counts = state.get("counts")
        counts = counts if isinstance(counts, dict) else {}
        self._counts = _Counts(**{k: int(v) for k, v in counts.items() if k in _Counts.__dataclass_fields__})
        self._epoch, self._emitted = epoch, emitted
        self._it = None
        self._consecutive_rejects = 0

    def reseed(self, seed: int) -> None:
        """Restart at epoch 0 shuffled with int ``seed``, as a fresh source would; :attr:`stats` are kept."""
        _check_seed(seed)
        if seed == self.seed and self._epoch == 0 and self._emitted == 0 and self._it is None:
            return  # already there (and a datasets stream is not reopened for nothing)
        self.seed = seed
        self._epoch = self._emitted = self._consecutive_rejects = 0
        self._it = None
        self._reseeded()

    def _reseeded(self) -> None:
        """Hook: rebuild whatever depends on ``self.seed``."""

    def _check_usable(self, records: Generator[Any]) -> None:
        """Raise DocumentError unless some of ``records`` makes a usable document; counters unchanged."""
        saved = replace(self._counts)
        rejects = 0
        try:
            for index, record in enumerate(records):
                self._counts.read += 1
                if self._document(record, index) is not None:
                    return
                rejects += 1
                if rejects >= MAX_CONSECUTIVE_REJECTS:
                    raise DocumentError(
                        f"the first {MAX_CONSECUTIVE_REJECTS} documents of {self._name()} are all unusable: {self._tally()}"
                    )
            raise DocumentError(f"no usable document in {self._name()}: {self._tally()}")
        except DocumentError:
            raise
        except Exception as exc:  # a reader failure (I/O, pyarrow) is the source's
            raise self._reading_failed(exc) from exc
        finally:
            self._counts = saved
            records.close()

    def describe(self) -> str:
        c = self._counts
        return (
            f"{self._name()} seed={self.seed} max_tokens={self.max_tokens}: epoch {self._epoch}, "
            f"{c.accepted} sampled, {c.rejected} rejected, {c.malformed} malformed"
        )


def _buffer_shuffle(records: Iterator[Any], size: int, rng: random.Random) -> Iterator[Any]:
    """Shuffle a stream through a buffer of ``size`` records, as ``datasets``' IterableDataset.shuffle."""
    if size <= 1:
        yield from records
        return
    buffer: list[Any] = []
    for record in records:
        if len(buffer) < size:
            buffer.append(record)
            continue
        i = int(rng.random() * size)
        yield buffer[i]
        buffer[i] = record
    rng.shuffle(buffer)
    yield from buffer


_BUILTIN_RESOURCE = "data/documents.jsonl"


def _builtin_records() -> list[dict[str, Any]]:
    """The built-in corpus: ``{"id", "title", "topic", "text"}`` objects, in file order."""
    try:
        raw = resources.files("spade_gym").joinpath(_BUILTIN_RESOURCE).read_text(encoding="utf-8")
    except (FileNotFoundError, OSError) as exc:
        raise DocumentError(
            f"the built-in document corpus (spade_gym/{_BUILTIN_RESOURCE}) is missing from this installation; "
            "reinstall spade-gym, or pass a local path or an 'hf:' dataset"
        ) from exc
    return [json.loads(line) for line in raw.splitlines() if line.strip()]


class BuiltinDocuments(_StreamSource):
    """The default source: short factual documents (80-200 words, on mathematics, science, finance,
    logistics, games, programming and more) shipped with spade_gym; every epoch a new permutation of
    them for ``seed``. DocumentError if the corpus file is missing from the installation."""

    _kind = "builtin"

    def __init__(self, seed: int = 0, max_tokens: int = DEFAULT_MAX_TOKENS, tokenizer: Tokenizer | None = None) -> None:
        super().__init__(seed=seed, max_tokens=max_tokens, tokenizer=tokenizer)
        self._entries = _builtin_records()
        if not self._entries:
            raise DocumentError(f"the built-in document corpus (spade_gym/{_BUILTIN_RESOURCE}) is empty")

    def __len__(self) -> int:
        return len(self._entries)

    def _name(self) -> str:
        return f"the built-in corpus ({len(self._entries)} documents)"

    def _records(self, epoch: int) -> Iterator[Any]:
        order = list(range(len(self._entries)))
        random.Random(f"spade-builtin:{self.seed}:{epoch}").shuffle(order)
        return (self._entries[i] for i in order)

    def _document(self, record: Any, index: int) -> Document | None:
        source: dict[str, Any] = {"kind": "builtin", "id": str(record.get("id", ""))}
        return self._finish(record.get("text"), source, record.get("title"))


@dataclass(frozen=True)
class _Unit:
    """One shuffled unit of a local corpus: a whole file, or one row group of a parquet file."""

    kind: Literal["jsonl", "txt", "parquet"]
    path: Path
    row_group: int = 0
    first_row: int = 0
    columns: tuple[str, ...] = field(default=())


class LocalDocuments(_StreamSource):
    """Documents from local files: ``path`` is a ``.jsonl`` file (per line, a JSON object with a
    string ``text_field`` and optional ``title`` and ``id``, or a JSON string), a ``.parquet`` file
    (column ``text_field``, optional ``title`` and ``id``), a ``.txt`` file (one UTF-8 document), or
    a folder of them (recursively, hidden files ignored).

    Each epoch visits the units (files, parquet row groups) in a new order, deterministic for
    ``seed``, through a shuffle buffer of ``shuffle_buffer`` records (0 or 1: none). Malformed records
    and unreadable parquet files are counted in :attr:`stats`, with one warning naming the first.

    Raises:
        DocumentError: ``path`` is missing, an empty file, of an unsupported type, a folder without a
            supported file, needs a missing pyarrow, or holds no usable document (read up to the first).
    """

    _kind = "local"

    def __init__(
        self,
        path: str | os.PathLike[str],
        *,
        text_field: str = "text",
        seed: int = 0,
        shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        tokenizer: Tokenizer | None = None,
    ) -> None:
        super().__init__(seed=seed, max_tokens=max_tokens, tokenizer=tokenizer, shuffle_buffer=shuffle_buffer)
        self.path = Path(path).expanduser().absolute()
        self.text_field = text_field
        supported = ", ".join(SUPPORTED_SUFFIXES)
        if not self.path.exists():
            raise DocumentError(
                f"document path {str(self.path)!r} does not exist (expected a {supported} file or a folder of them)"
            )
        if self.path.is_dir():
            files = sorted(
                p
                for p in self.path.rglob("*")
                if p.suffix.lower() in SUPPORTED_SUFFIXES
                and p.is_file()
                and not any(part.startswith(".") for part in p.relative_to(self.path).parts)
            )
            if not files:
                raise DocumentError(f"folder {str(self.path)!r} holds no {supported} file")
        else:
            if self.path.suffix.lower() not in SUPPORTED_SUFFIXES:
                raise DocumentError(
                    f"unsupported document file type {self.path.suffix or '(none)'!r} for {str(self.path)!r}: "
                    f"expected {supported}, or a folder of them"
                )
            if self.path.stat().st_size == 0:
                raise DocumentError(f"document file {str(self.path)!r} is empty: no usable document")
            files = [self.path]
        self.files = files
        self._pq: Any = None
        if any(p.suffix.lower() == ".parquet" for p in files):
            self._pq = _import_optional("pyarrow.parquet", "reading .parquet documents")
        self._units: list[_Unit] | None = None
        self._skipped_files = 0  # parquet files without the column, or unreadable
        self._check_usable(record for unit in self._unit_list() for record in self._read(unit))

    @property
    def stats(self) -> dict[str, int]:
        """Every source's counters plus ``skipped_files`` (parquet files unreadable or without the column)."""
        return {**super().stats, "skipped_files": self._skipped_files}

    def _tally(self) -> str:
        text = super()._tally()
        return text if not self._skipped_files else f"{self._skipped_files} file(s) skipped; {text}"

    def _name(self) -> str:
        if self.path.is_dir():
            return f"local documents {str(self.path)!r} ({len(self.files)} files)"
        return f"local documents {str(self.path)!r}"

    def _unit_list(self) -> list[_Unit]:
        """Every unit, in file order (parquet metadata is read once, here)."""
        if self._units is None:
            units: list[_Unit] = []
            for path in self.files:
                suffix = path.suffix.lower()
                if suffix == ".parquet":
                    units.extend(self._parquet_units(path))
                else:
                    units.append(_Unit("jsonl" if suffix == ".jsonl" else "txt", path))
            self._units = units
        return self._units

    def _parquet_units(self, path: Path) -> list[_Unit]:
        try:
            meta = self._pq.ParquetFile(path).metadata
            names = set(meta.schema.names)
        except Exception as exc:  # a corrupt or non-parquet file: skipped, the rest goes on
            self._skipped_files += 1
            self._problem(f"{path}: not a readable parquet file ({type(exc).__name__}: {exc})", count=False)
            return []
        if self.text_field not in names:
            self._skipped_files += 1
            self._problem(f"{path}: no column {self.text_field!r} (columns: {', '.join(sorted(names))})", count=False)
            return []
        columns = tuple(c for c in (self.text_field, "title", "id") if c in names)
        units, first = [], 0
        for g in range(meta.num_row_groups):
            units.append(_Unit("parquet", path, g, first, columns))
            first += meta.row_group(g).num_rows
        return units

    def _records(self, epoch: int) -> Iterator[Any]:
        units = self._unit_list()
        order = list(range(len(units)))
        random.Random(f"spade-local:{self.seed}:{epoch}:units").shuffle(order)
        stream = (record for u in order for record in self._read(units[u]))
        return _buffer_shuffle(stream, self.shuffle_buffer, random.Random(f"spade-local:{self.seed}:{epoch}:buffer"))

    def _read(self, unit: _Unit) -> Iterator[tuple[_Unit, int, Any]]:
        """Raw records of one unit: ``(unit, position, payload)``; payloads are parsed on use."""
        if unit.kind == "jsonl":
            with open(unit.path, "rb") as f:
                for lineno, line in enumerate(f, 1):
                    if not line.isspace():
                        yield unit, lineno, line
        elif unit.kind == "txt":
            limit = self._raw_limit * 4  # UTF-8 bytes of _raw_limit characters, at most
            with open(unit.path, "rb") as f:
                data = f.read(limit + 1)
            decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
            text = decoder.decode(data[:limit], final=len(data) <= limit)
            yield unit, 0, text.removeprefix("\ufeff")
        else:
            row = unit.first_row
            pf = self._pq.ParquetFile(unit.path)
            for batch in pf.iter_batches(
                batch_size=_PARQUET_BATCH, row_groups=[unit.row_group], columns=list(unit.columns)
            ):
                columns = [batch.column(i).to_pylist() for i in range(batch.num_columns)]
                for values in zip(*columns, strict=True):
                    yield unit, row, values
                    row += 1

    def _document(self, record: Any, index: int) -> Document | None:
        unit, position, payload = record
        path = str(unit.path)
        if unit.kind == "txt":
            return self._finish(payload, {"kind": "file", "path": path})
        if unit.kind == "parquet":
            values = dict(zip(unit.columns, payload, strict=True))
            text = values[self.text_field]
            if not isinstance(text, str):
                self._problem(
                    f"{path}: row {position}: column {self.text_field!r} is {type(text).__name__}, not a string"
                )
                return None
            source = {"kind": "parquet", "path": path, "row": position}
            return self._finish(text, source, values.get("title"), values.get("id"))
        try:
            obj = json.loads(payload)
        except ValueError as exc:  # JSONDecodeError, or bytes that are not UTF-8
            self._problem(f"{path}: line {position}: not valid JSON ({exc})")
            return None
        source = {"kind": "file", "path": path, "line": position}
        if isinstance(obj, str):
            return self._finish(obj, source)
        text = obj.get(self.text_field) if isinstance(obj, dict) else None
        if not isinstance(text, str):
            what = "a JSON object" if isinstance(obj, dict) else f"JSON {type(obj).__name__}"
            self._problem(f"{path}: line {position}: {what} without a string field {self.text_field!r}")
            return None
        return self._finish(text, source, obj.get("title"), obj.get("id"))


class HFDocuments(_StreamSource):
    """Documents streamed from a Hugging Face dataset: ``datasets.load_dataset(dataset, config,
    split=split, streaming=True, **load_kwargs)`` (a Hub name, a local folder, or a builder such as
    ``"json"`` with ``data_files``), its ``text_field``, ``title``, ``id`` and ``url`` columns,
    ``.shuffle(seed=seed, buffer_size=shuffle_buffer)``, each epoch ``set_epoch(epoch)``.

    ``resume="exact"`` replays (re-reads, not cleans) the epoch up to a loaded position;
    ``resume="fast"`` seeks with the dataset's own ``load_state_dict``, skipping up to
    ``shuffle_buffer`` records. Parquet-backed datasets pause 5 s whenever a stream iterator closes
    (``datasets.config.SLEEP_TIME_ON_THREADS_SHUTDOWN``).

    Raises:
        DocumentError: ``datasets`` is missing, the dataset cannot be loaded (the message names the
            cause), the split is not a single stream, or it has no ``text_field`` column.
    """

    _kind = "hf"

    def __init__(
        self,
        dataset: str,
        *,
        config: str | None = None,
        split: str = "train",
        text_field: str = "text",
        seed: int = 0,
        shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
        max_tokens: int = DEFAULT_MAX_TOKENS,
        tokenizer: Tokenizer | None = None,
        resume: Literal["exact", "fast"] = "exact",
        **load_kwargs: Any,
    ) -> None:
        super().__init__(seed=seed, max_tokens=max_tokens, tokenizer=tokenizer, shuffle_buffer=shuffle_buffer)
        if resume not in ("exact", "fast"):
            raise ValueError(f"resume must be 'exact' or 'fast', got {resume!r}")
        self.dataset, self.config, self.split, self.text_field, self.resume = dataset, config, split, text_field, resume
        datasets = _import_optional("datasets", f"streaming the Hugging Face dataset {dataset!r}")
        try:
            stream = datasets.load_dataset(dataset, config, split=split, streaming=True, **load_kwargs)
        except Exception as exc:  # every load failure (hub, network, files, builder) is reported as one
            raise DocumentError(f"could not load {self._name()}: {type(exc).__name__}: {exc}") from exc
        if not isinstance(stream, datasets.IterableDataset):
            raise DocumentError(f"{self._name()} is not a single stream ({type(stream).__name__}); name one split")
        columns = stream.column_names
        if columns is not None:
            if text_field not in columns:
                raise DocumentError(f"{self._name()} has no column {text_field!r} (columns: {', '.join(columns)})")
            stream = stream.select_columns([c for c in columns if c in (text_field, "title", "id", "url")])
        self._base_stream = stream
        self._stream = stream.shuffle(seed=seed, buffer_size=max(1, shuffle_buffer))
        self._hf_state: dict[str, Any] | None = None  # a loaded position for "fast" resume

    def _reseeded(self) -> None:
        self._stream = self._base_stream.shuffle(seed=self.seed, buffer_size=max(1, self.shuffle_buffer))
        self._hf_state = None

    def _name(self) -> str:
        where = self.dataset + (f" ({self.config})" if self.config else "")
        return f"Hugging Face dataset {where!r} split {self.split!r}"

    def _open(self, epoch: int, skip: int) -> Iterator[Any]:
        self._stream.set_epoch(epoch)
        if skip and self.resume == "fast" and self._hf_state is not None:
            self._stream.load_state_dict(self._hf_state)
            self._hf_state = None
            return iter(self._stream)
        self._hf_state = None
        if hasattr(self._stream, "load_state_dict"):
            self._stream.load_state_dict(None)  # forget a position loaded earlier: replay from the start
        return super()._open(epoch, skip)

    def _records(self, epoch: int) -> Iterator[Any]:
        return iter(self._stream)

    def _document(self, record: Any, index: int) -> Document | None:
        text = record.get(self.text_field)
        if not isinstance(text, str):
            self._problem(f"{self._name()}: record {index} of epoch {self._epoch}: {self.text_field!r} is not a string")
            return None
        source: dict[str, Any] = {"kind": "hf", "dataset": self.dataset, "config": self.config, "split": self.split}
        source.update(seed=self.seed, epoch=self._epoch, index=index)
        if (url := one_line(record.get("url"), 512)) is not None:
            source["url"] = url
        return self._finish(text, source, record.get("title"), record.get("id"))

    def state_dict(self) -> dict[str, Any]:
        """Every source's state plus ``hf_state``: the dataset's own ``state_dict()`` (for ``resume="fast"``)."""
        state = super().state_dict()
        hf_state = self._hf_state
        if self._it is not None and self._emitted and hasattr(self._stream, "state_dict"):
            hf_state = self._stream.state_dict()
        state["hf_state"] = json.loads(json.dumps(hf_state)) if hf_state is not None else None
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Resume at the saved position: exactly (replay) or fast (the dataset's own state), per ``resume``."""
        super().load_state_dict(state)
        hf_state = state.get("hf_state")
        self._hf_state = hf_state if isinstance(hf_state, dict) and hasattr(self._stream, "load_state_dict") else None


def load_documents(
    spec: str | os.PathLike[str] | None = None,
    *,
    seed: int = 0,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    tokenizer: Tokenizer | None = None,
    text_field: str = "text",
    shuffle_buffer: int = DEFAULT_SHUFFLE_BUFFER,
    **load_kwargs: Any,
) -> DocumentSource:
    """The document source of a spec (``spade design --document``, config ``designer.documents``).

    ``spec``: ``None`` or ``"builtin"`` (:class:`BuiltinDocuments`), an existing file or folder
    (:class:`LocalDocuments`), or ``"hf:<dataset>[:<config>]"`` (:class:`HFDocuments`). The built-in
    corpus ignores ``text_field`` and ``shuffle_buffer``; ``load_kwargs`` (``split``, ``data_files``,
    ``resume``...) go to :class:`HFDocuments`, for ``hf:`` only (else TypeError).

    Raises:
        DocumentError: ``spec`` is none of these, or the source itself raised.
    """
    expected = (
        "expected 'builtin', an existing .jsonl/.parquet/.txt file or folder of them, "
        "or 'hf:<dataset>[:<config>]' for a Hugging Face dataset"
    )
    text = "builtin" if spec is None else os.fspath(spec).strip()
    if not text.startswith("hf:") and load_kwargs:
        raise TypeError(f"load_documents: {', '.join(sorted(load_kwargs))} apply only to 'hf:' sources, not {text!r}")
    if text.lower() == "builtin":
        return BuiltinDocuments(seed=seed, max_tokens=max_tokens, tokenizer=tokenizer)
    common: dict[str, Any] = dict(
        text_field=text_field, seed=seed, shuffle_buffer=shuffle_buffer, max_tokens=max_tokens, tokenizer=tokenizer
    )
    if text.startswith("hf:"):
        name, _, config = text[3:].partition(":")
        if not name.strip():
            raise DocumentError(f"document source {text!r} names no dataset: {expected}")
        return HFDocuments(name.strip(), config=config.strip() or None, **common, **load_kwargs)
    if text and Path(text).expanduser().exists():
        return LocalDocuments(text, **common)
    if not text:
        raise DocumentError(f"empty document source: {expected}")
    looks_like_path = os.sep in text or Path(text).suffix.lower() in SUPPORTED_SUFFIXES
    hint = (
        "no such file or folder" if looks_like_path else f"not a known source (for a Hugging Face dataset: 'hf:{text}')"
    )
    raise DocumentError(f"unknown document source {text!r}: {hint}; {expected}")
