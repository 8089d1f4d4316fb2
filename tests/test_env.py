"""``SandboxedEnv`` through the Gymnasium API: checker, make, vector environments, bad actions."""

from __future__ import annotations

import os
import warnings

import gymnasium as gym
import pytest
from cases import EXAMPLES
from gymnasium.utils.env_checker import check_env
from programs import program
from test_sandbox import wait_gone

from spade_gym import ProgramError, SandboxedEnv, SandboxTimeout, UnicodeText, escape_text
from spade_gym.sandbox import SandboxConfig


@pytest.fixture(autouse=True)
def _quiet_checker_warnings():  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


def play_oracle(env: SandboxedEnv, seed: int) -> float:
    env.reset(seed=seed)
    total, done = 0.0, False
    while not done:
        _obs, reward, terminated, truncated, _info = env.step(env.oracle())
        total += reward
        done = terminated or truncated
    return total


@pytest.mark.parametrize("name", ["arithmetic_chain.py", "bank_account.py"])
def test_examples_play_to_success_with_their_oracle(name: str) -> None:
    env = SandboxedEnv(EXAMPLES / name)
    try:
        for seed in range(5):
            assert play_oracle(env, seed) >= 0.99
        env.reset(seed=0)
        assert env.hint() and env.hint() != env.oracle()
        assert env.setting in ("reasoning", "tool_use") and env.description
    finally:
        env.close()


def test_check_env_raw_and_through_make(arithmetic_path, bank_path) -> None:  # type: ignore[no-untyped-def]
    for path in (arithmetic_path, bank_path):
        env = SandboxedEnv(path)
        check_env(env)
        env.close()
        made = gym.make("spade/Program-v0", program=str(path))
        check_env(made.unwrapped)
        check_env(made)
        assert made.spec is not None and made.spec.to_json()
        made.close()


def test_make_without_prior_import_resolves_the_entry_point(arithmetic_path) -> None:  # type: ignore[no-untyped-def]
    env = gym.make("spade_gym:spade/Program-v0", program=str(arithmetic_path))
    obs, _ = env.reset(seed=3)
    assert isinstance(obs, str) and obs
    env.close()


def reference_observations(path, seeds, actions):  # type: ignore[no-untyped-def]
    out = []
    for seed, action in zip(seeds, actions, strict=True):
        env = SandboxedEnv(path)
        first = env.reset(seed=seed)[0]
        out.append((first, env.step(action)[0]))
        env.close()
    return out


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_vector_envs_return_the_right_text(mode: str, bank_path) -> None:  # type: ignore[no-untyped-def]
    seeds = [11, 12, 13]
    actions = ['{"name": "get_balance", "arguments": {"account": "x"}}', "garbage ünïcödé ✓", ""]
    expected = reference_observations(bank_path, seeds, actions)
    vec = gym.make_vec("spade/Program-v0", num_envs=3, vectorization_mode=mode, program=str(bank_path))
    try:
        obs, _ = vec.reset(seed=seeds)
        assert list(obs) == [e[0] for e in expected]
        obs, rewards, terminated, truncated, _ = vec.step(actions)
        assert list(obs) == [e[1] for e in expected]
        assert rewards.shape == (3,)
    finally:
        vec.close()


def test_async_default_shared_memory_is_live_and_unicode(arithmetic_path) -> None:  # type: ignore[no-untyped-def]
    vec = gym.vector.AsyncVectorEnv([lambda: SandboxedEnv(arithmetic_path)] * 2, copy=False)
    try:
        assert vec.shared_memory
        obs, _ = vec.reset(seed=[1, 2])
        first = tuple(obs)
        vec.step(["1", "é✓"])
        assert tuple(obs) != first and "too low" in obs[0]  # the live view moved with the workers
        snapshot = vec.reset(seed=[1, 2])[0]
        assert tuple(snapshot) == first
    finally:
        vec.close()


def test_unicode_text_space() -> None:
    space = UnicodeText(max_length=5, seed=0)
    assert space.contains("") and space.contains("ñ✓😀ab") and not space.contains("toolong")
    assert not space.contains(b"bytes") and not space.contains(None)
    for _ in range(20):
        sample = space.sample()
        assert space.contains(sample) and (sample.isprintable() or "\n" in sample)
    assert gym.spaces.Text(5).contains("ñ") is False  # the reason UnicodeText exists


@pytest.mark.parametrize(
    "action",
    [b"\xff\xfe bytes", None, 12345, 3.5, "x" * 200_000, "\ud800 lone surrogate", "\x00\x1b[31m", object()],
)
def test_garbage_actions_never_raise(action, bank_path) -> None:  # type: ignore[no-untyped-def]
    env = SandboxedEnv(bank_path)
    try:
        env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step(action)
        assert isinstance(obs, str) and reward == 0.0 and "sandbox_error" not in info
    finally:
        env.close()


def test_broken_str_action_never_raises(bank_path) -> None:  # type: ignore[no-untyped-def]
    class Nasty:
        def __str__(self) -> str:
            raise RuntimeError("no")

    env = SandboxedEnv(bank_path)
    try:
        env.reset(seed=0)
        assert isinstance(env.step(Nasty())[0], str)
    finally:
        env.close()


def test_failing_program_truncates_or_raises_and_recovers() -> None:
    source = program(step="if action == 'hang':\n    while True:\n        pass\nreturn 'ok', 0.0, False, False, {}")
    config = SandboxConfig(call_timeout_s=0.3)
    env = SandboxedEnv(source, config=config)
    try:
        env.reset(seed=0)
        obs, reward, terminated, truncated, info = env.step("hang")
        assert (reward, terminated, truncated) == (0.0, False, True)
        assert info["sandbox_error"]["category"] == "TIMEOUT"
        assert env.step("again")[4]["sandbox_error"]["type"] == "EpisodeOver"
        assert env.reset(seed=1)[0] == "start 1"  # a fresh worker replaces the killed one
        assert env.step("fine")[0] == "ok"
    finally:
        env.close()
    strict = SandboxedEnv(source, config=config, on_error="raise")
    try:
        strict.reset(seed=0)
        with pytest.raises(SandboxTimeout):
            strict.step("hang")
    finally:
        strict.close()


def test_host_truncates_at_max_turns_even_if_the_program_does_not() -> None:
    env = SandboxedEnv(program(step="return 'more', 0.0, False, False, {}", max_turns=3))
    try:
        env.reset(seed=0)
        flags = [env.step("x")[2:4] for _ in range(3)]
        assert flags == [(False, False), (False, False), (False, True)]
    finally:
        env.close()


def test_close_reaps_the_worker(arithmetic_path) -> None:  # type: ignore[no-untyped-def]
    env = SandboxedEnv(arithmetic_path)
    pid = env.client.pid
    assert pid is not None and os.path.exists(f"/proc/{pid}")
    env.close()
    env.close()  # idempotent
    assert wait_gone(pid)


def test_bad_programs_are_refused_at_construction(tmp_path) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ProgramError, match="import of 'os'"):
        SandboxedEnv(program(preamble="import os"))
    with pytest.raises(FileNotFoundError, match="no environment program file"):
        SandboxedEnv(str(tmp_path / "missing.py"))
    with pytest.raises(ValueError, match="on_error"):
        SandboxedEnv(program(), on_error="ignore")  # type: ignore[arg-type]


def test_render_escapes_program_text() -> None:
    env = SandboxedEnv(program(reset="return 'red \\x1b[31m nul \\x00 ok\\n', {}"), render_mode="ansi")
    try:
        env.reset(seed=0)
        assert env.render() == "red \\x1b[31m nul \\x00 ok\n"
    finally:
        env.close()
    assert escape_text("a\u202eb", limit=10) == "a\\u202eb"


def test_worker_is_recycled_before_its_cpu_limit() -> None:
    burn = program(step="n = 0\nfor i in range(400000):\n    n += i\nreturn 'o', 0.0, False, False, {}", max_turns=100)
    env = SandboxedEnv(burn, config=SandboxConfig(cpu_seconds=1))
    try:
        env.reset(seed=0)
        first_pid = env.client.pid
        while env.client.cpu_used_s <= 0.5:
            env.step("x")
        env.reset(seed=1)
        assert env.client.pid != first_pid and env.client.cpu_used_s < 0.5
    finally:
        env.close()
