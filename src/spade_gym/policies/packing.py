"""Shared-prefix packing: the sequences of a batch as rows of a prefix tree, each shared token once.

The samples of a GRPO group share their prompt (the Designer's G designs; the Agent's episodes of
one environment share the system prompt and the worked example, and a later turn holds the earlier
turn whole). :func:`pack` inserts every ``prompt + completion`` into a token trie and lays each row
out in depth-first order; a token attends to exactly the tokens on its own root path (its sequence's
earlier tokens), and its position id is its depth, so every sequence sees what it would see alone:
the logits, and hence the log-probabilities and their gradients, are those of encoding each sequence
whole, while every shared token is computed once (Prefix Grouper, Liu et al. 2025,
arXiv:2506.05433, generalised from one shared prefix to a tree).

In depth-first order the descendants of token ``j`` are the tokens ``j < i < end[j]``, so the
attention mask is ``j <= i < end[j]``: two comparisons, no walk over the tree.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

__all__ = ["MICRO_BATCH_TOKENS", "PackedRow", "checkpointing", "pack", "row_logprobs"]

#: Default most distinct tokens per forward pass of the scorer and the trainer.
MICRO_BATCH_TOKENS = 2048


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


class _Trie:
    """One row under construction: nodes in creation order, each with its parent and children."""

    def __init__(self) -> None:
        self.tokens: list[int] = []
        self.parents: list[int] = []
        self.depths: list[int] = []
        self.children: list[dict[int, int]] = []
        self.roots: dict[int, int] = {}
        self.paths: list[tuple[int, list[int]]] = []  # (batch index, node of each token of its sequence)
        self.prompt_lengths: list[int] = []

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
        self.paths.append((index, path))
        self.prompt_lengths.append(prompt_length)

    def row(self) -> PackedRow:
        # sequences are inserted in lexicographic order, so creation order is depth-first
        ends = list(range(1, len(self.tokens) + 1))
        for node in range(len(self.tokens) - 1, -1, -1):
            parent = self.parents[node]
            if parent >= 0:
                ends[parent] = max(ends[parent], ends[node])
        members, counts, targets, predictors = [], [], [], []
        for (index, path), prompt_length in zip(self.paths, self.prompt_lengths, strict=True):
            members.append(index)
            counts.append(len(path) - prompt_length)
            targets += [self.tokens[node] for node in path[prompt_length:]]
            predictors += path[prompt_length - 1 : -1]
        return PackedRow(list(self.tokens), list(self.depths), ends, members, counts, targets, predictors)


def pack(pairs: Sequence[tuple[Sequence[int], Sequence[int]]], max_tokens: int) -> list[PackedRow]:
    """``(prompt_ids, completion_ids)`` pairs (each with a non-empty prompt) as prefix-tree rows of
    at most ``max_tokens`` tokens each (a longer single sequence gets a row of its own).

    Sequences are taken in lexicographic order, so those sharing a prefix share a row; a row is
    closed when the next sequence's new tokens would take it past ``max_tokens``. Every batch index
    is a member of exactly one row. ValueError for ``max_tokens < 1`` or an empty prompt.
    """
    if max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1, got {max_tokens!r}")
    sequences = [list(prompt) + list(completion) for prompt, completion in pairs]
    if any(len(prompt) == 0 for prompt, _ in pairs):
        raise ValueError("every sequence needs a non-empty prompt: its first completion token is predicted from it")
    rows: list[PackedRow] = []
    trie = _Trie()
    for index in sorted(range(len(sequences)), key=sequences.__getitem__):
        sequence = sequences[index]
        if trie.paths and len(trie.tokens) + trie.new_tokens(sequence) > max_tokens:
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
    ``log_softmax(logits / T)`` of each member's completion tokens, in ``row.members`` order (with
    gradients when enabled), ``T`` the member's entry of ``temperatures`` (default 1). Logits are
    computed only at ``row.predictors`` (``logits_to_keep``), never for the prompts."""
    import torch

    ids = torch.tensor([row.tokens], device=device)
    logits = (
        model(
            input_ids=ids,
            attention_mask=row.attention_mask(device),
            position_ids=torch.tensor([row.positions], device=device),
            logits_to_keep=torch.tensor(row.predictors, device=device),
            use_cache=False,
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


def checkpointing(model: Any, enabled: bool) -> None:
    """Turn transformers' activation checkpointing of every decoder layer on or off (non-reentrant
    ``torch.utils.checkpoint``: it recomputes the layer with the same inputs, kernels and random
    state, so gradients are those of the plain pass; reentrant checkpointing of a frozen base under
    LoRA adapters would need the inputs to require gradients)."""
    if enabled:
        kwargs = {"use_reentrant": False}
        if hasattr(model, "activation_checkpointing_enable"):
            model.activation_checkpointing_enable(activation_checkpointing_kwargs=kwargs)
        else:  # transformers < 5.24
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs=kwargs)
    elif hasattr(model, "activation_checkpointing_disable"):
        model.activation_checkpointing_disable()
    else:
        model.gradient_checkpointing_disable()
