"""spade_gym: SPADE self-play as Gymnasium environments."""

import os as _os
import sys as _sys

if "torch" not in _sys.modules:  # read once, when torch loads its OpenMP runtime
    # OpenMP threads spinning while they wait burn the core a competing process needs: beside another
    # busy process on 2 cores, generation took 2.4-7x longer (benchmarks/test_bench_threads.py).
    _os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from spade_gym.env import SandboxedEnv, escape_text
from spade_gym.errors import (
    BackendUnavailable,
    ContextLengthExceeded,
    ContractError,
    DocumentError,
    DuplicateEnvironment,
    EnvNotFound,
    EnvRuntimeError,
    GenerationError,
    ModelNotFound,
    PolicyError,
    ProgramError,
    RegistryError,
    ResourceLimitExceeded,
    SandboxError,
    SandboxSetupError,
    SandboxTimeout,
    SandboxViolation,
    SpadeError,
    WorkerCrash,
)
from spade_gym.policies import Completion, Policy, SamplingParams, load_policy
from spade_gym.program import EnvProgram
from spade_gym.registry import EnvRecord, Registry
from spade_gym.registry.gymnasium import register_builtin_ids, register_registry
from spade_gym.sandbox import Budget, Limits, ProgramSpec, SandboxClient, SandboxConfig
from spade_gym.spaces import UnicodeText
from spade_gym.stages import register_program
from spade_gym.validation import ValidationConfig, ValidationReport, validate

__version__ = "0.1.0.dev0"

__all__ = [
    "BackendUnavailable",
    "Budget",
    "Completion",
    "ContextLengthExceeded",
    "ContractError",
    "DocumentError",
    "DuplicateEnvironment",
    "EnvNotFound",
    "EnvProgram",
    "EnvRecord",
    "EnvRuntimeError",
    "GenerationError",
    "Limits",
    "ModelNotFound",
    "Policy",
    "PolicyError",
    "ProgramError",
    "ProgramSpec",
    "Registry",
    "RegistryError",
    "ResourceLimitExceeded",
    "SamplingParams",
    "SandboxClient",
    "SandboxConfig",
    "SandboxError",
    "SandboxSetupError",
    "SandboxTimeout",
    "SandboxViolation",
    "SandboxedEnv",
    "SpadeError",
    "UnicodeText",
    "ValidationConfig",
    "ValidationReport",
    "WorkerCrash",
    "escape_text",
    "load_policy",
    "register_program",
    "register_registry",
    "validate",
    "__version__",
]

register_builtin_ids()
