"""A :class:`~spade_gym.policies.base.Policy` served by any OpenAI-compatible chat-completions server.

vLLM (``vllm serve``), SGLang, llama.cpp's server, TGI, LM Studio, Ollama, the OpenAI API: anything
that answers ``POST <base_url>/chat/completions``. Inference only (no token ids). One request per
prompt with ``n``; a server that ignores ``n`` gets single requests from then on. A timed-out
request is never retried (the server is still working on it); refused connections and HTTP
408/409/429/5xx are retried with backoff. Logprobs are asked for with ``top_logprobs: 1`` (llama.cpp's
server reports none without it), and not asked for again after a server refused them. The server
decides prompt truncation (``truncate_prompt`` needs a tokenizer); stop strings are also cut here.
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

# The backoff between retries (the openai SDK's): 0.5 s doubled per retry, at most 8 s.
_INITIAL_RETRY_DELAY_S = 0.5
_MAX_RETRY_DELAY_S = 8.0
_DEADLINE_SLACK_S = 1.0  # on top of a request's budget before it counts as hung
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
        timeout: seconds a request may take besides generating its tokens (prefill, queueing), ``> 0``.
        seconds_per_token: seconds allowed per requested new token, ``>= 0`` (see :meth:`request_budget`).
        connect_timeout: seconds to connect, ``> 0``.
        max_retries: retries on refused connections and HTTP 408/409/429/5xx (never on a timeout), ``>= 0``.
        max_concurrency: most requests in flight per :meth:`generate` call, ``>= 1``.
        context_window: the served model's window in tokens, if known (not enforced here).
        name: the name in logs and the registry; defaults to ``model``.

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
        timeout: float = 30.0,
        seconds_per_token: float = 0.25,
        connect_timeout: float = 5.0,
        max_retries: int = 2,
        max_concurrency: int = 8,
        context_window: int | None = None,
        name: str | None = None,
    ) -> None:
        if not isinstance(model, str) or not model.strip():
            raise ValueError(f"OpenAIPolicy model must be a non-empty string (the served model's name), got {model!r}")
        _check_base_url(base_url)
        for what, seconds, bound in (
            ("timeout", timeout, ">"),
            ("seconds_per_token", seconds_per_token, ">="),
            ("connect_timeout", connect_timeout, ">"),
        ):
            if not is_number(seconds) or not math.isfinite(seconds) or seconds < 0 or (bound == ">" and seconds == 0):
                raise ValueError(f"OpenAIPolicy {what} must be a finite number of seconds {bound} 0, got {seconds!r}")
        for what, count, least in (("max_retries", max_retries, 0), ("max_concurrency", max_concurrency, 1)):
            if not is_int(count) or count < least:
                raise ValueError(f"OpenAIPolicy {what} must be an int >= {least}, got {count!r}")
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
        self.seconds_per_token = float(seconds_per_token)
        self.connect_timeout = float(connect_timeout)
        self.max_retries = max_retries
        self.max_concurrency = max_concurrency
        #: whether the server answers ``n`` choices per request: ``None`` until a group was asked
        self.server_n: bool | None = None
        #: ``False`` once the server refused the logprobs request fields
        self.server_logprobs = True
        self._sdk = openai
        self._client: openai_sdk.OpenAI = openai.OpenAI(
            base_url=base_url,
            api_key=api_key or os.environ.get("OPENAI_API_KEY") or "EMPTY",
            timeout=self.timeout,
            max_retries=0,  # retried here, never after a timeout
        )
        self._closed = False
        self._lock = threading.Lock()

    def request_budget(self, max_tokens: int, queued: int = 1) -> float:
        """Seconds one request of ``max_tokens`` new tokens may take with ``queued`` requests in flight:
        ``timeout + seconds_per_token * max_tokens * queued``."""
        return self.timeout + self.seconds_per_token * max_tokens * max(1, queued)

    def __repr__(self) -> str:
        return f"OpenAIPolicy(model={self.model!r}, base_url={self.base_url!r}, name={self.name!r})"

    def generate(self, prompts: Sequence[Prompt], sampling: SamplingParams | None = None) -> list[Completion]:
        """``B * n`` completions grouped by prompt, without token ids; ``logprobs`` ``None`` when the
        server reported none. Requests (single ones with seeds ``seed + k`` for a server that ignores
        ``n``) run ``max_concurrency`` at a time in daemon threads; the first failure raises, and
        requests not yet sent are never sent.

        Raises:
            ValueError: malformed prompts or ``sampling``.
            ContextLengthExceeded: the server refused a prompt as too long (the error quotes it).
            GenerationError: the policy was closed; a request passed its :meth:`request_budget`;
                the server could not be reached, answered an HTTP error, or sent something that is
                not a chat completion.
        """
        batch = check_prompts(prompts)
        sampling = resolve_sampling(sampling)
        with self._lock:
            if self._closed:
                raise GenerationError(f"{self!r} is closed: create a new OpenAIPolicy to generate again")
        n = sampling.n
        results: list[list[Completion | None]] = [[None] * n for _ in batch]
        jobs: queue.SimpleQueue[tuple[int, int, int]] = queue.SimpleQueue()  # (prompt, first sample, choices)
        answers: queue.SimpleQueue[tuple[tuple[int, int, int], list[Completion] | BaseException]] = queue.SimpleQueue()
        started: dict[tuple[int, int, int], tuple[float, float]] = {}  # job -> (sent at, budget)
        finished = threading.Event()
        single = n == 1 or self.server_n is False
        pending = (
            [(i, k, 1) for i in range(len(batch)) for k in range(n)]
            if single
            else [(i, 0, n) for i in range(len(batch))]
        )
        for job in pending:
            jobs.put(job)
        outstanding = len(pending)
        in_flight = [0]

        def worker() -> None:
            while not finished.is_set():
                try:
                    job = jobs.get(timeout=_POLL_S)
                except queue.Empty:
                    continue
                index, first, count = job
                with self._lock:
                    in_flight[0] += 1
                    queued = in_flight[0]
                try:
                    budget = self.request_budget(sampling.max_new_tokens * count, queued)
                    started[job] = (time.monotonic(), budget)
                    answers.put((job, self._complete(index, first, count, batch[index], sampling, budget)))
                except BaseException as error:  # handed to the caller's thread, raised there
                    answers.put((job, error))
                finally:
                    with self._lock:
                        in_flight[0] -= 1

        # daemon threads: a request abandoned at its deadline must not keep the interpreter alive
        for k in range(min(self.max_concurrency, len(batch) * n)):
            threading.Thread(target=worker, name=f"spade-openai-{k}", daemon=True).start()
        try:
            while outstanding:
                now = time.monotonic()
                for job, (begun, budget) in list(started.items()):
                    if now - begun > budget + _DEADLINE_SLACK_S:
                        what = "got no complete answer within"
                        raise self._timed_out(job[0], sampling.max_new_tokens * job[2], budget, what)
                try:
                    job, answer = answers.get(timeout=_POLL_S)
                except queue.Empty:
                    continue
                started.pop(job, None)
                outstanding -= 1
                if isinstance(answer, BaseException):
                    raise answer
                index, first, count = job
                for k, completion in enumerate(answer):
                    results[index][first + k] = completion
                if count > 1:
                    self.server_n = len(answer) == count
                    for k in range(first + len(answer), first + count):  # a server that ignores n: the rest singly
                        jobs.put((index, k, 1))
                        outstanding += 1
        finally:
            finished.set()  # requests not yet sent are never sent
        return [completion for group in results for completion in group if completion is not None]

    def _timed_out(self, index: int, max_tokens: int, budget: float, what: str) -> GenerationError:
        queued = round((budget - self.timeout) / (self.seconds_per_token * max_tokens)) if self.seconds_per_token else 1
        return GenerationError(
            f"{self._where()}: request for prompt {index} {what} {budget:g} s (timeout {self.timeout:g} s + "
            f"{self.seconds_per_token:g} s per token x {max_tokens} tokens x {max(queued, 1)} request(s) in flight); "
            "not retried: the server may still be working on it. Raise seconds_per_token or timeout for a slow server"
        )

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
        first: int,
        count: int,
        messages: list[dict[str, str]],
        sampling: SamplingParams,
        budget: float,
    ) -> list[Completion]:
        """Send one request for ``count`` choices of prompt ``index`` (in a worker thread), retrying
        refused connections and 408/409/429/5xx answers, and turn the answer into completions."""
        sdk = self._sdk
        import httpx

        timeout = httpx.Timeout(budget, connect=self.connect_timeout)
        attempt = 0
        while True:
            request = _request_fields(sampling, count, first, self.server_logprobs)
            try:
                # the messages were checked by check_prompts; the SDK's TypedDict union cannot see that
                response = self._client.chat.completions.create(
                    model=self.model, messages=cast(Any, messages), timeout=timeout, **request
                )
                return self._completions(index, response, sampling, count)
            except sdk.APITimeoutError as exc:
                cause = exc.__cause__
                if isinstance(cause, httpx.ConnectTimeout):
                    raise GenerationError(
                        f"{self._where()}: the server did not answer a connection within {self.connect_timeout:g} s "
                        f"(prompt {index}); is it running at {self.base_url}?"
                    ) from exc
                raise self._timed_out(index, sampling.max_new_tokens * count, budget, "timed out after") from exc
            except sdk.APIConnectionError as exc:
                if attempt < self.max_retries and not self._closed:
                    time.sleep(_backoff(attempt, None))
                    attempt += 1
                    continue
                cause = exc.__cause__ or exc
                raise GenerationError(
                    f"{self._where()}: could not reach the server for prompt {index} after {self.max_retries} "
                    f"retries: {type(cause).__name__}: {cause}"
                ) from exc
            except sdk.APIStatusError as exc:
                if (
                    self.server_logprobs
                    and exc.status_code in (400, 422, 500)
                    and "logprob" in _server_message(exc).lower()
                ):
                    self.server_logprobs = False  # a server that refuses logprobs: asked without, from now on
                    continue
                if attempt < self.max_retries and (exc.status_code in (408, 409, 429) or exc.status_code >= 500):
                    time.sleep(_backoff(attempt, getattr(exc, "response", None)))
                    attempt += 1
                    continue
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

    def _completions(self, index: int, response: object, sampling: SamplingParams, count: int) -> list[Completion]:
        """Up to ``count`` completions from a parsed answer, read defensively (the SDK does not validate:
        a non-JSON body comes back as a ``str``, missing fields as missing attributes)."""
        choices = getattr(response, "choices", None)
        if not isinstance(choices, list):
            if isinstance(response, str | bytes):
                raise self._garbage(f"the body is not JSON: {_excerpt(response)}")
            raise self._garbage(f"no 'choices' list in {_excerpt(_as_data(response))}")
        if not choices or len(choices) > count:  # fewer is a server that ignores n: the caller asks again
            raise self._garbage(f"{len(choices)} choices for prompt {index}, expected 1 to n={count}")
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
    parts = urlsplit(base_url) if isinstance(base_url, str) else None
    if parts is None or parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(
            f"OpenAIPolicy base_url must be an http:// or https:// URL with a host, such as "
            f"'http://localhost:8000/v1', got {base_url!r}"
        )


def _choice_index(choice: object, position: int) -> int:
    """A choice's ``index`` field, or its position in the list when it has none."""
    index = getattr(choice, "index", None)
    return index if is_int(index) else position


def _request_fields(sampling: SamplingParams, count: int, first: int, logprobs: bool) -> dict[str, Any]:
    """Request fields but ``model`` and ``messages``: ``count`` choices from sample ``first`` (seeded ``+ first``)."""
    fields: dict[str, Any] = {
        "temperature": sampling.temperature,
        "top_p": sampling.top_p,
        "max_tokens": sampling.max_new_tokens,
        "n": count,
    }
    if logprobs:
        fields.update(logprobs=True, top_logprobs=1)
    if sampling.stop:
        fields["stop"] = list(sampling.stop)
    if sampling.seed is not None:
        fields["seed"] = (sampling.seed + first) % 2**63
    return fields


def _backoff(attempt: int, response: Any) -> float:
    """Seconds before retry ``attempt + 1``: the server's ``retry-after[-ms]`` (at most 60 s), else the backoff."""
    headers = getattr(response, "headers", None) or {}
    for key, scale in (("retry-after-ms", 1e-3), ("retry-after", 1.0)):
        raw = headers.get(key)
        if raw is None:
            continue
        with contextlib.suppress(TypeError, ValueError):
            value = float(raw) * scale
            if 0 <= value <= 60:
                return value
    return min(_INITIAL_RETRY_DELAY_S * 2.0**attempt, _MAX_RETRY_DELAY_S)


def _choice_logprobs(choice: object) -> tuple[list[str] | None, list[float] | None]:
    """``(token strings, logprobs)`` of a choice: tokens ``None`` when one lacks its string, both
    ``None`` without logprobs or with a NaN or non-number."""
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
    """The fields the server sent, as a dict, for an error message."""
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
