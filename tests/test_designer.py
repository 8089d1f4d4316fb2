"""The Environment Designer: prompts, program extraction, evaluation, repair rounds and
``SpadeDesignerEnv``, with the real sandbox, the real registry on disk and (slow tests) the real
embedded model."""

from __future__ import annotations

import json
import random
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium
import pytest
from doubles import ScriptedPolicy
from gymnasium.utils import seeding
from gymnasium.utils.env_checker import check_env
from readme import readme_example

from spade_gym.agent import DECOY_OBSERVATION, RolloutConfig
from spade_gym.contract import skeleton
from spade_gym.design_prompts import system_prompt
from spade_gym.designer import (
    DESIGNER_SYSTEM_PROMPT,
    DesignerConfig,
    SpadeDesignerEnv,
    build_prompt,
    design,
    draw_design,
    draw_group,
    evaluate_completion,
    extract_program,
    propose,
    validate_designs,
)
from spade_gym.documents import Document
from spade_gym.memory import EnvironmentMemory, MemoryConfig
from spade_gym.policies.base import SamplingParams
from spade_gym.program import EnvProgram
from spade_gym.registry import Registry
from spade_gym.registry.gymnasium import HELD_OUT_SEED_ENVS, bundled_registry_path, open_registry
from spade_gym.regret import RewardConfig
from spade_gym.validation import ValidationConfig, validate

# A program the gate accepts, whose hint helps a reader of the hint (hint_reader below) only together
# with the observation: regret 1 for that Agent, exactly (the hint alone, a shift, names no word).
SECRET_WORD = '''import random

class Env:
    """Decode a secret word of eight letters shown shifted along the alphabet; the hint gives the shift."""

    name = "SecretWord"
    setting = "reasoning"
    max_turns = 1

    def reset(self, seed):
        rng = random.Random(seed)
        self.word = "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(8))
        self.shift = rng.randint(1, 25)
        coded = "".join(chr((ord(c) - 97 + self.shift) % 26 + 97) for c in self.word)
        self.done = False
        return "Decode the secret word " + coded + " of eight letters.", {}

    def step(self, action):
        self.done = True
        ok = action.strip() == self.word
        return ("Right." if ok else "Wrong."), (1.0 if ok else 0.0), True, False, {"ok": ok}

    def hint(self):
        return "Shift every letter back by " + str(self.shift) + "."

    def oracle(self):
        return self.word
'''


def read_hint(prompt: list[dict[str, str]]) -> str:
    """An Agent's reply that reads the hint: with ``word xyz`` and ``back by N`` in the last message,
    the word shifted back, else ``nothing``. It earns 1 with the hint, 0 without (and 0 with the hint
    alone) on SECRET_WORD."""
    text = prompt[-1]["content"]
    coded, shift = re.search(r"word ([a-z]+)", text), re.search(r"back by (\d+)", text)
    answer = "nothing"
    if coded and shift:
        answer = "".join(chr((ord(c) - 97 - int(shift.group(1))) % 26 + 97) for c in coded.group(1))
    return f"<answer>{answer}</answer>"


def hint_reader() -> ScriptedPolicy:
    """The Agent that reads the hint (:func:`read_hint`)."""
    return ScriptedPolicy(read_hint, name="hint-reader")


FAST = DesignerConfig(
    k=2,
    regret_seeds=0,  # fixed regret seeds 0 and 1 (the default draws them per design)
    rollout=RolloutConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=16)),
)
#: The gate on fixed, known seeds: what a program that behaves only there can exploit.
KNOWN_GATE = ValidationConfig(seeds=tuple(range(1000, 1010)), answer_seeds=tuple(range(5000, 5010)))


@pytest.fixture()
def empty_registry(tmp_path: Path) -> Registry:
    return open_registry(tmp_path / "registry", seed_library=False)


@pytest.fixture(scope="module")
def seeded_registry(tmp_path_factory: pytest.TempPathFactory) -> Registry:
    return open_registry(tmp_path_factory.mktemp("seeded") / "registry", seed_library=True)


def fenced(source: str, before: str = "Here is the environment.", after: str = "It is hard.") -> str:
    return f"{before}\n\n```python\n{source}```\n\n{after}"


# ---- extraction -------------------------------------------------------------------------------


def test_extract_fenced_program_with_prose_around() -> None:
    found = extract_program(fenced(SECRET_WORD))
    assert found.source == SECRET_WORD and found.problem is None and found.note is None


def test_extract_takes_the_last_block_defining_env() -> None:
    first = SECRET_WORD.replace("SecretWord", "FirstDraft")
    text = fenced(first) + "\nA helper:\n```python\nx = 1\n```\n" + fenced(SECRET_WORD, before="Better:")
    found = extract_program(text)
    assert found.source == SECRET_WORD
    assert found.note is not None and "2 code blocks define class Env" in found.note


def test_extract_unterminated_fence_runs_to_the_end() -> None:
    found = extract_program("Sure!\n```py\n" + SECRET_WORD)
    assert found.source == SECRET_WORD and found.note is not None and "never closed" in found.note


def test_extract_unfenced_code_drops_prose_before_and_after() -> None:
    text = "Here is my environment:\n\n" + SECRET_WORD + "\nThis environment trains spelling.\nEnjoy!"
    found = extract_program(text)
    assert found.source == SECRET_WORD and found.note is not None and "no code fence" in found.note
    assert EnvProgram(found.source).problems() == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("", "empty"),
        ("   \n\n", "empty"),
        ("I would design a maze game where the agent walks.", "no code"),
        ("```python\nx = 1\n```", "1 code block(s), none defining class Env"),
    ],
)
def test_extract_reports_a_completion_without_program(text: str, expected: str) -> None:
    found = extract_program(text)
    assert found.source is None and found.problem is not None and expected in found.problem


# ---- prompts ----------------------------------------------------------------------------------


def test_system_prompt_states_the_contract_and_its_example_passes_the_gate() -> None:
    for needed in ("class Env", "reset(self, seed)", "hint(self)", "oracle(self)", "max_turns", "random.Random(seed)"):
        assert needed in DESIGNER_SYSTEM_PROMPT
    example = extract_program(DESIGNER_SYSTEM_PROMPT.split("Example of a complete, valid module:")[1])
    assert example.source is not None
    report = validate(example.source)
    assert report.accepted, report.feedback()


def test_write_prompt_holds_document_memory_and_setting(seeded_registry: Registry) -> None:
    items = EnvironmentMemory(seeded_registry, MemoryConfig(k=3)).select(random.Random(0))
    doc = Document(text="Compound interest adds interest to the principal each period.", source={"kind": "test"})
    prompt = build_prompt(doc, items, setting="tool_use")
    user = prompt.messages[1]["content"]
    assert prompt.variant == "skeleton" and "ListSum" not in prompt.text  # no whole program to copy
    assert skeleton("tool_use") in user and "tools = TOOLS" in user  # the setting's Env to fill
    example = build_prompt(doc, items, setting="tool_use", variant="example")
    assert example.messages[0] == {"role": "system", "content": DESIGNER_SYSTEM_PROMPT}
    assert skeleton("tool_use") not in example.messages[1]["content"]
    assert doc.text in user and "tool_use environment" in user
    assert all(item.record.env_id in user for item in items) and len(items) == 3
    assert prompt.mode == "write" and prompt.parent is None
    provenance = prompt.provenance()
    assert provenance["document"] == {"kind": "test"} and provenance["memory"] == [i.record.env_id for i in items]
    assert provenance["prompt"] == "skeleton"
    json.dumps(provenance)


def test_edit_prompt_shows_the_parent_source(seeded_registry: Registry) -> None:
    items = EnvironmentMemory(seeded_registry, MemoryConfig(k=8)).select(random.Random(1))
    # the shortest one: a source longer than MemoryConfig.max_source_chars is shown truncated
    parent = min(items, key=lambda item: len(item.record.program().source))
    assert len(parent.record.program().source) <= MemoryConfig().max_source_chars
    prompt = build_prompt(None, items, mode="edit", parent=parent)
    user = prompt.messages[1]["content"]
    assert prompt.parent == parent.record.env_id
    assert f"variant of the environment {parent.record.env_id}" in user
    assert parent.record.program().source.splitlines()[-1].strip() in user
    assert "No document is available" in user


def test_prompt_rejects_bad_arguments(seeded_registry: Registry) -> None:
    with pytest.raises(ValueError, match="mode"):
        build_prompt(None, mode="rewrite")
    with pytest.raises(ValueError, match="setting"):
        build_prompt(None, setting="puzzle")
    with pytest.raises(ValueError, match="edit mode needs"):
        build_prompt(None, [], mode="edit")
    with pytest.raises(ValueError, match="prompt variant"):
        build_prompt(None, variant="fill-in")


@pytest.mark.parametrize("junk", ["\x00\x01\x02\x03" * 50, bytes(range(256)).decode("latin-1") * 2])
def test_a_junk_document_is_dropped_from_the_prompt(junk: str) -> None:
    prompt = build_prompt(junk, [])
    assert prompt.document is None and "No document is available" in prompt.messages[1]["content"]


def test_a_document_in_another_script_is_kept() -> None:
    text = "复利是指把每一期的利息加入本金，下一期再一起计算利息。银行存款和贷款常用这种方法。"
    prompt = build_prompt(text, [])
    assert prompt.document is not None and text in prompt.messages[1]["content"]


# ---- evaluation -------------------------------------------------------------------------------


def test_accepted_program_is_measured_registered_and_rewarded_with_regret(empty_registry: Registry) -> None:
    doc = Document(text="Spelling words backwards.", source={"kind": "test", "id": "spelling"})
    prompt = build_prompt(doc, [], setting="reasoning")
    agent = hint_reader()
    outcome = evaluate_completion(fenced(SECRET_WORD), prompt, registry=empty_registry, agent=agent, config=FAST)
    assert outcome.report.accepted and outcome.accepted
    assert outcome.estimate is not None
    assert (outcome.estimate.mean_hint, outcome.estimate.mean_nohint, outcome.estimate.regret) == (1.0, 0.0, 1.0)
    assert (outcome.reward.reward, outcome.reward.outcome) == (1.0, "regret")
    # one batched generate for the 2k episodes with and without the hint; the hint beat no hint, so a
    # second one for the k episodes with the hint alone (which return 0: the hint needs the observation)
    assert len(outcome.estimate.nohint) == 2 and agent.calls == 2
    assert outcome.estimate.mean_hint_only == 0.0 and "alone it returns 0.00" in outcome.estimate.reason
    assert all(t.decoy and DECOY_OBSERVATION not in t.messages[1]["content"] for t in outcome.estimate.hint_only)
    record = empty_registry.get("SecretWord-v0")
    assert record.stats.regret == 1.0 and record.stats.episodes == 6
    assert record.validation is not None and record.validation["regret"]["mean_hint_only"] == 0.0
    assert record.document is not None and record.document["document"] == {"kind": "test", "id": "spelling"}
    assert "designer" in record.tags and record.parents == ()
    assert gymnasium.spec("spade/SecretWord-v0") is not None
    info = outcome.info()
    json.dumps(info)
    assert info["gym_id"] == "spade/SecretWord-v0" and info["regret"]["regret"] == 1.0


def test_reward_outcomes_for_trivial_and_out_of_reach(tmp_path: Path) -> None:
    agent = ScriptedPolicy("<answer>nothing</answer>")  # never right: out of reach even with the hint
    reg = open_registry(tmp_path / "a", seed_library=False)
    outcome = evaluate_completion(fenced(SECRET_WORD), None, registry=reg, agent=agent, config=FAST)
    assert (outcome.reward.reward, outcome.reward.outcome) == (0.0, "out_of_reach") and outcome.accepted
    # with a threshold of 0 nothing is out of reach, and a regret of 0 is the reward
    config = DesignerConfig(k=2, rollout=FAST.rollout, reward=RewardConfig(out_of_reach_below=0.0))
    reg = open_registry(tmp_path / "b", seed_library=False)
    outcome = evaluate_completion(fenced(SECRET_WORD), None, registry=reg, agent=agent, config=config)
    assert (outcome.reward.reward, outcome.reward.outcome) == (0.0, "regret")


@pytest.mark.parametrize(
    ("completion", "category"),
    [
        ("Sorry, I cannot write code.", "NO_CODE"),
        ("", "NO_CODE"),
        # the contract half done: no hint() or oracle()
        (fenced(SECRET_WORD.split("    def hint")[0]), "COMPILE_REJECTED"),
        # two Env classes
        (fenced(SECRET_WORD + "\n\n" + SECRET_WORD.split("\n", 1)[1]), "COMPILE_REJECTED"),
        # an import outside the allow-list
        (fenced("import os\n" + SECRET_WORD), "COMPILE_REJECTED"),
    ],
)
def test_bad_completions_get_a_report_and_the_invalid_reward(
    empty_registry: Registry, completion: str, category: str
) -> None:
    outcome = evaluate_completion(completion, None, registry=empty_registry, agent=None, config=FAST)
    assert outcome.report.category == category and not outcome.accepted
    assert (outcome.reward.reward, outcome.reward.outcome) == (-1.0, "invalid")
    assert outcome.report.feedback().startswith("The environment") and len(empty_registry) == 0
    json.dumps(outcome.info())


def test_a_copy_of_a_memory_environment_gets_the_duplicate_penalty(seeded_registry: Registry) -> None:
    parent = seeded_registry.get("EightPuzzleSlide-v0")
    size = len(seeded_registry)
    outcome = evaluate_completion(fenced(parent.program().source), None, registry=seeded_registry, agent=None)
    assert outcome.report.category == "DUPLICATE" and not outcome.accepted
    assert (outcome.reward.reward, outcome.reward.outcome) == (-0.5, "duplicate")
    assert len(seeded_registry) == size


def test_design_repairs_with_the_report_fed_back(empty_registry: Registry) -> None:
    broken = SECRET_WORD.replace("import random\n", "import os\nimport random\n")
    designer = ScriptedPolicy([fenced(broken), fenced(SECRET_WORD)])
    prompt = build_prompt("Words spelled backwards.", [], setting="reasoning")
    outcome = design(designer, prompt, registry=empty_registry, agent=hint_reader(), config=FAST, seed=3, repairs=1)
    assert outcome.accepted and outcome.rounds == 2 and outcome.reward.outcome == "regret"
    assert [a["category"] for a in outcome.attempts] == ["COMPILE_REJECTED"]
    repair = designer.prompts[1]
    assert repair[:2] == prompt.messages and repair[2] == {"role": "assistant", "content": fenced(broken)}
    assert "os" in repair[3]["content"] and "corrected module" in repair[3]["content"]


def test_design_gives_up_after_the_repair_rounds(empty_registry: Registry) -> None:
    designer = ScriptedPolicy("no code, sorry")
    prompt = build_prompt("Words.", [])
    outcome = design(designer, prompt, registry=empty_registry, config=FAST, repairs=1)
    assert not outcome.accepted and outcome.rounds == 2 and len(designer.prompts) == 2
    assert outcome.reward.outcome == "invalid" and [a["category"] for a in outcome.attempts] == ["NO_CODE"]
    # only the latest attempt stays in the conversation
    assert len(designer.prompts[1]) == 4


# ---- SpadeDesignerEnv ---------------------------------------------------------------------------


def test_designer_env_passes_check_env(tmp_path: Path) -> None:
    env = SpadeDesignerEnv(agent=hint_reader(), registry=tmp_path / "registry")
    check_env(env, skip_render_check=True)
    env.close()


def test_designer_env_by_hand_through_gymnasium_make(tmp_path: Path) -> None:
    env = gymnasium.make("spade/Designer-v0", agent=hint_reader(), registry=str(tmp_path / "registry"), config=FAST)
    obs, info = env.reset(seed=0, options={"setting": "reasoning", "mode": "write"})
    assert isinstance(obs, str) and obs.startswith(system_prompt("write"))
    assert info["messages"][1]["content"] in obs and info["provenance"]["setting"] == "reasoning"
    assert len(info["provenance"]["memory"]) == FAST.memory.k  # the seed library is the initial memory
    obs, reward, terminated, truncated, info = env.step(fenced(SECRET_WORD))
    assert (reward, terminated, truncated) == (1.0, True, False)
    assert info["accepted"] and info["env_id"] == "SecretWord-v0" and info["outcome"] == "regret"
    assert "Registered as spade/SecretWord-v0" in obs
    assert set(info["timings"]) == {"generation_s", "validation_s", "regret_s", "registry_s"}
    with pytest.raises(gymnasium.error.ResetNeeded):
        env.step("again")
    # the same program again is a duplicate now
    env.reset(seed=1)
    _, reward, *_, info = env.step(fenced(SECRET_WORD))
    assert reward == -0.5 and info["category"] == "DUPLICATE"
    env.close()


def test_designer_env_memory_and_reward_kwargs(tmp_path: Path) -> None:
    env = gymnasium.make(
        "spade/Designer-v0",
        agent=None,
        registry=str(tmp_path / "registry"),
        memory=MemoryConfig(k=2),
        reward=RewardConfig(invalid=-2.0),
    )
    _, info = env.reset(seed=0)
    assert len(info["provenance"]["memory"]) == 2
    assert env.step("no code")[1] == -2.0
    env.close()


def test_designer_env_seeded_reset_is_reproducible(tmp_path: Path) -> None:
    env = SpadeDesignerEnv(agent=hint_reader(), registry=tmp_path / "registry")
    first = [env.reset(seed=s)[0] for s in (5, 6)]
    again = [env.reset(seed=s)[0] for s in (5, 6)]
    assert first == again and first[0] != first[1]
    env.close()


def test_designer_env_never_raises_on_bad_completions(tmp_path: Path) -> None:
    env = SpadeDesignerEnv(agent=None, registry=tmp_path / "registry", seed_library=False)
    for completion in ["", "```python\n" + "(" * 500 + "\n```", "\x00" * 1000, "class Env:\n    pass\n"]:
        env.reset(seed=0)
        _, reward, terminated, _, info = env.step(completion)
        assert reward == -1.0 and terminated and info["outcome"] == "invalid"
    with pytest.raises(TypeError, match="completion text"):
        env.reset()
        env.step(b"bytes")  # type: ignore[arg-type]
    env.close()


def test_designer_env_temporary_registry_is_removed_on_close() -> None:
    env = SpadeDesignerEnv(agent=None)
    root = env.registry.root
    held_out = {r.name for r in env.registry.records()} & set(HELD_OUT_SEED_ENVS)
    assert len(env.registry) == len(Registry(bundled_registry_path())) - len(HELD_OUT_SEED_ENVS) and root.is_dir()
    assert not held_out  # the Designer's memory never shows an evaluation environment
    env.close()
    assert not root.exists()


def test_unknown_reset_option_is_refused(tmp_path: Path) -> None:
    env = SpadeDesignerEnv(agent=None, registry=tmp_path / "r", seed_library=False)
    with pytest.raises(ValueError, match="unknown reset option"):
        env.reset(options={"documnet": "x"})
    env.close()


@pytest.mark.slow
def test_designer_env_with_the_embedded_agent(tmp_path: Path, embedded_policy: Any) -> None:
    config = DesignerConfig(k=1, rollout=RolloutConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=24)))
    env = gymnasium.make("spade/Designer-v0", agent=embedded_policy, registry=str(tmp_path / "r"), config=config)
    env.reset(seed=0, options={"setting": "reasoning"})
    _, reward, terminated, _, info = env.step(fenced(SECRET_WORD))
    estimate = info["regret"]
    assert info["accepted"] and terminated and estimate["k"] == 1
    assert 0.0 <= estimate["mean_hint"] <= 1.0 and 0.0 <= estimate["mean_nohint"] <= 1.0
    assert info["outcome"] in {"trivial", "out_of_reach", "regret"}
    assert reward == pytest.approx({"regret": estimate["regret"]}.get(info["outcome"], 0.0))
    env.close()


def test_an_empty_corpus_is_refused_before_any_episode(tmp_path: Path) -> None:
    from spade_gym.errors import DocumentError

    corpus = tmp_path / "corpus"
    corpus.mkdir()
    (corpus / "empty.txt").write_text("")
    with pytest.raises(DocumentError, match="corpus"):
        SpadeDesignerEnv(agent=None, registry=tmp_path / "r", documents=str(corpus), seed_library=False)


def test_designer_env_grounds_on_a_local_corpus(tmp_path: Path) -> None:
    corpus = tmp_path / "docs.jsonl"
    corpus.write_text(
        json.dumps({"text": "Trains leave every 20 minutes from platform 4 between 6:00 and 9:00."}) + "\n"
    )
    env = SpadeDesignerEnv(agent=None, registry=tmp_path / "r", documents=str(corpus), seed_library=False)
    obs, info = env.reset(seed=0)
    assert "Trains leave every 20 minutes" in obs
    assert info["provenance"]["document"]["kind"] == "file" and info["provenance"]["document"]["line"] == 1
    env.close()


def test_the_readme_example_runs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    code = readme_example("## The Environment Designer and `spade/Designer-v0`", doc="docs/selfplay.md")
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, Any] = {"gym": gymnasium, "policy": ScriptedPolicy(fenced(SECRET_WORD))}
    exec(compile(code, "docs/selfplay.md", "exec"), namespace)
    assert namespace["outcome"].accepted and namespace["terminated"]
    assert namespace["info"]["category"] == "DUPLICATE" and namespace["reward"] == -0.5


def test_an_environment_of_another_setting_than_asked_is_refused(empty_registry: Registry) -> None:
    prompt = build_prompt("Board games.", [], setting="game")
    outcome = evaluate_completion(
        fenced(SECRET_WORD), prompt, registry=empty_registry, agent=hint_reader(), config=FAST
    )
    assert outcome.report.category == "WRONG_SETTING" and not outcome.accepted and len(empty_registry) == 0
    assert "asked for a game environment" in outcome.report.feedback()
    assert outcome.reward.outcome == "invalid"


def test_a_program_that_breaks_on_the_agents_seeds_is_not_registered(empty_registry: Registry) -> None:
    # passes a gate on seeds 1000-1009 but raises on the regret seeds 0..k-1
    crashing = SECRET_WORD.replace(
        "        rng = random.Random(seed)\n",
        "        if seed < 1000:\n            raise ValueError('low seed')\n        rng = random.Random(seed)\n",
    )
    config = replace(FAST, validation=KNOWN_GATE)
    outcome = evaluate_completion(fenced(crashing), None, registry=empty_registry, agent=hint_reader(), config=config)
    # the audit on the regret seeds finds it before any Agent episode is spent
    assert outcome.estimate is None
    assert not outcome.accepted and len(empty_registry) == 0 and outcome.reward.outcome == "invalid"
    feedback = outcome.report.feedback()
    assert outcome.report.check("contract").passed is False
    assert "audit on the regret seeds" in feedback and "low seed" in feedback


def test_an_overlong_completion_is_refused_unread(empty_registry: Registry) -> None:
    from spade_gym.designer import MAX_COMPLETION_CHARS

    outcome = evaluate_completion(
        fenced(SECRET_WORD) + "x" * MAX_COMPLETION_CHARS, None, registry=empty_registry, agent=None
    )
    assert outcome.report.category == "TOO_LONG" and outcome.reward.outcome == "invalid"


def test_a_text_document_gets_full_provenance() -> None:
    prompt = build_prompt("word " * 5000, [])
    assert prompt.document is not None
    source = prompt.document.source
    assert source["kind"] == "text" and source["truncated"] is True and source["tokens"] <= 1024
    assert len(source["sha256"]) == 64
    with pytest.raises(TypeError, match="document must be"):
        build_prompt(5, [])  # type: ignore[arg-type]


def test_reset_can_pose_the_same_prompt_again(tmp_path: Path) -> None:
    env = SpadeDesignerEnv(agent=None, registry=tmp_path / "r", seed_library=False)
    first, _ = env.reset(seed=3)
    prompt = env.prompt
    env.step("no code")
    again, info = env.reset(options={"prompt": prompt})
    assert again == first and env.last_outcome is not None and env.last_outcome.reward.outcome == "invalid"
    with pytest.raises(ValueError, match="no other option"):
        env.reset(options={"prompt": prompt, "mode": "write"})
    env.close()


def test_open_registry_refuses_a_folder_of_other_files(tmp_path: Path) -> None:
    from spade_gym.errors import RegistryError

    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(RegistryError, match="not an environment registry"):
        open_registry(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_open_registry_can_leave_seed_environments_out(tmp_path: Path) -> None:
    reg = open_registry(tmp_path / "r", exclude=["LightsOut3x3", "InboxCodeRelay"])
    names = {r.name for r in reg.records()}
    reg.close()
    library = {r.name for r in Registry(bundled_registry_path())}
    assert names == library - {"LightsOut3x3", "InboxCodeRelay"} and len(names) == len(library) - 2
    with pytest.raises(ValueError, match="exclude names no seed environment: Nope"):
        open_registry(tmp_path / "s", exclude=["Nope"])


def test_a_new_registry_leaves_the_held_out_environments_out_unless_asked(tmp_path: Path) -> None:

    reg = open_registry(tmp_path / "r")  # as `spade design` and docs/selfplay.md make it
    names = {r.name for r in reg.records()}
    reg.close()
    assert names and not names & set(HELD_OUT_SEED_ENVS)
    assert EnvironmentMemory(open_registry(tmp_path / "r")).select(0)  # the Designer still has a memory
    everything = open_registry(tmp_path / "all", exclude=())
    assert set(HELD_OUT_SEED_ENVS) <= {r.name for r in everything.records()}
    everything.close()


# ---- settings for small models: the design token budget and edit weighting -------------------


def test_the_design_token_floor_is_the_shortest_seed_program_under_the_tokenizer() -> None:
    from tokenizers import Tokenizer

    from spade_gym.designer import DESIGN_TOKEN_FLOOR, design_token_floor
    from spade_gym.policies.embedded import embedded_model_dir

    tokenizer = Tokenizer.from_file(str(embedded_model_dir(progress=False) / "tokenizer.json"))
    library = Registry(bundled_registry_path())
    shortest = min((len(tokenizer.encode(r.source_path.read_text()).ids), r.env_id) for r in library)
    floor, why = design_token_floor("default")
    assert (floor, shortest[1] in why) == (shortest[0], True)
    assert floor > len(tokenizer.encode(DESIGNER_SYSTEM_PROMPT.split("```python")[1]).ids) // 2  # a real program
    assert design_token_floor("no-such-org/no-such-model-7B") == (
        DESIGN_TOKEN_FLOOR,
        "the fixed floor DESIGN_TOKEN_FLOOR (no tokenizer of 'no-such-org/no-such-model-7B' on this machine)",
    )


def test_a_run_refuses_a_design_budget_below_the_floor_before_the_model_loads(tmp_path: Path) -> None:
    from spade_gym.designer import design_token_floor
    from spade_gym.trainer.config import ConfigError, SelfPlayConfig
    from spade_gym.trainer.run import RunDir
    from spade_gym.trainer.selfplay import SelfPlay

    floor, _ = design_token_floor("default")
    config = SelfPlayConfig.from_dict({"designer": {"max_new_tokens": floor - 1}, "run": {"out": str(tmp_path / "r")}})
    with pytest.raises(ConfigError, match=rf"'designer.max_new_tokens' = {floor - 1} is below {floor} tokens") as info:
        config.check_design_budget()
    assert info.value.key == "designer.max_new_tokens"
    with pytest.raises(ConfigError, match="designer.max_new_tokens"):  # SelfPlay checks it before loading a model
        SelfPlay(config, RunDir.create(tmp_path / "r", config), say=lambda _: None)
    SelfPlayConfig.from_dict({"designer": {"max_new_tokens": floor}}).check_design_budget()
    SelfPlayConfig.from_dict({"designer": {"max_new_tokens": 8}, "run": {"designer": "off"}}).check_design_budget()
    unknown = {"policy": {"spec": "no-such-org/no-such-model"}, "designer": {"max_new_tokens": 255}}
    with pytest.raises(ConfigError, match="below 256 tokens, the fixed floor"):
        SelfPlayConfig.from_dict(unknown).check_design_budget()


def test_edit_probability_auto_weights_edits_up_for_small_models() -> None:
    from spade_gym.designer import EDIT_PROBABILITY, EDIT_PROBABILITY_SMALL, auto_edit_probability, model_parameters
    from spade_gym.trainer.config import ConfigError, SelfPlayConfig

    assert model_parameters("default") == 1.35e8
    assert model_parameters("HuggingFaceTB/SmolLM2-360M-Instruct") == 3.6e8
    assert model_parameters("vllm:Qwen/Qwen2.5-0.5B-Instruct") == 5e8
    assert model_parameters("Qwen/Qwen3-30B-A3B") == 3e10  # the active-parameter "A3B" is not the size
    assert model_parameters("gpt2") is None
    assert auto_edit_probability("default") == EDIT_PROBABILITY_SMALL == 0.75
    assert auto_edit_probability("Qwen/Qwen2.5-7B-Instruct") == EDIT_PROBABILITY == 0.25
    assert auto_edit_probability("Qwen/Qwen2.5-7B-Instruct", device="cpu") == EDIT_PROBABILITY_SMALL
    assert auto_edit_probability("gpt2") == EDIT_PROBABILITY
    assert SelfPlayConfig().designer.edit_probability == "auto"
    assert SelfPlayConfig().designer_config().edit_probability == EDIT_PROBABILITY_SMALL
    big = SelfPlayConfig.from_dict({"policy": {"spec": "Qwen/Qwen2.5-7B-Instruct"}})
    assert big.designer_config().edit_probability == EDIT_PROBABILITY
    fixed = SelfPlayConfig.from_dict({"designer": {"edit_probability": 0.5}})
    assert fixed.designer_config().edit_probability == 0.5
    with pytest.raises(ConfigError, match="designer.edit_probability"):
        SelfPlayConfig.from_dict({"designer": {"edit_probability": "often"}})
    assert DesignerConfig().edit_probability == "auto" and DesignerConfig().edit_chance == EDIT_PROBABILITY


def test_the_reward_section_is_the_reward_config() -> None:
    from spade_gym.trainer.config import ConfigError, SelfPlayConfig

    config = SelfPlayConfig().with_overrides(["designer.reward.shaping=window", "designer.reward.window_low=0.25"])
    assert config.designer_config().reward == RewardConfig(shaping="window", window_low=0.25)
    assert "learnability_times_regret: true" in config.to_yaml()
    with pytest.raises(ConfigError, match="window_low = 0.9 and window_high = 0.8") as info:
        SelfPlayConfig().with_overrides(["designer.reward.window_low=0.9"])
    assert info.value.key == "designer.reward"
    with pytest.raises(ConfigError, match="designer.reward.shaping"):
        SelfPlayConfig().with_overrides(["designer.reward.shaping=regret"])


def test_the_env_and_the_plain_calls_make_the_same_draws(tmp_path: Path) -> None:
    # SpadeDesignerEnv.reset and the self-play loop's draw_group both draw through draw_design: the
    # same seed poses the same prompt and gives each design the same Agent seed
    env = SpadeDesignerEnv(agent=None, registry=tmp_path / "registry")
    for seed in (3, 11):
        env.reset(seed=seed)
        posed = env.prompt
        env_seeds = [env._sampling_seed]
        for _ in range(3):
            env.reset(options={"prompt": posed})
            env_seeds.append(env._sampling_seed)
        group = draw_group(seed, 3, documents=env.documents, memory=env.memory, config=env.config)
        assert group.prompt == posed and list(group.agent_seeds) == env_seeds[1:] and group.seed == seed
        assert env_seeds[0] not in env_seeds[1:]
        # draw_design's order: a Random from the generator, the Agent's seed from it, then propose's draws
        np_random, _ = seeding.np_random(seed)
        rng = random.Random(int(np_random.integers(2**63)))
        assert rng.randrange(2**62) == env_seeds[0]
        env.documents.reseed(seed)
        assert propose(rng, documents=env.documents, memory=env.memory, config=env.config) == posed
        np_random, _ = seeding.np_random(seed)
        env.documents.reseed(seed)
        draw = draw_design(np_random, documents=env.documents, memory=env.memory, config=env.config)
        assert (draw.prompt, draw.agent_seed) == (posed, env_seeds[0])
    # a given setting and mode are the loop's and the factory's options as much as reset's
    env.reset(seed=5, options={"setting": "game", "mode": "write"})
    group = draw_group(
        5, 1, documents=env.documents, memory=env.memory, config=env.config, setting="game", mode="write"
    )
    assert group.prompt == env.prompt and group.prompt.setting == "game"
    env.close()


def test_validate_designs_reports_each_program_once(tmp_path: Path) -> None:
    source = (bundled_registry_path() / "envs" / "LargerOfTwo-v0" / "env.py").read_text()
    good = f"```python\n{source}```"
    reports = validate_designs([good, "no code here", good], None, DesignerConfig())
    assert list(reports) == [good]
    assert reports[good].accepted


def test_designer_defaults_are_defined_once() -> None:
    from spade_gym.agent import AGENT_TEMPERATURE
    from spade_gym.designer import WRITE_MAX_NEW_TOKENS

    config = DesignerConfig()
    # the regret episodes sample the Agent as every other rollout does (1.0 hid the answer format)
    assert config.rollout == RolloutConfig() and config.rollout.sampling.temperature == AGENT_TEMPERATURE
    assert config.sampling.max_new_tokens == config.max_new_tokens == WRITE_MAX_NEW_TOKENS
