"""The ``spade`` command, run through typer's test runner on real registries and programs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from cases import EXAMPLES
from typer.testing import CliRunner

from spade_gym.cli import app

runner = CliRunner()


def run(*args: str, input: str | None = None) -> tuple[int, str]:
    result = runner.invoke(app, list(args), input=input, env={"COLUMNS": "200"})
    return result.exit_code, result.output


def test_help_explains_every_command() -> None:
    code, out = run("--help")
    assert code == 0 and all(c in out for c in ("demo", "doctor", "envs", "generate", "regret"))
    code, out = run("envs", "--help")
    assert code == 0 and all(c in out for c in ("list", "show", "validate", "add", "play", "rebuild-index"))


_SAY_BACK = '''import random


class Env:
    """Say the seeded number back; the right number pays 1.0."""

    name = "SayBack"
    setting = "reasoning"
    max_turns = 1

    def reset(self, seed):
        self.number = random.Random(seed).randint(100, 999)
        return "Say the number " + str(self.number) + " back.", {}

    def step(self, action):
        ok = action.strip() == str(self.number)
        return ("Right." if ok else "Wrong."), (1.0 if ok else 0.0), True, False, {}

    def hint(self):
        return "Copy the digits."

    def oracle(self):
        return str(self.number)
'''


def test_validate_passes_good_programs_and_fails_hostile_ones(tmp_path: Path) -> None:
    code, out = run("envs", "validate", *map(str, sorted(EXAMPLES.glob("*.py"))))
    assert code == 0, out
    assert out.count("accepted") == 2 and out.count("s of the workers' CPU") == 2  # the budgets used
    hint_is_answer = tmp_path / "hint_is_answer.py"  # cases of this suite's own (no ../shared needed)
    hint_is_answer.write_text(_SAY_BACK.replace('return "Copy the digits."', "return str(self.number)"))
    code, out = run("envs", "validate", str(hint_is_answer))
    assert code == 1 and "HINT_LEAK" in out and "feedback for the Designer" in out
    empty_wins = tmp_path / "empty_action_succeeds.py"
    empty_wins.write_text(_SAY_BACK.replace("ok = action.strip() == str(self.number)", "ok = not action.strip()"))
    code, out = run("envs", "validate", "--json", str(empty_wins))
    assert code == 1 and '"category": "TRIVIAL"' in out


def test_add_list_show_play_and_rebuild(tmp_path: Path) -> None:
    reg = tmp_path / "reg"
    code, out = run("envs", "add", "-r", str(reg), str(EXAMPLES / "arithmetic_chain.py"), "--tag", "demo")
    assert code == 0 and "spade/ArithmeticChain-v0" in out, out
    code, out = run("envs", "list", "-r", str(reg))
    assert code == 0 and "ArithmeticChain-v0" in out and "demo" in out
    code, out = run("envs", "show", "ArithmeticChain-v0", "-r", str(reg))
    assert code == 0 and "class Env" in out and "ACCEPT" in out
    code, out = run("envs", "show", "ArithmeticChian-v0", "-r", str(reg))
    assert code == 2 and "ArithmeticChain-v0" in out  # did you mean
    code, out = run("envs", "play", "ArithmeticChain-v0", "-r", str(reg), "--hint", "--seed", "3", input="1\n2\n")
    assert code == 0 and "hint:" in out and "too low" in out and "return:" in out
    (reg / "index.sqlite").unlink()
    code, out = run("envs", "rebuild-index", "-r", str(reg))
    assert code == 0 and "re-indexed 1 environment" in out


def test_bad_registry_paths_and_corrupt_entries(tmp_path: Path) -> None:
    code, out = run("envs", "list", "-r", str(tmp_path / "missing"))
    assert code == 2 and "does not exist" in out
    reg = tmp_path / "reg"
    run("envs", "add", "-r", str(reg), str(EXAMPLES / "arithmetic_chain.py"))
    run("envs", "add", "-r", str(reg), str(EXAMPLES / "bank_account.py"))
    meta = next(reg.glob("envs/BankTransferReport-v0/meta.json"))
    meta.write_text("{ not json")
    code, out = run("envs", "rebuild-index", "-r", str(reg))
    assert code == 0 and "re-indexed 1 environment" in out and "meta.json" in out
    code, out = run("envs", "list", "-r", str(reg))
    assert "ArithmeticChain-v0" in out and "skipped" in out


def test_selfplay_into_a_folder_that_cannot_be_made_says_so_in_one_line() -> None:
    root = Path(__file__).resolve().parent.parent
    code, out = run("selfplay", "--config", str(root / "examples" / "selfplay_cpu.yaml"), "--out", "/proc/spade-nope")
    assert code == 2 and "cannot create the run folder /proc/spade-nope" in out and "Traceback" not in out


def test_demo_of_a_missing_file_says_no_worker_started(tmp_path: Path) -> None:
    code, out = run("demo", str(tmp_path / "missing.py"))
    assert code == 1 and "missing.py" in out and "No program was loaded" in out
    assert "Sandbox layers active: none" not in out


def test_envs_show_points_at_the_design_that_wrote_a_run_environment(tmp_path: Path) -> None:
    import json

    from spade_gym.registry.gymnasium import open_registry

    registry = open_registry(tmp_path / "run" / "registry", include_tags=("graded",))
    env_id = next(iter(registry.records())).env_id
    registry.close()
    lines = [{"iteration": 0, "env_id": None}, {"iteration": 3, "completion": "...", "env_id": env_id}]
    (tmp_path / "run" / "designs.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    code, out = run("envs", "show", env_id, "-r", str(tmp_path / "run" / "registry"), "--no-source")
    assert code == 0 and "designs.jsonl, line 2 (iteration 3)" in out.replace("\n", "")
    code, out = run("envs", "show", "ArithmeticChain-v0", "--no-source")  # the bundled registry: no run
    assert code == 0 and "designs.jsonl" not in out
    # a 60 MB line naming the id before the real one: streamed past in chunks, never held whole
    huge = json.dumps({"iteration": 1, "env_id": env_id, "completion": "x" * 60_000_000})
    (tmp_path / "run" / "designs.jsonl").write_text(huge + "\n" + "".join(json.dumps(x) + "\n" for x in lines))
    import tracemalloc

    tracemalloc.start()
    try:
        code, out = run("envs", "show", env_id, "-r", str(tmp_path / "run" / "registry"), "--no-source")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert code == 0 and "designs.jsonl, line 3 (iteration 3)" in out.replace("\n", ""), out
    assert peak < 20_000_000, peak  # reading the 60 MB line whole took twice that


def test_design_help_names_where_its_registry_is_written() -> None:
    from spade_gym.cli import default_work_registry

    code, out = run("design", "--help")
    assert code == 0 and str(default_work_registry()) in out.replace("\n", "").replace(" ", "")


def test_phase_progress_logs_long_phases_when_not_on_a_terminal(monkeypatch: pytest.MonkeyPatch) -> None:
    import io
    import time

    from rich.console import Console

    import spade_gym.cli_common as cli

    monkeypatch.setattr(cli, "console", Console(file=io.StringIO()))  # a file, not a terminal
    lines: list[str] = []
    progress = cli.PhaseProgress(lines.append, prefix="cold start: ")
    for done in range(4):
        progress("train", done, 3)
    states = [line.split(" ", 1)[1] for line in lines]
    assert states[0] == "cold start: train: started (0/3)" and states[1].startswith("cold start: train: done (3/3, ")
    assert len(lines) == 2  # quick steps in between print nothing
    monkeypatch.setattr(cli, "PROGRESS_LINE_EVERY_S", 0.05)
    lines.clear()
    progress("design", 0, 2)  # then a long model call that reports nothing
    time.sleep(0.5)
    progress("design", 2, 2)
    states = [line.rsplit(": ", 1)[1] for line in lines]
    assert states[0] == "started (0/2)" and states[-1].startswith("done (2/2, ")
    assert any(state.startswith("running (0/2, ") for state in states[1:-1])  # the watcher spoke
    count = len(lines)
    time.sleep(0.3)
    assert len(lines) == count  # and stops once no phase runs


@pytest.mark.parametrize("command", [("doctor",), ("demo", str(EXAMPLES / "bank_account.py"))])
def test_demo_and_doctor_run(command: tuple[str, ...]) -> None:
    code, out = run(*command)
    assert code == 0, out


def test_doctor_reports_the_language_model_backends() -> None:
    code, out = run("doctor")
    assert code == 0 and "Language-model backends" in out
    assert "SmolLM2-135M-Instruct" in out and "transformers" in out and "vllm:<id>" in out


@pytest.mark.slow
def test_generate_answers_with_the_embedded_model() -> None:
    code, out = run("generate", "What is 2 + 3?", "--max-new-tokens", "16")
    assert code == 0, out
    assert "completion 1/1" in out and "SmolLM2-135M-Instruct: 1 completion(s)" in out and "5" in out


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("-n", "2"), "identical greedy completions"),
        (("--policy", "openai:nourl"), "openai:<model>@<base_url>"),
        (("--policy", "/no/such/model"), "ModelNotFound"),
    ],
)
def test_generate_explains_bad_options(args: tuple[str, ...], message: str) -> None:
    code, out = run("generate", "hi", *args)
    assert code != 0 and message in out.replace("\n", " ")


@pytest.mark.slow
def test_regret_prints_an_estimate_for_a_seed_environment() -> None:
    code, out = run("regret", "ArithmeticChain-v0", "-k", "2", "--max-new-tokens", "16", "--max-turns", "1")
    assert code == 0, out
    assert "with hint" in out and "without hint" in out and "regret " in out and "Designer reward" in out
    # one turn of 4 episodes: one batched call (and one more for 2 with the hint alone if the hint helped)
    assert ("1 generate calls" in out) == ("hint alone" not in out), out
    seeds = re.search(r"seeds \[(\d+), (\d+)\]", out)
    assert seeds is not None and [int(s) for s in seeds.groups()] != [0, 1]  # drawn, not 0 .. k-1


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (("NoSuchEnv-v0", "-k", "1"), 2, "doesn't exist"),
        (("ArithmeticChain-v0", "-k", "0"), 1, "k must be >= 1"),
        (("ArithmeticChain-v0", "--temperature", "0"), 1, "--temperature must be > 0"),
        (("/no/such/program.py",), 2, "no such program file"),
        (("ArithmeticChain-v0", "-r", "/no/such/registry"), 2, "does not exist"),
    ],
)
def test_regret_explains_bad_arguments(args: tuple[str, ...], code: int, message: str) -> None:
    exit_code, out = run("regret", *args)
    assert exit_code == code and message in out


@pytest.mark.slow
def test_measure_stores_returns_and_regret_in_meta_json(tmp_path: Path) -> None:
    import json

    reg = tmp_path / "reg"
    run("envs", "add", "-r", str(reg), str(EXAMPLES / "arithmetic_chain.py"))
    code, out = run(
        "envs", "measure", "-r", str(reg), "-k", "2", "--max-new-tokens", "8", "--max-turns", "1", "--seed", "5"
    )
    assert code == 0, out
    assert "ArithmeticChain-v0" in out and "stored in each meta.json" in out and "1 generate calls" in out
    stats = json.loads(next(reg.glob("envs/ArithmeticChain-v0/meta.json")).read_text())["stats"]
    assert stats["episodes"] in (4, 6) and "seeds 5, 6" in out  # 2 more with the hint alone if it helped
    assert 0 <= stats["mean_return_nohint"] <= 1 and 0 <= stats["mean_return_hint"] <= 1
    assert 0 <= stats["regret"] <= max(stats["mean_return_hint"] - stats["mean_return_nohint"], 0) + 1e-9
    assert 0 <= stats["format_compliance"] <= 1 and "format compliance" in out
    code, out = run("envs", "list", "-r", str(reg))
    assert code == 0 and f"{stats['mean_return_hint']:.2f} / {stats['mean_return_nohint']:.2f}" in out
    code, out = run("envs", "measure", "-r", str(reg), "NoSuchEnv-v0")
    assert code == 1 and "NoSuchEnv-v0" in out


@pytest.mark.slow
def test_design_writes_a_program_and_prints_its_full_report(tmp_path: Path) -> None:
    import json

    reg, out_file = tmp_path / "reg", tmp_path / "outcome.json"
    document = tmp_path / "doc.txt"
    document.write_text("A bakery sells loaves at 3 euros and rolls at 1 euro. Orders mix both; totals are sums.")
    code, out = run(
        "design", "-d", str(document), "-r", str(reg), "--repairs", "0", "--max-new-tokens", "200",
        "-k", "1", "--agent-max-new-tokens", "16", "-o", str(out_file),
    )  # fmt: skip
    assert code in (0, 1), out  # 0: accepted and registered, 1: refused with a report
    outcome = json.loads(out_file.read_text())
    assert [c["name"] for c in outcome["report"]["checks"]][:2] == ["static", "load"]
    assert "static" in out and "Reward:" in out and "generation" in out
    assert "(edit mode," in out  # sized for the embedded model: edit blocks, no repair rounds
    assert outcome["provenance"]["document"]["kind"] == "file" and outcome["rounds"] == 1
    assert (outcome["source"] is not None) == (outcome["category"] != "NO_CODE")
    assert outcome["accepted"] == (code == 0) and (reg / "envs").is_dir()  # created with the seed library
    assert len(list((reg / "envs").iterdir())) >= 30


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (("-d", "/no/such/file.txt"), "No such file"),
        (("--mode", "rewrite"), "--mode must be one of auto, write, edit, got 'rewrite'"),
        (("--setting", "puzzle"), "--setting must be one of reasoning, tool_use, game, got 'puzzle'"),
    ],
)
def test_design_explains_bad_arguments(tmp_path: Path, args: tuple[str, ...], message: str) -> None:
    code, out = run("design", "-r", str(tmp_path / "reg"), *args)
    assert code == 2 and message in out
    assert not (tmp_path / "reg").exists()  # refused before any work


def test_design_refuses_a_junk_document(tmp_path: Path) -> None:
    junk = tmp_path / "junk.bin"
    junk.write_bytes(bytes(range(256)) * 4)
    code, out = run("design", "-d", str(junk), "-r", str(tmp_path / "reg"))
    assert code == 2 and "no usable text" in out


@pytest.mark.slow
def test_regret_finds_designed_environments_and_shows_environment_errors(tmp_path: Path) -> None:
    source = (EXAMPLES / "arithmetic_chain.py").read_text()
    crashing = source.replace(
        "def reset(self, seed):",
        "def reset(self, seed):\n        if seed < 1000:\n            raise ValueError('low seed')",
        1,
    )
    assert crashing != source
    program = tmp_path / "crash_low.py"
    program.write_text(crashing.replace('name = "ArithmeticChain"', 'name = "CrashLow"'))
    reg = tmp_path / "reg"
    code, out = run("envs", "add", "-r", str(reg), str(program))  # the gate plays seeds 1000-1009 only
    assert code == 0, out
    code, out = run("regret", "CrashLow-v0", "-r", str(reg), "-k", "1", "--max-new-tokens", "4", "--seed", "0")
    assert code == 1 and "failed in 2 of 2 episodes" in out and "low seed" in out


def test_measure_needs_the_registry_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SPADE_REGISTRY", raising=False)
    code, out = run("envs", "measure", "ArithmeticChain-v0")
    assert code == 2 and "name it with -r REGISTRY" in out


def test_selfplay_refuses_a_bad_config_before_any_work(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("train:\n  learning_rat: 1e-4\n")
    code, out = run("selfplay", "--config", str(bad), "--out", str(tmp_path / "run"))
    assert code == 2 and "train.learning_rat" in out and "learning_rate" in out
    assert not (tmp_path / "run").exists()
    bad.write_text("")
    code, out = run("selfplay", "-c", str(bad), "--set", "agent.k=two", "--out", str(tmp_path / "run"))
    assert code == 2 and "agent.k" in out
    code, out = run("selfplay", "--help-config")
    assert code == 0 and "designer.group_size" in out and "run.iterations" in out


def test_resume_and_plot_explain_a_folder_that_is_not_a_run(tmp_path: Path) -> None:
    code, out = run("resume", str(tmp_path))
    assert code == 1 and "config.yaml" in out
    code, out = run("plot", str(tmp_path / "missing"))
    assert code == 2


def test_selfplay_needs_a_config_and_resume_and_plot_name_the_problem(tmp_path: Path) -> None:
    code, out = run("selfplay", "--out", str(tmp_path / "run"))
    assert code == 2 and "--config FILE" in out and not (tmp_path / "run").exists()
    code, out = run("resume", str(tmp_path / "missing"))
    assert code == 1 and "does not exist" in out
    (tmp_path / "file.txt").write_text("x")
    code, out = run("plot", str(tmp_path / "file.txt"))
    assert code == 2 and "is a file, not a run folder" in out
    code, out = run("plot", str(tmp_path))
    assert code == 2 and "is not a run folder: it has no config.yaml" in out


def test_a_start_that_fails_leaves_no_run_folder(tmp_path: Path) -> None:
    config = tmp_path / "c.yaml"
    config.write_text("designer:\n  documents: /no/such/corpus.jsonl\nrun:\n  tensorboard: false\n")
    code, out = run("selfplay", "--config", str(config), "--out", str(tmp_path / "run"))
    assert code == 1 and "designer.documents" in out and not (tmp_path / "run").exists()
    config.write_text("policy:\n  lora: {r: 4, bogus: 1}\nrun:\n  tensorboard: false\n")
    code, out = run("selfplay", "--config", str(config), "--out", str(tmp_path / "run"))
    assert code == 1 and "policy.lora" in out and "'bogus'" in out and not (tmp_path / "run").exists()


def test_plot_points_at_what_the_designer_wrote(tmp_path: Path) -> None:
    from spade_gym.trainer.config import SelfPlayConfig
    from spade_gym.trainer.run import RunDir

    config = SelfPlayConfig.from_dict({"run": {"tensorboard": False}})
    folder = RunDir.create(tmp_path / "run", config)
    folder.log_metrics(0, {"designer/reward_mean": -1.0, "time/total": 1.0})
    code, out = run("plot", str(tmp_path / "run"))
    assert code == 0 and "designs.jsonl" not in out  # none written yet
    folder.log_designs(0, [{"completion": "no code here", "category": "NO_CODE"}])
    folder.close()
    code, out = run("plot", str(tmp_path / "run"))
    assert code == 0 and "what the Designer wrote" in out and "designs.jsonl" in out


def test_agent_defaults_of_every_command_are_the_measured_ones() -> None:
    import typer

    from spade_gym.agent import AGENT_MAX_NEW_TOKENS, AGENT_TEMPERATURE

    group = typer.main.get_command(app)
    defaults = {}
    for name, command in group.commands.items():  # type: ignore[attr-defined]
        for sub, leaf in getattr(command, "commands", {"": command}).items():
            for param in leaf.params:
                defaults[f"{name} {sub}".strip() + f" --{param.name}"] = param.default
    assert defaults["regret --temperature"] == AGENT_TEMPERATURE
    assert defaults["regret --max_new_tokens"] == AGENT_MAX_NEW_TOKENS
    assert defaults["design --agent_temperature"] == AGENT_TEMPERATURE
    assert defaults["design --agent_max_new_tokens"] == AGENT_MAX_NEW_TOKENS
