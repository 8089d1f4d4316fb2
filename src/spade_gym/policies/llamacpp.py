"""A :class:`~spade_gym.policies.base.Policy` run in-process by llama.cpp (``llama-cpp-python``).

A quantised GGUF model decodes several times faster on a CPU than the float32 transformers path
(``load_policy("llamacpp:qwen2.5-coder-1.5b")``, an alias of :mod:`spade_gym.policies.gguf`, or a
``.gguf`` path). Inference only. Prompts are rendered with the GGUF's own chat template; a prompt
reuses the KV cache of the longest prefix it shares with the tokens evaluated before it. Sample ``k``
of prompt ``i`` with ``seed=s`` uses llama.cpp's sampler seed ``s + i * n + k`` (modulo 2**32);
``logprobs`` are those of the unmodified distribution (temperature 1).
Install: ``pip install -e '.[llamacpp]'`` or ``make llamacpp`` (llama-cpp-python builds from source).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import threading
from collections.abc import Iterator, Sequence
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
    common_prefix_length,
    continued,
    cut_at_stop,
    fit_prompt,
    resolve_sampling,
)
from spade_gym.policies.gguf import gguf_path, read_gguf_header

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
        threads = n_threads or (len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count())
        log: list[str] = []
        try:
            with _captured_stderr(log):
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
                f"{header.tensors} tensors): {exc}; llama.cpp said: {''.join(log)[-600:].strip() or 'nothing'}"
            ) from exc
        self._lock = threading.Lock()
        self.context_window = int(self._llama.n_ctx())
        self.parameters = float(self._llama._model.n_params())
        self.name = name or (self.model_info.title if self.model_info else self.path.name)
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
        """The tokens of one conversation under the model's chat template (generation prompt added, a
        last assistant message continued)."""
        messages, prefix = continued(check_prompts([prompt])[0])
        text = self._format(messages=cast(Any, messages)).prompt + (prefix or "")
        return list(self._llama.tokenize(text.encode("utf-8"), add_bos=False, special=True))

    def generate(self, prompts: Sequence[Prompt], sampling: SamplingParams | None = None) -> list[Completion]:
        """``B * n`` completions grouped by prompt; see :class:`~spade_gym.policies.base.Policy`
        (GenerationError also once the policy was closed)."""
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
                # every token but the last prefilled once; each sample then evaluates that last token
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
        keep = common_prefix_length(llama.input_ids[: llama.n_tokens].tolist(), ids)
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


@contextlib.contextmanager
def _captured_stderr(log: list[str]) -> Iterator[None]:
    """Route file descriptor 2 (llama.cpp's C-level log lines) to a temporary file inside the
    ``with`` block, then append what was written to ``log``."""
    with tempfile.TemporaryFile() as file:
        saved = os.dup(2)
        os.dup2(file.fileno(), 2)
        try:
            yield
        finally:
            os.dup2(saved, 2)
            os.close(saved)
            file.seek(0)
            log.append(file.read().decode("utf-8", errors="replace"))
