"""The self-play trainer: one GRPO-style update of the policy that plays both SPADE roles.

See :mod:`spade_gym.trainer.grpo`. Importing this package does not import torch (``import
spade_gym`` does not import this package at all); torch is imported when a loss is computed or a
trainer is built.
"""

from __future__ import annotations

from spade_gym.trainer.grpo import (
    ROLES,
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

__all__ = [
    "ROLES",
    "GRPOConfig",
    "GRPOTrainer",
    "LossType",
    "TrainSample",
    "UpdateStats",
    "group_advantages",
    "grpo_loss",
    "samples_from_completions",
    "samples_from_trajectories",
]
