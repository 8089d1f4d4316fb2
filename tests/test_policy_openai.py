"""``OpenAIPolicy`` against a real local HTTP server, through the real ``openai`` SDK (no mocks).

The server (:class:`FakeChatServer`) implements ``POST /v1/chat/completions`` and behaves according
to the requested model name; it records every request body and header and counts requests in
flight, so the tests can check what reached the wire.
"""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from spade_gym.errors import BackendUnavailable, ContextLengthExceeded, GenerationError
from spade_gym.policies import Policy, SamplingParams, load_policy
from spade_gym.policies.openai import OpenAIPolicy

pytest.importorskip("openai")

pytestmark = pytest.mark.timeout(60)

VLLM_TOO_LONG = (
    "This model's maximum context length is 2048 tokens. However, you requested 4096 tokens "
    "(3840 in the messages, 256 in the completion). Please reduce the length of the messages or completion."
)
DELAY_RE = re.compile(r"delay=([0-9.]+)")


def tokens_of(text: str) -> list[str]:
    """Whitespace tokens that spell ``text`` exactly when joined (leading spaces kept)."""
    return re.findall(r"\s*\S+", text)


class FakeChatServer:
    """A chat-completions server on 127.0.0.1, in a background thread.

    Models (the request's ``model`` field):
        echo: answers the last user message, ``n`` choices, logprobs (one per whitespace token)
            when asked; a last user message ``!500`` gets HTTP 500.
        shuffle: as echo, after sleeping ``delay=<seconds>`` taken from the message.
        hold: as echo, after 0.15 s (to observe concurrency).
        long: as echo with ``finish_reason`` ``"length"``.
        stopleak: answers ``"the answer is 42 ### and more"`` (stop string left in the text).
        nologprobs: as echo, ``logprobs`` null.
        reversed: choices listed in reverse ``index`` order, text ``"choice <index>"``.
        fewchoices: ignores ``n`` and returns one choice (``choice <seed>`` when seeded).
        refuselogprobs: HTTP 500 "logprobs is not supported ..." (llama-cpp-python without
            ``logits_all``) when asked for logprobs, else as echo.
        slow: sleeps 3 s (or until shutdown) before answering.
        trickle: sends headers, then one byte of body every 0.1 s (never finishes in time).
        garbage: 200, JSON content type, body ``not json``; garbage-text: same as text/plain.
        nochoices: 200 ``{}``; nomessage: a choice without ``message``; listbody: ``[1, 2]``.
        flaky: HTTP 500 on the first request for each last user message, then as echo.
        toolong: HTTP 400 with vLLM's context-length error.
        error: always HTTP 500.
        unauthorized: always HTTP 401.
    """

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        self.answer_order: list[str] = []
        self.per_key: Counter[tuple[str, str]] = Counter()
        self.in_flight = 0
        self.max_in_flight = 0
        self.stopping = threading.Event()
        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), self._handler_class())
        self.httpd.daemon_threads = True
        self.port = self.httpd.server_address[1]
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)

    def start(self) -> FakeChatServer:
        self.thread.start()
        return self

    def stop(self) -> None:
        self.stopping.set()
        self.httpd.shutdown()
        self.httpd.server_close()
        self.thread.join(timeout=5)

    def requests_for(self, model: str) -> list[dict[str, Any]]:
        with self.lock:
            return [r for r in self.requests if r.get("model") == model]

    def _handler_class(self) -> type[BaseHTTPRequestHandler]:
        server = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:  # keep the test output quiet
                pass

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length", "0"))
                body = json.loads(self.rfile.read(length) or b"{}")
                with server.lock:
                    server.requests.append(body)
                    server.headers.append({k.lower(): v for k, v in self.headers.items()})
                    server.in_flight += 1
                    server.max_in_flight = max(server.max_in_flight, server.in_flight)
                try:
                    if self.path.rstrip("/") != "/v1/chat/completions":
                        self.reply(404, {"error": {"message": f"no route {self.path}"}})
                    else:
                        server.answer(self, body)
                except (BrokenPipeError, ConnectionResetError):  # the client gave up (a timeout test)
                    pass
                finally:
                    with server.lock:
                        server.in_flight -= 1

            def reply(self, status: int, payload: object, headers: dict[str, str] | None = None) -> None:
                data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", (headers or {}).pop("Content-Type", "application/json"))
                for key, value in (headers or {}).items():
                    self.send_header(key, value)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        return Handler

    def answer(self, handler: Any, body: dict[str, Any]) -> None:
        model = body.get("model", "")
        messages = body.get("messages") or [{}]
        last_user = next((m.get("content", "") for m in reversed(messages) if m.get("role") == "user"), "")
        n = int(body.get("n") or 1)
        with self.lock:
            self.per_key[(model, last_user)] += 1
            seen = self.per_key[(model, last_user)]
        fast_retry = {"retry-after-ms": "10"}  # keeps the SDK's backoff short in tests
        if model == "error" or last_user == "!500" or (model == "flaky" and seen == 1):
            handler.reply(500, {"error": {"message": "internal failure", "type": "InternalServerError"}}, fast_retry)
            return
        if model == "refuselogprobs" and body.get("logprobs"):
            message = "logprobs is not supported for models created with logits_all=False"
            handler.reply(500, {"error": {"message": message, "type": "InternalServerError"}})
            return
        if model == "toolong":
            error = {"object": "error", "message": VLLM_TOO_LONG, "type": "BadRequestError", "param": None, "code": 400}
            handler.reply(400, error)
            return
        if model == "unauthorized":
            handler.reply(401, {"error": {"message": "Incorrect API key provided", "code": "invalid_api_key"}})
            return
        if model == "slow":
            self.stopping.wait(3.0)
        if model == "trickle":
            handler.send_response(200)
            handler.send_header("Content-Type", "application/json")
            handler.send_header("Content-Length", "1000")
            handler.end_headers()
            for _ in range(100):
                if self.stopping.wait(0.1):
                    return
                handler.wfile.write(b" ")
                handler.wfile.flush()
            return
        if model == "garbage":
            handler.reply(200, b"not json")
            return
        if model == "garbage-text":
            handler.reply(200, b"not json", {"Content-Type": "text/plain"})
            return
        if model == "nochoices":
            handler.reply(200, {})
            return
        if model == "listbody":
            handler.reply(200, [1, 2])
            return
        if model == "shuffle":
            match = DELAY_RE.search(last_user)
            time.sleep(float(match.group(1)) if match else 0.0)
        if model == "hold":
            time.sleep(0.15)
        text = "the answer is 42 ### and more" if model == "stopleak" else last_user
        choices = []
        for k in range(1 if model == "fewchoices" else n):
            content = f"choice {k}" if model == "reversed" else text
            if model == "fewchoices" and body.get("seed") is not None:
                content = f"choice {body['seed']}"
            logprobs = None
            if body.get("logprobs") and model != "nologprobs":
                toks = tokens_of(content)
                logprobs = {
                    "content": [
                        {"token": t, "logprob": -0.1 * (j + 1), "bytes": list(t.encode()), "top_logprobs": []}
                        for j, t in enumerate(toks)
                    ]
                }
            choice: dict[str, Any] = {
                "index": k,
                "message": {"role": "assistant", "content": content},
                "logprobs": logprobs,
                "finish_reason": "length" if model == "long" else "stop",
            }
            if model == "nomessage":
                del choice["message"]
            choices.append(choice)
        if model == "reversed":
            choices.reverse()
        with self.lock:
            self.answer_order.append(last_user)
        handler.reply(
            200,
            {
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": model,
                "choices": choices,
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            },
        )


@pytest.fixture(autouse=True)
def _no_proxy_or_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the environment from routing 127.0.0.1 through a proxy or choosing the API key."""
    for var in ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy", "OPENAI_API_KEY"):
        monkeypatch.delenv(var, raising=False)


@pytest.fixture()
def server() -> Iterator[FakeChatServer]:
    srv = FakeChatServer().start()
    try:
        yield srv
    finally:
        srv.stop()


@pytest.fixture()
def make_policy(server: FakeChatServer) -> Iterator[Any]:
    """``make_policy(model, **kwargs)``: an OpenAIPolicy on the test server, closed at teardown."""
    made: list[OpenAIPolicy] = []

    def make(model: str, **kwargs: Any) -> OpenAIPolicy:
        kwargs.setdefault("timeout", 5.0)
        policy = OpenAIPolicy(model, server.url, **kwargs)
        made.append(policy)
        return policy

    yield make
    for policy in made:
        policy.close()


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": "be brief"}, {"role": "user", "content": text}]


# -- happy path ------------------------------------------------------------------------------


def test_echo_returns_completions_with_logprobs(make_policy: Any) -> None:
    policy = make_policy("echo", context_window=4096)
    assert isinstance(policy, Policy)
    assert policy.name == "echo" and policy.context_window == 4096
    [completion] = policy.generate([chat("hello there world")])
    assert completion.text == "hello there world"
    assert completion.finish_reason == "stop"
    assert completion.prompt_index == 0
    assert completion.prompt_token_ids is None and completion.completion_token_ids is None
    assert completion.logprobs == pytest.approx([-0.1, -0.2, -0.3])
    assert completion.num_tokens == 0


def test_groups_come_back_in_prompt_order_when_answers_arrive_scrambled(
    make_policy: Any, server: FakeChatServer
) -> None:
    # prompt 0 is answered last, prompt 2 first: the answers arrive in reverse order
    prompts = [chat("p0 delay=0.3"), chat("p1 delay=0.15"), chat("p2 delay=0.0")]
    policy = make_policy("shuffle", max_concurrency=3)
    completions = policy.generate(prompts, SamplingParams(temperature=1.0, n=2))
    assert server.answer_order == ["p2 delay=0.0", "p1 delay=0.15", "p0 delay=0.3"]
    assert [c.prompt_index for c in completions] == [0, 0, 1, 1, 2, 2]
    assert [c.text.split()[0] for c in completions] == ["p0", "p0", "p1", "p1", "p2", "p2"]
    assert all(body["n"] == 2 for body in server.requests)
    assert len(server.requests) == 3  # one request per prompt, n choices each


def test_concurrency_limit_is_respected_and_used(make_policy: Any, server: FakeChatServer) -> None:
    policy = make_policy("hold", max_concurrency=2)
    start = time.monotonic()
    completions = policy.generate([chat(f"q{i}") for i in range(6)])
    elapsed = time.monotonic() - start
    assert [c.text for c in completions] == [f"q{i}" for i in range(6)]
    assert server.max_in_flight == 2  # never more than 2, and more than 1: requests ran in parallel
    assert elapsed < 6 * 0.15  # faster than one at a time


def test_sampling_params_reach_the_server(make_policy: Any, server: FakeChatServer) -> None:
    policy = make_policy("echo")
    sampling = SamplingParams(temperature=0.7, top_p=0.9, max_new_tokens=33, n=2, stop=("###", "END"), seed=5)
    policy.generate([chat("x")], sampling)
    [body] = server.requests
    assert body["model"] == "echo"
    assert body["messages"] == chat("x")
    assert body["temperature"] == 0.7
    assert body["top_p"] == 0.9
    assert body["max_tokens"] == 33
    assert body["n"] == 2
    assert body["stop"] == ["###", "END"]
    assert body["seed"] == 5
    assert body["logprobs"] is True and body["top_logprobs"] == 1  # llama.cpp's server needs top_logprobs
    assert "truncate_prompt" not in body and "max_completion_tokens" not in body


def test_empty_stop_and_no_seed_are_omitted(make_policy: Any, server: FakeChatServer) -> None:
    make_policy("echo").generate([chat("x")], SamplingParams(temperature=0.0))
    [body] = server.requests
    assert "stop" not in body and "seed" not in body
    assert body["temperature"] == 0.0 and body["n"] == 1 and body["max_tokens"] == 256


def test_finish_reason_length(make_policy: Any) -> None:
    [completion] = make_policy("long").generate([chat("cut off")])
    assert completion.finish_reason == "length"
    assert completion.text == "cut off"


def test_stop_string_left_in_by_the_server_is_cut_and_logprobs_trimmed(make_policy: Any) -> None:
    [completion] = make_policy("stopleak").generate([chat("q")], SamplingParams(stop=("###",)))
    assert completion.text == "the answer is 42 "
    assert completion.finish_reason == "stop"
    # tokens: "the", " answer", " is", " 42", " ###", ... -> keep up to the one completing "###"
    assert completion.logprobs == pytest.approx([-0.1, -0.2, -0.3, -0.4, -0.5])


def test_no_logprobs_from_the_server_gives_none(make_policy: Any) -> None:
    [completion] = make_policy("nologprobs").generate([chat("a b")])
    assert completion.text == "a b"
    assert completion.logprobs is None


def test_choices_are_ordered_by_their_index(make_policy: Any) -> None:
    completions = make_policy("reversed").generate([chat("q")], SamplingParams(n=3))
    assert [c.text for c in completions] == ["choice 0", "choice 1", "choice 2"]


def test_api_key_defaults_to_env_then_empty(
    make_policy: Any, server: FakeChatServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_policy("echo").generate([chat("a")])
    monkeypatch.setenv("OPENAI_API_KEY", "sk-from-env")
    make_policy("echo").generate([chat("b")])
    make_policy("echo", api_key="sk-explicit").generate([chat("c")])
    assert [h["authorization"] for h in server.headers] == [
        "Bearer EMPTY",
        "Bearer sk-from-env",
        "Bearer sk-explicit",
    ]


def test_load_policy_openai_spec(server: FakeChatServer) -> None:
    policy = load_policy(f"openai:echo@{server.url}", timeout=5.0, max_concurrency=2)
    assert isinstance(policy, OpenAIPolicy)
    try:
        assert policy.name == "echo" and policy.max_concurrency == 2 and policy.timeout == 5.0
        completions = policy.generate([chat("one"), chat("two")])
        assert [(c.text, c.prompt_index) for c in completions] == [("one", 0), ("two", 1)]
    finally:
        policy.close()


def test_context_manager_closes(server: FakeChatServer) -> None:
    with OpenAIPolicy("echo", server.url, timeout=5.0) as policy:
        assert policy.generate([chat("hi")])[0].text == "hi"
    with pytest.raises(GenerationError, match="closed"):
        policy.generate([chat("hi")])
    policy.close()  # idempotent


# -- retries and errors ----------------------------------------------------------------------


def test_flaky_server_is_retried(make_policy: Any, server: FakeChatServer) -> None:
    [completion] = make_policy("flaky", max_retries=2).generate([chat("try again")])
    assert completion.text == "try again"
    assert len(server.requests_for("flaky")) == 2


def test_persistent_500_raises_after_retries(make_policy: Any, server: FakeChatServer) -> None:
    with pytest.raises(GenerationError) as info:
        make_policy("error", max_retries=2).generate([chat("q")])
    message = str(info.value)
    assert "HTTP 500" in message and "'error'" in message and server.url in message
    assert "after 2 retries" in message and "internal failure" in message
    assert len(server.requests_for("error")) == 3


def test_client_errors_are_not_retried(make_policy: Any, server: FakeChatServer) -> None:
    with pytest.raises(GenerationError, match="HTTP 401.*Incorrect API key"):
        make_policy("unauthorized", max_retries=2).generate([chat("q")])
    assert len(server.requests_for("unauthorized")) == 1


def test_context_length_error_becomes_context_length_exceeded(make_policy: Any, server: FakeChatServer) -> None:
    with pytest.raises(ContextLengthExceeded) as info:
        make_policy("toolong").generate([chat("a very long prompt")], SamplingParams(truncate_prompt=True))
    assert "maximum context length is 2048 tokens" in str(info.value)
    assert info.value.limit == 2048 and info.value.needed == 4096
    assert len(server.requests_for("toolong")) == 1


def test_one_failing_prompt_fails_the_batch_and_names_it(make_policy: Any) -> None:
    policy = make_policy("echo", max_retries=0)
    with pytest.raises(GenerationError, match="prompt 1"):
        policy.generate([chat("fine"), chat("!500"), chat("also fine")])


def test_timeout_fits_the_request_and_is_never_retried(make_policy: Any, server: FakeChatServer) -> None:
    # budget = timeout + seconds_per_token x max_tokens x requests in flight = 0.2 + 0.01 x 30 x 1
    policy = make_policy("slow", timeout=0.2, seconds_per_token=0.01, max_retries=2)
    assert policy.request_budget(30) == pytest.approx(0.5) and policy.request_budget(30, queued=4) == pytest.approx(1.4)
    start = time.monotonic()
    with pytest.raises(GenerationError, match=r"timed out after 0\.5 s .*not retried: the server may still be working"):
        policy.generate([chat("q")], SamplingParams(max_new_tokens=30))
    assert time.monotonic() - start < 2.0
    assert len(server.requests_for("slow")) == 1  # a retry would queue behind the abandoned request


def test_default_budget_grows_with_max_tokens(make_policy: Any) -> None:
    policy = make_policy("echo", timeout=30.0)  # the defaults fit a 1,536-token design on a CPU server
    assert policy.request_budget(1536) >= 30 + 0.25 * 1536


def test_server_trickling_bytes_cannot_hang_generate(make_policy: Any) -> None:
    # each read gets a byte within 0.1 s, so the HTTP read timeout never fires: the policy's own
    # deadline (the request's budget + 1 s) must end the call
    policy = make_policy("trickle", timeout=0.3, seconds_per_token=0.0, max_retries=0)
    start = time.monotonic()
    with pytest.raises(GenerationError, match=r"no complete answer within 0\.3 s \(timeout 0\.3 s"):
        policy.generate([chat("q")])
    assert time.monotonic() - start < 0.3 + 2.0


def test_an_abandoned_request_does_not_keep_the_process_alive(server: FakeChatServer) -> None:
    """After generate gave up on a trickling server, the interpreter still exits at once (the
    request's thread is a daemon), even when the user never calls close()."""
    import subprocess
    import sys

    script = (
        "from spade_gym.errors import GenerationError\n"
        "from spade_gym.policies.openai import OpenAIPolicy\n"
        f"policy = OpenAIPolicy('trickle', {server.url!r}, timeout=0.3, seconds_per_token=0, max_retries=0)\n"
        "try:\n    policy.generate([[{'role': 'user', 'content': 'q'}]])\n"
        "except GenerationError:\n    print('raised')\n"
    )
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.stdout.strip() == "raised", done.stderr
    assert time.monotonic() - start < 15, "the process waited for the abandoned request"


def test_unreachable_server_raises_generation_error() -> None:
    with socket.socket() as sock:  # a port with nothing listening
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    url = f"http://127.0.0.1:{port}/v1"
    start = time.monotonic()
    with OpenAIPolicy("echo", url, timeout=2.0, max_retries=2) as policy:
        with pytest.raises(GenerationError, match="could not reach the server") as info:
            policy.generate([chat("q")])
    assert url in str(info.value) and time.monotonic() - start < 5.0  # named within seconds


@pytest.mark.parametrize(
    ("model", "detail"),
    [
        ("garbage", "the body is not JSON (Expecting value): 'not json'"),  # JSON content type: the SDK raises
        ("garbage-text", "the body is not JSON: 'not json'"),  # text/plain: the SDK returns the text
        ("nochoices", "no 'choices' list in {}"),
        ("nomessage", "choice 0 has no 'message'"),
        ("listbody", "no 'choices' list in [1, 2]"),
    ],
)
def test_garbage_answers_raise_generation_error(
    make_policy: Any, server: FakeChatServer, model: str, detail: str
) -> None:
    with pytest.raises(GenerationError) as info:
        make_policy(model, max_retries=0).generate([chat("q")])
    assert f"server at {server.url} did not return a chat completion" in str(info.value)
    assert detail in str(info.value)


def test_server_ignoring_n_serves_groups_with_single_requests(make_policy: Any, server: FakeChatServer) -> None:
    policy = make_policy("fewchoices", max_concurrency=4)
    completions = policy.generate([chat("q")], SamplingParams(n=3, seed=10))
    # the first request asked for 3 and got 1; the other two were asked singly, seeded seed + k
    assert [c.text for c in completions] == ["choice 10", "choice 11", "choice 12"]
    requests = [(r["n"], r["seed"]) for r in server.requests]  # the single ones run at once, in any order
    assert requests[0] == (3, 10) and sorted(requests[1:]) == [(1, 11), (1, 12)]
    assert policy.server_n is False
    completions = policy.generate([chat("a"), chat("b")], SamplingParams(n=2, seed=0))
    assert [(c.prompt_index, c.text) for c in completions] == [
        (0, "choice 0"),
        (0, "choice 1"),
        (1, "choice 0"),
        (1, "choice 1"),
    ]
    assert [r["n"] for r in server.requests[3:]] == [1, 1, 1, 1]  # known now: single requests from the start


def test_a_server_refusing_logprobs_is_asked_without(make_policy: Any, server: FakeChatServer) -> None:
    policy = make_policy("refuselogprobs", max_retries=0)
    [completion] = policy.generate([chat("x y")])
    assert completion.text == "x y" and completion.logprobs is None
    assert [("logprobs" in r) for r in server.requests] == [True, False]
    policy.generate([chat("z")])
    assert "logprobs" not in server.requests[-1] and len(server.requests) == 3


# -- validation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "prompts",
    [[], [{"role": "user", "content": "not wrapped"}], [[]], [[{"role": "robot", "content": "x"}]], "text"],
)
def test_malformed_prompts_raise_value_error_before_any_request(
    make_policy: Any, server: FakeChatServer, prompts: Any
) -> None:
    with pytest.raises(ValueError):
        make_policy("echo").generate(prompts)
    assert server.requests == []


def test_sampling_must_be_sampling_params(make_policy: Any) -> None:
    with pytest.raises(ValueError, match="SamplingParams"):
        make_policy("echo").generate([chat("q")], {"temperature": 0.5})


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"timeout": 0}, "timeout"),
        ({"timeout": -1.0}, "timeout"),
        ({"timeout": float("nan")}, "timeout"),
        ({"seconds_per_token": -1}, "seconds_per_token"),
        ({"connect_timeout": 0}, "connect_timeout"),
        ({"max_retries": -1}, "max_retries"),
        ({"max_concurrency": 0}, "max_concurrency"),
        ({"context_window": 0}, "context_window"),
        ({"base_url": "ftp://example.com/v1"}, "base_url"),
        ({"base_url": "localhost:8000/v1"}, "base_url"),
        ({"model": ""}, "model"),
    ],
)
def test_constructor_rejects_bad_arguments(kwargs: dict[str, Any], field: str) -> None:
    arguments: dict[str, Any] = {"model": "echo", "base_url": "http://127.0.0.1:1/v1", **kwargs}
    with pytest.raises(ValueError, match=field):
        OpenAIPolicy(arguments.pop("model"), arguments.pop("base_url"), **arguments)


def test_missing_openai_package_raises_backend_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "openai", None)  # makes `import openai` raise ImportError
    with pytest.raises(BackendUnavailable, match="pip install openai"):
        OpenAIPolicy("echo", "http://127.0.0.1:1/v1")
