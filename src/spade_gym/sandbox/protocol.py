"""The wire protocol between host and worker, and the output contract checks.

Frames are a 4-byte big-endian length and that many bytes of strict UTF-8 JSON; nothing is ever
unpickled. The contract checks run in the worker on the real return values (exact types) and again
on the host on the decoded JSON; they raise :class:`ContractError` or :class:`ResourceLimitExceeded`.
"""

from __future__ import annotations

import json
import math
import os
import struct
from dataclasses import dataclass
from typing import Any

from spade_gym.errors import Category, ContractError, ResourceLimitExceeded, WorkerCrash

__all__ = [
    "Limits",
    "encode_frame",
    "write_frame",
    "read_frame_blocking",
    "check_text",
    "check_json",
    "check_reward",
    "check_flag",
    "RESERVED_INFO_KEY",
    "check_info",
    "check_reset_result",
    "check_step_result",
    "check_spec",
]

_HEADER = struct.Struct(">I")


@dataclass(frozen=True)
class Limits:
    """Sizes of what may cross from a program to the host: observation, hint and oracle text
    (bytes of UTF-8), serialised ``info`` (bytes), its nesting depth and number of JSON values,
    and the largest ``|reward|`` of one step."""

    max_text_bytes: int = 1 << 20
    max_info_bytes: int = 64 << 10
    max_info_depth: int = 32
    max_info_nodes: int = 10_000
    max_abs_reward: float = 1e6


def encode_frame(message: Any) -> bytes:
    """Serialise ``message`` as one frame; ``ValueError`` if it is not strict JSON (no NaN)."""
    body = json.dumps(message, ensure_ascii=False, allow_nan=False, separators=(",", ":")).encode("utf-8")
    return _HEADER.pack(len(body)) + body


def write_frame(fd: int, frame: bytes) -> None:
    """Write a whole frame to a blocking file descriptor."""
    view = memoryview(frame)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _read_exact(fd: int, n: int) -> bytes:
    chunks = []
    while n:
        chunk = os.read(fd, min(n, 1 << 20))
        if not chunk:
            raise EOFError("pipe closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)


def read_frame_blocking(fd: int, max_bytes: int) -> Any:
    """Read one frame from a blocking descriptor (the worker's side, which trusts the host).
    ``EOFError``: the pipe closed; ``ValueError``: the frame is over ``max_bytes`` or not valid JSON."""
    data = os.read(fd, 1 << 16)
    if not data:
        raise EOFError("pipe closed")
    if len(data) < _HEADER.size:
        data += _read_exact(fd, _HEADER.size - len(data))
    (length,) = _HEADER.unpack_from(data)
    if length > max_bytes:
        raise ValueError(f"frame of {length} bytes exceeds {max_bytes}")
    body = data[_HEADER.size :]
    if len(body) < length:
        body += _read_exact(fd, length - len(body))
    return decode_body(body[:length])


def _reject_constant(name: str) -> Any:
    raise ValueError(f"non-finite number {name} in a frame")


def decode_body(body: bytes) -> Any:
    """Decode a frame body as strict UTF-8 JSON; ``WorkerCrash`` if it is not."""
    try:
        return json.loads(body.decode("utf-8"), parse_constant=_reject_constant)
    except (UnicodeDecodeError, ValueError, RecursionError) as exc:
        raise WorkerCrash(f"the worker sent a malformed frame: {type(exc).__name__}: {exc}"[:300]) from None


# -- contract checks: ``seq`` is tuple inside the worker (real return values) and list on the host --


def _describe(value: Any) -> str:
    return type(value).__name__


def _show(value: Any, limit: int = 40) -> str:
    """A short display of ``value`` that never runs program code (builtin scalars only)."""
    if type(value) in (str, int, float, bool) or value is None:
        text = (
            repr(value) if type(value) is not int or value.bit_length() < 128 else f"<int of {value.bit_length()} bits>"
        )
        return text[:limit]
    return f"a {_describe(value)}"


def check_text(value: Any, what: str, limits: Limits) -> str:
    """Check that ``value`` is exactly ``str``, valid UTF-8 and at most ``max_text_bytes`` bytes.
    ``ContractError``: wrong type or unencodable text; ``ResourceLimitExceeded``: too long."""
    if type(value) is not str:
        raise ContractError(f"{what} must be a str, got {_describe(value)}")
    if len(value) > limits.max_text_bytes:
        raise ResourceLimitExceeded(
            f"{what} has {len(value)} characters; the limit is {limits.max_text_bytes} bytes of UTF-8",
            category=Category.OUTPUT_LIMIT,
        )
    try:
        size = len(value.encode("utf-8"))
    except UnicodeEncodeError as exc:
        raise ContractError(f"{what} is not valid UTF-8 text ({exc.reason} at position {exc.start})") from None
    if size > limits.max_text_bytes:
        raise ResourceLimitExceeded(
            f"{what} is {size} bytes of UTF-8; the limit is {limits.max_text_bytes}", category=Category.OUTPUT_LIMIT
        )
    return value


def check_json(value: Any, what: str, limits: Limits) -> Any:
    """Check, without recursion, that ``value`` is JSON of exact types within the ``info`` limits.
    ``ContractError``: another type, a non-str key, a non-finite float, too deep or too many values;
    ``ResourceLimitExceeded``: serialised size over ``max_info_bytes``."""
    stack: list[tuple[Any, str, int]] = [(value, what, 1)]
    nodes = 0
    while stack:
        item, path, depth = stack.pop()
        nodes += 1
        if nodes > limits.max_info_nodes:
            raise ContractError(f"{what} holds more than {limits.max_info_nodes} values")
        if depth > limits.max_info_depth:
            raise ContractError(f"{what} is nested deeper than {limits.max_info_depth} levels (at {path[:200]})")
        kind = type(item)
        if kind is dict:
            for key, sub in item.items():
                if type(key) is not str:
                    raise ContractError(f"{path[:200]} has a key of type {_describe(key)}; JSON keys must be str")
                stack.append((sub, f"{path}[{key[:40]!r}]", depth + 1))
        elif kind is list:
            for i, sub in enumerate(item):
                stack.append((sub, f"{path}[{i}]", depth + 1))
        elif kind is float:
            if not math.isfinite(item):
                raise ContractError(f"{path[:200]} is {item!r}; JSON numbers must be finite")
        elif kind is str:
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                raise ContractError(f"{path[:200]} is not valid UTF-8 text") from None
        elif item is None or kind is int or kind is bool:
            pass
        else:
            hint = " (use a list)" if kind is tuple else ""
            raise ContractError(f"{path[:200]} is a {_describe(item)}; {what} may hold only JSON values{hint}")
    try:
        size = len(json.dumps(value, ensure_ascii=False, allow_nan=False).encode("utf-8"))
    except ValueError as exc:  # e.g. an int with more digits than Python converts
        raise ContractError(f"{what} cannot be serialised as JSON: {exc}"[:300]) from None
    if size > limits.max_info_bytes:
        raise ResourceLimitExceeded(
            f"{what} is {size} bytes as JSON; the limit is {limits.max_info_bytes}", category=Category.OUTPUT_LIMIT
        )
    return value


def check_reward(value: Any, limits: Limits) -> float:
    """Check a reward (exactly ``int`` or ``float``, finite, within bounds); return it as ``float``.
    ``ContractError`` (category ``INVALID_REWARD``) otherwise."""
    if type(value) is not int and type(value) is not float:
        raise ContractError(f"reward must be an int or float, got {_describe(value)}", category=Category.INVALID_REWARD)
    if type(value) is float and not math.isfinite(value):
        raise ContractError(f"reward must be finite, got {value!r}", category=Category.INVALID_REWARD)
    if abs(value) > limits.max_abs_reward:
        shown = f"{value:.6g}" if isinstance(value, float) else f"an int of {int(value).bit_length()} bits"
        raise ContractError(
            f"reward {shown} is outside [-{limits.max_abs_reward:g}, {limits.max_abs_reward:g}]",
            category=Category.INVALID_REWARD,
        )
    return float(value)


def check_flag(value: Any, what: str) -> bool:
    """Check that ``value`` is exactly ``bool`` (else ``ContractError``)."""
    if type(value) is not bool:
        raise ContractError(f"{what} must be a bool, got {_show(value)}")
    return value


def _check_length(result: Any, seq: type, n: int, expected: str) -> None:
    """Raise ``ContractError`` unless ``result`` is exactly a ``seq`` (no subclass) of ``n`` items."""
    sized: Any = result  # mypy narrows type(result) is seq to object
    length = len(sized) if type(result) is seq else None
    if length != n:
        if length is None:
            got = f"a {_describe(result)}"
        else:
            got = f"a {seq.__name__} of {length}" + (" (the old gym API?)" if n == 5 and length == 4 else "")
        raise ContractError(f"{expected}; got {got}")


#: The info key under which the host reports an episode's failure (``SandboxedEnv.step``); a program
#: may not use it, or it could forge the host's error record.
RESERVED_INFO_KEY = "sandbox_error"


def check_info(info: Any, where: str, limits: Limits) -> dict[str, Any]:
    """Check an info value: a JSON ``dict`` without :data:`RESERVED_INFO_KEY` (raises as :func:`check_json`)."""
    if type(info) is not dict:
        raise ContractError(f"the info returned by {where} must be a dict, got {_describe(info)}")
    if RESERVED_INFO_KEY in info:
        raise ContractError(
            f"the info returned by {where} holds the key {RESERVED_INFO_KEY!r}, which is reserved for the host's "
            "failure record; use another key"
        )
    check_json(info, "info", limits)
    return info


def check_reset_result(result: Any, limits: Limits, seq: type = tuple) -> tuple[str, dict[str, Any]]:
    """Check ``reset``'s return value ``(observation, info)``; raises as the individual checks."""
    _check_length(result, seq, 2, "reset(seed) must return (observation, info)")
    obs, info = result
    check_text(obs, "the observation returned by reset()", limits)
    return obs, check_info(info, "reset()", limits)


def check_step_result(result: Any, limits: Limits, seq: type = tuple) -> tuple[str, float, bool, bool, dict[str, Any]]:
    """Check ``step``'s return value ``(observation, reward, terminated, truncated, info)``."""
    _check_length(result, seq, 5, "step(action) must return (observation, reward, terminated, truncated, info)")
    obs, reward, terminated, truncated, info = result
    check_text(obs, "the observation returned by step()", limits)
    reward = check_reward(reward, limits)
    check_flag(terminated, "terminated")
    check_flag(truncated, "truncated")
    return obs, reward, terminated, truncated, check_info(info, "step()", limits)


def check_spec(value: Any, limits: Limits) -> dict[str, Any]:
    """Check the program's description ``{"name", "setting", "max_turns", "tools", "description"}``."""
    if type(value) is not dict:
        raise ContractError("the program's Env description is malformed")
    name, setting, max_turns = value.get("name"), value.get("setting"), value.get("max_turns")
    if (
        type(name) is not str
        or not name.isascii()
        or not name.isidentifier()
        or not name[:1].isupper()
        or len(name) > 64
    ):
        raise ContractError(f"Env.name must be a CamelCase identifier of at most 64 characters, got {_show(name, 80)}")
    if setting not in ("reasoning", "tool_use", "game"):
        raise ContractError(f"Env.setting must be 'reasoning', 'tool_use' or 'game', got {_show(setting)}")
    if type(max_turns) is not int or not 1 <= max_turns <= 100_000:
        raise ContractError(f"Env.max_turns must be an int from 1 to 100000, got {_show(max_turns)}")
    tools = value.get("tools")
    if type(tools) is not list or not all(type(t) is dict for t in tools):
        raise ContractError("Env.tools must be a list of dicts (OpenAI-style function schemas)")
    if setting == "tool_use" and not tools:
        raise ContractError("a tool_use environment must declare at least one tool in Env.tools")
    check_json(tools, "Env.tools", limits)
    check_text(value.get("description"), "the Env docstring", limits)
    return value
