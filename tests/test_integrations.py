"""What every integration shares: ``import spade_gym`` imports no optional library, and a missing
library is one clear line naming the extra to install."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest

from spade_gym.integrations import MissingDependency, require

HEAVY = (
    "torch",
    "vllm",
    "ray",
    "trl",
    "transformers",
    "stable_baselines3",
    "verifiers",
    "verl",
    "openrlhf",
    "datasets",
)

#: Runs before the code under test in a subprocess: makes ``import <name>`` fail for the names in BLOCKED.
BLOCK = textwrap.dedent(
    """
    import importlib.abc, sys
    BLOCKED = {blocked!r}

    class Block(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
            return None

    sys.meta_path.insert(0, Block())
    """
)


def run_python(code: str, blocked: tuple[str, ...] = ()) -> subprocess.CompletedProcess[str]:
    script = BLOCK.format(blocked=set(blocked)) + textwrap.dedent(code)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)


def test_importing_spade_gym_imports_no_optional_library() -> None:
    code = f"""
    import sys, gymnasium, spade_gym, spade_gym.integrations, spade_gym.executor, spade_gym.trainer
    gymnasium.spec("spade/Designer-v0")
    loaded = sorted(m for m in {HEAVY!r} if m in sys.modules)
    assert not loaded, loaded
    """
    result = run_python(code)
    assert result.returncode == 0, result.stderr


def test_require_names_the_extra_in_one_line() -> None:
    with pytest.raises(MissingDependency) as caught:
        require("no_such_library_xyz", "ray", "spade_gym.integrations.ray")
    assert str(caught.value) == "spade_gym.integrations.ray needs no_such_library_xyz: pip install 'spade-gym[ray]'"
    assert isinstance(caught.value, ImportError)
    with pytest.raises(MissingDependency, match=r"pip install 'verl>=0.5'$"):
        require("no_such_library_xyz", "verl>=0.5", "the verl agent loop")
    assert require("json", "x", "y").dumps([1]) == "[1]"


def test_ray_missing_is_one_line_for_the_executor_and_the_config() -> None:
    code = """
    from spade_gym.executor import make_executor
    from spade_gym.trainer.config import ConfigError, SelfPlayConfig
    try:
        make_executor("ray")
    except ImportError as exc:
        print(exc)
    try:
        SelfPlayConfig.from_dict({"run": {"executor": "ray"}})
    except ConfigError as exc:
        print(exc)
    """
    result = run_python(code, blocked=("ray",))
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "spade_gym.integrations.ray needs ray: pip install 'spade-gym[ray]'",
        "config key 'run.executor': run.executor = 'ray' needs ray: pip install 'spade-gym[ray]'",
    ]
