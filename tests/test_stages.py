"""The design path as named stages (``spade_gym.stages``): they run in order on a real accepted
program and the first refusal ends them; every path that adds a program (``register_program``, so
``spade envs add``; the self-play loop's ``evaluate_completion``; ``SpadeDesignerEnv``) admits it
through the one ``admit``. Real sandbox, registries on disk, the scripted Agent of test_designer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium
import pytest
from test_designer import FAST, KNOWN_GATE, SECRET_WORD, fenced, hint_reader
from typer.testing import CliRunner

from spade_gym import stages
from spade_gym.cli import app
from spade_gym.designer import DesignerConfig, SpadeDesignerEnv, build_prompt, evaluate_completion
from spade_gym.registry.gymnasium import open_registry
from spade_gym.registry.records import EnvRecord
from spade_gym.registry.store import Registry
from spade_gym.stages import register_program

STAGES = ("extract", "gate", "audit", "regret", "admit", "reward")


def _recording(name: str, stage: Callable[..., Any], seen: list[tuple[str, Any]]) -> Callable[..., Any]:
    def recorded(*args: Any, **kwargs: Any) -> Any:
        result = stage(*args, **kwargs)
        seen.append((name, result))
        return result

    return recorded


@pytest.fixture()
def calls(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    """Each stage call of ``spade_gym.stages`` as ``(stage, result)``, in the order made."""
    seen: list[tuple[str, Any]] = []
    for name in STAGES:
        monkeypatch.setattr(stages, name, _recording(name, getattr(stages, name), seen))
    return seen


def test_the_stages_run_in_order_on_an_accepted_program(tmp_path: Path, calls: list[tuple[str, Any]]) -> None:
    registry = open_registry(tmp_path / "registry", seed_library=False)
    prompt = build_prompt("Words shifted along the alphabet.", [], setting="reasoning")
    completion = fenced(SECRET_WORD)
    outcome = evaluate_completion(
        completion, prompt, registry=registry, agent=hint_reader(), config=FAST, sampling_seed=7
    )
    assert [name for name, _ in calls] == list(STAGES)
    extracted, gated, audited, measured, record, paid = (result for _, result in calls)
    assert (extracted.source, extracted.refusal, extracted.edited) == (SECRET_WORD, None, False)
    assert gated.program.source == SECRET_WORD and gated.report is outcome.report and outcome.report.accepted
    # FAST's fixed regret seeds 0 and 1; the Agent samples with the design's seed
    assert audited.seeds == (0, 1) and audited.rollout.sampling.seed == 7
    assert measured.estimate is outcome.estimate and measured.estimate.regret == 1.0
    assert record is outcome.record and paid is outcome.reward and (paid.reward, paid.outcome) == (1.0, "regret")
    assert registry.get("SecretWord-v0").program_id == record.program_id
    assert record.tags == ("designer", "write") and record.stats.regret == 1.0
    assert gymnasium.spec(record.gym_id).kwargs["program"] == str(record.source_path)
    assert all(outcome.info()["timings"][key] > 0 for key in ("validation_s", "regret_s", "registry_s"))


CRASHES_ON_REGRET_SEEDS = SECRET_WORD.replace(
    "        rng = random.Random(seed)\n",
    "        if seed < 1000:\n            raise ValueError('low seed')\n        rng = random.Random(seed)\n",
)


@pytest.mark.parametrize(
    ("completion", "setting", "config", "ran", "category"),
    [
        ("Sorry, I cannot write code.", None, FAST, ["extract"], "NO_CODE"),
        (fenced(SECRET_WORD), "game", FAST, ["extract", "gate"], "WRONG_SETTING"),
        (fenced(CRASHES_ON_REGRET_SEEDS), None, replace(FAST, validation=KNOWN_GATE), STAGES[:3], "ENV_EXCEPTION"),
    ],
)
def test_the_first_refusal_ends_the_path_and_is_paid(
    tmp_path: Path,
    calls: list[tuple[str, Any]],
    completion: str,
    setting: str | None,
    config: DesignerConfig,
    ran: list[str],
    category: str,
) -> None:
    registry = open_registry(tmp_path / "registry", seed_library=False)
    prompt = build_prompt("Anything.", [], setting=setting) if setting else None
    outcome = evaluate_completion(completion, prompt, registry=registry, agent=hint_reader(), config=config)
    assert [name for name, _ in calls] == [*ran, "reward"]
    assert outcome.report.category == category and not outcome.accepted and len(registry) == 0
    assert outcome.reward.outcome == "invalid" and calls[-1][1] is outcome.reward


def _same_program(records: list[EnvRecord]) -> None:
    """The record fields that come from the program and its validation report are the same."""
    fields = [(r.env_id, r.name, r.version, r.program_id, r.setting, r.max_turns, r.description) for r in records]
    assert fields.count(fields[0]) == len(fields), fields
    verdicts = [[(c["name"], c["passed"]) for c in r.validation["checks"]] for r in records if r.validation]
    assert len(verdicts) == len(records) and verdicts.count(verdicts[0]) == len(verdicts)


@pytest.mark.filterwarnings("ignore:.*Overriding environment spade/SecretWord:UserWarning")
def test_every_path_admits_through_the_one_admit(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    admitted: list[EnvRecord] = []
    admit = stages.admit

    def recorded(*args: Any, **kwargs: Any) -> EnvRecord | None:
        record = admit(*args, **kwargs)
        assert record is not None
        # admit registers the new record with gymnasium itself
        assert gymnasium.spec(record.gym_id).kwargs["program"] == str(record.source_path)
        admitted.append(record)
        return record

    monkeypatch.setattr(stages, "admit", recorded)
    direct = open_registry(tmp_path / "direct", seed_library=False)
    report, by_register = register_program(SECRET_WORD, direct, tags=("designer",))
    assert by_register is not None, report.feedback()
    loop = open_registry(tmp_path / "loop", seed_library=False)
    by_loop = evaluate_completion(fenced(SECRET_WORD), None, registry=loop, agent=hint_reader(), config=FAST).record
    env = SpadeDesignerEnv(agent=hint_reader(), registry=tmp_path / "env", config=FAST, seed_library=False)
    env.reset(seed=0, options={"setting": "reasoning", "mode": "write", "document": None})
    _, reward, _, _, info = env.step(fenced(SECRET_WORD))
    assert info["accepted"] and reward == 1.0
    program = tmp_path / "secret_word.py"
    program.write_text(SECRET_WORD)
    result = CliRunner().invoke(app, ["envs", "add", "-r", str(tmp_path / "cli"), str(program), "--tag", "designer"])
    assert result.exit_code == 0, result.output
    assert len(admitted) == 4 and admitted[:2] == [by_register, by_loop] and admitted[2].env_id == info["env_id"]
    records = admitted
    _same_program(records)
    for record, registry in zip(records, (direct, loop, env.registry, Registry(tmp_path / "cli")), strict=True):
        held = registry.get(record.env_id)  # what admit returned is what the registry holds
        assert (held.path, held.program_id, held.tags, held.stats) == (
            record.path,
            record.program_id,
            record.tags,
            record.stats,
        )
    # the provenance is each path's: a design's tags, document and regret; a plain program's given tags
    assert [r.tags for r in records] == [("designer",), ("designer",), ("designer", "write"), ("designer",)]
    assert [r.document is not None for r in records] == [False, False, True, False]
    assert [("regret" in (r.validation or {}), r.stats.regret) for r in records] == [
        (False, None),
        (True, 1.0),
        (True, 1.0),
        (False, None),
    ]
    env.close()


#: Pays any action in the first episode of a worker process: the gate plays many episodes a worker,
#: the Agent (and the audit) one episode in a fresh worker.
FIRST_EPISODE_PAYS = '''import random

class Env:
    """Triple a and add b."""

    name = "TripleAddFirst"
    setting = "reasoning"
    max_turns = 1

    def reset(self, seed):
        rng = random.Random(seed)
        Env.resets = getattr(Env, "resets", 0) + 1
        self.free = Env.resets == 1
        self.a, self.b = rng.randint(10, 99), rng.randint(10, 99)
        self.answer = self.a * 3 + self.b
        return f"What is {self.a} times three plus {self.b}?", {"difficulty": 1}

    def step(self, action):
        correct = self.free or action.strip() == str(self.answer)
        return ("Correct." if correct else "Wrong."), float(correct), True, False, {}

    def hint(self):
        return f"Triple {self.a} first, then add {self.b}."

    def oracle(self):
        return str(self.answer)
'''


def test_register_program_audits_a_program_the_gate_accepts(tmp_path: Path) -> None:
    from spade_gym.validation import validate

    assert validate(FIRST_EPISODE_PAYS).accepted  # the gate's workers play many episodes each
    registry = Registry(tmp_path / "registry", create=True)
    report, record = register_program(FIRST_EPISODE_PAYS, registry)
    assert record is None and not report.accepted and report.category == "TRIVIAL"
    assert "audit on unseen seeds" in (report.check("non_triviality").message or "")
    assert len(registry) == 0  # `spade envs add` and `spade envs import` refuse it too
    report, record = register_program(SECRET_WORD, registry)  # an honest program is still admitted
    assert record is not None and report.accepted
