"""Vector environments over sandboxed programs: many workers stepped at once, in one process.

Each sandboxed environment already runs in its own worker process, so a vector environment needs
no extra Python processes to be parallel: :class:`SandboxVectorEnv` sends every sub-environment's
step to its worker first and collects the answers afterwards. It is Gymnasium's
:class:`~gymnasium.vector.SyncVectorEnv` in every other respect (spaces, autoreset modes, info
batching), and it is the vector entry point of every ``spade/`` id, so
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

    Args:
        env_fns: functions that create the sub-environments (each a
            :class:`~spade_gym.env.SandboxedEnv` or a wrapper around one, or a
            :class:`~spade_gym.generated.GeneratedEnv`).
        **kwargs: passed to :class:`~gymnasium.vector.SyncVectorEnv` (``copy``, ``autoreset_mode``, ...).

    Observations are tuples of ``str``; rewards, terminations and truncations numpy arrays, as in
    Gymnasium. Sub-environments without ``send_step`` are stepped one after another.
    """

    def step(self, actions: Any) -> Any:
        """Send every sub-environment's action to its worker, then batch the results (see
        :meth:`gymnasium.vector.SyncVectorEnv.step`)."""
        for i, (action, env) in enumerate(zip(iterate(self.action_space, actions), self.envs, strict=True)):
            resetting = self.autoreset_mode == AutoresetMode.NEXT_STEP and self._autoreset_envs[i]
            send = getattr(env.unwrapped, "send_step", None)
            if not resetting and send is not None:
                send(action)
        return super().step(actions)


def make_vector_env(num_envs: int = 1, **kwargs: Any) -> SandboxVectorEnv:
    """Vector entry point of the ``spade/<Name>-v<k>`` ids: ``num_envs`` :class:`SandboxedEnv`.

    Args:
        num_envs: number of sub-environments (worker processes).
        **kwargs: keyword arguments of :class:`~spade_gym.env.SandboxedEnv` (``program``, ``config``, ...).
    """
    from spade_gym.env import SandboxedEnv

    kwargs.pop("max_episode_steps", None)  # the program's max_turns already bounds episodes
    return SandboxVectorEnv([partial(SandboxedEnv, **kwargs) for _ in range(num_envs)])


def make_generated_vector_env(num_envs: int = 1, **kwargs: Any) -> SandboxVectorEnv:
    """Vector entry point of ``spade/Generated-v0``: ``num_envs`` :class:`GeneratedEnv`.

    Args:
        num_envs: number of sub-environments.
        **kwargs: keyword arguments of :class:`~spade_gym.generated.GeneratedEnv`.
    """
    from spade_gym.generated import GeneratedEnv

    kwargs.pop("max_episode_steps", None)
    return SandboxVectorEnv([partial(GeneratedEnv, **kwargs) for _ in range(num_envs)])
