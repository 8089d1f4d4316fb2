"""``spade/Generated-v0``: a Gymnasium environment that draws a registered environment at every reset.

Every ``reset`` samples an environment (uniformly, or by prioritised replay on regret) and a program
seed from the environment's own generator; ``info["spade"]`` says which environment was drawn.
"""

from __future__ import annotations

import os
from collections import OrderedDict
from collections.abc import Collection
from pathlib import Path
from typing import Any, Literal

import gymnasium as gym

from spade_gym.env import SandboxedEnv, escape_text
from spade_gym.errors import RegistryError
from spade_gym.registry import EnvRecord, Registry
from spade_gym.registry.gymnasium import HELD_OUT_SEED_ENVS, bundled_registry_path
from spade_gym.registry.records import ENVS_DIR
from spade_gym.sandbox import SandboxConfig
from spade_gym.spaces import UnicodeText

__all__ = ["GeneratedEnv"]

Sampling = Literal["uniform", "replay"]


class GeneratedEnv(gym.Env[str, str]):
    """Draw a registered environment at every reset and play it.

    Args:
        registry: path of a registry; default: ``SPADE_REGISTRY``, else the bundled registry.
        setting: draw only environments of this setting.
        sampling: ``"uniform"`` or ``"replay"`` (prioritised replay on regret, Jiang et al. 2021;
            :mod:`spade_gym.registry.sampler`).
        config: sandbox limits of the environments.
        cache_size: environments kept loaded (one worker process each) between resets.
        render_mode: ``None``, ``"ansi"`` or ``"human"``.
        exclude: environment names never drawn; with the bundled registry the held-out
            :data:`~spade_gym.registry.gymnasium.HELD_OUT_SEED_ENVS` always are too.

    Raises:
        RegistryError: the registry cannot be opened.
        ValueError: bad ``sampling`` or ``setting``, an unknown ``exclude`` name, or no match.

    ``info["spade"]`` after ``reset`` holds ``{"env_id", "gym_id", "setting", "seed"}``.
    """

    metadata = {"render_modes": ["ansi", "human"]}

    def __init__(
        self,
        registry: str | os.PathLike[str] | None = None,
        setting: str | None = None,
        sampling: Sampling = "uniform",
        config: SandboxConfig | None = None,
        cache_size: int = 4,
        render_mode: str | None = None,
        exclude: Collection[str] | None = None,
    ) -> None:
        if sampling not in ("uniform", "replay"):
            raise ValueError(f"sampling must be 'uniform' or 'replay', got {sampling!r}")
        if setting not in (None, "reasoning", "tool_use", "game"):
            raise ValueError(f"setting must be 'reasoning', 'tool_use', 'game' or None, got {setting!r}")
        path = Path(registry or os.environ.get("SPADE_REGISTRY") or bundled_registry_path())
        made = "a registry is made by `spade selfplay`, `spade design` or spade_gym.registry.gymnasium.open_registry"
        if not path.exists():
            raise RegistryError(f"no environment registry at {path}: the folder does not exist ({made})")
        if path.is_dir() and not (path / ENVS_DIR).is_dir():  # opening it would turn it into an empty registry
            raise RegistryError(f"{path} is not an environment registry (it has no envs/ folder); {made}")
        self.registry = Registry(path)
        bundled = path.resolve() == bundled_registry_path().resolve()
        held_out = HELD_OUT_SEED_ENVS if bundled else ()
        names = {r.name for r in self.registry.records()}
        unknown = sorted(set(exclude or ()) - names)
        if unknown:
            raise ValueError(f"exclude names environments not in the registry at {path}: {unknown}")
        self.exclude = frozenset(held_out) | frozenset(exclude or ())
        if not [r for r in self.registry.records(setting=setting) if r.name not in self.exclude]:
            raise ValueError(
                f"the registry at {path} has no environment{f' of setting {setting!r}' if setting else ''}"
                + (f" besides the excluded {sorted(self.exclude)}" if self.exclude else "")
            )
        self.setting_filter, self.sampling = setting, sampling
        self.config = config or SandboxConfig()
        self.cache_size = max(1, cache_size)
        self.render_mode = render_mode
        limit = self.config.limits.max_text_bytes
        self.observation_space = UnicodeText(max_length=limit, max_bytes=limit)
        self.action_space = UnicodeText(max_length=self.config.max_action_chars)
        self._envs: OrderedDict[str, SandboxedEnv] = OrderedDict()
        # sampling counts are recorded in a user's registry, never in the package's own files
        self._writable = not bundled and os.access(path, os.W_OK)
        self.current: SandboxedEnv | None = None
        self.record: EnvRecord | None = None

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Draw an environment and a program seed from this environment's generator (:meth:`draw`); reset it."""
        super().reset(seed=seed)
        record, program_seed = self.draw()
        env = self._load(record)
        obs, info = env.reset(seed=program_seed)
        self.current, self.record = env, record
        spade = {"env_id": record.env_id, "gym_id": record.gym_id, "setting": record.setting, "seed": program_seed}
        return obs, {**info, "spade": spade}

    def draw(self, seed: int | None = None) -> tuple[EnvRecord, int]:
        """The environment and program seed the next :meth:`reset` would play, drawn without loading it
        (e.g. to play it elsewhere); ``seed`` reseeds the generator as ``reset(seed=...)`` does."""
        if seed is not None:
            self._np_random, self._np_random_seed = gym.utils.seeding.np_random(seed)
        while True:  # an excluded environment is drawn again (the constructor checked that others exist)
            record = self.registry.sample(
                1, strategy=self.sampling, setting=self.setting_filter, rng=self.np_random, mark=self._writable
            )[0]
            if record.name not in self.exclude:
                break
        return record, int(self.np_random.integers(0, 2**31 - 1))

    def step(self, action: Any) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Step the environment drawn at the last reset (see :meth:`SandboxedEnv.step`)."""
        return self._active().step(action)

    def send_step(self, action: Any) -> None:
        """Start a step without waiting (see :meth:`SandboxedEnv.send_step`)."""
        if self.current is not None:
            self.current.send_step(action)

    def hint(self) -> str:
        """The current environment's privileged hint."""
        return self._active().hint()

    def oracle(self) -> str:
        """The current environment's perfect action."""
        return self._active().oracle()

    def render(self) -> str | None:
        """``"ansi"``: the current observation, escaped; ``"human"``: print it."""
        if self.current is None:
            return None
        text = escape_text(self.current.last_observation)
        if self.render_mode == "human":
            print(text)
            return None
        return text if self.render_mode == "ansi" else None

    def close(self) -> None:
        """Close every loaded environment (their workers are killed)."""
        for env in self._envs.values():
            env.close()
        self._envs.clear()
        self.current = None
        super().close()

    def _active(self) -> SandboxedEnv:
        if self.current is None:
            raise gym.error.ResetNeeded("call reset() before step(), hint() or oracle()")
        return self.current

    def _load(self, record: EnvRecord) -> SandboxedEnv:
        env = self._envs.pop(record.env_id, None)
        if env is None:
            env = SandboxedEnv(record.source_path, config=self.config)
        self._envs[record.env_id] = env
        while len(self._envs) > self.cache_size:
            _, evicted = self._envs.popitem(last=False)
            evicted.close()
        return env
