"""Shared fixtures: paths to the corpora and example programs, a fast sandbox config, and the
embedded language model (loaded once per session)."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

# Tests never reach a model hub: a hub id that is not cached fails at once instead of retrying.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
# The gate's seeds are drawn per validation; in the suite the draw is reproducible per program, so a
# borderline program gets the same verdict on every run (test_reward_integrity checks the OS draw).
os.environ.setdefault("SPADE_VALIDATION_SEED", "spade-tests")

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


@pytest.fixture(scope="session")
def embedded_policy() -> Any:
    """``load_policy("default")``: the embedded SmolLM2-135M-Instruct on CPU, converted on first use
    into the user cache (or ``$SPADE_CACHE``), shared by every test of the session."""
    from spade_gym.policies import load_policy

    return load_policy("default")
