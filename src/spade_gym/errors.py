"""Every error spade_gym raises, in one hierarchy rooted at :class:`SpadeError`.

Catch :class:`SandboxError` for anything that went wrong while an environment program ran, or a
precise class for one case. Each error carries a ``category``: the machine-readable outcome used by
the validation gate and the test corpus (``COMPILE_REJECTED``, ``SANDBOX_DENIED``, ``TIMEOUT``,
``MEMORY_LIMIT``, ``OUTPUT_LIMIT``, ``PROTOCOL_ERROR``, ``INVALID_REWARD``, ``ENV_EXCEPTION``,
``WORKER_CRASH``).

Messages are written for two readers: a person at a terminal and the Environment Designer, which
is shown them in repair rounds. They say what was wrong and what was expected.
"""

from __future__ import annotations

import importlib
from types import ModuleType

__all__ = [
    "require",
    "SpadeError",
    "ProgramError",
    "SandboxError",
    "SandboxViolation",
    "SandboxTimeout",
    "ResourceLimitExceeded",
    "ContractError",
    "EnvRuntimeError",
    "WorkerCrash",
    "SandboxSetupError",
    "RegistryError",
    "EnvNotFound",
    "DuplicateEnvironment",
    "PolicyError",
    "ModelNotFound",
    "ContextLengthExceeded",
    "BackendUnavailable",
    "GenerationError",
    "DocumentError",
    "MissingDependency",
    "CATEGORIES",
    "error_from_payload",
]

#: Every outcome category an error can carry (the hostile programs of ``tests/sandbox_cases_extra``
#: name theirs in its ``INDEX.md``).
CATEGORIES = (
    "COMPILE_REJECTED",
    "SANDBOX_DENIED",
    "TIMEOUT",
    "MEMORY_LIMIT",
    "OUTPUT_LIMIT",
    "PROTOCOL_ERROR",
    "INVALID_REWARD",
    "ENV_EXCEPTION",
    "WORKER_CRASH",
    "DUPLICATE",
)


class SpadeError(Exception):
    """Base class of every spade_gym error.

    Args:
        message: what was wrong and what was expected, in plain words.
        category: one of :data:`CATEGORIES`; defaults to the class's own category.
        traceback: the program's traceback as text (program frames only), when there is one.
    """

    default_category = "ENV_EXCEPTION"

    def __init__(self, message: str, *, category: str | None = None, traceback: str = "") -> None:
        super().__init__(message)
        self.message = message
        self.category = category or self.default_category
        self.traceback = traceback

    def to_dict(self) -> dict[str, str]:
        """Return ``{"type", "category", "message", "traceback"}`` (JSON-serialisable)."""
        return {
            "type": type(self).__name__,
            "category": self.category,
            "message": self.message,
            "traceback": self.traceback,
        }


class ProgramError(SpadeError):
    """Raised when a program fails the static check: size, syntax, the restricted compiler, the
    import allow-list, or the ``Env`` interface. Nothing of the program has run."""

    default_category = "COMPILE_REJECTED"


class SandboxError(SpadeError):
    """Base class of errors raised while a program runs in the sandbox."""


class SandboxViolation(SandboxError):
    """Raised when a runtime guard refused something: a denied import, attribute, builtin or
    write. Reported even when the program caught the guard's exception."""

    default_category = "SANDBOX_DENIED"


class SandboxTimeout(SandboxError):
    """Raised when a call ran past its wall-clock deadline, or an episode or validation run
    exhausted its time budget. The worker was killed from outside (SIGKILL)."""

    default_category = "TIMEOUT"


class ResourceLimitExceeded(SandboxError):
    """Raised when the program ran out of memory (``MEMORY_LIMIT``) or produced too much output:
    an observation, ``info`` or ``print`` output over its size cap (``OUTPUT_LIMIT``)."""

    default_category = "MEMORY_LIMIT"


class ContractError(SandboxError):
    """Raised when a return value breaks the environment program contract: wrong tuple shape or
    types, non-JSON ``info``, non-UTF-8 text (``PROTOCOL_ERROR``), or a reward that is not a finite
    int/float within bounds (``INVALID_REWARD``)."""

    default_category = "PROTOCOL_ERROR"


class EnvRuntimeError(SandboxError):
    """Raised when the program itself raised (any ``BaseException``, ``SystemExit`` included);
    ``traceback`` holds the program's frames as text."""

    default_category = "ENV_EXCEPTION"


class WorkerCrash(SandboxError):
    """Raised when the worker process died, closed its pipe, or broke the wire protocol."""

    default_category = "WORKER_CRASH"


class SandboxSetupError(SpadeError):
    """Raised when a worker could not be started, or a protection layer the caller required
    (``SandboxConfig.require_layers``) is not active on this machine."""

    default_category = "WORKER_CRASH"


class RegistryError(SpadeError):
    """Raised when an environment registry cannot be opened, read or written (a missing or
    unreadable folder, a corrupt ``meta.json`` or index, a failed write)."""

    default_category = "REGISTRY"


class EnvNotFound(RegistryError):
    """Raised when a registry has no environment with the requested id; the message suggests the
    closest ids."""


class DuplicateEnvironment(RegistryError):
    """Raised when a program is an exact or near duplicate of a registered environment;
    ``existing`` is that environment's id and ``similarity`` the estimated Jaccard similarity."""

    default_category = "DUPLICATE"

    def __init__(self, message: str, *, existing: str = "", similarity: float = 1.0) -> None:
        super().__init__(message)
        self.existing = existing
        self.similarity = similarity


class PolicyError(SpadeError):
    """Base class of errors raised by a language-model policy (``spade_gym.policies``): loading a
    model, encoding prompts, or generating."""

    default_category = "POLICY"


class ModelNotFound(PolicyError):
    """Raised when a model id or path names nothing loadable: a local path that does not exist, a
    hub id that is not in the local cache while the hub cannot be reached, a GGUF file whose
    architecture transformers cannot load, or the embedded model's package not installed."""


class ContextLengthExceeded(PolicyError):
    """Raised when a prompt plus ``max_new_tokens`` does not fit the model's context window and
    left-truncation was not asked for (``SamplingParams(truncate_prompt=True)``). ``limit`` is the
    window in tokens, ``needed`` what the request would have used."""

    def __init__(self, message: str, *, limit: int = 0, needed: int = 0) -> None:
        super().__init__(message)
        self.limit = limit
        self.needed = needed


class BackendUnavailable(PolicyError):
    """Raised when a backend's optional dependency or hardware is missing: vLLM not installed or
    no GPU, ``openai`` or ``peft`` not installed."""


class GenerationError(PolicyError):
    """Raised when generation failed: a server that timed out after every retry, returned an HTTP
    error, or answered with something that is not a chat completion."""


class MissingDependency(SpadeError, ImportError):
    """Raised when an optional integration's library is not installed. The message is one line
    naming the extra to install, e.g. ``spade_gym.integrations.trl needs trl: pip install
    'spade-gym[trl]'``. It is also an :class:`ImportError`, so ``except ImportError`` catches it."""

    default_category = "ENV_EXCEPTION"


class DocumentError(SpadeError):
    """Raised when a document source cannot give documents: a missing path, an unsupported file type,
    a missing optional dependency, a dataset that fails to load, or a corpus with no usable document."""

    default_category = "DOCUMENTS"


_BY_NAME: dict[str, type[SpadeError]] = {
    cls.__name__: cls
    for cls in (
        ProgramError,
        SandboxViolation,
        SandboxTimeout,
        ResourceLimitExceeded,
        ContractError,
        EnvRuntimeError,
        WorkerCrash,
    )
}


def error_from_payload(payload: object) -> SpadeError:
    """Rebuild an error from the worker's ``{"type", "category", "message", "traceback"}`` dict.

    The payload comes from an untrusted process: only names in a fixed table are honoured, the
    text fields are truncated, and anything malformed becomes a :class:`WorkerCrash`.

    Args:
        payload: the decoded JSON value of the response's ``error`` field.

    Returns:
        The error instance (not raised).
    """
    if not isinstance(payload, dict):
        return WorkerCrash(f"worker sent a malformed error record: {type(payload).__name__}")
    cls = _BY_NAME.get(str(payload.get("type")), WorkerCrash)
    category = payload.get("category")
    if category not in CATEGORIES:
        category = None
    message = str(payload.get("message", ""))[:4000]
    traceback = str(payload.get("traceback", ""))[:8000]
    return cls(message, category=category, traceback=traceback)


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module`` for ``feature``, or say in one line which extra installs it.

    Args:
        module: the module to import, e.g. ``"trl"`` or ``"stable_baselines3"``.
        extra: the spade-gym extra that installs it, e.g. ``"trl"`` (``pip install 'spade-gym[trl]'``),
            or a full pip requirement when it is not one of ours (``"verl"``).
        feature: what needs it, for the message, e.g. ``"spade_gym.integrations.trl"``.

    Returns:
        The imported module.

    Raises:
        MissingDependency: ``module`` is not installed (also an :class:`ImportError`); its message
            is ``"<feature> needs <module>: pip install 'spade-gym[<extra>]'"``, and names the
            missing dependency when the library is installed but one of its own is not.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        top = module.split(".")[0]
        install = f"pip install 'spade-gym[{extra}]'" if extra.isidentifier() else f"pip install '{extra}'"
        missing = (exc.name or top).split(".")[0]
        what = top if missing == top else f"{top} (which could not import its dependency {missing})"
        raise MissingDependency(f"{feature} needs {what}: {install}") from None
