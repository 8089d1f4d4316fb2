"""``spade/DesignerParams-v0`` and the environment families (``spade_gym.integrations.sb3``,
``spade_gym.families``): real templates through the real validation gate and sandbox, a scripted
Agent (:class:`ChainSolverAgent`, whose regret is 1 exactly for 4-6 chain steps at capacity 3)
through the real rollout, and Stable-Baselines3's checker and PPO where it is installed."""

from __future__ import annotations

import ast
import contextlib
import io
import itertools
import subprocess
import sys
import time
import warnings
from typing import Any

import gymnasium
import numpy as np
import pytest
from readme import readme_example

import spade_gym  # noqa: F401 - registers spade/DesignerParams-v0
from spade_gym.agent import RolloutConfig
from spade_gym.errors import MissingDependency, PolicyError
from spade_gym.families import (
    ARITHMETIC,
    FAMILIES,
    MAZE,
    ChainSolverAgent,
    EnvFamily,
    Knob,
    get_family,
    validate_instance,
)
from spade_gym.integrations.sb3 import DesignerParamsEnv
from spade_gym.policies import SamplingParams
from spade_gym.sandbox import SandboxConfig
from spade_gym.validation import ValidationConfig

CAPACITY = 3
PEAK = range(CAPACITY + 1, 2 * CAPACITY + 1)  # the steps where the scripted Agent needs the hint: 4, 5, 6

# A small family of one's own: add two numbers, with a knob that breaks the program at its lowest value.
FRAGILE = '''\
import random

LEVEL = 2; SPARE = 0


class Env:
    """Add two seeded numbers and answer with their sum as an integer; the level knob sets their size and the program divides by zero at level 1."""

    name = "FragileSum"
    setting = "reasoning"
    max_turns = 1

    def reset(self, seed):
        rng = random.Random(seed)
        scale = 100 // (LEVEL - 1)
        self.a = rng.randint(10, 99) * scale + SPARE
        self.b = rng.randint(10, 99) * scale
        return "What is " + str(self.a) + " + " + str(self.b) + "? Answer with one integer.", {}

    def step(self, action):
        right = str(action).strip() == str(self.a + self.b)
        return ("Correct." if right else "Wrong."), (1.0 if right else 0.0), True, False, {}

    def hint(self):
        return "Add the ones digits first, then carry."

    def oracle(self):
        return str(self.a + self.b)
'''
FRAGILE_KNOBS = (Knob("LEVEL", 1, 3), Knob("SPARE", 0, 1))


def fragile(old: str, new: str) -> str:
    """FRAGILE with ``old`` replaced by ``new``."""
    assert old in FRAGILE
    return FRAGILE.replace(old, new)


def make_env(**kwargs: Any) -> DesignerParamsEnv:
    kwargs.setdefault("agent", ChainSolverAgent(CAPACITY))
    kwargs.setdefault("families", ["arithmetic"])
    kwargs.setdefault("k", 1)
    return DesignerParamsEnv(**kwargs)


def stats(env: DesignerParamsEnv, obs: np.ndarray) -> dict[str, float]:
    return dict(zip(env.observation_names, obs.tolist(), strict=True))


# -- families ---------------------------------------------------------------------------------


def test_instantiate_rewrites_only_the_knob_literals() -> None:
    program = ARITHMETIC.instantiate({"STEPS": 7})
    changed = [
        (a, b) for a, b in zip(ARITHMETIC.template.splitlines(), program.source.splitlines(), strict=True) if a != b
    ]
    assert changed == [("STEPS = 4", "STEPS = 7")]
    assert ARITHMETIC.defaults() == {"STEPS": 4, "OPERAND_DIGITS": 1}
    assert ARITHMETIC.resolve([2, 3]) == {"STEPS": 2, "OPERAND_DIGITS": 3}
    # two knobs on one line keep their offsets
    family = EnvFamily("fragile", FRAGILE, FRAGILE_KNOBS)
    tree = ast.parse(family.instantiate({"LEVEL": 3, "SPARE": 1}).source)
    assigned = {n.targets[0].id: n.value.value for n in tree.body if isinstance(n, ast.Assign)}  # type: ignore[attr-defined]
    assert assigned == {"LEVEL": 3, "SPARE": 1}
    assert family.difficulty({"LEVEL": 2, "SPARE": 1}) == pytest.approx((0.5 + 1.0) / 2)


@pytest.mark.parametrize(
    ("values", "match"),
    [
        ({"STEPS": 11}, r"knob STEPS of family 'arithmetic' must be an int in \[1, 10\], got 11"),
        ({"STEPS": 2.5}, "must be an int"),
        ({"STEPS": True}, "must be an int"),
        ({"STEP": 2}, "has no knob 'STEP'"),
        ([1, 2, 3], "has 2 knobs"),
    ],
)
def test_bad_knob_values_are_refused_by_name(values: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        ARITHMETIC.instantiate(values)


@pytest.mark.parametrize(
    ("make", "match"),
    [
        (lambda: Knob("LEVEL", 3, 1), r"low \(3\) must be <= high \(1\)"),
        (lambda: Knob("not a name", 1, 2), "identifier"),
        (lambda: Knob("LEVEL", 1, 2.5), "high must be an int"),  # type: ignore[arg-type]
        (lambda: EnvFamily("f", FRAGILE, ()), "at least one Knob"),
        (lambda: EnvFamily("f", FRAGILE, (Knob("LEVEL", 1, 3), Knob("LEVEL", 1, 3))), "duplicate knob"),
        (lambda: EnvFamily("f", FRAGILE, (Knob("LEVEL", 3, 5),)), "template's value 2 is outside"),
        (lambda: EnvFamily("f", FRAGILE, (Knob("DEPTH", 1, 3),)), "DEPTH .* assigned exactly once"),
        (lambda: EnvFamily("f", fragile("SPARE = 0", "SPARE = 0 + 0"), FRAGILE_KNOBS), "int literal"),
        (lambda: EnvFamily("f", fragile("SPARE = 0", "SPARE = 0\nSPARE = 1"), FRAGILE_KNOBS), "found 2"),
        (lambda: EnvFamily("f", "import os\n" + FRAGILE, FRAGILE_KNOBS), "import of 'os' is not allowed"),
        (lambda: EnvFamily("f", FRAGILE.replace("class Env:", "class Env("), FRAGILE_KNOBS), "syntax error"),
    ],
)
def test_bad_families_are_refused_when_defined(make: Any, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        make()


def test_unknown_family_names_suggest_the_closest() -> None:
    with pytest.raises(ValueError, match="unknown environment family 'arithmatic'.*Did you mean 'arithmetic'"):
        get_family("arithmatic")
    with pytest.raises(ValueError, match="built-in families: arithmetic, maze"):
        make_env(families=["chess"])
    assert get_family("maze") is MAZE and set(FAMILIES) == {"arithmetic", "maze"}


@pytest.mark.parametrize("family", list(FAMILIES.values()), ids=list(FAMILIES))
def test_every_corner_of_a_built_in_family_passes_the_real_gate(family: EnvFamily) -> None:
    for values in itertools.product(*[(k.low, k.high) for k in family.knobs]):
        instance = validate_instance(family, list(values))
        assert instance.accepted, (instance.label, instance.report.feedback())
    started = time.perf_counter()
    again = validate_instance(family, [k.low for k in family.knobs])
    assert again.accepted and time.perf_counter() - started < 0.05  # cached per knob tuple


def test_the_scripted_agent_needs_the_hint_exactly_between_capacity_and_twice_capacity() -> None:
    env = make_env()
    try:
        env.reset(seed=0)
        outcomes = {}
        for steps in range(1, 11):
            _, reward, terminated, truncated, info = env.step(env.encode("arithmetic", {"STEPS": steps}))
            assert terminated and not truncated and info["accepted"] and info["validation"] == "ACCEPT"
            assert reward == (1.0 if steps in PEAK else 0.0) == info["regret"]
            outcomes[steps] = info["outcome"]
        assert outcomes == {s: "trivial" if s <= 3 else "regret" if s <= 6 else "out_of_reach" for s in range(1, 11)}
        assert env.last is not None and env.last.estimate is not None
        hinted = env.last.estimate.hint[0].messages[1]["content"]
        assert "Hint: After step 5 the running value is" in hinted  # STEPS = 10: the value halfway
    finally:
        env.close()


def test_the_maze_family_is_played_in_the_real_rollout_with_its_hint() -> None:
    env = make_env(families=["maze"])
    try:
        env.reset(seed=1)
        _, reward, _, _, info = env.step(env.encode("maze", {"SIZE": 3, "WALLS": 0}))
        assert info["accepted"] and info["outcome"] == "out_of_reach" and reward == 0.0  # it only says 0
        assert env.last is not None and env.last.estimate is not None
        trajectory = env.last.estimate.hint[0]
        assert "Hint: A shortest route takes" in trajectory.messages[1]["content"]
        assert trajectory.num_turns == 3 * 4 + 4 and trajectory.truncated  # max_turns = 4 * SIZE + 4
    finally:
        env.close()


# -- the environment --------------------------------------------------------------------------


def test_the_observation_holds_running_curriculum_statistics() -> None:
    env = make_env(buckets=4, horizon=1000)
    try:
        obs, info = env.reset(seed=0)
        assert obs.dtype == np.float32 and obs.shape == (4 * 4 + 1 + 2,) and not obs.any() and info == {"steps": 0}
        obs, *_ = env.step(env.encode("arithmetic", {"STEPS": 5, "OPERAND_DIGITS": 1}))  # difficulty 4/9/2: bucket 0
        s = stats(env, obs)
        assert (s["arithmetic/d0/regret"], s["arithmetic/d0/hint"], s["arithmetic/d0/nohint"]) == (1.0, 1.0, 0.0)
        assert s["arithmetic/d0/visits"] == 1.0 and s["arithmetic/acceptance"] == 1.0 and s["regret"] == 1.0
        assert s["progress"] == pytest.approx(1 / 1001)
        obs, *_ = env.step(env.encode("arithmetic", {"STEPS": 1, "OPERAND_DIGITS": 1}))  # bucket 0 again: regret 0
        obs, _, _, _, info = env.step(env.encode("arithmetic", {"STEPS": 10, "OPERAND_DIGITS": 3}))  # bucket 3
        s = stats(env, obs)
        assert info["bucket"] == 3 and info["difficulty"] == 1.0
        assert s["arithmetic/d0/regret"] == pytest.approx(0.5) and s["arithmetic/d0/nohint"] == pytest.approx(0.5)
        assert s["arithmetic/d0/visits"] == pytest.approx(2 / 3) and s["arithmetic/d3/visits"] == pytest.approx(1 / 3)
        assert s["arithmetic/d3/hint"] == 0.0 and s["regret"] == pytest.approx(1 / 3)
        assert obs in env.observation_space
    finally:
        env.close()


def test_seeded_resets_replay_and_unseeded_resets_keep_the_curriculum() -> None:
    env = make_env(k=2)
    actions = [env.encode("arithmetic", {"STEPS": 5}), env.encode("arithmetic", {"STEPS": 2, "OPERAND_DIGITS": 3})]
    try:

        def run() -> list[Any]:
            out: list[Any] = [env.reset(seed=7)]
            for action in actions:
                out.append(env.step(action))
            return out

        first, second = run(), run()
        for a, b in zip(first, second, strict=True):
            assert all(np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y for x, y in zip(a, b, strict=True))
        last_obs = second[-1][0]
        assert second[1][4]["seeds"] != second[2][4]["seeds"]  # fresh episode seeds every step
        assert np.array_equal(env.reset()[0], last_obs)  # reset() keeps the statistics
        assert np.array_equal(env.reset(seed=1, options={"keep_stats": True})[0], last_obs)
        assert not env.reset(seed=1)[0].any()  # a seeded reset starts a fresh curriculum
    finally:
        env.close()


def test_sandbox_workers_are_kept_per_knob_tuple_and_evicted_least_recently_used() -> None:
    env = make_env(k=1, env_cache_size=1)
    a, b = env.encode("arithmetic", {"STEPS": 2}), env.encode("arithmetic", {"STEPS": 3})
    try:
        env.reset(seed=0)
        env.step(a)
        (pool,) = env._pools.values()
        assert pool.size == 2  # one hinted and one plain episode at once
        pids = [e.client.pid for e in pool.envs]
        env.step(a)
        assert [e.client.pid for e in pool.envs] == pids and all(e.client.alive for e in pool.envs)
        env.step(b)
        assert list(env._pools.values()) != [pool] and not any(e.client.alive for e in pool.envs) and not pool.envs
    finally:
        env.close()
    assert not env._pools


def test_a_hostile_or_broken_family_is_contained_as_a_penalty() -> None:
    hostile = EnvFamily(
        "hostile",
        fragile("scale = 100 // (LEVEL - 1)", "scale = len(().__class__.__bases__[0].__subclasses__())"),
        FRAGILE_KNOBS,
    )
    looping = EnvFamily("looping", fragile("rng = random.Random(seed)", "while True:\n            pass"), FRAGILE_KNOBS)
    fast_gate = ValidationConfig(sandbox=SandboxConfig(call_timeout_s=0.5, episode_budget_s=2.0), budget_s=5.0)
    env = make_env(families=[hostile, looping, EnvFamily("fragile", FRAGILE, FRAGILE_KNOBS), "arithmetic"],
                   validation=fast_gate)  # fmt: skip
    try:
        env.reset(seed=0)
        seen = {}
        for name, values in [("hostile", {}), ("looping", {}), ("fragile", {"LEVEL": 1})]:
            obs, reward, terminated, _, info = env.step(env.encode(name, values))
            assert reward == -1.0 and terminated and info["outcome"] == "invalid" and not info["accepted"]
            assert info["feedback"] and obs in env.observation_space
            seen[name] = info["validation"]
        assert seen["looping"] == "TIMEOUT" and seen["fragile"] == "ENV_EXCEPTION"
        assert seen["hostile"] in ("COMPILE_REJECTED", "SANDBOX_DENIED")
        _, reward, _, _, info = env.step(env.encode("fragile", {"LEVEL": 2}))  # the same family at a safe level
        assert info["accepted"] and info["outcome"] in ("out_of_reach", "regret", "trivial") and reward >= 0.0
        _, reward, _, _, info = env.step(env.encode("arithmetic", {"STEPS": 5}))  # and the rest still works
        assert reward == 1.0
        s = stats(env, env.reset()[0])
        assert s["hostile/acceptance"] == 0.0 and s["fragile/acceptance"] == 0.5 and s["arithmetic/acceptance"] == 1.0
    finally:
        env.close()


def test_bad_arguments_and_actions_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match="needs the Agent"):
        gymnasium.make("spade/DesignerParams-v0")
    with pytest.raises(TypeError, match="agent must be a Policy"):
        DesignerParamsEnv(agent=object())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="k must be an int >= 1"):
        make_env(k=0)
    with pytest.raises(ValueError, match="action_type"):
        make_env(action_type="discrete")
    with pytest.raises(ValueError, match="distinct"):
        make_env(families=["maze", MAZE])
    with pytest.raises(ValueError, match="temperature > 0"):
        make_env(rollout=RolloutConfig(sampling=SamplingParams(temperature=0)))
    lazy = make_env(agent="default")
    assert lazy._agent is None  # a spec is loaded at the first step, not here
    # an Agent that cannot load is the user's problem, never a penalty for the chosen environment
    broken = make_env(agent="/no/such/model")
    broken.reset(seed=0)
    with pytest.raises(PolicyError, match="no/such/model"):
        broken.step(broken.encode("arithmetic", {"STEPS": 5}))
    broken.close()
    env = make_env(families=["arithmetic", "maze"])
    try:
        assert env.action_space == gymnasium.spaces.MultiDiscrete([2, 10, 5])
        with pytest.raises(ValueError, match=r"shape \(3,\)"):
            env.step(np.array([0, 1]))
        with pytest.raises(ValueError, match="not in MultiDiscrete"):
            env.step(np.array([0, 10, 0]))
        with pytest.raises(ValueError, match="offers the families"):
            env.encode("chess")
    finally:
        env.close()


def test_actions_decode_onto_the_knob_ranges() -> None:
    env = make_env(families=["arithmetic", "maze"])
    box = make_env(families=["arithmetic", "maze"], action_type="box")
    narrow = make_env(max_levels=4)
    for family in (ARITHMETIC, MAZE):
        for values in itertools.product(*[range(k.low, k.high + 1) for k in family.knobs]):
            chosen = dict(zip(family.knob_names, values, strict=True))
            for e in (env, box):
                action = e.encode(family, chosen)
                assert action in e.action_space and e.decode(action) == (family, chosen)
    assert box.decode([-1, -1, -1]) == (ARITHMETIC, {"STEPS": 1, "OPERAND_DIGITS": 1})
    assert box.decode([1, 1, 1]) == (MAZE, {"SIZE": 7, "WALLS": 4})
    assert box.decode([5.0, 0.0, -9.0]) == (MAZE, {"SIZE": 5, "WALLS": 0})  # clipped to [-1, 1]
    assert narrow.action_space == gymnasium.spaces.MultiDiscrete([1, 4, 3])
    assert [narrow.decode([0, i, 0])[1]["STEPS"] for i in range(4)] == [1, 4, 7, 10]
    # a 10-level slot spreads over SIZE 3-7 two levels a value: level 5 of 0-9 is SIZE 5
    assert env.describe([1, 5, 4]) == {"family": "maze", "knobs": {"SIZE": 5, "WALLS": 4}, "difficulty": 0.75}


def test_import_spade_gym_imports_no_sb3_and_make_works() -> None:
    code = (
        "import sys, gymnasium, spade_gym\n"
        "from spade_gym.families import ChainSolverAgent\n"
        "env = gymnasium.make('spade/DesignerParams-v0', agent=ChainSolverAgent(3), families=['arithmetic'], k=1)\n"
        "obs, info = env.reset(seed=0)\n"
        "obs, reward, *_ = env.step(env.unwrapped.encode('arithmetic', {'STEPS': 5}))\n"
        "env.close()\n"
        "assert reward == 1.0, reward\n"
        "bad = [m for m in ('stable_baselines3', 'torch') if m in sys.modules]\n"
        "assert not bad, bad\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_the_helpers_name_the_extra_when_sb3_is_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    from spade_gym.integrations import sb3

    monkeypatch.setitem(sys.modules, "stable_baselines3", None)
    with pytest.raises(MissingDependency, match=r"needs stable_baselines3: pip install -e '\.\[sb3\]' in a clone"):
        sb3.check(agent=ChainSolverAgent(3))
    with pytest.raises(MissingDependency, match=r"-e '\.\[sb3\]'"):
        sb3.train(make_env())


# -- Stable-Baselines3 ------------------------------------------------------------------------


@pytest.mark.parametrize("action_type", ["multidiscrete", "box"])
def test_sb3_and_gymnasium_env_checkers_pass(action_type: str) -> None:
    pytest.importorskip("stable_baselines3")
    from spade_gym.integrations.sb3 import check

    env = gymnasium.make(
        "spade/DesignerParams-v0", agent=ChainSolverAgent(CAPACITY), k=1, action_type=action_type
    )  # both built-in families
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            check(env)
    finally:
        env.close()
    assert not [w for w in caught if "env_checker" in w.filename], [str(w.message) for w in caught]


class _Recorder(gymnasium.Wrapper[np.ndarray, np.ndarray, np.ndarray, np.ndarray]):
    """Keeps every step's info."""

    def __init__(self, env: gymnasium.Env[np.ndarray, np.ndarray]) -> None:
        super().__init__(env)
        self.infos: list[dict[str, Any]] = []

    def step(self, action: np.ndarray) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        out = self.env.step(action)
        self.infos.append(out[4])
        return out  # type: ignore[return-value]


def test_ppo_moves_the_chosen_difficulty_to_the_regret_peak() -> None:
    pytest.importorskip("stable_baselines3")
    from stable_baselines3.common.callbacks import BaseCallback

    from spade_gym.integrations.sb3 import action_probabilities, train

    class Before(BaseCallback):
        def _on_training_start(self) -> None:
            self.probs = action_probabilities(self.model, fresh)[1]
            self.action = self.model.predict(fresh, deterministic=True)[0]

        def _on_step(self) -> bool:
            return True

    env = _Recorder(
        gymnasium.make("spade/DesignerParams-v0", agent=ChainSolverAgent(CAPACITY), families=["arithmetic"], k=1)
    )
    fresh, _ = env.reset(seed=0)  # a fresh curriculum: all statistics 0
    before = Before()
    started = time.perf_counter()
    model = train(env, total_timesteps=320, seed=0, callback=before)
    seconds = time.perf_counter() - started
    designer: DesignerParamsEnv = env.unwrapped  # type: ignore[assignment]
    try:
        now, _ = env.reset()
        after_probs = action_probabilities(model, now)[1]
        after_action = model.predict(now, deterministic=True)[0]
        peak = slice(PEAK.start - 1, PEAK.stop - 1)  # STEPS levels 3, 4, 5
        p_before, p_after = before.probs[peak].sum(), after_probs[peak].sum()
        # the regret of the deterministic choice, really played
        regret_before = designer.step(before.action)[1]
        regret_after = designer.step(after_action)[1]
        chosen = [info["knobs"]["STEPS"] for info in env.infos[:320]]
        share_first = np.mean([s in PEAK for s in chosen[:64]])
        share_last = np.mean([s in PEAK for s in chosen[-64:]])
        print(
            f"\nPPO 320 steps in {seconds:.1f} s: P(STEPS in 4-6) {p_before:.2f} -> {p_after:.2f}; deterministic "
            f"STEPS {designer.decode(before.action)[1]['STEPS']} (regret {regret_before}) -> "
            f"{designer.decode(after_action)[1]['STEPS']} (regret {regret_after}); share of chosen STEPS in 4-6: "
            f"first 64 steps {share_first:.2f}, last 64 {share_last:.2f}"
        )
        assert len(chosen) == 320
        assert p_before == pytest.approx(0.3, abs=0.05)  # an untrained policy is near uniform over 10 levels
        assert p_after >= 0.5 and p_after >= p_before + 0.2
        assert designer.decode(after_action)[1]["STEPS"] in PEAK and regret_after == 1.0
        assert share_last > share_first
    finally:
        env.close()


def test_sb3_make_vec_env_builds_it() -> None:
    # SB3 first asks for render_mode="rgb_array" and retries without it on a TypeError
    env_util = pytest.importorskip("stable_baselines3.common.env_util")
    vec = env_util.make_vec_env(
        "spade/DesignerParams-v0",
        n_envs=1,
        seed=0,
        env_kwargs={"agent": ChainSolverAgent(3), "families": ["arithmetic"]},
    )
    try:
        vec.reset()
        _, rewards, _, infos = vec.step(np.array([[0, 4, 0]]))
        assert rewards.shape == (1,) and infos[0]["knobs"]["STEPS"] == 5
    finally:
        vec.close()


def test_readme_example_runs() -> None:
    pytest.importorskip("stable_baselines3")
    code = readme_example("## Stable-Baselines3 and `spade/DesignerParams-v0`", doc="docs/integrations.md")
    namespace: dict[str, Any] = {}
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(code, "docs/integrations.md", "exec"), namespace)
    printed = out.getvalue()
    assert "'family': 'arithmetic'" in printed and "P(4 <= STEPS <= 6) =" in printed
    assert namespace["p_steps"][3:6].sum() >= 0.5
    assert namespace["env"].unwrapped.describe(namespace["action"])["knobs"]["STEPS"] in PEAK
