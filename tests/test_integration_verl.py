"""verl integration: the token-level episode core against real environments (an oracle gets the
full return, garbage gets 0, crashing programs give 0 and an error and never raise), the response
mask and log-probabilities, the dataset rows, and the agent-loop class against a stand-in of verl's
``verl.experimental.agent_loop.agent_loop`` that mirrors its API (``AgentLoopBase``,
``AgentLoopOutput``, ``register``)."""

from __future__ import annotations

import asyncio
import importlib
import json
import subprocess
import sys
import textwrap
import types
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import gymnasium
import pytest
from integration_helpers import ShadowOracle, byte_tokenizer, register_hostile_envs
from readme import readme_example

import spade_gym.integrations.verl as verl_mod
from spade_gym.errors import EnvNotFound, MissingDependency, SpadeError
from spade_gym.integrations._episode import episode_spec, observation_text, render_chat
from spade_gym.integrations.verl import (
    AGENT_NAME,
    GenerateOutput,
    TokenEpisode,
    make_rows,
    play_token_episode,
    write_parquet,
)

pytest.importorskip("transformers")

ROOT = Path(__file__).resolve().parent.parent
REASONING, TOOL_USE, GAME = "spade/ArithmeticChain-v0", "spade/InboxCodeRelay-v0", "spade/NimLastStoneWins-v0"


@pytest.fixture(scope="module")
def tok() -> Any:
    return byte_tokenizer()


@pytest.fixture(scope="module")
def hostile() -> dict[str, str]:
    return register_hostile_envs()


@pytest.fixture
def fresh_loop() -> Iterator[None]:
    """agent_loop_class() defined anew against this test's (fake) verl, and forgotten after it."""
    verl_mod.agent_loop_class.cache_clear()
    yield
    verl_mod.agent_loop_class.cache_clear()


def scripted(tok: Any, env_id: str, seed: int, *, garbage: bool = False, logprob: float | None = None) -> Any:
    """An async generate that answers with the oracle of a shadow copy of the environment; it
    records the replies and the sampling params it was given."""
    oracle = ShadowOracle(env_id, seed, garbage=garbage)
    replies: list[str] = []
    params_seen: list[dict[str, Any]] = []

    async def generate(token_ids: list[int], params: dict[str, Any]) -> GenerateOutput:
        params_seen.append(params)
        text = oracle.reply(replies)
        replies.append(text)
        ids = tok.encode(text, add_special_tokens=False) + [tok.eos_token_id]
        return GenerateOutput(ids, None if logprob is None else [logprob] * len(ids))

    generate.replies = replies  # type: ignore[attr-defined]
    generate.params_seen = params_seen  # type: ignore[attr-defined]
    return generate


def segments(episode: TokenEpisode) -> list[tuple[int, list[int]]]:
    """The response as runs of (mask value, token ids)."""
    out: list[tuple[int, list[int]]] = []
    for token, mask in zip(episode.response_ids, episode.response_mask, strict=True):
        if out and out[-1][0] == mask:
            out[-1][1].append(token)
        else:
            out.append((mask, [token]))
    return out


# ------------------------------------------------------------------------------- episode core


@pytest.mark.parametrize("env_id", [REASONING, TOOL_USE, GAME])
def test_the_oracle_gets_the_full_return_and_the_mask_marks_what_the_model_wrote(tok: Any, env_id: str) -> None:
    generate = scripted(tok, env_id, 3)
    episode = asyncio.run(play_token_episode(env_id, 3, generate=generate, tokenizer=tok))
    assert episode.reward == 1.0 and episode.success and episode.error is None
    assert episode.stop == "terminated" and episode.terminated
    assert episode.agent_turns == len(generate.replies) >= 1
    assert len(episode.response_ids) == len(episode.response_mask)
    # the prompt is the chat template of the system prompt and the first observation
    assert tok.decode(episode.prompt_ids) == render_chat(tok, episode.messages[:2], add_generation_prompt=True)
    env = gymnasium.make(env_id).unwrapped
    first, _ = env.reset(seed=3)
    env.close()
    assert episode.messages[1] == {"role": "user", "content": first}
    # generated runs (mask 1) are exactly the replies; the runs between (mask 0) are the observations
    runs = segments(episode)
    generated = [tok.decode(ids) for mask, ids in runs if mask == 1]
    written = [tok.decode(ids) for mask, ids in runs if mask == 0]
    assert generated == [reply + "<|im_end|>" for reply in generate.replies]
    observations = [m["content"] for m in episode.messages[2:] if m["role"] == "user"]
    assert written == [observation_text(tok, o) for o in observations]
    assert len(written) == episode.agent_turns - 1  # the final observation is not appended
    assert runs[0][0] == 1 and runs[-1][0] == 1
    assert episode.num_turns == 2 * episode.agent_turns  # first user turn, then assistant/user pairs
    assert episode.response_logprobs is None  # the generator reported none


def test_concurrent_episodes_do_not_interfere(tok: Any) -> None:
    async def many() -> list[TokenEpisode]:
        jobs = [(env_id, seed) for env_id in (TOOL_USE, GAME) for seed in (1, 2)]
        return list(
            await asyncio.gather(
                *(play_token_episode(e, s, generate=scripted(tok, e, s), tokenizer=tok) for e, s in jobs)
            )
        )

    episodes = asyncio.run(many())
    assert [e.reward for e in episodes] == [1.0] * 4
    assert [(e.env_id, e.seed) for e in episodes] == [(TOOL_USE, 1), (TOOL_USE, 2), (GAME, 1), (GAME, 2)]


def test_log_probs_are_kept_on_generated_tokens_and_zero_on_observations(tok: Any) -> None:
    generate = scripted(tok, TOOL_USE, 3, logprob=-0.25)
    episode = asyncio.run(play_token_episode(TOOL_USE, 3, generate=generate, tokenizer=tok))
    assert episode.response_logprobs is not None
    assert len(episode.response_logprobs) == len(episode.response_ids)
    for mask, logprob in zip(episode.response_mask, episode.response_logprobs, strict=True):
        assert logprob == (-0.25 if mask else 0.0)


def test_garbage_gets_zero_after_the_turn_limit(tok: Any) -> None:
    generate = scripted(tok, REASONING, 3, garbage=True)
    episode = asyncio.run(play_token_episode(REASONING, 3, generate=generate, tokenizer=tok))
    assert episode.reward == 0.0 and episode.error is None
    assert episode.stop in ("max_turns", "truncated", "terminated")
    env = gymnasium.make(REASONING).unwrapped
    assert episode.agent_turns <= env.max_turns
    env.close()
    capped = asyncio.run(
        play_token_episode(REASONING, 3, generate=scripted(tok, REASONING, 3, garbage=True), tokenizer=tok, max_turns=1)
    )
    assert capped.agent_turns == 1 and capped.reward == 0.0


def test_a_program_crashing_mid_episode_ends_it_with_zero_and_an_error(tok: Any, hostile: dict[str, str]) -> None:
    env_id = hostile["crash_step"]
    episode = asyncio.run(play_token_episode(env_id, 0, generate=scripted(tok, env_id, 0), tokenizer=tok))
    assert episode.rewards[0] == 0.5  # paid before the crash, then taken back: the return is 0
    assert episode.reward == 0.0 and episode.stop == "error" and episode.truncated
    assert episode.error is not None and "boom at step two" in episode.error["message"]
    assert episode.agent_turns == 2
    extra = episode.extra_fields()
    assert extra["spade_return"] == 0.0 and "boom" in extra["spade_error"] and extra["spade_stop"] == "error"
    json.dumps(extra)


@pytest.mark.parametrize("kind", ["crash_reset", "no_load"])
def test_a_program_that_cannot_start_gives_zero_and_no_response(tok: Any, hostile: dict[str, str], kind: str) -> None:
    env_id = hostile[kind]
    generate = scripted(tok, REASONING, 0)
    episode = asyncio.run(play_token_episode(env_id, 0, generate=generate, tokenizer=tok))
    assert episode.reward == 0.0 and episode.stop == "error" and episode.error is not None
    assert episode.response_ids == [] and episode.agent_turns == 0 and generate.replies == []
    assert "failed to start" in tok.decode(episode.prompt_ids)
    output = episode.agent_loop_output(64)
    # an empty list, not None: verl concatenates the batch's log-probs when the first sample has some
    assert output["reward_score"] == 0.0 and output["response_logprobs"] == []


def test_the_response_budget_ends_the_episode(tok: Any) -> None:
    generate = scripted(tok, TOOL_USE, 3)
    episode = asyncio.run(play_token_episode(TOOL_USE, 3, generate=generate, tokenizer=tok, response_length=200))
    assert episode.stop == "response_length" and episode.truncated and episode.reward == 0.0
    assert 0 < len(episode.response_ids) <= 200
    # budget_key hands the tokens left to the generator
    generate = scripted(tok, TOOL_USE, 3)
    asyncio.run(
        play_token_episode(
            TOOL_USE,
            3,
            generate=generate,
            tokenizer=tok,
            response_length=5000,
            budget_key="max_tokens",
            sampling_params={"temperature": 1.0},
        )
    )
    seen = generate.params_seen
    assert seen[0] == {"temperature": 1.0, "max_tokens": 5000}
    assert all(b["max_tokens"] < a["max_tokens"] for a, b in zip(seen, seen[1:], strict=False))


def test_bad_input_raises_clearly(tok: Any) -> None:
    async def never(token_ids: list[int], params: dict[str, Any]) -> list[int]:
        raise AssertionError("not called")

    with pytest.raises(EnvNotFound, match="ArithmeticChain-v0"):
        asyncio.run(play_token_episode("spade/ArithmeticChian-v0", 0, generate=never, tokenizer=tok))
    with pytest.raises(ValueError, match="not an environment program"):
        asyncio.run(play_token_episode("spade/Generated-v0", 0, generate=never, tokenizer=tok))
    with pytest.raises(ValueError, match="seed"):
        asyncio.run(play_token_episode(REASONING, -1, generate=never, tokenizer=tok))

    async def text(token_ids: list[int], params: dict[str, Any]) -> str:
        return "not ids"

    with pytest.raises(TypeError, match="token ids"):
        asyncio.run(play_token_episode(REASONING, 0, generate=text, tokenizer=tok))
    with pytest.raises(ValueError, match="has no env_id.*'seed'"):
        episode_spec({"seed": 1, "prompt": []})
    with pytest.raises(ValueError, match="seed must be"):
        episode_spec({"extra_info": {"env_id": REASONING, "seed": "x"}})
    assert episode_spec({"label": json.dumps({"env_id": REASONING, "seed": 2, "hint": True})}) == (REASONING, 2, True)


def test_the_embedded_smollm2_tokenizer_plays_an_episode(monkeypatch: pytest.MonkeyPatch) -> None:
    from spade_gym.policies.embedded import cache_dir

    folders = sorted((cache_dir() / "models").glob("SmolLM2-135M-Instruct*/tokenizer.json"))
    if not folders:
        pytest.skip("the embedded model is not converted in this cache (set SPADE_CACHE)")
    from transformers import AutoTokenizer

    smol = AutoTokenizer.from_pretrained(folders[0].parent)
    generate = scripted(smol, GAME, 4)
    episode = asyncio.run(play_token_episode(GAME, 4, generate=generate, tokenizer=smol))
    assert episode.reward == 1.0
    assert "<|im_start|>user" in smol.decode(episode.prompt_ids)
    assert sum(episode.response_mask) == sum(
        len(smol.encode(r, add_special_tokens=False)) + 1 for r in generate.replies
    )


# ------------------------------------------------------------------------------------- dataset


def test_rows_have_verls_columns_and_start_where_the_episode_starts(tmp_path: Path) -> None:
    rows = make_rows([REASONING, GAME], seeds=[0, 5], split="val")
    assert [(r["extra_info"]["env_id"], r["extra_info"]["seed"]) for r in rows] == [
        (REASONING, 0),
        (REASONING, 5),
        (GAME, 0),
        (GAME, 5),
    ]
    for i, row in enumerate(rows):
        assert set(row) == {"data_source", "agent_name", "prompt", "ability", "reward_model", "extra_info"}
        assert row["agent_name"] == AGENT_NAME and row["data_source"] == "spade_gym"
        assert row["extra_info"] == {
            "split": "val",
            "index": i,
            "env_id": row["extra_info"]["env_id"],
            "seed": row["extra_info"]["seed"],
            "hint": False,
        }
        assert [m["role"] for m in row["prompt"]] == ["system", "user"]
        env = gymnasium.make(row["extra_info"]["env_id"]).unwrapped
        first, _ = env.reset(seed=row["extra_info"]["seed"])
        assert row["prompt"][1]["content"] == first and row["ability"] == env.setting
        env.close()
        assert episode_spec(row) == (row["extra_info"]["env_id"], row["extra_info"]["seed"], False)
    hinted = make_rows([REASONING], seeds=[0], hint=True)
    assert "\n\nHint: " in hinted[0]["prompt"][1]["content"] and hinted[0]["extra_info"]["hint"] is True
    pq = pytest.importorskip("pyarrow.parquet")
    path = write_parquet(rows, tmp_path / "data" / "train.parquet")
    back = pq.read_table(path).to_pylist()
    assert back == rows
    with pytest.raises(ValueError, match="no agent_name"):
        write_parquet([{"data_source": "x", "prompt": [], "extra_info": {}}], tmp_path / "bad.parquet")


def test_rows_refuse_unknown_ids_bad_seeds_and_broken_programs(hostile: dict[str, str]) -> None:
    with pytest.raises(EnvNotFound, match="did you mean spade/NimLastStoneWins-v0"):
        make_rows(["spade/NimLastStoneWin-v0"])
    with pytest.raises(ValueError, match="seeds must be ints >= 0"):
        make_rows([REASONING], seeds=[1, -2])
    with pytest.raises(SpadeError, match="failed to start at seed 0: RuntimeError"):
        make_rows([hostile["crash_reset"]], seeds=[0])


# ------------------------------------------------------------------------ the verl agent loop


def fake_verl() -> dict[str, types.ModuleType]:
    """Stand-ins of ``verl`` down to ``verl.experimental.agent_loop.agent_loop``, mirroring the API
    of verl 0.5-0.7: ``AgentLoopBase(trainer_config, server_manager, tokenizer, processor, **kwargs)``
    with ``self.config = trainer_config.config``, abstract ``async run(sampling_params, **kwargs)``;
    ``AgentLoopOutput``/``AgentLoopMetrics`` (pydantic); ``register(name)`` filling
    ``_agent_loop_registry`` with ``{"_target_": "<module>.<qualname>"}``."""
    from pydantic import BaseModel

    class AgentLoopMetrics(BaseModel):
        generate_sequences: float = 0.0
        tool_calls: float = 0.0

    class AgentLoopOutput(BaseModel):
        prompt_ids: list[int]
        response_ids: list[int]
        response_mask: list[int]
        response_logprobs: list[float] | None = None
        multi_modal_data: dict[str, Any] | None = None
        reward_score: float | None = None
        num_turns: int = 0
        metrics: AgentLoopMetrics
        extra_fields: dict[str, Any] = {}

    class DictConfigWrap:
        def __init__(self, config: Any) -> None:
            self.config = config

    class AgentLoopBase(ABC):
        def __init__(
            self, trainer_config: Any, server_manager: Any, tokenizer: Any, processor: Any, **kwargs: Any
        ) -> None:
            self.config = trainer_config.config
            self.server_manager = server_manager
            self.tokenizer = tokenizer
            self.processor = processor
            self.extra_kwargs = kwargs

        @abstractmethod
        async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
            raise NotImplementedError

    registry: dict[str, dict] = {}

    def register(agent_name: str) -> Any:
        def decorator(subclass: type) -> type:
            registry[agent_name] = {"_target_": f"{subclass.__module__}.{subclass.__qualname__}"}
            return subclass

        return decorator

    leaf = types.ModuleType("verl.experimental.agent_loop.agent_loop")
    leaf.AgentLoopBase, leaf.AgentLoopOutput, leaf.AgentLoopMetrics = AgentLoopBase, AgentLoopOutput, AgentLoopMetrics
    leaf.DictConfigWrap, leaf.register, leaf._agent_loop_registry = DictConfigWrap, register, registry
    modules = {name: types.ModuleType(name) for name in ("verl", "verl.experimental", "verl.experimental.agent_loop")}
    modules["verl.experimental.agent_loop.agent_loop"] = leaf
    return modules


class ScriptedServerManager:
    """verl's server manager, answering with the oracle: ``generate(request_id, *, prompt_ids,
    sampling_params)`` returns a ``TokenOutput``-like object (``token_ids``, ``log_probs``)."""

    def __init__(self, tok: Any, env_id: str, seed: int) -> None:
        self.tok, self.oracle = tok, ShadowOracle(env_id, seed)
        self.replies: dict[str, list[str]] = {}
        self.sampling: list[dict[str, Any]] = []

    async def generate(
        self, request_id: str, *, prompt_ids: list[int], sampling_params: dict[str, Any], image_data: Any = None
    ) -> Any:
        replies = self.replies.setdefault(request_id, [])
        self.sampling.append(dict(sampling_params))
        text = self.oracle.reply(replies)
        replies.append(text)
        ids = self.tok.encode(text, add_special_tokens=False) + [self.tok.eos_token_id]
        return types.SimpleNamespace(token_ids=ids, log_probs=[-0.5] * len(ids))


def test_the_agent_loop_plays_a_sample_through_verls_api(
    tok: Any, monkeypatch: pytest.MonkeyPatch, fresh_loop: None
) -> None:
    for name, module in fake_verl().items():
        monkeypatch.setitem(sys.modules, name, module)
    leaf = sys.modules["verl.experimental.agent_loop.agent_loop"]
    # the agent loop config file names the class; verl instantiates the _target_ with hydra
    import yaml

    configs = yaml.safe_load((ROOT / "examples/integrations/verl_agent_loop.yaml").read_text())
    entry = next(c for c in configs if c["name"] == AGENT_NAME)
    module_name, _, attr = entry["_target_"].rpartition(".")
    cls = getattr(importlib.import_module(module_name), attr)
    assert cls is verl_mod.agent_loop_class() and issubclass(cls, leaf.AgentLoopBase)
    assert leaf._agent_loop_registry[AGENT_NAME] == {"_target_": entry["_target_"]}

    row = make_rows([TOOL_USE], seeds=[3])[0]
    config = types.SimpleNamespace(
        actor_rollout_ref=types.SimpleNamespace(rollout=types.SimpleNamespace(response_length=4096)), data={}
    )
    server = ScriptedServerManager(tok, TOOL_USE, 3)
    extra = {k: v for k, v in entry.items() if k != "_target_"}
    loop = cls(
        trainer_config=leaf.DictConfigWrap(config), server_manager=server, tokenizer=tok, processor=None, **extra
    )
    # verl passes the row's non-tensor fields (agent_name is consumed by the worker)
    kwargs = {k: v for k, v in row.items() if k != "agent_name"} | {"raw_prompt": row["prompt"], "index": 0}
    out = asyncio.run(loop.run({"temperature": 1.0, "top_p": 1.0, "logprobs": True}, **kwargs))
    assert isinstance(out, leaf.AgentLoopOutput)
    assert out.reward_score == 1.0 and out.extra_fields["spade_return"] == 1.0
    assert out.extra_fields["spade_env_id"] == TOOL_USE and out.extra_fields["spade_seed"] == 3
    assert len(out.response_ids) == len(out.response_mask) == len(out.response_logprobs)
    assert set(out.response_mask) == {0, 1} and out.response_mask[0] == 1 and out.response_mask[-1] == 1
    assert out.num_turns == 2 * out.extra_fields["spade_turns"] and out.metrics.generate_sequences >= 0.0
    assert tok.decode(out.prompt_ids).endswith("<|im_start|>assistant\n")
    assert len(server.replies) == 1  # one request id per episode: its turns stick to one server
    assert all(s == {"temperature": 1.0, "top_p": 1.0, "logprobs": True} for s in server.sampling)
    # the response budget of the rollout config cuts the response
    config.actor_rollout_ref.rollout.response_length = 150
    short = cls(
        trainer_config=leaf.DictConfigWrap(config),
        server_manager=ScriptedServerManager(tok, TOOL_USE, 3),
        tokenizer=tok,
        processor=None,
    )
    out = asyncio.run(short.run({}, **kwargs))
    assert len(out.response_ids) <= 150 and out.extra_fields["spade_stop"] == "response_length"
    with pytest.raises(ValueError, match="has no env_id"):
        asyncio.run(short.run({}, prompt=[], extra_info={"index": 0}))


def test_without_verl_the_class_is_one_clear_line(monkeypatch: pytest.MonkeyPatch, fresh_loop: None) -> None:
    monkeypatch.setitem(sys.modules, "verl", None)
    with pytest.raises(MissingDependency) as info:
        verl_mod.SpadeAgentLoop  # noqa: B018
    assert (
        str(info.value)
        == "spade_gym.integrations.verl needs verl: pip install -e '.[verl]' in a clone of the spade_gym repository (spade-gym is not on PyPI yet)"
    )
    with pytest.raises(AttributeError):
        verl_mod.NoSuchThing  # noqa: B018


def test_importing_spade_gym_and_the_integrations_imports_no_framework() -> None:
    code = textwrap.dedent(
        """
        import sys
        import spade_gym
        import spade_gym.integrations.verl, spade_gym.integrations.openrlhf_agent, spade_gym.integrations.verifiers
        print(sorted(m for m in ("torch", "transformers", "verifiers", "verl", "openrlhf", "vllm", "pyarrow", "openai") if m in sys.modules))
        """
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert out.stdout.strip() == "[]"


def test_readme_example_writes_the_datasets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyarrow")
    monkeypatch.chdir(tmp_path)
    exec(
        compile(readme_example("## verl and OpenRLHF", doc="docs/integrations.md"), "docs/integrations.md", "exec"), {}
    )
    assert (tmp_path / "spade_train.parquet").is_file() and (tmp_path / "spade_val.parquet").is_file()
    lines = (tmp_path / "spade_openrlhf.jsonl").read_text().splitlines()
    assert json.loads(json.loads(lines[0])["label"])["env_id"] == REASONING


def test_default_rows_leave_out_the_held_out_evaluation_environments() -> None:
    from spade_gym.registry.gymnasium import HELD_OUT_SEED_ENVS, bundled_registry_path

    ids = {row["extra_info"]["env_id"] for row in make_rows(seeds=[0])}
    held_out = {f"spade/{name}-v0" for name in HELD_OUT_SEED_ENVS}
    seeds = len(list((bundled_registry_path() / "envs").iterdir()))
    assert len(ids) == seeds - len(HELD_OUT_SEED_ENVS) and not ids & held_out
    named = {row["extra_info"]["env_id"] for row in make_rows([TOOL_USE], seeds=[0])}
    assert named == {TOOL_USE}  # named explicitly, a held-out environment is played
