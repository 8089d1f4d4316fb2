"""``spade_gym.integrations.trl``: the Designer's reward as a TRL reward function and any spade
environment as TRL's ``environment_factory``, with the real sandbox, real registries on disk and real
``GRPOTrainer`` steps on CPU.

The trainer steps use a tiny randomly initialised Llama on the embedded SmolLM2 tokenizer. A random
model writes neither programs nor tool calls, so those tests *constrain* its decoding with
transformers' ``sequence_bias`` (passed through ``GRPOConfig.generation_kwargs``): two target texts
get a bias that grows with the position, so the model writes one of the two, each with probability
about 1/2 at its first token (the trainer's seed fixes the draw). Everything after generation is
real: TRL's parsing and tool loop, the sandbox, the validation gate, the regret rollouts (with the
trainer's own model as the co-trained Agent), the registry, and the optimizer step.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from doubles import ScriptedPolicy
from test_designer import hint_reader

from spade_gym.agent import RolloutConfig
from spade_gym.designer import DesignerConfig, SpadeDesignerEnv
from spade_gym.errors import ContractError, GenerationError, ModelNotFound
from spade_gym.integrations.trl import (
    AGENT_SYSTEM_PROMPTS,
    EPISODE_OVER,
    DesignerReward,
    SpadeEnvironment,
    TrainerPolicy,
    agent_dataset,
    designer_dataset,
    environment_factories,
    environment_factory,
    log_episodes,
    tool_calling_tokenizer,
)
from spade_gym.policies.base import SamplingParams
from spade_gym.registry.gymnasium import open_registry
from spade_gym.registry.store import Registry

ROOT = Path(__file__).resolve().parent.parent

# A program the gate accepts; the observation shows the word shifted along the alphabet and the hint
# gives the shift, so hint_reader (test_designer) wins with the hint and loses without it (and with the hint alone):
# regret exactly 1 for that Agent.
HIDDEN_WORD = '''import random

class Env:
    """Decode the hidden word of six letters shown shifted along the alphabet; the hint gives the shift."""

    name = "HiddenWordBackwards"
    setting = "reasoning"
    max_turns = 1

    def reset(self, seed):
        rng = random.Random(seed)
        self.word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(6))
        self.shift = rng.randint(1, 25)
        coded = "".join(chr((ord(c) - 97 + self.shift) % 26 + 97) for c in self.word)
        return "Decode the hidden word " + coded + " of six letters.", {}

    def step(self, action):
        ok = action.strip() == self.word
        return ("Right." if ok else "Wrong."), (1.0 if ok else 0.0), True, False, {"ok": ok}

    def hint(self):
        return "Shift every letter back by " + str(self.shift) + "."

    def oracle(self):
        return self.word
'''

# Passes the gate (its fresh seeds are >= 100 but for a chance of 5e-7) but crashes in reset on the
# regret seeds FAST fixes (0 .. k-1).
BROKEN_ON_REGRET_SEEDS = HIDDEN_WORD.replace("HiddenWordBackwards", "HiddenWordBroken").replace(
    "        rng = random.Random(seed)\n",
    "        if seed < 100:\n            raise ValueError('no such seed')\n        rng = random.Random(seed)\n",
)

# A tool-use program (played, never gated): tools with an enum, an optional non-identifier
# parameter, an array, a tool named like TRL's reset, a description that looks like docstring
# sections, and a tool that crashes the program. Seed 7 crashes reset.
CODE_SUBMIT = '''import json
import random


class Env:
    """Read the seeded code word in the first message and submit it with the submit tool; the right word pays 1.0."""

    name = "CodeSubmit"
    setting = "tool_use"
    max_turns = 3
    tools = [
        {"type": "function", "function": {
            "name": "submit", "description": "Submit the code word; ends the episode.",
            "parameters": {"type": "object", "properties": {"code": {"type": "string", "description": "The code word."}},
                           "required": ["code"]}}},
        {"type": "function", "function": {
            "name": "peek", "description": "Echo the arguments back.\\nArgs: everything (choices: [oops",
            "parameters": {"type": "object", "properties": {
                "class": {"type": "string", "enum": ["a", "b"], "description": "A class."},
                "max-items": {"type": "integer"},
                "tags": {"type": "array", "items": {"type": "string"}}},
                "required": ["class"]}}},
        {"type": "function", "function": {
            "name": "reset", "description": "Start over.", "parameters": {"type": "object", "properties": {}}}},
        {"type": "function", "function": {
            "name": "explode", "description": "Crash.", "parameters": {"type": "object", "properties": {}}}},
    ]

    def reset(self, seed):
        if seed == 7:
            raise RuntimeError("seed 7 is cursed")
        rng = random.Random(seed)
        self.code = rng.choice(["red", "blue", "green", "black"])
        self.turn = 0
        return "The code word is " + self.code + ". Submit it.", {}

    def step(self, action):
        self.turn += 1
        call = json.loads(action)
        name, args = call.get("name"), call.get("arguments", {})
        if name == "submit":
            ok = args.get("code") == self.code
            return ("Correct." if ok else "Wrong."), (1.0 if ok else 0.0), True, False, {}
        if name == "explode":
            raise RuntimeError("boom")
        return "called " + json.dumps(call, sort_keys=True), 0.0, False, self.turn >= 3, {}

    def hint(self):
        return "The word has " + str(len(self.code)) + " letters."

    def oracle(self):
        return json.dumps({"name": "submit", "arguments": {"code": self.code}})
'''

# A tool-use program whose only tool has no name (the sandbox refuses an empty tools list itself).
NO_TOOLS = CODE_SUBMIT.replace('name = "CodeSubmit"', 'name = "NoTools"').replace(
    "    tools = [",
    '    tools = [{"type": "function", "function": {"description": "a tool without a name"}}]\n    _unused = [',
)

FAST = DesignerConfig(
    k=2,
    regret_seeds=0,  # seeds 0 and 1, which BROKEN_ON_REGRET_SEEDS breaks on
    rollout=RolloutConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=8)),
    settings=("reasoning",),
)


def fenced(source: str) -> str:
    return f"Here is my environment.\n\n```python\n{source}```\n"


def chat(text: str) -> list[dict[str, str]]:
    return [{"role": "assistant", "content": text}]


class Recorder:
    """TRL's ``log_extra``/``log_metric`` callbacks, recording what they were given."""

    def __init__(self) -> None:
        self.extra: dict[str, list[Any]] = {}
        self.metrics: dict[str, list[float]] = {}

    def log_extra(self, column: str, values: list[Any]) -> None:
        self.extra.setdefault(column, []).extend(values)

    def log_metric(self, name: str, value: float) -> None:
        self.metrics.setdefault(name, []).append(value)


@pytest.fixture()
def needs_trl() -> Any:
    pytest.importorskip("datasets")
    pytest.importorskip("transformers")
    return pytest.importorskip("trl")


@pytest.fixture()
def empty_registry(tmp_path: Path) -> Registry:
    return open_registry(tmp_path / "registry", seed_library=False)


def embedded_path() -> Path:
    from spade_gym.policies.embedded import embedded_model_dir

    try:
        return embedded_model_dir(progress=False)
    except ModelNotFound as exc:
        pytest.skip(f"the embedded model is not available: {exc}")


def smol_tokenizer() -> Any:
    """A fresh copy of the embedded SmolLM2 tokenizer (the trainer mutates it)."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(embedded_path())


def tiny_llama(tokenizer: Any, *, positions: int) -> Any:
    """A randomly initialised 2-layer Llama (hidden size 32) over the tokenizer's vocabulary."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=positions,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
        bos_token_id=tokenizer.bos_token_id,
        tie_word_embeddings=True,
    )
    torch.manual_seed(0)
    return LlamaForCausalLM(config)


def forced(tokenizer: Any, texts: Sequence[str]) -> dict[tuple[int, ...], float]:
    """``sequence_bias`` that makes any model write one of ``texts`` (then end-of-sequence): the
    token at position ``i`` of a text gets bias ``100 * i`` once the text's first ``i - 1`` tokens
    are written, so the texts' first tokens tie and every later token is forced."""
    bias: dict[tuple[int, ...], float] = {}
    for text in texts:
        ids = tokenizer(text, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
        for i in range(1, len(ids) + 1):
            bias[tuple(ids[:i])] = 100.0 * i
    return bias


def snapshot(model: Any) -> dict[str, Any]:
    return {name: p.detach().clone() for name, p in model.named_parameters()}


def changed(model: Any, before: dict[str, Any]) -> bool:
    import torch

    return any(not torch.equal(before[name], p) for name, p in model.named_parameters())


def grpo_config(tmp_path: Path, **overrides: Any) -> Any:
    from trl import GRPOConfig

    settings: dict[str, Any] = dict(
        output_dir=str(tmp_path / "out"),
        use_cpu=True,
        report_to="none",
        max_steps=1,
        per_device_train_batch_size=4,
        num_generations=4,
        logging_steps=1,
        save_strategy="no",
        learning_rate=1e-2,
        seed=0,
        bf16=False,
    )
    settings.update(overrides)
    return GRPOConfig(**settings)


# ---- imports --------------------------------------------------------------------------------------


def run_python(code: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)


def test_importing_spade_gym_and_the_module_imports_no_training_library() -> None:
    result = run_python(
        "import sys, spade_gym, spade_gym.integrations.trl\n"
        "print([m for m in ('trl', 'torch', 'datasets', 'transformers') if m in sys.modules])"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


BLOCK = """
import sys
class Block:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in {blocked!r}:
            raise ModuleNotFoundError('No module named ' + repr(name), name=name)
sys.meta_path.insert(0, Block())
"""


def test_a_missing_trl_or_datasets_is_one_line_naming_the_extra() -> None:
    result = run_python(
        BLOCK.format(blocked=("trl", "datasets"))
        + "from spade_gym.integrations.trl import tool_calling_tokenizer, designer_dataset, agent_dataset\n"
        "for call in (lambda: tool_calling_tokenizer(None), lambda: designer_dataset(1, registry='r'),\n"
        "             lambda: agent_dataset('spade/ArithmeticChain-v0', 1)):\n"
        "    try:\n"
        "        call()\n"
        "    except ImportError as exc:\n"
        "        print(type(exc).__name__, '|', exc)\n"
        "tool_calling_tokenizer(None)\n"
    )
    lines = result.stdout.strip().splitlines()
    assert lines == [
        "MissingDependency | spade_gym.integrations.trl needs trl: pip install -e '.[trl]' in a clone of the spade_gym repository (spade-gym is not on PyPI yet)",
        "MissingDependency | spade_gym.integrations.trl needs datasets: pip install -e '.[trl]' in a clone of the spade_gym repository (spade-gym is not on PyPI yet)",
        "MissingDependency | spade_gym.integrations.trl needs datasets: pip install -e '.[trl]' in a clone of the spade_gym repository (spade-gym is not on PyPI yet)",
    ]
    # uncaught, the traceback ends in that one line (no chained ModuleNotFoundError)
    assert result.returncode == 1
    assert result.stderr.strip().splitlines()[-1] == (
        "spade_gym.errors.MissingDependency: spade_gym.integrations.trl needs trl: pip install -e '.[trl]' in a clone of the spade_gym repository (spade-gym is not on PyPI yet)"
    )
    assert "During handling" not in result.stderr


# ---- the Designer: dataset and reward function ---------------------------------------------------------


def test_designer_dataset_rows_are_the_designer_envs_prompts(needs_trl: Any, tmp_path: Path) -> None:
    registry = open_registry(tmp_path / "registry", seed_library=True)
    ds = designer_dataset(3, registry=registry, seed=10)
    assert ds.column_names == ["prompt", "spade_role", "provenance"] and len(ds) == 3
    env = SpadeDesignerEnv(agent=None, registry=registry)
    for i, row in enumerate(ds):
        env.reset(seed=10 + i)
        assert env.prompt is not None
        assert row["prompt"] == env.prompt.messages
        assert json.loads(row["provenance"]) == env.prompt.provenance()
        assert row["spade_role"] == "designer"
    assert any(json.loads(row["provenance"])["memory"] for row in ds), "the memory shows registry environments"
    forced_rows = designer_dataset(2, registry=registry, setting="game", mode="write")
    assert {json.loads(p)["setting"] for p in forced_rows["provenance"]} == {"game"}
    with pytest.raises(ValueError, match="n must be an int >= 1"):
        designer_dataset(0, registry=registry)
    with pytest.raises(ValueError, match="setting"):
        designer_dataset(1, registry=registry, setting="chess")


def test_designer_reward_with_a_frozen_agent_gives_the_exact_rewards(needs_trl: Any, empty_registry: Registry) -> None:
    reasoning = designer_dataset(1, registry=empty_registry, setting="reasoning", mode="write")[0]
    tool_use = designer_dataset(1, registry=empty_registry, setting="tool_use", mode="write")[0]
    reward = DesignerReward(hint_reader(), empty_registry, config=FAST)
    rows = [tool_use, reasoning, reasoning, reasoning, reasoning]
    completions = [
        chat(fenced(HIDDEN_WORD)),  # asked for tool use: refused, WRONG_SETTING, not registered
        chat(fenced(HIDDEN_WORD)),  # accepted, regret 1 for hint_reader
        chat("I would rather not write code today."),  # no program
        chat(fenced(HIDDEN_WORD)),  # the same program again in this batch: the same outcome, not a duplicate
        chat(fenced(HIDDEN_WORD)),  # a row of another task: not scored
    ]
    log = Recorder()
    rewards = reward(
        [r["prompt"] for r in rows],
        completions,
        [[1, 2]] * len(rows),
        provenance=[r["provenance"] for r in rows],
        spade_role=["designer"] * 4 + ["agent"],
        log_extra=log.log_extra,
        log_metric=log.log_metric,
    )
    assert rewards == [-1.0, 1.0, -1.0, 1.0, None]
    outcomes = reward.last_outcomes
    assert outcomes[0] is not None and outcomes[0].report.category == "WRONG_SETTING" and outcomes[0].record is None
    assert outcomes[1] is not None and outcomes[1] is outcomes[3] and outcomes[4] is None
    record = outcomes[1].record
    assert record is not None and record.gym_id == "spade/HiddenWordBackwards-v0"
    assert [r.env_id for r in empty_registry.records()] == ["HiddenWordBackwards-v0"]
    stored = empty_registry.get("HiddenWordBackwards-v0")
    assert stored.stats.regret == 1.0 and stored.stats.mean_return_hint == 1.0 and stored.stats.episodes == 6
    assert (
        stored.document is not None and stored.document["document"] == json.loads(reasoning["provenance"])["document"]
    )
    assert log.extra["spade/outcome"] == ["invalid", "regret", "invalid", "regret", None]
    assert log.extra["spade/category"] == ["WRONG_SETTING", "ACCEPT", "NO_CODE", "ACCEPT", None]
    assert log.extra["spade/regret"] == [None, 1.0, None, 1.0, None]
    assert log.extra["spade/env_id"] == [
        None,
        "spade/HiddenWordBackwards-v0",
        None,
        "spade/HiddenWordBackwards-v0",
        None,
    ]
    assert log.metrics == {
        "spade/accepted": [0.5],
        "spade/invalid": [0.5],
        "spade/duplicate": [0.0],
        "spade/regret": [1.0],
    }
    # a later batch with the same program: now a duplicate of the registered environment
    assert reward([reasoning["prompt"]], [chat(fenced(HIDDEN_WORD))], provenance=[reasoning["provenance"]]) == [-0.5]
    # plain text prompts and completions, no provenance column: no setting to check, still scored
    assert reward(["Write an environment."], ["no code here"]) == [-1.0]


def test_hostile_programs_and_a_failing_agent_never_crash_the_reward(needs_trl: Any, empty_registry: Registry) -> None:
    row = designer_dataset(1, registry=empty_registry, setting="reasoning", mode="write")[0]
    reward = DesignerReward(hint_reader(), empty_registry, config=FAST)
    # passes the gate, then crashes on the regret seeds: refused with the crash named, not registered
    assert reward([row["prompt"]], [chat(fenced(BROKEN_ON_REGRET_SEEDS))], provenance=[row["provenance"]]) == [-1.0]
    outcome = reward.last_outcomes[0]
    assert outcome is not None and outcome.report.category == "ENV_EXCEPTION" and outcome.record is None
    assert "no such seed" in outcome.report.feedback()
    assert empty_registry.records() == []
    # the Agent's backend fails: not the Designer's fault, so no signal (None), and the error is logged
    for error in (GenerationError("the inference server went away"), RuntimeError("CUDA out of memory")):
        log = Recorder()
        broken = DesignerReward(ScriptedPolicy(error=error, name="broken"), empty_registry, config=FAST)
        scores = broken(
            [row["prompt"]], [chat(fenced(HIDDEN_WORD))], provenance=[row["provenance"]], log_extra=log.log_extra
        )
        assert scores == [None]
        assert log.extra["spade/category"] == ["AGENT_ERROR"] and str(error) in log.extra["spade/error"][0]
        assert empty_registry.records() == []
    # malformed rows are the caller's error
    with pytest.raises(ValueError, match="provenance"):
        reward([row["prompt"]], [chat("x")], provenance=["{not json"])
    with pytest.raises(ValueError, match="2 entries for 1 completions"):
        reward([row["prompt"]], [chat("x")], provenance=[row["provenance"]] * 2)


def test_a_co_trained_agent_must_be_bound_to_its_trainer(needs_trl: Any, empty_registry: Registry) -> None:
    reward = DesignerReward("trainer", empty_registry, config=FAST)
    assert isinstance(reward.agent, TrainerPolicy) and not reward.agent.bound
    with pytest.raises(RuntimeError, match=r"bind\(trainer\)"):
        reward(["prompt"], ["completion"])
    with pytest.raises(ValueError, match="model and .processing_class"):
        reward.bind(object())
    with pytest.raises(ValueError, match="agent must be"):
        DesignerReward(42, empty_registry)  # type: ignore[arg-type]


@pytest.mark.slow
def test_one_grpo_step_trains_a_designer_against_the_co_trained_agent(needs_trl: Any, tmp_path: Path) -> None:
    from trl import GRPOTrainer

    tokenizer = smol_tokenizer()
    registry = open_registry(tmp_path / "registry", seed_library=True)
    dataset = designer_dataset(1, registry=registry, config=FAST, setting="reasoning", mode="write")
    reward = DesignerReward("trainer", registry, config=FAST)
    model = tiny_llama(tokenizer, positions=8192)
    before = snapshot(model)
    program, refusal = "```python\n" + HIDDEN_WORD + "```", "I cannot write it."
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=reward,
        train_dataset=dataset,
        args=grpo_config(
            tmp_path,
            max_completion_length=400,
            generation_kwargs={"sequence_bias": forced(tokenizer, [program, refusal])},
        ),
    )
    reward.bind(trainer)
    trainer.train()

    assert trainer.state.global_step == 1
    rewards = reward.last_rewards
    assert list(trainer._logs["rewards"]["spade_designer"]) == rewards  # what TRL trained on is what we computed
    assert trainer.state.log_history[0]["rewards/spade_designer/mean"] == pytest.approx(sum(rewards) / len(rewards))
    # the seed-0 draw wrote both texts; a random Agent never names the word, even with the hint
    assert set(rewards) == {-1.0, 0.0}
    extra = trainer._logs["extra"]
    for value, category, outcome, env_id in zip(
        rewards, extra["spade/category"], extra["spade/outcome"], extra["spade/env_id"], strict=True
    ):
        if value == 0.0:
            assert (category, outcome, env_id) == ("ACCEPT", "out_of_reach", "spade/HiddenWordBackwards-v0")
        else:
            assert (category, outcome, env_id) == ("NO_CODE", "invalid", None)
    record = registry.get("HiddenWordBackwards-v0")
    assert "designer" in record.tags and record.stats.episodes == 2 * FAST.k and record.stats.mean_return_hint == 0.0
    # the regret episodes were played by the model being trained, and it was left in training mode
    assert reward.agent.model is model
    assert reward.agent.completions_generated == 2 * FAST.k
    assert model.training
    assert trainer.state.log_history[0]["spade/accepted"] == pytest.approx(rewards.count(0.0) / len(rewards))
    assert changed(model, before)


# ---- the Agent: environment_factory -----------------------------------------------------------------


def test_tool_use_tools_become_methods_with_schemas_and_step_the_program(needs_trl: Any) -> None:
    from transformers.utils import get_json_schema

    cls = environment_factory(CODE_SUBMIT)
    assert issubclass(cls, SpadeEnvironment) and cls.__name__ == "CodeSubmit" and cls.env_id == "CodeSubmit"
    assert cls.tool_names == {"submit": "submit", "peek": "peek", "reset_": "reset", "explode": "explode"}
    assert cls.setting == "tool_use" and cls.max_turns == 3
    peek = get_json_schema(cls.peek)["function"]
    assert peek["name"] == "peek"
    assert peek["description"] == "Echo the arguments back. Args - everything (choices - [oops"
    assert peek["parameters"]["properties"] == {
        "class_": {"type": "string", "enum": ["a", "b"], "description": "A class."},
        "max_items": {"type": "integer", "description": "the max-items argument (optional)"},
        "tags": {"type": "array", "items": {"type": "string"}, "description": "the tags argument (optional)"},
    }
    assert peek["parameters"]["required"] == ["class_"]
    assert get_json_schema(cls.submit)["function"]["parameters"]["required"] == ["code"]

    rows = agent_dataset(CODE_SUBMIT, [0, 1], hint=True)
    assert rows.column_names == ["prompt", "environment", "env_id", "seed", "hint"]
    system, first = rows[0]["prompt"]
    assert (
        system["content"].startswith(AGENT_SYSTEM_PROMPTS["tool_use"])
        and "Environment: Read the seeded" in system["content"]
    )
    code = first["content"].split("The code word is ")[1].split(".")[0]
    assert first["content"].endswith("\n\nHint: The word has " + str(len(code)) + " letters.")

    env = cls()
    assert env.reset(**rows[0]) is None  # the observation is already in the row's prompt
    assert env.peek(class_="a", max_items=2) == 'called {"arguments": {"class": "a", "max-items": 2}, "name": "peek"}'
    assert env.reset_() == 'called {"arguments": {}, "name": "reset"}'  # the program's own "reset" tool
    assert env.submit(code=code) == "Correct.\n\n" + EPISODE_OVER
    assert env.get_reward() == 1.0 and env.done and env.error is None
    assert env.submit(code="again") == EPISODE_OVER  # not sent: the episode is over
    history = env.history
    assert [h["tool"] for h in history] == ["peek", "reset", "submit", "submit"]
    assert json.loads(history[2]["action"]) == {"name": "submit", "arguments": {"code": code}}
    assert history[3]["action"] is None and env.get_reward() == 1.0
    # a second episode on the same instance (and worker); a prompt without the observation gets it
    observation = env.reset(seed=1, prompt=[{"role": "user", "content": "Play."}])
    assert observation is not None and observation.startswith("\n\nThe code word is ")
    assert env.get_reward() == 0.0 and env.history == [] and env.seed == 1
    assert env.submit(code="white") == "Wrong.\n\n" + EPISODE_OVER and env.get_reward() == 0.0
    assert env.reset(seed=2, prompt=[{"role": "user", "content": ""}], hint=True).startswith("The code word is ")
    env._close()


def test_reasoning_and_game_environments_get_an_answer_or_act_tool(needs_trl: Any) -> None:
    import gymnasium

    for env_id, tool, parameter in (
        ("spade/ArithmeticChain-v0", "answer", "answer"),
        ("spade/NimLastStoneWins-v0", "act", "move"),
    ):
        cls = environment_factory(env_id)
        assert cls.tool_names == {tool: tool} and cls.env_id == env_id
        oracle_env = gymnasium.make(env_id).unwrapped
        row = agent_dataset(env_id, [3])[0]
        assert row["prompt"][1]["content"] == oracle_env.reset(seed=3)[0]
        env = cls()
        assert env.reset(**row) is None
        reply = getattr(env, tool)(**{parameter: oracle_env.oracle()})
        assert env.history[0]["action"] == oracle_env.oracle()
        oracle_env.close()
        assert isinstance(reply, str) and env.get_reward() >= 0.0
        if env_id.endswith("ArithmeticChain-v0"):
            assert env.get_reward() == 1.0 and env.done
        env._close()


def test_a_crashing_program_ends_its_episode_with_return_zero_and_a_note(needs_trl: Any) -> None:
    cls = environment_factory(CODE_SUBMIT)
    env = cls()
    assert env.reset(seed=0) is not None
    reply = env.explode()
    assert reply.startswith("The environment failed (ENV_EXCEPTION)") and "boom" in reply
    assert env.get_reward() == 0.0 and env.done and env.error is not None and env.error["category"] == "ENV_EXCEPTION"
    assert env.submit(code="red").startswith("The environment failed")  # not stepped
    assert env.history[-1]["action"] is None
    # reset itself crashes for seed 7: an error note instead of an exception
    note = env.reset(seed=7, prompt=[{"role": "user", "content": "x"}])
    assert note is not None and "seed 7 is cursed" in note and env.get_reward() == 0.0 and env.done
    assert env.peek(class_="a").startswith("The environment failed")
    # and the next episode plays normally
    assert env.reset(seed=0, prompt=[{"role": "user", "content": ""}]).startswith("The code word is ")
    assert env.error is None and not env.done
    env._close()
    # log_episodes reports what happened, and scores nothing
    other = cls()
    other.reset(seed=7)
    log = Recorder()
    scores = log_episodes(
        ["p", "p"], ["c", "c"], None, environments=[env, other], log_extra=log.log_extra, log_metric=log.log_metric
    )
    assert scores == [None, None]
    assert log.extra["spade/env_id"] == ["CodeSubmit", "CodeSubmit"] and log.extra["spade/seed"] == [0, 7]
    assert log.extra["spade/return"] == [0.0, 0.0] and log.extra["spade/tool_calls"] == [0, 0]
    assert log.extra["spade/error"][0] is None and "seed 7 is cursed" in log.extra["spade/error"][1]
    assert log.metrics["spade/env_errors"] == [0.5]
    other._close()


def test_bad_environments_and_rows_are_clear_errors(needs_trl: Any) -> None:
    with pytest.raises(ValueError, match="unknown environment 'spade/NoSuchEnv-v0'"):
        environment_factory("spade/NoSuchEnv-v0")
    with pytest.raises(ValueError, match="not one environment program"):
        environment_factory("spade/Generated-v0")
    with pytest.raises(ValueError, match="tool_use environment without a usable tool"):
        environment_factory(NO_TOOLS)
    with pytest.raises(ContractError, match="at least one tool"):
        environment_factory(NO_TOOLS.replace("    tools = [{", "    tools = []\n    _none = [{"))
    cls = environment_factory(CODE_SUBMIT)
    env = cls()
    with pytest.raises(ValueError, match="needs a 'seed' column"):
        env.reset(prompt=[{"role": "user", "content": ""}])
    with pytest.raises(ValueError, match="ints in"):
        env.reset(seed=-1)
    with pytest.raises(ValueError, match="environment_factories"):
        env.reset(seed=0, env_id="spade/ArithmeticChain-v0")
    with pytest.raises(ValueError, match="at least one environment and one seed"):
        agent_dataset(CODE_SUBMIT, [])
    with pytest.raises(ValueError, match="share the key 'CodeSubmit'"):
        environment_factories([CODE_SUBMIT, CODE_SUBMIT])
    both = environment_factories(["spade/ArithmeticChain-v0", CODE_SUBMIT])
    assert list(both) == ["spade/ArithmeticChain-v0", "CodeSubmit"]
    rows = agent_dataset(["spade/ArithmeticChain-v0", CODE_SUBMIT], 2)
    assert rows["environment"] == ["spade/ArithmeticChain-v0"] * 2 + ["CodeSubmit"] * 2
    # a count of seeds is drawn as the gate draws them (not 0, 1): the same for every environment
    assert rows["seed"][:2] == rows["seed"][2:] and rows["seed"][:2] != [0, 1] and len(set(rows["seed"])) == 2


def test_tool_calling_tokenizer_gives_chatml_tokenizers_a_tool_template(needs_trl: Any) -> None:
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast
    from trl.chat_template_utils import supports_tool_calling

    tokenizer = smol_tokenizer()
    assert not supports_tool_calling(tokenizer)
    assert tool_calling_tokenizer(tokenizer) is tokenizer and supports_tool_calling(tokenizer)
    template = tokenizer.chat_template
    assert tool_calling_tokenizer(tokenizer).chat_template == template  # already able: unchanged
    words = Tokenizer(models.WordLevel({"<unk>": 0, "<eos>": 1, "hi": 2}, unk_token="<unk>"))
    words.pre_tokenizer = pre_tokenizers.Whitespace()
    plain = PreTrainedTokenizerFast(tokenizer_object=words, eos_token="<eos>", unk_token="<unk>")
    plain.chat_template = "{% for m in messages %}{{ m['content'] }}{% endfor %}"
    with pytest.raises(ValueError, match="not ChatML"):
        tool_calling_tokenizer(plain)


@pytest.mark.slow
def test_one_grpo_step_plays_a_tool_use_environment_through_trls_tool_loop(needs_trl: Any, tmp_path: Path) -> None:
    from trl import GRPOTrainer

    tokenizer = tool_calling_tokenizer(smol_tokenizer())
    factories = environment_factories([CODE_SUBMIT])
    dataset = agent_dataset(CODE_SUBMIT, [0])
    code = dataset[0]["prompt"][1]["content"].split("The code word is ")[1].split(".")[0]
    calls = [
        '<tool_call>\n{"name": "submit", "arguments": {"code": "' + word + '"}}\n</tool_call>'
        for word in (code, "white")
    ]
    model = tiny_llama(tokenizer, positions=2048)
    before = snapshot(model)
    trainer = GRPOTrainer(
        model=model,
        processing_class=tokenizer,
        reward_funcs=[log_episodes],
        train_dataset=dataset,
        environment_factory=factories,
        args=grpo_config(
            tmp_path,
            max_completion_length=96,
            max_tool_calling_iterations=1,
            generation_kwargs={"sequence_bias": forced(tokenizer, calls)},
        ),
    )
    trainer.train()

    assert trainer.state.global_step == 1
    envs = trainer.environments
    assert len(envs) == 4 and all(type(e) is factories["CodeSubmit"] for e in envs)
    returns = [e.get_reward() for e in envs]
    assert list(trainer._logs["rewards"]["CodeSubmit"]) == returns  # TRL's reward is our episode return
    for env, value in zip(envs, returns, strict=True):
        (call,) = env.history  # the model's tool call reached the program, once (one tool iteration)
        assert call["tool"] == "submit" and call["arguments"]["code"] in {code, "white"}
        assert json.loads(call["action"]) == {"name": "submit", "arguments": call["arguments"]}
        assert value == (1.0 if call["arguments"]["code"] == code else 0.0)
        assert env.seed == 0 and env.done
    assert set(returns) == {0.0, 1.0}  # the seed-0 draw wrote both calls
    logged = trainer.state.log_history[0]
    assert logged["tools/call_frequency"] == 1.0 and logged["tools/failure_frequency"] == 0.0
    assert logged["rewards/CodeSubmit/mean"] == pytest.approx(sum(returns) / 4)
    assert logged["spade/episode_return"] == pytest.approx(sum(returns) / 4) and logged["spade/env_errors"] == 0.0
    assert list(trainer._logs["extra"]["spade/tool_calls"]) == [1, 1, 1, 1]
    assert changed(model, before)


# ---- README -----------------------------------------------------------------------------------------


@pytest.mark.slow
def test_the_readme_example_runs(needs_trl: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from readme import readme_example

    embedded_path()  # skip when the embedded model is not installed
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"__name__": "readme_trl"}
    exec(compile(readme_example("## TRL", doc="docs/integrations.md"), "docs/integrations.md (TRL)", "exec"), namespace)  # noqa: S102
    assert namespace["designer"].state.global_step == 1 and namespace["agent"].state.global_step == 1
    assert len(namespace["reward"].last_rewards) == 2
    assert all(r is not None and -1.0 <= r <= 1.0 for r in namespace["reward"].last_rewards)
    assert (tmp_path / "runs" / "trl" / "registry").is_dir()
    assert all(type(e).__name__ == "BankTransferReport" for e in namespace["agent"].environments)
