"""The weights a trainer changes, as a state dict to save, hash and load back (checkpoints, the cold
start's cached adapters, the learning evaluation's digest); torch and peft are imported on first call."""

from __future__ import annotations

from typing import Any

__all__ = ["load_trainable_state", "trainable_state"]


def trainable_state(policy: Any) -> dict[str, Any]:
    """The weights the trainer changes: the LoRA adapters (peft), else the whole model.

    Returns ``{parameter name: CPU tensor}`` (detached copies).
    """
    from spade_gym.policies.transformers import is_peft  # lazily: it imports torch

    model = policy.model
    if is_peft(model):
        from peft import get_peft_model_state_dict

        return {k: v.detach().cpu() for k, v in get_peft_model_state_dict(model).items()}
    return {k: v.detach().cpu() for k, v in model.state_dict().items()}


def load_trainable_state(policy: Any, state: dict[str, Any]) -> None:
    """Load :func:`trainable_state`'s ``state`` back into ``policy``'s model."""
    from spade_gym.policies.transformers import is_peft

    model = policy.model
    if is_peft(model):
        from peft import set_peft_model_state_dict

        set_peft_model_state_dict(model, state)
    else:
        model.load_state_dict(state)
