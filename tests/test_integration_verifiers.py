"""verifiers integration (the installed verifiers 0.4, ``verifiers.v1``): the taskset's rows, the
config's checks, and real episodes through verifiers' own machinery (``env.serving()``,
``run_episode``, its interception server and scoring) against a local OpenAI-compatible server whose
replies come from a scripted oracle: the oracle earns the full return, garbage 0, and crashing
programs 0 with the error recorded."""

from __future__ import annotations

import asyncio
import contextlib
import re
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import gymnasium
import pytest
from integration_helpers import ShadowOracle, register_hostile_envs
from readme import readme_example

import spade_gym.integrations.verifiers as vf_mod
from spade_gym.agent import system_prompt
from spade_gym.errors import EnvNotFound, MissingDependency
from spade_gym.integrations.verifiers import TASKSET_ID, env_config, load_environment
from spade_gym.registry.gymnasium import bundled_registry_path

vf = pytest.importorskip("verifiers.v1")
web = pytest.importorskip("aiohttp.web")

REASONING, TOOL_USE, GAME = "spade/ArithmeticChain-v0", "spade/InboxCodeRelay-v0", "spade/NimLastStoneWins-v0"


@pytest.fixture(scope="module")
def hostile() -> dict[str, str]:
    return register_hostile_envs()


def test_rows_are_episodes_that_start_where_the_environment_starts() -> None:
    env = load_environment(env_ids=[REASONING, GAME], num_rows=3, seed=5)
    assert type(env).__name__ == "SpadeEnv" and isinstance(env, vf.Env)
    tasks = list(env.taskset)
    assert [t.data.name for t in tasks] == [f"{REASONING}#5", f"{GAME}#5", f"{REASONING}#6"]
    assert [t.data.idx for t in tasks] == [0, 1, 2]
    for task in tasks:
        info = task.data.info
        assert info == {"env_id": info["env_id"], "seed": info["seed"], "hint": False}
        real = gymnasium.make(info["env_id"]).unwrapped
        first, _ = real.reset(seed=info["seed"])
        assert task.data.prompt == first
        assert task.data.system_prompt == system_prompt(real.setting, real.description, real.tools)
        real.close()
    assert len({t.key for t in tasks}) == 3
    # explicit seeds are deduplicated, seed-major; every pair when num_rows is None; the hint shows
    tasks = list(load_environment(env_ids=[REASONING, GAME], seeds=[7, 7, 2], hint=True).taskset)
    assert [(t.data.info["env_id"], t.data.info["seed"]) for t in tasks] == [
        (REASONING, 7),
        (GAME, 7),
        (REASONING, 2),
        (GAME, 2),
    ]
    assert all("\n\nHint: " in t.data.prompt and t.data.info["hint"] for t in tasks)
    # a registry folder: its environments, in registry order
    tasks = list(load_environment(registry=str(bundled_registry_path()), num_rows=2).taskset)
    assert len(tasks) == 2 and tasks[0].data.info["env_id"] != tasks[1].data.info["env_id"]


def test_the_config_is_verifiers_own_and_checks_its_input() -> None:
    config = env_config(env_ids=REASONING, num_rows=2, max_turns=3, agent={"max_turns": 9})
    assert isinstance(config, vf.EnvConfig) and config.taskset.id == TASKSET_ID
    assert config.taskset.env_ids == [REASONING] and config.taskset.max_turns == 3
    assert config.agent.max_turns == 9 and config.agent.runtime.type == "subprocess"
    assert vf.resolve_env_config(config.model_dump()).taskset.num_rows == 2  # round-trips the wire form
    with pytest.raises(EnvNotFound, match="did you mean spade/ArithmeticChain-v0"):
        load_environment(env_ids=["spade/ArithmeticChan-v0"])
    with pytest.raises(TypeError, match="unknown keyword"):
        load_environment(env_ids=[REASONING], rows=3)
    with pytest.raises(ValueError, match="make only 2 rows"):
        load_environment(env_ids=[REASONING, GAME], seeds=[1], num_rows=3)
    with pytest.raises(ValueError, match="seeds must be ints >= 0"):
        load_environment(env_ids=[REASONING], seeds=[-1])
    with pytest.raises(ValueError, match="num_rows"):
        load_environment(env_ids=[REASONING], num_rows=0)


@contextlib.asynccontextmanager
async def scripted_server(tasks: list[Any], *, garbage: bool = False) -> AsyncIterator[str]:
    """A local OpenAI-compatible chat server whose replies are the oracle's (or garbage) for the
    episode the conversation's first messages identify; yields its base URL."""
    episodes = {(t.data.system_prompt, t.data.prompt): t.data.info for t in tasks}

    async def chat(request: Any) -> Any:
        body = await request.json()
        messages = body["messages"]
        info = episodes[messages[0]["content"], messages[1]["content"]]
        previous = [m["content"] for m in messages if m["role"] == "assistant"]
        text = ShadowOracle(info["env_id"], info["seed"], garbage=garbage).reply(previous)
        return web.json_response(
            {
                "id": "chatcmpl-test",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": body["model"],
                "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
                "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
            }
        )

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    try:
        yield f"http://127.0.0.1:{port}/v1"
    finally:
        await runner.cleanup()


async def run_all(env: Any, *, garbage: bool = False) -> list[Any]:
    tasks = list(env.taskset)
    async with scripted_server(tasks, garbage=garbage) as url:
        ctx = vf.ModelContext(model="scripted", client=vf.EvalClientConfig(base_url=url, api_key_var="SPADE_TEST_KEY"))
        async with env.serving():
            return list(await asyncio.gather(*(env.run_episode(task, ctx) for task in tasks)))


def test_episodes_through_verifiers_score_the_episode_return(
    hostile: dict[str, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SPADE_TEST_KEY", "unused")
    ids = [REASONING, TOOL_USE, GAME, hostile["crash_step"], hostile["crash_reset"]]
    env = load_environment(env_ids=ids, num_rows=len(ids), seed=1)
    episodes = asyncio.run(run_all(env))
    by_env = {}
    for episode in episodes:
        assert episode.ok and not episode.errors  # a failing program is data, not a failed rollout
        (trace,) = episode.traces
        by_env[trace.task.data.info["env_id"]] = trace
    for env_id in (REASONING, TOOL_USE, GAME):
        trace = by_env[env_id]
        assert trace.reward == 1.0 and trace.rewards["episode_return"].score == 1.0
        assert trace.metrics["success"] == 1.0 and trace.metrics["turns"] == trace.info["spade"]["turns"] >= 1
        assert trace.num_turns == trace.info["spade"]["turns"] and trace.info["spade"]["error"] is None
        assert trace.info["spade"]["terminated"] and trace.info["spade"]["prompt_matches"]
    crash = by_env[hostile["crash_step"]]
    assert crash.reward == 0.0 and crash.info["spade"]["rewards"] == [0.5, 0.0]
    assert "boom at step two" in crash.info["spade"]["error"]["message"]
    no_start = by_env[hostile["crash_reset"]]
    assert (
        no_start.reward == 0.0 and no_start.num_turns == 0 and "no reset" in no_start.info["spade"]["error"]["message"]
    )
    # garbage earns nothing
    (garbage,) = asyncio.run(run_all(load_environment(env_ids=[REASONING], num_rows=1), garbage=True))
    assert garbage.traces[0].reward == 0.0 and garbage.traces[0].metrics["success"] == 0.0


def test_without_verifiers_it_is_one_clear_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "verifiers", None)
    monkeypatch.setitem(sys.modules, "verifiers.v1", None)
    with pytest.raises(MissingDependency) as info:
        load_environment(env_ids=[REASONING])
    assert (
        str(info.value)
        == "spade_gym.integrations.verifiers needs verifiers: pip install -e '.[verifiers]' in a clone of the spade_gym repository (spade-gym is not on PyPI yet)"
    )


def test_readme_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    exec(
        compile(readme_example("## verifiers (prime-rl)", doc="docs/integrations.md"), "docs/integrations.md", "exec"),
        {},
    )
    out = capsys.readouterr().out.splitlines()
    # the seeds are drawn as the gate draws them (no program can predict them), not 0 .. n-1
    assert (
        len(out) == 4 and re.match(rf"{re.escape(REASONING)}#\d+ ", out[0]) and not out[0].startswith(f"{REASONING}#0 ")
    )


def test_the_taskset_module_is_registered_for_verifiers_loaders() -> None:
    vf_mod.verifiers_classes()
    module = sys.modules[TASKSET_ID]
    assert sorted(module.__all__) == ["SpadeChatHarness", "SpadeEnv", "SpadeTaskset"]
    assert vf.environment_class(TASKSET_ID).__name__ == "SpadeEnv"
    assert vf.default_harness_id(TASKSET_ID) == TASKSET_ID


def test_the_shipped_top_level_module_loads_in_a_fresh_process() -> None:
    # vf-eval and prime-rl's workers import the taskset by its id in a new process
    import subprocess
    import sys

    code = (
        "from verifiers.v1.utils import loaders\n"
        "cls = loaders.taskset_class('spade_gym_verifiers')\n"
        "import spade_gym_verifiers\n"
        "assert cls is spade_gym_verifiers.SpadeTaskset, cls\n"
        "print(cls.__name__)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "SpadeTaskset"
