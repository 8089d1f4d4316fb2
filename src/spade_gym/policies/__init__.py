"""Language-model policies: one :class:`Policy` interface, four ways to get one.

:func:`load_policy` picks a backend from a string::

    load_policy("default")                                   # the embedded SmolLM2-135M-Instruct, offline
    load_policy("HuggingFaceTB/SmolLM2-360M-Instruct")       # a hub id (from the local cache when offline)
    load_policy("/models/my-checkpoint")                     # a local transformers checkpoint
    load_policy("vllm:Qwen/Qwen2.5-1.5B-Instruct")           # vLLM on a GPU ("vllm:default" works too)
    load_policy("openai:gpt-4o-mini@https://api.openai.com/v1")  # any OpenAI-compatible server
    load_policy("llamacpp:qwen2.5-coder-1.5b")               # llama.cpp in-process: an offline GGUF alias or path

Importing this package does not import torch, transformers, vLLM, openai or llama_cpp; each backend is
imported when first used.
"""

from __future__ import annotations

import difflib
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spade_gym.errors import ModelNotFound
from spade_gym.policies.base import Completion, Message, Policy, Prompt, SamplingParams, check_prompts
from spade_gym.policies.embedded import DEFAULT_NAMES

if TYPE_CHECKING:
    from spade_gym.policies.llamacpp import LlamaCppPolicy
    from spade_gym.policies.openai import OpenAIPolicy
    from spade_gym.policies.transformers import TransformersPolicy
    from spade_gym.policies.vllm import VLLMPolicy

__all__ = [
    "Completion",
    "LlamaCppPolicy",
    "Message",
    "OpenAIPolicy",
    "Policy",
    "Prompt",
    "SamplingParams",
    "TransformersPolicy",
    "VLLMPolicy",
    "check_prompts",
    "load_policy",
    "parse_policy_spec",
]

_LAZY = {
    "TransformersPolicy": "spade_gym.policies.transformers",
    "VLLMPolicy": "spade_gym.policies.vllm",
    "OpenAIPolicy": "spade_gym.policies.openai",
    "LlamaCppPolicy": "spade_gym.policies.llamacpp",
}


def __getattr__(name: str) -> Any:
    """Import a backend class on first access (keeps ``import spade_gym`` free of torch)."""
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def parse_policy_spec(spec: str) -> tuple[str, dict[str, str]]:
    """Split a policy string (see the module docstring) into ``(backend, fields)`` without loading
    anything: ``("embedded", {})``, ``("transformers" | "vllm" | "llamacpp", {"model"})`` or
    ``("openai", {"model", "base_url"})``.

    Raises:
        ValueError: an empty spec, ``vllm:`` or ``llamacpp:`` without a model, or ``openai:`` without
            ``@base_url``.
    """
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"policy spec must be a non-empty string such as 'default', got {spec!r}")
    spec = spec.strip()
    if spec.lower() in DEFAULT_NAMES:
        return "embedded", {}
    if spec.startswith("vllm:"):
        model = spec[len("vllm:") :]
        if not model:
            raise ValueError("policy spec 'vllm:' needs a model: 'vllm:<hf id or path>' or 'vllm:default'")
        return "vllm", {"model": model}
    if spec.startswith("llamacpp:"):
        model = spec[len("llamacpp:") :].strip()
        if not model:
            raise ValueError(
                "policy spec 'llamacpp:' needs a model: 'llamacpp:<alias or .gguf path>', e.g. 'llamacpp:qwen2.5-coder-1.5b'"
            )
        return "llamacpp", {"model": model}
    if spec.startswith("openai:"):
        model, sep, base_url = spec[len("openai:") :].rpartition("@")
        if not sep or not model or not base_url.startswith(("http://", "https://")):
            raise ValueError(
                f"policy spec {spec!r} must look like 'openai:<model>@<base_url>', "
                "e.g. 'openai:Qwen/Qwen2.5-7B-Instruct@http://localhost:8000/v1'"
            )
        return "openai", {"model": model, "base_url": base_url}
    return "transformers", {"model": spec}


def load_policy(spec: str = "default", **kwargs: Any) -> Policy:
    """Load a :class:`Policy` from a string (see the module docstring); ``**kwargs`` go to the
    backend's constructor (``TransformersPolicy``, ``VLLMPolicy``, ``OpenAIPolicy`` or ``LlamaCppPolicy``).

    Raises:
        ValueError: a malformed spec.
        ModelNotFound: the model does not exist locally and cannot be fetched, or the embedded
            model's package is missing.
        BackendUnavailable: the backend's package or hardware is missing.
    """
    backend, fields = parse_policy_spec(spec)
    if backend == "openai":
        from spade_gym.policies.openai import OpenAIPolicy

        return OpenAIPolicy(fields["model"], fields["base_url"], **kwargs)
    if backend == "llamacpp":
        from spade_gym.policies.llamacpp import LlamaCppPolicy

        return LlamaCppPolicy(fields["model"], **kwargs)
    if backend == "vllm":
        from spade_gym.policies.vllm import VLLMPolicy, check_vllm_available

        model = fields["model"]
        if model.lower() in DEFAULT_NAMES:
            from spade_gym.policies.embedded import embedded_model_dir

            check_vllm_available()  # before converting the embedded model for an engine that cannot start
            model = str(embedded_model_dir())
        return VLLMPolicy(model, **kwargs)
    from spade_gym.policies.transformers import TransformersPolicy, import_torch_stack

    import_torch_stack()  # BackendUnavailable with the install command, not an ImportError
    if backend == "embedded":
        return _load_embedded(**kwargs)
    model = fields["model"]
    close = difflib.get_close_matches(model.lower(), sorted(DEFAULT_NAMES), n=1, cutoff=0.7)
    if close and not Path(model).expanduser().exists():
        raise ModelNotFound(f"unknown model {model!r}; did you mean {close[0]!r} (the embedded model)?")
    return TransformersPolicy(model, **kwargs)


def _load_embedded(**kwargs: Any) -> TransformersPolicy:
    """The embedded model as a :class:`TransformersPolicy`; a cached copy that fails to load is
    converted again once (a damaged or truncated cache repairs itself)."""
    from transformers.utils import logging as hf_logging

    from spade_gym.policies.embedded import EMBEDDED_NAME, embedded_model_dir
    from spade_gym.policies.transformers import TransformersPolicy

    shown = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()  # the cached model loads in about a second: no bar
    try:
        try:
            return TransformersPolicy(embedded_model_dir(), name=EMBEDDED_NAME, **kwargs)
        except ModelNotFound as exc:
            warnings.warn(
                f"the cached embedded model failed to load ({exc.message}); converting it again", stacklevel=3
            )
            return TransformersPolicy(embedded_model_dir(rebuild=True), name=EMBEDDED_NAME, **kwargs)
    finally:
        if shown:
            hf_logging.enable_progress_bar()
