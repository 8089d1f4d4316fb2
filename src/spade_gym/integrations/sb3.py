"""Stable-Baselines3: ``spade/DesignerParams-v0``, a numeric Environment Designer in the spirit of PAIRED.

PAIRED (Dennis et al. 2020, "Emergent Complexity and Zero-shot Transfer via Unsupervised
Environment Design", NeurIPS, sec. 3-4) pays an adversary that picks an environment's parameters
the agent's regret. The environment imports neither SB3 nor torch; :func:`check`, :func:`train`
and :func:`action_probabilities` do (docs/integrations.md).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Literal

import gymnasium
import numpy as np
from gymnasium import spaces

from spade_gym.agent import RolloutConfig
from spade_gym.env import SandboxedEnv
from spade_gym.errors import MissingDependency, PolicyError, SandboxSetupError, SpadeError
from spade_gym.families import FAMILIES, EnvFamily, FamilyInstance, get_family, validate_instance
from spade_gym.integrations import require
from spade_gym.policies.base import Policy, SamplingParams
from spade_gym.program import EnvProgram
from spade_gym.regret import RegretEstimate, RewardConfig, designer_reward, estimate_regret
from spade_gym.sandbox import SandboxConfig
from spade_gym.validation import ValidationConfig

if TYPE_CHECKING:
    from stable_baselines3 import PPO

__all__ = ["DesignerParamsEnv", "StepRecord", "action_probabilities", "check", "train"]

_FEATURE = "spade_gym.integrations.sb3"
#: Statistics kept per (family, difficulty bucket), in observation order.
BUCKET_STATS = ("regret", "hint", "nohint", "visits")
#: Family instances an environment remembers (oldest forgotten first; the reports stay cached).
_MAX_INSTANCES = 4096


class _KeptEnv(SandboxedEnv):
    """A sandboxed environment whose ``close`` keeps the worker for the next rollout; :meth:`shutdown` kills it."""

    def close(self) -> None:
        """Keep the worker (see :meth:`shutdown`)."""

    def shutdown(self) -> None:
        super().close()


class _Pool:
    """The sandboxed environments of one knob tuple, handed out round-robin to a rollout's waves."""

    def __init__(self, program: EnvProgram, size: int, config: SandboxConfig, env_id: str) -> None:
        self.program, self.size, self.config, self.env_id = program, size, config, env_id
        self.envs: list[_KeptEnv] = []
        self.next = 0

    def __call__(self) -> _KeptEnv:
        i = self.next % self.size
        self.next += 1
        if i == len(self.envs):
            self.envs.append(_KeptEnv(self.program, config=self.config))
        return self.envs[i]

    def shutdown(self) -> None:
        for env in self.envs:
            env.shutdown()
        self.envs.clear()


@dataclass
class StepRecord:
    """What one ``step`` of :class:`DesignerParamsEnv` did (``env.last``): ``estimate`` is ``None`` for
    a refused instance or one that failed to start; ``outcome`` as :func:`~spade_gym.regret.designer_reward`'s."""

    instance: FamilyInstance
    estimate: RegretEstimate | None
    reward: float
    outcome: str


class DesignerParamsEnv(gymnasium.Env[np.ndarray, np.ndarray]):
    """A PAIRED-style numeric Environment Designer: choose a family and its knobs, be paid the Agent's regret.

    One-step episodes: ``step(action)`` validates the chosen instance once per knob tuple, plays ``k``
    episodes with the hint and ``k`` without, and updates the statistics (:attr:`observation_names`).

    Args:
        agent: the Agent, a Policy or a ``load_policy`` spec such as ``"default"`` (loaded at first use).
        families: EnvFamily objects or built-in names; ``None``: every built-in family.
        k: episodes per arm of each regret estimate, ``>= 1``.
        action_type: ``"multidiscrete"`` (``MultiDiscrete([F, L_1, ..., L_K])``) or ``"box"``
            (``Box(-1, 1, (1 + K,))``); ``K`` the most knobs of any family.
        max_levels: the most levels of one knob slot (wider knobs are sampled evenly).
        buckets: difficulty buckets per family in the observation, ``>= 1``.
        stats_rate: running means move by ``max(1/n, stats_rate)`` of the gap, in ``(0, 1]``.
        horizon: steps at which the progress feature reaches 0.5.
        rollout: the Agent's rollout settings (``temperature > 0``; ``max_episodes`` is also the
            workers kept per knob tuple). Default: temperature 1.0, 256 new tokens.
        validation, reward, sandbox: the gate's limits, the reward settings, the Agent's sandbox
            limits (default ``validation.sandbox``).
        env_cache_size: knob tuples whose workers are kept alive (LRU), ``>= 1``.
        render_mode: only ``None``.

    Raises:
        TypeError: a ``render_mode`` other than ``None``, or an ``agent`` without ``generate``.
        ValueError: no agent; an unknown, duplicate or missing family; a parameter out of its range;
            greedy sampling.

    ``reset(seed=s)`` clears the statistics (unless ``options={"keep_stats": True}``) and reseeds, so
    the same actions reproduce the same results for a seeded Agent.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        agent: Policy | str | None = None,
        families: Sequence[EnvFamily | str] | None = None,
        *,
        k: int = 2,
        action_type: Literal["multidiscrete", "box"] = "multidiscrete",
        max_levels: int = 32,
        buckets: int = 4,
        stats_rate: float = 0.1,
        horizon: int = 1000,
        rollout: RolloutConfig | None = None,
        validation: ValidationConfig | None = None,
        reward: RewardConfig | None = None,
        sandbox: SandboxConfig | None = None,
        env_cache_size: int = 16,
        render_mode: str | None = None,
    ) -> None:
        if agent is None:
            raise ValueError(
                "spade/DesignerParams-v0 needs the Agent that plays the chosen environments: pass agent=<a spade_gym "
                "Policy> or a load_policy spec such as agent='default'"
            )
        if not isinstance(agent, str) and not callable(getattr(agent, "generate", None)):
            raise TypeError(f"agent must be a Policy (with generate(prompts, sampling)) or a spec, got {agent!r:.80}")
        self._agent_spec = agent if isinstance(agent, str) else None
        self._agent: Policy | None = None if isinstance(agent, str) else agent
        if families is None:
            families = list(FAMILIES.values())
        if isinstance(families, str | EnvFamily):
            families = [families]
        self.families: tuple[EnvFamily, ...] = tuple(get_family(f) for f in families)
        if not self.families:
            raise ValueError("families is empty: give at least one EnvFamily or built-in family name")
        names = [f.name for f in self.families]
        if len(set(names)) != len(names):
            raise ValueError(f"family names must be distinct, got {names}")
        _check_int("k", k, 1)
        _check_int("max_levels", max_levels, 2)
        _check_int("buckets", buckets, 1)
        _check_int("horizon", horizon, 1)
        _check_int("env_cache_size", env_cache_size, 1)
        if not isinstance(stats_rate, int | float) or not 0 < stats_rate <= 1:
            raise ValueError(f"stats_rate must be in (0, 1], got {stats_rate!r}")
        if action_type not in ("multidiscrete", "box"):
            raise ValueError(f"action_type must be 'multidiscrete' or 'box', got {action_type!r}")
        if render_mode is not None:  # a TypeError, so SB3's make_vec_env retries without it
            raise TypeError(f"DesignerParamsEnv renders nothing: render_mode must be None, got {render_mode!r}")
        self.rollout_config = rollout or RolloutConfig(sampling=SamplingParams(temperature=1.0, max_new_tokens=256))
        if self.rollout_config.sampling.greedy:
            raise ValueError("regret needs sampling: set RolloutConfig.sampling.temperature > 0")
        self.k, self.action_type, self.buckets = k, action_type, buckets
        self.stats_rate, self.horizon, self.env_cache_size = float(stats_rate), horizon, env_cache_size
        self.validation = validation or ValidationConfig()
        self.reward_config = reward or RewardConfig()
        self.sandbox = sandbox or self.validation.sandbox
        self.render_mode = render_mode

        slots = max(len(f.knobs) for f in self.families)
        #: Levels of each knob slot in the MultiDiscrete space.
        self.slot_levels = tuple(
            min(max(f.knobs[j].levels for f in self.families if j < len(f.knobs)), max_levels) for j in range(slots)
        )
        if action_type == "multidiscrete":
            self.action_space: spaces.Space[np.ndarray] = spaces.MultiDiscrete([len(self.families), *self.slot_levels])
        else:
            self.action_space = spaces.Box(-1.0, 1.0, shape=(1 + slots,), dtype=np.float32)
        #: What each observation entry is, e.g. ``"arithmetic/d1/regret"``.
        self.observation_names: tuple[str, ...] = (
            *(f"{f.name}/d{b}/{stat}" for f in self.families for b in range(buckets) for stat in BUCKET_STATS),
            *(f"{f.name}/acceptance" for f in self.families),
            "progress",
            "regret",
        )
        self.observation_space = spaces.Box(0.0, 1.0, shape=(len(self.observation_names),), dtype=np.float32)
        self._pools: OrderedDict[tuple[str, tuple[int, ...]], _Pool] = OrderedDict()
        self._instances: dict[tuple[str, tuple[int, ...]], FamilyInstance] = {}
        #: What the last ``step`` did (the regret estimate with its trajectories), ``None`` before.
        self.last: StepRecord | None = None
        self._clear_stats()

    @property
    def agent(self) -> Policy:
        """The Agent policy (loaded from its spec at first use)."""
        if self._agent is None:
            from spade_gym.policies import load_policy

            assert self._agent_spec is not None
            self._agent = load_policy(self._agent_spec)
        return self._agent

    def decode(self, action: Any) -> tuple[EnvFamily, dict[str, int]]:
        """``(family, {knob name: int value})`` an action chooses.

        ``MultiDiscrete``: ``action[0]`` is the family index, ``action[1 + j]`` the level of knob ``j``
        (level ``i`` of ``n`` is position ``i / (n - 1)`` of its range). ``Box``: ``action[0]`` picks
        family ``floor((a + 1) / 2 * F)``, ``action[1 + j]`` is position ``(a + 1) / 2`` (clipped). Slots
        past the family's knobs are ignored.

        Raises:
            ValueError: wrong shape, a non-finite value, or a ``MultiDiscrete`` index out of range.
        """
        a = np.asarray(action)
        n_slots = len(self.slot_levels)
        if a.shape != (1 + n_slots,):
            raise ValueError(f"action must have shape ({1 + n_slots},), got {a.shape}")
        if not np.all(np.isfinite(a.astype(np.float64))):
            raise ValueError(f"action must be finite, got {a.tolist()}")
        if self.action_type == "multidiscrete":
            idx = [int(x) for x in a]
            nvec = [len(self.families), *self.slot_levels]
            if any(i != x or not 0 <= i < n for i, x, n in zip(idx, a.tolist(), nvec, strict=True)):
                raise ValueError(f"action {a.tolist()} is not in MultiDiscrete({nvec})")
            family = self.families[idx[0]]
            fractions = [i / (n - 1) if n > 1 else 0.0 for i, n in zip(idx[1:], self.slot_levels, strict=True)]
        else:
            x = np.clip(a.astype(np.float64), -1.0, 1.0)
            family = self.families[min(int((x[0] + 1) / 2 * len(self.families)), len(self.families) - 1)]
            fractions = [(v + 1) / 2 for v in x[1:]]
        return family, {knob.name: knob.value_at(fractions[j]) for j, knob in enumerate(family.knobs)}

    def encode(self, family: EnvFamily | str, values: Mapping[str, int] | None = None) -> np.ndarray:
        """An action choosing ``family`` at ``values`` (missing: the template's; nearest level otherwise).

        Raises:
            ValueError: a family this environment does not offer, or bad knob values.
        """
        name = family if isinstance(family, str) else family.name
        index = next((i for i, f in enumerate(self.families) if f.name == name), None)
        if index is None:
            raise ValueError(f"this environment offers the families {[f.name for f in self.families]}, not {name!r}")
        fam = self.families[index]
        resolved = fam.resolve(values)
        positions = [knob.position(resolved[knob.name]) for knob in fam.knobs]
        positions += [0.0] * (len(self.slot_levels) - len(positions))
        if self.action_type == "multidiscrete":
            levels = [int(p * (n - 1) + 0.5) for p, n in zip(positions, self.slot_levels, strict=True)]
            return np.array([index, *levels], dtype=np.int64)
        first = (2 * index + 1) / len(self.families) - 1  # the middle of the family's interval
        return np.array([first, *(2 * p - 1 for p in positions)], dtype=np.float32)

    def describe(self, action: Any) -> dict[str, Any]:
        """``{"family", "knobs", "difficulty"}`` of an action (JSON values); ValueError as :meth:`decode`."""
        family, values = self.decode(action)
        return {"family": family.name, "knobs": values, "difficulty": family.difficulty(values)}

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[np.ndarray, dict[str, Any]]:
        """``(statistics, {"steps": steps so far})``; ``seed`` starts a fresh curriculum unless ``keep_stats``."""
        super().reset(seed=seed)
        keep = bool((options or {}).get("keep_stats", False))
        if seed is not None and not keep:
            self._clear_stats()
        return self._observation(), {"steps": self._steps}

    def step(self, action: Any) -> tuple[np.ndarray, float, bool, bool, dict[str, Any]]:
        """Choose an environment, play it with and without the hint; ``(obs, reward, True, False, info)``.

        ``info`` holds no timings, so seeded runs compare equal. A refused instance, or one that fails
        to start, gets ``RewardConfig.invalid``.

        Raises:
            ValueError: an action outside the action space.
            SandboxSetupError: no sandbox worker can be started on this machine.
        """
        family, values = self.decode(action)
        key = (family.name, tuple(values.values()))
        instance = self._instances.get(key)
        if instance is None:  # validated once per knob tuple (and cached for the process by validate_instance)
            if len(self._instances) >= _MAX_INSTANCES:
                del self._instances[next(iter(self._instances))]
            instance = self._instances[key] = validate_instance(family, values, self.validation)
        seeds = [int(s) for s in self.np_random.integers(0, 2**31 - 1, size=self.k)]
        sampling_seed = int(self.np_random.integers(0, 2**31 - 1))
        info: dict[str, Any] = {
            "family": family.name,
            "knobs": dict(instance.values),
            "difficulty": instance.difficulty,
            "bucket": self._bucket(instance.difficulty),
            "program_id": instance.program.id,
            "accepted": instance.accepted,
            "validation": instance.report.category,
            "seeds": seeds,
        }
        estimate: RegretEstimate | None = None
        if instance.accepted:
            try:
                estimate = self._estimate(instance, seeds, sampling_seed)
            except (SandboxSetupError, PolicyError, MissingDependency):
                raise  # the machine or the Agent, not the chosen environment: never scored
            except SpadeError as exc:  # validated, yet it failed to start: contained, scored as refused
                info["feedback"] = f"the instance failed to start: {exc.message}"[:2000]
        else:
            info["feedback"] = instance.report.feedback()[:2000]
        if estimate is None:
            reward, outcome = float(self.reward_config.invalid), "invalid"
            info.update(outcome=outcome, regret=0.0, mean_hint=0.0, mean_nohint=0.0, errors=0)
        else:
            scored = designer_reward(True, estimate, config=self.reward_config)
            reward, outcome = float(scored.reward), scored.outcome
            info["outcome"] = outcome
            info.update({key: getattr(estimate, key) for key in ("regret", "mean_hint", "mean_nohint", "errors")})
        self._update(family, instance, estimate)
        self.last = StepRecord(instance, estimate, reward, outcome)
        return self._observation(), reward, True, False, info

    def close(self) -> None:
        """Kill every kept sandbox worker; safe to repeat (the environment stays usable)."""
        pools = getattr(self, "_pools", None)
        while pools:
            _, pool = pools.popitem()
            pool.shutdown()
        super().close()

    def _estimate(self, instance: FamilyInstance, seeds: list[int], sampling_seed: int) -> RegretEstimate:
        key = (instance.family, tuple(instance.values.values()))
        pool = self._pools.get(key)
        if pool is None:
            size = min(2 * self.k, self.rollout_config.max_episodes)
            pool = self._pools[key] = _Pool(instance.program, size, self.sandbox, instance.label)
            while len(self._pools) > self.env_cache_size:
                _, evicted = self._pools.popitem(last=False)
                evicted.shutdown()
        else:
            self._pools.move_to_end(key)
        pool.next = 0
        config = replace(self.rollout_config, sampling=replace(self.rollout_config.sampling, seed=sampling_seed))
        return estimate_regret(pool, self.agent, self.k, seeds, config=config)

    def _clear_stats(self) -> None:
        shape = (len(self.families), self.buckets)
        self._counts = np.zeros(shape, dtype=np.int64)
        self._means = np.zeros((*shape, 3), dtype=np.float64)  # regret, hint, no-hint
        self._tried = np.zeros(len(self.families), dtype=np.int64)
        self._accepted = np.zeros(len(self.families), dtype=np.int64)
        self._steps = 0
        self._regret = 0.0

    def _bucket(self, difficulty: float) -> int:
        return min(int(difficulty * self.buckets), self.buckets - 1)

    def _update(self, family: EnvFamily, instance: FamilyInstance, estimate: RegretEstimate | None) -> None:
        f = next(i for i, fam in enumerate(self.families) if fam.name == family.name)
        self._steps += 1
        self._tried[f] += 1
        if estimate is None:
            return
        self._accepted[f] += 1
        b = self._bucket(instance.difficulty)
        self._counts[f, b] += 1
        rate = max(1.0 / self._counts[f, b], self.stats_rate)
        sample = np.array([estimate.regret, estimate.mean_hint, estimate.mean_nohint])
        self._means[f, b] += rate * (sample - self._means[f, b])
        self._regret += max(1.0 / self._accepted.sum(), self.stats_rate) * (estimate.regret - self._regret)

    def _observation(self) -> np.ndarray:
        visits = self._counts / max(self._steps, 1)
        per_bucket = np.concatenate([self._means, visits[..., None]], axis=-1).reshape(-1)
        acceptance = self._accepted / np.maximum(self._tried, 1)
        progress = self._steps / (self._steps + self.horizon)
        obs = np.concatenate([per_bucket, acceptance, [progress, self._regret]]).astype(np.float32)
        return np.clip(obs, 0.0, 1.0)


def _check_int(name: str, value: object, low: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise ValueError(f"{name} must be an int >= {low}, got {value!r}")


def check(env: gymnasium.Env[Any, Any] | None = None, **kwargs: Any) -> None:
    """Run SB3's and Gymnasium's environment checkers on ``env`` unwrapped, or on a ``DesignerParamsEnv``
    built from ``kwargs`` (and closed).

    Raises:
        MissingDependency: Stable-Baselines3 is not installed.
        AssertionError: a checker found a problem.
    """
    env_checker = require("stable_baselines3.common.env_checker", "sb3", _FEATURE)
    from gymnasium.utils.env_checker import check_env as gymnasium_check_env

    own = env is None
    target = DesignerParamsEnv(**kwargs) if env is None else env
    try:
        env_checker.check_env(target.unwrapped, warn=True)
        gymnasium_check_env(target.unwrapped, skip_render_check=True)
    finally:
        if own:
            target.close()


def train(
    env: gymnasium.Env[Any, Any],
    total_timesteps: int = 256,
    *,
    seed: int | None = 0,
    callback: Any = None,
    **ppo_kwargs: Any,
) -> PPO:
    """Train SB3's PPO as the Designer on ``env`` (PAIRED's adversary, Dennis et al. 2020, sec. 5).

    ``ppo_kwargs`` override the settings below (chosen for one-step episodes); ``seed`` seeds PPO and
    the environment (``None``: unseeded); ``callback`` is passed to ``learn``.

    Raises:
        MissingDependency: Stable-Baselines3 is not installed.
        ValueError: ``total_timesteps < 1``.
    """
    _check_int("total_timesteps", total_timesteps, 1)
    sb3 = require("stable_baselines3", "sb3", _FEATURE)
    settings: dict[str, Any] = {
        "policy": "MlpPolicy",
        "n_steps": 64,
        "batch_size": 64,
        "n_epochs": 10,
        "learning_rate": 3e-3,
        "gamma": 0.99,
        "verbose": 0,
        "device": "cpu",
    }
    settings.update(ppo_kwargs)
    policy = settings.pop("policy")
    model = sb3.PPO(policy, env, seed=seed, **settings)
    model.learn(total_timesteps=total_timesteps, callback=callback)
    return model


def action_probabilities(model: Any, observation: np.ndarray) -> list[np.ndarray]:
    """Per ``MultiDiscrete`` slot, the probabilities the model's policy gives each value at ``observation``.

    Raises:
        MissingDependency: Stable-Baselines3 (torch) is not installed.
        ValueError: the model's action space is not ``MultiDiscrete``.
    """
    require("stable_baselines3", "sb3", _FEATURE)
    torch = require("torch", "sb3", _FEATURE)
    if not isinstance(model.action_space, spaces.MultiDiscrete):
        raise ValueError(f"action_probabilities needs a MultiDiscrete action space, got {model.action_space}")
    obs, _ = model.policy.obs_to_tensor(np.asarray(observation, dtype=np.float32))
    with torch.no_grad():
        distribution = model.policy.get_distribution(obs).distribution
    return [d.probs[0].cpu().numpy().astype(np.float64) for d in distribution]
