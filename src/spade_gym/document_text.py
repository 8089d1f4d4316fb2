"""The text of a document: :func:`clean_text` (line breaks, junk, control characters, NFC) and
:func:`cap_tokens` (a token budget, cut at a paragraph or sentence end), and :func:`make_document`, which
applies both. The sources of :mod:`spade_gym.documents` read documents through them; re-exported there.
"""

from __future__ import annotations

import hashlib
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from itertools import islice
from typing import Any

#: Default token budget of one document (about 4 KiB of English text with the regex approximation).
DEFAULT_MAX_TOKENS = 1024
#: A cleaned text shorter than this many characters is rejected.
MIN_CHARS = 20
#: A text is binary junk when more than this share of its characters are of Unicode category ``C*``
#: (``\n`` and ``\t`` aside), or more than the second are U+FFFD (a failed decoding).
MAX_JUNK_SHARE = 0.15
MAX_REPLACEMENT_SHARE = 0.02

#: A tokenizer for :func:`cap_tokens`: text in, token ids out (``TransformersPolicy(...).tokenizer.encode``).
Tokenizer = Callable[[str], Sequence[int]]

RAW_CHARS_PER_TOKEN = 32  # raw text beyond max_tokens * this (+ slack) is not even cleaned
_TITLE_CHARS = 200


@dataclass(frozen=True)
class Document:
    """One cleaned, token-capped document (``text``), its title (one line, <= 200 characters) and source.

    ``source`` is the provenance the registry stores as an environment's ``document``: ``kind``
    (``"builtin"``, ``"file"``, ``"parquet"``, ``"hf"``), ``sha256`` of ``text``, ``tokens``,
    ``truncated``, then where it is: ``id``; ``path`` and ``line`` (1-based) or ``row`` (0-based);
    or ``dataset``, ``config``, ``split``, ``seed``, ``epoch`` and ``index`` (in the epoch's stream).
    """

    text: str
    source: dict[str, Any]
    title: str | None = None


_BREAKS = re.compile("\r\n?|[\x0b\x0c\x85\u2028]")
_CONTROL = re.compile("[\x00-\x08\x0e-\x1f\x7f-\x9f\ud800-\udfff\ufeff]")
_TRAILING_SPACE = re.compile(r"[^\S\n]+$", re.MULTILINE)
_BLANK_LINES = re.compile(r"\n{3,}")
_SPACES = re.compile(r"\s+")

_CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\U00020000-\U0002fa1f"
_TOKEN = re.compile(rf"[{_CJK}]|[^\W{_CJK}]+|[^\w\s]")
_SENTENCE_END = re.compile(r"(?s:.*)[.!?;:\u3002\uff01\uff1f][\"'\u201d\u2019)\]]*(?=\s)")


# ASCII fast paths (most documents): byte tables give the same answers as the regexes, in C.
_ASCII_CONTROL = bytes(b for b in range(128) if unicodedata.category(chr(b))[0] == "C" and chr(b) not in "\n\t")
_ASCII_NOT_WORD = bytes(b for b in range(128) if not (chr(b).isalnum() or chr(b) == "_"))
_ASCII_PUNCT = bytes(b for b in _ASCII_NOT_WORD if not chr(b).isspace())  # [^\w\s]
_ASCII_BREAK_WORDS = bytes.maketrans(_ASCII_NOT_WORD, b" " * len(_ASCII_NOT_WORD))


def _count_tokens(text: str) -> int:
    """Number of approximate tokens (``_TOKEN`` matches) in ``text``."""
    if text.isascii():
        raw = text.encode("ascii")
        punctuation = len(raw) - len(raw.translate(None, _ASCII_PUNCT))
        return punctuation + len(raw.translate(_ASCII_BREAK_WORDS).split())
    return len(_TOKEN.findall(text))


def _junk_counts(text: str) -> tuple[int, int]:
    """(characters of category ``C*`` other than ``\\n``/``\\t``, U+FFFD characters) in ``text``."""
    if text.isascii():
        raw = text.encode("ascii")
        return len(raw) - len(raw.translate(None, _ASCII_CONTROL)), 0
    bad = 0
    for char in set(text):
        if unicodedata.category(char)[0] == "C" and char not in "\n\t":
            bad += text.count(char)
    return bad, text.count("\ufffd")


def clean_text(text: str, *, min_chars: int = MIN_CHARS) -> str | None:
    """The cleaned ``text``, or ``None`` for binary junk or fewer than ``min_chars`` characters.

    Line breaks become ``\\n`` (U+2029 a blank line); junk is judged by :data:`MAX_JUNK_SHARE` and
    :data:`MAX_REPLACEMENT_SHARE`; control characters (but ``\\n``, ``\\t``), lone surrogates and U+FEFF
    are removed; then NFC, trailing spaces stripped per line, blank-line runs collapsed, the whole
    stripped. Text of every script comes through unchanged. TypeError if ``text`` is not a ``str``.
    """
    if not isinstance(text, str):
        raise TypeError(f"clean_text expects str, got {type(text).__name__}")
    if not text:
        return None
    is_ascii = text.isascii()
    if "\r" in text or "\x0b" in text or "\x0c" in text or not is_ascii:
        text = _BREAKS.sub("\n", text)
        if "\u2029" in text:
            text = text.replace("\u2029", "\n\n")
    bad, replacement = _junk_counts(text)
    if bad > MAX_JUNK_SHARE * len(text) or replacement > MAX_REPLACEMENT_SHARE * len(text):
        return None
    if bad:
        text = _CONTROL.sub("", text)
    if not is_ascii:
        text = unicodedata.normalize("NFC", text)
    if not is_ascii or " \n" in text or "\t\n" in text:
        text = _TRAILING_SPACE.sub("", text)
    if "\n\n\n" in text:
        text = _BLANK_LINES.sub("\n\n", text)
    text = text.strip()
    return text if len(text) >= min_chars else None


def _keep_clusters(text: str, cut: int) -> int:
    """Move ``cut`` back so that no combining mark is split from its base character."""
    while 0 < cut < len(text) and unicodedata.category(text[cut])[0] == "M":
        cut -= 1
    return cut


def _nicer_cut(text: str, cut: int) -> int:
    """A paragraph or sentence end in the last ~20% of ``text[:cut]``, else ``cut`` itself."""
    low = cut - cut // 5
    paragraph = text.rfind("\n\n", low, cut)
    if paragraph > 0:
        return paragraph
    match = _SENTENCE_END.match(text, low, cut)
    if match is not None and match.end() > low:
        return match.end()
    line = text.rfind("\n", low, cut)
    return line if line > 0 else cut


def cap_tokens(text: str, max_tokens: int, tokenizer: Tokenizer | None = None) -> tuple[str, int, bool]:
    """Cap ``text`` to ``max_tokens >= 1`` tokens (else ValueError), cutting between tokens.

    Without a ``tokenizer`` a token is approximated as a run of word characters, one CJK character or
    one other non-space character (subword tokenizers give ~1.3x as many for English); with one the
    count is exact, the cut found by binary search over those boundaries. A cut moves back to a
    paragraph or sentence end in the last ~20% of the kept text, and never splits combining marks.

    Returns:
        ``(capped_text, tokens, truncated)``: the kept prefix (right-stripped), its token count
        (``<= max_tokens``) and whether anything was cut.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be at least 1, got {max_tokens}")
    if tokenizer is None:
        return _cap_regex(text, max_tokens)
    return _cap_tokenizer(text, max_tokens, tokenizer)


def _cap_regex(text: str, max_tokens: int) -> tuple[str, int, bool]:
    if len(text) <= max_tokens * 8:  # the common case, a text within budget: count it at once
        count = _count_tokens(text)
        if count <= max_tokens:
            return text, count, False
    last = next(islice(_TOKEN.finditer(text), max_tokens - 1, None), None)  # the max_tokens-th token
    if last is None:
        return text, _count_tokens(text), False
    if _TOKEN.search(text, last.end()) is None:
        return text, max_tokens, False
    cut = _keep_clusters(text, _nicer_cut(text, last.end()))
    capped = text[:cut].rstrip()
    return capped, _count_tokens(capped), True


def _largest_fit(fits: Callable[[int], bool], lo: int, hi: int, default: int) -> int:
    """The largest ``x`` in ``[lo, hi]`` with ``fits(x)`` (monotone), by binary search; else ``default``."""
    while lo <= hi:
        mid = (lo + hi) // 2
        if fits(mid):
            default, lo = mid, mid + 1
        else:
            hi = mid - 1
    return default


def _cap_tokenizer(text: str, max_tokens: int, tokenizer: Tokenizer) -> tuple[str, int, bool]:
    window = text[: max_tokens * RAW_CHARS_PER_TOKEN]
    count = len(tokenizer(window))
    if count <= max_tokens:
        if len(window) == len(text):
            return text, count, False
        count = len(tokenizer(text))
        if count <= max_tokens:
            return text, count, False
        window = text

    def fits(end: int) -> bool:
        return len(tokenizer(window[:end])) <= max_tokens

    # the longest fitting prefix ending at a token boundary (anywhere, if even the first word is over budget)
    ends = [m.end() for m in _TOKEN.finditer(window)]
    best = _largest_fit(lambda i: fits(ends[i]), 0, len(ends) - 1, -1)
    cut = ends[best] if best >= 0 else _largest_fit(fits, 1, ends[0] if ends else len(window), 0)
    capped = window[: _keep_clusters(window, cut)].rstrip()
    nicer = window[: _keep_clusters(window, _nicer_cut(window, cut))].rstrip()
    if nicer and nicer != capped:
        count = len(tokenizer(nicer))
        if count <= max_tokens:
            return nicer, count, True
    return capped, len(tokenizer(capped)), True


def one_line(value: Any, limit: int) -> str | None:
    """``value`` as a short single line (titles, ids), or None when it is not usable text."""
    if isinstance(value, bool) or not isinstance(value, str | int):
        return None
    line = _SPACES.sub(" ", _CONTROL.sub("", str(value))).strip()[:limit]
    return line or None


def _trim_raw(text: str, limit: int) -> tuple[str, bool]:
    """Cut a raw text longer than ``limit`` characters, at a line or word end when one is near."""
    if len(text) <= limit:
        return text, False
    cut = text.rfind("\n", limit // 2, limit)
    if cut < 0:
        cut = text.rfind(" ", limit // 2, limit)
    return text[: cut if cut > 0 else limit], True


def make_document(
    text: str,
    source: dict[str, Any] | None = None,
    *,
    title: str | None = None,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    tokenizer: Tokenizer | None = None,
) -> Document | None:
    """A :class:`Document` from a raw ``str`` ``text``, cleaned and capped like a source's, or ``None``
    when :func:`clean_text` rejects it (TypeError for a non-``str``).

    ``source`` holds provenance fields (default ``{"kind": "text"}``); ``sha256``, ``tokens`` and
    ``truncated`` are added. ``max_tokens`` and ``tokenizer`` as in :func:`cap_tokens`.
    """
    if not isinstance(text, str):
        raise TypeError(f"a document's text must be str, got {type(text).__name__}")
    return capped_document(text, dict(source or {"kind": "text"}), title, max_tokens, tokenizer)


def capped_document(
    text: str, source: dict[str, Any], title: Any, max_tokens: int, tokenizer: Tokenizer | None
) -> Document | None:
    """Trim, clean and cap ``text``; ``source`` gets ``sha256``, ``tokens`` and ``truncated``."""
    raw, trimmed = _trim_raw(text, max_tokens * RAW_CHARS_PER_TOKEN + 4096)
    cleaned = clean_text(raw)
    if cleaned is None:
        return None
    capped, tokens, truncated = cap_tokens(cleaned, max_tokens, tokenizer)
    source.update(
        sha256=hashlib.sha256(capped.encode("utf-8")).hexdigest(), tokens=tokens, truncated=truncated or trimmed
    )
    return Document(capped, source, one_line(title, _TITLE_CHARS))
