"""The package's one durable-write helper (``spade_gym.files``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from spade_gym.files import replace_atomically, write_durably


def test_replace_atomically_writes_and_replaces_without_leftovers(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    replace_atomically(target, "première")
    assert target.read_bytes() == "première".encode()
    replace_atomically(target, b"\x00second")
    assert target.read_bytes() == b"\x00second"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["state.json"]


def test_a_failed_replacement_leaves_the_old_file(tmp_path: Path) -> None:
    target = tmp_path / "state.json"
    target.write_text("old")
    with pytest.raises(FileNotFoundError):
        replace_atomically(target, "new", tmp_dir=tmp_path / "missing")
    assert target.read_text() == "old"
    (tmp_path / "folder").mkdir()
    with pytest.raises(IsADirectoryError):
        replace_atomically(tmp_path / "folder", "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["folder", "state.json"]


def test_write_durably_exclusive_refuses_an_existing_file(tmp_path: Path) -> None:
    target = tmp_path / "a"
    write_durably(target, b"one", exclusive=True)
    with pytest.raises(FileExistsError):
        write_durably(target, b"two", exclusive=True)
    write_durably(target, b"2")
    assert target.read_bytes() == b"2"


def test_lock_file_is_exclusive_until_its_descriptor_closes(tmp_path: Path) -> None:
    import os

    from spade_gym.files import lock_file, locked

    path = tmp_path / ".lock"
    with locked(path):
        with pytest.raises(BlockingIOError):  # flock is per open file: a second open conflicts, even here
            lock_file(path, blocking=False)
    fd = lock_file(path, blocking=False)  # released when the block ended
    os.close(fd)
    with pytest.raises(FileNotFoundError):
        lock_file(tmp_path / "missing" / ".lock")
