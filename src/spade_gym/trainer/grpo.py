"""The self-play trainer core: group-relative advantages, the clipped GRPO loss, one update.

One policy plays both SPADE roles, so one update trains both: the Designer's programs (rewarded
with regret) and the Agent's turns (rewarded with the episode return), each scored against its own
group, GRPO-style (Shao et al. 2024, *DeepSeekMath*, section 4.1)::

    samples = samples_from_completions(designs, rewards, group="designer:doc-17")
    samples += samples_from_trajectories(estimate.nohint)
    stats = trainer.update(samples)          # advantages, loss, backward, clip, AdamW step

Importing this module does not import torch.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import itertools
import math
import random
import time
import warnings
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field, fields
from typing import TYPE_CHECKING, Annotated, Any, Literal

from annotated_types import Ge, Gt, Le, Lt

from spade_gym.errors import GRPOConfigError
from spade_gym.options import FINITE, first_refusal, option
from spade_gym.policies.base import Completion
from spade_gym.policies.scoring import CHECKPOINT_TOKENS, MICRO_BATCH_TOKENS

if TYPE_CHECKING:
    import torch

    from spade_gym.agent import Trajectory
    from spade_gym.policies.transformers import TransformersPolicy

__all__ = [
    "ROLES",
    "Beta",
    "Betas",
    "ClipRange",
    "Count",
    "Ddof",
    "GRPOConfig",
    "GRPOConfigError",
    "GRPOTrainer",
    "LossType",
    "NonNegative",
    "Positive",
    "TrainSample",
    "UpdateStats",
    "group_advantages",
    "grpo_loss",
    "samples_from_completions",
    "samples_from_trajectories",
]

#: The two roles one policy plays.
ROLES: tuple[str, ...] = ("designer", "agent")
#: How the per-token losses are averaged (see :func:`grpo_loss`).
LossType = Literal["token", "sequence"]

#: The ranges of :class:`GRPOConfig`'s fields (the config's ``train`` section is a GRPOConfig):
#: stated once, as ``Annotated`` constraints.
Positive = Annotated[float, Gt(0), FINITE]
NonNegative = Annotated[float, Ge(0), FINITE]
Count = Annotated[int, Ge(1)]
ClipRange = Annotated[float, Gt(0), Lt(1)]
Beta = Annotated[float, Ge(0), Lt(1)]
Betas = tuple[Beta, Beta]
Ddof = Annotated[int, Ge(0), Le(1)]

# episode ids handed out by samples_from_trajectories: unique within the process, so samples built
# by separate calls never merge two episodes into one
_EPISODE_IDS = itertools.count()


@dataclass
class TrainSample:
    """One training sample: a prompt, the completion sampled for it, and how good it was.

    Attributes:
        prompt_ids: the prompt's token ids (``>= 1``).
        completion_ids: the ``T >= 0`` sampled token ids (with no trained token, a sample still
            counts in its group's statistics).
        behaviour_logprobs: ``T`` natural-log probabilities under the sampling policy at
            ``temperature`` (``Completion.logprobs``): the importance ratio's denominator.
        loss_mask: ``T`` ints, ``1`` for a trained token, ``0`` for context.
        reward: finite; the Designer's regret reward or the Agent's episode return.
        role: ``"designer"`` or ``"agent"``.
        group: samples of one ``role`` and ``group`` are scored against each other.
        episode: samples with the same (role, group, episode) count once in the group's
            statistics (the turns of one Agent episode); ``None``: an episode of its own.
        advantage: set by :func:`group_advantages` (or the caller).
        temperature: the sampling temperature (``> 0``) the behaviour logprobs are taken at; the
            update re-scores at it, so the ratio compares the distribution that was sampled.

    ValueError for lengths that disagree, a mask value not 0/1, an empty prompt, a non-finite
    reward or an unknown role.
    """

    prompt_ids: list[int]
    completion_ids: list[int]
    behaviour_logprobs: list[float]
    loss_mask: list[int]
    reward: float
    role: str
    group: Hashable
    episode: Hashable | None = None
    advantage: float | None = None
    temperature: float = 1.0

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"TrainSample.role must be one of {ROLES}, got {self.role!r}")
        if len(self.prompt_ids) == 0:
            raise ValueError("TrainSample.prompt_ids must hold at least one token")
        n = len(self.completion_ids)
        if len(self.behaviour_logprobs) != n or len(self.loss_mask) != n:
            raise ValueError(
                f"TrainSample needs one behaviour logprob and one mask value per completion token: {n} tokens, "
                f"{len(self.behaviour_logprobs)} logprobs, {len(self.loss_mask)} mask values"
            )
        if any(m not in (0, 1) for m in self.loss_mask):
            raise ValueError(f"TrainSample.loss_mask holds only 0 and 1, got {sorted(set(self.loss_mask))}")
        if isinstance(self.reward, bool) or not isinstance(self.reward, int | float) or not math.isfinite(self.reward):
            raise ValueError(f"TrainSample.reward must be a finite number, got {self.reward!r}")
        if not (isinstance(self.temperature, int | float) and math.isfinite(self.temperature) and self.temperature > 0):
            raise ValueError(f"TrainSample.temperature must be a finite number > 0, got {self.temperature!r}")
        if self.advantage is not None and not math.isfinite(self.advantage):
            raise ValueError(f"TrainSample.advantage must be finite or None, got {self.advantage!r}")

    @property
    def num_tokens(self) -> int:
        """Trained tokens: the number of ones in ``loss_mask``."""
        return sum(self.loss_mask)


def samples_from_trajectories(
    trajectories: Iterable[Trajectory], *, group_by: Literal["seed", "env"] = "seed", include_errors: bool = False
) -> list[TrainSample]:
    """The Agent's samples: one per turn with token ids, each with its episode's return as reward.

    Args:
        group_by: ``"seed"``: group ``"agent:<env_id>:<seed>"`` (GRPO's "G outputs for one
            question"); ``"env"``: ``"agent:<env_id>"``, for regret estimates that play each seed
            once. Hinted episodes get their own group, suffixed ``":hint"``.
        include_errors: keep episodes that ended with an environment error (left out by default).

    Returns the samples in order, the turns of a trajectory sharing one ``episode`` id; ValueError
    for an unknown ``group_by``.
    """
    if group_by not in ("seed", "env"):
        raise ValueError(f"group_by must be 'seed' or 'env', got {group_by!r}")
    out = []
    for trajectory in trajectories:
        if trajectory.error is not None and not include_errors:
            continue
        group = f"agent:{trajectory.env_id}" + (f":{trajectory.seed}" if group_by == "seed" else "")
        if trajectory.hint:
            group += ":hint"
        episode, reward = f"episode-{next(_EPISODE_IDS)}", float(trajectory.episode_return)
        for prompt, completion, logprobs, mask in trajectory.samples():
            out.append(
                TrainSample(
                    list(prompt),
                    list(completion),
                    list(logprobs),
                    list(mask),
                    reward,
                    "agent",
                    group,
                    episode,
                    temperature=trajectory.temperature,
                )  # fmt: skip
            )
    return out


def samples_from_completions(
    completions: Sequence[Completion], rewards: Sequence[float], group: Hashable, *, role: str = "designer"
) -> list[TrainSample]:
    """One sample per completion (mask of ones, each its own episode), all in ``group``; ValueError
    for ``len(rewards) != len(completions)`` or a completion without token ids or logprobs."""
    if len(rewards) != len(completions):
        raise ValueError(f"one reward per completion: {len(completions)} completions, {len(rewards)} rewards")
    out = []
    for k, (completion, reward) in enumerate(zip(completions, rewards, strict=True)):
        ids, logprobs, prompt = completion.completion_token_ids, completion.logprobs, completion.prompt_token_ids
        if ids is None or logprobs is None or prompt is None:
            raise ValueError(
                f"completions[{k}] carries no token ids or logprobs (its backend does not report them); "
                "train on completions of a TransformersPolicy or VLLMPolicy"
            )
        out.append(
            TrainSample(
                list(prompt),
                list(ids),
                list(logprobs),
                [1] * len(ids),
                float(reward),
                role,
                group,
                temperature=completion.temperature,
            )  # fmt: skip
        )
    return out


def group_advantages(
    samples: Sequence[TrainSample], *, scale: bool = True, eps: float = 1e-6, ddof: int = 0
) -> list[float]:
    """Group-relative advantages (DeepSeekMath, section 4.1.2), set on each sample and returned::

        A_i = (r_i - mean(r)) / (std(r) + eps)      scale=True (GRPO)
        A_i =  r_i - mean(r)                         scale=False (Dr. GRPO, Liu et al. 2025)

    ``r`` is over the **episodes** of one ``(role, group)`` (the turns of one Agent episode count
    once). ``std`` is the population std (``ddof=0``); TRL uses ``ddof=1, eps=1e-4``. A group of
    one episode, or of equal rewards, gets advantage exactly 0. ValueError for ``eps < 0``,
    ``ddof`` not 0 or 1, or two samples of one episode with different rewards.
    """
    if not eps >= 0:
        raise ValueError(f"eps must be >= 0, got {eps!r}")
    if ddof not in (0, 1):
        raise ValueError(f"ddof must be 0 (population std) or 1 (sample std), got {ddof!r}")
    episodes: dict[tuple[str, Hashable], dict[Hashable, float]] = {}
    for i, sample in enumerate(samples):
        rewards = episodes.setdefault((sample.role, sample.group), {})
        key = ("sample", i) if sample.episode is None else ("episode", sample.episode)
        if key in rewards and rewards[key] != sample.reward:
            raise ValueError(
                f"episode {sample.episode!r} of group {sample.group!r} holds samples with different rewards "
                f"({rewards[key]} and {sample.reward}); the turns of one episode share its return"
            )
        rewards[key] = float(sample.reward)
    stats: dict[tuple[str, Hashable], tuple[float, float] | None] = {}
    for key, by_episode in episodes.items():
        values = list(by_episode.values())
        if len(values) < 2 or max(values) == min(values):
            stats[key] = None  # nothing to compare: advantage 0
            continue
        mean = math.fsum(values) / len(values)
        std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (len(values) - ddof))
        stats[key] = (mean, std)
    out = []
    for sample in samples:
        found = stats[(sample.role, sample.group)]
        if found is None:
            advantage = 0.0
        else:
            mean, std = found
            advantage = (sample.reward - mean) / (std + eps) if scale else sample.reward - mean
        sample.advantage = advantage
        out.append(advantage)
    return out


def _checked_loss_args(
    logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    ref_logprobs: torch.Tensor | None,
    weights: torch.Tensor | None,
    loss_type: str,
    clip_eps: float,
    clip_eps_high: float | None,
    kl_coef: float,
) -> tuple[torch.Tensor, float]:
    """:func:`grpo_loss`'s arguments checked (ValueError as documented there): ``(advantages as [B, 1]
    or [B, T], the upper clip epsilon)``."""
    if logprobs.dim() != 2:
        raise ValueError(f"logprobs must be [B, T], got shape {tuple(logprobs.shape)}")
    shape = logprobs.shape
    named = {"behaviour_logprobs": behaviour_logprobs, "mask": mask, "ref_logprobs": ref_logprobs}
    for name, tensor in named.items():
        if tensor is not None and tensor.shape != shape:
            raise ValueError(f"{name} must have the shape of logprobs {tuple(shape)}, got {tuple(tensor.shape)}")
    if advantages.shape == shape[:1]:
        advantages = advantages.unsqueeze(1)
    elif advantages.shape != shape:
        raise ValueError(f"advantages must be [B] = {tuple(shape[:1])} or [B, T], got {tuple(advantages.shape)}")
    if weights is not None and weights.shape != shape[:1]:
        raise ValueError(f"weights must be [B] = {tuple(shape[:1])}, got {tuple(weights.shape)}")
    if loss_type not in ("token", "sequence"):
        raise ValueError(f"loss_type must be 'token' or 'sequence', got {loss_type!r}")
    if not 0 < clip_eps < 1:
        raise ValueError(f"clip_eps must be in (0, 1), got {clip_eps!r}")
    high = clip_eps if clip_eps_high is None else clip_eps_high
    if not high > 0:
        raise ValueError(f"clip_eps_high must be > 0 or None, got {clip_eps_high!r}")
    if not kl_coef >= 0:
        raise ValueError(f"kl_coef must be >= 0, got {kl_coef!r}")
    if kl_coef > 0 and ref_logprobs is None:
        raise ValueError("kl_coef > 0 needs ref_logprobs (the frozen reference's log-probabilities)")
    return advantages, high


def grpo_loss(
    logprobs: torch.Tensor,
    behaviour_logprobs: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    *,
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    ref_logprobs: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    loss_type: LossType = "token",
    weights: torch.Tensor | None = None,
    normalizer: float | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """The clipped GRPO policy-gradient loss, with an optional KL penalty.

    Per token ``t`` of sequence ``i`` (all tensors padded to ``[B, T]``)::

        ratio   = exp(logprobs - behaviour_logprobs)
        pg      = -min(ratio * A_i, clip(ratio, 1 - clip_eps, 1 + clip_eps_high) * A_i)
        kl      = exp(ref - logprobs) - (ref - logprobs) - 1            (only with ref_logprobs)
        loss_it = w_i * (pg + kl_coef * kl)

    PPO's clipped surrogate (Schulman et al. 2017, eq. 7) as in GRPO (Shao et al. 2024, eq. 3),
    the k3 KL estimator (GRPO eq. 4), and DAPO's clip-higher (Yu et al. 2025). ``"token"``:
    ``sum loss_it / N`` over the ``N`` unmasked tokens (DAPO); ``"sequence"``: the mean over each
    sequence's tokens, then over the ``B'`` sequences with a trained token (GRPO eq. 3). Masked
    positions contribute nothing, whatever they hold.

    Args:
        logprobs, behaviour_logprobs: ``[B, T]`` current (with gradients) and sampling logprobs.
        advantages: ``[B]`` or ``[B, T]``.
        mask: ``[B, T]``, true where a token is trained.
        clip_eps: in ``(0, 1)``; clip_eps_high: ``> 0`` (``None``: ``clip_eps``).
        ref_logprobs: ``[B, T]`` of the reference, for the KL term and statistic.
        kl_coef: ``>= 0``; ``> 0`` needs ``ref_logprobs``.
        weights: ``[B]`` per-sequence loss weights; ``None``: all 1.
        normalizer: replaces ``N`` or ``B'`` (the full batch's count under gradient accumulation).

    Returns:
        ``(loss, stats)``: ``loss``, ``tokens``, ``clip_fraction`` (share of unmasked tokens whose
        gradient the clip cut), ``mean_ratio`` and, with ``ref_logprobs``, ``kl``; 0 without tokens.

    Raises:
        ValueError: shapes that disagree, an unknown ``loss_type``, a clip range out of bounds,
            ``kl_coef < 0``, or ``kl_coef > 0`` without ``ref_logprobs``.
    """
    import torch

    advantages, high = _checked_loss_args(
        logprobs,
        behaviour_logprobs,
        advantages,
        mask,
        ref_logprobs,
        weights,
        loss_type,
        clip_eps,
        clip_eps_high,
        kl_coef,
    )
    on = mask.bool()
    zero = torch.zeros((), dtype=logprobs.dtype, device=logprobs.device)
    advantages = advantages.to(logprobs.dtype)
    # where() rather than multiplying by the mask: padding may hold anything, even inf or NaN
    log_ratio = torch.where(on, logprobs - behaviour_logprobs.to(logprobs.dtype), zero)
    ratio = torch.exp(log_ratio)
    clipped = ratio.clamp(1 - clip_eps, 1 + high)
    per_token = -torch.minimum(ratio * advantages, clipped * advantages)
    kl = None
    if ref_logprobs is not None:
        delta = torch.where(on, ref_logprobs.to(logprobs.dtype) - logprobs, zero)
        kl = torch.exp(delta) - delta - 1
        if kl_coef > 0:
            per_token = per_token + kl_coef * kl
    if weights is not None:
        per_token = per_token * weights.to(logprobs.dtype).unsqueeze(1)
    per_token = torch.where(on, per_token, zero)
    tokens_per_row = on.sum(dim=1)
    tokens = int(tokens_per_row.sum())
    if loss_type == "token":
        summed, count = per_token, tokens
    else:  # each row's mean over its tokens, then over the rows with a token
        summed = per_token.sum(dim=1) / tokens_per_row.clamp(min=1).to(logprobs.dtype)
        count = int((tokens_per_row > 0).sum())
    denominator = float(count if normalizer is None else normalizer)
    loss = summed.sum() / denominator if denominator > 0 else summed.sum() * 0.0

    with torch.no_grad():
        stats: dict[str, float] = {"loss": float(loss), "tokens": float(tokens)}
        cut = ((ratio < 1 - clip_eps) & (advantages < 0)) | ((ratio > 1 + high) & (advantages > 0))
        count = max(tokens, 1)
        stats["clip_fraction"] = float((cut & on).sum()) / count
        stats["mean_ratio"] = float(torch.where(on, ratio, zero).sum()) / count
        if kl is not None:
            stats["kl"] = float(torch.where(on, kl, zero).sum()) / count
    return loss, stats


def _padded(rows: Sequence[Sequence[float]], dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """``[len(rows), longest]`` tensor of ``rows``, right-padded with zeros."""
    import torch

    tensors = [torch.tensor(list(row), dtype=dtype) for row in rows]
    return torch.nn.utils.rnn.pad_sequence(tensors, batch_first=True).to(device)


@dataclass(frozen=True)
class GRPOConfig:
    """Settings of :class:`GRPOTrainer`; each field's ``metadata["help"]`` says what it does.

    One :meth:`GRPOTrainer.update` makes ``epochs`` passes over its samples, each split into
    ``mini_batches`` mini-batches (one optimizer step each), each scored in forward passes of at most
    ``micro_batch_tokens`` distinct tokens whose gradients accumulate; pass losses are normalised
    by the whole mini-batch's count, so ``micro_batch_tokens``, ``shared_prefix`` and
    ``checkpoint_tokens`` trade memory for speed, never the result (up to float rounding).

    ValueError for a field out of its range (:meth:`validate`, called on construction).
    """

    learning_rate: Positive = option(1e-5, "AdamW learning rate (about 1e-4 with LoRA)")
    weight_decay: NonNegative = option(0.0, "AdamW decoupled weight decay")
    adam_betas: Betas = option((0.9, 0.999), "AdamW betas (beta1, beta2)")
    adam_eps: Positive = option(1e-8, "AdamW epsilon")
    clip_eps: ClipRange = option(0.2, "PPO clip range: token ratios are clipped to [1 - clip_eps, 1 + clip_eps_high]")
    clip_eps_high: Positive | None = option(
        None,
        "Upper clip range: ratios are clipped above at 1 + clip_eps_high (DAPO clip-higher, e.g. 0.28); null: clip_eps",
    )
    kl_coef: NonNegative = option(
        0.0,
        "Weight of the k3 KL penalty to a frozen reference (GRPO's beta). With LoRA the "
        "reference is the base model (adapters disabled, no copy); without LoRA and without a given "
        "reference, a frozen copy of the model (one more model's worth of memory)",
    )
    loss_type: LossType = option(
        "token",
        "'token': mean over all trained tokens of the batch (DAPO); 'sequence': mean over each "
        "sequence's tokens, then over sequences (original GRPO)",
    )
    scale_advantages: bool = option(
        True, "Divide advantages by the group's reward std (GRPO); false: r - mean only (Dr. GRPO)"
    )
    advantage_eps: NonNegative = option(1e-6, "Added to the group std before dividing")
    std_ddof: Ddof = option(0, "Group std: 0 population (default), 1 sample std (TRL's torch.std)")
    drop_zero_advantage: bool = option(
        True,
        "Leave samples with advantage 0 (singleton or all-equal groups) out of the update: they "
        "carry no policy gradient and would only dilute the token normalisation (DAPO dynamic "
        "sampling); counted in UpdateStats.dropped",
    )
    micro_batch_tokens: Count = option(
        MICRO_BATCH_TOKENS,
        "Most distinct tokens per forward/backward pass (a longer single sequence gets a pass of its own); "
        "gradients accumulate across passes. Bounds the activations held, whatever the number of samples",
    )
    shared_prefix: bool = option(
        True,
        "Encode the tokens samples share (a group's prompt, an earlier turn) once per pass, with the "
        "logprobs and gradients of encoding each sample whole; false: every sample whole, left-padded",
    )
    checkpoint_tokens: Annotated[int, Ge(0)] | None = option(
        CHECKPOINT_TOKENS,
        "A forward/backward pass of N tokens, more than this many, keeps only the input of a share "
        "1 - this / N of its layers and recomputes them in the backward pass (non-reentrant activation "
        "checkpointing), so it holds the activations of a pass of this many tokens: the same gradients; "
        "0: every layer of every pass, null: none",
    )
    mini_batches: Count = option(
        1,
        "Optimizer steps per update: the samples are shuffled and split into this many "
        "mini-batches; after the first, the clip against the behaviour logprobs is what keeps steps close",
    )
    epochs: Count = option(
        1,
        "Passes over the samples per update (GRPO's mu): each pass is reshuffled and split into "
        "mini_batches, so an update takes epochs * mini_batches optimizer steps",
    )
    max_grad_norm: Positive | None = option(1.0, "Clip the global gradient norm to this; null: no clipping")
    designer_weight: NonNegative = option(1.0, "loss weight of the Designer's samples (0 leaves them out)")
    agent_weight: NonNegative = option(1.0, "loss weight of the Agent's samples (0 leaves them out)")
    bf16: bool = option(
        True, "Run forward passes under bfloat16 autocast on a CUDA GPU that supports it; no effect on CPU"
    )
    fp32_trainable: bool = option(
        True,
        "Cast trainable parameters held in bf16/fp16 to float32 at start (master weights): a "
        "1e-5 step vanishes in bf16 rounding. Free for LoRA (peft keeps adapters in fp32 already); for "
        "full fine-tuning of a bf16 model it doubles the weights' memory",
    )
    disable_dropout: bool = option(
        True,
        "Set every dropout probability of the model to 0 (as TRL does): with dropout on, the "
        "recomputed logprobs differ from the behaviour ones even before any step",
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "adam_betas", tuple(self.adam_betas))
        self.validate()

    @property
    def role_weights(self) -> dict[str, float]:
        """Loss weight per role of :data:`ROLES`: ``designer_weight`` and ``agent_weight``."""
        return {"designer": self.designer_weight, "agent": self.agent_weight}

    def validate(self) -> None:
        """Raise :class:`GRPOConfigError` (a ValueError) for the first field out of its range: the
        type of each field (its ``Annotated`` range) as :func:`spade_gym.options.first_refusal` checks it."""
        refused = first_refusal(self)
        if refused is not None:
            raise GRPOConfigError(*refused)


@dataclass
class UpdateStats:
    """Figures of one :meth:`GRPOTrainer.update`.

    Attributes:
        loss, grad_norm: means over the optimizer steps taken (gradient norm before clipping); NaN
            when none was taken.
        clip_fraction, mean_ratio, kl: over the trained tokens of those steps (``kl`` ``None``
            without a reference).
        tokens: trained tokens summed over the steps (each epoch counts them again).
        skipped_nan: steps skipped for a NaN or inf loss or gradient norm.
        samples, trained_samples: per role, given and trained on.
        dropped: samples left out: ``"zero_advantage"``, ``"no_tokens"``, ``"zero_weight"``.
        reward_mean, advantage_mean, advantage_std: per role, over the samples given.
        forward_s, backward_s, optimizer_s, total_s: wall seconds.
    """

    loss: float = math.nan
    grad_norm: float = math.nan
    clip_fraction: float = 0.0
    mean_ratio: float = 0.0
    kl: float | None = None
    tokens: int = 0
    optimizer_steps: int = 0
    step: int = 0
    skipped_nan: int = 0
    samples: dict[str, int] = field(default_factory=dict)
    trained_samples: dict[str, int] = field(default_factory=dict)
    dropped: dict[str, int] = field(default_factory=lambda: {"zero_advantage": 0, "no_tokens": 0, "zero_weight": 0})
    reward_mean: dict[str, float] = field(default_factory=dict)
    advantage_mean: dict[str, float] = field(default_factory=dict)
    advantage_std: dict[str, float] = field(default_factory=dict)
    learning_rate: float = 0.0
    forward_s: float = 0.0
    backward_s: float = 0.0
    optimizer_s: float = 0.0
    total_s: float = 0.0

    def as_dict(self) -> dict[str, float]:
        """A flat ``{name: number}`` for a logger: ``"loss"``, ``"agent/samples"``, ``"dropped/zero_advantage"``, ..."""
        out: dict[str, float] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, dict):
                for key, number in value.items():
                    out[f"{key}/{f.name}" if f.name != "dropped" else f"dropped/{key}"] = float(number)
            elif value is not None:
                out[f.name] = float(value)
        return out


class GRPOTrainer:
    """Trains a :class:`~spade_gym.policies.transformers.TransformersPolicy` on both roles' samples.

    One :meth:`update`: :func:`group_advantages` for samples that have none; samples with
    advantage 0, nothing unmasked or role weight 0 left out; then the steps :class:`GRPOConfig`
    describes (:func:`grpo_loss`, gradient clipping, AdamW). A non-finite loss or gradient norm
    skips the step with a warning. The model is in train mode only during :meth:`update`; do not
    generate from another thread then.

    Each sample is re-scored at its sampling temperature (``TrainSample.temperature``), so on-policy
    ratios are 1; with top-p < 1 the truncation is not modelled (as in TRL).

    Args:
        policy: its trainable parameters (only the LoRA adapters when attached) are optimized.
        config: ``None``: ``GRPOConfig()``.
        reference: the frozen KL reference (same tokenizer). ``None`` with ``kl_coef > 0``: with
            LoRA, the base model with adapters disabled (no memory cost); without, a frozen deep
            copy of the model made now. Ignored when ``kl_coef == 0``.
        seed: seed of the mini-batch shuffle (a self-play run's ``run.seed``).

    ValueError for a policy without trainable parameters, or a reference with another vocabulary.
    """

    def __init__(
        self,
        policy: TransformersPolicy,
        config: GRPOConfig | None = None,
        reference: TransformersPolicy | None = None,
        *,
        seed: int = 0,
    ) -> None:
        import torch

        from spade_gym.policies.transformers import is_peft

        self.policy = policy
        self.config = config = config or GRPOConfig()
        self.seed = seed
        model = policy.model
        self.parameters = [p for p in model.parameters() if p.requires_grad]
        if not self.parameters:
            raise ValueError("the policy has no trainable parameters (every parameter has requires_grad=False)")
        if config.disable_dropout:
            for module in model.modules():
                if isinstance(module, torch.nn.Dropout):
                    module.p = 0.0
        self._base_reference = False
        self.reference: TransformersPolicy | None = None
        if config.kl_coef > 0:
            if reference is not None:
                if getattr(reference, "vocab_size", None) != policy.vocab_size:
                    raise ValueError(
                        f"the reference's vocabulary ({getattr(reference, 'vocab_size', None)}) differs from the "
                        f"policy's ({policy.vocab_size}); the KL needs the same tokenizer"
                    )
                self.reference = reference
            elif is_peft(model):
                self._base_reference = True
            else:  # a frozen copy of the weights, made before any step (and before fp32_trainable)
                frozen = copy.deepcopy(model).eval().requires_grad_(False)
                self.reference = copy.copy(policy)  # shares tokenizer and settings; scores with the copy
                self.reference.model = frozen
        if config.fp32_trainable:
            for parameter in self.parameters:
                if parameter.dtype in (torch.bfloat16, torch.float16):
                    parameter.data = parameter.data.float()
        self.optimizer = torch.optim.AdamW(self.parameters, **self._hyperparameters())
        self.step = 0

    def _hyperparameters(self) -> dict[str, Any]:
        cfg = self.config
        return {"lr": cfg.learning_rate, "betas": cfg.adam_betas, "eps": cfg.adam_eps, "weight_decay": cfg.weight_decay}

    def update(self, samples: Sequence[TrainSample]) -> UpdateStats:
        """Train on ``samples``; those with ``advantage=None`` get one from :func:`group_advantages`
        over them. ValueError for no samples, an item that is not a :class:`TrainSample`, a token
        id outside the vocabulary or a sequence over the context window."""
        began = time.perf_counter()
        samples = list(samples)
        if not samples:
            raise ValueError("update needs at least one TrainSample")
        for k, sample in enumerate(samples):
            if not isinstance(sample, TrainSample):
                raise ValueError(f"samples[{k}] must be a TrainSample, got {type(sample).__name__}")
        cfg = self.config
        missing = [s for s in samples if s.advantage is None]
        if missing:
            group_advantages(missing, scale=cfg.scale_advantages, eps=cfg.advantage_eps, ddof=cfg.std_ddof)
        stats = UpdateStats(learning_rate=float(self.optimizer.param_groups[0]["lr"]))
        for role in ROLES:
            mine = [s for s in samples if s.role == role]
            if not mine:
                continue
            advantages = [float(s.advantage or 0.0) for s in mine]
            mean = math.fsum(advantages) / len(advantages)
            stats.samples[role] = len(mine)
            stats.reward_mean[role] = math.fsum(s.reward for s in mine) / len(mine)
            stats.advantage_mean[role] = mean
            stats.advantage_std[role] = math.sqrt(math.fsum((a - mean) ** 2 for a in advantages) / len(advantages))
        trained = []
        for sample in samples:
            if cfg.role_weights.get(sample.role, 1.0) == 0:
                stats.dropped["zero_weight"] += 1
            elif sample.num_tokens == 0:
                stats.dropped["no_tokens"] += 1
            elif cfg.drop_zero_advantage and sample.advantage == 0:
                stats.dropped["zero_advantage"] += 1
            else:
                trained.append(sample)
                stats.trained_samples[sample.role] = stats.trained_samples.get(sample.role, 0) + 1
        if trained:
            count = min(cfg.mini_batches, len(trained))
            size, extra = divmod(len(trained), count)
            bounds = list(itertools.accumulate((size + (k < extra) for k in range(count)), initial=0))
            model = self.policy.model
            cache = getattr(self.policy, "prefix_cache", None)
            if cache is not None:  # its keys and values are stale after the step: free them before the passes
                cache.clear()
            model.train()
            losses, norms, totals = [], [], {"tokens": 0.0, "clip": 0.0, "ratio": 0.0, "kl": 0.0}
            try:
                for epoch in range(cfg.epochs):
                    if count > 1 or cfg.epochs > 1:
                        random.Random(f"{self.seed}:{self.step}:{epoch}").shuffle(trained)
                    for lo, hi in itertools.pairwise(bounds):
                        done = self._step(trained[lo:hi], stats, totals)
                        if done is not None:
                            losses.append(done[0])
                            norms.append(done[1])
            finally:
                model.eval()
                self.optimizer.zero_grad(set_to_none=True)
            if losses:
                stats.loss = math.fsum(losses) / len(losses)
                stats.grad_norm = math.fsum(norms) / len(norms)
            if totals["tokens"]:
                stats.tokens = int(totals["tokens"])
                stats.clip_fraction = totals["clip"] / totals["tokens"]
                stats.mean_ratio = totals["ratio"] / totals["tokens"]
                if self._has_reference:
                    stats.kl = totals["kl"] / totals["tokens"]
        stats.step = self.step
        stats.total_s = time.perf_counter() - began
        return stats

    @property
    def _has_reference(self) -> bool:
        return self._base_reference or self.reference is not None

    def _step(
        self, batch: list[TrainSample], stats: UpdateStats, totals: dict[str, float]
    ) -> tuple[float, float] | None:
        """One optimizer step on one mini-batch; ``(loss, grad norm)``, or ``None`` when skipped."""
        import torch

        cfg = self.config
        device = self.policy.device
        normalizer = sum(s.num_tokens for s in batch) if cfg.loss_type == "token" else len(batch)
        bf16 = cfg.bf16 and device.type == "cuda" and torch.cuda.is_bf16_supported()
        self.optimizer.zero_grad(set_to_none=True)
        loss_sum, what, mine = 0.0, "", {"tokens": 0.0, "clip": 0.0, "ratio": 0.0, "kl": 0.0}
        pairs = [(s.prompt_ids, s.completion_ids) for s in batch]
        temperatures = [s.temperature for s in batch]
        precision = functools.partial(torch.autocast, "cuda", torch.bfloat16) if bf16 else contextlib.nullcontext
        with precision():
            reference = self._reference_logprobs(pairs, temperatures) if self._has_reference else None
        passes = self.policy.score_batches(
            pairs,
            micro_batch_tokens=cfg.micro_batch_tokens,
            shared_prefix=cfg.shared_prefix,
            temperatures=temperatures,
            checkpoint_tokens=cfg.checkpoint_tokens,
        )
        with contextlib.closing(passes):  # the passes switch checkpointing off as they close, also on an error
            while True:
                started = time.perf_counter()
                with precision():  # the forward pass runs in next()
                    scored = next(passes, None)
                if scored is None:
                    break
                members, logprobs = scored
                micro = [batch[k] for k in members]
                loss, figures = grpo_loss(
                    torch.nn.utils.rnn.pad_sequence(logprobs, batch_first=True),
                    _padded([s.behaviour_logprobs for s in micro], torch.float32, device),
                    torch.tensor([float(s.advantage or 0.0) for s in micro], device=device),
                    _padded([s.loss_mask for s in micro], torch.bool, device),
                    clip_eps=cfg.clip_eps,
                    clip_eps_high=cfg.clip_eps_high,
                    ref_logprobs=None
                    if reference is None
                    else torch.nn.utils.rnn.pad_sequence([reference[k] for k in members], batch_first=True),
                    kl_coef=cfg.kl_coef,
                    loss_type=cfg.loss_type,
                    weights=torch.tensor([cfg.role_weights.get(s.role, 1.0) for s in micro], device=device),
                    normalizer=normalizer,
                )
                stats.forward_s += time.perf_counter() - started
                if not math.isfinite(figures["loss"]):
                    what = "loss"
                    break
                started = time.perf_counter()
                loss.backward()
                stats.backward_s += time.perf_counter() - started
                loss_sum += figures["loss"]
                mine["tokens"] += figures["tokens"]
                mine["clip"] += figures["clip_fraction"] * figures["tokens"]
                mine["ratio"] += figures["mean_ratio"] * figures["tokens"]
                mine["kl"] += figures.get("kl", 0.0) * figures["tokens"]
        started = time.perf_counter()
        norm = math.nan
        if not what:
            norm = float(torch.nn.utils.clip_grad_norm_(self.parameters, cfg.max_grad_norm or math.inf))
            what = "" if math.isfinite(norm) else "gradient norm"
        if what:
            self.optimizer.zero_grad(set_to_none=True)
            stats.skipped_nan += 1
            stats.optimizer_s += time.perf_counter() - started
            warnings.warn(
                f"GRPO step {self.step}: the {what} is NaN or inf on a mini-batch of {len(batch)} samples; the step "
                "is skipped (gradients zeroed, parameters unchanged). Check the samples' behaviour logprobs and "
                "rewards, and the learning rate.",
                RuntimeWarning,
                stacklevel=3,
            )
            return None
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.step += 1
        stats.optimizer_steps += 1
        stats.optimizer_s += time.perf_counter() - started
        for key, value in mine.items():
            totals[key] += value
        return loss_sum, norm

    def _reference_logprobs(
        self, pairs: list[tuple[list[int], list[int]]], temperatures: list[float]
    ) -> list[torch.Tensor]:
        """The frozen reference's logprobs of ``pairs`` at ``temperatures`` (no gradients), on the policy's device."""
        import torch

        options: dict[str, Any] = {
            "micro_batch_tokens": self.config.micro_batch_tokens,
            "shared_prefix": self.config.shared_prefix,
            "temperatures": temperatures,
        }
        with torch.no_grad():
            if self._base_reference:
                with self.policy.model.disable_adapter():
                    return self.policy.sequence_logprobs(pairs, **options)
            assert self.reference is not None
            out = self.reference.sequence_logprobs(pairs, **options)
        return [t.to(self.policy.device) for t in out]

    def state_dict(self) -> dict[str, Any]:
        """``{"optimizer", "step", "config"}``: a checkpoint's part besides the policy's weights."""
        return {"optimizer": self.optimizer.state_dict(), "step": self.step, "config": asdict(self.config)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore the optimizer state and step counter from :meth:`state_dict`; the hyperparameters
        stay this trainer's config's. ValueError for a state that is not one or does not fit."""
        missing = {"optimizer", "step"} - set(state)
        if missing:
            raise ValueError(f"not a GRPOTrainer state: missing {sorted(missing)}")
        self.optimizer.load_state_dict(state["optimizer"])
        for group in self.optimizer.param_groups:
            group.update(self._hyperparameters())
        self.step = int(state["step"])
