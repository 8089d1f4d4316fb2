"""OpenRLHF integration: the agent function's reset/step logic against real environments (an
oracle gets the full return, garbage 0, a crashing program a total of 0 and an error, never an
exception), and the file as OpenRLHF loads it, run by a stand-in of ``openrlhf.utils.agent`` that
mirrors OpenRLHF 0.10's ``AgentInstanceBase`` / ``MultiTurnAgentExecutor.execute`` loop."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import sys
import types
from abc import ABC, abstractmethod
from collections.abc import Iterator
from copy import deepcopy
from pathlib import Path
from typing import Any

import pytest
from integration_helpers import ShadowOracle, byte_tokenizer, label, register_hostile_envs

import spade_gym.integrations.openrlhf_agent as agent_mod
from spade_gym.errors import EnvNotFound, MissingDependency
from spade_gym.integrations._episode import observation_text
from spade_gym.integrations.openrlhf_agent import SpadeAgentSession, make_rows

REASONING, TOOL_USE, GAME = "spade/ArithmeticChain-v0", "spade/InboxCodeRelay-v0", "spade/NimLastStoneWins-v0"


@pytest.fixture(scope="module")
def tok() -> Any:
    pytest.importorskip("transformers")
    return byte_tokenizer()


@pytest.fixture(scope="module")
def hostile() -> dict[str, str]:
    return register_hostile_envs()


@pytest.fixture
def fresh_classes() -> Iterator[None]:
    """agent_classes() defined anew against this test's (fake) OpenRLHF, and forgotten after it."""
    agent_mod.agent_classes.cache_clear()
    yield
    agent_mod.agent_classes.cache_clear()


async def play(session: SpadeAgentSession, env_id: str, seed: int, *, garbage: bool = False) -> tuple[list[dict], str]:
    """Drive the session as OpenRLHF's executor does, text only: reset, then reply and step until done."""
    oracle = ShadowOracle(env_id, seed, garbage=garbage)
    observation = (await session.reset({"observation": "the dataset prompt", "label": label(env_id, seed)}))[
        "observation"
    ]
    replies: list[str] = []
    results = []
    for _ in range(50):
        reply = oracle.reply(replies)
        replies.append(reply)
        result = await session.step(
            {
                "observation_text": observation,
                "action_text": reply,
                "label": label(env_id, seed),
                "sampling_params": "sp",
            }
        )
        results.append(result)
        observation += reply + result["environment_feedback"]
        if result["done"]:
            break
    return results, observation


@pytest.mark.parametrize("env_id", [REASONING, TOOL_USE, GAME])
def test_the_oracle_earns_the_full_return_step_by_step(tok: Any, env_id: str) -> None:
    session = SpadeAgentSession(tokenizer=tok)
    results, transcript = asyncio.run(play(session, env_id, 2))
    assert results[-1]["done"] and all(not r["done"] for r in results[:-1])
    assert sum(r["rewards"] for r in results) == pytest.approx(1.0)
    assert results[-1]["scores"] == 1.0 and results[-1]["environment_feedback"] == ""
    logs = results[-1]["extra_logs"]
    assert logs == {
        "spade_return": 1.0,
        "spade_success": 1.0,
        "spade_turns": float(len(results)),
        "spade_error": 0.0,
        "spade_format_ok": 1.0,
    }
    assert all(r["sampling_params"] == "sp" for r in results)
    # the prompt is the chat template of the system prompt and first observation; feedback opens a user turn
    assert transcript.startswith("<|im_start|>system\n") and "<|im_start|>assistant\n" in transcript
    for result in results[:-1]:
        fb = result["environment_feedback"]
        assert fb.startswith("<|im_start|>user\n") and fb.endswith("<|im_start|>assistant\n")
    assert session.episode is not None and session.episode.success


def test_garbage_earns_nothing_and_without_a_tokenizer_the_prompt_passes_through(hostile: dict[str, str]) -> None:
    session = SpadeAgentSession()
    results, transcript = asyncio.run(play(session, REASONING, 2, garbage=True))
    assert sum(r["rewards"] for r in results) == 0.0 and results[-1]["done"]
    assert transcript.startswith("the dataset prompt")
    assert results[-1]["extra_logs"]["spade_format_ok"] == 0.0


def test_a_crashing_program_totals_zero_and_logs_the_error(tok: Any, hostile: dict[str, str]) -> None:
    session = SpadeAgentSession(tokenizer=tok)
    results, _ = asyncio.run(play(session, hostile["crash_step"], 0))
    assert [r["rewards"] for r in results] == [0.5, -0.5]  # the crash takes back what was paid
    assert results[-1]["done"] and results[-1]["scores"] == 0.0
    assert results[-1]["extra_logs"]["spade_error"] == 1.0
    assert session.episode is not None and "boom at step two" in session.episode.error["message"]
    for kind in ("crash_reset", "no_load"):
        session = SpadeAgentSession(tokenizer=tok)
        start = asyncio.run(session.reset({"observation": "p", "label": label(hostile[kind], 0)}))
        assert "failed to start" in start["observation"]
        result = asyncio.run(session.step({"action_text": "<answer>1</answer>"}))
        assert result["done"] and result["rewards"] == 0.0 and result["extra_logs"]["spade_error"] == 1.0


def test_bad_labels_raise_clearly() -> None:
    session = SpadeAgentSession()
    with pytest.raises(ValueError, match="has no env_id"):
        asyncio.run(session.reset({"observation": "p", "label": "just text"}))
    with pytest.raises(EnvNotFound, match="unknown environment id"):
        asyncio.run(session.reset({"observation": "p", "label": label("spade/Nope-v0", 1)}))
    with pytest.raises(RuntimeError, match="before reset"):
        asyncio.run(SpadeAgentSession().step({"action_text": "x"}))


def test_rows_carry_the_episode_in_the_label() -> None:
    rows = make_rows([REASONING, GAME], seeds=[1, 2])
    assert [json.loads(r["label"]) for r in rows] == [
        {"env_id": REASONING, "seed": 1, "hint": False},
        {"env_id": REASONING, "seed": 2, "hint": False},
        {"env_id": GAME, "seed": 1, "hint": False},
        {"env_id": GAME, "seed": 2, "hint": False},
    ]
    assert [m["role"] for m in rows[0]["prompt"]] == ["system", "user"]


# ----------------------------------------------------------------- the file, as OpenRLHF loads it


def fake_openrlhf() -> dict[str, types.ModuleType]:
    """``openrlhf.utils.agent`` as of OpenRLHF 0.10: ``AgentInstanceBase`` (abstract ``__init__``
    and ``step``, ``reset`` returning the states), ``AgentExecutorBase`` (abstract ``execute``) and
    ``MultiTurnAgentExecutor(agent_instance_cls)`` whose ``execute(prompt, label, sampling_params,
    max_length, hf_tokenizer, llm_engine)`` runs the token-in-token-out loop: tokenize the reset
    observation, generate while the budget lasts, step, append action and feedback tokens."""

    class AgentInstanceBase(ABC):
        @abstractmethod
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            pass

        async def reset(self, states: dict, **kwargs: Any) -> dict:
            return states

        @abstractmethod
        async def step(self, state_dict: dict, **kwargs: Any) -> dict:
            raise NotImplementedError

    class AgentExecutorBase(ABC):
        @abstractmethod
        async def execute(
            self, prompt: Any, label: Any, sampling_params: Any, max_length: int, hf_tokenizer: Any, llm_engine: Any
        ) -> dict:
            raise NotImplementedError

    class MultiTurnAgentExecutor(AgentExecutorBase):
        def __init__(self, agent_instance_cls: type) -> None:
            assert issubclass(agent_instance_cls, AgentInstanceBase)
            self.agent_instance_cls = agent_instance_cls

        async def execute(
            self,
            prompt: Any,
            label: Any,
            sampling_params: Any,
            max_length: int,
            hf_tokenizer: Any,
            llm_engine: Any,
            images: Any = None,
        ) -> dict:
            instance = self.agent_instance_cls()
            reset = await instance.reset({"observation": prompt, "label": label})
            text = reset["observation"]
            tokens = hf_tokenizer(text, add_special_tokens=False)["input_ids"]
            ranges, total, scores, logs = [], 0.0, 0.0, {}
            while True:
                sampling_params.max_tokens = max_length - len(tokens)
                if sampling_params.max_tokens <= 0:
                    break
                out = (await llm_engine.generate(tokens, deepcopy(sampling_params))).outputs[0]
                ranges.append((len(tokens), len(tokens) + len(out.token_ids)))
                result = await instance.step(
                    {
                        "observation_text": text,
                        "action_text": out.text,
                        "label": label,
                        "sampling_params": sampling_params,
                    }
                )
                total += result["rewards"].item()
                scores = result.get("scores", total)
                logs = result.get("extra_logs", {})
                feedback = result["environment_feedback"]
                text = text + out.text + feedback
                tokens = tokens + list(out.token_ids) + hf_tokenizer(feedback, add_special_tokens=False)["input_ids"]
                if result.get("sampling_params"):
                    sampling_params = result["sampling_params"]
                if result["done"]:
                    break
            return {
                "prompt": prompt,
                "label": label,
                "reward": total,
                "scores": scores,
                "observation_tokens": tokens,
                "action_ranges": ranges,
                "extra_logs": logs,
            }

    leaf = types.ModuleType("openrlhf.utils.agent")
    leaf.AgentInstanceBase, leaf.AgentExecutorBase, leaf.MultiTurnAgentExecutor = (
        AgentInstanceBase,
        AgentExecutorBase,
        MultiTurnAgentExecutor,
    )
    return {
        "openrlhf": types.ModuleType("openrlhf"),
        "openrlhf.utils": types.ModuleType("openrlhf.utils"),
        "openrlhf.utils.agent": leaf,
    }


class ScriptedEngine:
    """``llm_engine.generate(token_ids, sampling_params)`` answering with the oracle, as vLLM does:
    ``outputs[0].token_ids`` end with EOS, ``outputs[0].text`` does not."""

    def __init__(self, tok: Any, env_id: str, seed: int, *, garbage: bool = False) -> None:
        self.tok, self.oracle, self.replies = tok, ShadowOracle(env_id, seed, garbage=garbage), []

    async def generate(self, token_ids: list[int], sampling_params: Any) -> Any:
        text = self.oracle.reply(self.replies)
        self.replies.append(text)
        ids = self.tok.encode(text, add_special_tokens=False) + [self.tok.eos_token_id]
        return types.SimpleNamespace(outputs=[types.SimpleNamespace(token_ids=ids, text=text, logprobs=None)])


def load_like_openrlhf(path: str) -> Any:
    """OpenRLHF's loader: exec the file as ``agent_module`` and check ``AgentExecutor``."""
    spec = importlib.util.spec_from_file_location("agent_module", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    assert hasattr(module, "AgentExecutor"), "Agent module must contain AgentExecutor class"
    executor_cls = module.AgentExecutor
    assert issubclass(executor_cls, sys.modules["openrlhf.utils.agent"].AgentExecutorBase)
    return executor_cls


def test_openrlhf_loads_the_file_and_its_executor_plays_episodes(
    tok: Any, hostile: dict[str, str], monkeypatch: pytest.MonkeyPatch, fresh_classes: None
) -> None:
    pytest.importorskip("torch")
    for name, module in fake_openrlhf().items():
        monkeypatch.setitem(sys.modules, name, module)
    executor_cls = load_like_openrlhf(agent_mod.__file__)
    executor = executor_cls()
    row = make_rows([TOOL_USE], seeds=[3])[0]
    prompt = tok.apply_chat_template(row["prompt"], tokenize=False, add_generation_prompt=True)
    engine = ScriptedEngine(tok, TOOL_USE, 3)
    params = types.SimpleNamespace(max_tokens=None, logprobs=None)
    # OpenRLHF 0.10 calls execute(prompt=, label=, sampling_params=, max_length=, hf_tokenizer=, llm_engine=, images=)
    out = asyncio.run(
        executor.execute(
            prompt=prompt,
            label=row["label"],
            sampling_params=params,
            max_length=100_000,
            hf_tokenizer=tok,
            llm_engine=engine,
            images=None,
        )
    )
    assert out["reward"] == pytest.approx(1.0) and float(out["scores"]) == 1.0
    assert float(out["extra_logs"]["spade_success"]) == 1.0
    tokens = out["observation_tokens"]
    # the context starts with the prompt the instance rendered (the same as the dataset's), the action
    # ranges hold exactly the replies, and between them sit the observations as user turns
    assert tok.decode(tokens).startswith(prompt)
    assert [tok.decode(tokens[a:b]) for a, b in out["action_ranges"]] == [r + "<|im_end|>" for r in engine.replies]
    gaps = [
        tok.decode(tokens[b:a]) for (_, b), (a, _) in zip(out["action_ranges"], out["action_ranges"][1:], strict=False)
    ]
    assert len(gaps) == len(engine.replies) - 1 and all(g.startswith("<|im_start|>user\n") for g in gaps)
    assert gaps[0] == observation_text(tok, gaps[0].split("\n", 1)[1].rsplit("<|im_end|>", 1)[0])
    # a crashing program: total 0, logged; a tight budget: the executor stops, nothing raises
    crash = asyncio.run(
        executor.execute(
            "p",
            json.dumps({"env_id": hostile["crash_step"], "seed": 0}),
            types.SimpleNamespace(max_tokens=None),
            100_000,
            tok,
            ScriptedEngine(tok, hostile["crash_step"], 0),
        )
    )
    assert crash["reward"] == pytest.approx(0.0) and float(crash["extra_logs"]["spade_error"]) == 1.0
    short = asyncio.run(
        executor.execute(
            prompt,
            row["label"],
            types.SimpleNamespace(max_tokens=None),
            len(tok(prompt)["input_ids"]) + 60,
            tok,
            ScriptedEngine(tok, TOOL_USE, 3),
        )
    )
    assert short["reward"] == 0.0


def test_without_openrlhf_the_classes_are_one_clear_line(monkeypatch: pytest.MonkeyPatch, fresh_classes: None) -> None:
    monkeypatch.setitem(sys.modules, "openrlhf", None)
    with pytest.raises(MissingDependency) as info:
        agent_mod.AgentExecutor  # noqa: B018
    assert (
        str(info.value)
        == "spade_gym.integrations.openrlhf_agent needs openrlhf: pip install -e '.[openrlhf]' in a clone of the spade_gym repository (spade-gym is not on PyPI yet)"
    )
    assert not hasattr(agent_mod, "NoSuchThing")
    # an OpenRLHF without MultiTurnAgentExecutor (before 0.10) is named as such
    old = fake_openrlhf()
    del old["openrlhf.utils.agent"].MultiTurnAgentExecutor
    for name, module in old.items():
        monkeypatch.setitem(sys.modules, name, module)
    with pytest.raises(MissingDependency, match="OpenRLHF >= 0.10"):
        agent_mod.agent_classes()


def test_the_agent_file_is_where_the_readme_says(tmp_path: Path) -> None:
    assert Path(agent_mod.__file__).name == "openrlhf_agent.py"
    script = (Path(__file__).resolve().parent.parent / "examples/integrations/openrlhf_spade.sh").read_text()
    assert "--train.agent_func_path" in script and "--data.label_key label" in script
