"""The self-play configuration: strict loading (unknown keys with suggestions, wrong types, ranges),
YAML 1.2 scalars, the documented YAML round trip, dotted overrides, describe_config, and the mapping
onto the library's own settings."""

from __future__ import annotations

import dataclasses
import functools
import math
import re
import typing
from pathlib import Path
from typing import Any

import pytest
from ranges import range_edges

from spade_gym.designer import DESIGNER_TEMPERATURE
from spade_gym.errors import SpadeError
from spade_gym.options import config_fields, type_name
from spade_gym.trainer.config import (
    SECTIONS,
    ConfigError,
    RunSection,
    SelfPlayConfig,
    describe_config,
    parse_fixed_pool,
)
from spade_gym.trainer.grpo import GRPOConfig, GRPOConfigError


def leaf_fields(cls: type = SelfPlayConfig, prefix: str = "") -> list[tuple[str, dataclasses.Field[Any]]]:
    hints = typing.get_type_hints(cls)
    out = []
    for f in config_fields(cls):
        dotted = f"{prefix}{f.name}"
        if dataclasses.is_dataclass(hints[f.name]):
            out.extend(leaf_fields(hints[f.name], dotted + "."))
        else:
            out.append((dotted, f))
    return out


def error_of(data: dict[str, Any]) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        SelfPlayConfig.from_dict(data)
    return info.value


# ------------------------------------------------------------------------------------------------
# Defaults and fields
# ------------------------------------------------------------------------------------------------


def test_defaults_are_valid_and_every_field_has_help() -> None:
    config = SelfPlayConfig()
    config.validate()
    assert SelfPlayConfig.from_dict({}) == config
    assert list(SECTIONS) == [f.name for f in dataclasses.fields(SelfPlayConfig)]
    fields = leaf_fields()
    assert len(fields) > 50
    for dotted, f in fields:
        assert f.metadata.get("help", "").strip(), f"{dotted} has no help"


def test_settings_choices_match_the_program_contract() -> None:
    from spade_gym.program import SETTINGS

    hint = typing.get_type_hints(type(SelfPlayConfig().designer))["settings"]  # a tuple of Setting, any length
    assert typing.get_args(typing.get_args(hint)[0]) == tuple(SETTINGS)
    assert tuple(SelfPlayConfig().designer.settings) == tuple(SETTINGS)


def test_config_error_is_a_spade_error() -> None:
    assert issubclass(ConfigError, SpadeError)
    assert error_of({"trian": {}}).category == "CONFIG"


# ------------------------------------------------------------------------------------------------
# Unknown keys
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "key", "suggestion", "known"),
    [
        ({"trian": {}}, "trian", "'train'", "Known keys (top-level sections): policy, designer, agent, train, run"),
        (
            {"train": {"learnig_rate": 1e-4}},
            "train.learnig_rate",
            "'train.learning_rate'",
            "Known keys of section 'train': learning_rate,",
        ),
        (
            {"designer": {"reward": {"duplcate": -1.0}}},
            "designer.reward.duplcate",
            "'designer.reward.duplicate'",
            "of section 'designer.reward'",
        ),
        ({"learning_rate": 1e-4}, "learning_rate", "'train.learning_rate'", "top-level sections"),  # wrong section
        ({"run": {"iterations": 2, "seeed": 1}}, "run.seeed", "'run.seed'", "Known keys of section 'run'"),
    ],
)
def test_unknown_key_names_the_dotted_key_and_a_suggestion(
    data: dict[str, Any], key: str, suggestion: str, known: str
) -> None:
    error = error_of(data)
    assert error.key == key
    assert f"unknown config key {key!r}" in str(error)
    assert f"did you mean {suggestion}?" in str(error)
    assert known in str(error)


def test_unknown_key_without_a_close_match_lists_the_known_keys() -> None:
    error = error_of({"agent": {"zzzzzz": 1}})
    assert error.key == "agent.zzzzzz"
    assert "did you mean" not in str(error)
    assert "Known keys of section 'agent': k, max_new_tokens" in str(error)


def test_unknown_key_in_a_yaml_file(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("train:\n  learning_rate: 1e-4\n  clip_epsilon: 0.3\n")
    with pytest.raises(ConfigError, match=r"'train.clip_epsilon'; did you mean 'train.clip_eps'") as info:
        SelfPlayConfig.from_yaml(path)
    assert info.value.key == "train.clip_epsilon"


# ------------------------------------------------------------------------------------------------
# Wrong types
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "key", "fragment"),
    [
        ({"run": {"iterations": "3"}}, "run.iterations", "'3' (str); expected int"),
        ({"run": {"iterations": 3.0}}, "run.iterations", "3.0 (float); expected int"),
        ({"run": {"iterations": True}}, "run.iterations", "True (bool); expected int"),
        ({"run": {"tensorboard": 1}}, "run.tensorboard", "1 (int); expected bool (true or false)"),
        ({"run": {"tensorboard": "yes"}}, "run.tensorboard", "'yes' (str); expected bool"),
        ({"train": {"learning_rate": "fast"}}, "train.learning_rate", "'fast' (str); expected float"),
        ({"train": {"learning_rate": True}}, "train.learning_rate", "True (bool); expected float"),
        ({"train": {"learning_rate": None}}, "train.learning_rate", "= None; expected float"),
        ({"train": {"loss_type": "ppo"}}, "train.loss_type", "'ppo' (str); expected one of 'token', 'sequence'"),
        ({"run": {"designer": False}}, "run.designer", "False (bool); expected one of 'on', 'off'"),
        ({"designer": {"settings": "game"}}, "designer.settings", "expected a non-empty list of one of"),
        (
            {"designer": {"settings": ["game", "games"]}},
            "designer.settings[1]",
            "'games' (str); expected one of 'reasoning'",
        ),
        ({"designer": {"settings": ["game", 3]}}, "designer.settings[1]", "3 (int); expected one of"),
        ({"agent": {"max_turns": "3"}}, "agent.max_turns", "'3' (str); expected int"),
        ({"agent": {"max_turns": 2.5}}, "agent.max_turns", "expected int"),
        ({"train": {"max_grad_norm": "1"}}, "train.max_grad_norm", "expected float or null"),
        ({"policy": {"lora": [8]}}, "policy.lora", "[8] (list); expected a mapping or null"),
        ({"policy": {"lora": {1: 2}}}, "policy.lora (a key)", "1 (int); expected str"),
        ({"policy": {"device": 0}}, "policy.device", "0 (int); expected str or null"),
        ({"run": 5}, "run", "5 (int); expected a section"),
        ({"designer": {"reward": [1]}}, "designer.reward", "expected a section"),
        # the key itself, as written, not as text
        ({"policy": {"lora": {1.5: 2}}}, "policy.lora (a key)", "1.5 (float); expected str"),
        ({"policy": {"lora": {True: 2}}}, "policy.lora (a key)", "True (bool); expected str"),
        # with several bad entries, the first one
        ({"designer": {"settings": ["x", "y"]}}, "designer.settings[0]", "'x' (str); expected one of"),
        ({"train": {"adam_betas": ["a", "b"]}}, "train.adam_betas[0]", "'a' (str); expected float"),
        ({"train": {"adam_betas": [0.9, True]}}, "train.adam_betas[1]", "True (bool); expected float"),
        ({"train": {"adam_betas": 0.9}}, "train.adam_betas", "0.9 (float); expected a list of 2 float"),
        ({"train": {"std_ddof": True}}, "train.std_ddof", "True (bool); expected int"),
        ({"policy": {"lora": {"r": 8, 7: 2, 9: 1}}}, "policy.lora (a key)", "7 (int); expected str"),
        ({"train": {"learning_rate": 10**5000}}, "train.learning_rate", "<an int of more than"),
    ],
)
def test_wrong_type_names_key_value_and_expected_type(data: dict[str, Any], key: str, fragment: str) -> None:
    error = error_of(data)
    assert error.key == key
    assert f"config key {key!r}" in str(error)
    assert fragment in str(error)


def test_an_int_is_accepted_for_a_float() -> None:
    config = SelfPlayConfig.from_dict({"train": {"learning_rate": 1, "max_grad_norm": 2}})
    assert config.train.learning_rate == 1.0 and type(config.train.learning_rate) is float
    assert type(config.train.max_grad_norm) is float


def test_validate_checks_types_of_a_config_built_in_python() -> None:
    config = SelfPlayConfig(run=RunSection(iterations="2"))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"'run.iterations' = '2' \(str\); expected int"):
        config.validate()
    # the train section is GRPOConfig, which checks its fields when built
    with pytest.raises(GRPOConfigError, match=r"GRPOConfig.epochs must be an int >= 1, got '2'") as info:
        GRPOConfig(epochs="2")  # type: ignore[arg-type]
    assert (info.value.field, info.value.value) == ("epochs", "2")


# ------------------------------------------------------------------------------------------------
# Ranges
# ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "key", "fragment"),
    [
        ({"run": {"iterations": 0}}, "run.iterations", "expected an int >= 1"),
        ({"run": {"seed": -1}}, "run.seed", "expected an int >= 0"),
        ({"run": {"keep_checkpoints": 0}}, "run.keep_checkpoints", "expected an int >= 1"),
        ({"designer": {"edit_probability": 1.5}}, "designer.edit_probability", "expected a number in [0, 1]"),
        ({"designer": {"temperature": 0.0}}, "designer.temperature", "greedy samples is degenerate"),
        ({"designer": {"group_size": 1}}, "designer.group_size", "expected an int >= 2"),
        ({"designer": {"settings": []}}, "designer.settings", "expected a non-empty list of one of"),
        ({"designer": {"settings": ["game", "game"]}}, "designer.settings", "distinct"),
        ({"designer": {"top_p": 0.0}}, "designer.top_p", "(0, 1]"),
        ({"designer": {"reward": {"trivial_at": 2.0}}}, "designer.reward.trivial_at", "[0, 1]"),
        ({"agent": {"k": 0}}, "agent.k", ">= 1"),
        ({"agent": {"max_turns": 0}}, "agent.max_turns", ">= 1"),
        ({"agent": {"replay_rho": -0.1}}, "agent.replay_rho", "[0, 1]"),
        ({"agent": {"replay_beta": 0.0}}, "agent.replay_beta", "> 0"),
        ({"train": {"learning_rate": float("nan")}}, "train.learning_rate", "finite number > 0"),
        ({"train": {"clip_eps_high": 0.0}}, "train.clip_eps_high", "> 0"),
        ({"train": {"clip_eps": 1.0}}, "train.clip_eps", "(0, 1)"),
        ({"train": {"adam_betas": [0.9]}}, "train.adam_betas", "two numbers in [0, 1)"),
        ({"train": {"adam_betas": [0.9, 1.0]}}, "train.adam_betas", "two numbers in [0, 1)"),
        ({"train": {"adam_betas": [0.9, 0.9, 0.9]}}, "train.adam_betas", "two numbers in [0, 1)"),
        ({"train": {"adam_betas": [math.nan, 0.9]}}, "train.adam_betas", "two numbers in [0, 1)"),
        ({"train": {"std_ddof": 2}}, "train.std_ddof", "an int in [0, 1]"),
        ({"train": {"mini_batches": 0}}, "train.mini_batches", ">= 1"),
        ({"train": {"kl_coef": -1.0}}, "train.kl_coef", ">= 0"),
        ({"train": {"designer_weight": 0.0, "agent_weight": 0}}, "train.designer_weight", "nothing would be trained"),
        ({"policy": {"device": "gpu"}}, "policy.device", "'cpu', 'cuda', 'cuda:N', 'mps' or null"),
        ({"policy": {"spec": " "}}, "policy.spec", "policy spec"),
        ({"run": {"fixed_pool": "reasoning_gym:leg_counting"}}, "run.fixed_pool", "'seed-library' or 'reasoning-gym:"),
        ({"run": {"designer": "off"}, "agent": {"replay_envs": 0}}, "agent.replay_envs", "set agent.replay_envs >= 1"),
    ],
)
def test_range_errors_name_the_key(data: dict[str, Any], key: str, fragment: str) -> None:
    error = error_of(data)
    assert error.key == key
    assert repr(key) in str(error)
    assert fragment in str(error)


def nested(key: str, value: Any) -> dict[str, Any]:
    """``{"a": {"b": value}}`` for ``"a.b"``."""
    *parents, name = key.split(".")
    data: dict[str, Any] = {name: value}
    for part in reversed(parents):
        data = {part: data}
    return data


def ranged_keys(cls: type = SelfPlayConfig, prefix: str = "") -> list[tuple[str, Any, list[Any], str, int | None]]:
    """``(dotted key, base type, Annotated metadata, help, slot)`` of every leaf key with a range;
    ``slot``: the element of a tuple key (``train.adam_betas``) the range is of, else ``None``."""
    hints = typing.get_type_hints(cls, include_extras=True)
    out = []
    for f in config_fields(cls):
        tp, dotted = hints[f.name], f"{prefix}{f.name}"
        if dataclasses.is_dataclass(tp):
            out.extend(ranged_keys(tp, dotted + "."))
        tuple_key = typing.get_origin(tp) is tuple
        for n, arm in enumerate((tp, *typing.get_args(tp))):
            if typing.get_origin(arm) is typing.Annotated and typing.get_origin(arm.__origin__) is not tuple:
                slot = n - 1 if tuple_key else None  # (a list's length, designer.settings, is tested on its own)
                out.append((dotted, arm.__origin__, list(arm.__metadata__), f.metadata["help"], slot))
    return out


def in_slot(key: str, slot: int | None, value: Any) -> Any:
    """``value`` as the key's value: itself, or put in element ``slot`` of the key's default (a list)."""
    if slot is None:
        return value
    node: Any = SelfPlayConfig()
    for part in key.split("."):
        node = getattr(node, part)
    elements = list(node)
    elements[slot] = value
    return elements


#: Keys whose accepted edges also need another key moved (RewardConfig checks window_low <= window_high).
WIDEST_OTHER_END = {
    "designer.reward.window_low": ["designer.reward.window_high=1.0"],
    "designer.reward.window_high": ["designer.reward.window_low=0.0"],
}


def test_every_range_is_checked_at_both_edges_and_errors_say_what_the_help_says() -> None:
    help_types = dict(re.findall(r"^  ([\w.]+): (.*) = ", describe_config(), re.MULTILINE))
    keys = ranged_keys()
    assert len(keys) > 40
    for key, base, metadata, help, slot in keys:
        assert not re.search(r"[<>]=? ?\d|in [\[(]\d", help), f"{key}: the help restates the range"
        refused, accepted = range_edges(base, metadata)
        assert refused and accepted, key
        for value in map(functools.partial(in_slot, key, slot), refused):
            error = error_of(nested(key, value))
            assert error.key == key
            assert str(error) == f"config key {key!r} = {value!r}; expected {help_types[key]}"
        for value in map(functools.partial(in_slot, key, slot), accepted):
            node: Any = SelfPlayConfig().with_overrides([f"{key}={value!r}", *WIDEST_OTHER_END.get(key, [])])
            for part in key.split("."):
                node = getattr(node, part)
            assert node == (value if slot is None else tuple(value)), key
    # the train section's keys are GRPOConfig's ranges
    assert {key for key, *_ in keys} >= {
        f"train.{f.name}"
        for f in dataclasses.fields(GRPOConfig)
        if typing.get_type_hints(GRPOConfig)[f.name] is not bool
    } - {"train.loss_type"}


def test_the_range_texts() -> None:
    text = describe_config()
    for line in (
        "run.iterations: an int >= 1 = 3",
        "run.seed: an int >= 0 = 0",
        "designer.group_size: an int >= 2 (a group of one design has no relative advantage) = 4",
        "designer.temperature: a finite number > 0 (a group of greedy samples is degenerate) = ",
        "designer.top_p: a number in (0, 1] = 1.0",
        "designer.edit_probability: a number in [0, 1] or one of 'auto' = auto",
        "designer.reward.invalid: a finite number = -1.0",
        "designer.reward.window_low: a number in [0, 1] = 0.3",
        "ray.generation_gpus: a finite number >= 0 = 1.0",
        "ray.num_cpus: an int >= 1 or null = null",
        "train.learning_rate: a finite number > 0 = 1.0e-05",
        "train.adam_betas: two numbers in [0, 1) = [0.9, 0.999]",
        "train.clip_eps: a number in (0, 1) = 0.2",
        "train.std_ddof: an int in [0, 1] = 0",
        "train.max_grad_norm: a finite number > 0 or null = 1.0",
    ):
        assert f"  {line}" in text, line
    assert "  # self-play iterations; an int >= 1\n  iterations: 3\n" in SelfPlayConfig().to_yaml()


def test_every_example_config_loads() -> None:
    examples = sorted((Path(__file__).resolve().parents[1] / "examples").glob("*.yaml"))
    assert examples
    for path in examples:
        config = SelfPlayConfig.from_yaml(path)
        assert SelfPlayConfig.from_dict(config.to_dict()) == config, path


def test_designer_config_ranges_are_its_field_types() -> None:
    from spade_gym.designer import DesignerConfig

    hints = typing.get_type_hints(DesignerConfig, include_extras=True)
    for name in ("k", "edit_probability", "edit_max_new_tokens"):
        metadata = list(typing.get_args(hints[name])[1:])
        base = typing.get_args(hints[name])[0]
        refused, accepted = range_edges(base, metadata)
        for value in refused:
            with pytest.raises(
                ValueError,
                match=rf"^DesignerConfig.{name} must be {re.escape(type_name(hints[name], none='None'))}, got ",
            ):
                DesignerConfig(**{name: value})
        for value in accepted:
            assert getattr(DesignerConfig(**{name: value}), name) == value
    for name, value in (("settings", ()), ("settings", ("chess",)), ("prompt", "fill-in"), ("feedback", "loud")):
        with pytest.raises(ValueError, match=f"^DesignerConfig.{name} must be "):
            DesignerConfig(**{name: value})
    assert DesignerConfig(settings=("game",)).settings == ("game",)


def test_validate_refuses_a_range_set_in_python() -> None:
    from spade_gym.designer import DesignerConfig
    from spade_gym.regret import RewardConfig
    from spade_gym.trainer.config import RunSection

    for config, key in (
        (SelfPlayConfig(run=RunSection(iterations=0)), "run.iterations"),
        (SelfPlayConfig(designer=DesignerConfig(reward=RewardConfig(trivial_at=2.0))), "designer.reward.trivial_at"),
    ):
        with pytest.raises(ConfigError) as info:
            config.validate()
        assert info.value.key == key
    for temperature in (math.nan, 0.0):  # the section itself refuses a value out of its type's range
        with pytest.raises(ValueError, match=r"DesignerConfig.temperature must be a finite number > 0 \(a group"):
            DesignerConfig(temperature=temperature)


def test_the_designer_section_is_the_designer_config() -> None:
    from spade_gym.designer import DesignerConfig

    config = SelfPlayConfig.from_dict({"designer": {"temperature": 0.7, "memory_k": 3, "settings": ["game"]}})
    assert isinstance(config.designer, DesignerConfig) and config.designer.settings == ("game",)
    step = config.designer_config()  # the section, with the Agent's rollout and k, and the edit chance resolved
    assert step.sampling.temperature == 0.7 and step.memory.k == 3 and step.k == config.agent.k
    assert step.rollout.sampling.temperature == config.agent.temperature
    assert isinstance(step.edit_probability, float)
    for key in ("k", "rollout", "validation", "regret_seeds", "feedback"):  # set by the run: no config keys
        with pytest.raises(ConfigError, match=f"unknown config key 'designer.{key}'"):
            SelfPlayConfig.from_dict({"designer": {key: 1}})
        assert f"designer.{key}:" not in describe_config()


def test_fixed_pool_forms() -> None:
    assert parse_fixed_pool("seed-library") == ("seed-library", [])
    assert parse_fixed_pool("reasoning-gym:leg_counting,basic_arithmetic") == (
        "reasoning-gym",
        ["leg_counting", "basic_arithmetic"],
    )
    for bad in ("reasoning-gym:", "reasoning-gym:a,,b", "seed", "reasoning-gym:a-b"):
        with pytest.raises(ValueError, match="expected 'seed-library' or 'reasoning-gym:<task>"):
            parse_fixed_pool(bad)
    with pytest.raises(ValueError, match="task 'a' named more than once"):
        parse_fixed_pool("reasoning-gym:a,b,a")
    assert (
        SelfPlayConfig.from_dict({"run": {"designer": "off", "fixed_pool": "reasoning-gym:leg_counting"}}).run.designer
        == "off"
    )


# ------------------------------------------------------------------------------------------------
# YAML
# ------------------------------------------------------------------------------------------------


def test_yaml_uses_yaml_1_2_scalars(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(
        "run:\n  designer: off\n  iterations: 010\n  tensorboard: false\n"
        "train:\n  learning_rate: 1e-4\n  max_grad_norm: .5\n"
        "agent:\n  replay_envs: 2\n"
    )
    config = SelfPlayConfig.from_yaml(path)
    assert config.run.designer == "off"  # YAML 1.1 would read False
    assert config.run.iterations == 10  # YAML 1.1 would read octal 8
    assert config.run.tensorboard is False
    assert config.train.learning_rate == 1e-4  # YAML 1.1 would read the string '1e-4'
    assert config.train.max_grad_norm == 0.5


def test_yaml_yes_is_not_a_bool(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("run:\n  tensorboard: yes\n")
    with pytest.raises(ConfigError, match=r"'run.tensorboard' = 'yes' \(str\); expected bool \(true or false\)"):
        SelfPlayConfig.from_yaml(path)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [
        ("run:\n  seed: 1\n  seed: 2\n", "found duplicate key 'seed'"),
        ("run: [\n", "is not valid YAML"),
        ("- 1\n- 2\n", "must be a mapping of sections"),
    ],
)
def test_bad_yaml_files(tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=fragment):
        SelfPlayConfig.from_yaml(path)


def test_repair_rounds_is_no_config_key() -> None:
    # repairs are `spade design --repairs N` (a GRPO group is G designs of one prompt)
    with pytest.raises(ConfigError, match=r"unknown config key 'designer.repair_rounds'") as info:
        SelfPlayConfig.from_dict({"designer": {"repair_rounds": 0}})
    assert info.value.key == "designer.repair_rounds"


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        SelfPlayConfig.from_yaml(tmp_path / "nope.yaml")


def test_empty_file_is_the_default_run(tmp_path: Path) -> None:
    path = tmp_path / "c.yaml"
    path.write_text("# nothing\n")
    assert SelfPlayConfig.from_yaml(path) == SelfPlayConfig()


def test_yaml_round_trip_of_defaults_and_of_unusual_values(tmp_path: Path) -> None:
    assert SelfPlayConfig.from_yaml(_write(tmp_path / "a.yaml", SelfPlayConfig())) == SelfPlayConfig()
    config = SelfPlayConfig.from_dict(
        {
            "policy": {
                "spec": "vllm:Qwen/Qwen2.5-0.5B-Instruct",
                "device": "cuda:1",
                "dtype": "bfloat16",
                "lora": {"r": 8, "lora_alpha": 16.0, "target_modules": ["q_proj", "v_proj"], "bias": "none"},
            },
            "designer": {
                "settings": ["game"],
                "documents": "hf:wikimedia/wikipedia:20231101.en",
                "edit_probability": 0,
            },
            "agent": {"max_turns": 6, "replay_strategy": "uniform"},
            "train": {"learning_rate": 3e-7, "clip_eps_high": 0.28, "max_grad_norm": None, "loss_type": "sequence"},
            "run": {"out": "1e-4", "designer": "off", "fixed_pool": "reasoning-gym:leg_counting", "tensorboard": False},
        }
    )
    back = SelfPlayConfig.from_yaml(_write(tmp_path / "b.yaml", config))
    assert back == config
    assert back.run.out == "1e-4" and back.run.designer == "off"


def test_yaml_documents_every_field(tmp_path: Path) -> None:
    text = SelfPlayConfig().to_yaml()
    flat = " ".join(line.strip("# ").strip() for line in text.splitlines() if line.lstrip().startswith("#"))
    for dotted, f in leaf_fields():
        assert f"{dotted.rsplit('.', 1)[-1]}:" in text
        assert " ".join(f.metadata["help"].split()) in flat, dotted


def _write(path: Path, config: SelfPlayConfig) -> Path:
    assert config.to_yaml(path) == path.read_text()
    return path


# ------------------------------------------------------------------------------------------------
# Overrides
# ------------------------------------------------------------------------------------------------


def test_overrides() -> None:
    base = SelfPlayConfig()
    config = base.with_overrides(
        [
            "train.learning_rate=1e-4",
            "run.iterations=7",
            "run.designer=off",
            "designer.settings=[reasoning, game]",
            "train.max_grad_norm=null",
            "policy.lora.r=8",
            "policy.spec=1.5",
            "run.out='my run'",
            "designer.reward.duplicate=-2",
        ]
    )
    assert config.train.learning_rate == 1e-4
    assert config.run.iterations == 7
    assert config.run.designer == "off"
    assert config.designer.settings == ("reasoning", "game")
    assert config.train.max_grad_norm is None
    assert config.policy.lora == {"r": 8}
    assert config.policy.spec == "1.5"  # a string field takes the text as it is
    assert config.run.out == "my run"
    assert config.designer.reward.duplicate == -2.0
    assert base == SelfPlayConfig()  # the original is unchanged


@pytest.mark.parametrize(
    ("override", "key", "fragment"),
    [
        ("train.learnig_rate=1e-4", "train.learnig_rate", "did you mean 'train.learning_rate'?"),
        ("trainn.learning_rate=1e-4", "trainn", "did you mean 'train'?"),
        ("run.iterations=many", "run.iterations", "'many' (str); expected int"),
        ("run.iterations=-3", "run.iterations", "expected an int >= 1"),
        ("train.learning_rate.x=1", "train.learning_rate.x", "'train.learning_rate' is a value, not a section"),
        ("run.iterations", "", "must look like KEY=VALUE"),
        ("run..seed=1", "run..seed", "empty part"),
    ],
)
def test_bad_overrides(override: str, key: str, fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        SelfPlayConfig().with_overrides([override])
    assert info.value.key == key
    assert fragment in str(info.value)


# ------------------------------------------------------------------------------------------------
# describe_config and the mapping onto the library
# ------------------------------------------------------------------------------------------------


def test_describe_config_lists_every_field_with_type_default_and_help() -> None:
    text = describe_config()
    flat = " ".join(text.split())
    for dotted, f in leaf_fields():
        assert f"  {dotted}: " in text, dotted
        assert " ".join(f.metadata["help"].split()) in flat, dotted
    assert "train.learning_rate: a finite number > 0 = 1.0e-05" in text
    assert "run.designer: one of 'on', 'off' = 'on'" in text
    assert "agent.max_turns: an int >= 1 = 1000" in text
    for section in SECTIONS:
        assert f"\n{section}: " in text


def test_the_train_section_is_grpo_config() -> None:
    config = SelfPlayConfig().with_overrides(
        [
            "train.learning_rate=2e-5",
            "train.loss_type=sequence",
            "train.agent_weight=0.5",
            "train.adam_betas=[0.8, 0.99]",
        ]
    )
    grpo = config.train
    assert isinstance(grpo, GRPOConfig)
    assert grpo.learning_rate == 2e-5 and grpo.loss_type == "sequence" and grpo.adam_betas == (0.8, 0.99)
    assert grpo.role_weights == {"designer": 1.0, "agent": 0.5}
    # every GRPOConfig field is a train key, with its default, help and range; the seed is run.seed's
    assert {f.name for f in dataclasses.fields(GRPOConfig)} == {
        key.split(".")[1] for key, _ in leaf_fields() if key.startswith("train.")
    }
    assert SelfPlayConfig().train == GRPOConfig()
    text = SelfPlayConfig().to_yaml()
    assert "  # Clip the global gradient norm to this; null: no clipping; a finite number > 0 or null\n" in text


def test_designer_and_replay_config() -> None:
    config = SelfPlayConfig().with_overrides(
        [
            "agent.k=3",
            "agent.temperature=0.7",
            "agent.max_turns=5",
            "designer.max_new_tokens=900",
            "designer.settings=[game]",
            "designer.reward.duplicate=-0.25",
            "designer.memory_k=2",
            "agent.replay_rho=0.3",
        ]
    )
    dc = config.designer_config()
    assert dc.k == 3
    assert dc.rollout.sampling.temperature == 0.7 and dc.rollout.max_turns == 5
    assert dc.sampling.max_new_tokens == 900 and dc.sampling.temperature == DESIGNER_TEMPERATURE
    assert dc.settings == ("game",)
    assert dc.reward.duplicate == -0.25
    assert dc.memory.k == 2
    assert dc.memory.include_source is False
    rc = config.replay_config()
    assert (rc.beta, rc.rho, rc.unmeasured_first) == (0.1, 0.3, True)


def test_seed_tags_pick_the_run_pool_and_an_unknown_tag_is_refused(tmp_path: Path) -> None:
    from spade_gym.registry.gymnasium import open_registry

    with pytest.raises(ConfigError, match="run.seed_tags") as caught:
        SelfPlayConfig.from_dict({"run": {"seed_tags": ["nope"]}})
    assert caught.value.key == "run.seed_tags" and "graded" in str(caught.value)
    config = SelfPlayConfig.from_dict({"run": {"seed_tags": ["graded"], "held_out_envs": ["LargerOfTwo"]}})
    registry = open_registry(tmp_path / "reg", exclude=config.run.held_out_envs, include_tags=config.run.seed_tags)
    try:
        records = registry.records()
        assert records and all("graded" in r.tags for r in records)
        assert "LargerOfTwo" not in {r.name for r in records}
    finally:
        registry.close()
    with pytest.raises(ValueError, match="no seed environment has any of the tags"):
        open_registry(tmp_path / "other", include_tags=["nope"])
    from spade_gym.trainer.warmstart import training_pool

    pool = training_pool(config)  # the cold start learns from the same pool
    assert {r.name for r in pool} == {r.name for r in records}


@pytest.mark.parametrize(
    ("train", "key", "expected"),
    [
        ({"micro_batch_tokens": 0}, "train.micro_batch_tokens", "an int >= 1"),
        ({"epochs": 0}, "train.epochs", "an int >= 1"),
        ({"advantage_eps": -1.0}, "train.advantage_eps", "a finite number >= 0"),
        ({"max_grad_norm": 0.0}, "train.max_grad_norm", "a finite number > 0 or null"),
        ({"weight_decay": float("inf")}, "train.weight_decay", "a finite number >= 0"),
    ],
)
def test_train_ranges_are_grpo_configs_and_name_the_key(train: dict[str, Any], key: str, expected: str) -> None:
    with pytest.raises(ConfigError) as info:
        SelfPlayConfig.from_dict({"train": train})
    assert info.value.key == key
    assert str(info.value) == f"config key {key!r} = {train[key.split('.')[1]]!r}; expected {expected}"


def test_hostile_nesting_and_huge_numbers_are_config_errors(tmp_path: Path) -> None:
    deep: dict[str, Any] = {}
    inner = deep
    for _ in range(2000):
        inner["a"] = {}
        inner = inner["a"]
    itself: dict[str, Any] = {"r": 8}
    itself["self"] = itself
    for lora in (deep, itself):
        with pytest.raises(ConfigError, match="nested too deeply, or a value contains itself"):
            SelfPlayConfig.from_dict({"policy": {"lora": lora}})
    with pytest.raises(ConfigError, match=r"'run.seed' = <an int of more than \d+ digits>; expected an int >= 0"):
        SelfPlayConfig.from_dict({"run": {"seed": -(10**5000)}})
    texts = {
        "run:\n  iterations: " + "9" * 5000 + "\n": "integer string conversion",
        "policy: {lora: {a: " + "[" * 600 + "]" * 600 + "}}\n": "nested too deeply",
        "policy:\n  lora: &a {r: 8, self: *a}\n": "contains itself",
    }
    for n, (text, message) in enumerate(texts.items()):
        path = tmp_path / f"c{n}.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            SelfPlayConfig.from_yaml(path)
    # an explicit !!timestamp stays text, so the config can be written back
    path = tmp_path / "date.yaml"
    path.write_text("policy: {lora: {r: 8, when: !!timestamp 2024-01-01}}\n")
    config = SelfPlayConfig.from_yaml(path)
    assert config.policy.lora == {"r": 8, "when": "2024-01-01"}
    assert (
        SelfPlayConfig.from_yaml(_written(tmp_path / "back.yaml", config.to_yaml())).policy.lora == config.policy.lora
    )


def _written(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _alias_bomb(key: str, levels: int) -> str:
    """``key`` holding ``levels`` lists, each of nine aliases of the one below: 10 * 9**levels values."""
    text = "&a0 [x, x, x, x, x, x, x, x, x, x]"
    for level in range(1, levels + 1):
        text = f"&a{level} [{text}" + f", *a{level - 1}" * 8 + "]"
    section, name = key.split(".")
    return f"{section}:\n  {name}: {text}\n"


def test_a_yaml_alias_bomb_is_refused_without_being_expanded(tmp_path: Path) -> None:
    import time

    path = _written(tmp_path / "bomb.yaml", _alias_bomb("policy.lora", 9))  # 3.9e9 values expanded
    started = time.process_time()
    with pytest.raises(ConfigError, match="more than 100,000 values as its aliases expand"):
        SelfPlayConfig.from_yaml(path)
    # under the cap, at a key of another type: the message shows a few items, not the expansion
    path = _written(tmp_path / "small.yaml", _alias_bomb("agent.max_turns", 3))
    with pytest.raises(ConfigError, match=r"'agent.max_turns' = \[\[\[") as info:
        SelfPlayConfig.from_yaml(path)
    assert len(str(info.value)) < 300
    assert time.process_time() - started < 5
