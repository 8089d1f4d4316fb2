"""vLLM backend: fast GPU rollouts from an engine colocated with the trainer, weights synced in place.

:class:`VLLMPolicy` runs a ``vllm.LLM`` in this process, on the GPU the trainer uses, the way TRL's
``GRPOTrainer`` does with ``vllm_mode="colocate"`` (``trl/generation/vllm_generation.py``,
``VLLMGeneration._init_vllm``): ``distributed_executor_backend="external_launcher"``, which keeps the
engine core and its model in this process (vLLM then sets ``VLLM_ENABLE_V1_MULTIPROCESSING=0``), and
a ``gpu_memory_utilization`` well below 1 so the trainer's weights, gradients and optimizer state
fit beside the engine's weights and KV cache. After each optimizer step the trainer pushes its
weights into the engine with :meth:`VLLMPolicy.load_weights` (TRL's ``sync_weights``, verl's
FSDP-to-vLLM sharding manager): each parameter is copied in place into the engine's model through
the model's own ``load_weights``, then the prefix cache is reset.

Only :class:`VLLMPolicy` imports vLLM and torch, when it is built and used; the mapping helpers
(:func:`to_vllm_sampling_kwargs`, :func:`to_vllm_param_name`, :func:`completions_from_outputs`)
need neither and are what the tests check on machines without a GPU.
"""

from __future__ import annotations

import dataclasses
import os
import socket
from collections.abc import Callable, Iterable, Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spade_gym.errors import BackendUnavailable, GenerationError, ModelNotFound, PolicyError
from spade_gym.policies.base import (
    Completion,
    FinishReason,
    Prompt,
    SamplingParams,
    check_prompts,
    fit_prompt,
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
    # The n samples of a prompt, the episodes of one environment and the turns of a conversation
    # share prefixes; vLLM V1 turns this on by default, pinned here (load_weights resets it).
    "enable_prefix_caching": True,
}

_INSTALL_HINT = "install it with `pip install 'spade-gym[vllm]'` on a Linux machine with an NVIDIA GPU"


def to_vllm_sampling_kwargs(sampling: SamplingParams) -> dict[str, Any]:
    """Map spade_gym's :class:`SamplingParams` to the keyword arguments of ``vllm.SamplingParams``.

    Args:
        sampling: the request's sampling settings.

    Returns:
        ``{"n", "temperature", "top_p", "max_tokens", "stop", "seed", "logprobs"}``: ``temperature``
        ``0.0`` for greedy decoding (vLLM's greedy), ``max_tokens`` from ``max_new_tokens`` (tokens),
        ``stop`` as a list (vLLM cuts the text before the stop string and leaves it out), ``seed``
        as given (``None``: fresh randomness), and ``logprobs=0``: vLLM returns the log-probability
        of the sampled token only, under ``logprobs_mode="raw_logprobs"`` the model's unmodified
        distribution (see :mod:`spade_gym.policies.base`). Prompt truncation is not mapped: it is
        done before the request (:func:`~spade_gym.policies.base.fit_prompt`).
    """
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
    """Turn a trainer-side parameter name into the name vLLM's ``model.load_weights`` expects.

    vLLM models load Hugging Face checkpoint names (``model.layers.0.self_attn.q_proj.weight``).
    A trainer's ``state_dict()`` can carry wrapper prefixes around them; this strips them as TRL
    does before it syncs weights (``VLLMGeneration._fix_param_name_to_vllm`` and the PEFT branch of
    ``sync_weights`` in ``trl/generation/vllm_generation.py``):

    * activation-checkpointing and FSDP wrappers: ``_checkpoint_wrapped_module.``,
      ``_fsdp_wrapped_module.``;
    * PEFT, after ``merge_adapter()``: the ``base_model.model.`` prefix, the ``.base_layer`` infix
      of adapted layers, and ``modules_to_save.default.``; the adapter weights themselves
      (``lora_*``) and the frozen copies of modules-to-save (``original_module``) are dropped.

    Architecture-specific renames (TRL's ``fix_param_name_to_vllm`` prefix maps for Qwen3.5/Qwen3-VL
    multimodal checkpoints) are not applied: pass such names already in vLLM's namespace.

    Args:
        name: a key of the trainer model's ``state_dict()``.

    Returns:
        The name to load into vLLM, or ``None`` when the entry has no counterpart in vLLM and must
        be skipped.
    """
    if ".lora_" in name or name.startswith("lora_") or "original_module" in name:
        return None
    name = name.removeprefix("base_model.model.")
    for wrapper in ("_checkpoint_wrapped_module.", "_fsdp_wrapped_module.", "modules_to_save.default."):
        name = name.replace(wrapper, "")
    return name.replace(".base_layer", "")


def completions_from_outputs(outputs: Sequence[Any], prompt_token_ids: Sequence[list[int]], n: int) -> list[Completion]:
    """Convert the ``RequestOutput`` list of ``vllm.LLM.generate`` into :class:`Completion` objects.

    Args:
        outputs: one ``vllm.RequestOutput`` per prompt, in prompt order (``LLM.generate`` returns
            them so); each holds ``n`` ``CompletionOutput`` with ``index``, ``text``, ``token_ids``,
            ``logprobs`` (one ``{token_id: Logprob}`` mapping per generated token, as requested with
            ``logprobs=0``) and ``finish_reason``.
        prompt_token_ids: the ``B`` prompts as sent, after any truncation.
        n: completions per prompt.

    Returns:
        ``B * n`` completions grouped by prompt, the ``n`` samples of a prompt in vLLM's ``index``
        order; ``logprobs[i]`` is ``output.logprobs[i][token_ids[i]].logprob`` (natural log);
        ``finish_reason`` ``"length"`` stays, anything else (``"stop"``, ``"abort"``) is ``"stop"``.

    Raises:
        GenerationError: the engine returned a different number of requests or samples than asked
            for, or no log-probability for a sampled token.
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
                Completion(
                    text=sample.text,
                    prompt_token_ids=list(prompt_ids),
                    completion_token_ids=token_ids,
                    logprobs=logprobs,
                    finish_reason=reason,
                    prompt_index=prompt_index,
                )
            )
    return completions


class VLLMPolicy:
    """A :class:`~spade_gym.policies.base.Policy` served by a vLLM engine in this process, on a GPU.

    Built for RL: the engine shares the GPU with the trainer (TRL ``vllm_mode="colocate"``), samples
    groups fast, reports the raw log-probability of every sampled token, and takes the trainer's
    updated weights in place with :meth:`load_weights` after each optimizer step.

    Constructing it sets ``RANK``, ``LOCAL_RANK``, ``WORLD_SIZE``, ``MASTER_ADDR`` and ``MASTER_PORT``
    in ``os.environ`` when they are missing (``0``, ``0``, ``1``, ``localhost``, a free port): the
    ``external_launcher`` executor rendezvouses through them, as under ``torchrun`` (TRL sets the same
    before it builds its colocated ``LLM``). Under ``torchrun`` the launcher's values are kept, and
    each rank builds its own engine on its ``LOCAL_RANK`` GPU.

    Args:
        model: a Hugging Face hub id or a local checkpoint folder.
        tokenizer: the tokenizer's id or folder; ``None`` uses the model's.
        dtype: the weights' dtype (``"auto"``, ``"bfloat16"``, ``"float16"``, ``"float32"``);
            ``"auto"`` takes the checkpoint's. Match the trainer's dtype, or weights are cast on sync.
        gpu_memory_utilization: the fraction of the GPU's memory, in ``(0, 1]``, vLLM may take for
            weights, activations and KV cache; the rest stays free for the trainer's weights,
            gradients and optimizer state. Lower it when the trainer needs more.
        max_model_len: the context window in tokens (prompt plus completion); ``None`` takes the
            model config's. Lower it to shrink the KV cache a sequence may need.
        seed: seed of the engine's random state; a request's own ``SamplingParams.seed`` wins.
        enable_sleep_mode: allow :meth:`sleep`/:meth:`wake_up`, which free the engine's GPU memory
            during the trainer's step (vLLM sleep mode, CUDA only).
        name: the policy's name in logs and the registry; defaults to ``model``.
        **engine_kwargs: more ``vllm.LLM`` / ``EngineArgs`` arguments (``enforce_eager``,
            ``tensor_parallel_size``, ``max_num_seqs``, ...). :data:`COLOCATE_DEFAULTS` apply unless
            given here; a ``distributed_executor_backend`` that runs the engine in another process
            leaves generation working but :meth:`load_weights` unavailable. ``logprobs_mode`` may
            only be ``"raw_logprobs"``, which this backend sets where vLLM has the option.

    Attributes:
        name: the model's name.
        context_window: the engine's ``max_model_len``, in tokens.

    Raises:
        BackendUnavailable: vLLM is not installed, or torch sees no CUDA GPU.
        ModelNotFound: ``model`` is a local path (starting ``/``, ``.`` or ``~``) that does not exist.
        ValueError: ``logprobs_mode`` other than ``"raw_logprobs"``.
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
        vllm = _import_vllm()
        _require_cuda()
        model = str(model)
        if model.startswith(("/", ".", "~")) and not Path(model).expanduser().exists():
            raise ModelNotFound(f"model path {model!r} does not exist; pass a local checkpoint folder or a hub id")
        mode = engine_kwargs.get("logprobs_mode", "raw_logprobs")
        if mode != "raw_logprobs":
            raise ValueError(
                "VLLMPolicy reports the raw log-probabilities of sampled tokens (logprobs_mode='raw_logprobs'); "
                f"got logprobs_mode={mode!r}"
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
        for key, value in COLOCATE_DEFAULTS.items():
            kwargs[key] = engine_kwargs.pop(key, value)
        kwargs.update(engine_kwargs)
        if "logprobs_mode" in _engine_arg_names(vllm):
            kwargs["logprobs_mode"] = "raw_logprobs"  # vLLM V1's default; pinned so a changed default can't slip in
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
        """Sample ``sampling.n`` completions for every prompt with vLLM.

        Each conversation goes through the tokenizer's chat template (generation prompt added), is
        checked against the context window (:func:`~spade_gym.policies.base.fit_prompt`), and is
        sent as token ids (``TokensPrompt``), so ``Completion.prompt_token_ids`` is exactly what the
        model saw. A sleeping engine is woken first.

        Args:
            prompts: ``B >= 1`` conversations (lists of ``{"role", "content"}`` messages).
            sampling: how to sample; ``None`` means ``SamplingParams()``.

        Returns:
            ``B * n`` completions grouped by prompt; ``logprobs`` hold one raw log-probability
            (natural log) per completion token; ``text`` is cut before any stop string.

        Raises:
            ValueError: malformed prompts.
            ContextLengthExceeded: a prompt plus ``max_new_tokens`` exceeds :attr:`context_window`
                and ``sampling.truncate_prompt`` is false.
            GenerationError: vLLM failed, or the engine slept at level 2 (weights discarded) and
                :meth:`load_weights` was not called since.
        """
        sampling = resolve_sampling(sampling)
        conversations = check_prompts(prompts)
        prompt_ids = [
            fit_prompt(
                self._encode(conversation), sampling.max_new_tokens, self.context_window, sampling.truncate_prompt
            )
            for conversation in conversations
        ]
        self._wake_for_generation()
        params = self._vllm.SamplingParams(**to_vllm_sampling_kwargs(sampling))
        requests = [_tokens_prompt(ids) for ids in prompt_ids]
        try:
            outputs = self._llm.generate(requests, params, use_tqdm=False)
        except Exception as error:  # vLLM raises many types; callers catch one
            raise GenerationError(f"vLLM generation failed: {type(error).__name__}: {error}") from error
        return completions_from_outputs(outputs, prompt_ids, sampling.n)

    def load_weights(self, state_dict: Mapping[str, torch.Tensor]) -> None:
        """Copy the trainer's current weights into the engine's model, in place, and reset the prefix cache.

        The colocated weight sync of TRL (``VLLMGeneration.sync_weights``: ``llm_model.load_weights``
        on ``llm.llm_engine.model_executor.driver_worker.model_runner.model``, then
        ``llm.reset_prefix_cache()``) and of verl's FSDP-to-vLLM sharding manager. The weights are
        handed to the model through ``LLM.apply_model`` (vLLM's public hook, which runs a function
        on each worker's model) where vLLM has it, else through the executor's driver worker as TRL
        does. Each model's ``load_weights`` maps checkpoint names onto its fused layers (q/k/v into
        ``qkv_proj``, tied embeddings, tensor-parallel shards) and copies with ``param.copy_``, so
        tensors may be on any device and in any float dtype. A sleeping engine's weights are woken
        first (TRL does the same).

        Args:
            state_dict: parameter name to tensor, the Hugging Face names of the transformers
                model's ``state_dict()`` (``model.layers.0.mlp.up_proj.weight``, ``lm_head.weight``,
                ...); full, unsharded tensors (gather FSDP/ZeRO-3 shards first). With PEFT, merge the
                adapters first (``model.merge_adapter()``); names are passed through
                :func:`to_vllm_param_name`, which strips PEFT/FSDP wrapper prefixes and drops
                ``lora_*`` entries, as TRL's ``_fix_param_name_to_vllm``.

        Raises:
            ValueError: ``state_dict`` holds no loadable parameter.
            BackendUnavailable: the engine runs in another process (a ``distributed_executor_backend``
                other than ``external_launcher``, or ``VLLM_ENABLE_V1_MULTIPROCESSING=1``), or this
                vLLM exposes neither ``LLM.apply_model`` nor the driver worker's model.
        """
        weights = [
            (vllm_name, tensor.detach())
            for key, tensor in state_dict.items()
            if (vllm_name := to_vllm_param_name(key)) is not None
        ]
        if not weights:
            raise ValueError("state_dict holds no parameter to load into vLLM (is it empty, or only adapter weights?)")
        loader = self._weight_loader()
        import torch

        if "weights" in self._asleep:
            torch.cuda.empty_cache()
            self._wake({"weights"})
        with torch.no_grad():
            loader(weights)
        self._weights_discarded = False
        self._llm.reset_prefix_cache()

    def sleep(self, level: int = 1) -> None:
        """Free the engine's GPU memory while the trainer runs (vLLM sleep mode).

        Level 1 moves the weights to CPU memory and discards the KV cache; level 2 discards both,
        for when the next call is :meth:`load_weights` anyway (an RL step). :meth:`generate` and
        :meth:`load_weights` wake what they need.

        Args:
            level: ``1`` or ``2``.

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
        """Give the engine its GPU memory back after :meth:`sleep`.

        Args:
            tags: the parts to wake, ``"weights"`` and/or ``"kv_cache"``; ``None`` wakes both. Waking
                the weights first, then loading new ones, then the KV cache keeps peak memory lowest.

        Raises:
            ValueError: an unknown tag.
            PolicyError: the policy was built without ``enable_sleep_mode=True``.
        """
        self._require_sleep_mode("wake_up")
        parts = {"weights", "kv_cache"} if tags is None else set(tags)
        unknown = parts - {"weights", "kv_cache"}
        if unknown:
            raise ValueError(f"wake_up tags must be 'weights' and/or 'kv_cache', got {sorted(unknown)}")
        self._wake(parts & self._asleep)

    # -- internals ---------------------------------------------------------------------------------

    def _encode(self, conversation: list[dict[str, str]]) -> list[int]:
        """Apply the chat template with the generation prompt and return the token ids."""
        encoded = self._tokenizer.apply_chat_template(conversation, add_generation_prompt=True, tokenize=True)
        return _as_token_ids(encoded)

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

    def _weight_loader(self) -> Callable[[list[tuple[str, Any]]], None]:
        """Find how to reach the engine's model in this vLLM: ``LLM.apply_model``, else TRL's attribute path."""
        executor = getattr(getattr(self._llm, "llm_engine", None), "model_executor", None)
        if executor is None:
            raise BackendUnavailable(
                "load_weights needs the vLLM engine in this process, but it runs in a separate process; build "
                "VLLMPolicy with distributed_executor_backend='external_launcher' (the default) or set "
                "VLLM_ENABLE_V1_MULTIPROCESSING=0 before building it"
            )
        apply_model = getattr(self._llm, "apply_model", None)
        if callable(apply_model):

            def via_apply_model(weights: list[tuple[str, Any]]) -> None:
                apply_model(lambda model: _load_into(model, weights))

            return via_apply_model
        model = _driver_model(executor)
        if model is None:
            raise BackendUnavailable(
                "this vLLM version exposes neither LLM.apply_model nor "
                "llm.llm_engine.model_executor.driver_worker.model_runner.model, so weights cannot be synced in "
                f"place; {_INSTALL_HINT} (a recent vLLM)"
            )

        def via_driver_worker(weights: list[tuple[str, Any]]) -> None:
            _load_into(model, weights)

        return via_driver_worker


def ensure_distributed_env(environ: MutableMapping[str, str] | None = None) -> None:
    """Fill in the torch.distributed rendezvous variables vLLM's ``external_launcher`` reads, if missing.

    Existing values (from ``torchrun`` or ``accelerate``) are kept. A ``MASTER_PORT`` that is unset,
    ``"0"`` or ``"auto"`` becomes a free TCP port (as TRL's ``ensure_master_addr_port``).

    Args:
        environ: the environment to update; ``None`` means ``os.environ``.
    """
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


def check_vllm_available() -> None:
    """Check that the vLLM backend can start here, without starting it.

    Raises:
        BackendUnavailable: vLLM is not installed, or torch sees no CUDA GPU.
    """
    _import_vllm()
    _require_cuda()


def _import_vllm() -> Any:
    try:
        import vllm
    except ImportError as error:
        raise BackendUnavailable(
            f"the vLLM backend needs the vllm package, which is not installed; {_INSTALL_HINT}"
        ) from error
    return vllm


def _require_cuda() -> None:
    try:
        import torch
    except ImportError as error:
        raise BackendUnavailable(f"the vLLM backend needs torch, which is not installed; {_INSTALL_HINT}") from error
    if not torch.cuda.is_available():
        raise BackendUnavailable(
            "the vLLM backend needs an NVIDIA GPU, and torch sees no CUDA device here; use the transformers "
            "backend (load_policy('<model>')) on CPU, or run on a machine with a GPU"
        )


def _engine_arg_names(vllm: Any) -> frozenset[str]:
    """The field names of ``vllm.EngineArgs`` (empty when they cannot be read)."""
    engine_args = getattr(vllm, "EngineArgs", None)
    if engine_args is None or not dataclasses.is_dataclass(engine_args):
        return frozenset()
    return frozenset(field.name for field in dataclasses.fields(engine_args))


def _max_model_len(llm: Any, requested: int | None) -> int | None:
    """The engine's context window: ``llm.llm_engine.model_config.max_model_len``."""
    engine: Any = getattr(llm, "llm_engine", None)
    config = getattr(engine, "model_config", None)
    get_model_config = getattr(engine, "get_model_config", None)
    if config is None and callable(get_model_config):
        config = get_model_config()
    value = getattr(config, "max_model_len", None)
    return int(value) if value is not None else requested


def _tokens_prompt(prompt_token_ids: list[int]) -> Any:
    """A ``vllm.inputs.TokensPrompt`` (a TypedDict; a plain dict where the import fails)."""
    try:
        from vllm.inputs import TokensPrompt
    except ImportError:
        return {"prompt_token_ids": prompt_token_ids}
    return TokensPrompt(prompt_token_ids=prompt_token_ids)


def _as_token_ids(encoded: Any) -> list[int]:
    """Token ids from ``apply_chat_template(tokenize=True)``: a list, or (transformers 5) a ``BatchEncoding``."""
    if isinstance(encoded, Mapping):
        encoded = encoded["input_ids"]
    if hasattr(encoded, "tolist"):
        encoded = encoded.tolist()
    ids = list(encoded)
    if len(ids) == 1 and isinstance(ids[0], list | tuple):  # a batch of one
        ids = list(ids[0])
    if not ids or not all(isinstance(t, int) for t in ids):
        raise GenerationError(f"the chat template produced no token ids (got {type(encoded).__name__})")
    return ids


def _driver_model(executor: Any) -> Any:
    """TRL's path to the model: ``executor.driver_worker[.worker].model_runner.model`` (``None`` if absent)."""
    worker = getattr(executor, "driver_worker", None)
    worker = getattr(worker, "worker", worker)  # V1's WorkerWrapperBase wraps the GPU worker
    model = getattr(getattr(worker, "model_runner", None), "model", None)
    return model if callable(getattr(model, "load_weights", None)) else None


def _load_into(model: Any, weights: Iterable[tuple[str, Any]]) -> None:
    """Call the vLLM model's own ``load_weights`` (returns nothing: results travel back from workers)."""
    model.load_weights(weights)
