"""Durable file writes and file locks, one definition each for the whole package: the registry,
the run folder, the cold-start cache, the model cache and the plots all use these."""

from __future__ import annotations

import fcntl
import os
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["fsync_dir", "lock_file", "locked", "read_bounded", "read_lines", "replace_atomically", "write_durably"]


def write_durably(path: Path, data: bytes, *, exclusive: bool = False) -> None:
    """Write ``data`` to ``path`` (created, or truncated) and fsync it.

    Raises:
        FileExistsError: ``exclusive`` and ``path`` exists.
        OSError: the write failed (disk full, permissions, ...).
    """
    flags = os.O_WRONLY | os.O_CREAT | (os.O_EXCL if exclusive else os.O_TRUNC)
    fd = os.open(path, flags, 0o644)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_dir(path: Path) -> None:
    """fsync the folder ``path`` (makes a rename or a new entry in it durable)."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_atomically(path: Path, data: bytes | str, *, tmp_dir: Path | None = None) -> None:
    """Replace ``path`` by a file with ``data`` (``str``: UTF-8): a reader sees the old or the new file.

    The temporary file goes in ``tmp_dir`` (same file system; default: beside ``path``). Raises
    OSError if the write or the rename failed; ``path`` is then unchanged.
    """
    raw = data.encode("utf-8") if isinstance(data, str) else data
    tmp = (tmp_dir or path.parent) / f"{path.name}.tmp-{uuid.uuid4().hex[:8]}"
    try:
        write_durably(tmp, raw, exclusive=True)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    fsync_dir(path.parent)


def lock_file(path: Path, *, blocking: bool = True) -> int:
    """Take an exclusive ``flock`` on ``path`` (created if missing); return the descriptor, whose
    ``os.close`` (or the process's end: no stale lock) releases it.

    Raises:
        BlockingIOError: not ``blocking`` (waiting for another holder) and another process holds it.
        OSError: the file cannot be created or opened.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
    except BaseException:
        os.close(fd)
        raise
    return fd


@contextmanager
def locked(path: Path) -> Iterator[int]:
    """Hold :func:`lock_file` on ``path`` for the ``with`` block; yield the descriptor."""
    fd = lock_file(path)
    try:
        yield fd
    finally:
        os.close(fd)


def read_bounded(path: Path, max_bytes: int) -> str | None:
    """The UTF-8 text of ``path`` (undecodable bytes replaced) when it exists and holds at most
    ``max_bytes`` bytes; ``None`` otherwise (missing, unreadable or larger: never read whole)."""
    try:
        with open(path, "rb") as fh:
            data = fh.read(max_bytes + 1)
    except OSError:
        return None
    return None if len(data) > max_bytes else data.decode("utf-8", "replace")


def read_lines(path: Path, max_line_bytes: int) -> Iterator[tuple[int, str | None]]:
    """``(line number, text)`` for each line of ``path``, read in chunks: a line longer than
    ``max_line_bytes`` gives ``None`` and is skipped without being held (undecodable bytes are
    replaced). Raises OSError when ``path`` cannot be opened."""
    with open(path, "rb") as fh:
        number = 0
        while True:
            line = fh.readline(max_line_bytes + 1)
            if not line:
                return
            number += 1
            if len(line) <= max_line_bytes or line.endswith(b"\n"):
                yield number, line.decode("utf-8", "replace")
                continue
            while line and not line.endswith(b"\n"):  # the rest of a long line, a chunk at a time
                line = fh.readline(1 << 20)
            yield number, None
