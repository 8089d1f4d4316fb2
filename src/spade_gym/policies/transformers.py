"""The transformers backend: batched chat generation with per-token logprobs, and re-scoring.

:class:`TransformersPolicy` is the policy the trainer updates (CPU or GPU); its
:meth:`~TransformersPolicy.sequence_logprobs` recomputes the logprobs :meth:`~TransformersPolicy.generate`
records, with gradients (the log-probabilities of GRPO's loss, Shao et al. 2024, *DeepSeekMath*, eq. 3).
Generation stays exact: the checkpoint's sampling defaults are replaced by a neutral
``generation_config``, a logits processor records ``log_softmax(logits / T)`` before top-p, one
stopping criterion records where each row ended, and key/value caches of shared prefixes are reused
(:class:`PrefixCache`; greedy outputs are the same without it).
"""

from __future__ import annotations

import contextlib
import functools
import threading
import time
import warnings
from collections import OrderedDict
from collections.abc import Generator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from spade_gym.errors import BackendUnavailable, ModelNotFound, PolicyError, install_hint
from spade_gym.policies.base import (
    Completion,
    FinishReason,
    Prompt,
    SamplingParams,
    chat_token_ids,
    check_prompts,
    common_prefix_length,
    cut_at_stop,
    fit_prompt,
    is_int,
    logprob_temperature,
    resolve_sampling,
)
from spade_gym.policies.scoring import MICRO_BATCH_TOKENS, check_pairs, score_passes

if TYPE_CHECKING:
    import torch

__all__ = ["PrefixCache", "TransformersPolicy", "import_torch_stack", "resolve_device_dtype"]

_TRAIN_HINT = f"install the train extra: {install_hint('train')}; on a machine without an NVIDIA GPU, install torch's CPU build first"


def import_torch_stack() -> None:
    """Import torch and transformers, or raise BackendUnavailable with the install command."""
    try:
        import torch  # noqa: F401
        import transformers  # noqa: F401
    except ImportError as exc:
        raise BackendUnavailable(
            f"the transformers backend needs torch and transformers ({exc}); {_TRAIN_HINT}"
        ) from exc


def resolve_device_dtype(device: str | None, dtype: str | torch.dtype | None) -> tuple[torch.device, torch.dtype]:
    """``(device, dtype)``: ``device`` ``"cpu"``, ``"cuda[:N]"``, ``"mps"`` or ``None`` (the best);
    ``dtype`` a ``torch.dtype``, ``"float32"``/``"fp32"``, ``"bfloat16"``/``"bf16"``, ``"float16"``/``"fp16"``
    or ``None``/``"auto"`` (bf16 on a GPU that supports it, else fp16; fp32 on CPU).
    ValueError for an unknown name, or CUDA on a machine without it.
    """
    import torch

    if device is None:
        device = "cuda" if torch.cuda.is_available() else "mps" if torch.backends.mps.is_available() else "cpu"
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as exc:
        raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N', 'mps' or None, got {device!r}") from exc
    if dev.type not in ("cpu", "cuda", "mps"):
        raise ValueError(f"device must be 'cpu', 'cuda', 'cuda:N', 'mps' or None, got {device!r}")
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError(f"device {device!r} asked for, but torch sees no CUDA GPU on this machine; use device='cpu'")
    if dtype is None or dtype == "auto":
        if dev.type == "cuda":
            return dev, torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
        return dev, torch.float32
    if isinstance(dtype, torch.dtype):
        return dev, dtype
    names = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    names |= {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
    if dtype not in names:
        raise ValueError(f"dtype must be a torch.dtype, 'auto' or one of {sorted(names)}, got {dtype!r}")
    return dev, names[dtype]


def _load_pretrained(auto_class: Any, source: str, *, local: bool, **kwargs: Any) -> Any:
    """``auto_class.from_pretrained(source)``, every failure a :class:`ModelNotFound`; a hub id is
    read from the local cache first, so a cached model loads without the hub."""
    if not local:
        from huggingface_hub import try_to_load_from_cache
        from huggingface_hub.utils import HFValidationError

        try:
            cached = any(
                isinstance(try_to_load_from_cache(source, name), str)
                for name in ("config.json", "tokenizer_config.json")
            )
        except HFValidationError as exc:  # "[a]", "a b": not a hub id, and no such folder
            raise ModelNotFound(
                f"cannot load model {source!r}: it is neither a folder that exists nor a Hugging Face model id "
                f"({str(exc).strip().rstrip('.')}). Give a local checkpoint folder, a hub id such as "
                "'HuggingFaceTB/SmolLM2-135M-Instruct', or 'default' for the embedded model"
            ) from None
        if cached:
            try:
                return auto_class.from_pretrained(source, local_files_only=True, **kwargs)
            except Exception:  # not fully cached: try the hub below
                pass
        unreachable = _hub_unreachable()
        if unreachable:  # fail at once: the hub client would retry for minutes
            raise ModelNotFound(
                f"cannot load model {source!r}: it is not in the Hugging Face cache and the hub cannot be reached "
                f"({unreachable}). Check the id for a typo, or give a local checkpoint folder, or 'default' for the "
                "embedded model"
            )
    try:
        return auto_class.from_pretrained(source, **kwargs)
    except Exception as exc:
        reason = f"{type(exc).__name__}: {str(exc).strip().rstrip('.')}"
        if local:
            raise ModelNotFound(
                f"cannot load {source!r}: {reason}; the checkpoint folder is damaged or incomplete"
            ) from exc
        raise ModelNotFound(
            f"cannot load model {source!r}: {reason}. Give a local checkpoint folder, a hub id already in the Hugging "
            "Face cache, or 'default' for the embedded model; set HF_HUB_OFFLINE=1 on machines that cannot reach the "
            "hub to fail at once instead of retrying"
        ) from exc


def _hub_unreachable(timeout_s: float = 3.0) -> str | None:
    """Why the hub cannot be reached (offline mode, or no TCP connection), or ``None``."""
    import socket
    from urllib.parse import urlsplit

    from huggingface_hub import constants

    if constants.HF_HUB_OFFLINE:
        return "HF_HUB_OFFLINE is set"
    url = urlsplit(constants.ENDPOINT)
    host, port = url.hostname or "", url.port or (443 if url.scheme == "https" else 80)
    try:
        socket.create_connection((host, port), timeout=timeout_s).close()
    except OSError as exc:
        return f"no connection to {host}:{port}: {exc.strerror or exc}"
    return None


def _load_model(model: str | Path | Any, tokenizer: Any, name: str | None, dtype: torch.dtype) -> tuple[Any, Any, str]:
    """``(model, tokenizer, name)`` for :class:`TransformersPolicy`: a path or hub id loaded (tokenizer
    too unless given), or a loaded model with its tokenizer."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    if isinstance(model, str | Path):
        source = str(model)
        path = Path(source).expanduser()
        if path.exists():
            if not (path / "config.json").is_file():
                raise ModelNotFound(f"{source!r} exists but is not a transformers checkpoint (no config.json in it)")
            source = str(path)
        elif source.startswith((".", "/", "~")) or source.count("/") > 1 or "\\" in source:  # not a hub id
            raise ModelNotFound(f"model path {source!r} does not exist")
        loaded = _load_pretrained(AutoModelForCausalLM, source, local=path.exists(), dtype=dtype)
        if tokenizer is None:
            tokenizer = source
        name = name or source
    else:
        loaded = model
        name = name or str(getattr(getattr(model, "config", None), "_name_or_path", "") or type(model).__name__)
        if tokenizer is None:
            raise ValueError("a tokenizer must be given with an already loaded model")
    if isinstance(tokenizer, str | Path):
        tokenizer = _load_pretrained(AutoTokenizer, str(tokenizer), local=Path(str(tokenizer)).expanduser().exists())
    return loaded, tokenizer, name


class TransformersPolicy:
    """A trainable chat policy on a transformers causal language model (CPU or GPU).

    Args:
        model: a local checkpoint folder, a hub id (read from the local cache when the hub cannot
            be reached), or a loaded ``PreTrainedModel`` (then ``tokenizer`` is required).
        tokenizer: a tokenizer or its path/id; ``None`` loads it from ``model``.
        device, dtype: see :func:`resolve_device_dtype`.
        lora: new LoRA adapters (a ``peft.LoraConfig`` or a dict of its fields); only they train.
        adapter: a saved peft adapter folder to load (trainable).
        max_batch_size: most sequences (prompts times ``n``) per ``model.generate`` call.
        context_window: window in tokens; default: the config's ``max_position_embeddings``.
        chat_template: a Jinja chat template to use instead of the tokenizer's own.
        name: the name reported in logs; default: ``model``.
        prefix_cache_mb: MiB of key/value caches kept for reuse; ``0`` turns reuse off.

    Attributes:
        model: the ``torch.nn.Module`` (a ``PeftModel`` when adapters are attached).
        last_stats: the last ``generate`` call's ``generate_calls``, ``completion_tokens``,
            ``prompt_tokens``, ``reused_prompt_tokens``, ``wall_s``, ``prefill_s`` and ``tokens_per_s``.
        prefix_cache: the :class:`PrefixCache`, or ``None`` when reuse is off (also for models
            whose layers do not keep every key and value, e.g. sliding windows).

    Raises:
        ModelNotFound: the path does not exist, or the hub id is neither cached nor reachable.
        BackendUnavailable: torch/transformers (or peft, for ``lora``/``adapter``) not installed.
        PolicyError: the tokenizer has no usable chat template and none was given.
    """

    def __init__(
        self,
        model: str | Path | Any,
        tokenizer: Any = None,
        *,
        device: str | None = None,
        dtype: str | torch.dtype | None = None,
        lora: Any = None,
        adapter: str | Path | None = None,
        max_batch_size: int = 32,
        context_window: int | None = None,
        chat_template: str | None = None,
        name: str | None = None,
        prefix_cache_mb: int = 1024,
    ) -> None:
        import_torch_stack()
        from transformers import GenerationConfig, StopStringCriteria

        if not is_int(max_batch_size) or max_batch_size < 1:
            raise ValueError(f"max_batch_size must be an int >= 1, got {max_batch_size!r}")
        if context_window is not None and not (is_int(context_window) and context_window >= 1):
            raise ValueError(f"context_window must be an int >= 1 (tokens) or None, got {context_window!r}")
        if not is_int(prefix_cache_mb) or prefix_cache_mb < 0:
            raise ValueError(f"prefix_cache_mb must be an int >= 0 (MiB; 0 turns reuse off), got {prefix_cache_mb!r}")
        self.device, self.dtype = resolve_device_dtype(device, dtype)
        loaded, tokenizer, self.name = _load_model(model, tokenizer, name, self.dtype)
        self.tokenizer = tokenizer
        if chat_template is not None:
            tokenizer.chat_template = chat_template
        if not getattr(tokenizer, "chat_template", None):
            raise PolicyError(
                f"the tokenizer of {self.name!r} has no chat template; pass chat_template='...' (a Jinja template) "
                "or use an instruction-tuned model"
            )
        try:  # render once now, so a broken template fails here and not in the middle of a rollout
            tokenizer.apply_chat_template(
                [{"role": "user", "content": "hi"}], add_generation_prompt=True, tokenize=True, return_dict=False
            )
        except Exception as exc:
            raise PolicyError(
                f"the chat template of {self.name!r} cannot be rendered: {type(exc).__name__}: {exc}"
            ) from exc
        loaded = loaded.to(device=self.device, dtype=self.dtype)
        config = loaded.config
        eos = config.eos_token_id if config.eos_token_id is not None else tokenizer.eos_token_id
        eos_ids = [eos] if isinstance(eos, int) else list(eos or [])
        if tokenizer.eos_token_id is not None and tokenizer.eos_token_id not in eos_ids:
            eos_ids.append(tokenizer.eos_token_id)
        if not eos_ids:
            raise PolicyError(f"{self.name!r} has no end-of-sequence token in its config or tokenizer")
        self.eos_token_ids: list[int] = eos_ids
        pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else eos_ids[0]
        self.pad_token_id: int = int(pad)
        # Neutral generation defaults: SamplingParams is the only source of sampling settings.
        loaded.generation_config = GenerationConfig(
            bos_token_id=config.bos_token_id, eos_token_id=eos_ids, pad_token_id=self.pad_token_id
        )
        self.model = loaded
        if lora is not None or adapter is not None:
            self.model = self.attach_peft(lora, adapter)
        self.model.eval()
        self.context_window: int | None = (
            context_window if context_window is not None else getattr(config, "max_position_embeddings", None)
        )
        self.vocab_size: int = int(self.model.get_input_embeddings().num_embeddings)
        self.max_batch_size = max_batch_size
        self.last_stats: dict[str, float] = {}
        # generate() seeds torch's global generator inside fork_rng: one call at a time per policy
        self._lock = threading.Lock()
        # builds token tables over the vocabulary: once per set of stop strings (the 16 most recent)
        self._stop_criterion = functools.lru_cache(maxsize=16)(
            lambda stop: StopStringCriteria(tokenizer=tokenizer, stop_strings=list(stop))
        )
        self._computed = 0  # prompt tokens the current call ran through the model before generate
        self._prefill_s = 0.0  # seconds the current call spent in _prefix_sources
        # reuse needs every layer to keep all its keys and values (no sliding windows, no state-space layers)
        plain = all(type(layer).__name__ == "DynamicLayer" for layer in getattr(self._new_cache(), "layers", []))
        self.prefix_cache: PrefixCache | None = (
            PrefixCache(prefix_cache_mb * 2**20) if prefix_cache_mb and plain else None
        )

    def attach_peft(self, lora: Any, adapter: str | Path | None) -> Any:
        """``self.model`` wrapped in the LoRA adapters of the ``adapter`` folder (trainable), else new
        ones of ``lora``; the caller assigns the result to ``self.model``.

        Raises:
            BackendUnavailable: peft is not installed.
            ModelNotFound: the ``adapter`` folder does not exist.
        """
        try:
            import peft
        except ImportError as exc:
            raise BackendUnavailable("LoRA adapters need peft: pip install peft (it is in the train extra)") from exc
        if adapter is not None and not Path(adapter).exists():
            raise ModelNotFound(f"adapter folder {str(adapter)!r} does not exist")
        with warnings.catch_warnings():  # peft reads a deprecated transformers attribute; not the user's concern
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            if adapter is not None:
                return peft.PeftModel.from_pretrained(self.model, str(adapter), is_trainable=True)
            config = lora if isinstance(lora, peft.LoraConfig) else peft.LoraConfig(task_type="CAUSAL_LM", **dict(lora))
            return peft.get_peft_model(self.model, config)

    def encode(self, prompt: Prompt) -> list[int]:
        """The token ids of one conversation: :func:`chat_token_ids` with this policy's tokenizer."""
        return chat_token_ids(self.tokenizer, prompt)

    def generate(self, prompts: Sequence[Prompt], sampling: SamplingParams | None = None) -> list[Completion]:
        """``sampling.n`` completions per prompt (see :class:`~spade_gym.policies.base.Policy`), one call
        at a time. A ``sampling.seed`` seeds torch's global generator inside ``torch.random.fork_rng``."""
        import torch

        sampling = resolve_sampling(sampling)
        checked = check_prompts(prompts)
        encoded = [
            fit_prompt(self.encode(p), sampling.max_new_tokens, self.context_window, sampling.truncate_prompt)
            for p in checked
        ]
        rows = [(i, ids) for i, ids in enumerate(encoded) for _ in range(sampling.n)]
        # Group rows of similar length into one generate call; the result is put back in order.
        order = sorted(range(len(rows)), key=lambda r: len(rows[r][1]))
        results: list[Completion | None] = [None] * len(rows)
        started, calls, reused = time.perf_counter(), 0, 0
        seeded = (
            torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else [])
            if sampling.seed is not None
            else contextlib.nullcontext()
        )
        with self._lock, seeded:
            self._prefill_s = 0.0
            if sampling.seed is not None:
                torch.manual_seed(sampling.seed)
            for lo in range(0, len(order), self.max_batch_size):
                chunk = order[lo : lo + self.max_batch_size]
                done, chunk_reused = self._generate_rows([rows[r] for r in chunk], sampling)
                calls += 1
                reused += chunk_reused
                for r, completion in zip(chunk, done, strict=True):
                    results[r] = completion
        out = [c for c in results if c is not None]
        wall = time.perf_counter() - started
        tokens = sum(c.num_tokens for c in out)
        self.last_stats = {
            "generate_calls": calls,
            "completion_tokens": tokens,
            "prompt_tokens": sum(len(ids) for _, ids in rows),
            "reused_prompt_tokens": reused,
            "wall_s": wall,
            "prefill_s": self._prefill_s,
            "tokens_per_s": tokens / wall if wall else 0.0,
        }
        return out

    def _generate_rows(
        self, rows: list[tuple[int, list[int]]], sampling: SamplingParams
    ) -> tuple[list[Completion], int]:
        """One ``model.generate`` call for ``rows`` (prompt index, prompt ids): the completions, and
        the prompt tokens not run through the model (cached, or computed once for several rows)."""
        import torch
        from transformers import GenerationConfig, LogitsProcessorList, StoppingCriteriaList

        store = self.prefix_cache if self.prefix_cache is not None and not self.model.training else None
        sources: list[tuple[torch.Tensor | None, int]] = [(None, 0)] * len(rows)
        self._computed = 0  # prompt tokens run through the model by _fill
        if store is not None:
            store.check_weights(self.model)
            began = time.perf_counter()
            sources = self._prefix_sources([ids for _, ids in rows], store)
            self._prefill_s += time.perf_counter() - began
        cached = max(length for _, length in sources)  # columns held in the cache
        tails = [ids[length:] for (_, ids), (_, length) in zip(rows, sources, strict=True)]
        width = cached + max(len(t) for t in tails)
        input_ids = torch.full((len(rows), width), self.pad_token_id, dtype=torch.long)
        attention = torch.zeros((len(rows), width), dtype=torch.long)
        for k, ((_, ids), (_, length), tail) in enumerate(zip(rows, sources, tails, strict=True)):
            # [padding][cached tokens | gap of padding][uncached tokens]: every tail starts a generate step
            input_ids[k, cached - length : cached] = torch.tensor(ids[:length], dtype=torch.long)
            attention[k, cached - length : cached] = 1
            input_ids[k, width - len(tail) :] = torch.tensor(tail, dtype=torch.long)
            attention[k, width - len(tail) :] = 1
        input_ids, attention = input_ids.to(self.device), attention.to(self.device)
        cache_kwargs: dict[str, Any] = {}
        if store is not None:  # preallocated for the whole call: decoding writes in place, never copies
            cache_kwargs[_CACHE_KWARG] = self._batch_cache(sources, cached, capacity=width + sampling.max_new_tokens)
        temperature = logprob_temperature(sampling)
        recorder = _LogprobRecorder(temperature)
        stop_criterion = self._stop_criterion(sampling.stop) if sampling.stop else None
        finish = _FinishRecorder(width, len(rows), self.eos_token_ids, stop_criterion, self.device)
        config = GenerationConfig(
            max_new_tokens=sampling.max_new_tokens,
            do_sample=not sampling.greedy,
            # unset fields take transformers' global defaults (top_k=50!): disable top-k when sampling
            temperature=None if sampling.greedy else sampling.temperature,
            top_p=None if sampling.greedy else sampling.top_p,
            top_k=None if sampling.greedy else 0,
            # eos_token_id stays unset: generate takes the model's (and pads rows that ended); our
            # stopping criterion checks the same ids and stop strings, and records where each row ended
            pad_token_id=self.pad_token_id,
            bos_token_id=self.model.generation_config.bos_token_id,
            return_dict_in_generate=store is not None,
        )
        with torch.inference_mode():
            output = self.model.generate(
                input_ids=input_ids,
                attention_mask=attention,
                generation_config=config,
                logits_processor=LogitsProcessorList([recorder]),
                stopping_criteria=StoppingCriteriaList([finish]),
                **cache_kwargs,
            )
        sequences = output.sequences if store is not None else output
        new = sequences[:, width:]
        logprobs = recorder.result(new)
        new_cpu, logprobs_cpu = new.cpu().tolist(), logprobs.cpu().tolist()
        out = []
        for k, (index, ids) in enumerate(rows):
            length = int(finish.length[k]) if finish.length[k] >= 0 else new.shape[1]
            tokens = new_cpu[k][:length]
            reason: FinishReason = "stop" if finish.length[k] >= 0 else "length"
            text, _ = cut_at_stop(self.tokenizer.decode(tokens, skip_special_tokens=True), sampling.stop)
            out.append(Completion(text, list(ids), tokens, logprobs_cpu[k][:length], reason, index, temperature))
        if store is not None:
            final = getattr(output, "cache", None) or getattr(output, "past_key_values", None)
            if final is not None and sampling.n == 1:
                self._keep_sequences(store, final, cached, width, sources, tails, out)
        return out, sum(len(ids) for _, ids in rows) - self._computed - sum(len(t) for t in tails)

    def _prefix_sources(self, prompts: list[list[int]], store: PrefixCache) -> list[tuple[torch.Tensor | None, int]]:
        """Per prompt, ``(keys and values, length)`` of all its tokens but the last (``(None, 0)``
        without reuse); prefixes shared by several prompts are computed once first."""
        order = sorted(range(len(prompts)), key=lambda k: prompts[k])
        shared: list[list[int]] = []
        group, length = [order[0]], 0
        for previous, current in zip(order, [*order[1:], None], strict=True):
            common = common_prefix_length(prompts[previous], prompts[current]) if current is not None else 0
            if current is not None and common >= PrefixCache.MIN_TOKENS:
                length = common if len(group) == 1 else min(length, common)
                group.append(current)
                continue
            if len(group) > 1:
                shared.append(prompts[group[0]][: min(length, *(len(prompts[k]) - 1 for k in group))])
            group, length = ([current] if current is not None else []), 0
        self._fill(store, shared)
        self._fill(store, [ids[:-1] for ids in {tuple(p): p for p in prompts}.values()])
        sources: list[tuple[torch.Tensor | None, int]] = []
        for ids in prompts:
            kv, known = store.lookup(ids, limit=len(ids) - 1)
            sources.append((kv, known) if known >= PrefixCache.MIN_TOKENS else (None, 0))
        return sources

    def _fill(self, store: PrefixCache, sequences: list[list[int]]) -> None:
        """Compute and keep each uncached sequence's keys and values, continuing from its longest
        cached prefix (batched; cached prefixes right-aligned, new tokens right-padded)."""
        import torch

        todo = []
        for tokens in sequences:
            kv, known = store.lookup(tokens, limit=len(tokens))
            if known < len(tokens) and len(tokens) >= PrefixCache.MIN_TOKENS:
                todo.append((tokens, *((kv, known) if known >= PrefixCache.MIN_TOKENS else (None, 0))))
        for chunk in _similar_chunks(todo, self.max_batch_size):
            cached = max(known for _, _, known in chunk)
            width = max(len(tokens) - known for tokens, _, known in chunk)
            ids = torch.full((len(chunk), width), self.pad_token_id, dtype=torch.long)
            mask = torch.zeros((len(chunk), cached + width), dtype=torch.long)
            positions = torch.zeros((len(chunk), width), dtype=torch.long)
            for k, (tokens, _, known) in enumerate(chunk):
                new = len(tokens) - known
                self._computed += new
                ids[k, :new] = torch.tensor(tokens[known:], dtype=torch.long)
                mask[k, cached - known : cached + new] = 1
                positions[k] = torch.arange(known, known + width)
            cache = self._batch_cache([(kv, known) for _, kv, known in chunk], cached)
            with torch.inference_mode():
                output = self.model(
                    input_ids=ids.to(self.device),
                    attention_mask=mask.to(self.device),
                    position_ids=positions.to(self.device),
                    use_cache=True,
                    logits_to_keep=1,
                    **{_CACHE_KWARG: cache},
                )
            final = getattr(output, "cache", None) or output.past_key_values
            for k, (tokens, _, known) in enumerate(chunk):
                columns = torch.arange(cached - known, cached + len(tokens) - known)
                store.add(tokens, _row(final, k, columns))

    def _new_cache(self, capacity: int | None = None) -> Any:
        """An empty ``DynamicCache``, or a ``StaticCache`` preallocated for ``capacity`` columns."""
        from transformers import DynamicCache, StaticCache

        if capacity is not None:
            with contextlib.suppress(TypeError, ValueError):  # a model it cannot preallocate for
                return StaticCache(config=self.model.config, max_cache_len=capacity)
        return DynamicCache(config=self.model.config)

    def _batch_cache(
        self, sources: list[tuple[torch.Tensor | None, int]], cached: int, *, capacity: int | None = None
    ) -> Any:
        """A cache of ``cached`` columns, each row's known prefix right-aligned, zeros before it."""
        cache = self._new_cache(capacity)
        if not cached:
            return cache
        template = next(kv for kv, known in sources if kv is not None and known)
        layers, _, heads, _, dim = template.shape
        for layer in range(layers):  # one layer at a time: blocks the allocator can reuse
            pair = template.new_zeros((2, len(sources), heads, cached, dim))
            for k, (kv, known) in enumerate(sources):
                if kv is not None and known:
                    pair[:, k, :, cached - known :] = kv[layer, :, :, :known]
            cache.update(pair[0], pair[1], layer)
        return cache

    def _keep_sequences(
        self,
        store: PrefixCache,
        final: Any,
        cached: int,
        width: int,
        sources: list[tuple[torch.Tensor | None, int]],
        tails: list[list[int]],
        completions: list[Completion],
    ) -> None:
        """Keep each row's prompt and completion keys and values, for a later turn of its conversation."""
        import torch

        held = int(final.get_seq_length())  # the last sampled token was never run: one column fewer
        for k, ((_, known), tail, completion) in enumerate(zip(sources, tails, completions, strict=True)):
            new = completion.completion_token_ids or []
            steps = min(len(new), held - width)
            tokens = list(completion.prompt_token_ids or []) + new[:steps]
            if len(tokens) < PrefixCache.MIN_TOKENS or store.lookup(tokens, limit=len(tokens))[1] == len(tokens):
                continue
            columns = torch.cat([torch.arange(cached - known, cached), torch.arange(width - len(tail), width + steps)])
            store.add(tokens, _row(final, k, columns))

    def sequence_logprobs(
        self,
        batch: Sequence[Completion | tuple[Sequence[int], Sequence[int]]],
        *,
        micro_batch_tokens: int = MICRO_BATCH_TOKENS,
        shared_prefix: bool = True,
        temperatures: Sequence[float] | None = None,
        checkpoint_tokens: int | None = None,
    ) -> list[torch.Tensor]:
        """:meth:`score_batches` gathered in batch order: ``B`` float32 tensors on the model's device,
        one natural-log entry per completion token (``Completion.logprobs`` up to rounding; with
        gradients under ``torch.enable_grad()``). ValueError as :meth:`score_batches`."""
        out: list[torch.Tensor | None] = [None] * (len(batch) if isinstance(batch, Sequence) else 0)
        for members, logprobs in self.score_batches(
            batch,
            micro_batch_tokens=micro_batch_tokens,
            shared_prefix=shared_prefix,
            temperatures=temperatures,
            checkpoint_tokens=checkpoint_tokens,
        ):
            for index, scores in zip(members, logprobs, strict=True):
                out[index] = scores
        return [scores for scores in out if scores is not None]

    def score_batches(
        self,
        batch: Sequence[Completion | tuple[Sequence[int], Sequence[int]]],
        *,
        micro_batch_tokens: int = MICRO_BATCH_TOKENS,
        shared_prefix: bool = True,
        temperatures: Sequence[float] | None = None,
        checkpoint_tokens: int | None = None,
    ) -> Generator[tuple[list[int], list[torch.Tensor]], None, None]:
        """The completion logprobs of ``batch`` (Completions or ``(prompt_token_ids,
        completion_token_ids)`` pairs), one forward pass at a time: yields ``(members, logprobs)``,
        the batch indices of the pass and one float32 tensor per member; see
        :func:`~spade_gym.policies.scoring.score_passes` for ``micro_batch_tokens``,
        ``shared_prefix`` and ``checkpoint_tokens``. ``temperatures``: one ``T`` per item
        (``log_softmax(logits / T)``); ``None``: each Completion's own ``temperature``, 1 for pairs.

        Raises:
            ValueError: an empty or malformed batch, missing or out-of-vocabulary token ids, an
                empty completion, a sequence over the context window, ``micro_batch_tokens < 1``, or
                ``temperatures`` not one positive number per item.
        """
        pairs = check_pairs(batch, self.vocab_size, self.context_window)
        if temperatures is None:
            temperatures = [item.temperature if isinstance(item, Completion) else 1.0 for item in batch]
        yield from score_passes(
            self.model,
            pairs,
            temperatures,
            micro_batch_tokens,
            shared_prefix,
            checkpoint_tokens=checkpoint_tokens,
            pad_token_id=self.pad_token_id,
        )

    def state_dict_for_inference(self) -> dict[str, torch.Tensor]:
        """``{name: tensor}`` for an inference engine (:meth:`VLLMPolicy.load_weights`): LoRA adapters
        merged in (a copy), names as in the base model's ``state_dict()``."""
        import torch

        if not is_peft(self.model):
            return dict(self.model.state_dict())
        with torch.no_grad():
            self.model.merge_adapter()
            try:
                merged = {}
                for key, value in self.model.state_dict().items():
                    if "lora_" in key or "modules_to_save" in key and "original_module" in key:
                        continue
                    key = key.removeprefix("base_model.model.").replace(".base_layer", "")
                    merged[key] = value.detach().clone()
            finally:
                self.model.unmerge_adapter()
        return merged

    def __repr__(self) -> str:
        return f"TransformersPolicy({self.name!r}, device={self.device}, dtype={self.dtype}, context_window={self.context_window})"


def is_peft(model: Any) -> bool:
    try:
        from peft import PeftModel
    except ImportError:
        return False
    return isinstance(model, PeftModel)


class _LogprobRecorder:
    """Logits processor (it runs before transformers' temperature and top-p warpers) keeping each
    step's ``log_softmax(logits / temperature)``, gathered at the sampled token on the next step."""

    def __init__(self, temperature: float) -> None:
        self.temperature = temperature
        self.gathered: list[torch.Tensor] = []
        self.previous: torch.Tensor | None = None

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        import torch

        if self.previous is not None:
            self.gathered.append(self.previous.gather(-1, input_ids[:, -1:]).squeeze(-1))
        self.previous = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def result(self, new_tokens: torch.Tensor) -> torch.Tensor:
        """``(B, T)`` logprobs of the generated ``(B, T)`` tokens."""
        import torch

        steps = new_tokens.shape[1]
        gathered = list(self.gathered[:steps])
        if len(gathered) < steps and self.previous is not None:
            gathered.append(self.previous.gather(-1, new_tokens[:, len(gathered) : len(gathered) + 1]).squeeze(-1))
        if not gathered:
            return torch.zeros_like(new_tokens, dtype=torch.float32)
        return torch.stack(gathered, dim=1)


class _FinishRecorder:
    """Stopping criterion on end-of-sequence tokens and stop strings; ``length[b]`` is row ``b``'s
    completion length (finishing token included), ``-1`` while running or when cut by length."""

    def __init__(self, prompt_width: int, rows: int, eos_ids: list[int], stop_strings: Any, device: Any) -> None:
        import torch

        self.prompt_width = prompt_width
        self.eos = torch.tensor(eos_ids, device=device)
        self.length = torch.full((rows,), -1, dtype=torch.long, device=device)
        self.stop_strings = stop_strings  # a transformers StopStringCriteria, or None

    def __call__(self, input_ids: torch.Tensor, scores: Any, **kwargs: Any) -> torch.Tensor:
        import torch

        done = torch.isin(input_ids[:, -1], self.eos)
        if self.stop_strings is not None:
            done |= self.stop_strings(input_ids, scores).to(done.device)
        newly = done & (self.length < 0)
        self.length[newly] = input_ids.shape[1] - self.prompt_width
        return self.length >= 0


#: ``generate``'s and the model's keyword for a cache object (renamed from ``past_key_values`` in transformers 5)
def _cache_keyword() -> str:
    try:
        from transformers.generation import utils
    except ImportError:  # pragma: no cover - the torch stack is checked when a policy is made
        return "past_key_values"
    return "cache" if "cache" in getattr(utils, "ALL_CACHE_NAMES", ()) else "past_key_values"


_CACHE_KWARG = _cache_keyword()


def _row(cache: Any, row: int, columns: torch.Tensor) -> torch.Tensor:
    """Row ``row``'s keys and values at ``columns``: a ``(layers, 2, heads, len(columns), head_dim)`` copy."""
    import torch

    layers = [(layer.keys, layer.values) for layer in cache.layers]
    keys0 = layers[0][0]
    columns = columns.to(keys0.device)
    out = keys0.new_empty((len(layers), 2, keys0.shape[1], len(columns), keys0.shape[3]))
    for layer, (keys, values) in enumerate(layers):  # copies only the row's columns, once
        torch.index_select(keys[row], 1, columns, out=out[layer, 0])
        torch.index_select(values[row], 1, columns, out=out[layer, 1])
    return out


def _similar_chunks(
    todo: list[tuple[list[int], torch.Tensor | None, int]], size: int
) -> list[list[tuple[list[int], torch.Tensor | None, int]]]:
    """``todo`` in chunks of at most ``size`` with new-token counts within 1.5x, shortest first."""
    chunks: list[list[tuple[list[int], torch.Tensor | None, int]]] = []
    for item in sorted(todo, key=lambda t: len(t[0]) - t[2]):
        new = len(item[0]) - item[2]
        if not chunks or len(chunks[-1]) >= size or new > 1.5 * (len(chunks[-1][0][0]) - chunks[-1][0][2]) + 8:
            chunks.append([])
        chunks[-1].append(item)
    return chunks


class PrefixCache:
    """Keys and values of sequences a :class:`TransformersPolicy` has run; a prompt reuses its
    longest common prefix (at least ``MIN_TOKENS``) with any entry. Least recently used entries go
    beyond ``max_bytes``; a change of the weights empties it (:meth:`check_weights`)."""

    MIN_TOKENS = 16

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[tuple[int, ...], tuple[torch.Tensor, int]] = OrderedDict()
        self._bytes = 0
        self._weights: tuple[tuple[int, int], ...] | None = None

    def __len__(self) -> int:
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        """Bytes of tensors held."""
        return self._bytes

    def clear(self) -> None:
        self._entries.clear()
        self._bytes = 0

    def check_weights(self, model: Any) -> None:
        """Empty the cache when a parameter of ``model`` changed (its version or id) since the last check."""
        weights = tuple((id(p), p._version) for p in model.parameters())
        if weights != self._weights:
            self.clear()
            self._weights = weights

    def lookup(self, tokens: Sequence[int], *, limit: int) -> tuple[torch.Tensor | None, int]:
        """``(keys and values, length)`` of the entry sharing the longest prefix with ``tokens`` (at
        most ``limit``); ``(None, 0)`` when none shares a token."""
        best_key, best = None, 0
        tokens = tuple(tokens)
        for key in self._entries:
            if key[:1] != tokens[:1]:
                continue
            n = min(common_prefix_length(key, tokens), limit)
            if n > best:
                best_key, best = key, n
        if best_key is None:
            return None, 0
        self._entries.move_to_end(best_key)
        return self._entries[best_key][0], best

    def add(self, tokens: Sequence[int], kv: torch.Tensor) -> None:
        """Keep the keys and values of ``tokens``: a ``(layers, 2, heads, len(tokens), head_dim)`` tensor."""
        size = kv.numel() * kv.element_size()
        if size > self.max_bytes:
            return
        key = tuple(int(t) for t in tokens)
        if key in self._entries:
            self._bytes -= self._entries.pop(key)[1]
        self._entries[key] = (kv, size)
        self._bytes += size
        while self._bytes > self.max_bytes:
            _, (_, dropped) = self._entries.popitem(last=False)
            self._bytes -= dropped
