"""The spade_gym verifiers taskset under the top-level name verifiers loads it by.

``vf-eval spade_gym_verifiers ...`` and prime-rl's environment workers import a taskset by a
top-level module name in fresh processes; this module exports the classes of
:mod:`spade_gym.integrations.verifiers` (the ``verifiers`` extra) under that name.
"""

from spade_gym.integrations.verifiers import load_environment, verifiers_classes

globals().update(verifiers_classes())
__all__ = ["SpadeTaskset", "SpadeEnv", "SpadeChatHarness", "load_environment"]  # noqa: F822
