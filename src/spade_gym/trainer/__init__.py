"""The self-play trainer (:mod:`spade_gym.trainer.grpo`); importing it does not import torch."""

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
