"""Near-duplicate detection of environment programs.

Two signatures are computed from a program's source, neither of which runs any of it:

1. :func:`ast_hash`, a structural hash: the source is parsed, docstrings are dropped, and every
   identifier the program binds itself (variables, parameters, functions, classes, import aliases)
   that is not a builtin is renamed to a positional placeholder (``_0``, ``_1``, ... in order of
   first appearance); attribute names, builtins, imported module names and literals are kept. The
   SHA-256 of ``ast.dump`` of that tree is the hash. Equal hashes mean the programs are the same up
   to comments, layout, docstrings and a consistent renaming of their own names: an exact duplicate.
2. :func:`minhash`, a MinHash sketch (Broder, "On the resemblance and containment of documents",
   1997) of the set of :data:`SHINGLE_SIZE`-token shingles of the source after the same docstring
   removal, with comments and layout dropped by the tokenizer and every identifier that is not a
   keyword or builtin replaced by one placeholder token (``$``), as in "type-2" code-clone
   detection. ``datasketch.MinHash`` with :data:`NUM_PERM` permutations estimates the Jaccard
   similarity of two programs' shingle sets; :class:`NearDuplicateIndex` wraps
   ``datasketch.MinHashLSH`` to find the candidates above a threshold without comparing against
   every registered program.

Signatures are stored in the registry's index as bytes (:func:`minhash_to_bytes`); their format is
named by :data:`SIGNATURE_VERSION`, and an index written with another version is rebuilt.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import inspect
import io
import keyword
import tokenize
from collections.abc import Iterable

import numpy as np
from datasketch import MinHash, MinHashLSH

__all__ = [
    "NUM_PERM",
    "SHINGLE_SIZE",
    "SIGNATURE_VERSION",
    "NearDuplicateIndex",
    "ast_hash",
    "jaccard",
    "minhash",
    "minhash_from_bytes",
    "minhash_to_bytes",
    "shingles",
    "tokens",
]

#: Number of MinHash permutations (the signature is ``NUM_PERM`` unsigned 64-bit values).
NUM_PERM = 128
#: Tokens per shingle.
SHINGLE_SIZE = 5
#: Seed of the MinHash permutations; signatures are comparable only with the same seed.
MINHASH_SEED = 1
#: The token that stands for every identifier in the shingles.
IDENTIFIER_TOKEN = "$"

# datasketch 2.0 names its hashing scheme and refuses to rebuild a sketch without it; older
# versions have one ("legacy") scheme and no such argument.
_HAS_SCHEME = "scheme" in inspect.signature(MinHash.__init__).parameters
_SCHEME = "affine32" if _HAS_SCHEME else "legacy"
#: Names the signature format; the index is rebuilt when the version it was written with differs.
SIGNATURE_VERSION = f"minhash-{_SCHEME}-p{NUM_PERM}-seed{MINHASH_SEED}-k{SHINGLE_SIZE}-v1"

_BUILTINS = frozenset(dir(builtins))
_SKIPPED_TOKENS = frozenset(
    {
        tokenize.COMMENT,
        tokenize.NL,
        tokenize.NEWLINE,
        tokenize.INDENT,
        tokenize.DEDENT,
        tokenize.ENCODING,
        tokenize.ENDMARKER,
    }
)
_PROTOTYPE: MinHash | None = None


def _parse_without_docstrings(source: str) -> ast.Module | None:
    """The module's tree with every docstring removed, or ``None`` if it does not parse."""
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    del body[0]
                    if not body and not isinstance(node, ast.Module):
                        body.append(ast.Pass())
    return tree


def _bound_names(tree: ast.AST) -> set[str]:
    """Names the program binds itself (and so may rename freely), builtins excluded."""
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, (ast.Store, ast.Del)):
            bound.add(node.id)
        elif isinstance(node, ast.alias) and node.asname:
            bound.add(node.asname)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            bound.update(node.names)
        elif isinstance(node, ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            bound.add(node.rest)
    return bound - _BUILTINS


class _Renamer(ast.NodeTransformer):
    """Renames the given names to ``_0``, ``_1``, ... in order of first appearance (depth first)."""

    def __init__(self, names: set[str]) -> None:
        self.names = names
        self.mapping: dict[str, str] = {}

    def _new(self, name: str) -> str:
        if name not in self.names:
            return name
        if name not in self.mapping:
            self.mapping[name] = f"_{len(self.mapping)}"
        return self.mapping[name]

    def generic_visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            node.name = self._new(node.name)
        elif isinstance(node, ast.Name):
            node.id = self._new(node.id)
        elif isinstance(node, ast.arg):
            node.arg = self._new(node.arg)
        elif isinstance(node, ast.keyword) and node.arg is not None:
            node.arg = self._new(node.arg)
        elif isinstance(node, ast.alias) and node.asname:
            node.asname = self._new(node.asname)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            node.names = [self._new(n) for n in node.names]
        elif isinstance(node, ast.ExceptHandler) and node.name:
            node.name = self._new(node.name)
        elif isinstance(node, (ast.MatchAs, ast.MatchStar)) and node.name:
            node.name = self._new(node.name)
        elif isinstance(node, ast.MatchMapping) and node.rest:
            node.rest = self._new(node.rest)
        return super().generic_visit(node)


def ast_hash(source: str) -> str:
    """Structural hash of a program: equal for programs equal up to comments, layout, docstrings
    and a consistent renaming of the names they bind.

    Args:
        source: Python source text.

    Returns:
        ``"ast:"`` followed by the SHA-256 hex digest of ``ast.dump`` of the normalised tree; for
        source that does not parse, ``"src:"`` followed by the SHA-256 of the raw text (so only
        identical text matches).
    """
    tree = _parse_without_docstrings(source)
    if tree is None:
        return "src:" + hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
    try:
        renamed = _Renamer(_bound_names(tree)).visit(tree)
        dump = ast.dump(renamed)
    except RecursionError:
        return "src:" + hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest()
    return "ast:" + hashlib.sha256(dump.encode("utf-8", "surrogatepass")).hexdigest()


def tokens(source: str) -> list[str]:
    """The token stream that :func:`shingles` is built from.

    Docstrings, comments, blank lines and indentation are dropped; every identifier that is not a
    keyword or builtin becomes :data:`IDENTIFIER_TOKEN`; operators, keywords, builtins, numbers and
    strings are kept as written (after an ``ast.unparse`` round trip that fixes their spelling).
    Source that does not parse is split on whitespace instead.

    Args:
        source: Python source text.

    Returns:
        The tokens, in order.
    """
    tree = _parse_without_docstrings(source)
    if tree is None:
        return source.split()
    try:
        text = ast.unparse(tree)
        out = []
        for tok in tokenize.generate_tokens(io.StringIO(text).readline):
            if tok.type in _SKIPPED_TOKENS:
                continue
            if tok.type == tokenize.NAME and not keyword.iskeyword(tok.string) and tok.string not in _BUILTINS:
                out.append(IDENTIFIER_TOKEN)
            else:
                out.append(tok.string)
        return out
    except (tokenize.TokenError, SyntaxError, ValueError, RecursionError):
        return source.split()


def shingles(source: str, k: int = SHINGLE_SIZE) -> set[bytes]:
    """The set of ``k``-token shingles of :func:`tokens`, each encoded as UTF-8 bytes.

    Args:
        source: Python source text.
        k: tokens per shingle (>= 1).

    Returns:
        The shingles; a program of fewer than ``k`` tokens has one shingle (all of them), an empty
        one none.

    Raises:
        ValueError: if ``k`` < 1.
    """
    if k < 1:
        raise ValueError(f"shingle size k={k}; expected an int >= 1")
    toks = tokens(source)
    if not toks:
        return set()
    if len(toks) <= k:
        return {"\x1f".join(toks).encode("utf-8", "surrogatepass")}
    return {"\x1f".join(toks[i : i + k]).encode("utf-8", "surrogatepass") for i in range(len(toks) - k + 1)}


def _prototype() -> MinHash:
    global _PROTOTYPE
    if _PROTOTYPE is None:
        _PROTOTYPE = _new_minhash()
    return _PROTOTYPE


def _new_minhash(hashvalues: np.ndarray | None = None) -> MinHash:
    kwargs: dict[str, object] = {"num_perm": NUM_PERM, "seed": MINHASH_SEED}
    if _PROTOTYPE is not None:
        kwargs["permutations"] = _PROTOTYPE.permutations  # computing them costs more than the sketch
    if hashvalues is not None:
        kwargs["hashvalues"] = hashvalues
    if _HAS_SCHEME:
        kwargs["scheme"] = _SCHEME
    return MinHash(**kwargs)  # type: ignore[arg-type]


def minhash(source: str) -> MinHash:
    """MinHash sketch (:data:`NUM_PERM` permutations, seed :data:`MINHASH_SEED`) of :func:`shingles`.

    Args:
        source: Python source text.

    Returns:
        A ``datasketch.MinHash``; ``a.jaccard(b)`` estimates the Jaccard similarity of two programs'
        shingle sets with standard error about ``sqrt(J (1 - J) / 128)``.
    """
    _prototype()
    sketch = _new_minhash()
    items = shingles(source)
    if items:
        sketch.update_batch(list(items))
    return sketch


def minhash_to_bytes(sketch: MinHash) -> bytes:
    """The sketch's hash values as ``NUM_PERM`` little-endian uint64 (``8 * NUM_PERM`` bytes)."""
    return np.asarray(sketch.hashvalues, dtype="<u8").tobytes()


def minhash_from_bytes(data: bytes) -> MinHash:
    """Inverse of :func:`minhash_to_bytes`.

    Raises:
        ValueError: if ``data`` is not ``8 * NUM_PERM`` bytes long.
    """
    if len(data) != 8 * NUM_PERM:
        raise ValueError(f"a MinHash signature is {8 * NUM_PERM} bytes; got {len(data)}")
    _prototype()
    return _new_minhash(np.frombuffer(data, dtype="<u8").astype(np.uint64))


def jaccard(a: MinHash | bytes, b: MinHash | bytes) -> float:
    """Estimated Jaccard similarity (0 to 1) of two sketches, given as ``MinHash`` or as bytes."""
    first = minhash_from_bytes(a) if isinstance(a, bytes) else a
    second = minhash_from_bytes(b) if isinstance(b, bytes) else b
    return float(first.jaccard(second))


def lsh_threshold(threshold: float) -> float:
    """The threshold the LSH is built for when candidates at ``threshold`` are wanted.

    ``MinHashLSH`` tunes its bands so that pairs near its threshold are found about as often as
    they are missed; built 0.15 lower, it returns pairs at ``threshold`` as candidates with
    probability above 99.9% (for ``threshold`` >= 0.5), and :class:`NearDuplicateIndex` then checks
    every candidate with the full sketch.
    """
    return min(max(threshold - 0.15, 0.05), 0.95)


class NearDuplicateIndex:
    """Candidates for near duplicates: ``datasketch.MinHashLSH`` over the sketches of many programs.

    Args:
        threshold: the Jaccard similarity (0 < threshold <= 1) whose pairs should be found; the
            LSH is built for :func:`lsh_threshold` of it, and :meth:`query` returns only keys whose
            full estimated similarity is at least ``threshold``.

    Raises:
        ValueError: if ``threshold`` is not in (0, 1].
    """

    def __init__(self, threshold: float) -> None:
        if not 0.0 < threshold <= 1.0:
            raise ValueError(f"near-duplicate threshold {threshold!r}; expected a number in (0, 1]")
        self.threshold = float(threshold)
        self._lsh = MinHashLSH(threshold=lsh_threshold(threshold), num_perm=NUM_PERM)
        self._sketches: dict[str, bytes] = {}

    def __len__(self) -> int:
        return len(self._sketches)

    def __contains__(self, key: object) -> bool:
        return key in self._sketches

    def insert(self, key: str, signature: bytes) -> None:
        """Add one program's signature (from :func:`minhash_to_bytes`) under ``key``; a key already
        present is left as it is."""
        if key in self._sketches:
            return
        self._lsh.insert(key, minhash_from_bytes(signature))
        self._sketches[key] = signature

    def insert_many(self, items: Iterable[tuple[str, bytes]]) -> None:
        """:meth:`insert` for each ``(key, signature)``."""
        for key, signature in items:
            self.insert(key, signature)

    def query(self, sketch: MinHash) -> list[tuple[str, float]]:
        """Keys whose estimated Jaccard similarity to ``sketch`` is at least the threshold.

        Returns:
            ``(key, similarity)`` pairs, most similar first (ties by key).
        """
        found = []
        for key in self._lsh.query(sketch):
            similarity = jaccard(sketch, self._sketches[key])
            if similarity >= self.threshold:
                found.append((key, similarity))
        found.sort(key=lambda item: (-item[1], item[0]))
        return found
