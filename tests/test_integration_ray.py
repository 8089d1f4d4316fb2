"""Ray scale-out on a local Ray instance (``ray.init(num_cpus=2)``): validation as Ray tasks gives
the local reports, a validation worker killed mid-run is retried once and then reported as a
failed validation, environments hosted in Ray actors play exactly as local ones, a dead host ends
its episodes cleanly, and the self-play loop gives the same results with both executors."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

ray = pytest.importorskip("ray")
psutil = pytest.importorskip("psutil")

from doubles import ScriptedPolicy  # noqa: E402
from programs import EVEN_LENGTH, program  # noqa: E402
from readme import readme_example  # noqa: E402

from spade_gym import EnvProgram  # noqa: E402
from spade_gym.agent import Episode, RolloutConfig, rollout  # noqa: E402
from spade_gym.executor import LocalExecutor, make_executor  # noqa: E402
from spade_gym.policies.base import SamplingParams  # noqa: E402
from spade_gym.ray_executor import RayExecutor  # noqa: E402
from spade_gym.registry.gymnasium import bundled_registry_path  # noqa: E402
from spade_gym.validation import ValidationConfig  # noqa: E402

SEED_PROGRAMS = sorted((bundled_registry_path() / "envs").glob("*/env.py"))
HOSTILE = {
    "escape": program(preamble="import os"),
    "crash": program(step="raise ValueError('broken')"),
    "endless": program(step="while True:\n    pass"),
    "lies": program(step="return 'obs', 'one', True, False, {}"),
}


@pytest.fixture(scope="module")
def executor() -> Iterator[RayExecutor]:
    ex = make_executor("ray", num_cpus=2, env_hosts=2)
    assert isinstance(ex, RayExecutor) and ex.started
    yield ex
    ex.close()
    assert not ray.is_initialized()


def summary(report: Any) -> tuple[Any, ...]:
    """What a report says, without its timings."""
    return (
        report.program_id,
        report.accepted,
        report.category,
        report.name,
        [(c.name, c.passed, c.category) for c in report.checks],
        report.oracle_returns,
        report.trivial_success_rates,
    )


def test_validation_on_ray_gives_the_local_reports(executor: RayExecutor) -> None:
    programs = [EnvProgram.from_file(p) for p in SEED_PROGRAMS[:4]]
    programs += [EnvProgram(source, origin=name) for name, source in HOSTILE.items()]
    config = ValidationConfig()
    local = LocalExecutor().validate_many(programs, config)
    remote = executor.validate_many(programs, config)
    assert [summary(r) for r in remote] == [summary(r) for r in local]
    assert [r.accepted for r in remote] == [True] * 4 + [False] * 4
    assert {r.category for r in remote[4:]} >= {"COMPILE_REJECTED", "TIMEOUT"}


def _kill_validation_workers(times: int, killed: list[int], stop: threading.Event) -> None:
    """SIGKILL the Ray worker running a validation task (process title ``ray::_validate_source``),
    ``times`` times."""
    while len(killed) < times and not stop.is_set():
        for proc in psutil.process_iter(["cmdline"]):
            try:
                cmdline = " ".join(proc.info["cmdline"] or [])
            except (psutil.Error, TypeError):
                continue
            if cmdline.startswith("ray::_validate_source") and proc.pid not in killed:
                proc.kill()
                killed.append(proc.pid)
                break
        time.sleep(0.005)


@pytest.mark.parametrize("kills", [1, 2])
def test_a_validation_worker_that_dies_is_retried_once_then_fails_validation(executor: RayExecutor, kills: int) -> None:
    target = EnvProgram.from_file(SEED_PROGRAMS[0])
    killed: list[int] = []
    stop = threading.Event()
    killer = threading.Thread(target=_kill_validation_workers, args=(kills, killed, stop), daemon=True)
    killer.start()
    try:
        (report,) = executor.validate_many([target], ValidationConfig())
    finally:
        stop.set()
        killer.join()
    assert len(killed) == kills
    if kills == 1:  # the retry ran to the end
        assert report.accepted, report.failures
    else:  # both attempts died: a failed validation, not an exception
        assert not report.accepted and report.category == "WORKER_CRASH"
        assert "died on all 2 attempt(s)" in report.check("load").message
        assert report.program_id == target.id
    # the executor still works afterwards
    (again,) = executor.validate_many([target], ValidationConfig())
    assert again.accepted


def parity(prompt: list[dict[str, str]]) -> str:
    """A deterministic Agent's reply that depends on the observation it got (so local and remote
    episodes match only if the environments gave the same observations)."""
    words = prompt[-1]["content"].split()
    return "<answer>ab</answer>" if len(words) % 2 else "<answer>abc</answer>"


def test_environments_in_ray_actors_play_as_local_ones(executor: RayExecutor) -> None:
    specs = ["spade/ArithmeticChain-v0", "spade/NimLastStoneWins-v0", EnvProgram(EVEN_LENGTH)]
    config = RolloutConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=8), max_turns=3)
    local, _ = rollout(
        [Episode(s, seed, hint) for s in specs for seed in (1, 2) for hint in (False, True)],
        ScriptedPolicy(parity, name="parity"),
        config,
    )
    remote, _ = rollout(
        [Episode(executor.env(s), seed, hint) for s in specs for seed in (1, 2) for hint in (False, True)],
        ScriptedPolicy(parity, name="parity"),
        config,
    )

    def played(t: Any) -> Any:
        return (t.env_id, t.seed, t.hint, t.messages, t.rewards, t.episode_return, t.error)

    assert [played(t) for t in remote] == [played(t) for t in local]
    assert {t.env_id for t in remote} == {"spade/ArithmeticChain-v0", "spade/NimLastStoneWins-v0", "EvenLength"}
    assert any(t.episode_return > 0 for t in remote) and all(t.error is None for t in remote)


def test_an_environment_that_breaks_in_an_actor_ends_its_episode_only(executor: RayExecutor) -> None:
    broken = program(step="raise ValueError('broken')")
    config = RolloutConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=8))
    trajectories, _ = rollout(
        [Episode(executor.env(broken), 0), Episode(executor.env(EVEN_LENGTH), 0)],
        ScriptedPolicy(parity, name="parity"),
        config,
    )
    assert trajectories[0].error is not None and trajectories[0].error["category"] == "ENV_EXCEPTION"
    assert "broken" in trajectories[0].error["message"]
    assert trajectories[1].error is None and trajectories[1].num_turns == 1


def wait_until_dead(actor: Any, timeout: float = 60.0) -> None:
    """Return once ``actor`` answers with ``RayActorError``: ``ray.kill`` is asynchronous, and a call
    made just after it may still be served. Fails the test after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get(actor.__ray_ready__.remote(), timeout=timeout)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.1)
    pytest.fail(f"the killed actor still answered after {timeout:.0f} s")


def test_a_dead_environment_host_ends_its_episodes_with_a_worker_crash() -> None:
    with RayExecutor(env_hosts=1) as executor:  # joins the instance of this module or starts one
        env = executor.env(EnvProgram(EVEN_LENGTH))()
        env.reset(seed=0)
        ray.kill(executor._hosts[0])
        wait_until_dead(executor._hosts[0])
        obs, reward, terminated, truncated, info = env.step("ab")
        assert (reward, terminated, truncated) == (0.0, False, True)
        assert info["sandbox_error"]["category"] == "WORKER_CRASH"
        env.close()
        fresh = executor.env(EnvProgram(EVEN_LENGTH))()  # the dead host is replaced
        assert fresh.reset(seed=0)[0].startswith("Round")
        fresh.close()


def test_both_executors_give_factories_and_read_relative_paths_here(
    executor: RayExecutor, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(Path(__file__).resolve().parent.parent)
    relative = "examples/programs/arithmetic_chain.py"  # the actor's working directory is elsewhere
    firsts = []
    for ex in (LocalExecutor(), executor):
        env = ex.env(relative)()
        firsts.append(env.reset(seed=4)[0])
        env.close()
    assert firsts[0] == firsts[1] and firsts[0].startswith("Start with")


def test_an_address_nothing_answers_fails_fast_in_one_line() -> None:
    import subprocess
    import sys

    code = (
        "from spade_gym.executor import make_executor\n"
        "try:\n    make_executor('ray', address='127.0.0.1:1')\n"
        "except ConnectionError as exc:\n    print(exc)\n"
    )
    started = time.perf_counter()
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert time.perf_counter() - started < 60
    assert result.stdout.strip().startswith("cannot reach the Ray cluster at '127.0.0.1:1'")
    assert len(result.stdout.strip().splitlines()) == 1


def test_unknown_ids_and_bad_options_fail_clearly(executor: RayExecutor) -> None:
    import gymnasium

    with pytest.raises(gymnasium.error.Error):
        executor.env("spade/NoSuchEnv-v0")
    with pytest.raises(ValueError, match="validation_cpus"):
        RayExecutor(validation_cpus=0)
    with pytest.raises(ValueError, match="local executor takes no options"):
        make_executor("local", num_cpus=2)
    with pytest.raises(ValueError, match="'local' or 'ray'"):
        make_executor("dask")


def test_the_readme_example_runs(capsys: pytest.CaptureFixture[str]) -> None:
    if ray.is_initialized():  # the example starts (and stops) its own local instance
        ray.shutdown()
    namespace: dict[str, Any] = {}
    exec(
        compile(readme_example("## Ray: scaling out", doc="docs/integrations.md"), "docs/integrations.md", "exec"),
        namespace,
    )
    assert capsys.readouterr().out.strip().splitlines()[-1] == "8 of 8 accepted"  # (after any raylet notes)
    assert namespace["observation"].startswith("Start with the number")
    assert not ray.is_initialized()


@pytest.mark.slow
def test_a_policy_in_a_ray_actor_generates_as_it_does_locally(embedded_policy: Any) -> None:
    from spade_gym.policies.ray import RayPolicy

    if ray.is_initialized():
        ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        remote = RayPolicy("default", num_gpus=0)
        prompts = [[{"role": "user", "content": "Name a colour."}], [{"role": "user", "content": "Say hi."}]]
        sampling = SamplingParams(temperature=1.0, max_new_tokens=8, seed=7)
        local = embedded_policy.generate(prompts, sampling)
        got = remote.generate(prompts, sampling)
        assert [c.text for c in got] == [c.text for c in local]
        assert [c.completion_token_ids for c in got] == [c.completion_token_ids for c in local]
        assert remote.name == embedded_policy.name and remote.context_window == embedded_policy.context_window
        assert remote.encode(prompts[0]) == list(embedded_policy.encode(prompts[0]))
        remote.close()
        with pytest.raises(Exception, match="no-such-model"):
            RayPolicy("/no-such-model", num_gpus=0)
    finally:
        ray.shutdown()


# ----------------------------------------------------------------------------- the self-play loop


def test_the_self_play_loop_gives_the_same_results_on_ray(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from test_selfplay import tiny_policy, without_times
    from transformers import AutoTokenizer

    from spade_gym.policies.embedded import embedded_model_dir
    from spade_gym.trainer.config import SelfPlayConfig
    from spade_gym.trainer.run import RunDir
    from spade_gym.trainer.selfplay import SelfPlay

    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir())
    # two seed programs held out of the run's registry: they pass the gate, get a regret estimate
    # and are registered in iteration 0, and are duplicates in iteration 1
    held_out = [
        bundled_registry_path() / "envs" / f"{name}-v0" / "env.py" for name in ("LightsOut3x3", "MastermindCodeBreaker")
    ]
    designs = [f"Here it is.\n```python\n{path.read_text()}```" for path in held_out]

    def writes_programs(prompt: list[dict[str, str]]) -> list[str] | None:
        """The tiny policy's Designer completions are replaced by the two real programs (its own
        tokens and logprobs kept, so the update trains on them as usual)."""
        return designs if any("class Env" in m["content"] for m in prompt) else None

    def run(executor: str) -> list[dict[str, Any]]:
        out = tmp_path / executor
        config = SelfPlayConfig.from_dict(
            {
                "designer": {
                    "prompts_per_iteration": 1,
                    "group_size": 2,
                    "max_new_tokens": 8,
                    "memory_k": 1,
                    "settings": ["game"],
                },
                "agent": {
                    "k": 2,
                    "max_new_tokens": 4,
                    "replay_envs": 1,
                    "episodes_per_env": 2,
                    "max_turns": 1,
                    "updates_per_iteration": 1,
                },
                "run": {"out": str(out), "iterations": 2, "seed": 1, "tensorboard": False, "executor": executor},
                "ray": {"num_cpus": 2, "env_hosts": 2},
            }
        )
        loop = SelfPlay(
            config,
            RunDir.create(out, config),
            policy=ScriptedPolicy(writes_programs, wraps=tiny_policy(tokenizer)),
            say=print,
        )
        try:
            results = loop.train()
        finally:
            loop.close()
        return [
            {**without_times(r.metrics), "accepted": r.accepted, "outcomes": [o.report.category for o in r.outcomes]}
            for r in results
        ]

    if ray.is_initialized():  # the module's instance: the loop starts (and stops) its own
        ray.shutdown()
    local, remote = run("local"), run("ray")
    assert remote == local
    assert local[0]["designer/designs"] == 2 and "NO_CODE" not in local[0]["outcomes"]
    from spade_gym.registry import gymnasium as reg

    seeds = len(list((reg.bundled_registry_path() / "envs").iterdir())) - len(reg.HELD_OUT_SEED_ENVS)
    assert local[0]["registry/size"] == seeds + 2, local[0]["outcomes"]  # the seed library and both designs
    assert local[0]["agent/return_hint"] is not None
    assert local[1]["outcomes"] == ["DUPLICATE", "DUPLICATE"]  # the novelty check saw the grown registry
    assert not ray.is_initialized()
