"""Near-duplicate detection of environment programs.

Two signatures of a program's source, neither of which runs it:

1. :func:`ast_hash`: the SHA-256 of ``ast.dump`` of the tree without docstrings, with the
   environment's own name (``Env.name``) replaced by a placeholder in string literals and every
   non-builtin name the program binds (``self`` attributes included) renamed ``_0``, ``_1``, ... in
   order of first appearance: equal hashes mean a renamed copy.
2. :func:`minhash`: a MinHash sketch (Broder, "On the resemblance and containment of documents",
   1997) of the :data:`SHINGLE_SIZE`-token shingles of the same tree unparsed, every identifier not a
   keyword or builtin as ``$`` ("type-2" code-clone detection); :class:`IndexedNearDuplicates` finds
   the candidates above a Jaccard threshold with ``datasketch.MinHashLSH``.

Signatures are stored as bytes (:func:`minhash_to_bytes`) in the format :data:`SIGNATURE_VERSION`.
"""

from __future__ import annotations

import ast
import builtins
import hashlib
import keyword
import re
from collections.abc import Set
from dataclasses import dataclass
from importlib.metadata import version as _version
from typing import TYPE_CHECKING, Any

import numpy as np

from spade_gym.contract import parse_module

if TYPE_CHECKING:  # datasketch costs ~0.7 s to import: loaded only when a sketch is made
    from datasketch import MinHash

    from spade_gym.registry.index import Index

__all__ = [
    "NUM_PERM",
    "IndexedNearDuplicates",
    "SHINGLE_SIZE",
    "SIGNATURE_VERSION",
    "Signatures",
    "ast_hash",
    "jaccard",
    "lsh_params",
    "minhash",
    "minhash_from_bytes",
    "minhash_to_bytes",
    "signatures",
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
_HAS_SCHEME = int(_version("datasketch").split(".")[0]) >= 2
_SCHEME = "affine32" if _HAS_SCHEME else "legacy"
#: Names the signature format; the index is rebuilt when the version it was written with differs.
#: v2: ``ast_hash`` and the tokens also normalise the environment's name and ``self`` attributes.
SIGNATURE_VERSION = f"minhash-{_SCHEME}-p{NUM_PERM}-seed{MINHASH_SEED}-k{SHINGLE_SIZE}-v2"
#: The placeholder that stands for the environment's own name inside string literals.
NAME_TOKEN = "\x00name\x00"

_BUILTINS = frozenset(dir(builtins))
# A lexer for ``ast.unparse`` output: identifiers, numbers, strings, multi-character operators, any
# other character; the stdlib tokenizer gives the same stream at about eight times the cost.
_LEXEME = re.compile(
    r"""[^\W\d]\w*|\d[\w.]*|'''(?:[^\\]|\\.)*?'''|\"\"\"(?:[^\\]|\\.)*?\"\"\"|'(?:[^'\\\n]|\\.)*'"""
    r"""|"(?:[^"\\\n]|\\.)*"|\*\*=?|//=?|>>=?|<<=?|->|:=|[-+*/%&|^@<>=!]=|\S""",
    re.DOTALL,
)
_PERMUTATIONS: Any = None


def _parse_without_docstrings(source: str) -> tuple[ast.Module, list[ast.AST]] | None:
    """The tree without docstrings and its nodes (breadth-first), or ``None`` if it does not parse."""
    tree = parse_module(source)
    if tree is None:
        return None
    nodes = list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                if isinstance(body[0].value.value, str):
                    del body[0]
                    if not body and not isinstance(node, ast.Module):
                        body.append(ast.Pass())
    return tree, nodes


def _name_field(node: ast.AST) -> str | None:
    """The field of ``node`` holding a name (or, for ``global``/``nonlocal``, a list of names), if any."""
    if isinstance(node, ast.Name):
        return "id"
    if isinstance(node, (ast.arg, ast.keyword)):
        return "arg"
    if isinstance(
        node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.ExceptHandler, ast.MatchAs, ast.MatchStar)
    ):
        return "name"
    if isinstance(node, ast.alias):
        return "asname"
    if isinstance(node, (ast.Global, ast.Nonlocal)):
        return "names"
    return "rest" if isinstance(node, ast.MatchMapping) else None


def _bound_names(nodes: list[ast.AST]) -> set[str]:
    """Names the program binds itself (and so may rename freely), builtins excluded."""
    bound: set[str] = set()
    for node in nodes:
        field = _name_field(node)
        if field is None or isinstance(node, ast.keyword) or isinstance(getattr(node, "ctx", None), ast.Load):
            continue
        value = getattr(node, field)
        if isinstance(value, list):
            bound.update(value)
        elif value:
            bound.add(value)
    return bound - _BUILTINS


def _self_attributes(nodes: list[ast.AST]) -> tuple[set[int], set[str]]:
    """The ``id`` of each ``self.<attr>`` node, and the attribute names assigned on ``self``."""
    found = [
        n for n in nodes if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Name) and n.value.id == "self"
    ]
    assigned = {n.attr for n in found if isinstance(n.ctx, ast.Store)}
    return {id(n) for n in found}, assigned


def _env_name(tree: ast.Module) -> str | None:
    """The string assigned to ``name`` in the module-level ``class Env``, if any."""
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == "Env":
            for item in node.body:
                if (
                    isinstance(item, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "name" for t in item.targets)
                    and isinstance(item.value, ast.Constant)
                    and isinstance(item.value.value, str)
                ):
                    return item.value.value
    return None


def _normalise_env_name(tree: ast.Module, nodes: list[ast.AST]) -> None:
    """Replace the environment's own name by :data:`NAME_TOKEN` in every string literal."""
    name = _env_name(tree)
    if not name:
        return
    for node in nodes:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and name in node.value:
            node.value = node.value.replace(name, NAME_TOKEN)


def _rename(nodes: list[ast.AST], bound: set[str], self_nodes: Set[int], attributes: Set[str]) -> None:
    """Rename the ``bound`` names to ``_0``, ``_1``, ... in order of first appearance, and the
    ``self_nodes`` attributes in ``attributes`` or ``bound`` from the same counter in their own namespace."""
    mapping: dict[str, str] = {}

    def new(key: str) -> str:
        return mapping.setdefault(key, f"_{len(mapping)}")

    for node in nodes:
        if isinstance(node, ast.Attribute):
            if id(node) in self_nodes and (node.attr in attributes or node.attr in bound):
                node.attr = new("." + node.attr)  # no identifier starts with a dot: the attributes' own namespace
        elif (field := _name_field(node)) is not None and (value := getattr(node, field)):
            renamed = [new(n) if n in bound else n for n in (value if isinstance(value, list) else [value])]
            setattr(node, field, renamed if isinstance(value, list) else renamed[0])


def _lex(text: str) -> list[str]:
    """The lexemes of ``text``, identifiers that are not keywords or builtins as :data:`IDENTIFIER_TOKEN`."""
    return [
        IDENTIFIER_TOKEN if (t[0].isalpha() or t[0] == "_") and not keyword.iskeyword(t) and t not in _BUILTINS else t
        for t in _LEXEME.findall(text)
    ]


@dataclass(frozen=True)
class Signatures:
    """Both signatures of one program: :func:`ast_hash`, and the tokens of its shingles (the source without
    docstrings after an ``ast.unparse`` round trip, identifiers as :data:`IDENTIFIER_TOKEN`; source that
    does not parse is split on whitespace)."""

    ast_hash: str
    tokens: tuple[str, ...]

    def minhash(self) -> MinHash:
        """MinHash sketch of the set of :data:`SHINGLE_SIZE`-token shingles (fewer tokens: one shingle)."""
        sketch = _new_minhash()
        toks, k = self.tokens, SHINGLE_SIZE
        count = max(len(toks) - k + 1, 1) if toks else 0
        shingles = {"\x1f".join(toks[i : i + k]).encode("utf-8", "surrogatepass") for i in range(count)}
        if shingles:
            sketch.update_batch(list(shingles))
        return sketch


def signatures(source: str) -> Signatures:
    """:func:`ast_hash` and the tokens of any text, with one parse; never raises."""
    parsed = _parse_without_docstrings(source)
    if parsed is not None:
        tree, nodes = parsed
        try:
            _normalise_env_name(tree, nodes)
            toks = tuple(_lex(ast.unparse(tree)))  # before renaming: the tokens keep no names anyway
            self_nodes, self_attributes = _self_attributes(nodes)
            _rename(nodes, _bound_names(nodes), self_nodes, self_attributes)
            return Signatures(
                "ast:" + hashlib.sha256(ast.dump(tree).encode("utf-8", "surrogatepass")).hexdigest(), toks
            )
        except (RecursionError, ValueError):
            pass  # a tree ast cannot unparse: the text's hash below
    return Signatures(
        "src:" + hashlib.sha256(source.encode("utf-8", "surrogatepass")).hexdigest(), tuple(source.split())
    )


def ast_hash(source: str) -> str:
    """Structural hash, equal for renamed copies (see the module docstring): ``"ast:"`` and the SHA-256
    hex of the normalised tree's ``ast.dump``, or for source that does not parse ``"src:"`` and that of the text."""
    return signatures(source).ast_hash


def _new_minhash(hashvalues: np.ndarray | None = None) -> MinHash:
    """A sketch with the first one's permutations (computing them costs more than the sketch)."""
    global _PERMUTATIONS
    from datasketch import MinHash

    scheme: dict[str, Any] = {"scheme": _SCHEME} if _HAS_SCHEME else {}
    sketch = MinHash(NUM_PERM, MINHASH_SEED, hashvalues=hashvalues, permutations=_PERMUTATIONS, **scheme)
    _PERMUTATIONS = sketch.permutations
    return sketch


def minhash(source: str) -> MinHash:
    """``datasketch.MinHash`` (:data:`NUM_PERM` permutations, seed :data:`MINHASH_SEED`) of the shingles of :class:`Signatures`;
    ``a.jaccard(b)`` estimates the Jaccard similarity J with standard error ``sqrt(J (1 - J) / 128)``."""
    return signatures(source).minhash()


def minhash_to_bytes(sketch: MinHash) -> bytes:
    """The sketch's hash values as ``NUM_PERM`` little-endian uint64 (``8 * NUM_PERM`` bytes)."""
    return np.asarray(sketch.hashvalues, dtype="<u8").tobytes()


def minhash_from_bytes(data: bytes) -> MinHash:
    """Inverse of :func:`minhash_to_bytes`; ValueError unless ``data`` is ``8 * NUM_PERM`` bytes."""
    if len(data) != 8 * NUM_PERM:
        raise ValueError(f"a MinHash signature is {8 * NUM_PERM} bytes; got {len(data)}")
    return _new_minhash(np.frombuffer(data, dtype="<u8").astype(np.uint64))


def jaccard(a: MinHash | bytes, b: MinHash | bytes) -> float:
    """Estimated Jaccard similarity (0 to 1) of two sketches, given as ``MinHash`` or as bytes."""
    first = minhash_from_bytes(a) if isinstance(a, bytes) else a
    second = minhash_from_bytes(b) if isinstance(b, bytes) else b
    return float(first.jaccard(second))


#: Probability with which :class:`IndexedNearDuplicates` finds a pair exactly at its threshold.
LSH_RECALL = 0.999


def lsh_params(threshold: float, recall: float = LSH_RECALL) -> tuple[int, int]:
    """LSH bands ``b >= 2`` and rows ``r`` (``b * r <= NUM_PERM``) for pairs at Jaccard ``threshold``.

    A pair of similarity ``s`` is a candidate with probability ``1 - (1 - s**r)**b`` (Leskovec,
    Rajaraman & Ullman, "Mining of Massive Datasets", Sec. 3.4); this is the largest ``r`` with
    ``b = NUM_PERM // r`` that finds a pair at ``threshold`` with probability >= ``recall``.
    """
    best = (NUM_PERM, 1)
    for r in range(1, NUM_PERM // 2 + 1):  # MinHashLSH needs at least two bands
        b = NUM_PERM // r
        if 1.0 - (1.0 - threshold**r) ** b >= recall:
            best = (b, r)
    return best


class IndexedNearDuplicates:
    """``datasketch.MinHashLSH`` over the sketches of a registry's ``index.sqlite``, for pairs at Jaccard
    ``threshold`` (bands by :func:`lsh_params`): the registry's cache, valid for one index ``epoch`` and
    filled up to index sequence number ``last_seq``."""

    def __init__(self, threshold: float, epoch: int) -> None:
        from datasketch import MinHashLSH

        self.threshold = float(threshold)
        self.epoch = epoch
        self.last_seq = 0
        self._lsh: Any = MinHashLSH(num_perm=NUM_PERM, params=lsh_params(self.threshold))
        self._sketches: dict[str, bytes] = {}

    @classmethod
    def current(cls, cached: IndexedNearDuplicates | None, index: Index, threshold: float) -> IndexedNearDuplicates:
        """``cached`` (a new one if ``None`` or of an older epoch) with the index's newer sketches added."""
        epoch = index.state().epoch
        lsh = cached if cached is not None and cached.epoch == epoch else cls(threshold, epoch)
        for seq, env_id, blob in index.signatures_after(lsh.last_seq):
            if env_id not in lsh._sketches:
                lsh._lsh.insert(env_id, minhash_from_bytes(bytes(blob)))
                lsh._sketches[env_id] = bytes(blob)
            lsh.last_seq = seq
        return lsh

    def query(self, sketch: MinHash) -> list[tuple[str, float]]:
        """``(env_id, similarity)`` of the sketches at least the threshold similar, most similar first, ties by id."""
        found = []
        for key in self._lsh.query(sketch):
            similarity = jaccard(sketch, self._sketches[key])
            if similarity >= self.threshold:
                found.append((key, similarity))
        found.sort(key=lambda item: (-item[1], item[0]))
        return found
