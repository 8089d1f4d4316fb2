"""The GRPO trainer core: advantages and losses against hand-computed values, and real updates of a
tiny randomly initialised Llama (2 layers, hidden size 32, 64-word vocabulary) on CPU: gradient
accumulation, direction of the update, NaN steps, LoRA with the base model as reference, the KL to
a frozen copy, checkpoints."""

from __future__ import annotations

import copy
import dataclasses
import io
import math
import re
import subprocess
import sys
import typing
from dataclasses import fields
from typing import Any

import pytest
from ranges import range_edges

from spade_gym.agent import Trajectory, Turn
from spade_gym.options import FINITE, type_name
from spade_gym.policies import Completion
from spade_gym.trainer import (
    GRPOConfig,
    GRPOTrainer,
    LossType,
    TrainSample,
    UpdateStats,
    group_advantages,
    grpo_loss,
    samples_from_completions,
    samples_from_trajectories,
)
from spade_gym.trainer.config import describe_config
from spade_gym.trainer.grpo import GRPOConfigError

try:
    import torch
except ImportError:  # the advantage tests need no torch
    torch = None  # type: ignore[assignment]
needs_torch = pytest.mark.skipif(torch is None, reason="needs the train extra (torch, transformers)")

LN2 = math.log(2.0)


def sample(reward: float, group: str = "g", role: str = "designer", *, tokens: int = 2, **kw: Any) -> TrainSample:
    """A sample whose token ids do not matter (advantage tests)."""
    return TrainSample([1], [5] * tokens, [-1.0] * tokens, [1] * tokens, reward, role, group, **kw)


# ------------------------------------------------------------------------------------- advantages


def test_advantages_are_hand_computed_per_role_and_group() -> None:
    samples = [
        sample(1.0, "p1"),  # designer pair: mean 0.5, population std 0.5
        sample(0.0, "p1"),
        sample(0.2, "p2"),  # all equal: 0
        sample(0.2, "p2"),
        sample(0.2, "p2"),
        sample(0.7, "p3"),  # singleton: 0
        # the agent's group has the same name as the designer's first: roles never mix
        sample(1.0, "p1", "agent"),  # mean 0.25, std sqrt(0.25 * 0.75) = sqrt(3) / 4
        sample(0.0, "p1", "agent"),
        sample(0.0, "p1", "agent"),
        sample(0.0, "p1", "agent"),
    ]
    advantages = group_advantages(samples, eps=0.0)
    s3 = math.sqrt(3.0)
    expected = [1.0, -1.0, 0.0, 0.0, 0.0, 0.0, 0.75 / (s3 / 4), -0.25 / (s3 / 4), -0.25 / (s3 / 4), -0.25 / (s3 / 4)]
    assert advantages == pytest.approx(expected, abs=1e-12)
    assert expected[6] == pytest.approx(s3) and expected[7] == pytest.approx(-1 / s3)
    assert [s.advantage for s in samples] == advantages
    # the default eps = 1e-6 is added to the std
    assert group_advantages(samples)[:2] == pytest.approx([0.5 / (0.5 + 1e-6), -0.5 / (0.5 + 1e-6)], abs=1e-12)
    # Dr. GRPO: r - mean, unscaled
    assert group_advantages(samples, scale=False) == pytest.approx(
        [0.5, -0.5, 0, 0, 0, 0, 0.75, -0.25, -0.25, -0.25], abs=1e-12
    )
    # ddof=1 (TRL's torch.std): the pair's std is sqrt(0.5 / 1)
    assert group_advantages(samples[:2], eps=0.0, ddof=1) == pytest.approx(
        [0.5 / math.sqrt(0.5), -0.5 / math.sqrt(0.5)]
    )
    # all-equal groups give exactly 0, not a rounding residue of the mean
    thirds = [sample(0.1, "t"), sample(0.1, "t"), sample(0.1, "t")]
    assert group_advantages(thirds) == [0.0, 0.0, 0.0]


def test_advantage_arguments_and_episode_rewards_are_checked() -> None:
    with pytest.raises(ValueError, match="eps"):
        group_advantages([sample(1.0)], eps=-1.0)
    with pytest.raises(ValueError, match="ddof"):
        group_advantages([sample(1.0)], ddof=2)
    with pytest.raises(ValueError, match="different rewards"):
        group_advantages([sample(1.0, episode="e1"), sample(0.0, episode="e1")])


def turn(prompt: list[int] | None, completion: list[int] | None) -> Turn:
    logprobs = None if completion is None else [-0.5] * len(completion)
    return Turn(prompt, completion, logprobs, "text", "stop", "a", True)


def trajectory(seed: int, episode_return: float, turns: int, *, hint: bool = False, **kw: Any) -> Trajectory:
    return Trajectory(
        "spade/Maze-v0",
        seed,
        hint,
        turns=[turn([1, 2, 3 + k], [7, 8]) for k in range(turns)],
        episode_return=episode_return,
        **kw,
    )


def test_agent_group_statistics_count_episodes_not_turns() -> None:
    """Episode A (3 turns, return 1) and B (1 turn, return 0) on one seed: over episodes the mean is
    0.5 and the std 0.5, so A's turns get +1 and B's -1. Over turns it would be mean 0.75, std
    0.433: +0.58 and -1.73."""
    a, b = trajectory(3, 1.0, 3), trajectory(3, 0.0, 1)
    samples = samples_from_trajectories([a, b])
    assert [s.group for s in samples] == ["agent:spade/Maze-v0:3"] * 4
    assert [s.role for s in samples] == ["agent"] * 4
    assert [s.reward for s in samples] == [1.0, 1.0, 1.0, 0.0]
    assert len({s.episode for s in samples[:3]}) == 1 and samples[3].episode != samples[0].episode
    assert samples[1].prompt_ids == [1, 2, 4] and samples[1].completion_ids == [7, 8]
    assert samples[1].behaviour_logprobs == [-0.5, -0.5] and samples[1].loss_mask == [1, 1]
    assert group_advantages(samples, eps=0.0) == pytest.approx([1.0, 1.0, 1.0, -1.0])
    assert [s.temperature for s in samples_from_trajectories([trajectory(3, 1.0, 2, temperature=0.5)])] == [0.5] * 2

    # a second call never merges its episodes with the first call's
    again = samples_from_trajectories([trajectory(3, 1.0, 1)])
    assert again[0].episode not in {s.episode for s in samples}


def test_trajectory_samples_group_by_seed_or_env_hint_apart_errors_left_out() -> None:
    skipped = trajectory(5, 1.0, 1)
    skipped.turns.append(turn(None, None))  # an OpenAI backend's turn: no tokens
    failed = trajectory(5, 0.0, 2, error={"type": "EnvRuntimeError", "category": "ENV_EXCEPTION"})
    trajectories = [trajectory(4, 1.0, 1), skipped, trajectory(4, 0.0, 1, hint=True), failed]
    by_seed = samples_from_trajectories(trajectories)
    assert [s.group for s in by_seed] == [
        "agent:spade/Maze-v0:4",
        "agent:spade/Maze-v0:5",
        "agent:spade/Maze-v0:4:hint",
    ]
    # every seed played once: singleton groups, no signal (a regret estimate's no-hint episodes)
    assert group_advantages(by_seed) == [0.0, 0.0, 0.0]
    by_env = samples_from_trajectories(trajectories, group_by="env", include_errors=True)
    assert [s.group for s in by_env] == ["agent:spade/Maze-v0"] * 2 + ["agent:spade/Maze-v0:hint"] + [
        "agent:spade/Maze-v0"
    ] * 2
    # seeds 4 (1.0), 5 (1.0) and the failed episode (0.0): mean 2/3, std sqrt(2)/3
    sd = math.sqrt(2.0) / 3.0
    assert group_advantages(by_env, eps=0.0) == pytest.approx(
        [(1 / 3) / sd, (1 / 3) / sd, 0.0, -(2 / 3) / sd, -(2 / 3) / sd]
    )
    with pytest.raises(ValueError, match="group_by"):
        samples_from_trajectories(trajectories, group_by="prompt")  # type: ignore[arg-type]


def test_samples_from_completions_share_one_group() -> None:
    completions = [
        Completion("x", [1, 2], [5, 6, 7], [-0.1, -0.2, -0.3], "stop", 0),
        Completion("y", [1, 2], [8], [-0.4], "length", 0),
    ]
    samples = samples_from_completions(completions, [0.5, -1.0], "designer:doc-1")
    assert [(s.role, s.group, s.reward, s.episode) for s in samples] == [
        ("designer", "designer:doc-1", 0.5, None),
        ("designer", "designer:doc-1", -1.0, None),
    ]
    assert samples[0].prompt_ids == [1, 2] and samples[0].loss_mask == [1, 1, 1] and samples[1].num_tokens == 1
    with pytest.raises(ValueError, match="one reward per completion"):
        samples_from_completions(completions, [0.5], "g")
    with pytest.raises(ValueError, match="no token ids"):
        samples_from_completions([Completion("z", None, None, None, "stop")], [1.0], "g")


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"role": "critic"}, "role"),
        ({"prompt_ids": []}, "prompt_ids"),
        ({"behaviour_logprobs": [-1.0]}, "one behaviour logprob"),
        ({"loss_mask": [1, 2]}, "only 0 and 1"),
        ({"reward": math.nan}, "reward must be a finite"),
        ({"reward": True}, "reward must be a finite"),
        ({"advantage": math.inf}, "advantage"),
    ],
)
def test_a_malformed_sample_is_refused(kwargs: dict[str, Any], message: str) -> None:
    fields_ = {
        "prompt_ids": [1],
        "completion_ids": [2, 3],
        "behaviour_logprobs": [-1.0, -1.0],
        "loss_mask": [1, 1],
        "reward": 1.0,
        "role": "agent",
        "group": "g",
    }
    with pytest.raises(ValueError, match=message):
        TrainSample(**{**fields_, **kwargs})


# ------------------------------------------------------------------------------------------- loss


def assert_grad(tensor: Any, expected: list[list[float]]) -> None:
    torch.testing.assert_close(tensor.grad, torch.tensor(expected, dtype=tensor.dtype), rtol=0, atol=1e-12)


def ratios(*rows: list[float]) -> Any:
    """log-probabilities whose ratio to a behaviour of 0 is the given numbers."""
    return torch.tensor([[math.log(r) for r in row] for row in rows], dtype=torch.float64, requires_grad=True)


@needs_torch
def test_clipped_loss_is_hand_computed_for_both_loss_types() -> None:
    """eps = 0.2. Sequence 0, A = +1, ratios 1.0, 1.5, 0.5:
        1.0: -min(1.0, 1.0) = -1.0
        1.5: -min(1.5, 1.2) = -1.2   (clipped: no gradient)
        0.5: -min(0.5, 0.8) = -0.5   (below the range, but min keeps the unclipped term)
    Sequence 1, A = -2, ratios 1.1, 0.5, [2.0 masked]:
        1.1: -min(-2.2, -2.2) = 2.2
        0.5: -min(-1.0, -1.6) = 1.6  (clipped: no gradient)
    token:    (-1.0 - 1.2 - 0.5 + 2.2 + 1.6) / 5 = 1.1 / 5 = 0.22
    sequence: ((-2.7 / 3) + (3.8 / 2)) / 2 = (-0.9 + 1.9) / 2 = 0.5
    """
    lp = ratios([1.0, 1.5, 0.5], [1.1, 0.5, 2.0])
    behaviour = torch.zeros(2, 3, dtype=torch.float64)
    advantages = torch.tensor([1.0, -2.0], dtype=torch.float64)
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    loss, stats = grpo_loss(lp, behaviour, advantages, mask)
    assert loss.item() == pytest.approx(0.22, abs=1e-12)
    assert stats["tokens"] == 5
    assert stats["clip_fraction"] == pytest.approx(2 / 5)  # the 1.5 (A > 0) and the 0.5 (A < 0)
    assert stats["mean_ratio"] == pytest.approx((1.0 + 1.5 + 0.5 + 1.1 + 0.5) / 5)
    assert "kl" not in stats
    loss.backward()
    # d/d lp of -ratio * A / N = -ratio * A / 5 where unclipped; 0 where clipped or masked
    assert_grad(lp, [[-1.0 / 5, 0.0, -0.5 / 5], [2.2 / 5, 0.0, 0.0]])

    lp.grad = None
    loss, _ = grpo_loss(lp, behaviour, advantages, mask, loss_type="sequence")
    assert loss.item() == pytest.approx(0.5, abs=1e-12)
    loss.backward()
    # sequence 0 weighs 1 / (2 * 3), sequence 1 weighs 1 / (2 * 2)
    assert_grad(lp, [[-1.0 / 6, 0.0, -0.5 / 6], [2.2 / 4, 0.0, 0.0]])


@needs_torch
def test_clip_higher_and_per_token_advantages() -> None:
    """eps 0.2 low, 0.28 high; A = +1 on ratio 1.5: -1.28; A = -1 on ratio 0.5: -min(-0.5, -0.8) = 0.8;
    A = +1 on ratio 1.25 (inside [0.8, 1.28]): -1.25. Mean over 3 tokens: (-1.28 + 0.8 - 1.25) / 3."""
    lp = ratios([1.5, 0.5, 1.25])
    advantages = torch.tensor([[1.0, -1.0, 1.0]], dtype=torch.float64)
    loss, stats = grpo_loss(
        lp, torch.zeros(1, 3, dtype=torch.float64), advantages, torch.ones(1, 3), clip_eps_high=0.28
    )
    assert loss.item() == pytest.approx((-1.28 + 0.8 - 1.25) / 3, abs=1e-12)
    assert stats["clip_fraction"] == pytest.approx(2 / 3)


@needs_torch
def test_kl_penalty_is_the_k3_estimator() -> None:
    """lp = 0, ref = ln 2, 0, -ln 2; k3 = e^d - d - 1 with d = ref - lp:
        d = ln 2:  2 - ln 2 - 1   = 0.30685...
        d = 0:     1 - 0 - 1      = 0
        d = -ln 2: 0.5 + ln 2 - 1 = 0.19314...
    sum = 0.5, mean 1/6; with A = 0 the loss is kl_coef * 1/6 = 0.5 / 6.
    d k3 / d lp = 1 - e^d: -1, 0, 0.5; times kl_coef / N = 0.5 / 3."""
    lp = torch.zeros(1, 3, dtype=torch.float64, requires_grad=True)
    ref = torch.tensor([[LN2, 0.0, -LN2]], dtype=torch.float64)
    args = (lp, torch.zeros(1, 3, dtype=torch.float64), torch.zeros(1, dtype=torch.float64), torch.ones(1, 3))
    loss, stats = grpo_loss(*args, ref_logprobs=ref, kl_coef=0.5)
    assert [2 - LN2 - 1, 0.0, 0.5 + LN2 - 1] == pytest.approx([0.3068528, 0.0, 0.1931472], abs=1e-7)
    assert stats["kl"] == pytest.approx(((2 - LN2 - 1) + 0.0 + (0.5 + LN2 - 1)) / 3, abs=1e-12)
    assert loss.item() == pytest.approx(0.5 / 6, abs=1e-12)
    loss.backward()
    assert_grad(lp, [[-1.0 * 0.5 / 3, 0.0, 0.5 * 0.5 / 3]])
    # a reference without a coefficient is measured, not penalised
    loss, stats = grpo_loss(*args, ref_logprobs=ref)
    assert loss.item() == 0.0 and stats["kl"] == pytest.approx(0.5 / 3)
    with pytest.raises(ValueError, match="needs ref_logprobs"):
        grpo_loss(*args, kl_coef=0.1)


@needs_torch
@pytest.mark.parametrize("loss_type", ["token", "sequence"])
def test_micro_batch_losses_with_the_full_normalizer_add_up(loss_type: LossType) -> None:
    lp = ratios([1.0, 1.5, 0.5], [1.1, 0.5, 2.0], [0.9, 1.0, 1.0])
    behaviour, mask = torch.zeros(3, 3, dtype=torch.float64), torch.tensor([[1, 1, 1], [1, 1, 0], [1, 0, 0]])
    advantages = torch.tensor([1.0, -2.0, 0.5], dtype=torch.float64)
    weights = torch.tensor([1.0, 0.5, 2.0], dtype=torch.float64)
    full, _ = grpo_loss(lp, behaviour, advantages, mask, loss_type=loss_type, weights=weights)
    n = 6 if loss_type == "token" else 3
    parts = [
        grpo_loss(
            lp[k : k + 1],
            behaviour[k : k + 1],
            advantages[k : k + 1],
            mask[k : k + 1],
            loss_type=loss_type,
            weights=weights[k : k + 1],
            normalizer=n,
        )[0]
        for k in range(3)
    ]
    assert sum(p.item() for p in parts) == pytest.approx(full.item(), abs=1e-12)
    if loss_type == "token":  # weighted: (1 * (-2.7) + 0.5 * 3.8 + 2 * (-0.45)) / 6
        assert full.item() == pytest.approx((-2.7 + 0.5 * 3.8 + 2 * -0.45) / 6, abs=1e-12)


@needs_torch
def test_padding_may_hold_anything_but_a_nan_on_a_trained_token_poisons_the_loss() -> None:
    lp = torch.tensor([[-1.0, float("nan")]], requires_grad=True)
    behaviour = torch.tensor([[-1.0, float("-inf")]])
    loss, stats = grpo_loss(lp, behaviour, torch.ones(1), torch.tensor([[1, 0]]))
    assert loss.item() == -1.0 and stats["tokens"] == 1
    loss.backward()
    assert lp.grad is not None and torch.isfinite(lp.grad).all()
    loss, _ = grpo_loss(lp, behaviour, torch.ones(1), torch.tensor([[1, 1]]))
    assert math.isnan(loss.item())
    # nothing trained at all: a zero loss, still on the graph
    loss, stats = grpo_loss(lp, behaviour, torch.ones(1), torch.zeros(1, 2))
    assert loss.item() == 0.0 and loss.requires_grad and stats["tokens"] == 0


@needs_torch
def test_loss_arguments_are_checked() -> None:
    lp, other = torch.zeros(2, 3), torch.zeros(2, 3)
    adv, mask = torch.zeros(2), torch.ones(2, 3)
    with pytest.raises(ValueError, match=r"logprobs must be \[B, T\]"):
        grpo_loss(torch.zeros(3), other, adv, mask)
    with pytest.raises(ValueError, match="behaviour_logprobs must have the shape"):
        grpo_loss(lp, torch.zeros(2, 4), adv, mask)
    with pytest.raises(ValueError, match="advantages must be"):
        grpo_loss(lp, other, torch.zeros(3), mask)
    with pytest.raises(ValueError, match="loss_type"):
        grpo_loss(lp, other, adv, mask, loss_type="seq")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="clip_eps"):
        grpo_loss(lp, other, adv, mask, clip_eps=1.5)
    with pytest.raises(ValueError, match="kl_coef"):
        grpo_loss(lp, other, adv, mask, kl_coef=-1.0)


# ----------------------------------------------------------------------------------------- config


@pytest.mark.parametrize(
    ("kwargs", "name"),
    [
        ({"learning_rate": 0.0}, "learning_rate"),
        ({"clip_eps": 0.0}, "clip_eps"),
        ({"clip_eps_high": -0.1}, "clip_eps_high"),
        ({"kl_coef": -0.1}, "kl_coef"),
        ({"loss_type": "seq"}, "loss_type"),
        ({"micro_batch_tokens": 0}, "micro_batch_tokens"),
        ({"mini_batches": 1.5}, "mini_batches"),
        ({"epochs": 0}, "epochs"),
        ({"max_grad_norm": 0.0}, "max_grad_norm"),
        ({"agent_weight": -1.0}, "agent_weight"),
        ({"designer_weight": math.nan}, "designer_weight"),
        ({"std_ddof": 2}, "std_ddof"),
        ({"adam_betas": (0.9, 1.0)}, "adam_betas"),
    ],
)
def test_config_fields_out_of_range_are_named(kwargs: dict[str, Any], name: str) -> None:
    with pytest.raises(ValueError, match=f"GRPOConfig.{name} must be"):
        GRPOConfig(**kwargs)


def annotated_ranges() -> list[tuple[str, Any, Any, list[Any], int | None]]:
    """``(field, its type, base type, Annotated metadata, slot)`` of every GRPOConfig range; ``slot``:
    the tuple element (``adam_betas``) the range is of, else ``None``."""
    hints = typing.get_type_hints(GRPOConfig, include_extras=True)
    out = []
    for f in fields(GRPOConfig):
        tp = hints[f.name]
        is_tuple = typing.get_origin(tp) is tuple
        for n, arm in enumerate((tp, *typing.get_args(tp))):
            if typing.get_origin(arm) is typing.Annotated:
                out.append((f.name, tp, arm.__origin__, list(arm.__metadata__), n - 1 if is_tuple else None))
    return out


def python_edges(base: type, metadata: list[Any]) -> tuple[list[Any], list[Any]]:
    """:func:`ranges.range_edges`, and what only a Python caller can pass: a bool (not a number), an
    int too large for a float, NaN or a float for an int."""
    refused, accepted = range_edges(base, metadata)
    refused = [True, *refused, *([10**400] if FINITE in metadata else [])]
    refused.append(math.nan if base is float else float(accepted[0]))
    return refused, accepted


def test_every_config_range_is_checked_in_python_with_the_help_text() -> None:
    help_types = dict(re.findall(r"^  train\.(\w+): (.*) = ", describe_config(), re.MULTILINE))
    ranges = annotated_ranges()
    unranged = {"loss_type"}  # a Literal; checked below
    assert {name for name, *_ in ranges} == {
        f.name for f in fields(GRPOConfig) if f.name not in unranged and f.type != "bool"
    }
    for name, tp, base, metadata, slot in ranges:
        expected = type_name(tp, none="None")
        assert expected.replace("None", "null") == help_types[name], name  # what --help-config says
        refused, accepted = python_edges(base, metadata)
        for value in refused:
            if slot is not None:
                value = tuple(v if n != slot else value for n, v in enumerate(getattr(GRPOConfig(), name)))
            with pytest.raises(GRPOConfigError) as info:
                GRPOConfig(**{name: value})
            assert (info.value.field, info.value.value, info.value.expected) == (name, value, expected)
            assert str(info.value) == f"GRPOConfig.{name} must be {expected}, got {value!r}"
        for value in accepted:
            if slot is not None:
                value = tuple(v if n != slot else value for n, v in enumerate(getattr(GRPOConfig(), name)))
            assert getattr(GRPOConfig(**{name: value}), name) == value, name
    for name, value, expected in (
        ("loss_type", "seq", "one of 'token', 'sequence'"),
        ("adam_betas", (0.9,), "two numbers in [0, 1)"),
        ("adam_betas", (0.9, 0.9, 0.9), "two numbers in [0, 1)"),
    ):
        with pytest.raises(GRPOConfigError) as info:
            GRPOConfig(**{name: value})
        assert info.value.expected == expected
    assert GRPOConfig(loss_type="sequence", agent_weight=0).role_weights == {"designer": 1.0, "agent": 0}


def test_every_config_field_has_help() -> None:
    config = GRPOConfig()
    assert all(f.metadata.get("help") for f in fields(config))
    assert config.role_weights == {"designer": 1.0, "agent": 1.0} and config.loss_type == "token"


def test_importing_the_trainer_does_not_import_torch() -> None:
    code = "import sys, spade_gym, spade_gym.trainer; assert 'torch' not in sys.modules, 'torch imported'"
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


# --------------------------------------------------------------------------------- tiny real model

WORDS = ["<pad>", "<eos>", "<unk>", "user", "assistant", "system", ":"] + [f"w{i}" for i in range(57)]
TEMPLATE = (
    "{% for m in messages %}{{ m['role'] }} : {{ m['content'] }} {% endfor %}"
    "{% if add_generation_prompt %}assistant : {% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    pytest.importorskip("transformers")
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    out = PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>", unk_token="<unk>")
    out.chat_template = TEMPLATE
    return out


def tiny_policy(tokenizer: Any, *, seed: int = 0, lora: dict[str, Any] | None = None) -> Any:
    from transformers import LlamaConfig, LlamaForCausalLM

    from spade_gym.policies.transformers import TransformersPolicy

    config = LlamaConfig(
        vocab_size=len(WORDS),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
        pad_token_id=0,
        eos_token_id=1,
        bos_token_id=None,
    )
    torch.manual_seed(seed)
    return TransformersPolicy(LlamaForCausalLM(config), tokenizer, device="cpu", lora=lora)


def on_policy(policy: Any, samples: list[TrainSample]) -> list[TrainSample]:
    """Set each sample's behaviour logprobs to the policy's own (as if it had just sampled them)."""
    with torch.no_grad():
        scored = policy.sequence_logprobs([(s.prompt_ids, s.completion_ids) for s in samples])
    for s, lp in zip(samples, scored, strict=True):
        s.behaviour_logprobs = lp.tolist()
    return samples


def snapshot(policy: Any) -> dict[str, Any]:
    return {name: p.detach().clone() for name, p in policy.model.named_parameters()}


PROMPT = [3, 6, 9, 10, 4, 6]


def mixed_batch() -> list[TrainSample]:
    """Designer pair and agent episodes of different lengths, rewards with a spread in each group."""
    designer = [
        TrainSample(PROMPT, [11, 12, 13, 1], [0.0] * 4, [1] * 4, 1.0, "designer", "designer:p"),
        TrainSample(PROMPT, [14, 15], [0.0] * 2, [1] * 2, 0.0, "designer", "designer:p"),
        TrainSample(PROMPT[:3], [16, 17, 18, 19, 20, 1], [0.0] * 6, [1, 1, 0, 1, 1, 1], 0.3, "designer", "designer:p"),
    ]
    agent = [
        TrainSample([3, 6, 21], [22, 23, 24], [0.0] * 3, [1] * 3, 1.0, "agent", "agent:e:0", episode="a"),
        TrainSample(
            [3, 6, 21, 22, 23, 24, 3, 6, 25], [26, 1], [0.0] * 2, [1] * 2, 1.0, "agent", "agent:e:0", episode="a"
        ),
        TrainSample([3, 6, 21], [27], [0.0], [1], 0.0, "agent", "agent:e:0", episode="b"),
        TrainSample([3, 6, 21], [28, 29, 30, 31, 32], [0.0] * 5, [1] * 5, 0.25, "agent", "agent:e:0", episode="c"),
    ]
    return designer + agent


@needs_torch
@pytest.mark.parametrize("loss_type", ["token", "sequence"])
def test_gradient_accumulation_equals_one_big_batch(tokenizer: Any, loss_type: LossType) -> None:
    """One sample per pass (7 backward passes), all in one pass with shared prefixes and with
    checkpointing, and whole left-padded sequences: same loss, gradient norm and update. The
    behaviour logprobs are shifted off-policy (+-0.3) so that some tokens are clipped."""
    results = []
    settings = [
        {"micro_batch_tokens": 1},
        {"micro_batch_tokens": 1000, "checkpoint_tokens": 0},
        {"micro_batch_tokens": 1000, "shared_prefix": False, "checkpoint_tokens": None},
    ]
    for setting in settings:
        policy = tiny_policy(tokenizer)
        samples = on_policy(policy, mixed_batch())
        for k, s in enumerate(samples):
            s.behaviour_logprobs = [lp + (0.3 if (k + t) % 2 else -0.3) for t, lp in enumerate(s.behaviour_logprobs)]
        config = GRPOConfig(learning_rate=1e-3, loss_type=loss_type, max_grad_norm=None, **setting)
        stats = GRPOTrainer(policy, config).update(samples)
        results.append((stats, snapshot(policy)))
    (one, p_one), *others = results
    for all_, p_all in others:
        assert one.optimizer_steps == all_.optimizer_steps == 1
        assert one.tokens == all_.tokens == sum(s.num_tokens for s in mixed_batch()) == 22
        assert one.clip_fraction > 0 and one.clip_fraction == pytest.approx(all_.clip_fraction)
        assert one.loss == pytest.approx(all_.loss, rel=1e-5, abs=1e-7)
        assert one.grad_norm == pytest.approx(all_.grad_norm, rel=1e-5)
        for name, value in p_one.items():
            # Adam divides by |g|: entries with a near-zero gradient amplify rounding; 1e-5 is 1% of a step
            torch.testing.assert_close(value, p_all[name], rtol=0, atol=1e-5)


@needs_torch
def test_an_update_raises_the_rewarded_completion_and_lowers_the_other(tokenizer: Any) -> None:
    policy = tiny_policy(tokenizer)
    good, bad = [11, 12, 13], [20, 21, 22]
    samples = on_policy(
        policy,
        [
            TrainSample(PROMPT, good, [0.0] * 3, [1] * 3, 1.0, "designer", "designer:p"),
            TrainSample(PROMPT, bad, [0.0] * 3, [1] * 3, 0.0, "designer", "designer:p"),
            # an all-equal group: no signal, left out
            TrainSample(PROMPT, [30], [0.0], [1], 0.5, "agent", "agent:e:1", episode="x"),
            TrainSample(PROMPT, [31], [0.0], [1], 0.5, "agent", "agent:e:1", episode="y"),
        ],
    )
    before = [sum(s.behaviour_logprobs) for s in samples[:2]]
    trainer = GRPOTrainer(policy, GRPOConfig(learning_rate=1e-2))
    stats = trainer.update(samples)
    assert not policy.model.training, "generation expects eval mode after the update"
    with torch.no_grad():
        after = [lp.sum().item() for lp in policy.sequence_logprobs([(PROMPT, good), (PROMPT, bad)])]
    assert after[0] > before[0] + 0.05 and after[1] < before[1] - 0.05
    assert [s.advantage for s in samples] == pytest.approx([1.0, -1.0, 0.0, 0.0], abs=1e-5)
    assert (stats.optimizer_steps, stats.step, trainer.step, stats.skipped_nan) == (1, 1, 1, 0)
    assert stats.samples == {"designer": 2, "agent": 2} and stats.trained_samples == {"designer": 2}
    assert stats.dropped == {"zero_advantage": 2, "no_tokens": 0, "zero_weight": 0}
    assert stats.tokens == 6 and stats.clip_fraction == 0.0 and stats.mean_ratio == pytest.approx(1.0, abs=1e-5)
    # on-policy: ratio 1, so the token loss is -mean(A) over tokens = -(3 * 1 + 3 * -1) / 6 = 0
    assert stats.loss == pytest.approx(0.0, abs=1e-5) and stats.grad_norm > 0 and stats.kl is None
    assert stats.advantage_mean["designer"] == pytest.approx(0.0) and stats.reward_mean["agent"] == 0.5
    assert stats.total_s >= stats.forward_s + stats.backward_s + stats.optimizer_s > 0
    flat = stats.as_dict()
    assert flat["designer/trained_samples"] == 2 and flat["dropped/zero_advantage"] == 2 and "kl" not in flat


@needs_torch
def test_a_nan_loss_skips_the_step_with_a_warning(tokenizer: Any) -> None:
    policy = tiny_policy(tokenizer)
    samples = on_policy(
        policy,
        [
            TrainSample(PROMPT, [11, 12], [0.0] * 2, [1] * 2, 1.0, "designer", "designer:p"),
            TrainSample(PROMPT, [20, 21], [0.0] * 2, [1] * 2, 0.0, "designer", "designer:p"),
        ],
    )
    samples[1].behaviour_logprobs[1] = math.nan
    before = snapshot(policy)
    trainer = GRPOTrainer(policy, GRPOConfig(learning_rate=1e-2, micro_batch_tokens=1))
    with pytest.warns(RuntimeWarning, match="NaN or inf.*skipped"):
        stats = trainer.update(samples)
    assert stats.skipped_nan == 1 and stats.optimizer_steps == 0 and trainer.step == 0
    assert math.isnan(stats.loss) and stats.as_dict()["skipped_nan"] == 1
    assert all(torch.equal(before[n], p) for n, p in snapshot(policy).items())
    assert all(p.grad is None for p in policy.model.parameters())
    assert trainer.optimizer.state_dict()["state"] == {}, "the optimizer must not have stepped"
    assert not policy.model.training


@needs_torch
def test_lora_trains_only_the_adapters_against_the_base_model(tokenizer: Any) -> None:
    policy = tiny_policy(tokenizer, lora={"r": 2, "lora_alpha": 4, "target_modules": ["q_proj", "v_proj"]})
    trainer = GRPOTrainer(policy, GRPOConfig(learning_rate=1e-2, kl_coef=0.1))
    assert trainer.reference is None, "with LoRA the reference is the base model: no copy"
    assert trainer.parameters and all("lora_" in n for n, p in policy.model.named_parameters() if p.requires_grad)

    def batch() -> list[TrainSample]:
        return on_policy(
            policy,
            [
                TrainSample(PROMPT, [11, 12, 13], [0.0] * 3, [1] * 3, 1.0, "designer", "designer:p"),
                TrainSample(PROMPT, [20, 21], [0.0] * 2, [1] * 2, 0.0, "designer", "designer:p"),
            ],
        )

    before = snapshot(policy)
    first = trainer.update(batch())
    assert first.kl is not None and first.kl == pytest.approx(0.0, abs=1e-7), "fresh adapters are the base model"
    changed = {n for n, p in snapshot(policy).items() if not torch.equal(before[n], p)}
    assert changed and all("lora_" in n for n in changed)
    second = trainer.update(batch())
    assert second.kl is not None and second.kl > 1e-9
    assert all(torch.equal(before[n], p) for n, p in snapshot(policy).items() if "lora_" not in n)


@needs_torch
def test_without_lora_the_reference_is_a_frozen_copy(tokenizer: Any) -> None:
    policy = tiny_policy(tokenizer)
    trainer = GRPOTrainer(policy, GRPOConfig(learning_rate=1e-2, kl_coef=0.1))
    reference = trainer.reference
    assert reference is not None and reference.model is not policy.model
    assert not any(p.requires_grad for p in reference.model.parameters())
    frozen = {n: p.detach().clone() for n, p in reference.model.named_parameters()}
    samples = [
        TrainSample(PROMPT, [11, 12, 13], [0.0] * 3, [1] * 3, 1.0, "agent", "agent:e:0", episode="a"),
        TrainSample(PROMPT, [20, 21], [0.0] * 2, [1] * 2, 0.0, "agent", "agent:e:0", episode="b"),
    ]
    first = trainer.update(on_policy(policy, copy.deepcopy(samples)))
    assert first.kl == pytest.approx(0.0, abs=1e-7)
    second = trainer.update(on_policy(policy, copy.deepcopy(samples)))
    assert second.kl is not None and second.kl > 1e-9
    assert all(torch.equal(frozen[n], p) for n, p in reference.model.named_parameters())


@needs_torch
def test_mini_batches_and_role_weights(tokenizer: Any) -> None:
    policy = tiny_policy(tokenizer)
    samples = on_policy(policy, mixed_batch())
    config = GRPOConfig(learning_rate=1e-2, mini_batches=2, epochs=2, designer_weight=0.0)
    stats = GRPOTrainer(policy, config).update(samples)
    assert stats.dropped["zero_weight"] == 3 and stats.trained_samples == {"agent": 4}
    assert stats.optimizer_steps == 4 and stats.step == 4
    assert stats.tokens == 2 * 11, "each epoch trains every agent token once"
    # the second mini-batch runs on weights the first step moved: ratios leave 1
    assert stats.mean_ratio != pytest.approx(1.0, abs=1e-7)


@needs_torch
def test_trainer_state_round_trips(tokenizer: Any) -> None:
    config = GRPOConfig(learning_rate=1e-2)
    first = mixed_batch()
    policy_a = tiny_policy(tokenizer)
    trainer_a = GRPOTrainer(policy_a, config)
    trainer_a.update(on_policy(policy_a, first))
    buffer = io.BytesIO()
    torch.save(trainer_a.state_dict(), buffer)
    buffer.seek(0)
    state = torch.load(buffer, weights_only=False)
    assert state["step"] == 1 and state["config"]["learning_rate"] == 1e-2

    policy_b = tiny_policy(tokenizer, seed=1)
    policy_b.model.load_state_dict(policy_a.model.state_dict())
    trainer_b = GRPOTrainer(policy_b, config)
    trainer_b.load_state_dict(state)
    assert trainer_b.step == 1
    for trainer, policy in ((trainer_a, policy_a), (trainer_b, policy_b)):
        trainer.update(on_policy(policy, mixed_batch()))
    for name, value in snapshot(policy_a).items():
        torch.testing.assert_close(value, snapshot(policy_b)[name], rtol=0, atol=1e-7)
    assert trainer_b.step == 2
    with pytest.raises(ValueError, match="missing"):
        trainer_b.load_state_dict({"step": 3})


@needs_torch
def test_update_refuses_what_it_cannot_train(tokenizer: Any) -> None:
    policy = tiny_policy(tokenizer)
    trainer = GRPOTrainer(policy, GRPOConfig())
    with pytest.raises(ValueError, match="at least one"):
        trainer.update([])
    with pytest.raises(ValueError, match="must be a TrainSample"):
        trainer.update([("not", "a sample")])  # type: ignore[list-item]
    with pytest.raises(ValueError, match="not a token id"):
        trainer.update([sample(1.0, tokens=1), TrainSample([1], [999], [-1.0], [1], 0.0, "designer", "g")])
    assert isinstance(trainer.update([sample(1.0)]), UpdateStats)  # a lone sample: nothing to train, no step
    for p in policy.model.parameters():
        p.requires_grad_(False)
    with pytest.raises(ValueError, match="no trainable parameters"):
        GRPOTrainer(policy)


@needs_torch
def test_a_non_finite_gradient_norm_skips_the_step(tokenizer: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    policy = tiny_policy(tokenizer)
    samples = on_policy(policy, mixed_batch())
    before = snapshot(policy)
    trainer = GRPOTrainer(policy, GRPOConfig(learning_rate=1e-2))
    monkeypatch.setattr(torch.nn.utils, "clip_grad_norm_", lambda *args, **kwargs: torch.tensor(math.inf))
    with pytest.warns(RuntimeWarning, match="gradient norm is NaN or inf"):
        stats = trainer.update(samples)
    assert (stats.skipped_nan, stats.optimizer_steps, trainer.step) == (1, 0, 0)
    assert all(torch.equal(before[n], p) for n, p in snapshot(policy).items())


@needs_torch
def test_a_bf16_model_trains_on_float32_master_weights(tokenizer: Any) -> None:
    """A step of 1e-5 is below bf16's resolution (8 bits of mantissa): the trainable weights are
    kept in float32 so that small learning rates still move them."""
    policy = tiny_policy(tokenizer)
    policy.model.to(torch.bfloat16)
    trainer = GRPOTrainer(policy, GRPOConfig(learning_rate=1e-5))
    assert all(p.dtype == torch.float32 for p in trainer.parameters)
    before = snapshot(policy)
    stats = trainer.update(on_policy(policy, mixed_batch()))
    assert stats.optimizer_steps == 1
    assert any(not torch.equal(before[n], p) for n, p in snapshot(policy).items())


@needs_torch
def test_an_update_rescores_at_the_sampling_temperature(tokenizer: Any) -> None:
    """Completions sampled at temperature 0.5 carry logprobs of logits / 0.5; the update re-scores
    them at 0.5, so the first step is on-policy (ratio 1, nothing clipped). Claimed at temperature
    1, the same samples look off-policy."""
    from spade_gym.policies import SamplingParams

    ratios = []
    for claimed in (None, 1.0):
        policy = tiny_policy(tokenizer)
        prompt = [{"role": "user", "content": "w1 w2 w3"}]
        completions = policy.generate([prompt], SamplingParams(temperature=0.5, n=4, max_new_tokens=5, seed=1))
        assert {c.temperature for c in completions} == {0.5}
        samples = samples_from_completions(completions, [1.0, 0.0, 1.0, 0.0], group="g")
        assert {s.temperature for s in samples} == {0.5}
        if claimed is not None:
            samples = [dataclasses.replace(s, temperature=claimed) for s in samples]
        stats = GRPOTrainer(policy, GRPOConfig(learning_rate=1e-3)).update(samples)
        ratios.append(stats.mean_ratio)
    assert ratios[0] == pytest.approx(1.0, abs=1e-5)
    assert abs(ratios[1] - 1.0) > 1e-3
    with pytest.raises(ValueError, match="temperature must be a finite number > 0"):
        TrainSample([1], [2], [0.0], [1], 1.0, "agent", "g", temperature=0.0)
