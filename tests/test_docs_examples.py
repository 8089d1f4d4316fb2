"""The README's quickstart and docs/environments.md's examples run and print what the pages say.

The integration pages' examples are run by their integrations' tests (``readme_example(..., doc=...)``).
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path
from typing import Any

import gymnasium
import pytest
from readme import ROOT, readme_example


def _run(code: str, name: str) -> tuple[dict[str, Any], str]:
    namespace: dict[str, Any] = {"__name__": "docs_example"}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, name, "exec"), namespace)  # noqa: S102
    return namespace, out.getvalue()


def test_the_ten_line_environment_runs_and_prints_what_the_readme_shows() -> None:
    namespace, printed = _run(readme_example("## An environment in sixteen lines"), "README.md")
    shown = readme_example("## An environment in sixteen lines", language="text")
    assert printed == shown
    assert namespace["reward"] == 1.0 and namespace["terminated"]


def test_the_environment_pages_examples_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "examples").symlink_to(ROOT / "examples")  # the examples' relative paths
    monkeypatch.chdir(tmp_path)
    doc = "docs/environments.md"
    namespace, printed = _run(readme_example("## Programs as Gymnasium environments", doc=doc), doc)
    assert namespace["terminated"] is not None and printed.strip()
    ids = dict(gymnasium.envs.registry)  # the example re-registers spade/BankTransferReport-v0 from its copy
    example = readme_example("## Registries, validation and `spade/Generated-v0`", doc=doc)
    try:
        for run in ("first", "again"):  # run again, the registry holds the program: refused as a duplicate, reused
            namespace, printed = _run(example, doc)
            try:
                assert printed.startswith("True ACCEPT"), run
                assert namespace["report"].category == ("ACCEPT" if run == "first" else "DUPLICATE")
                assert namespace["record"].gym_id == "spade/BankTransferReport-v0"
                assert namespace["info"]["spade"]["setting"] == "tool_use"
                assert (tmp_path / "my_registry").is_dir()
            finally:
                namespace["env"].close()
                namespace["vec"].close()
    finally:
        gymnasium.envs.registry.clear()
        gymnasium.envs.registry.update(ids)
