"""Every error spade_gym raises, in one hierarchy rooted at :class:`SpadeError`.

Catch :class:`SandboxError` for anything that went wrong while an environment program ran. Each
error carries a machine-readable ``category`` (a :class:`Category`); messages say what was wrong and
what was expected, for a person and for the Environment Designer's repair rounds.
"""

from __future__ import annotations

import importlib
from enum import StrEnum
from types import ModuleType

__all__ = [
    "install_hint",
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
    "ChatTemplateError",
    "GenerationError",
    "DocumentError",
    "MissingDependency",
    "ConfigError",
    "RunDirError",
    "GRPOConfigError",
    "GuardViolation",
    "CATEGORIES",
    "Category",
    "error_from_payload",
    "first_line",
]


class Category(StrEnum):
    """Every outcome category: of an error, of a validation check or report, of a refused design. A
    member is its name as a string (``Category.DUPLICATE == "DUPLICATE"``), in JSON, reports and ``repr``."""

    # an error of a program run in the sandbox (the worker sends these, see CATEGORIES)
    COMPILE_REJECTED = "COMPILE_REJECTED"
    SANDBOX_DENIED = "SANDBOX_DENIED"
    TIMEOUT = "TIMEOUT"
    MEMORY_LIMIT = "MEMORY_LIMIT"
    OUTPUT_LIMIT = "OUTPUT_LIMIT"
    PROTOCOL_ERROR = "PROTOCOL_ERROR"
    INVALID_REWARD = "INVALID_REWARD"
    ENV_EXCEPTION = "ENV_EXCEPTION"
    WORKER_CRASH = "WORKER_CRASH"
    DUPLICATE = "DUPLICATE"
    # a verdict of the validation gate: accepted, or its failed check's
    ACCEPT = "ACCEPT"
    ERROR = "ERROR"
    NONDETERMINISM = "NONDETERMINISM"
    EPISODE_LIMIT = "EPISODE_LIMIT"
    SEED_INVARIANT = "SEED_INVARIANT"
    ORACLE_FAILED = "ORACLE_FAILED"
    TRIVIAL = "TRIVIAL"
    HINT_LEAK = "HINT_LEAK"
    WRONG_SETTING = "WRONG_SETTING"
    # a design refused before the gate
    NO_CODE = "NO_CODE"
    TOO_LONG = "TOO_LONG"
    UNFILLED = "UNFILLED"
    # errors outside the sandbox
    REGISTRY = "REGISTRY"
    POLICY = "POLICY"
    DOCUMENTS = "DOCUMENTS"
    CONFIG = "CONFIG"
    RUN = "RUN"

    def __repr__(self) -> str:
        return repr(self.value)


#: Every category an error from the sandbox worker can carry (the hostile programs of
#: ``tests/sandbox_cases_extra`` name theirs in its ``INDEX.md``).
CATEGORIES: tuple[Category, ...] = (
    Category.COMPILE_REJECTED,
    Category.SANDBOX_DENIED,
    Category.TIMEOUT,
    Category.MEMORY_LIMIT,
    Category.OUTPUT_LIMIT,
    Category.PROTOCOL_ERROR,
    Category.INVALID_REWARD,
    Category.ENV_EXCEPTION,
    Category.WORKER_CRASH,
    Category.DUPLICATE,
)


class SpadeError(Exception):
    """Base class of every spade_gym error; ``category`` defaults to the class's own, ``traceback``
    holds the program's frames as text when there are any."""

    default_category = Category.ENV_EXCEPTION

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
    """A program fails the static check (size, syntax, restricted compiler, imports, ``Env``)."""

    default_category = Category.COMPILE_REJECTED


class SandboxError(SpadeError):
    """Base class of errors raised while a program runs in the sandbox."""


class SandboxViolation(SandboxError):
    """A runtime guard refused an import, attribute, builtin or write (even if the program caught it)."""

    default_category = Category.SANDBOX_DENIED


class SandboxTimeout(SandboxError):
    """A call, episode or validation run exhausted its time budget; the worker was killed."""

    default_category = Category.TIMEOUT


class ResourceLimitExceeded(SandboxError):
    """The program ran out of memory (``MEMORY_LIMIT``) or output over a size cap (``OUTPUT_LIMIT``)."""

    default_category = Category.MEMORY_LIMIT


class ContractError(SandboxError):
    """A return value breaks the program contract (``PROTOCOL_ERROR``; a bad reward: ``INVALID_REWARD``)."""

    default_category = Category.PROTOCOL_ERROR


class EnvRuntimeError(SandboxError):
    """The program itself raised (any ``BaseException``, ``SystemExit`` included)."""

    default_category = Category.ENV_EXCEPTION


class WorkerCrash(SandboxError):
    """The worker process died, closed its pipe, or broke the wire protocol."""

    default_category = Category.WORKER_CRASH


class SandboxSetupError(SpadeError):
    """No worker could be started, or a required layer (``SandboxConfig.require_layers``) is inactive."""

    default_category = Category.WORKER_CRASH


class RegistryError(SpadeError):
    """An environment registry cannot be opened, read or written."""

    default_category = Category.REGISTRY


class EnvNotFound(RegistryError):
    """A registry has no environment with the requested id; the message suggests the closest ids."""


class DuplicateEnvironment(RegistryError):
    """A program duplicates the registered environment ``existing`` (estimated ``similarity``)."""

    default_category = Category.DUPLICATE

    def __init__(self, message: str, *, existing: str = "", similarity: float = 1.0) -> None:
        super().__init__(message)
        self.existing = existing
        self.similarity = similarity


class PolicyError(SpadeError):
    """Base class of errors of a language-model policy (``spade_gym.policies``)."""

    default_category = Category.POLICY


class ModelNotFound(PolicyError):
    """A model id or path names nothing loadable (no such path, an uncached hub id while offline, an
    unsupported GGUF architecture, the embedded model's package missing)."""


class ContextLengthExceeded(PolicyError):
    """A prompt plus ``max_new_tokens`` (``needed`` tokens) exceeds the context window (``limit``)
    and ``SamplingParams(truncate_prompt=True)`` was not asked for."""

    def __init__(self, message: str, *, limit: int = 0, needed: int = 0) -> None:
        super().__init__(message)
        self.limit = limit
        self.needed = needed


class BackendUnavailable(PolicyError):
    """A backend's optional dependency or hardware (vLLM, a GPU, ``openai``, ``peft``) is missing."""


class GenerationError(PolicyError):
    """Generation failed: a server timed out on every retry, or sent an error or no chat completion."""


class ChatTemplateError(GenerationError, ValueError):
    """A chat template rendered a prompt to no token ids (a ``ValueError`` too)."""


class MissingDependency(SpadeError, ImportError):
    """An optional integration's library is not installed (an :class:`ImportError` too); the message
    names the extra and how to install it (:func:`install_hint`)."""


class DocumentError(SpadeError):
    """A document source cannot give documents (missing path or dependency, unsupported type, no usable document)."""

    default_category = Category.DOCUMENTS


class ConfigError(SpadeError):
    """A self-play configuration is unreadable or has a bad key or value; ``key`` is the dotted key
    (``"train.learning_rate"``), empty for the whole file."""

    default_category = Category.CONFIG

    def __init__(self, message: str, *, key: str = "") -> None:
        super().__init__(message)
        self.key = key


class RunDirError(SpadeError):
    """A run folder cannot be created, opened, read or written."""

    default_category = Category.RUN


class GRPOConfigError(ValueError):
    """A :class:`GRPOConfig` field out of its range: ``field``, ``value`` and ``expected`` (the range)."""

    def __init__(self, field: str, value: object, expected: str) -> None:
        super().__init__(f"GRPOConfig.{field} must be {expected}, got {value!r}")
        self.field, self.value, self.expected = field, value, expected


class GuardViolation(BaseException):  # noqa: N818 - it is a signal, not an ordinary error
    """Raised inside program code when a guard refuses something; a ``BaseException`` so that
    ``except Exception`` does not swallow it (the runtime records the violation anyway)."""

    def __init__(self, message: str, category: str = Category.SANDBOX_DENIED) -> None:
        super().__init__(message)
        self.message = message
        self.category = str(category)  # a plain str: program code can catch this and read it


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
    """Rebuild (not raise) an error from the worker's ``{"type", "category", "message", "traceback"}``.
    The payload is untrusted: only names in a fixed table are honoured, text is truncated, and
    anything malformed becomes a :class:`WorkerCrash`."""
    if not isinstance(payload, dict):
        return WorkerCrash(f"worker sent a malformed error record: {type(payload).__name__}")
    cls = _BY_NAME.get(str(payload.get("type")), WorkerCrash)
    category = payload.get("category")
    category = Category(category) if category in CATEGORIES else None
    message = str(payload.get("message", ""))[:4000]
    traceback = str(payload.get("traceback", ""))[:8000]
    return cls(message, category=category, traceback=traceback)


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message (at most 300 characters), or its type's name."""
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0][:300]


def install_hint(extra: str | None = None) -> str:
    """How to install spade-gym with its optional ``extra`` (e.g. ``"sb3"``), as one line for a message:
    from a clone of its repository, as it is not on PyPI yet."""
    target = f".[{extra}]" if extra else "."
    return f"pip install -e '{target}' in a clone of the spade_gym repository (spade-gym is not on PyPI yet)"


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module`` (``"trl"``) for ``feature`` (``"spade_gym.integrations.trl"``).

    Raises:
        MissingDependency: ``"<feature> needs <module>: <install_hint(extra)>"`` (``extra``: the
            spade-gym extra, or a full pip requirement), naming the missing dependency when the
            library is installed but one of its own is not.
    """
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        top = module.split(".")[0]
        install = install_hint(extra) if extra.isidentifier() else f"pip install '{extra}'"
        missing = (exc.name or top).split(".")[0]
        what = top if missing == top else f"{top} (which could not import its dependency {missing})"
        raise MissingDependency(f"{feature} needs {what}: {install}") from None
