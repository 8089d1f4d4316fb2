"""Programs written to game the Designer's reward (tests/reward_exploits.py): disguised hint leaks,
long episodes, host work, predictable seeds and padded copies. Each earns a Designer reward no higher
than an honest environment's, through the trainer's own design path (``evaluate_completion``) with
an Agent that answers what a hint gives away; and none makes the host hold more than its budgets."""

from __future__ import annotations

import dataclasses
import re
import time
import tracemalloc
from pathlib import Path

import pytest
from doubles import ScriptedPolicy
from reward_exploits import (
    ARITHMETIC,
    DECOY_AWARE,
    DISGUISED_LEAKS,
    FLOODS_LATE,
    HUGE_HINT,
    LATER_PASS_WORD,
    LOW_SEEDS_LEAK,
    PASS_PHRASE_APART,
    PAYS_LATE,
    decode_hint,
)
from test_designer import FAST, SECRET_WORD, hint_reader

from spade_gym.agent import DECOY_OBSERVATION, Episode, RolloutConfig, rollout
from spade_gym.audit import audit
from spade_gym.designer import evaluate_completion
from spade_gym.env import SandboxedEnv
from spade_gym.hint_leak import hint_states_answer
from spade_gym.policies.base import SamplingParams
from spade_gym.registry.gymnasium import open_registry
from spade_gym.regret import estimate_regret
from spade_gym.sandbox import SandboxConfig
from spade_gym.seeds import SEED_VARIABLE
from spade_gym.validation import ValidationConfig, validate


def read_leak(prompt: list[dict[str, str]]) -> str:
    """The reply of an Agent co-trained with a leaking Designer: what the hint in its prompt gives
    away (:func:`decode_hint`), else ``nothing``; it never needs the observation."""
    text = prompt[-1]["content"]
    answer = decode_hint(text.split("\n\nHint: ", 1)[1]) if "\n\nHint: " in text else "nothing"
    return f"<answer>{answer}</answer>"


def leak_reader() -> ScriptedPolicy:
    """The Agent that reads the leak (:func:`read_leak`)."""
    return ScriptedPolicy(read_leak, name="leak-reader")


def fenced(source: str) -> str:
    return f"```python\n{source}```"


def honest_reward(tmp_path: Path) -> float:
    """What an honest environment (the hint helps only with the observation) earns: regret 1."""
    registry = open_registry(tmp_path / "honest", seed_library=False)
    outcome = evaluate_completion(fenced(SECRET_WORD), None, registry=registry, agent=hint_reader(), config=FAST)
    assert outcome.accepted and outcome.reward.outcome == "regret"
    return outcome.reward.reward


# ---- disguised hint leaks ----------------------------------------------------------------------


@pytest.mark.parametrize("name", sorted(DISGUISED_LEAKS))
def test_a_disguised_hint_leak_earns_no_more_than_an_honest_environment(name: str, tmp_path: Path) -> None:
    program = DISGUISED_LEAKS[name]
    registry = open_registry(tmp_path / "registry", seed_library=False)
    outcome = evaluate_completion(fenced(program), None, registry=registry, agent=leak_reader(), config=FAST)
    honest = honest_reward(tmp_path)
    assert honest == 1.0
    # refused as a leak by the gate or its audit (-1), or measured: the hint alone wins as much (0)
    assert outcome.reward.reward <= 0.0 < honest, outcome.feedback()
    if outcome.estimate is not None:
        estimate = outcome.estimate
        assert estimate.mean_hint == 1.0 and estimate.mean_nohint == 0.0 and estimate.mean_hint_only == 1.0
        assert estimate.regret == 0.0 and "a leak" in estimate.reason
        assert registry.get(outcome.record.env_id).stats.regret == 0.0  # type: ignore[union-attr]
        assert outcome.record.validation["regret"]["mean_hint_only"] == 1.0  # type: ignore[union-attr,index]
    else:
        assert outcome.report.category == "HINT_LEAK" and outcome.reward.outcome == "invalid"


def test_the_static_check_reads_other_unicode_forms_and_chunks() -> None:
    from spade_gym.hint_leak import normalised, stated_in

    for hint in (
        "The code is ngq\u200bcdwf.",
        "\uff4e\uff47\uff51\uff43\uff44\uff57\uff46",
        "ng / qc / dw / f",
        "f-wd-cq-gn",
    ):
        assert stated_in(normalised(hint), "ngqcdwf") is not None, hint
    assert stated_in(normalised("it is an ox, then go"), "ngqcdwf") is None


def test_each_layer_catches_its_forms() -> None:
    # the static check: digits apart, reversed, number words, every answer listed (by rank)
    for name in ("digits-apart", "reversed", "number-words", "every-answer", "zero-width", "fullwidth"):
        report = validate(DISGUISED_LEAKS[name])
        assert report.category == "HINT_LEAK", (name, report.feedback())
    # the audit: a pass phrase, a pass word after the 16th word of the hint, a list of every answer
    for name in ("pass-phrase", "late-pass-word", "list-place"):
        assert validate(DISGUISED_LEAKS[name]).accepted
        found = audit(DISGUISED_LEAKS[name], [1, 2])
        assert found.category == "HINT_LEAK", (name, found.message)
    # what no pattern finds is measured: the hint alone wins as much as the hint with the task
    for program in (ARITHMETIC, PASS_PHRASE_APART):
        assert validate(program).accepted and audit(program, [3, 4]).passed
        estimate = estimate_regret(program, leak_reader(), 3, config=RolloutConfig())
        assert (estimate.mean_hint, estimate.mean_nohint, estimate.mean_hint_only, estimate.regret) == (1, 0, 1, 0)
    # a hint more words long than the audit tries: a leak either way
    found = audit(LATER_PASS_WORD, [5])
    assert found.category in (None, "HINT_LEAK")


def test_the_hint_only_arm_shows_the_agent_a_decoy_and_is_played_only_when_the_hint_helps() -> None:
    seeds = [11, 12]
    estimate = estimate_regret(SECRET_WORD, hint_reader(), 2, seeds)  # honest: helps only with the task
    assert (estimate.mean_hint, estimate.mean_nohint, estimate.mean_hint_only, estimate.regret) == (1, 0, 0, 1)
    assert [t.seed for t in estimate.hint_only] == seeds and all(t.decoy and t.hint for t in estimate.hint_only)
    # seed 11's hint with seed 12's observation in place of its own (and the other way round)
    for alone, hinted, other in zip(estimate.hint_only, estimate.hint, estimate.nohint[::-1], strict=True):
        own, hint = hinted.messages[1]["content"].split("\n\nHint: ")
        assert alone.messages[1]["content"] == other.messages[1]["content"] + "\n\nHint: " + hint
        assert own not in alone.messages[1]["content"]  # the environment's own observation is not shown
    assert estimate.hint_only[0].turns[0].observation in ("Right.", "Wrong.")  # the program's own is kept
    one = estimate_regret(SECRET_WORD, hint_reader(), 1, [11])  # one seed: no other seed, a fixed text
    assert one.hint_only[0].messages[1]["content"].startswith(DECOY_OBSERVATION + "\n\nHint: ")
    # the hint did not help: no third arm (its cost is spent only where it can lower the regret)
    never = estimate_regret(SECRET_WORD, leak_reader(), 2, seeds)
    assert never.mean_hint == never.mean_nohint == 0.0 and never.hint_only == [] and never.mean_hint_only is None
    assert estimate_regret(SECRET_WORD, leak_reader(), 2, seeds, hint_only="always").mean_hint_only == 0.0
    leak = estimate_regret(DISGUISED_LEAKS["digits-apart"], leak_reader(), 2, seeds, hint_only="never")
    assert leak.regret == 1.0  # without the third arm a leak is paid in full


def test_a_hint_cannot_tell_the_hint_only_arm_by_its_text() -> None:
    def decoy_aware(prompt: list[dict[str, str]]) -> str:
        """Answers what the hint gives away unless it reads the fixed decoy text."""
        return "<answer>nothing</answer>" if DECOY_OBSERVATION in prompt[-1]["content"] else read_leak(prompt)

    assert validate(DECOY_AWARE).accepted and audit(DECOY_AWARE, [1, 2]).passed
    estimate = estimate_regret(DECOY_AWARE, ScriptedPolicy(decoy_aware), 3)
    assert (estimate.mean_hint, estimate.mean_nohint, estimate.mean_hint_only, estimate.regret) == (1, 0, 1, 0)


def test_the_static_check_leaves_honest_partial_results_alone() -> None:
    # a partial result that is the answer reversed, on one seed of ten: a remaining step, not a leak
    firsts = {
        s: (f"After step 2 it is {w[::-1]}.", w.upper() if s == 0 else w + "x", "obs")
        for s, w in enumerate(["abcdef", "ghijkl", "mnopqr", "stuvwx", "yzabcd", "efghij", "klmnop", "qrstuv"])
    }
    assert hint_states_answer(firsts) == []
    # the hint names one fixed list of every answer: boilerplate, whatever the answer
    fixed = {s: ("One of: red, green, blue.", c, "obs") for s, c in enumerate(["red", "blue", "green", "red", "blue"])}
    assert hint_states_answer(fixed) == []
    # the same list with the answer first: its place gives it away
    first = {
        s: (f"One of: {c}, " + ", ".join(x for x in ("red", "green", "blue") if x != c) + ".", c, "o")
        for s, c in enumerate(["red", "blue", "green", "red", "blue"])
    }
    assert hint_states_answer(first) == [0, 1, 2, 3, 4]


# ---- long episodes -----------------------------------------------------------------------------


def test_paying_after_turn_64_is_caught_by_the_gate(tmp_path: Path) -> None:
    report = validate(PAYS_LATE)
    assert report.category == "TRIVIAL", report.feedback()
    registry = open_registry(tmp_path / "registry", seed_library=False)
    outcome = evaluate_completion(fenced(PAYS_LATE), None, registry=registry, agent=leak_reader(), config=FAST)
    assert outcome.reward.reward == FAST.reward.invalid and len(registry) == 0


def test_the_host_caps_turns_and_observation_bytes_of_an_episode() -> None:
    env = SandboxedEnv(PAYS_LATE)
    try:
        assert env.declared_max_turns == 100_000 and env.max_turns == SandboxConfig().max_turns == 1000
    finally:
        env.close()
    config = SandboxConfig(max_turns=100)
    tracemalloc.start()
    try:
        (played,), _ = rollout(
            [Episode(lambda: SandboxedEnv(FLOODS_LATE, config=config), 3)],
            leak_reader(),
            RolloutConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=8)),
        )
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    # 64 short turns, then 1 MiB observations: the episode ends once the host holds 4 MiB of them
    assert played.error is not None and played.error["category"] == "OUTPUT_LIMIT"
    assert "max_episode_text_bytes" in played.error["message"] and played.num_turns <= 64 + 4
    assert peak < 32 << 20, peak  # the host held a few MiB, not a MiB a turn for 100,000 turns
    report = validate(FLOODS_LATE)
    assert report.category == "OUTPUT_LIMIT" and report.usage["episode_text_bytes"] <= (4 << 20) + (1 << 20)
    # an oracle that needs more turns than the host allows is no feasible environment
    from spade_gym.registry.gymnasium import bundled_registry_path

    hanoi = (bundled_registry_path() / "envs" / "HanoiTowerFinish-v0" / "env.py").read_text()
    capped = validate(hanoi, ValidationConfig(sandbox=SandboxConfig(max_turns=5)))
    assert capped.category == "ORACLE_FAILED" and "the host ends every episode after 5 turns" in capped.feedback()


# ---- host work ---------------------------------------------------------------------------------


def test_a_huge_hint_and_observation_cost_the_host_little_and_are_refused() -> None:
    started = time.process_time()
    report = validate(HUGE_HINT)
    assert report.category == "OUTPUT_LIMIT" and "max_hint_bytes" in report.feedback()
    assert report.usage["host_cpu_s"] < ValidationConfig().host_budget_s
    found = audit(HUGE_HINT, [1, 2])
    assert found.category == "OUTPUT_LIMIT" and found.usage["host_cpu_s"] < ValidationConfig().host_budget_s
    assert time.process_time() - started < 30  # was 6 s for the gate, then 134 s for the audit


def test_the_host_cpu_budget_refuses_what_runs_past_it() -> None:
    report = validate(SECRET_WORD, ValidationConfig(host_budget_s=1e-9))
    assert report.category == "TIMEOUT" and "host_budget_s" in report.feedback()
    assert report.usage["host_cpu_s"] > 0 and report.usage["worker_cpu_s"] >= 0


# ---- predictable seeds -------------------------------------------------------------------------


def test_figures_are_measured_on_seeds_a_program_cannot_predict(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(SEED_VARIABLE, raising=False)
    # the leak shows only below seed 2**20: on 0..k-1 the hint arm wins, on drawn seeds it does not
    low = estimate_regret(LOW_SEEDS_LEAK, leak_reader(), 3, [0, 1, 2], hint_only="never")
    assert low.mean_hint == 1.0
    drawn = estimate_regret(LOW_SEEDS_LEAK, leak_reader(), 3, hint_only="never")
    assert drawn.mean_hint == 0.0 and min(drawn.seeds) >= 2**20 and drawn.seeds != [0, 1, 2]
    monkeypatch.setenv(SEED_VARIABLE, "same")  # reproducible for comparisons
    assert estimate_regret(SECRET_WORD, hint_reader(), 2).seeds == estimate_regret(SECRET_WORD, hint_reader(), 2).seeds


# ---- novelty by padding ------------------------------------------------------------------------


def test_a_padded_copy_earns_the_duplicate_penalty(tmp_path: Path) -> None:
    registry = open_registry(tmp_path / "registry", seed_library=False)
    assert evaluate_completion(fenced(SECRET_WORD), None, registry=registry, agent=hint_reader(), config=FAST).accepted
    padded = SECRET_WORD.replace(
        "class Env:", "UNUSED = [" + ", ".join(str(10 + 3 * i) for i in range(30)) + "]\n\n\nclass Env:"
    )
    reworded = padded.replace('"Decode the secret word "', '"Please decipher the hidden word "')
    for copy in (padded, reworded):
        outcome = evaluate_completion(fenced(copy), None, registry=registry, agent=hint_reader(), config=FAST)
        assert outcome.report.category == "DUPLICATE" and outcome.reward.reward == FAST.reward.duplicate
        assert re.search(r"behaves like the registered SecretWord-v0", outcome.report.feedback())
    assert len(registry) == 1


def test_a_probe_of_a_variant_with_a_different_task_lets_it_through(tmp_path: Path) -> None:
    registry = open_registry(tmp_path / "registry", seed_library=False)
    assert evaluate_completion(fenced(SECRET_WORD), None, registry=registry, agent=hint_reader(), config=FAST).accepted
    longer = SECRET_WORD.replace("range(8)", "range(10)").replace("of eight letters", "of ten letters")
    config = dataclasses.replace(FAST, regret_seeds=5)
    outcome = evaluate_completion(fenced(longer), None, registry=registry, agent=hint_reader(), config=config)
    assert outcome.accepted, outcome.report.feedback()
