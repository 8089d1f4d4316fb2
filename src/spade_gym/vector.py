"""Vector environments over sandboxed programs: many workers stepped at once, in one process.

:class:`SandboxVectorEnv` sends every sub-environment's step to its worker process first and
collects the answers afterwards; it is the vector entry point of every ``spade/`` id, so
``gymnasium.make_vec("spade/<Name>-v<k>", num_envs=64)`` steps 64 workers concurrently.
"""

from __future__ import annotations

from functools import partial
from typing import Any

from gymnasium.vector import AutoresetMode, SyncVectorEnv
from gymnasium.vector.utils import iterate

__all__ = ["SandboxVectorEnv", "make_vector_env", "make_generated_vector_env"]


class SandboxVectorEnv(SyncVectorEnv):
    """A :class:`~gymnasium.vector.SyncVectorEnv` whose sandboxed sub-environments step concurrently.

    ``env_fns`` make SandboxedEnv or GeneratedEnv instances (or wrappers); ``kwargs`` go to
    SyncVectorEnv. Sub-environments without ``send_step`` are stepped one after another.
    """

    def step(self, actions: Any) -> Any:
        """Send every sub-environment's action to its worker, then batch the results as SyncVectorEnv does."""
        for i, (action, env) in enumerate(zip(iterate(self.action_space, actions), self.envs, strict=True)):
            resetting = self.autoreset_mode == AutoresetMode.NEXT_STEP and self._autoreset_envs[i]
            send = getattr(env.unwrapped, "send_step", None)
            if not resetting and send is not None:
                send(action)
        return super().step(actions)


def make_vector_env(num_envs: int = 1, **kwargs: Any) -> SandboxVectorEnv:
    """Vector entry point of the ``spade/<Name>-v<k>`` ids: ``num_envs`` SandboxedEnv(``**kwargs``)."""
    from spade_gym.env import SandboxedEnv

    kwargs.pop("max_episode_steps", None)  # the program's max_turns already bounds episodes
    return SandboxVectorEnv([partial(SandboxedEnv, **kwargs) for _ in range(num_envs)])


def make_generated_vector_env(num_envs: int = 1, **kwargs: Any) -> SandboxVectorEnv:
    """Vector entry point of ``spade/Generated-v0``: ``num_envs`` GeneratedEnv(``**kwargs``)."""
    from spade_gym.generated import GeneratedEnv

    kwargs.pop("max_episode_steps", None)
    return SandboxVectorEnv([partial(GeneratedEnv, **kwargs) for _ in range(num_envs)])
