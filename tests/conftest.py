"""Shared fixtures: paths to the corpora and example programs, and a fast sandbox config."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cases import EXAMPLES  # noqa: E402

from spade_gym import SandboxConfig  # noqa: E402


@pytest.fixture()
def arithmetic_path() -> Path:
    return EXAMPLES / "arithmetic_chain.py"


@pytest.fixture()
def bank_path() -> Path:
    return EXAMPLES / "bank_account.py"


@pytest.fixture()
def fast_config() -> SandboxConfig:
    """Short deadlines so that timeout tests stay quick."""
    return SandboxConfig(call_timeout_s=0.5, episode_budget_s=5.0)
