"""The environment factory: best-of-N with the gate as the verifier, counted, logged and resumable."""

from __future__ import annotations

import importlib.util
import json
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from doubles import ScriptedPolicy
from test_contract import FILLED
from test_designer import FAST, hint_reader

from spade_gym.design_prompts import WORKED_EXAMPLE
from spade_gym.documents import load_documents
from spade_gym.factory import FactoryConfig, FactorySummary, read_designs, run_factory


def fenced(source: str) -> str:
    return f"```python\n{source}```"


COPY = WORKED_EXAMPLE.replace("ListSum", "NumberTotal").replace("self.numbers", "self.values")
VARIANT = WORKED_EXAMPLE.replace("ListSum", "WideSum").replace("randint(10, 99)", "randint(100, 999)")


def test_the_factory_counts_logs_and_resumes(tmp_path: Path) -> None:
    group = [fenced(FILLED["reasoning"]), fenced(COPY), fenced(VARIANT), "no code here"]
    designer = ScriptedPolicy(lambda prompt: group, token_ids=[1] * 10)  # each prompt's group, in order
    config = FactoryConfig(designer=replace(FAST, settings=("reasoning",)), group=4, mode="write", count=4, seed=3)
    seen: list[tuple[FactorySummary, dict[str, Any]]] = []
    out = tmp_path / "factory"
    summary = run_factory(
        out,
        designer,
        load_documents(None),
        config,
        agent=hint_reader(),
        progress=lambda s, line: seen.append((s, line)),
    )
    lines = read_designs(out)
    assert [line["category"] for line in lines] == ["ACCEPT", "DUPLICATE", "ACCEPT", "NO_CODE"]
    assert [(line["valid"], line["accepted"], line["new"]) for line in lines] == [
        (True, True, True),  # a filled skeleton: a whole new environment
        (True, False, False),  # the prompt's worked example renamed: counts as registered
        (True, True, False),  # a variant of the worked example: accepted, but not new
        (False, False, False),
    ]
    assert lines[2]["closest"] == "example ListSum" and lines[2]["similarity"] >= 0.9
    assert lines[0]["return_hint"] is not None and lines[0]["gym_id"] == "spade/LargestOfMany-v0"
    assert (summary.designs, summary.valid, summary.accepted, summary.new, summary.tokens) == (4, 3, 2, 1, 40)
    assert summary.seconds > 0 and summary.cpu_seconds > 0 and summary.new_per_hour > 0
    rate, low, high = summary.rate("new")
    assert rate == 0.25 and 0 < low < 0.25 < high < 1
    assert [s.designs for s, _ in seen] == [1, 2, 3, 4]
    assert designer.samplings[0].n == 4 and designer.samplings[0].seed == 300_000  # seed * 100_000 + prompt
    saved = json.loads((out / "factory.json").read_text())
    assert saved["summary"]["new"] == 1 and saved["settings"]["variant"] == "skeleton"
    # resumed: the next prompt, the registry kept (the same designs are duplicates now)
    more = run_factory(out, designer, load_documents(None), replace(config, count=6), agent=hint_reader())
    lines = read_designs(out)
    assert more.designs == 6 and [line["prompt"] for line in lines] == [0, 0, 0, 0, 1, 1]
    assert [line["category"] for line in lines[4:]] == ["DUPLICATE", "DUPLICATE"]
    assert designer.samplings[-1].n == 2 and designer.samplings[-1].seed == 300_001  # only what the count leaves
    assert all(len(batch) == 1 for batch in designer.batches)  # one prompt per call, its group sampled
    posed = [json.loads(line) for line in (out / "prompts.jsonl").read_text().splitlines()]
    assert [(e["prompt"], e["variant"]) for e in posed] == [(0, "skeleton"), (1, "skeleton")]  # what designs name


@pytest.mark.parametrize(
    ("kwargs", "field"), [({"group": 0}, "group"), ({"mode": "rewrite"}, "mode"), ({"count": None}, "count or seconds")]
)
def test_factory_config_refuses_bad_values(kwargs: dict[str, Any], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        FactoryConfig(**{"count": 1, **kwargs})


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("llama_cpp") is None,
    reason="llama-cpp-python is not installed (pip install 'spade-gym[llamacpp]')",
)
def test_spade_design_count_runs_the_factory_and_resumes(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from spade_gym.cli import app

    folder = tmp_path / "factory"
    command = ["design", "--policy", "llamacpp:default", "--mode", "edit", "--group", "2", "--factory", str(folder)]
    first = CliRunner().invoke(app, [*command, "--count", "2", "-k", "1"])
    assert first.exit_code == 0, first.output
    assert "2 designs (1 prompts)" in first.output and "per CPU-hour" in first.output
    again = CliRunner().invoke(app, [*command, "--count", "4", "-k", "1"])
    assert again.exit_code == 0, again.output
    assert "4 designs (2 prompts)" in again.output and len(read_designs(folder)) == 4
