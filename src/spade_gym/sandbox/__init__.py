"""The sandbox: a RestrictedPython policy of our own, run in locked-down worker processes.

Public entry points: :class:`SandboxClient` (one worker, one program instance),
:class:`SandboxConfig` (every limit), :class:`Budget` (worker CPU), :class:`HostBudget` (host CPU), :func:`call_many`, and :data:`LAYERS`.
See ``docs/security.md`` for the threat model.
"""

from spade_gym.sandbox.client import (
    MAX_EPISODE_TEXT_BYTES,
    MAX_EPISODE_TURNS,
    Budget,
    HostBudget,
    ProgramSpec,
    SandboxClient,
    SandboxConfig,
    Zygote,
    call_many,
)
from spade_gym.sandbox.lockdown import LAYERS
from spade_gym.sandbox.policy import ALLOWED_MODULES
from spade_gym.sandbox.protocol import Limits

__all__ = [
    "ALLOWED_MODULES",
    "LAYERS",
    "MAX_EPISODE_TEXT_BYTES",
    "MAX_EPISODE_TURNS",
    "Budget",
    "HostBudget",
    "Limits",
    "ProgramSpec",
    "SandboxClient",
    "SandboxConfig",
    "Zygote",
    "call_many",
]
