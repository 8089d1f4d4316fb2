"""vLLM backend: fast GPU rollouts from an engine colocated with the trainer, weights synced in place.

:class:`VLLMPolicy` runs a ``vllm.LLM`` in this process on the trainer's GPU, as TRL's ``GRPOTrainer``
with ``vllm_mode="colocate"``; :meth:`VLLMPolicy.load_weights` is TRL's ``sync_weights``. The mapping
helpers (``to_vllm_*``, :func:`completions_from_outputs`) need neither vLLM nor torch.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spade_gym.errors import BackendUnavailable, GenerationError, ModelNotFound, PolicyError, install_hint
from spade_gym.policies.base import (
    Completion,
    FinishReason,
    Prompt,
    SamplingParams,
    chat_token_ids,
    check_prompts,
    fit_prompt,
    logprob_temperature,
    resolve_sampling,
)

if TYPE_CHECKING:
    import torch

__all__ = [
    "VLLMPolicy",
    "check_vllm_available",
    "completions_from_outputs",
    "ensure_distributed_env",
    "to_vllm_param_name",
    "to_vllm_sampling_kwargs",
]

#: The engine arguments this backend sets unless the caller passes them (see :class:`VLLMPolicy`).
COLOCATE_DEFAULTS: dict[str, Any] = {
    # Engine core and model in this process: the only way to copy weights in place (TRL colocate mode).
    "distributed_executor_backend": "external_launcher",
    # TRL: vLLM V1's memory profiler is misled by its large default when the GPU is shared with a trainer.
    "max_num_batched_tokens": 4096,
    # samples, episodes and turns share prefixes; V1's default, pinned (load_weights resets it)
    "enable_prefix_caching": True,
}

_INSTALL_HINT = f"install it with {install_hint('vllm')}, on a Linux machine with an NVIDIA GPU"


def to_vllm_sampling_kwargs(sampling: SamplingParams) -> dict[str, Any]:
    """The keyword arguments of ``vllm.SamplingParams`` for ``sampling``, with ``logprobs=0`` (the
    sampled token's only); prompt truncation is done before the request (:func:`fit_prompt`)."""
    return {
        "n": sampling.n,
        "temperature": 0.0 if sampling.greedy else float(sampling.temperature),
        "top_p": float(sampling.top_p),
        "max_tokens": sampling.max_new_tokens,
        "stop": list(sampling.stop),
        "seed": sampling.seed,
        "logprobs": 0,
    }


def to_vllm_param_name(name: str) -> str | None:
    """The name vLLM's ``model.load_weights`` expects for a key of the trainer's ``state_dict()``
    (checkpointing, FSDP and PEFT wrappers stripped), or ``None`` for a ``lora_*`` or
    ``original_module`` entry: TRL's ``_fix_param_name_to_vllm``."""
    if ".lora_" in name or name.startswith("lora_") or "original_module" in name:
        return None
    name = name.removeprefix("base_model.model.")
    for wrapper in ("_checkpoint_wrapped_module.", "_fsdp_wrapped_module.", "modules_to_save.default."):
        name = name.replace(wrapper, "")
    return name.replace(".base_layer", "")


def completions_from_outputs(
    outputs: Sequence[Any], prompt_token_ids: Sequence[list[int]], n: int, temperature: float = 1.0
) -> list[Completion]:
    """``vllm.LLM.generate``'s ``RequestOutput`` list (one per prompt, asked with ``logprobs=0``) as
    ``B * n`` :class:`Completion` objects grouped by prompt, their logprobs taken at ``temperature``.

    Raises:
        GenerationError: a different number of requests or samples than asked for, or no
            log-probability for a sampled token.
    """
    if len(outputs) != len(prompt_token_ids):
        raise GenerationError(f"vLLM returned {len(outputs)} results for {len(prompt_token_ids)} prompts")
    completions: list[Completion] = []
    for prompt_index, (request, prompt_ids) in enumerate(zip(outputs, prompt_token_ids, strict=True)):
        samples = sorted(request.outputs, key=lambda sample: sample.index)
        if len(samples) != n:
            raise GenerationError(f"vLLM returned {len(samples)} samples for prompt {prompt_index}, expected n={n}")
        for sample in samples:
            token_ids = [int(t) for t in sample.token_ids]
            if sample.logprobs is None or len(sample.logprobs) < len(token_ids):
                raise GenerationError(
                    f"vLLM returned no log-probabilities for prompt {prompt_index}; the request asked for logprobs=0"
                )
            logprobs: list[float] = []
            for position, token_id in enumerate(token_ids):
                entry = sample.logprobs[position]
                if token_id not in entry:
                    raise GenerationError(
                        f"vLLM returned no log-probability for sampled token {token_id} at position {position} "
                        f"of prompt {prompt_index}"
                    )
                logprobs.append(float(entry[token_id].logprob))
            reason: FinishReason = "length" if sample.finish_reason == "length" else "stop"
            completions.append(
                Completion(sample.text, list(prompt_ids), token_ids, logprobs, reason, prompt_index, temperature)
            )
    return completions


class VLLMPolicy:
    """A :class:`~spade_gym.policies.base.Policy` served by a vLLM engine in this process, on a GPU.

    Construction sets the missing rendezvous variables of the ``external_launcher`` executor
    (:func:`ensure_distributed_env`).

    Args:
        model: a Hugging Face hub id or a local checkpoint folder.
        tokenizer: the tokenizer's id or folder; ``None`` uses the model's.
        dtype: the weights' dtype (``"auto"``: the checkpoint's); match the trainer's.
        gpu_memory_utilization: the fraction of GPU memory in ``(0, 1]`` vLLM may take.
        max_model_len: the context window in tokens; ``None`` takes the model config's.
        seed: the engine's seed; a request's own ``SamplingParams.seed`` wins.
        enable_sleep_mode: allow :meth:`sleep`/:meth:`wake_up` (CUDA only).
        name: the policy's name in logs and the registry; defaults to ``model``.
        **engine_kwargs: more ``vllm.LLM`` arguments; :data:`COLOCATE_DEFAULTS` apply unless
            given. An executor in another process leaves :meth:`load_weights` unavailable;
            ``logprobs_mode`` may only be ``"processed_logprobs"`` (after temperature).

    Raises:
        BackendUnavailable: vLLM is not installed, or torch sees no CUDA GPU.
        ModelNotFound: ``model`` is a local path (starting ``/``, ``.`` or ``~``) that does not exist.
        ValueError: ``logprobs_mode`` other than ``"processed_logprobs"``.
    """

    def __init__(
        self,
        model: str,
        *,
        tokenizer: str | None = None,
        dtype: str = "auto",
        gpu_memory_utilization: float = 0.5,
        max_model_len: int | None = None,
        seed: int = 0,
        enable_sleep_mode: bool = False,
        name: str | None = None,
        **engine_kwargs: Any,
    ) -> None:
        vllm = check_vllm_available()
        model = str(model)
        if model.startswith(("/", ".", "~")) and not Path(model).expanduser().exists():
            raise ModelNotFound(f"model path {model!r} does not exist; pass a local checkpoint folder or a hub id")
        mode = engine_kwargs.get("logprobs_mode", "processed_logprobs")
        if mode != "processed_logprobs":
            raise ValueError(
                "VLLMPolicy reports the log-probabilities of sampled tokens after temperature, as the trainer "
                f"re-scores them (logprobs_mode='processed_logprobs'); got logprobs_mode={mode!r}"
            )

        kwargs: dict[str, Any] = {
            "model": model,
            "tokenizer": tokenizer,
            "dtype": dtype,
            "gpu_memory_utilization": gpu_memory_utilization,
            "max_model_len": max_model_len,
            "seed": seed,
        }
        if enable_sleep_mode:
            kwargs["enable_sleep_mode"] = True
        kwargs.update(COLOCATE_DEFAULTS | engine_kwargs)
        kwargs["logprobs_mode"] = "processed_logprobs"  # the logprobs of the distribution sampled
        if kwargs["distributed_executor_backend"] == "external_launcher":
            ensure_distributed_env()

        self._vllm = vllm
        self._llm = vllm.LLM(**kwargs)
        self._tokenizer = self._llm.get_tokenizer()
        self._sleep_mode = enable_sleep_mode
        self._asleep: set[str] = set()  # the parts ("weights", "kv_cache") put to sleep and not woken yet
        self._weights_discarded = False  # slept at level 2 and no load_weights since
        self.name = name or model
        self.context_window: int | None = _max_model_len(self._llm, max_model_len)

    def generate(self, prompts: Sequence[Prompt], sampling: SamplingParams | None = None) -> list[Completion]:
        """``sampling.n`` completions per prompt (see :class:`~spade_gym.policies.base.Policy`); prompts
        are sent as token ids, and a sleeping engine is woken first.

        Raises:
            ValueError: malformed prompts.
            ContextLengthExceeded: a prompt too long for :attr:`context_window` without ``truncate_prompt``.
            GenerationError: vLLM failed, or the engine slept at level 2 and :meth:`load_weights`
                was not called since.
        """
        sampling = resolve_sampling(sampling)
        conversations = check_prompts(prompts)
        prompt_ids = [
            fit_prompt(
                chat_token_ids(self._tokenizer, conversation),
                sampling.max_new_tokens,
                self.context_window,
                sampling.truncate_prompt,
            )
            for conversation in conversations
        ]
        self._wake_for_generation()
        params = self._vllm.SamplingParams(**to_vllm_sampling_kwargs(sampling))
        from vllm.inputs import TokensPrompt

        requests = [TokensPrompt(prompt_token_ids=ids) for ids in prompt_ids]
        try:
            outputs = self._llm.generate(requests, params, use_tqdm=False)
        except Exception as error:  # vLLM raises many types; callers catch one
            raise GenerationError(f"vLLM generation failed: {type(error).__name__}: {error}") from error
        return completions_from_outputs(outputs, prompt_ids, sampling.n, logprob_temperature(sampling))

    def load_weights(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Copy the trainer's weights into the engine's model in place (the model's own
        ``load_weights``, run by ``LLM.apply_model``) and reset the prefix cache; a sleeping
        engine's weights are woken first.

        Args:
            state_dict: full, unsharded tensors under the transformers model's ``state_dict()``
                names (with PEFT, merge the adapters first).

        Raises:
            ValueError: ``state_dict`` holds no loadable parameter.
            BackendUnavailable: the engine runs in another process.
        """
        weights = [
            (vllm_name, tensor.detach())
            for key, tensor in state_dict.items()
            if (vllm_name := to_vllm_param_name(key)) is not None
        ]
        if not weights:
            raise ValueError("state_dict holds no parameter to load into vLLM (is it empty, or only adapter weights?)")
        if getattr(getattr(self._llm, "llm_engine", None), "model_executor", None) is None:
            raise BackendUnavailable(
                "load_weights needs the vLLM engine in this process, but it runs in a separate process; build "
                "VLLMPolicy with distributed_executor_backend='external_launcher' (the default) or set "
                "VLLM_ENABLE_V1_MULTIPROCESSING=0 before building it"
            )
        import torch

        if "weights" in self._asleep:
            torch.cuda.empty_cache()
            self._wake({"weights"})
        with torch.no_grad():
            self._llm.apply_model(lambda model: _load_into(model, weights))
        self._weights_discarded = False
        self._llm.reset_prefix_cache()

    def sleep(self, level: int = 1) -> None:
        """Free the engine's GPU memory while the trainer runs: level 1 offloads the weights to CPU,
        level 2 discards them (when :meth:`load_weights` comes next); both discard the KV cache.

        Raises:
            ValueError: ``level`` not 1 or 2.
            PolicyError: the policy was built without ``enable_sleep_mode=True``.
        """
        self._require_sleep_mode("sleep")
        if level not in (1, 2):
            raise ValueError(f"sleep level must be 1 (offload weights) or 2 (discard weights), got {level!r}")
        self._llm.sleep(level=level)
        self._asleep = {"weights", "kv_cache"}
        self._weights_discarded = self._weights_discarded or level == 2

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """Give the engine its GPU memory back after :meth:`sleep`: ``tags`` ``"weights"`` and/or
        ``"kv_cache"`` (``None``: both). ValueError for an unknown tag; PolicyError without sleep mode."""
        self._require_sleep_mode("wake_up")
        parts = {"weights", "kv_cache"} if tags is None else set(tags)
        unknown = parts - {"weights", "kv_cache"}
        if unknown:
            raise ValueError(f"wake_up tags must be 'weights' and/or 'kv_cache', got {sorted(unknown)}")
        self._wake(parts & self._asleep)

    def _require_sleep_mode(self, method: str) -> None:
        if not self._sleep_mode:
            raise PolicyError(f"VLLMPolicy.{method} needs sleep mode: build the policy with enable_sleep_mode=True")

    def _wake(self, parts: set[str]) -> None:
        """Wake the given sleeping parts (only those asleep: waking awake memory is not safe everywhere)."""
        if not parts:
            return
        if parts == {"weights", "kv_cache"}:
            self._llm.wake_up()
        else:
            self._llm.wake_up(tags=sorted(parts))
        self._asleep -= parts

    def _wake_for_generation(self) -> None:
        if self._weights_discarded:
            raise GenerationError(
                "the vLLM engine slept at level 2, which discards its weights; call load_weights(state_dict) "
                "before generate, or sleep at level 1"
            )
        if self._asleep:
            import torch

            torch.cuda.empty_cache()
            self._wake(set(self._asleep))
            self._llm.reset_prefix_cache()


def ensure_distributed_env(environ: MutableMapping[str, str] | None = None) -> None:
    """Set the missing rendezvous variables vLLM's ``external_launcher`` reads in ``environ``
    (``None``: ``os.environ``); a ``MASTER_PORT`` unset, ``"0"`` or ``"auto"`` becomes a free port."""
    env = os.environ if environ is None else environ
    env.setdefault("RANK", "0")
    env.setdefault("LOCAL_RANK", "0")
    env.setdefault("WORLD_SIZE", "1")
    if not env.get("MASTER_ADDR"):
        env["MASTER_ADDR"] = "localhost"
    if env.get("MASTER_PORT", "").strip().lower() in ("", "0", "auto"):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
            probe.bind(("", 0))
            env["MASTER_PORT"] = str(probe.getsockname()[1])


def check_vllm_available() -> Any:
    """The ``vllm`` module; BackendUnavailable unless vLLM is installed and torch sees a CUDA GPU."""
    try:
        import vllm
    except ImportError as error:
        raise BackendUnavailable(
            f"the vLLM backend needs the vllm package, which is not installed; {_INSTALL_HINT}"
        ) from error
    try:
        import torch
    except ImportError as error:
        raise BackendUnavailable(f"the vLLM backend needs torch, which is not installed; {_INSTALL_HINT}") from error
    if not torch.cuda.is_available():
        raise BackendUnavailable(
            "the vLLM backend needs an NVIDIA GPU, and torch sees no CUDA device here; use the transformers "
            "backend (load_policy('<model>')) on CPU, or run on a machine with a GPU"
        )
    return vllm


def _max_model_len(llm: Any, requested: int | None) -> int | None:
    """The engine's context window: ``llm.llm_engine.model_config.max_model_len``."""
    engine: Any = getattr(llm, "llm_engine", None)
    config = getattr(engine, "model_config", None)
    get_model_config = getattr(engine, "get_model_config", None)
    if config is None and callable(get_model_config):
        config = get_model_config()
    value = getattr(config, "max_model_len", None)
    return int(value) if value is not None else requested


def _load_into(model: Any, weights: Iterable[tuple[str, Any]]) -> None:
    """Call the vLLM model's own ``load_weights`` (returns nothing: results travel back from workers)."""
    model.load_weights(weights)
