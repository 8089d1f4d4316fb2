"""Ray scale-out, kept importable here: the executor is :mod:`spade_gym.ray_executor` and the
policy :mod:`spade_gym.policies.ray` (Ray is a backend of the core, not an adapter)."""

from spade_gym.policies.ray import RayPolicy
from spade_gym.ray_executor import RayEnv, RayExecutor, crash_report

__all__ = ["RayEnv", "RayExecutor", "RayPolicy", "crash_report"]
