"""Every hostile and valid program of the corpora, run through the real static check and sandbox.

The shared corpus (``../shared/sandbox_cases``) names the expected outcome and the layer that must
catch each case. Cases owned by the static check, the sandbox and the output contract must end in
their expected category here; cases owned by the validation gate (nondeterminism, episodes that
never end, trivial or leaking environments) are decided by the gate, and here must merely be
contained. ``tests/sandbox_cases_extra`` adds escapes of our own, all of them sandbox-layer cases.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest
from cases import EXTRA_CASES, SANDBOX_LAYERS, SHARED_CASES, Case, load_cases, play

from spade_gym import SandboxConfig
from spade_gym.errors import CATEGORIES

SHARED = load_cases(SHARED_CASES)
EXTRA = load_cases(EXTRA_CASES)
ALL = SHARED + EXTRA
# A short episode budget: the gate's slow-episode case (a51) must be stopped by it, not run for 40 s.
CONFIG = SandboxConfig(episode_budget_s=8.0)

if not SHARED:  # pragma: no cover - the corpus is shipped beside the project
    pytest.skip(f"shared sandbox cases not found at {SHARED_CASES}", allow_module_level=True)


NOBODY = 65534


def _owner(path: str) -> int | None:
    try:
        return os.stat(path).st_uid
    except OSError:
        return None


def _snapshot(roots: list[Path]) -> set[str]:
    files: set[str] = set()
    for root in roots:
        for dirpath, _dirs, names in os.walk(root):
            files.update(os.path.join(dirpath, n) for n in names)
    return files


@pytest.fixture(scope="module")
def outcomes() -> dict[str, str]:
    """Run every case once, in this one process, and check that no file appeared anywhere."""
    roots = [Path(tempfile.gettempdir()), Path.cwd(), Path.home()]
    before = _snapshot(roots)
    results = {case.id: play(case.path.read_text(), CONFIG) for case in ALL}
    appeared = {
        f
        for f in _snapshot(roots) - before
        if "/.pytest_cache/" not in f and "__pycache__" not in f and "/.benchmarks/" not in f and "/pytest-of-" not in f
    }
    # Other processes on the machine may use /tmp meanwhile: there, count only files owned by the
    # workers' user (nobody when the host is root, else the host's own user).
    worker_uid = NOBODY if os.geteuid() == 0 else os.geteuid()
    appeared = {f for f in appeared if not f.startswith(str(roots[0])) or _owner(f) == worker_uid}
    assert not appeared, f"files appeared while hostile programs ran: {sorted(appeared)[:10]}"
    return results


def test_the_corpora_are_complete() -> None:
    assert len(SHARED) >= 50
    assert all(
        o in CATEGORIES
        or o
        in (
            "ACCEPT",
            "NONDETERMINISM",
            "EPISODE_LIMIT",
            "TRIVIAL",
            "HINT_LEAK",
            "ORACLE_FAILED",
            "SEED_INVARIANT",
        )
        for c in ALL
        for o in c.outcomes
    )


@pytest.mark.parametrize("case", [c for c in ALL if c.layer in SANDBOX_LAYERS], ids=lambda c: c.id)
def test_sandbox_layer_cases_get_their_category(case: Case, outcomes: dict[str, str]) -> None:
    assert outcomes[case.id] in case.outcomes, f"{case.id}: expected {'|'.join(case.outcomes)}"


@pytest.mark.parametrize("case", [c for c in SHARED if c.layer not in SANDBOX_LAYERS], ids=lambda c: c.id)
def test_validation_gate_cases_are_contained(case: Case, outcomes: dict[str, str]) -> None:
    # Decided by the validation gate; the sandbox must only survive them and classify any fault.
    assert outcomes[case.id] == "ACCEPT" or outcomes[case.id] in CATEGORIES
