"""The cold start (spade_gym.trainer.warmstart): data from oracles and seed programs, never the
held-out environments; LoRA SFT on the target tokens only; cached by content hash; resumable."""

from __future__ import annotations

import copy
import dataclasses
import json
import random
from pathlib import Path
from typing import Any

import pytest

from spade_gym.agent import extract_action
from spade_gym.designer import extract_program
from spade_gym.program import EnvProgram, knobs
from spade_gym.registry.gymnasium import HELD_OUT_SEED_ENVS, bundled_registry_path
from spade_gym.registry.store import Registry
from spade_gym.trainer.config import ConfigError, SelfPlayConfig
from spade_gym.trainer.warmstart import (
    build_dataset,
    check_chat_template,
    check_warmstart_config,
    format_action,
    run_warmstart,
    sample_loss,
    training_pool,
    variants,
    warmstart_dir,
    warmstart_hash,
)
from spade_gym.validation import validate

# Two short programs (short prompts and targets keep the tiny runs quick on a CPU).
REVERSE = '''import random

DIGITS = 4


class Env:
    """Reverse the digits of a seeded number; the digits in reverse order pay 1.0."""

    name = "ReverseDigits"
    setting = "reasoning"
    max_turns = 1

    def reset(self, seed):
        rng = random.Random(seed)
        self.number = "".join(str(rng.randint(1, 9)) for _ in range(DIGITS))
        return "Write the digits of " + self.number + " in reverse order.", {}

    def step(self, action):
        correct = action.strip() == self.number[::-1]
        return ("Correct." if correct else "Wrong."), (1.0 if correct else 0.0), True, False, {"correct": correct}

    def hint(self):
        return "The answer starts with " + self.number[-1] + "."

    def oracle(self):
        return self.number[::-1]
'''

SUBMIT = '''import json
import random


class Env:
    """Add two seeded numbers and submit the sum with the submit tool; the right sum pays 1.0."""

    name = "SubmitSum"
    setting = "tool_use"
    max_turns = 2
    tools = [{"type": "function", "function": {"name": "submit", "description": "Submit the sum.",
              "parameters": {"type": "object", "properties": {"value": {"type": "integer"}}, "required": ["value"]}}}]

    def reset(self, seed):
        rng = random.Random(seed)
        self.a, self.b = rng.randint(10, 99), rng.randint(10, 99)
        return "Submit the sum of " + str(self.a) + " and " + str(self.b) + ".", {}

    def step(self, action):
        try:
            call = json.loads(action)
            value = call["arguments"]["value"]
        except (ValueError, KeyError, TypeError):
            return "Send a submit tool call.", 0.0, False, False, {}
        ok = value == self.a + self.b
        return ("Correct." if ok else "Wrong."), (1.0 if ok else 0.0), True, False, {}

    def hint(self):
        return "The tens digits add up to " + str(self.a // 10 + self.b // 10) + "."

    def oracle(self):
        return json.dumps({"name": "submit", "arguments": {"value": self.a + self.b}})
'''

LORA = {"r": 8, "lora_alpha": 16, "target_modules": ["q_proj", "v_proj"]}


def _registry(tmp_path: Path, *sources: str) -> Registry:
    reg = Registry(tmp_path / "reg", create=True)
    for source in sources:
        program = EnvProgram(source)
        name = "ReverseDigits" if "ReverseDigits" in source else "SubmitSum"
        setting = "tool_use" if "tool_use" in source else "reasoning"
        reg.add(program, name=name, setting=setting, max_turns=2 if setting == "tool_use" else 1, description=name)
    return reg


def _tiny(tmp_path: Path, *extra: str) -> SelfPlayConfig:
    return SelfPlayConfig().with_overrides(
        [
            f"policy.lora={json.dumps(LORA)}",
            "designer.document_max_tokens=32",
            "designer.memory_k=1",
            "warmstart.agent_seeds=2",
            "warmstart.agent_examples=4",
            "warmstart.agent_steps=4",
            "warmstart.designer_examples=2",
            "warmstart.designer_steps=2",
            "warmstart.learning_rate=1e-3",
            "warmstart.save_every=2",
            f"warmstart.cache_dir={tmp_path / 'cache'}",
            *extra,
        ]
    )


# ------------------------------------------------------------------------------------------------
# No model needed
# ------------------------------------------------------------------------------------------------


def test_section_defaults_and_range_checks() -> None:
    config = SelfPlayConfig()
    assert config.warmstart.enabled is False
    assert SelfPlayConfig.from_dict({"warmstart": {"enabled": True}}).warmstart.enabled
    for key, value in [
        ("warmstart.micro_batch_size", "0"),
        ("warmstart.learning_rate", "0"),
        ("warmstart.edit_share", "1.5"),
        ("warmstart.max_seq_tokens", "8"),
    ]:
        with pytest.raises(ConfigError) as info:
            config.with_overrides([f"{key}={value}"])
        assert info.value.key == key
    with pytest.raises(ConfigError) as info:
        config.with_overrides(["warmstart.agent_steps=0", "warmstart.designer_steps=0"])
    assert info.value.key == "warmstart.agent_steps"
    with pytest.raises(ConfigError, match="did you mean 'warmstart.agent_steps'"):
        config.with_overrides(["warmstart.agent_step=3"])
    assert "warmstart:" in config.to_yaml()


def test_pool_is_the_seed_library_minus_held_out() -> None:
    config = SelfPlayConfig()
    names = {r.name for r in training_pool(config)}
    with Registry(bundled_registry_path()) as bundled:
        every = {r.name for r in bundled}
    assert names == every - set(HELD_OUT_SEED_ENVS)
    assert not names & set(HELD_OUT_SEED_ENVS)


def test_bad_pools_are_refused_naming_the_setting() -> None:
    with Registry(bundled_registry_path()) as bundled:
        every = sorted(r.name for r in bundled)
    config = SelfPlayConfig().with_overrides([f"run.held_out_envs={json.dumps(every)}"])
    with pytest.raises(ConfigError) as info:
        check_warmstart_config(config)
    assert info.value.key == "run.held_out_envs"
    baseline = SelfPlayConfig()
    baseline.run = dataclasses.replace(baseline.run, designer="off", fixed_pool="reasoning-gym:basic_arithmetic")
    with pytest.raises(ConfigError) as info:
        check_warmstart_config(baseline)
    assert info.value.key == "run.fixed_pool"


def test_format_action_round_trips_through_the_runner() -> None:
    assert format_action("reasoning", "42") == "<answer>42</answer>"
    assert extract_action(format_action("game", "up"), "game").action == "up"
    call = '{"name":"submit","arguments":{"value":7}}'
    parsed = extract_action(format_action("tool_use", call), "tool_use")
    assert parsed.format_ok and json.loads(parsed.action or "") == json.loads(call)


def test_variants_move_knobs_and_rename_and_still_validate() -> None:
    assert knobs(REVERSE) == {"DIGITS": 4}
    assert knobs(SUBMIT) == {}
    rng = random.Random(0)
    seen = set()
    for _ in range(3):
        variant = variants(REVERSE, rng)
        seen.add(variant)
        assert knobs(variant)["DIGITS"] in (3, 5)
        assert variant.count('"""Reverse the digits of a seeded number') == 1  # docstring kept
        assert 'name = "ReverseDigits"' in variant  # the registry gives it the next version
        fenced = f"```python\n{variant}```"
        assert extract_program(fenced).source == variant
    assert len(seen) > 1
    report = validate(variants(REVERSE, random.Random(1)))
    assert report.accepted, report.feedback()
    with pytest.raises(ValueError, match="no difficulty knob"):
        variants(SUBMIT, rng)


def test_chat_template_without_system_role_is_refused() -> None:
    from transformers import AutoTokenizer

    from spade_gym.policies.embedded import embedded_model_dir

    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir())
    check_chat_template(tokenizer)  # SmolLM2's template has a system role
    drops = copy.deepcopy(tokenizer)
    drops.chat_template = (
        "{% for m in messages %}{% if m['role'] != 'system' %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
        "<|im_end|>\n{% endif %}{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    with pytest.raises(ConfigError, match="drops the system message") as info:
        check_chat_template(drops, "some/model")
    assert info.value.key == "policy.spec"
    raises = copy.deepcopy(tokenizer)
    raises.chat_template = (
        "{% for m in messages %}{% if m['role'] == 'system' %}{{ raise_exception('System role not supported') }}"
        "{% endif %}{{ m['content'] }}{% endfor %}"
    )
    with pytest.raises(ConfigError, match="cannot render a system message") as info:
        check_chat_template(raises)
    assert info.value.key == "policy.spec"


# ------------------------------------------------------------------------------------------------
# With the embedded model
# ------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def lora_policy() -> Any:
    from spade_gym.policies import load_policy

    return load_policy("default", lora=LORA)


@pytest.mark.slow
def test_held_out_envs_never_appear_in_the_data(lora_policy: Any) -> None:
    config = SelfPlayConfig().with_overrides(["warmstart.designer_examples=2", "warmstart.edit_share=0"])
    data = build_dataset(config, lora_policy)
    assert data.of("agent") and data.of("designer")
    held = set(config.run.held_out_envs)
    assert not held & set(data.envs)
    assert not held & {s.env for s in data.samples}
    for s in data.samples:  # not in the memory shown to the Designer either
        text = lora_policy.tokenizer.decode(list(s.prompt_ids) + list(s.target_ids))
        assert not any(f"{name}-v" in text or f'"{name}"' in text for name in held)
    for s in data.of("designer"):
        assert extract_program(s.target).source is not None


@pytest.mark.slow
def test_pool_without_working_oracle_is_refused(lora_policy: Any, tmp_path: Path) -> None:
    broken = REVERSE.replace("return self.number[::-1]\n", "return self.number\n")
    with _registry(tmp_path, broken) as reg, pytest.raises(ConfigError, match="oracle") as info:
        build_dataset(_tiny(tmp_path), lora_policy, registry=reg)
    assert info.value.key == "run.held_out_envs"


@pytest.mark.slow
def test_loss_is_on_the_target_tokens_only(lora_policy: Any, tmp_path: Path) -> None:
    import torch

    with _registry(tmp_path, REVERSE, SUBMIT) as reg:
        data = build_dataset(_tiny(tmp_path), lora_policy, registry=reg)
    for s in (data.of("agent")[0], data.of("designer")[0]):
        assert lora_policy.tokenizer.decode(list(s.target_ids)) == s.target + "<|im_end|>"
        full = torch.tensor([list(s.prompt_ids) + list(s.target_ids)])
        labels = torch.tensor([[-100] * len(s.prompt_ids) + list(s.target_ids)])
        with torch.no_grad():
            reference = lora_policy.model(input_ids=full, labels=labels).loss  # HF's masked LM loss
            ours = sample_loss(lora_policy, [s])
        assert float(ours) == pytest.approx(float(reference), rel=1e-4, abs=1e-4)
    reasoning = next(s for s in data.of("agent") if s.env == "ReverseDigits")
    tool = next(s for s in data.of("agent") if s.env == "SubmitSum")
    assert reasoning.target.startswith("<answer>") and tool.target.startswith("<tool_call>")
    assert {s.kind for s in data.of("designer")} == {"write", "edit"}


@pytest.mark.slow
def test_tiny_run_lowers_the_loss_and_is_reused_from_the_cache(lora_policy: Any, tmp_path: Path) -> None:
    from spade_gym.trainer.selfplay import trainable_state

    config = _tiny(tmp_path)
    with _registry(tmp_path, REVERSE, SUBMIT) as reg:
        first = run_warmstart(config, lora_policy, registry=reg)
        trained = {k: v.clone() for k, v in trainable_state(lora_policy).items()}
        assert not first.cached and first.steps_run == first.steps == 6 and first.resumed_from == 0
        assert len(first.losses) == 6
        for role in ("agent", "designer"):
            assert first.loss_after[role] < first.loss_before[role], (role, first.loss_before, first.loss_after)
        assert first.adapter_path.is_file() and first.path.parent == warmstart_dir(config)
        second = run_warmstart(config, lora_policy, registry=reg)
    assert second.cached and second.steps_run == 0
    assert (second.hash, second.path) == (first.hash, first.path)
    assert second.losses == first.losses
    for key, value in trainable_state(lora_policy).items():
        assert torch_equal(value, trained[key])


@pytest.mark.slow
def test_a_fully_fine_tuned_run_trains_every_weight_after_the_cold_start(tmp_path: Path) -> None:
    from spade_gym.policies import load_policy

    policy = load_policy("default")  # no adapters: the run trains all weights
    before = {name: p.detach().clone() for name, p in policy.model.named_parameters()}
    config = _tiny(tmp_path, "policy.lora=null", "warmstart.designer_examples=0", "warmstart.designer_steps=0")
    with _registry(tmp_path, REVERSE, SUBMIT) as reg:
        result = run_warmstart(config, policy, registry=reg)
    assert result.merged and not hasattr(policy.model, "peft_config")
    parameters = dict(policy.model.named_parameters())
    assert parameters.keys() == before.keys()
    assert all(p.requires_grad for p in parameters.values())  # were frozen by the temporary adapters
    assert any(not torch_equal(parameters[name], before[name]) for name in before)  # the adapters were merged


def torch_equal(a: Any, b: Any) -> bool:
    import torch

    return bool(torch.equal(a, b))


@pytest.mark.slow
def test_run_designer_does_not_change_the_hash(lora_policy: Any, tmp_path: Path) -> None:
    on = _tiny(tmp_path)
    off = _tiny(tmp_path, "run.designer=off", "run.out=runs/baseline")
    with _registry(tmp_path, REVERSE, SUBMIT) as reg:
        hashes = [warmstart_hash(c, lora_policy, build_dataset(c, lora_policy, registry=reg)) for c in (on, off)]
        other = _tiny(tmp_path, "warmstart.seed=5")
        changed = warmstart_hash(other, lora_policy, build_dataset(other, lora_policy, registry=reg))
    assert hashes[0] == hashes[1] != changed
    assert warmstart_dir(on) / hashes[0][:24] == warmstart_dir(off) / hashes[1][:24]


@pytest.mark.slow
def test_interrupted_run_resumes_at_the_saved_step(lora_policy: Any, tmp_path: Path) -> None:
    config = _tiny(tmp_path, "warmstart.designer_examples=0", "warmstart.designer_steps=0", "warmstart.seed=3")
    with _registry(tmp_path, REVERSE, SUBMIT) as reg:
        stopped = run_warmstart(config, lora_policy, registry=reg, stop_after=2)
        assert stopped.steps_run == 2 and not stopped.adapter_path.exists()
        assert (stopped.path / "state.pt").is_file()
        resumed = run_warmstart(config, lora_policy, registry=reg)
    assert resumed.resumed_from == 2 and resumed.steps_run == resumed.steps - 2 == 2
    assert resumed.losses[:2] == stopped.losses and len(resumed.losses) == 4
    assert resumed.loss_before == stopped.loss_before
    assert not (resumed.path / "state.pt").exists() and resumed.adapter_path.is_file()


@pytest.mark.slow
def test_selfplay_applies_the_cold_start_once(lora_policy: Any, tmp_path: Path) -> None:
    from spade_gym.trainer.run import RunDir
    from spade_gym.trainer.selfplay import SelfPlay

    with Registry(bundled_registry_path()) as bundled:
        held = sorted(r.name for r in bundled if r.name != "ArithmeticChain")
    config = _tiny(
        tmp_path,
        "warmstart.enabled=true",
        f"run.held_out_envs={json.dumps(held)}",
        "warmstart.designer_examples=0",
        "warmstart.designer_steps=0",
        "warmstart.agent_steps=2",
        "warmstart.micro_batch_size=1",
        f"run.out={tmp_path / 'run'}",
        "run.tensorboard=false",
    )
    loop = SelfPlay(config, RunDir.create(config.run.out, config), policy=lora_policy, say=lambda line: None)
    try:
        assert loop.warmstart is not None and loop.warmstart.envs == ["ArithmeticChain"]
        recorded = json.loads((loop.run.path / "warmstart.json").read_text())
        assert recorded["hash"] == loop.warmstart.hash and Path(recorded["adapter_path"]).is_file()
        loop._checkpoint(0, {})
    finally:
        loop.close()
    resumed = SelfPlay.resume(config.run.out, policy=lora_policy, say=lambda line: None)
    try:
        assert resumed.warmstart is None and resumed.start == 1  # the checkpoint's weights, not the cold start
    finally:
        resumed.close()


@pytest.mark.slow
def test_cli_warmstart_prints_the_adapter_and_the_loss(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from spade_gym.cli import app

    with Registry(bundled_registry_path()) as bundled:
        held = sorted(r.name for r in bundled if r.name != "SequenceNextTerm")
    config = tmp_path / "run.yaml"
    config.write_text(
        "warmstart:\n  agent_steps: 1\n  designer_examples: 0\n  designer_steps: 0\n  micro_batch_size: 1\n"
        f"  cache_dir: {tmp_path / 'cache'}\n"
        f"run:\n  held_out_envs: {json.dumps(held)}\n"
    )
    result = CliRunner().invoke(app, ["warmstart", "--config", str(config), "--set", "warmstart.seed=1"])
    assert result.exit_code == 0, result.output
    assert "adapters:" in result.output and "train loss" in result.output
    assert str(tmp_path / "cache") in result.output.replace("\n", "")
    bad = CliRunner().invoke(app, ["warmstart", "--config", str(config), "--set", "warmstart.edit_share=2"])
    assert bad.exit_code == 2 and "warmstart.edit_share" in bad.output


@pytest.mark.slow
def test_edit_targets_cover_every_parent_of_the_pool(lora_policy: Any) -> None:
    # the CPU example's pool: the graded environments but the two it holds out as whole unseen
    # environments; 8 edit targets visit every one of the pool, none of the held-out ones
    config = SelfPlayConfig.from_yaml(Path(__file__).resolve().parents[1] / "examples" / "selfplay_cpu.yaml")
    data = build_dataset(config, lora_policy)
    edits = [s for s in data.of("designer") if s.kind == "edit"]
    assert len(edits) == config.warmstart.designer_examples == 8
    assert {"ColorDoorRooms", "CountListItems"} <= set(config.run.held_out_envs)
    assert {s.env for s in edits} == set(data.envs) == {"ColorCodeLookup", "LargerOfTwo", "OrderStatusLookup"}
