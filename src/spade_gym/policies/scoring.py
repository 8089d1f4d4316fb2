"""Scoring completions for the update: shared-prefix packing, token budgets, checkpointing.

:func:`score_passes` yields the completion logprobs of a batch one forward pass at a time (the
trainer runs each pass's backward before the next), a pass holding at most a budget of tokens.
:func:`pack` inserts every ``prompt + completion`` into a token trie and lays each row out
depth-first: each token attends to exactly its own root path and its position id is its depth, so
the logits (and gradients) are those of encoding each sequence whole while every shared token (a
GRPO group's prompt, an earlier turn) is computed once: the shared-prefix forward of Prefix Grouper
(arXiv:2506.05433), generalised from one shared prefix to a tree. In depth-first order the
descendants of token ``j`` are the tokens ``j < i < end[j]``, so the mask is ``j <= i < end[j]``;
a row's trunk (the prefix every later token descends from) runs through SDPA's causal kernel
(:func:`trunk_attention`).
"""

from __future__ import annotations

import math
from collections.abc import Generator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from spade_gym.policies.base import Completion, is_int

if TYPE_CHECKING:
    import torch

__all__ = [
    "ATTENTION_TOKENS",
    "CHECKPOINT_TOKENS",
    "MICRO_BATCH_TOKENS",
    "PACKED_ATTENTION",
    "PackedRow",
    "check_pairs",
    "checkpointing",
    "pack",
    "padded_logprobs",
    "release_freed_memory",
    "row_logprobs",
    "score_passes",
    "trunk_attention",
]

#: Default most distinct tokens per forward pass of the scorer and the trainer.
MICRO_BATCH_TOKENS = 4096
#: Default length above which a pass runs with activation checkpointing, of the share of its layers
#: that holds it to this length's activations. Measured on the demo's Designer batch (a 1,934-token
#: row, 2 cores, in the update benchmark): 10.1 s and 4.5 GiB peak plain, 13.1 s and 2.1 GiB with
#: every layer checkpointed; at 1,536 / 1,024 / 768 tokens 11.2 / 11.9 / 12.7 s and 4.0 / 3.6 /
#: 3.2 GiB (the old path: 36-40 s).
CHECKPOINT_TOKENS = 768
#: The name under which :func:`trunk_attention` is registered with transformers' attention interface.
TRUNK_ATTENTION = "spade_trunk"
#: A row's length at which its masked attention costs as much as the rest of a pass: measured with
#: the embedded model on 2 CPU cores, a 1,500-token row's attention adds about a quarter.
ATTENTION_TOKENS = 6000


@dataclass(frozen=True)
class PackedRow:
    """One forward pass: the union of some sequences' prefix trees, depth-first.

    Attributes:
        tokens: the ``N`` token ids, depth-first.
        positions: ``N`` position ids, each token's depth (its index in its own sequence).
        ends: ``N`` ints; token ``i`` is on the path of token ``k`` iff ``i <= k < ends[i]``.
        members: the batch indices of the sequences in the row, in the order of ``targets``.
        counts: each member's number of completion tokens.
        targets: the completion tokens of the members, concatenated.
        predictors: for each target, the row index of the token whose logits predict it.
    """

    tokens: list[int]
    positions: list[int]
    ends: list[int]
    members: list[int]
    counts: list[int]
    targets: list[int]
    predictors: list[int]

    def attention_mask(self, device: torch.device | str | None = None) -> torch.Tensor:
        """``(1, 1, N, N)`` bool, true where query ``k`` (dim 2) may attend to key ``i`` (dim 3)."""
        import torch

        index = torch.arange(len(self.tokens), device=device)
        ends = torch.tensor(self.ends, device=device)
        return ((index[None, :] <= index[:, None]) & (index[:, None] < ends[None, :]))[None, None]

    @property
    def trunk(self) -> int:
        """How many leading tokens every later token descends from: the row's shared prefix, whose
        attention is plain causal (the whole row for a row of one sequence)."""
        n = len(self.tokens)
        return next((i for i in range(n) if self.ends[i] != n or self.positions[i] != i), n)


class _Trie:
    """One row under construction: nodes in creation order, each with its parent and children."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.parents: list[int] = []
        self.depths: list[int] = []
        self.children: list[dict[int, int]] = []
        self.roots: dict[int, int] = {}
        self.paths: list[tuple[int, int, list[int]]] = []  # (batch index, prompt length, node of each token)

    def new_tokens(self, sequence: Sequence[int]) -> int:
        """How many of ``sequence``'s tokens the trie does not hold yet."""
        node, level = -1, self.roots
        for k, token in enumerate(sequence):
            if token not in level:
                return len(sequence) - k
            node = level[token]
            level = self.children[node]
        return 0

    def insert(self, index: int, prompt_length: int, sequence: Sequence[int]) -> None:
        path, node, level = [], -1, self.roots
        for depth, token in enumerate(sequence):
            if token not in level:
                level[token] = len(self.tokens)
                self.tokens.append(token)
                self.parents.append(node)
                self.depths.append(depth)
                self.children.append({})
            node = level[token]
            level = self.children[node]
            path.append(node)
        self.paths.append((index, prompt_length, path))

    def row(self) -> PackedRow:
        # sequences are inserted in lexicographic order, so creation order is depth-first
        ends = list(range(1, len(self.tokens) + 1))
        for node in range(len(self.tokens) - 1, -1, -1):
            parent = self.parents[node]
            if parent >= 0:
                ends[parent] = max(ends[parent], ends[node])
        members, counts, targets, predictors = [], [], [], []
        for index, prompt_length, path in self.paths:
            members.append(index)
            counts.append(len(path) - prompt_length)
            targets += [self.tokens[node] for node in path[prompt_length:]]
            predictors += path[prompt_length - 1 : -1]
        return PackedRow(list(self.tokens), list(self.depths), ends, members, counts, targets, predictors)


def pack(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], max_tokens: int) -> list[PackedRow]:
    """``(prompt_ids, completion_ids)`` pairs as prefix-tree rows of at most ``max_tokens`` tokens
    (a longer single sequence gets a row of its own); every batch index is in exactly one row.

    Sequences are taken in lexicographic order. One joins the current row when it fits and that
    costs less than a row of its own, a row of ``N`` tokens costing ``N + N**2 / ATTENTION_TOKENS``
    (its masked attention), or when the row already holds it whole. ValueError for
    ``max_tokens < 1`` or an empty prompt.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens!r}")
    sequences = [list(prompt) + list(completion) for prompt, completion in pairs]
    if any(len(prompt) == 0 for prompt, _ in pairs):
        raise ValueError("every sequence needs a non-empty prompt: its first completion token is predicted from it")

    def cost(n: int) -> float:
        return n + n * n / ATTENTION_TOKENS

    rows: list[PackedRow] = []
    trie = _Trie()
    for index in sorted(range(len(sequences)), key=sequences.__getitem__):
        sequence = sequences[index]
        new, held = trie.new_tokens(sequence), len(trie.tokens)
        fits = held + new <= max_tokens and cost(held + new) - cost(held) <= cost(len(sequence))
        if trie.paths and new and not fits:
            rows.append(trie.row())
            trie = _Trie()
        trie.insert(index, len(pairs[index][0]), sequence)
    if trie.paths:
        rows.append(trie.row())
    return rows


def row_logprobs(
    model: Any, row: PackedRow, device: torch.device | str | None = None, temperatures: Sequence[float] | None = None
) -> list[torch.Tensor]:
    """One forward pass of ``model`` (a transformers causal LM) over ``row``: the float32 logprobs
    ``log_softmax(logits / T)`` of each member's completion tokens, in ``row.members`` order, ``T``
    the member's entry of ``temperatures`` (default 1); logits only at ``row.predictors``."""
    import torch

    ids = torch.tensor([row.tokens], device=device)
    trunk = {TRUNK_ATTENTION: row.trunk} if _trunk_attention_on(model) else {}
    mask = row.attention_mask(device)
    if _attention(model) == "eager":  # eager attention adds the mask to the scores
        dtype = next(model.parameters()).dtype
        mask = torch.zeros(mask.shape, dtype=dtype, device=device).masked_fill(~mask, torch.finfo(dtype).min)
    logits = (
        model(
            input_ids=ids,
            attention_mask=mask,
            position_ids=torch.tensor([row.positions], device=device),
            logits_to_keep=torch.tensor(row.predictors, device=device),
            use_cache=False,
            **trunk,
        )
        .logits[0]
        .float()
    )
    if temperatures is not None:
        per_member = torch.tensor([float(t) for t in temperatures], device=device)
        logits = logits / per_member.repeat_interleave(torch.tensor(row.counts, device=device))[:, None]
    targets = torch.tensor(row.targets, device=device)
    logprobs = logits.gather(-1, targets[:, None]).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    return list(logprobs.split(row.counts))


def trunk_attention(
    module: Any,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    **kwargs: Any,
) -> tuple[torch.Tensor, None]:
    """Attention for a packed row (a transformers attention function): given ``spade_trunk=t``,
    queries ``[0, t)`` attend causally (SDPA's causal kernel, no mask) and queries ``[t, N)`` under
    ``attention_mask`` rows ``[t, N)``: the outputs of the whole row under the mask. Without
    ``spade_trunk`` it is transformers' SDPA attention.

    Shapes: ``query`` ``(1, heads, N, d)``, ``key``/``value`` ``(1, kv_heads, N, d)``, the mask
    ``(1, 1, N, N)`` bool; returns ``(1, N, heads, d)`` and no weights."""
    import torch
    from transformers.integrations.sdpa_attention import repeat_kv, sdpa_attention_forward

    trunk = kwargs.pop(TRUNK_ATTENTION, None)
    if trunk is None or attention_mask is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, **kwargs)
    groups = getattr(module, "num_key_value_groups", 1)
    key, value = repeat_kv(key, groups), repeat_kv(value, groups)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    parts = []
    if trunk > 0:
        q, k, v = query[:, :, :trunk], key[:, :, :trunk], value[:, :, :trunk]
        parts.append(sdpa(q, k, v, dropout_p=dropout, is_causal=True, scale=scaling))
    if trunk < query.shape[2]:
        mask = attention_mask[..., trunk:, :]
        parts.append(sdpa(query[:, :, trunk:], key, value, attn_mask=mask, dropout_p=dropout, scale=scaling))
    out = parts[0] if len(parts) == 1 else torch.cat(parts, dim=2)
    return out.transpose(1, 2).contiguous(), None


def _attention(model: Any) -> str | None:
    """The transformers attention implementation of ``model`` (``None`` when it states none)."""
    return getattr(getattr(model, "config", None), "_attn_implementation", None)


#: Attention implementations that take a packed row's ``(1, 1, N, N)`` mask (flash kernels take none).
PACKED_ATTENTION = ("sdpa", "eager", TRUNK_ATTENTION, None)


def _trunk_attention_on(model: Any) -> bool:
    """Switch a model that attends with SDPA to :func:`trunk_attention` (registered once); False,
    and the model left as it is, for any other attention."""
    current = _attention(model)
    if current == TRUNK_ATTENTION:
        return True
    if current != "sdpa":
        return False
    from transformers import AttentionInterface, AttentionMaskInterface
    from transformers.masking_utils import sdpa_mask

    AttentionInterface.register(TRUNK_ATTENTION, trunk_attention)
    AttentionMaskInterface.register(TRUNK_ATTENTION, sdpa_mask)
    model.config._attn_implementation = TRUNK_ATTENTION
    return True


def checkpointing(model: Any, share: float) -> None:
    """Activation checkpointing of the first ``ceil(share * L)`` of the model's ``L`` decoder
    layers, none for ``share <= 0``; non-reentrant (the gradients of the plain pass, also for a
    frozen base under LoRA). A model without checkpointing support is left as it is."""
    if not getattr(model, "supports_gradient_checkpointing", False):
        return
    if share > 0:
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:  # older transformers
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
        from transformers.modeling_layers import GradientCheckpointingLayer

        layers = [m for m in model.modules() if isinstance(m, GradientCheckpointingLayer)]
        for layer in layers[math.ceil(share * len(layers)) :]:
            layer.gradient_checkpointing = False
    elif hasattr(model, "activation_checkpointing_disable"):
        model.activation_checkpointing_disable()
    else:
        model.gradient_checkpointing_disable()


def score_passes(
    model: Any,
    pairs: Sequence[tuple[list[int], list[int]]],
    temperatures: Sequence[float],
    micro_batch_tokens: int = MICRO_BATCH_TOKENS,
    shared_prefix: bool = True,
    *,
    checkpoint_tokens: int | None = None,
    pad_token_id: int = 0,
) -> Generator[tuple[list[int], list[torch.Tensor]], None, None]:
    """The logprobs ``log_softmax(logits / T)`` of each pair's completion tokens, ``T`` its entry of
    ``temperatures``, one forward pass of ``model`` at a time: yields ``(members, logprobs)``.

    ``shared_prefix``: prefix-tree rows of at most ``micro_batch_tokens`` distinct tokens
    (:func:`pack`); ``False``, or attention not in :data:`PACKED_ATTENTION`: whole sequences
    left-padded with ``pad_token_id``, at most ``micro_batch_tokens`` tokens a pass with padding.
    A pass of ``N > C = checkpoint_tokens`` tokens checkpoints a share ``1 - C / N`` of its layers
    (``None``: the model's setting is left as it is; otherwise the passes leave it off).
    ValueError for ``micro_batch_tokens < 1`` or ``temperatures`` not one number > 0 per pair.
    """
    if not is_int(micro_batch_tokens) or micro_batch_tokens < 1:
        raise ValueError(f"micro_batch_tokens must be an int >= 1, got {micro_batch_tokens!r}")
    temps = [float(t) for t in temperatures]
    if len(temps) != len(pairs) or not all(t > 0 for t in temps):
        raise ValueError(f"temperatures must hold one number > 0 per item ({len(pairs)}), got {temperatures!r:.80}")
    device = next(model.parameters()).device
    passes: list[tuple[list[int], int, PackedRow | None]] = []  # (members, tokens, row)
    if shared_prefix and _attention(model) in PACKED_ATTENTION:
        passes = [(row.members, len(row.tokens), row) for row in pack(pairs, micro_batch_tokens)]
    else:
        chunk: list[int] = []
        width = 0  # of the longest sequence in chunk
        for index, (prompt, completion) in enumerate(pairs):
            wider = max(width, len(prompt) + len(completion))
            if chunk and (len(chunk) + 1) * wider > micro_batch_tokens:
                passes.append((chunk, len(chunk) * width, None))
                chunk, wider = [], len(prompt) + len(completion)
            chunk.append(index)
            width = wider
        passes.append((chunk, len(chunk) * width, None))
    checkpointed = 0.0
    try:
        for n, (members, tokens, row) in enumerate(passes):
            if n:  # the previous pass's backward has run: its activations are free
                release_freed_memory()
            share = 0.0 if checkpoint_tokens is None or tokens <= checkpoint_tokens else 1 - checkpoint_tokens / tokens
            if checkpoint_tokens is not None and share != checkpointed:
                checkpointed = share
                checkpointing(model, share)
            temps_of = [temps[k] for k in members]
            if row is not None:
                yield members, row_logprobs(model, row, device, temps_of)
            else:
                yield members, padded_logprobs(model, [pairs[k] for k in members], temps_of, pad_token_id)
    finally:
        if checkpointed:
            checkpointing(model, 0.0)
        release_freed_memory()


def release_freed_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc ``malloc_trim``; elsewhere nothing):
    glibc keeps the freed activations of a pass, so resident memory would grow pass after pass."""
    global _libc
    if _libc is None:
        import ctypes
        import ctypes.util

        try:
            _libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
            _libc.malloc_trim.argtypes = [ctypes.c_size_t]
        except (OSError, AttributeError):
            _libc = False
    if _libc:
        _libc.malloc_trim(0)


_libc: Any = None


def padded_logprobs(
    model: Any, pairs: Sequence[tuple[list[int], list[int]]], temperatures: Sequence[float], pad_token_id: int
) -> list[torch.Tensor]:
    """One forward pass over whole sequences, left-padded (positions as transformers' ``generate``
    gives them): each pair's completion logprobs at its temperature."""
    import torch

    device = next(model.parameters()).device
    width = max(len(p) + len(c) for p, c in pairs)
    longest = max(len(c) for _, c in pairs)
    ids = torch.full((len(pairs), width), pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(pairs), width), dtype=torch.long)
    for k, (p, c) in enumerate(pairs):
        seq = p + c
        ids[k, width - len(seq) :] = torch.tensor(seq, dtype=torch.long)
        mask[k, width - len(seq) :] = 1
    ids, mask = ids.to(device), mask.to(device)
    positions = (mask.cumsum(-1) - 1).masked_fill(mask == 0, 0)
    # sequences are right-aligned: every completion lies in the last `longest` positions
    logits = model(
        input_ids=ids, attention_mask=mask, position_ids=positions, logits_to_keep=longest + 1, use_cache=False
    ).logits
    # position t predicts token t + 1
    logits = logits[:, :-1].float() / torch.tensor([float(t) for t in temperatures], device=device)[:, None, None]
    targets = ids[:, width - longest :]
    token_logprobs = logits.gather(-1, targets.unsqueeze(-1)).squeeze(-1) - torch.logsumexp(logits, dim=-1)
    return [token_logprobs[k, longest - len(c) :] for k, (_, c) in enumerate(pairs)]


def check_pairs(batch: object, vocab_size: int, context_window: int | None) -> list[tuple[list[int], list[int]]]:
    """``batch`` (Completions or ``(prompt_ids, completion_ids)`` pairs) as checked lists of ints;
    ValueError naming the bad item (malformed, no or out-of-vocabulary ids, empty, over ``context_window``)."""
    if isinstance(batch, Completion) or not isinstance(batch, Sequence) or isinstance(batch, str):
        raise ValueError(
            f"batch must be a list of Completions or (prompt_ids, completion_ids) pairs, got {type(batch).__name__}"
        )
    if len(batch) == 0:
        raise ValueError("sequence_logprobs needs at least one (prompt, completion) pair")
    pairs: list[tuple[list[int], list[int]]] = []
    for b, item in enumerate(batch):
        prompt: Sequence[int] | None
        completion: Sequence[int] | None
        if isinstance(item, Completion):
            prompt, completion = item.prompt_token_ids, item.completion_token_ids
        elif isinstance(item, Sequence) and not isinstance(item, str) and len(item) == 2:
            prompt, completion = item
        else:
            raise ValueError(
                f"batch[{b}] must be a Completion or a (prompt_ids, completion_ids) pair, got {item!r:.80}"
            )
        if prompt is None or completion is None:
            raise ValueError(f"batch[{b}] carries no token ids (its backend does not report them)")
        if len(prompt) == 0 or len(completion) == 0:
            raise ValueError(
                f"batch[{b}] needs a non-empty prompt and completion, got {len(prompt)} and {len(completion)} tokens"
            )
        if context_window and len(prompt) + len(completion) > context_window:
            raise ValueError(
                f"batch[{b}] holds {len(prompt) + len(completion)} tokens, over the context window of {context_window}"
            )
        pairs.append(
            (
                _token_ids(prompt, f"batch[{b}] prompt", vocab_size),
                _token_ids(completion, f"batch[{b}] completion", vocab_size),
            )
        )
    return pairs


def _token_ids(ids: object, what: str, vocab_size: int) -> list[int]:
    """``ids`` as a list of ints in ``[0, vocab_size)``, or a ValueError naming the bad entry."""
    if isinstance(ids, str | bytes) or not isinstance(ids, Sequence):
        raise ValueError(f"{what} must be a list of token ids, got {type(ids).__name__}")
    out = list(ids)
    for k, token in enumerate(out):
        if not is_int(token) or not 0 <= token < vocab_size:
            raise ValueError(f"{what}[{k}] = {token!r} is not a token id in [0, {vocab_size})")
    return [int(t) for t in out]
