"""Success by chance: how often an environment pays answers that were given to another instance.

An environment that pays at random reaches the largest learnability, ``4 p (1 - p)`` at ``p = 1/2``,
without teaching anything. :func:`swapped_success` replays each no-hint episode's actions on the
next episode's seed: an honest environment pays them about as often as guessing would, a random one
as often as the Agent's own. :func:`above_chance` is the success rate above that chance rate.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from spade_gym.program import SUCCESS_RETURN

__all__ = ["above_chance", "swapped_success"]


def swapped_success(program: Any, trajectories: Sequence[Any], *, max_turns: int | None = None) -> float:
    """The success rate of each trajectory's actions replayed on the next trajectory's seed
    (cyclically; a lone one on its seed plus one) in ``program`` (a program, path or source); 0.0
    for none. Raises SandboxError or ProgramError when the program cannot load."""
    from spade_gym.env import SandboxedEnv

    if not trajectories:
        return 0.0
    env = SandboxedEnv(program)
    wins = 0
    try:
        seeds = [t.seed for t in trajectories]
        for n, trajectory in enumerate(trajectories):
            seed = seeds[(n + 1) % len(seeds)] if len(seeds) > 1 else seeds[0] + 1
            env.reset(seed=seed)
            total, turns = 0.0, 0
            for turn in trajectory.turns:
                if max_turns is not None and turns >= max_turns:
                    break
                _, reward, terminated, truncated, _ = env.step(turn.action or "")
                total, turns = total + reward, turns + 1
                if terminated or truncated:
                    break
            wins += total >= SUCCESS_RETURN
    finally:
        env.close()
    return wins / len(trajectories)


def above_chance(p: float, q: float) -> float:
    """The success rate ``p`` above the chance rate ``q``: ``max(p - q, 0) / (1 - q)``, 0 when ``q >= 1``."""
    return 0.0 if q >= 1.0 else max(p - q, 0.0) / (1.0 - q)
