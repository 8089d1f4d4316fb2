"""A :class:`~spade_gym.policies.base.Policy` served by any OpenAI-compatible chat-completions server.

Works with vLLM (``vllm serve``), SGLang, llama.cpp's server, TGI, LM Studio, Ollama and the OpenAI
API: anything that answers ``POST <base_url>/chat/completions``. Inference only (no token ids)::

    with OpenAIPolicy("Qwen/Qwen2.5-7B-Instruct", "http://localhost:8000/v1") as policy:
        completions = policy.generate(prompts, SamplingParams(temperature=1.0, n=4))

Requests go through the ``openai`` SDK, one per prompt (with ``n``); the SDK retries with backoff.

The server decides prompt truncation (a refusal is :class:`~spade_gym.errors.ContextLengthExceeded`;
``truncate_prompt`` cannot be honoured without a tokenizer) and what ``logprobs`` mean (vLLM
reports the unmodified distribution). Stop strings are also cut client-side.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import queue
import re
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlsplit

from spade_gym.errors import BackendUnavailable, ContextLengthExceeded, GenerationError
from spade_gym.policies.base import (
    Completion,
    FinishReason,
    Prompt,
    SamplingParams,
    check_prompts,
    cut_at_stop,
    is_int,
    is_number,
    resolve_sampling,
)

if TYPE_CHECKING:
    import openai as openai_sdk

__all__ = ["OpenAIPolicy"]

# The SDK's backoff between retries (openai._constants): 0.5 s doubled per retry, at most 8 s.
_SDK_INITIAL_RETRY_DELAY_S = 0.5
_SDK_MAX_RETRY_DELAY_S = 8.0
_DEADLINE_SLACK_S = 1.0  # on top of timeouts and backoffs before a request counts as hung
_POLL_S = 0.1  # how often generate() checks the deadlines of running requests
_EXCERPT = 300  # longest excerpt of a server's answer quoted in an error message

# What servers say when a prompt does not fit: vLLM and OpenAI ("maximum context length",
# code "context_length_exceeded"), llama.cpp ("exceeds the available context size"), TGI
# ("must have less than N tokens"), others ("prompt is too long", "too many tokens").
_CONTEXT_RE = re.compile(
    r"context[ _-]?(length|window|size)|maximum context|prompt is too long|too many (input )?tokens"
    r"|must have less than \d+ tokens|input is too long",
    re.IGNORECASE,
)
_LIMIT_RE = re.compile(r"maximum context length is (\d+)", re.IGNORECASE)
_REQUESTED_RE = re.compile(r"you requested (\d+) tokens", re.IGNORECASE)
_INPUT_TOKENS_RE = re.compile(
    r"(?:request|messages?|prompt) (?:has|have|contains?) (\d+) (?:input )?tokens", re.IGNORECASE
)


class OpenAIPolicy:
    """A policy answered by an OpenAI-compatible chat-completions server (inference only).

    Args:
        model: the served model's name (each request's ``model`` field).
        base_url: the ``http(s)://`` API root, usually ending in ``/v1``.
        api_key: sent as a Bearer token; defaults to ``$OPENAI_API_KEY``, else ``"EMPTY"``.
        timeout: seconds one HTTP attempt may wait, ``> 0``.
        max_retries: retries on connection errors, timeouts and HTTP 408/409/429/5xx, ``>= 0``.
        max_concurrency: most requests in flight per :meth:`generate` call, ``>= 1``.
        context_window: the served model's window in tokens, if known (not enforced here).
        name: the name in logs and the registry; defaults to ``model``.

    Attributes:
        request_deadline: the most seconds one request (all attempts and backoffs) may take
            before :meth:`generate` gives up on it.

    Raises:
        ValueError: an argument out of range, naming the argument.
        BackendUnavailable: the ``openai`` package is not installed.
    """

    name: str
    context_window: int | None

    def __init__(
        self,
        model: str,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        max_concurrency: int = 8,
        context_window: int | None = None,
        name: str | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"OpenAIPolicy model must be a non-empty string (the served model's name), got {model!r}")
        _check_base_url(base_url)
        if not is_number(timeout) or not math.isfinite(timeout) or timeout <= 0:
            raise ValueError(f"OpenAIPolicy timeout must be a finite number of seconds > 0, got {timeout!r}")
        if not is_int(max_retries) or max_retries < 0:
            raise ValueError(f"OpenAIPolicy max_retries must be an int >= 0, got {max_retries!r}")
        if not is_int(max_concurrency) or max_concurrency < 1:
            raise ValueError(f"OpenAIPolicy max_concurrency must be an int >= 1, got {max_concurrency!r}")
        if context_window is not None and not (is_int(context_window) and context_window >= 1):
            raise ValueError(
                f"OpenAIPolicy context_window must be an int >= 1 (tokens) or None, got {context_window!r}"
            )
        if name is not None and (not isinstance(name, str) or not name):
            raise ValueError(f"OpenAIPolicy name must be a non-empty string or None, got {name!r}")
        if api_key is not None and not isinstance(api_key, str):
            raise ValueError(f"OpenAIPolicy api_key must be a string or None, got {type(api_key).__name__}")
        try:
            import openai
        except ImportError as exc:
            raise BackendUnavailable(
                "OpenAIPolicy needs the 'openai' package, which is not installed: pip install openai "
                "(or pip install 'spade-gym[openai]')"
            ) from exc

        self.model = model
        self.base_url = base_url
        self.name = name if name is not None else model
        self.context_window = context_window
        self.timeout = float(timeout)
        self.max_retries = max_retries
        self.max_concurrency = max_concurrency
        backoffs = sum(min(_SDK_INITIAL_RETRY_DELAY_S * 2.0**k, _SDK_MAX_RETRY_DELAY_S) for k in range(max_retries))
        self.request_deadline = self.timeout * (max_retries + 1) + backoffs + _DEADLINE_SLACK_S
        self._sdk = openai
        self._client: openai_sdk.OpenAI = openai.OpenAI(
            base_url=base_url,
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
            timeout=self.timeout,
            max_retries=max_retries,
        )
        self._closed = False
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAIPolicy(model={self.model!r}, base_url={self.base_url!r}, name={self.name!r})"

    def generate(self, prompts: Sequence[Prompt], sampling: SamplingParams | None = None) -> list[Completion]:
        """``B * n`` completions grouped by prompt (ordered by the choices' ``index``), ``text`` cut
        before the first stop string, ``logprobs`` ``None`` when the server reported none, no token ids.

        One request per prompt, ``max_concurrency`` at a time, from daemon threads; the first
        failure raises, requests not yet sent are never sent and ones in flight are abandoned.
        ``stop`` and ``seed`` are sent only when set; ``truncate_prompt`` is not sent.

        Raises:
            ValueError: malformed prompts or ``sampling``.
            ContextLengthExceeded: the server refused a prompt as too long (the error quotes it).
            GenerationError: the policy was closed; a request timed out after every retry or
                passed :attr:`request_deadline`; the server could not be reached, answered an HTTP
                error, or sent something that is not a chat completion with ``n`` choices.
        """
        batch = check_prompts(prompts)
        sampling = resolve_sampling(sampling)
        with self._lock:
            if self._closed:
                raise GenerationError(f"{self!r} is closed: create a new OpenAIPolicy to generate again")
        request = _request_fields(sampling)
        started: dict[int, float] = {}
        results: list[list[Completion] | None] = [None] * len(batch)
        jobs: queue.SimpleQueue[int] = queue.SimpleQueue()
        answers: queue.SimpleQueue[tuple[int, list[Completion] | BaseException]] = queue.SimpleQueue()
        cancelled = threading.Event()
        for index in range(len(batch)):
            jobs.put(index)

        def worker() -> None:
            while not cancelled.is_set():
                try:
                    index = jobs.get_nowait()
                except queue.Empty:
                    return
                try:
                    answers.put((index, self._complete(index, batch[index], request, sampling, started)))
                except BaseException as error:  # handed to the caller's thread, raised there
                    answers.put((index, error))

        # daemon threads: a request abandoned at its deadline must not keep the interpreter alive
        for k in range(min(self.max_concurrency, len(batch))):
            threading.Thread(target=worker, name=f"spade-openai-{k}", daemon=True).start()
        try:
            remaining = len(batch)
            while remaining:
                now = time.monotonic()
                for index, begun in list(started.items()):
                    if results[index] is None and now - begun > self.request_deadline:
                        raise GenerationError(
                            f"{self._where()}: request for prompt {index} got no complete answer within "
                            f"{self.request_deadline:g} s (timeout {self.timeout:g} s per attempt, "
                            f"{self.max_retries} retries)"
                        )
                try:
                    index, answer = answers.get(timeout=_POLL_S)
                except queue.Empty:
                    continue
                if isinstance(answer, BaseException):
                    raise answer
                results[index] = answer
                remaining -= 1
        finally:
            cancelled.set()  # requests not yet sent are never sent
        return [completion for group in results for completion in group or ()]

    def close(self) -> None:
        """Close the HTTP connections (idempotent); later :meth:`generate` calls raise ``GenerationError``."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
        self._client.close()

    def __enter__(self) -> OpenAIPolicy:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _where(self) -> str:
        """``"model 'x' at http://..."``, the prefix of every error message."""
        return f"model {self.model!r} at {self.base_url}"

    def _complete(
        self,
        index: int,
        messages: list[dict[str, str]],
        request: dict[str, Any],
        sampling: SamplingParams,
        started: dict[int, float],
    ) -> list[Completion]:
        """Send one prompt's request (in a worker thread) and turn the answer into completions."""
        started[index] = time.monotonic()
        sdk = self._sdk
        try:
            # the messages were checked by check_prompts; the SDK's TypedDict union cannot see that
            response = self._client.chat.completions.create(model=self.model, messages=cast(Any, messages), **request)
        except sdk.APITimeoutError as exc:
            raise GenerationError(
                f"{self._where()}: request for prompt {index} timed out after {self.timeout:g} s "
                f"({self.max_retries} retries)"
            ) from exc
        except sdk.APIConnectionError as exc:
            cause = exc.__cause__ or exc
            raise GenerationError(
                f"{self._where()}: could not reach the server for prompt {index} after {self.max_retries} retries: "
                f"{type(cause).__name__}: {cause}"
            ) from exc
        except sdk.APIStatusError as exc:
            raise self._status_error(index, exc, sampling) from exc
        except sdk.APIResponseValidationError as exc:
            raise self._garbage(f"{exc.message} (body: {_excerpt(exc.body)})") from exc
        except sdk.OpenAIError as exc:
            raise GenerationError(
                f"{self._where()}: request for prompt {index} failed: {type(exc).__name__}: {exc}"
            ) from exc
        except json.JSONDecodeError as exc:  # a JSON content type whose body is not JSON
            raise self._garbage(f"the body is not JSON ({exc.msg}): {_excerpt(exc.doc)}") from exc
        except (ValueError, TypeError) as exc:  # a body the SDK could not turn into its model
            raise self._garbage(f"{type(exc).__name__}: {exc}") from exc
        return self._completions(index, response, sampling)

    def _status_error(self, index: int, exc: Any, sampling: SamplingParams) -> Exception:
        """Turn the SDK's ``APIStatusError`` into ``ContextLengthExceeded`` or ``GenerationError``."""
        status = exc.status_code
        complaint = _server_message(exc)
        code = str(getattr(exc, "code", None) or "")
        if status in (400, 413, 422) and (_CONTEXT_RE.search(complaint) or code == "context_length_exceeded"):
            needed = _first_int(_REQUESTED_RE, complaint)
            prompt_tokens = _first_int(_INPUT_TOKENS_RE, complaint)
            if not needed and prompt_tokens:
                needed = prompt_tokens + sampling.max_new_tokens
            return ContextLengthExceeded(
                f"{self._where()} refused prompt {index} as too long for its context window (HTTP {status}): "
                f"{complaint.rstrip('.')}. OpenAIPolicy cannot truncate prompts (it has no tokenizer); "
                "shorten the prompt or lower max_new_tokens",
                limit=_first_int(_LIMIT_RE, complaint),
                needed=needed,
            )
        retried = f" after {self.max_retries} retries" if status in (408, 409, 429) or status >= 500 else ""
        return GenerationError(f"{self._where()} answered HTTP {status} for prompt {index}{retried}: {complaint}")

    def _garbage(self, detail: str) -> GenerationError:
        return GenerationError(
            f"server at {self.base_url} did not return a chat completion (model {self.model!r}): {detail}"
        )

    def _completions(self, index: int, response: object, sampling: SamplingParams) -> list[Completion]:
        """Build ``sampling.n`` completions from a parsed answer, read defensively (the SDK does not
        validate: a non-JSON body comes back as a ``str``, missing fields as missing attributes)."""
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list):
            if isinstance(response, str | bytes):
                raise self._garbage(f"the body is not JSON: {_excerpt(response)}")
            raise self._garbage(f"no 'choices' list in {_excerpt(_as_data(response))}")
        if len(choices) != sampling.n:
            raise GenerationError(
                f"{self._where()} returned {len(choices)} choices for prompt {index}, expected n={sampling.n}; "
                "a server that ignores 'n' cannot serve groups: use n=1 or a server that supports n (vLLM does)"
            )
        out = []
        for k in sorted(range(len(choices)), key=lambda k: _choice_index(choices[k], k)):  # stable: ties by k
            choice = choices[k]
            message = getattr(choice, "message", None)
            if message is None:
                raise self._garbage(f"choice {k} has no 'message': {_excerpt(_as_data(choice))}")
            content = getattr(message, "content", None)
            if content is not None and not isinstance(content, str):
                raise self._garbage(f"choice {k} has a non-string 'message.content': {_excerpt(content)}")
            raw = content or ""
            text, found = cut_at_stop(raw, sampling.stop)
            tokens, logprobs = _choice_logprobs(choice)
            if found and logprobs is not None:
                stop_end = min(len(text) + len(s) for s in sampling.stop if raw.startswith(s, len(text)))
                logprobs = _trim_logprobs(tokens, logprobs, raw, stop_end)
            finish: FinishReason = (
                "length" if getattr(choice, "finish_reason", None) == "length" and not found else "stop"
            )
            out.append(Completion(text, None, None, logprobs, finish, index))  # no token ids
        return out


def _check_base_url(base_url: object) -> None:
    if not isinstance(base_url, str):
        raise ValueError(f"OpenAIPolicy base_url must be a string such as 'http://localhost:8000/v1', got {base_url!r}")
    parts = urlsplit(base_url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(
            f"OpenAIPolicy base_url must be an http:// or https:// URL with a host, such as "
            f"'http://localhost:8000/v1', got {base_url!r}"
        )


def _choice_index(choice: object, position: int) -> int:
    """A choice's ``index`` field, or its position in the list when it has none."""
    index = getattr(choice, "index", None)
    return index if is_int(index) else position


def _request_fields(sampling: SamplingParams) -> dict[str, Any]:
    """All chat-completions request fields but ``model`` and ``messages``."""
    fields: dict[str, Any] = {
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_tokens": sampling.max_new_tokens,
        "n": sampling.n,
        "logprobs": True,
    }
    if sampling.stop:
        fields["stop"] = list(sampling.stop)
    if sampling.seed is not None:
        fields["seed"] = sampling.seed
    return fields


def _choice_logprobs(choice: object) -> tuple[list[str] | None, list[float] | None]:
    """``(token strings, logprobs)`` of a choice's ``logprobs.content``: tokens ``None`` when one
    lacks its string, both ``None`` without logprobs or with a NaN or non-number."""
    content = getattr(getattr(choice, "logprobs", None), "content", None)
    if not isinstance(content, list):
        return None, None
    values: list[float] = []
    tokens: list[str] | None = []
    for entry in content:
        value = getattr(entry, "logprob", None)
        if not is_number(value) or math.isnan(value):
            return None, None
        values.append(float(value))
        token = getattr(entry, "token", None)
        if tokens is not None and isinstance(token, str):
            tokens.append(token)
        else:
            tokens = None
    return tokens, values


def _trim_logprobs(tokens: list[str] | None, logprobs: list[float], raw: str, stop_end: int) -> list[float] | None:
    """The logprobs up to the token that reaches ``stop_end`` (the character offset in ``raw`` just
    past a stop string the server left in), or ``None`` when the tokens do not spell ``raw``."""
    if tokens is None or "".join(tokens) != raw:
        return None
    position = 0
    for k, token in enumerate(tokens):
        position += len(token)
        if position >= stop_end:
            return logprobs[: k + 1]
    return logprobs


def _server_message(exc: Any) -> str:
    """The server's own complaint from an ``APIStatusError``: its ``message`` field, or the body."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        error = body.get("error", body)
        message = error.get("message") if isinstance(error, dict) else error
        if isinstance(message, str) and message:
            return _excerpt(message, quote=False)
        return _excerpt(body)
    if isinstance(body, str) and body.strip():
        return _excerpt(body.strip(), quote=False)
    return _excerpt(getattr(exc, "message", "") or "no error message", quote=False)


def _as_data(value: object) -> object:
    """A plain view of an SDK object for an error message: the fields the server sent, as a dict."""
    dump = getattr(value, "model_dump", None)
    with contextlib.suppress(Exception):  # a half-constructed model may not dump
        if callable(dump):
            return dump(exclude_unset=True)
    return value


def _excerpt(value: object, *, quote: bool = True) -> str:
    """``value`` as text of at most :data:`_EXCERPT` characters (``repr`` unless ``quote=False``)."""
    text = repr(value) if quote else str(value)
    return text if len(text) <= _EXCERPT else text[: _EXCERPT - 3] + "..."


def _first_int(pattern: re.Pattern[str], text: str) -> int:
    """The first group of ``pattern`` in ``text`` as an int, or 0 when it does not match."""
    match = pattern.search(text)
    return int(match.group(1)) if match else 0
