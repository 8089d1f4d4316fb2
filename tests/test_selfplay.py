"""The self-play loop end to end on real parts: the sandbox, the registry on disk, the run folder,
and a tiny randomly initialised Llama with the embedded model's tokenizer (fast on CPU)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

from programs import EVEN_LENGTH  # noqa: E402

from spade_gym.program import EnvProgram  # noqa: E402
from spade_gym.registry import Registry  # noqa: E402
from spade_gym.registry.gymnasium import HELD_OUT_SEED_ENVS, bundled_registry_path, open_registry  # noqa: E402
from spade_gym.trainer.config import ConfigError, SelfPlayConfig  # noqa: E402
from spade_gym.trainer.plot import plot_run  # noqa: E402
from spade_gym.trainer.run import RunDir  # noqa: E402
from spade_gym.trainer.selfplay import SelfPlay  # noqa: E402


@pytest.fixture(scope="module")
def tokenizer() -> Any:
    from transformers import AutoTokenizer

    from spade_gym.policies.embedded import embedded_model_dir

    return AutoTokenizer.from_pretrained(embedded_model_dir())


def tiny_policy(tokenizer: Any) -> Any:
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    from spade_gym.policies.transformers import TransformersPolicy

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=8192,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    return TransformersPolicy(LlamaForCausalLM(config), tokenizer, device="cpu", name="tiny")


def baseline_config(out: Path, iterations: int = 2) -> SelfPlayConfig:
    return SelfPlayConfig.from_dict(
        {
            "agent": {"max_new_tokens": 6, "replay_envs": 2, "episodes_per_env": 6, "updates_per_iteration": 1},
            "train": {"learning_rate": 1e-3, "micro_batch_tokens": 1024},
            "run": {"out": str(out), "iterations": iterations, "designer": "off", "tensorboard": False},
        }
    )


def even_length_run(out: Path, config: SelfPlayConfig) -> RunDir:
    run = RunDir.create(out, config)
    registry = open_registry(run.registry_dir, seed_library=False)
    registry.add(EnvProgram(EVEN_LENGTH), name="EvenLength", setting="reasoning", max_turns=1, description="parity")
    registry.close()
    return run


def without_times(metrics: dict[str, Any]) -> dict[str, Any]:
    def same(value: Any) -> Any:
        return "nan" if isinstance(value, float) and math.isnan(value) else value

    return {
        k: same(v)
        for k, v in metrics.items()
        if not k.startswith(
            ("time/", "train/forward", "train/backward", "train/optimizer_s", "train/total_s", "wall_time")
        )
    }


def test_the_baseline_trains_the_agent_and_resumes_exactly(tmp_path: Path, tokenizer: Any) -> None:
    config = baseline_config(tmp_path / "a")
    loop = SelfPlay(config, even_length_run(tmp_path / "a", config), policy=tiny_policy(tokenizer), say=lambda _: None)
    results = loop.train()
    loop.close()
    first = results[0].metrics
    assert first["train/agent/samples"] == 12 and first["train/optimizer_steps"] >= 1
    assert math.isfinite(first["train/loss"]) and first["tokens/train"] > 0
    assert "designer/designs" not in first and first["registry/size"] == 1
    assert [m["iteration"] for m in RunDir.open(tmp_path / "a").read_metrics()] == [0, 1]
    assert {p.name for p in plot_run(tmp_path / "a")} >= {"agent_return.png", "time.png", "train.png"}

    # the same run killed after iteration 0 and resumed gives the same iteration 1
    config_b = baseline_config(tmp_path / "b")
    loop = SelfPlay(
        config_b, even_length_run(tmp_path / "b", config_b), policy=tiny_policy(tokenizer), say=lambda _: None
    )
    loop.train(iterations=1)
    loop.close()
    lines: list[str] = []
    resumed = SelfPlay.resume(tmp_path / "b", policy=tiny_policy(tokenizer), say=lines.append)
    assert resumed.start == 1 and "after iteration 0" in lines[0]
    again = resumed.train()
    resumed.close()
    assert without_times(again[0].metrics) == without_times(results[1].metrics)


def test_a_designer_iteration_with_a_model_that_writes_no_program(tmp_path: Path, tokenizer: Any) -> None:
    config = SelfPlayConfig.from_dict(
        {
            "designer": {"prompts_per_iteration": 1, "group_size": 2, "max_new_tokens": 12, "memory_k": 1},
            "agent": {
                "max_new_tokens": 4,
                "replay_envs": 1,
                "episodes_per_env": 2,
                "max_turns": 1,
                "updates_per_iteration": 1,
            },
            "run": {"out": str(tmp_path / "run"), "iterations": 1, "tensorboard": True},
        }
    )
    run = RunDir.create(tmp_path / "run", config)
    calls: list[tuple[str, int, int]] = []
    loop = SelfPlay(config, run, policy=tiny_policy(tokenizer), say=lambda _: None, progress=lambda *a: calls.append(a))
    (result,) = loop.train()
    loop.close()
    assert ("design", 2, 2) in calls and ("rollout", 2, 2) in calls and calls[-1] == ("update", 1, 1)
    # the design phase opens before the group is generated (most of its time), then counts judged designs
    assert [c for c in calls if c[0] == "design"] == [("design", 0, 2), ("design", 1, 2), ("design", 2, 2)]
    assert [c for c in calls if c[0] == "rollout"][0] == ("rollout", 0, 2)  # open before the first generation
    m = result.metrics
    assert m["designer/designs"] == 2 and m["designer/accepted"] == 0 and m["designer/reward_mean"] == -1.0
    assert sum(m["designer/rejections"].values()) == 2 and m["designer/outcomes"] == {"invalid": 2}
    # the seed library, less the environments held out for evaluation, is the initial memory and replay pool
    assert m["registry/size"] == len(Registry(bundled_registry_path())) - len(HELD_OUT_SEED_ENVS)
    names = {r.name for r in loop.registry.records()}
    assert not names & set(HELD_OUT_SEED_ENVS) and "ArithmeticChain" in names
    assert m["designer/iterations_without_accept"] == 1 and m["tokens/designer"] > 0
    assert (run.checkpoints_dir / "latest").is_file() and any(run.tb_dir.iterdir())
    # what the Designer wrote and why it was refused is in the run folder
    import json

    designs = [json.loads(line) for line in run.designs_path.read_text().splitlines()]
    assert [d["iteration"] for d in designs] == [0, 0]
    assert [d["completion"] for d in designs] == [o.completion for o in result.outcomes]
    assert all(d["reward"] == -1.0 and d["outcome"] == "invalid" and d["program"] is None for d in designs)
    assert all(
        d["category"] == o.report.category and d["feedback"] for d, o in zip(designs, result.outcomes, strict=True)
    )


def test_the_designs_of_several_prompts_are_generated_in_one_call(tmp_path: Path, tokenizer: Any) -> None:
    # full batches: three write prompts and two edit prompts (their token budgets differ)
    # make two generate calls, each holding all prompts of its mode, and every design keeps its prompt.
    config = SelfPlayConfig.from_dict(
        {
            "designer": {
                "prompts_per_iteration": 5,
                "group_size": 2,
                "max_new_tokens": 40,
                "edit_max_new_tokens": 32,
                "edit_probability": 0.5,
                "memory_k": 1,
            },
            "agent": {"max_new_tokens": 4, "replay_envs": 0, "max_turns": 1, "updates_per_iteration": 1},
            "run": {"out": str(tmp_path / "run"), "iterations": 1, "seed": 1, "tensorboard": False},
        }
    )
    loop = SelfPlay(config, RunDir.create(tmp_path / "run", config), policy=tiny_policy(tokenizer), say=lambda _: None)
    calls: list[tuple[int, int, int]] = []
    generate = loop.generator.generate

    sent: list[Any] = []

    def counted(prompts: Any, sampling: Any) -> Any:
        calls.append((len(prompts), sampling.n, sampling.max_new_tokens))
        sent.extend(prompts)
        return generate(prompts, sampling)

    loop.generator.generate = counted  # type: ignore[method-assign]
    phase = loop.design(0, 7)
    loop.close()
    import json

    lines = [json.loads(line) for line in (tmp_path / "run" / "designs.jsonl").read_text().splitlines()]
    modes = [line["mode"] for line in lines[::2]]
    assert [line["prompt"] for line in lines] == [0, 0, 1, 1, 2, 2, 3, 3, 4, 4] and len(set(modes)) == 2
    assert all(line["messages"] in sent for line in lines)  # the prompt each design answered, for SFT export
    assert sorted(calls) == sorted((modes.count(m), 2, 32 if m == "edit" else 40) for m in set(modes))
    # each design is trained on as an answer to its own prompt: one group of two per prompt
    groups = [(s.group, tuple(s.prompt_ids)) for s in phase.samples]
    assert [g for g, _ in groups] == [f"designer:0:{p}" for p in range(5) for _ in range(2)]
    assert all(groups[k][1] == groups[k + 1][1] for k in range(0, 10, 2))
    assert len({ids for _, ids in groups}) == 5
    for sample, mode in zip(phase.samples, [m for m in modes for _ in range(2)], strict=True):
        assert len(sample.completion_ids) <= (32 if mode == "edit" else 40)


def test_the_baseline_on_reasoning_gym_tasks(tmp_path: Path, tokenizer: Any) -> None:
    pytest.importorskip("reasoning_gym")
    config = SelfPlayConfig.from_dict(
        {
            "agent": {"max_new_tokens": 6, "replay_envs": 3, "episodes_per_env": 2, "updates_per_iteration": 1},
            "run": {
                "out": str(tmp_path / "r"),
                "iterations": 1,
                "designer": "off",
                "tensorboard": False,
                "fixed_pool": "reasoning-gym:leg_counting,basic_arithmetic",
            },
        }
    )
    loop = SelfPlay(config, RunDir.create(tmp_path / "r", config), policy=tiny_policy(tokenizer), say=lambda _: None)
    (result,) = loop.train()
    loop.close()
    played = result.replayed
    assert len(played) == 6 and all(t.error is None and t.num_turns == 1 for t in played)
    assert {t.env_id for t in played} <= {"ReasoningGym-leg_counting", "ReasoningGym-basic_arithmetic"}
    # two episodes per environment share a seed: one GRPO group each
    assert played[0].seed == played[1].seed and played[0].env_id == played[1].env_id
    assert result.metrics["train/agent/samples"] == 6 and "agent/return_replay" in result.metrics


@pytest.mark.parametrize(
    ("pool", "expected"),
    [("reasoning-gym:leg_countin", "did you mean 'leg_counting'"), ("reasoning-gym:no_such_task", "unknown")],
)
def test_an_unknown_reasoning_gym_task_fails_when_the_config_loads(pool: str, expected: str) -> None:
    pytest.importorskip("reasoning_gym")
    for designer in ("off", "on"):  # a misspelt pool is an error even while the Designer is on
        with pytest.raises(ConfigError, match="run.fixed_pool") as info:
            SelfPlayConfig.from_dict({"run": {"designer": designer, "fixed_pool": pool}})
        assert expected in str(info.value)


@pytest.mark.parametrize(
    "name", ["selfplay_cpu.yaml", "selfplay_cpu_write.yaml", "selfplay_gpu_vllm.yaml", "selfplay_ray.yaml"]
)
def test_the_example_configs_pass_the_strict_loader(name: str) -> None:
    config = SelfPlayConfig.from_yaml(Path(__file__).resolve().parent.parent / "examples" / name)
    assert config.designer_config().k == config.agent.k and config.train.learning_rate > 0


def test_a_given_policy_without_the_configured_lora_is_warned_about(tmp_path: Path, tokenizer: Any) -> None:
    config = baseline_config(tmp_path / "w").with_overrides(["policy.lora={r: 4, target_modules: [q_proj]}"])
    with pytest.warns(UserWarning, match="config.policy.lora is set"):
        loop = SelfPlay(
            config, even_length_run(tmp_path / "w", config), policy=tiny_policy(tokenizer), say=lambda _: None
        )
    loop.close()


def test_held_out_envs_must_be_seed_environments() -> None:
    with pytest.raises(ConfigError, match="run.held_out_envs' names no seed environment: Nope"):
        SelfPlayConfig.from_dict({"run": {"held_out_envs": ["LightsOut3x3", "Nope"]}})
    assert SelfPlayConfig.from_dict({"run": {"held_out_envs": []}}).run.held_out_envs == []


def designer_config(out: Path, iterations: int) -> SelfPlayConfig:
    return SelfPlayConfig.from_dict(
        {
            "designer": {"prompts_per_iteration": 1, "group_size": 2, "max_new_tokens": 8, "memory_k": 1},
            "agent": {
                "max_new_tokens": 4,
                "replay_envs": 1,
                "episodes_per_env": 2,
                "max_turns": 1,
                "updates_per_iteration": 1,
            },
            "run": {"out": str(out), "iterations": iterations, "seed": 3, "tensorboard": False},
        }
    )


def test_a_designer_run_resumes_from_a_later_checkpoint(tmp_path: Path, tokenizer: Any) -> None:
    # each Designer reset reseeds the document stream; resuming from iteration 1's checkpoint must
    # restore that seed, and the resumed iteration equals the uninterrupted run's
    config = designer_config(tmp_path / "a", 3)
    loop = SelfPlay(config, RunDir.create(tmp_path / "a", config), policy=tiny_policy(tokenizer), say=lambda _: None)
    full = loop.train()
    loop.close()
    config_b = designer_config(tmp_path / "b", 3)
    loop = SelfPlay(
        config_b, RunDir.create(tmp_path / "b", config_b), policy=tiny_policy(tokenizer), say=lambda _: None
    )
    loop.train(iterations=2)
    loop.close()
    resumed = SelfPlay.resume(tmp_path / "b", policy=tiny_policy(tokenizer), say=lambda _: None)
    assert resumed.start == 2
    (last,) = resumed.train()
    resumed.close()
    assert without_times(last.metrics) == without_times(full[2].metrics)


def test_one_process_per_run_folder(tmp_path: Path, tokenizer: Any) -> None:
    import subprocess
    import sys

    config = baseline_config(tmp_path / "r")
    loop = SelfPlay(config, even_length_run(tmp_path / "r", config), policy=tiny_policy(tokenizer), say=lambda _: None)
    code = (
        "import sys\n"
        "from spade_gym.trainer.run import RunDir, RunDirError\n"
        "try:\n"
        "    RunDir.open(sys.argv[1]).lock()\n"
        "except RunDirError as exc:\n"
        "    print(exc)\n"
        "    sys.exit(3)\n"
    )
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r")], capture_output=True, text=True)
    assert done.returncode == 3 and "is in use by another process" in done.stdout
    assert f"PID {__import__('os').getpid()}" in done.stdout
    loop.close()
    done = subprocess.run([sys.executable, "-c", code, str(tmp_path / "r")], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout + done.stderr


def test_replayed_episodes_spread_over_seeds_form_one_group_per_environment(tmp_path: Path, tokenizer: Any) -> None:
    # agent.replay_seeds: 1 plays a group on one seed (GRPO); 3 spreads 6 episodes over 3 seeds,
    # and the group is the environment
    for seeds in (1, 3):
        config = baseline_config(tmp_path / f"s{seeds}", iterations=1).with_overrides(
            [f"agent.replay_seeds={seeds}", "agent.replay_envs=1"]
        )
        loop = SelfPlay(
            config, even_length_run(tmp_path / f"s{seeds}", config), policy=tiny_policy(tokenizer), say=lambda _: None
        )
        (result,) = loop.train()
        loop.close()
        assert len(result.replayed) == 6
        assert len({t.seed for t in result.replayed}) == seeds
        assert [t.seed for t in result.replayed].count(result.replayed[0].seed) == 6 // seeds


def test_replay_seeds_is_checked() -> None:
    with pytest.raises(ConfigError, match="agent.replay_seeds"):
        SelfPlayConfig.from_dict({"agent": {"episodes_per_env": 4, "replay_seeds": 5}})
    with pytest.raises(ConfigError, match="agent.replay_seeds"):
        SelfPlayConfig.from_dict({"agent": {"replay_seeds": 0}})


def test_the_summary_line_says_why_there_is_no_loss() -> None:
    from spade_gym.trainer.summary import summary_line

    stepped = summary_line(0, {"train/loss": 0.5, "train/optimizer_steps": 1.0})
    idle = summary_line(0, {"train/loss": None, "train/optimizer_steps": 0.0})
    assert "loss 0.5000 |" in stepped and "no optimizer step" not in stepped
    assert "loss - (no optimizer step: every group's returns were equal)" in idle


def test_the_summary_line_says_why_there_is_no_regret_and_what_a_regret_of_0_hides() -> None:
    from spade_gym.trainer.summary import summary_line, what_moved

    for missing in (None, float("nan")):  # a run's metrics hold NaN where nothing was measured
        none = summary_line(1, {"designer/designs": 4, "designer/accepted": 0, "regret/mean": missing})
        assert "regret - (none accepted) |" in none
    gap = {"designer/designs": 4, "regret/mean": 0.0, "agent/return_hint": 0.0, "agent/return_nohint": 0.125}
    assert "regret 0.00 (hint 0.00, no hint 0.12) |" in summary_line(0, gap)
    assert "no hint 0.12, out of reach) |" in summary_line(0, gap | {"designer/outcomes": {"out_of_reach": 2}})
    lines = what_moved([gap, {"regret/mean": None}])
    assert "regret of accepted designs: 0 -> - (mean 0) (-: no accepted design in that iteration)" in lines


def test_the_one_screen_example_shows_its_defaults() -> None:
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    done = subprocess.run(
        [sys.executable, str(root / "examples" / "selfplay.py"), "--help"], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 0 and "(default: 2)" in done.stdout and "runs/example-registry" in done.stdout


def test_a_designer_of_its_own_writes_the_designs_and_is_not_trained(tmp_path: Path, tokenizer: Any) -> None:
    # designer.policy: a second, frozen model writes every design; the trained policy writes none and
    # no design becomes a training sample (the Agent's samples are the only ones)
    model = tmp_path / "designer-model"
    frozen = tiny_policy(tokenizer)
    frozen.model.save_pretrained(model)
    tokenizer.save_pretrained(model)
    config = SelfPlayConfig.from_dict(
        {
            "designer": {"policy": str(model), "prompts_per_iteration": 2, "group_size": 2, "max_new_tokens": 12},
            "agent": {"max_new_tokens": 4, "replay_envs": 0, "max_turns": 1},
            "run": {"out": str(tmp_path / "run"), "iterations": 1, "tensorboard": False},
        }
    )
    loop = SelfPlay(config, RunDir.create(tmp_path / "run", config), policy=tiny_policy(tokenizer), say=lambda _: None)
    assert loop.designer_policy is not loop.generator
    calls: list[str] = []
    for name, policy in (("designer", loop.designer_policy), ("agent", loop.generator)):
        generate = policy.generate

        def counted(prompts: Any, sampling: Any, name: str = name, generate: Any = generate) -> Any:
            calls.append(name)
            return generate(prompts, sampling)

        policy.generate = counted
    phase = loop.design(0, 3)
    loop.close()
    assert calls and set(calls) == {"designer"} and len(phase.outcomes) == 4
    assert not [s for s in phase.samples if s.group.startswith("designer:")]
    bad = SelfPlayConfig.from_dict({"designer": {"policy": "llamacpp:" + str(tmp_path / "missing.gguf")}})
    with pytest.raises(ConfigError, match="designer.policy"):
        SelfPlay(bad, RunDir.create(tmp_path / "bad", bad), policy=tiny_policy(tokenizer), say=lambda _: None)
