"""The classes of :mod:`spade_gym.integrations.verifiers` under the top-level module name that
``vf-eval spade_gym_verifiers`` and prime-rl's workers import a taskset by."""

from spade_gym.integrations.verifiers import load_environment, verifiers_classes

globals().update(verifiers_classes())
__all__ = ["SpadeTaskset", "SpadeEnv", "SpadeChatHarness", "load_environment"]  # noqa: F822
