"""Shared set-up of the benchmarks: the test helpers on the path, a warm zygote, a summary of figures.

Benchmarks report figures, they never assert on time: every figure goes to ``benchmark.extra_info``
(kept by ``--benchmark-json``), to one printed line per benchmark (shown with ``-s``) and to a
summary section at the end of the run (shown always).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
# As in tests/conftest.py: the gate's seeds are reproducible per program, so executors compared on
# the same programs (test_bench_ray) judge them on the same seeds; Ray's workers inherit it.
os.environ.setdefault("SPADE_VALIDATION_SEED", "spade-benchmarks")
sys.path.insert(0, str(ROOT / "tests"))  # tests/programs.py builds the benchmark programs

from spade_gym.sandbox import Zygote  # noqa: E402

_SUMMARY = pytest.StashKey[list[str]]()


def pytest_configure(config: pytest.Config) -> None:
    config.stash[_SUMMARY] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ``CI`` set, the benchmarks marked ``long`` are skipped (saying so), so that ``.ci/run``
    fits its 40 minutes on 2 cores; ``make bench`` without ``CI`` runs them all."""
    if os.environ.get("CI"):
        skip = pytest.mark.skip(reason="a long benchmark, left out when CI is set: run `make bench` without CI")
        for item in items:
            if "long" in item.keywords:
                item.add_marker(skip)


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    lines = config.stash.get(_SUMMARY, [])
    if lines:
        terminalreporter.section("spade_gym benchmark figures")
        for line in lines:
            terminalreporter.write_line(line)


@pytest.fixture(scope="session", autouse=True)
def warm_zygote() -> Zygote:
    """Start the default zygote once, before any benchmark pins the host to a core.

    A zygote inherits the CPU affinity the host has when it starts, and workers without
    ``cpu_affinity`` inherit the zygote's: started while the host is pinned, every later
    "unpinned" worker would be stuck on that one core.
    """
    allowed = os.sched_getaffinity(0)
    zygote = Zygote.get(None)
    assert os.sched_getaffinity(zygote.process.pid) == allowed
    return zygote


@pytest.fixture()
def report(request: pytest.FixtureRequest, benchmark: Any) -> Callable[..., None]:
    """``report(summary, **figures)``: keep ``figures`` in ``extra_info`` and print ``summary``."""

    def _report(summary: str, **figures: Any) -> None:
        # Other processes on a small machine move every figure: keep the load next to them.
        figures = {"loadavg_1m": os.getloadavg()[0], **figures}
        for key, value in figures.items():
            benchmark.extra_info[key] = round(value, 4) if isinstance(value, float) else value
        line = f"{request.node.name}: {summary}"
        print(f"\n[bench] {line}")
        request.config.stash[_SUMMARY].append(line)

    return _report
