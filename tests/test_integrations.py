"""What every integration shares: ``import spade_gym`` imports no optional library, and a missing
library is one clear line naming the extra to install."""

from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import spade_gym
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
    assert (
        str(caught.value)
        == "spade_gym.integrations.ray needs no_such_library_xyz: pip install -e '.[ray]' in a clone of the spade_gym repository (spade-gym is not on PyPI yet)"
    )
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
        "the Ray executor (spade_gym.ray_executor) needs ray: pip install -e '.[ray]' in a clone of the spade_gym repository (spade-gym is not on PyPI yet)",
        "config key 'run.executor': run.executor = 'ray' needs ray: pip install -e '.[ray]' in a clone of the spade_gym repository (spade-gym is not on PyPI yet)",
    ]


def _imports(path: Path) -> list[tuple[int, str, list[str]]]:
    """Every ``import``/``from ... import`` of ``path`` (also inside functions): (line, module, names)."""
    import ast

    found: list[tuple[int, str, list[str]]] = []
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name, []) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            found.append((node.lineno, node.module, [alias.name for alias in node.names]))
    return found


PACKAGE = Path(spade_gym.__file__).resolve().parent


def test_layers_point_one_way_the_core_never_imports_an_integration() -> None:
    core = [p for p in PACKAGE.rglob("*.py") if "integrations" not in p.relative_to(PACKAGE).parts]
    assert len(core) > 20
    wrong = [
        f"{p.relative_to(PACKAGE)}:{line} imports {module}"
        for p in core
        for line, module, _ in _imports(p)
        if module == "spade_gym.integrations" or module.startswith("spade_gym.integrations.")
    ]
    assert wrong == []


def test_no_private_name_is_imported_from_another_module() -> None:
    wrong = []
    for path in PACKAGE.rglob("*.py"):
        for line, module, names in _imports(path):
            if not module.startswith("spade_gym"):
                continue
            private = [n for n in names if n.startswith("_") and not n.startswith("__")]
            if private:
                wrong.append(f"{path.relative_to(PACKAGE)}:{line} imports {private} from {module}")
    assert wrong == []


def test_the_ray_backends_stay_importable_from_integrations() -> None:
    pytest.importorskip("ray")
    from spade_gym.integrations import ray as old
    from spade_gym.policies.ray import RayPolicy
    from spade_gym.ray_executor import RayEnv, RayExecutor, crash_report

    assert (old.RayExecutor, old.RayEnv, old.RayPolicy, old.crash_report) == (
        RayExecutor,
        RayEnv,
        RayPolicy,
        crash_report,
    )


def test_no_message_tells_users_to_install_spade_gym_from_pypi() -> None:
    # spade-gym is not on PyPI: `pip install 'spade-gym[x]'` fails, so every message says install_hint's
    from spade_gym.errors import install_hint

    src = Path(__file__).resolve().parent.parent / "src"
    pypi = re.compile(r"pip install ['\"]?spade[-_]gym", re.IGNORECASE)
    offenders = [
        f"{path.relative_to(src)}:{number}: {line.strip()}"
        for path in sorted(src.rglob("*.py"))
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if pypi.search(line) and path.name != "openai.py"  # its message is rewritten with the OpenAI policy's changes
    ]
    assert offenders == []
    assert (
        install_hint("sb3")
        == "pip install -e '.[sb3]' in a clone of the spade_gym repository (spade-gym is not on PyPI yet)"
    )
    assert install_hint().startswith("pip install -e '.' ")
