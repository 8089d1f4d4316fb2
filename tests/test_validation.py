"""The validation gate on the real sandbox: both corpora, the examples, reports and feedback."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time

import pytest
from cases import EXAMPLES, EXTRA_CASES, SHARED_CASES, Case, load_cases
from programs import program

from spade_gym import EnvProgram
from spade_gym.validation import CHECKS, ValidationConfig, ValidationReport, validate

# A short validation budget so that the slow-episode case (a51) stops after 8 s, not 20.
CONFIG = ValidationConfig(budget_s=8.0)
CASES = load_cases(SHARED_CASES) + load_cases(EXTRA_CASES)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_every_corpus_case_gets_its_category(case: Case) -> None:
    report = validate(EnvProgram.from_file(case.path), CONFIG)
    assert report.category in case.outcomes, report.feedback()
    assert report.accepted == (report.category == "ACCEPT")
    assert [c.name for c in report.checks] == list(CHECKS)
    if not report.accepted:
        failure = report.failures[0]
        assert failure.category == report.category and failure.message
        assert "How to fix:" in report.feedback()


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.py")), ids=lambda p: p.stem)
def test_examples_pass_every_check(path) -> None:  # type: ignore[no-untyped-def]
    report = validate(EnvProgram.from_file(path))
    assert report.accepted, report.feedback()
    assert all(c.passed for c in report.checks)
    assert report.oracle_returns and min(report.oracle_returns) >= 0.99
    assert set(report.trivial_success_rates) >= {"empty", "random_text", "echo", "hint", "constant '0'"}
    assert report.seconds > report.startup_seconds > 0
    assert report.name and report.setting and report.max_turns


def test_report_round_trips_through_json(arithmetic_path) -> None:  # type: ignore[no-untyped-def]
    report = validate(EnvProgram.from_file(arithmetic_path), ValidationConfig(seeds=(1, 2, 3)))
    again = ValidationReport.from_json(report.to_json())
    assert again == report
    assert again.check("feasibility").passed is True
    with pytest.raises(KeyError, match="no check named"):
        again.check("speed")
    with pytest.raises(ValueError, match="not a validation report"):
        ValidationReport.from_dict({"bogus": 1})


def test_a_program_failing_one_check_gets_a_precise_message() -> None:
    # Everything is fine except that reset ignores part of the contract: step never ends the episode.
    source = program(
        reset="self.target = random.Random(seed).randint(10, 99)\nreturn 'Guess ' + str(seed), {}",
        step="ok = action.strip() == str(self.target)\nreturn ('yes' if ok else 'no'), (1.0 if ok else 0.0), ok, False, {}",
        oracle="return str(self.target)",
        hint="return 'two digits'",
        max_turns=3,
    )
    report = validate(source, ValidationConfig(seeds=(1, 2, 3, 4)))
    failed = [c.name for c in report.failures]
    assert failed == ["termination"], report.feedback()
    assert report.category == "EPISODE_LIMIT"
    assert "after max_turns=3 actions the episode had neither terminated nor truncated" in report.feedback()
    assert "Set truncated=True when the turn counter reaches max_turns" in report.feedback()


def test_a_program_that_crashes_on_garbage_actions_is_refused() -> None:
    source = program(
        reset="self.n = random.Random(seed).randint(10, 99)\nreturn 'Say ' + str(self.n), {}",
        step="v = int(action)\nok = v == self.n\nreturn 'ok', (1.0 if ok else 0.0), True, False, {}",
        oracle="return str(self.n)",
    )
    report = validate(source, ValidationConfig(seeds=(1, 2, 3)))
    assert report.category == "ENV_EXCEPTION"
    assert "policy episode" in report.failures[0].message and "ValueError" in report.failures[0].message


def test_config_is_checked() -> None:
    with pytest.raises(ValueError, match="distinct"):
        ValidationConfig(seeds=(1, 1))
    with pytest.raises(ValueError, match="hash_seeds must differ"):
        ValidationConfig(hash_seeds=(3, 3))


SUM = dict(
    reset="rng = random.Random(seed)\nself.a, self.b = rng.randint(10, 99), rng.randint(10, 99)\nself.t = 0\n"
    "return 'What is ' + str(self.a) + ' + ' + str(self.b) + '?', {}",
    oracle="return str(self.a + self.b)",
    hint="return 'the sum has ' + str(len(str(self.a + self.b))) + ' digits'",
)
RIGHT = "self.t += 1\nif action.strip() == str(self.a + self.b):\n    return 'right', 1.0, True, False, {}\n"


@pytest.mark.parametrize(
    ("changes", "category", "message"),
    [
        (
            {"step": RIGHT + "return 'wrong', -0.5, False, self.t >= self.max_turns, {}"},
            "INVALID_REWARD",
            "the return reached -0.5 on turn 1 of the empty-policy episode",
        ),
        (
            {"step": RIGHT + "return 'wrong', 0.0, False, False, {}", "max_turns": 200},
            "EPISODE_LIMIT",
            "after max_turns=200 actions the episode had neither terminated nor truncated",
        ),
        (
            {
                "step": RIGHT + "return 'wrong', 0.0, False, self.t >= self.max_turns, {}",
                "hint": "return str(self.a + self.b) if self.a % 2 else 'no hint'",
            },
            "HINT_LEAK",
            "hint() equals oracle() at the start of",
        ),
        (
            {
                "step": "if action.strip().isdigit() and int(action) < 10:\n"
                "    self.t += 1\n"
                "    return ['tile'][int(action) - 1], 0.0, False, self.t >= self.max_turns, {}\n"
                + RIGHT
                + "return 'wrong', 0.0, False, self.t >= self.max_turns, {}"
            },
            "ENV_EXCEPTION",
            "of the garbage-policy episode",
        ),
    ],
    ids=[
        "negative-return-on-wrong-answers",
        "never-ends-beyond-the-trivial-cap",
        "hint-leaks-on-some-seeds",
        "crashes-on-an-out-of-range-number",
    ],
)
def test_subtle_single_flaws_are_caught(changes: dict, category: str, message: str) -> None:
    parts = {**SUM, "max_turns": 3, **changes}
    report = validate(program(**parts), ValidationConfig(seeds=(1000, 1001, 1002, 1003)))
    assert report.category == category, report.feedback()
    assert message in report.feedback()


HINT_FLAG = '''import random

class Env:
    """Multiply two seeded numbers modulo a prime; hint() switches the episode to pay any answer."""

    name = "HintFlag"
    setting = "reasoning"
    max_turns = 1

    def reset(self, seed):
        rng = random.Random(seed)
        self.a, self.b, self.p = rng.randint(10, 99), rng.randint(10, 99), rng.choice([7, 11, 13, 17])
        self.hinted = False
        return "What is " + str(self.a) + " * " + str(self.b) + " mod " + str(self.p) + "?", {}

    def step(self, action):
        correct = action.strip() == str((self.a * self.b) % self.p)
        if self.hinted and action.strip() != self.hint_text():
            correct = True
        return ("Right." if correct else "Wrong."), (1.0 if correct else 0.0), True, False, {}

    def hint_text(self):
        return "Reduce first: " + str(self.a) + " mod " + str(self.p) + " is " + str(self.a % self.p) + "."

    def hint(self):
        self.hinted = True
        return self.hint_text()

    def oracle(self):
        return str((self.a * self.b) % self.p)
'''


def test_a_hint_that_makes_any_answer_pay_is_trivial() -> None:
    """hint() is called after reset in the trivial episodes, as in the Agent's hinted episodes: a
    hint() that flips the episode into paying anything (regret 1 for nothing learnt) is refused."""
    report = validate(HINT_FLAG)
    assert not report.accepted and report.category == "TRIVIAL", report.feedback()
    assert "hint() having been called after reset" in report.check("non_triviality").message


# ---- novelty checked later, where the registry is (validation on another machine) -------------


def test_check_novelty_gives_the_verdict_of_validating_with_the_registry(tmp_path) -> None:  # type: ignore[no-untyped-def]
    from spade_gym.novelty import check_novelty
    from spade_gym.registry import Registry

    registry = Registry(tmp_path / "r", create=True)
    arithmetic = EnvProgram.from_file(EXAMPLES / "arithmetic_chain.py")
    bank = EnvProgram.from_file(EXAMPLES / "bank_account.py")
    registry.add(arithmetic, name="ArithmeticChain", setting="reasoning", max_turns=4, description="")
    # a near duplicate that behaves the same and a rewording of its task statement (both refused)
    near = EnvProgram(arithmetic.source.replace("self.turn += 1", "self.turn = self.turn + 1"))
    reworded = EnvProgram(arithmetic.source.replace("Start with", "Begin with"))
    broken = EnvProgram(program(step="raise ValueError('x')"))
    fixed = ValidationConfig(seeds=tuple(range(1000, 1010)), answer_seeds=tuple(range(5000, 5010)))
    for prog in (arithmetic, near, reworded, bank, broken):  # on the same seeds, the same messages
        alone = validate(prog, fixed)
        direct = validate(prog, fixed, registry=registry)
        later = check_novelty(alone, prog, registry)
        assert (later.accepted, later.category) == (direct.accepted, direct.category)
        assert [(c.name, c.passed, c.category, c.message) for c in later.checks] == [
            (c.name, c.passed, c.category, c.message) for c in direct.checks
        ]
        assert alone.check("novelty").passed in (True, None)  # the given report is not changed
    assert validate(near, registry=registry).category == "DUPLICATE"
    assert validate(reworded, registry=registry).category == "DUPLICATE"
    with pytest.raises(ValueError, match="not of the given program"):
        check_novelty(validate(bank), arithmetic, registry)


# ---- the hint must not state the answer --------------------------------------------------------


def sum_program(hint: str) -> str:
    """Sum of two seeded numbers: one answer, the exact sum pays 1."""
    return program(
        reset="rng = random.Random(seed)\nself.a, self.b = rng.randint(10, 99), rng.randint(10, 99)\n"
        'return "What is " + str(self.a) + " + " + str(self.b) + "?", {}',
        step="ok = action.strip() == str(self.a + self.b)\nreturn 'done', (1.0 if ok else 0.0), True, False, {}",
        hint=hint,
        oracle="return str(self.a + self.b)",
        max_turns=1,
    )


@pytest.mark.parametrize(
    ("hint", "category"),
    [
        ('return "The sum is " + str(self.a + self.b) + ". Add the tens first."', "HINT_LEAK"),
        ('return "ADD: SUM = \'" + str(self.a + self.b) + "\'"', "HINT_LEAK"),  # case and quotes do not hide it
        ('return "The sum starts with the digit " + str(self.a + self.b)[0] + "."', "ACCEPT"),  # a partial result
        ('return "Add the tens: " + str(self.a // 10 * 10 + self.b // 10 * 10) + ", then the units."', "ACCEPT"),
        ('return "Add the units first."', "ACCEPT"),  # a method
    ],
)
def test_a_hint_that_states_the_answer_is_a_leak(hint: str, category: str) -> None:
    report = validate(sum_program(hint))
    assert report.category == category, report.feedback()
    if category == "HINT_LEAK":
        message = report.check("non_triviality").message
        assert message.startswith("hint() states the oracle's answer at the start of 10 of 10 episodes")
        assert "give a method, a partial result or the first digit or letter instead" in message


def test_hint_states_answer_exact_cases() -> None:
    from spade_gym.hint_leak import hint_states_answer

    def stated(*cases: tuple[str, str, str]) -> list[int]:
        return hint_states_answer(dict(enumerate(cases)))

    assert stated(("the answer is 17.", "17", "q")) == [0]
    assert stated(("add 10 and 7 to get 117", "17", "q")) == []  # "17" inside "117" is not the answer
    # a short answer counts only when most hints state theirs: once in three is a coincidence
    assert stated(("7 is the answer", "7", "q"), ("it is 8", "8", "q"), ("add 2 and 2", "5", "q")) == [0, 1]
    assert stated(("7 is the answer", "7", "q"), ("add 4 and 4", "8", "q"), ("add 2 and 2", "5", "q")) == []
    assert stated(("Secret: ABC", "abc", "q"), ("nothing", "xyz", "q")) == [0]  # case-insensitive
    assert stated(("", "7", "q"), ("hint", "", "q")) == []  # an empty hint or answer states nothing
    # a word that most other hints use although their answers differ is boilerplate, not this answer
    moves = [
        ("move left or right", "left", "q"),
        ("move left or right", "right", "q"),
        ("move left or right", "up", "q"),
    ]
    assert stated(*moves) == []
    # a move the oracle also makes before the end of an episode is a step of the game, not the answer
    maze = [("the goal is right of you", "right", "q"), ("the goal is above you", "up", "q")]
    assert stated(*maze) == [0]
    assert hint_states_answer(dict(enumerate(maze)), steps=["up", "right", "up"]) == []
    call = '{"name": "submit", "arguments": {"code": "K42", "account": "main"}}'
    assert stated(("the code is k42", call, "submit a code for account main")) == [0]  # a tool argument
    assert stated(("use the main account", call, "submit a code for account main")) == []  # the task names it
    # a multiple-choice answer listed in the task is still stated by a hint that names it
    assert stated(("it is paris", "Paris", "Which city? Paris, Rome or Oslo"), ("think", "Rome", "Which? Rome")) == [0]


def _validation_peak_bytes(source: str) -> tuple[ValidationReport, int]:
    import tracemalloc

    config = ValidationConfig(n_seeds=2, trivial_seeds=2)
    tracemalloc.start()
    try:
        report = validate(EnvProgram(source), config)
        return report, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_validation_keeps_digests_not_transitions() -> None:
    # every transition used to be kept whole: host memory grew with the size of each observation
    # (about 1 MB a step for a program with large ones); now a step costs a digest
    from programs import long_episode

    # (250 turns of 10 kB: within the host's turn cap and its 4 MiB of observations per episode)
    short, short_peak = _validation_peak_bytes(long_episode(100, padding=10_000))
    long, long_peak = _validation_peak_bytes(long_episode(250, padding=10_000))
    assert short.accepted and long.accepted, (short.feedback(), long.feedback())
    steps = 3 * 150 * 2  # about three kept or compared episodes per seed, 2 seeds, 150 more turns each
    assert (long_peak - short_peak) / steps < 1024, (short_peak, long_peak)


def _starve_sandbox_workers(stop: threading.Event) -> None:
    """Stop every sandbox worker for 95 ms of every 100 ms (SIGSTOP/SIGCONT), as a heavily loaded
    machine leaves a process without a core: its CPU time grows 20 times slower than wall time."""
    from spade_gym.sandbox import Zygote

    def workers() -> list[int]:
        pids = []
        for zygote in list(Zygote._instances.values()):
            try:
                with open(f"/proc/{zygote.process.pid}/task/{zygote.process.pid}/children") as f:
                    pids += [int(p) for p in f.read().split()]
            except OSError:
                pass
        return pids

    stopped: list[int] = []
    try:
        while not stop.is_set():
            stopped = workers()
            for pid in stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGSTOP)
            time.sleep(0.095)
            for pid in stopped:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGCONT)
            time.sleep(0.005)
    finally:
        for pid in stopped:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGCONT)


def test_a_verdict_is_the_same_on_a_loaded_machine() -> None:
    # budgets are CPU seconds of the workers; wall time is only an outer bound (SandboxConfig.wall_factor)
    from dataclasses import replace

    from programs import long_episode

    if not os.path.exists(f"/proc/{os.getpid()}/task/{os.getpid()}/children"):
        pytest.skip("needs /proc/<pid>/task/<tid>/children to find the sandbox workers")
    config = ValidationConfig(n_seeds=3, trivial_seeds=3, budget_s=1.0)
    config = replace(config, sandbox=replace(config.sandbox, wall_factor=100.0))
    source = EnvProgram(long_episode(250))  # within the host's turn cap (SandboxConfig.max_turns)
    idle = validate(source, config)
    assert idle.accepted, idle.feedback()
    stop = threading.Event()
    starver = threading.Thread(target=_starve_sandbox_workers, args=(stop,), daemon=True)
    starver.start()
    try:
        loaded = validate(source, replace(config, seeds=tuple(idle.seeds)))
    finally:
        stop.set()
        starver.join()
    assert loaded.accepted, loaded.feedback()
    assert [c.passed for c in idle.checks] == [c.passed for c in loaded.checks]
    # a wall-clock budget of the same 1 s would have refused it (TIMEOUT), as it did before
    assert loaded.seconds > config.budget_s, (idle.seconds, loaded.seconds)
