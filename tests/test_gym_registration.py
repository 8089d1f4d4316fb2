"""Gymnasium registration: the spade/ namespace, registries, Generated-v0 and vector entry points."""

from __future__ import annotations

import io
import json
import subprocess
import sys
import warnings
from contextlib import redirect_stdout
from pathlib import Path

import gymnasium as gym
import pytest
from cases import EXAMPLES
from gymnasium.envs.registration import EnvSpec
from gymnasium.utils.env_checker import check_env
from programs import program

import spade_gym
from spade_gym import EnvProgram, Registry, register_program, register_registry
from spade_gym.generated import GeneratedEnv
from spade_gym.registry.gymnasium import bundled_registry_path
from spade_gym.validation import ValidationConfig
from spade_gym.vector import SandboxVectorEnv

FAST = ValidationConfig(seeds=(1, 2, 3, 4), trivial_seeds=4, answer_seeds=(7, 8, 9))


@pytest.fixture(autouse=True)
def _quiet():  # type: ignore[no-untyped-def]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        yield


def guess_program(name: str, top: int) -> str:
    """A small valid program; ``top`` changes its source (and its task)."""
    return program(
        name=name,
        reset=f"self.n = random.Random(seed).randint(10, {top})\nself.t = 0\nreturn 'Guess a number from 10 to {top}, seed ' + str(seed), {{}}",
        step=(
            "self.t += 1\nok = action.strip() == str(self.n)\n"
            "return ('right' if ok else 'wrong'), (1.0 if ok else 0.0), ok, (not ok) and self.t >= self.max_turns, {}"
        ),
        hint="return 'it is even' if self.n % 2 == 0 else 'it is odd'",
        oracle="return str(self.n)",
        max_turns=3,
    )


@pytest.fixture()
def registry(tmp_path: Path) -> Registry:
    reg = Registry(tmp_path / "reg", create=True)
    for name, top in (("GuessSmall", 99), ("GuessLarge", 999)):
        report, record = register_program(guess_program(name, top), reg, config=FAST, tags=("test",))
        assert record is not None, report.feedback()
    return reg


def test_import_registers_the_namespace_and_the_bundled_registry() -> None:
    ids = set(gym.registry)
    assert {"spade/Program-v0", "spade/Generated-v0"} <= ids
    bundled = Registry(bundled_registry_path())
    assert len(bundled) >= 2
    for record in bundled:
        assert record.gym_id in ids
    out = io.StringIO()
    with redirect_stdout(out):
        gym.pprint_registry()
    assert "spade" in out.getvalue() and "Generated-v0" in out.getvalue()


def test_specs_round_trip_through_json() -> None:
    for gym_id in ("spade/Generated-v0", Registry(bundled_registry_path()).records()[0].gym_id):
        spec = gym.spec(gym_id)
        again = EnvSpec.from_json(spec.to_json())
        assert again == spec and isinstance(spec.entry_point, str)


def test_make_in_a_fresh_interpreter_without_prior_import(tmp_path: Path) -> None:
    code = (
        "import gymnasium\n"
        "env = gymnasium.make('spade_gym:spade/Generated-v0')\n"
        "obs, info = env.reset(seed=5)\n"
        "print(info['spade']['gym_id'], isinstance(obs, str))\n"
        "env.close()\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    gym_id, is_str = done.stdout.split()
    assert gym_id.startswith("spade/") and is_str == "True"


def test_an_older_version_is_made_without_an_out_of_date_warning(tmp_path: Path) -> None:
    # each version is its own environment (replay plays v0 after v1 exists): gymnasium's
    # "out of date" deprecation, with its terminal colour codes, must not reach the user's log
    code = (
        "import gymnasium, spade_gym\n"
        "from spade_gym.registry.gymnasium import bundled_registry_path\n"
        "program = str(bundled_registry_path() / 'envs' / 'ArithmeticChain-v0' / 'env.py')\n"
        "for ns in ('spade', 'other'):\n"
        "    for v in (0, 1):\n"
        "        gymnasium.register(f'{ns}/Twice-v{v}', entry_point='spade_gym.env:SandboxedEnv', kwargs={'program': program})\n"
        "gymnasium.make('spade/Twice-v0').close()\n"
        "print('made', flush=True)\n"
        "gymnasium.make('other/Twice-v0').close()\n"
    )
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", code], capture_output=True, text=True, timeout=120, cwd=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert "spade/Twice-v0 is out of date" not in done.stderr
    assert "other/Twice-v0 is out of date" in done.stderr  # only our own ids are quiet


def test_register_registry_and_new_versions(registry: Registry) -> None:
    ids = register_registry(registry.root)
    assert ids == ["spade/GuessSmall-v0", "spade/GuessLarge-v0"]
    env = gym.make("spade/GuessSmall-v0")
    obs, _ = env.reset(seed=3)
    assert obs == "Guess a number from 10 to 99, seed 3"
    env.close()
    # a new source with an existing name gets the next version, registered at once
    report, record = register_program(guess_program("GuessSmall", 49), registry, config=FAST)
    assert record is not None and record.env_id == "GuessSmall-v1", report.feedback()
    env = gym.make("spade/GuessSmall-v1")
    assert env.reset(seed=3)[0] == "Guess a number from 10 to 49, seed 3"
    env.close()


def test_a_duplicate_is_refused_by_the_novelty_check(registry: Registry) -> None:
    relaid = "# a copy with a comment\n" + guess_program("GuessSmall", 99).replace("ok = ", "ok  =  ")
    report, record = register_program(EnvProgram(relaid), registry, config=FAST)
    assert record is None and report.category == "DUPLICATE"
    assert "duplicate of the registered GuessSmall-v0" in report.feedback()


def test_register_registry_refuses_a_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(spade_gym.RegistryError, match="does not exist"):
        register_registry(tmp_path / "nowhere")


def test_generated_env_draws_from_the_registry(registry: Registry) -> None:
    env = GeneratedEnv(registry=str(registry.root))
    drawn = set()
    for seed in range(12):
        obs, info = env.reset(seed=seed)
        drawn.add(info["spade"]["env_id"])
        assert obs.startswith("Guess a number")
        _obs, reward, terminated, _trunc, _info = env.step(env.oracle())
        assert reward == 1.0 and terminated
    assert drawn == {"GuessSmall-v0", "GuessLarge-v0"}
    first = env.reset(seed=42)
    assert env.reset(seed=42) == first  # seeded resets are reproducible
    env.close()
    check_env(GeneratedEnv(registry=str(registry.root)), skip_render_check=True)


def test_generated_env_filters_and_replays(registry: Registry) -> None:
    with pytest.raises(ValueError, match="no environment of setting 'game'"):
        GeneratedEnv(registry=str(registry.root), setting="game")
    with pytest.raises(ValueError, match="sampling must be"):
        GeneratedEnv(registry=str(registry.root), sampling="best")  # type: ignore[arg-type]
    registry.update_stats("GuessLarge-v0", regret=0.9, episodes=8)
    registry.update_stats("GuessSmall-v0", regret=0.1, episodes=8)
    env = gym.make("spade/Generated-v0", registry=str(registry.root), sampling="replay", setting="reasoning")
    counts = {"GuessSmall-v0": 0, "GuessLarge-v0": 0}
    for seed in range(40):
        counts[env.reset(seed=seed)[1]["spade"]["env_id"]] += 1
    env.close()
    assert counts["GuessLarge-v0"] > counts["GuessSmall-v0"]  # higher regret is replayed more


def test_make_vec_uses_the_concurrent_vector_env(registry: Registry) -> None:
    register_registry(registry.root)
    vec = gym.make_vec("spade/GuessLarge-v0", num_envs=3)
    try:
        assert isinstance(vec, SandboxVectorEnv)
        obs, _ = vec.reset(seed=[1, 2, 3])
        assert list(obs) == [f"Guess a number from 10 to 999, seed {s}" for s in (1, 2, 3)]
        oracles = [env.unwrapped.oracle() for env in vec.envs]
        obs, rewards, terminated, truncated, _ = vec.step(["wrong", oracles[1], "nope"])
        assert list(obs) == ["wrong", "right", "wrong"] and rewards.tolist() == [0.0, 1.0, 0.0]
        assert terminated.tolist() == [False, True, False]
        obs, rewards, *_ = vec.step(["a", "b", "c"])  # env 1 autoresets (next-step mode)
        assert obs[1] == "Guess a number from 10 to 999, seed " + obs[1].rsplit(" ", 1)[1] and rewards[1] == 0.0
    finally:
        vec.close()
    gen = gym.make_vec("spade/Generated-v0", num_envs=2, registry=str(registry.root))
    assert isinstance(gen, SandboxVectorEnv) and len(gen.reset(seed=0)[0]) == 2
    gen.close()


def test_examples_are_in_the_bundled_registry() -> None:
    bundled = {r.program_id for r in Registry(bundled_registry_path())}
    for path in EXAMPLES.glob("*.py"):
        assert EnvProgram.from_file(path).id in bundled, path.name
    meta = json.loads(next(iter(Registry(bundled_registry_path()))).path.joinpath("meta.json").read_text())
    assert meta["validation"]["accepted"] is True


@pytest.mark.parametrize("exclude", [None, ["ArithmeticChain"]])
def test_generated_never_draws_the_held_out_seed_environments(exclude: list[str] | None) -> None:
    from spade_gym.registry.gymnasium import HELD_OUT_SEED_ENVS

    env = gym.make("spade/Generated-v0", exclude=exclude).unwrapped
    root = env.registry.root

    def files() -> dict[str, bytes]:  # the registry's own files (index, write-ahead log), not its programs
        return {f.name: f.read_bytes() for f in root.iterdir() if f.is_file()}

    before = files()
    try:
        drawn = set()
        for seed in range(60):
            _, info = env.reset(seed=seed)
            drawn.add(info["spade"]["env_id"].rsplit("-v", 1)[0])
        assert drawn and not drawn & (set(HELD_OUT_SEED_ENVS) | set(exclude or ()))  # an exclude adds to them
        assert len(drawn) > 5  # still the rest of the library
        assert files() == before  # the package's files are not written
    finally:
        env.close()


def test_generated_refuses_an_unknown_exclude_and_a_folder_that_is_not_a_registry(tmp_path: Path) -> None:
    from spade_gym.errors import RegistryError

    with pytest.raises(ValueError, match=r"exclude names environments not in the registry .*\['Nope'\]"):
        gym.make("spade/Generated-v0", exclude=["Nope"])
    for folder in (tmp_path / "empty", tmp_path / "other"):
        folder.mkdir()
    (tmp_path / "other" / "notes.txt").write_text("not a registry")
    for folder in (tmp_path / "empty", tmp_path / "other"):
        with pytest.raises(RegistryError, match="is not an environment registry") as info:
            gym.make("spade/Generated-v0", registry=folder)
        assert "create=True" not in str(info.value)
    assert list((tmp_path / "empty").iterdir()) == []  # nothing written into it


def test_generated_on_a_missing_registry_names_the_folder(tmp_path: Path) -> None:
    from spade_gym.errors import RegistryError

    with pytest.raises(RegistryError, match="no environment registry at .*missing: the folder does not exist") as info:
        gym.make("spade/Generated-v0", registry=tmp_path / "missing")
    assert "create=True" not in str(info.value)
