"""A :class:`~spade_gym.policies.base.Policy` run in-process by llama.cpp (``llama-cpp-python``).

Decode-bound work on a CPU (whole environment programs) is llama.cpp's strength: a quantised GGUF
model decodes several times faster there than the float32 transformers path (``benchmarks/``)::

    policy = load_policy("llamacpp:qwen2.5-coder-1.5b")      # an offline alias (spade_gym.policies.gguf)
    policy = load_policy("llamacpp:/models/model.gguf")       # any GGUF file
    completions = policy.generate(prompts, SamplingParams(temperature=0.7, n=4, max_new_tokens=1536))

Inference only (it cannot be trained). Prompts are rendered with the GGUF's own chat template
(llama-cpp-python's ``Jinja2ChatFormatter``). A prompt reuses the KV cache of the longest prefix it
shares with the tokens evaluated before it: the ``n`` samples of a prompt, the prompts of a group,
the parts of a design filled part by part (``spade_gym.fill``). Sample ``k`` of prompt ``i`` of a
call with ``seed=s`` is drawn with llama.cpp's sampler seed ``s + i * n + k`` (modulo 2**32).
``logprobs`` are those of the unmodified distribution (a log-softmax of the sampled position's
logits), as the module :mod:`spade_gym.policies.base` requires.
Install: ``pip install -e '.[llamacpp]'`` in a clone, or ``make llamacpp`` (llama-cpp-python builds from source: minutes).
"""

from __future__ import annotations

import os
import tempfile
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import numpy as np

from spade_gym.errors import BackendUnavailable, GenerationError, ModelNotFound, install_hint
from spade_gym.policies.base import (
    Completion,
    FinishReason,
    Prompt,
    SamplingParams,
    check_prompts,
    continued,
    cut_at_stop,
    fit_prompt,
    resolve_sampling,
)
from spade_gym.policies.gguf import GGUFModel, gguf_path, read_gguf_header

__all__ = ["DEFAULT_N_CTX", "LlamaCppPolicy", "import_llama_cpp"]

#: Context window of a loaded model unless given: a Designer prompt (2-4k tokens) and a whole program.
DEFAULT_N_CTX = 8192
_INSTALL = f"{install_hint('llamacpp')}  (or: pip install 'llama-cpp-python[server]>=0.3.16')"


def import_llama_cpp() -> Any:
    """The ``llama_cpp`` module; BackendUnavailable with the install command when it is missing."""
    try:
        import llama_cpp
    except ImportError as exc:
        raise BackendUnavailable(
            f"the llama.cpp backend needs llama-cpp-python, which is not installed ({exc}); {_INSTALL}"
        ) from None
    return llama_cpp


class LlamaCppPolicy:
    """A GGUF model run in this process by llama.cpp (inference only).

    Args:
        model: an alias of :data:`~spade_gym.policies.gguf.GGUF_MODELS` (``"qwen2.5-coder-1.5b"``,
            ``"default"`` for the embedded model's GGUF) or a ``.gguf`` path.
        sha256: for a path, the SHA-256 it must have (aliases are always verified).
        n_ctx: the context window in tokens (default :data:`DEFAULT_N_CTX`, at most the model's own).
        n_threads: CPU threads (default: every core this process may use).
        n_batch: prompt tokens evaluated per llama.cpp batch.
        name: the name in logs and the registry (default: the alias's title or the file name).

    Attributes:
        path: the GGUF file. parameters: the model's parameter count (from llama.cpp).

    Raises:
        BackendUnavailable: llama-cpp-python is not installed.
        ModelNotFound: the alias or file cannot be had, or fails its checks (see
            :func:`~spade_gym.policies.gguf.gguf_path`); llama.cpp refuses the file.
    """

    name: str
    context_window: int | None

    def __init__(
        self,
        model: str | Path,
        *,
        sha256: str | None = None,
        n_ctx: int = DEFAULT_N_CTX,
        n_threads: int | None = None,
        n_batch: int = 512,
        name: str | None = None,
    ) -> None:
        llama_cpp = import_llama_cpp()
        self.path, self.model_info = gguf_path(str(model), sha256=sha256)
        known: GGUFModel | None = self.model_info
        threads = n_threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
        log = _CapturedStderr()
        try:
            with log:
                self._llama = llama_cpp.Llama(
                    model_path=str(self.path),
                    n_ctx=n_ctx,
                    n_threads=threads,
                    n_threads_batch=threads,
                    n_batch=n_batch,
                    verbose=False,
                )
        except ValueError as exc:  # llama.cpp's "Failed to load model from file"
            header = read_gguf_header(self.path)  # names a truncated or foreign file precisely
            raise ModelNotFound(
                f"llama.cpp cannot load {str(self.path)!r} (architecture {header.architecture or '?'!r}, "
                f"{header.tensors} tensors): {exc}; llama.cpp said: {log.text[-600:].strip() or 'nothing'}"
            ) from exc
        self._lock = threading.Lock()
        self.context_window = int(self._llama.n_ctx())
        self.parameters = float(self._llama._model.n_params())
        self.name = name or (known.title if known else self.path.name)
        meta = self._llama.metadata
        template = meta.get("tokenizer.chat_template")
        if not template:
            raise ModelNotFound(f"{str(self.path)!r} has no chat template (tokenizer.chat_template): not a chat model")
        from llama_cpp.llama_chat_format import Jinja2ChatFormatter

        model_ = self._llama._model
        eos, bos = self._llama.token_eos(), self._llama.token_bos()
        self._format = Jinja2ChatFormatter(
            template=template,
            eos_token=model_.token_get_text(eos) if eos != -1 else "",
            bos_token=model_.token_get_text(bos) if bos != -1 else "",
        )
        self._vocab = model_.vocab
        self._is_eog = llama_cpp.llama_vocab_is_eog
        self._closed = False

    def __repr__(self) -> str:
        return f"LlamaCppPolicy({str(self.path)!r}, name={self.name!r}, n_ctx={self.context_window})"

    def prompt_token_ids(self, prompt: Prompt) -> list[int]:
        """The tokens of one conversation rendered with the model's chat template (generation prompt
        added; a last assistant message is continued, see :func:`~spade_gym.policies.base.continued`)."""
        messages, prefix = continued(check_prompts([prompt])[0])
        text = self._format(messages=cast(Any, messages)).prompt + (prefix or "")
        return list(self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def generate(self, prompts: Sequence[Prompt], sampling: SamplingParams | None = None) -> list[Completion]:
        """``B * n`` completions grouped by prompt; see :class:`~spade_gym.policies.base.Policy`.

        Raises:
            ValueError: malformed prompts or ``sampling``.
            ContextLengthExceeded: a prompt too long for ``n_ctx`` without ``truncate_prompt``.
            GenerationError: the policy was closed, or llama.cpp failed.
        """
        batch = check_prompts(prompts)
        sampling = resolve_sampling(sampling)
        if self._closed:
            raise GenerationError(f"{self!r} is closed: create a new LlamaCppPolicy to generate again")
        encoded = [
            fit_prompt(self.prompt_token_ids(p), sampling.max_new_tokens, self.context_window, sampling.truncate_prompt)
            for p in batch
        ]
        out: list[Completion] = []
        with self._lock:
            for index, ids in enumerate(encoded):
                # the prompt but its last token prefilled, reusing the KV cache of the longest prefix it
                # shares with the tokens evaluated before (the parts of a filled design, the samples of a
                # group); every sample then evaluates that last token alone
                self._prefill(ids[:-1])
                for k in range(sampling.n):
                    seed = None if sampling.seed is None else (sampling.seed + index * sampling.n + k) % 2**32
                    try:
                        out.append(self._sample(ids, sampling, seed, index))
                    except (RuntimeError, ValueError, OSError) as exc:
                        raise GenerationError(f"llama.cpp failed on prompt {index} of {self.name}: {exc}") from exc
        return out

    def _prefill(self, ids: list[int]) -> None:
        """Evaluate ``ids`` after the longest prefix of them already in the KV cache (the caller holds the lock)."""
        llama = self._llama
        cached = llama.input_ids[: llama.n_tokens].tolist()
        keep = 0
        for a, b in zip(cached, ids, strict=False):
            if a != b:
                break
            keep += 1
        llama.n_tokens = keep  # eval drops the KV cache from here on
        if keep < len(ids):
            llama.eval(ids[keep:])

    def _sample(self, ids: list[int], sampling: SamplingParams, seed: int | None, index: int) -> Completion:
        """One completion of one prompt (the caller holds the lock)."""
        llama = self._llama
        llama.set_seed(seed if seed is not None else int.from_bytes(os.urandom(4), "little"))
        tokens: list[int] = []
        logprobs: list[float] = []
        text_bytes = b""
        finish: FinishReason = "length"
        longest_stop = max((len(s.encode("utf-8")) for s in sampling.stop), default=0)
        n_vocab = llama.n_vocab()
        generator = llama.generate(
            ids,
            top_k=0,
            top_p=sampling.top_p,
            min_p=0.0,
            typical_p=1.0,
            temp=0.0 if sampling.greedy else sampling.temperature,
            repeat_penalty=1.0,
        )
        try:
            for token in generator:
                logits = np.ctypeslib.as_array(llama._ctx.get_logits_ith(-1), shape=(n_vocab,))
                top = float(logits.max())
                logprobs.append(float(logits[token]) - top - float(np.log(np.exp(logits - top).sum())))
                tokens.append(int(token))
                if self._is_eog(self._vocab, token):
                    finish = "stop"
                    break
                text_bytes += llama.detokenize([token], prev_tokens=ids + tokens[:-1])
                if longest_stop:
                    tail = text_bytes[-(longest_stop + 64) :].decode("utf-8", errors="ignore")
                    if any(s in tail for s in sampling.stop):
                        finish = "stop"
                        break
                if len(tokens) >= sampling.max_new_tokens:
                    break
        finally:
            generator.close()
        text, found = cut_at_stop(text_bytes.decode("utf-8", errors="replace"), sampling.stop)
        return Completion(text, list(ids), tokens, logprobs, "stop" if found else finish, index)

    def close(self) -> None:
        """Free the model (idempotent); later :meth:`generate` calls raise ``GenerationError``."""
        if not self._closed:
            self._closed = True
            self._llama.close()

    def __enter__(self) -> LlamaCppPolicy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class _CapturedStderr:
    """Route file descriptor 2 (llama.cpp's C-level log lines) to a temporary file inside the
    ``with`` block; ``text`` then holds what was written (for an error message)."""

    def __init__(self) -> None:
        self.text = ""

    def __enter__(self) -> _CapturedStderr:
        self._file = tempfile.TemporaryFile()
        self._saved = os.dup(2)
        os.dup2(self._file.fileno(), 2)
        return self

    def __exit__(self, *exc: object) -> None:
        os.dup2(self._saved, 2)
        os.close(self._saved)
        self._file.seek(0)
        self.text = self._file.read().decode("utf-8", errors="replace")
        self._file.close()
