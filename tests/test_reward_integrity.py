"""Reward integrity: programs that pass the gate and then try to pay what the contract
forbids earn the invalid reward, and the rewards the host sees stay within [0, 1]."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest
from doubles import ScriptedPolicy
from reward_exploits import (
    FRESH_WORKER,
    HASH_DETECTOR,
    HASH_PROBE,
    HINT_DETECTOR,
    LEAK_UNLESS_ORACLE,
    LONG_EPISODE,
    LYING_SETTING,
    NEGATIVE,
    OVERPAY,
    PASSWORD,
    TRIVIAL_OFF_GATE,
)
from test_designer import FAST, KNOWN_GATE, hint_reader

from spade_gym.agent import Episode, RolloutConfig, rollout
from spade_gym.audit import audit
from spade_gym.design_prompts import WORKED_EXAMPLE
from spade_gym.designer import evaluate_completion
from spade_gym.env import SandboxedEnv
from spade_gym.errors import ContractError
from spade_gym.policies.base import SamplingParams
from spade_gym.registry.gymnasium import open_registry
from spade_gym.regret import estimate_regret
from spade_gym.sandbox import SandboxConfig
from spade_gym.validation import SEED_VARIABLE, ValidationConfig, validate


def oracle(answer: str) -> ScriptedPolicy:
    """An Agent that answers ``answer`` to every prompt."""
    return ScriptedPolicy(f"<answer>{answer}</answer>", name="oracle-reader")


#: Designer settings whose gate plays known seeds (1000-1009), so the exploits below get past it and
#: what comes after the gate is tested.
KNOWN = dataclasses.replace(FAST, validation=KNOWN_GATE)
# the prompt's worked example itself counts as registered: a variant of it that behaves otherwise
EXAMPLE = WORKED_EXAMPLE.replace("randint(10, 99)", "randint(100, 999)")


def fenced(source: str) -> str:
    return f"```python\n{source}```"


@pytest.mark.parametrize("forged", ["'gotcha'", "5", "{'category': 'ENV_EXCEPTION', 'message': 5}", "{}"])
def test_a_program_cannot_forge_the_hosts_failure_record(forged: str) -> None:
    from programs import program

    from spade_gym.integrations._episode import SpadeEpisode

    forger = program(
        reset='return "say go", {}',
        step=f'return "ok", 1.0, True, False, {{"sandbox_error": {forged}}}',
        name="Forger",
    )
    honest = program(reset='return "say go", {}', step='return "ok", 1.0, True, False, {}', name="Honest")
    (forged_episode, honest_episode), _ = rollout([Episode(forger, 0), Episode(honest, 0)], oracle("go"))
    assert forged_episode.error is not None and forged_episode.error["category"] == "PROTOCOL_ERROR"
    assert "reserved" in forged_episode.error["message"] and forged_episode.episode_return == 0.0
    assert honest_episode.error is None and honest_episode.episode_return == 1.0  # the batch goes on
    import gymnasium

    gymnasium.register(id="spade/Forger-v0", entry_point="spade_gym.env:SandboxedEnv", kwargs={"program": forger})
    try:
        episode = SpadeEpisode("spade/Forger-v0", 0)
        episode.start()
        episode.act("<answer>go</answer>")
        episode.close()
    finally:
        gymnasium.registry.pop("spade/Forger-v0")
    assert episode.error is not None and episode.error["category"] == "PROTOCOL_ERROR" and episode.episode_return == 0
    in_reset = program(reset='return "say go", {"sandbox_error": 1}', step='return "ok", 1.0, True, False, {}')
    assert not validate(in_reset, FAST.validation).accepted


def test_a_failure_record_that_is_not_one_is_kept_as_a_message() -> None:
    from spade_gym.agent import Trajectory

    for value in ("gotcha", 5, {"message": 5}, {}):
        t = Trajectory("x", 0, False)
        t.end_turn(1.0, terminated=True, info={"sandbox_error": value})
        assert t.error is not None and t.error["category"] == "PROTOCOL_ERROR" and t.episode_return == 0.0
        assert isinstance(t.error["message"], str)


@pytest.mark.parametrize("program", [OVERPAY, NEGATIVE], ids=["above-1", "below-0"])
def test_a_return_outside_the_contract_ends_the_episode_as_an_error(program: str) -> None:
    assert validate(program, KNOWN_GATE).accepted  # a gate on known seeds sees an honest program
    assert not validate(program).accepted  # the gate's fresh seeds see the overpayment
    env = SandboxedEnv(program)
    try:
        env.reset(seed=7)
        action = env.oracle() if program is OVERPAY else "wrong"
        _obs, reward, terminated, truncated, info = env.step(action)
        assert reward == 0.0 and truncated and not terminated
        assert info["sandbox_error"]["category"] == "INVALID_REWARD"
        assert env.episode_return == 0.0
        raising = SandboxedEnv(program, on_error="raise")
        try:
            raising.reset(seed=7)
            with pytest.raises(ContractError, match="within \\[0, 1\\]"):
                raising.step(action)
        finally:
            raising.close()
        env.reset(seed=1003)  # on the seeds it expects the gate to play it pays by the contract
        assert env.step(env.oracle())[1] == 1.0
    finally:
        env.close()


@pytest.mark.parametrize("program", [OVERPAY, NEGATIVE], ids=["above-1", "below-0"])
def test_a_design_that_overpays_after_the_gate_earns_the_invalid_reward(program: str, tmp_path: Path) -> None:
    registry = open_registry(tmp_path / "registry", seed_library=False)
    answer = "nothing"
    if program is OVERPAY:  # an Agent that is right on the regret seeds 0 and 1
        env = SandboxedEnv(program)
        env.reset(seed=0)
        answer = env.oracle()
        env.close()
    outcome = evaluate_completion(fenced(program), None, registry=registry, agent=oracle(answer), config=KNOWN)
    assert not outcome.accepted and outcome.report.category == "INVALID_REWARD"
    assert outcome.reward.reward == FAST.reward.invalid and outcome.reward.outcome == "invalid"
    assert len(registry) == 0


def test_every_rollout_return_is_within_the_contract() -> None:
    env = SandboxedEnv(OVERPAY)
    env.reset(seed=0)
    answer = env.oracle()
    env.close()
    episodes = [Episode(OVERPAY, seed) for seed in range(3)]
    config = RolloutConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=8))
    trajectories, _ = rollout(episodes, oracle(answer), config)
    assert all(0.0 <= t.episode_return <= 1.0 for t in trajectories)
    assert trajectories[0].error is not None and trajectories[0].error["category"] == "INVALID_REWARD"


def test_hinted_and_unhinted_episodes_look_the_same_to_the_program() -> None:
    # the program pays any action once hint() was called (off the gate's seeds): if only hinted
    # episodes called it, an Agent that never knows the number would show regret 1
    assert validate(HINT_DETECTOR, KNOWN_GATE).accepted
    estimate = estimate_regret(
        HINT_DETECTOR, hint_reader(), 4, [0, 1, 2, 3], config=RolloutConfig(sampling=SamplingParams(temperature=1.0))
    )
    assert estimate.mean_hint == estimate.mean_nohint == 1.0
    assert estimate.regret == 0.0


def test_a_hint_detector_design_earns_no_regret(tmp_path: Path) -> None:
    registry = open_registry(tmp_path / "registry", seed_library=False)
    outcome = evaluate_completion(fenced(HINT_DETECTOR), None, registry=registry, agent=hint_reader(), config=KNOWN)
    # its trivial payouts off the gate's seeds are found by the audit before any regret is measured
    assert outcome.estimate is None and outcome.report.category == "TRIVIAL"
    assert outcome.reward.reward == FAST.reward.invalid


def test_a_trivial_program_off_the_gate_seeds_is_caught_by_the_audit(tmp_path: Path) -> None:
    assert validate(TRIVIAL_OFF_GATE, KNOWN_GATE).accepted  # a gate on known seeds sees an honest program
    assert validate(TRIVIAL_OFF_GATE).category == "TRIVIAL"  # the gate's fresh seeds do not
    found = audit(TRIVIAL_OFF_GATE, [0, 1, 2, 3])
    assert found.category == "TRIVIAL" and found.success_rates["empty"] == 1.0
    registry = open_registry(tmp_path / "registry", seed_library=False)
    outcome = evaluate_completion(fenced(TRIVIAL_OFF_GATE), None, registry=registry, agent=hint_reader(), config=KNOWN)
    assert not outcome.accepted and outcome.report.category == "TRIVIAL"
    assert "audit on the regret seeds" in outcome.report.feedback()
    assert outcome.reward.reward == FAST.reward.invalid and len(registry) == 0
    assert audit(OVERPAY, [0]).category == "INVALID_REWARD"


def _hash_under(seed: int) -> int:
    env = SandboxedEnv(HASH_PROBE, config=SandboxConfig(hash_seed=seed))
    try:
        return int(env.reset(seed=0)[0])
    finally:
        env.close()


def test_the_gate_cannot_be_recognised_by_its_hash_seeds(tmp_path: Path) -> None:
    # with the gate's hash seeds known (a fixed pair, as before), hash() tells a program it is validated
    known = (11, 12)
    detector = HASH_DETECTOR.format(honest=repr({_hash_under(known[0]), _hash_under(known[1])}))
    assert validate(detector, dataclasses.replace(KNOWN_GATE, hash_seeds=known)).accepted
    # the default pair is drawn at random per process: the same program is trivial at the gate
    assert set(known).isdisjoint(ValidationConfig().hash_seeds)
    assert not validate(detector).accepted
    # and if a program does recognise the gate, the audit on the regret seeds refuses it
    config = dataclasses.replace(FAST, validation=dataclasses.replace(KNOWN_GATE, hash_seeds=known))
    registry = open_registry(tmp_path / "registry", seed_library=False)
    outcome = evaluate_completion(fenced(detector), None, registry=registry, agent=hint_reader(), config=config)
    assert outcome.report.category == "TRIVIAL" and outcome.reward.reward == FAST.reward.invalid


def test_a_value_json_cannot_carry_is_a_protocol_error_not_a_crash() -> None:
    with pytest.raises(ContractError, match="not serialisable") as info:
        SandboxedEnv(LYING_SETTING)
    assert info.value.category == "PROTOCOL_ERROR"
    assert validate(LYING_SETTING).category == "PROTOCOL_ERROR"


def test_the_gate_and_the_regret_episodes_play_fresh_seeds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SEED_VARIABLE, "a secret")  # reproducible per program, different per program
    assert ValidationConfig().resolved("p1").seeds == ValidationConfig().resolved("p1").seeds
    assert ValidationConfig().resolved("p1").seeds != ValidationConfig().resolved("p2").seeds
    monkeypatch.delenv(SEED_VARIABLE)  # the default: the operating system's random source
    a, b = ValidationConfig().resolved(), ValidationConfig().resolved()
    assert len(a.seeds) == 10 and len(set(a.seeds) | set(a.answer_seeds)) == 20
    assert a.seeds != b.seeds  # drawn per validation
    assert validate(EXAMPLE).seeds != validate(EXAMPLE).seeds
    fixed = ValidationConfig(seeds=(1, 2, 3))
    assert validate(EXAMPLE, fixed).seeds == [1, 2, 3]  # a report is reproduced from its seeds


def test_regret_seeds_are_drawn_per_design_and_reproducible_from_the_sampling_seed(tmp_path: Path) -> None:
    config = dataclasses.replace(FAST, regret_seeds=None)
    seeds = []
    for i, sampling_seed in enumerate((1, 1, 2)):
        registry = open_registry(tmp_path / f"registry{i}", seed_library=False)  # no duplicate refusals
        outcome = evaluate_completion(
            fenced(EXAMPLE),
            None,
            registry=registry,
            agent=hint_reader(),
            config=config,
            sampling_seed=sampling_seed,
        )
        assert outcome.estimate is not None
        seeds.append(tuple(t.seed for t in outcome.estimate.nohint))
    assert seeds[0] == seeds[1] != seeds[2] and min(seeds[0]) >= 0


def copy_answer(prompt: list[dict[str, str]]) -> str:
    """An Agent's reply that copies the number after "The answer is" in its prompt, else says nothing."""
    found = re.search(r"The answer is (\d+)", prompt[-1]["content"])
    return f"<answer>{found.group(1) if found else 'nothing'}</answer>"


@pytest.mark.parametrize(
    ("program", "category"),
    [
        (LEAK_UNLESS_ORACLE, "HINT_LEAK"),  # the hint states the answer unless oracle() came first
        (PASSWORD, "HINT_LEAK"),  # a word of the hint is accepted as the answer
        (FRESH_WORKER, "TRIVIAL"),  # pays anything in a fresh worker's first episode
    ],
    ids=["leak-unless-oracle", "password", "fresh-worker"],
)
def test_programs_that_pass_the_gate_but_not_the_audit_earn_the_invalid_reward(
    program: str, category: str, tmp_path: Path
) -> None:
    assert validate(program).accepted  # the gate does not see it
    registry = open_registry(tmp_path / "registry", seed_library=False)
    config = dataclasses.replace(FAST, k=4)
    outcome = evaluate_completion(
        fenced(program), None, registry=registry, agent=ScriptedPolicy(copy_answer, name="copier"), config=config
    )
    assert outcome.report.category == category, outcome.report.feedback()
    assert outcome.estimate is None and outcome.reward.reward == FAST.reward.invalid and len(registry) == 0


def test_paying_after_the_old_trivial_horizon_is_caught_by_the_gate() -> None:
    # the gate's trivial episodes stopped at turn 64; they are now played to max_turns
    assert validate(LONG_EPISODE).category == "TRIVIAL"


def test_a_change_the_agent_cannot_see_is_no_variant(tmp_path: Path) -> None:
    registry = open_registry(tmp_path / "registry", seed_library=False)
    first = evaluate_completion(fenced(EXAMPLE), None, registry=registry, agent=hint_reader(), config=FAST)
    assert first.accepted
    info_only = EXAMPLE.replace('{"correct": correct}', '{"correct": correct, "v": 1}')
    spaced = EXAMPLE.replace('give " + str(', 'give  " + str(')
    assert info_only != EXAMPLE and spaced != EXAMPLE
    for variant in (info_only, spaced):
        outcome = evaluate_completion(fenced(variant), None, registry=registry, agent=hint_reader(), config=FAST)
        assert outcome.report.category == "DUPLICATE", outcome.report.feedback()
        assert outcome.reward.outcome == "duplicate"
    assert len(registry) == 1


def test_a_registered_environment_that_overpays_in_replay_is_flagged_and_never_drawn_again(tmp_path: Path) -> None:
    # an environment already in a registry (say, accepted by an older gate) that pays 5.0 on a
    # seed the gate did not play: its replayed episode ends as an error, and it is flagged
    from programs import EVEN_LENGTH

    from spade_gym import EnvProgram
    from spade_gym.registry import FLAGGED_TAG
    from spade_gym.registry.gymnasium import register_record
    from spade_gym.trainer.selfplay import flag_contract_breakers

    registry = open_registry(tmp_path / "registry", seed_library=False)
    records = [
        registry.add(EnvProgram(src), name=name, setting="reasoning", max_turns=1, description="d")
        for src, name in ((OVERPAY, "OverPay"), (EVEN_LENGTH, "EvenLength"))
    ]
    other = EVEN_LENGTH.replace('name = "EvenLength"', 'name = "Tagged"').replace("even number", "even count")
    # a tag that only looks like the flag is drawn as usual
    registry.add(EnvProgram(other), name="Tagged", setting="reasoning", max_turns=1, description="d", tags=["Flagged"])
    for record in records:
        register_record(record)
    env = SandboxedEnv(OVERPAY)
    env.reset(seed=7)
    answer = env.oracle()
    env.close()
    episodes = [Episode(records[0].gym_id, 7), Episode(records[1].gym_id, 7)]
    trajectories, _ = rollout(episodes, oracle(answer), RolloutConfig(sampling=SamplingParams(temperature=0.5)))
    assert trajectories[0].error is not None and trajectories[0].error["category"] == "INVALID_REWARD"
    assert trajectories[0].episode_return == 0.0

    assert flag_contract_breakers(registry, trajectories) == ["OverPay-v0"]
    flagged = registry.get("OverPay-v0")
    assert FLAGGED_TAG in flagged.tags and "seed 7" in (flagged.validation or {})["flagged"]
    assert len(registry) == 3  # kept on disk for inspection
    draws = registry.sample(50, strategy="uniform", mark=False)
    assert {r.env_id for r in draws} == {"EvenLength-v0", "Tagged-v0"}
    # the flag is in meta.json: a rebuilt index still excludes it
    registry.rebuild_index()
    assert {r.env_id for r in registry.sample(50, strategy="uniform", mark=False)} == {"EvenLength-v0", "Tagged-v0"}
    assert flag_contract_breakers(registry, trajectories) == ["OverPay-v0"]  # flagging again changes nothing


def test_every_adapter_scores_an_overpaying_episode_within_the_contract(tmp_path: Path) -> None:
    # the same episode (seed 7, the right answer, 5.0 paid) through each path that plays a
    # registered environment outside the self-play loop: each reports a failed episode, return 0
    from spade_gym import EnvProgram
    from spade_gym.evaluation.environments import ProgramSuite
    from spade_gym.integrations._episode import SpadeEpisode
    from spade_gym.integrations.trl import environment_factory
    from spade_gym.registry.gymnasium import register_record

    env = SandboxedEnv(OVERPAY)
    env.reset(seed=7)
    answer = env.oracle()
    env.close()
    registry = open_registry(tmp_path / "registry", seed_library=False)
    record = registry.add(EnvProgram(OVERPAY), name="OverPay", setting="reasoning", max_turns=1, description="d")
    register_record(record)

    trl_env = environment_factory(record.gym_id)()  # TRL's environment_factory
    trl_env.reset(seed=7)
    assert "INVALID_REWARD" in trl_env.answer(answer=answer) and trl_env.get_reward() == 0.0

    episode = SpadeEpisode(record.gym_id, 7)  # verl, OpenRLHF and verifiers play this
    episode.start()
    step = episode.act(f"<answer>{answer}</answer>")
    episode.close()
    assert episode.error is not None and episode.error["category"] == "INVALID_REWARD"
    assert episode.episode_return == 0.0 and step.reward <= 1.0

    # held-out evaluation: every score is in [0, 1] whatever the seed
    suite = ProgramSuite(None, registry=tmp_path / "registry", envs=["OverPay"], episodes_per_env=2)
    result = suite.run(oracle(answer))
    assert all(0.0 <= item.score <= 1.0 for item in result.items)
