"""spade_gym: SPADE self-play as Gymnasium environments."""

from spade_gym.errors import (
    ContractError,
    EnvRuntimeError,
    ProgramError,
    ResourceLimitExceeded,
    SandboxError,
    SandboxSetupError,
    SandboxTimeout,
    SandboxViolation,
    SpadeError,
    WorkerCrash,
)
from spade_gym.program import EnvProgram
from spade_gym.sandbox import Budget, Limits, ProgramSpec, SandboxClient, SandboxConfig

__version__ = "0.1.0.dev0"

__all__ = [
    "Budget",
    "ContractError",
    "EnvProgram",
    "EnvRuntimeError",
    "Limits",
    "ProgramError",
    "ProgramSpec",
    "ResourceLimitExceeded",
    "SandboxClient",
    "SandboxConfig",
    "SandboxError",
    "SandboxSetupError",
    "SandboxTimeout",
    "SandboxViolation",
    "SpadeError",
    "WorkerCrash",
    "__version__",
]

from spade_gym.env import SandboxedEnv, escape_text  # noqa: E402
from spade_gym.spaces import UnicodeText  # noqa: E402


def _register_gymnasium_ids() -> None:
    """Register the ``spade/`` ids with gymnasium (string entry points, JSON-able kwargs)."""
    import gymnasium

    if "spade/Program-v0" not in gymnasium.registry:
        gymnasium.register(id="spade/Program-v0", entry_point="spade_gym.env:SandboxedEnv")


_register_gymnasium_ids()
__all__ += ["SandboxedEnv", "UnicodeText", "escape_text"]
