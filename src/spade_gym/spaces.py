"""``UnicodeText``: a Gymnasium text space that admits any Unicode string up to a length.

Gymnasium's :class:`~gymnasium.spaces.Text` rejects characters outside its charset and its
shared-memory layout silently drops them; this module widens ``contains`` and registers a UTF-8 byte
layout, so ``AsyncVectorEnv`` (``shared_memory=True``) returns observations exactly as produced.
"""

from __future__ import annotations

import multiprocessing as mp
import string
from collections.abc import Sequence
from typing import Any, overload

import numpy as np
from gymnasium.spaces import Text
from gymnasium.vector.utils.shared_memory import (
    create_shared_memory,
    read_from_shared_memory,
    write_to_shared_memory,
)

__all__ = ["UnicodeText", "SharedTextBatch"]

#: Characters :meth:`UnicodeText.sample` draws from: printable ASCII without vertical tab/form feed.
SAMPLE_CHARSET = string.ascii_letters + string.digits + string.punctuation + " \n"
_LENGTH_BYTES = 8


class UnicodeText(Text):
    """Any ``str`` of ``min_length`` to ``max_length`` characters, whatever its characters.

    Args:
        max_length, min_length: longest and shortest string, characters.
        max_bytes: longest UTF-8 encoding, bytes, sizing shared memory (default ``4 * max_length``).
        sample_max_length: longest string :meth:`sample` draws, characters.
        seed: seed of the space's sampler.

    Example:
        >>> space = UnicodeText(max_length=10)
        >>> space.contains("naïve ✓"), space.contains("x" * 11), space.contains(3)
        (True, False, False)
    """

    def __init__(
        self,
        max_length: int,
        *,
        min_length: int = 0,
        max_bytes: int | None = None,
        sample_max_length: int = 64,
        seed: int | np.random.Generator | None = None,
    ) -> None:
        super().__init__(max_length=max_length, min_length=min_length, charset=SAMPLE_CHARSET, seed=seed)
        self.max_bytes = int(max_bytes) if max_bytes is not None else 4 * self.max_length
        self.sample_max_length = int(sample_max_length)

    def contains(self, x: Any) -> bool:
        """Whether ``x`` is a ``str`` of allowed length (any characters)."""
        return isinstance(x, str) and self.min_length <= len(x) <= self.max_length

    def sample(self, mask: Any = None, probability: Any = None) -> str:
        """A random printable string of at most ``sample_max_length`` characters (with ``mask`` or
        ``probability``: :meth:`gymnasium.spaces.Text.sample` over :data:`SAMPLE_CHARSET`)."""
        if mask is not None or probability is not None:
            return super().sample(mask=mask, probability=probability)
        high = max(self.min_length, min(self.max_length, self.sample_max_length))
        length = int(self.np_random.integers(self.min_length, high + 1))
        chars = self.np_random.choice(np.array(list(SAMPLE_CHARSET)), size=length)
        return "".join(chars.tolist())

    def __repr__(self) -> str:
        return f"UnicodeText({self.min_length}, {self.max_length})"

    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, UnicodeText)
            and self.min_length == other.min_length
            and self.max_length == other.max_length
        )

    __hash__ = None  # type: ignore[assignment]  # mutable, as gymnasium spaces are


def _stride(space: UnicodeText) -> int:
    return _LENGTH_BYTES + space.max_bytes


@create_shared_memory.register(UnicodeText)
def _create_unicode_shared_memory(space: UnicodeText, n: int = 1, ctx: Any = mp) -> Any:
    return ctx.Array("B", n * _stride(space), lock=True)


class SharedTextBatch(Sequence[str]):
    """A live, read-only view of ``n`` texts in shared memory, decoded on access.

    Gymnasium reads shared memory once and relies on a view that the workers' writes update; a
    ``str`` cannot be one. ``copy.deepcopy`` (``AsyncVectorEnv(copy=True)``) gives a ``tuple``.
    """

    def __init__(self, space: UnicodeText, shared_memory: Any, n: int) -> None:
        self._data = np.frombuffer(shared_memory.get_obj(), dtype=np.uint8).reshape((n, _stride(space)))

    def __len__(self) -> int:
        return int(self._data.shape[0])

    @overload
    def __getitem__(self, index: int) -> str: ...

    @overload
    def __getitem__(self, index: slice) -> tuple[str, ...]: ...

    def __getitem__(self, index: int | slice) -> str | tuple[str, ...]:
        if isinstance(index, slice):
            return tuple(self[i] for i in range(*index.indices(len(self))))
        row = self._data[index]
        length = int.from_bytes(row[:_LENGTH_BYTES].tobytes(), "little")
        return row[_LENGTH_BYTES : _LENGTH_BYTES + length].tobytes().decode("utf-8")

    def __deepcopy__(self, memo: dict[int, Any]) -> tuple[str, ...]:
        return tuple(self)

    def __copy__(self) -> tuple[str, ...]:
        return tuple(self)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, (tuple, list, SharedTextBatch)) and tuple(self) == tuple(other)

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"SharedTextBatch({tuple(self)!r})"


@read_from_shared_memory.register(UnicodeText)
def _read_unicode_from_shared_memory(space: UnicodeText, shared_memory: Any, n: int = 1) -> SharedTextBatch:
    return SharedTextBatch(space, shared_memory, n)


@write_to_shared_memory.register(UnicodeText)
def _write_unicode_to_shared_memory(space: UnicodeText, index: int, value: str, shared_memory: Any) -> None:
    encoded = value.encode("utf-8")
    if len(encoded) > space.max_bytes:
        raise ValueError(
            f"text of {len(encoded)} bytes does not fit the space's shared memory of {space.max_bytes} bytes"
        )
    stride = _stride(space)
    data = np.frombuffer(shared_memory.get_obj(), dtype=np.uint8)
    row = data[index * stride : (index + 1) * stride]
    row[:_LENGTH_BYTES] = np.frombuffer(len(encoded).to_bytes(_LENGTH_BYTES, "little"), dtype=np.uint8)
    row[_LENGTH_BYTES : _LENGTH_BYTES + len(encoded)] = np.frombuffer(encoded, dtype=np.uint8)
