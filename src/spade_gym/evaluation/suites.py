"""Suites by name (:data:`SUITE_FORMS`): what ``spade eval --suite NAME`` accepts. ``reasoning-gym``
is a :class:`~spade_gym.evaluation.environments.ReasoningGymSuite`; ``tool-use``, ``games`` and
``envs:`` (named environments of any setting) are :class:`~spade_gym.evaluation.environments.ProgramSuite`;
``math:``, ``mc:`` and ``code:`` are the suites of :mod:`spade_gym.evaluation.files`, ``bfcl:`` a
:class:`~spade_gym.evaluation.bfcl.BFCLSuite`.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from spade_gym.evaluation.base import DEFAULT_SAMPLING, Suite
from spade_gym.evaluation.bfcl import BFCLSuite
from spade_gym.evaluation.environments import ProgramSuite, ReasoningGymSuite
from spade_gym.evaluation.files import CodeFileSuite, MathFileSuite, MultipleChoiceFileSuite
from spade_gym.policies.base import SamplingParams

__all__ = ["SUITE_FORMS", "SuiteOptions", "load_suite"]

#: Every accepted form of a suite name, for messages and ``--help``.
SUITE_FORMS: tuple[str, ...] = (
    "reasoning-gym[:task,...]",
    "tool-use",
    "games",
    "envs:Name,...",
    "math:FILE",
    "mc:FILE",
    "code:FILE",
    "bfcl:FILE",
)
_FILE_KINDS = ("math", "mc", "code", "bfcl")


@dataclass(frozen=True)
class SuiteOptions:
    """Settings shared by every suite ``load_suite`` builds.

    Attributes:
        sampling: the policy's sampling.
        items: items per task (reasoning-gym) or episodes per environment (``None``: the suite's default).
        limit: first N items of a file suite (``None``: all).
        seed: first seed of episode suites.
        max_turns: cap on turns per episode (``None``: played to the end).
        registry: the registry of tool-use and game environments (``None``: the seed library).
    """

    sampling: SamplingParams = DEFAULT_SAMPLING
    items: int | None = None
    limit: int | None = None
    seed: int = 0
    max_turns: int | None = None
    registry: str | None = None


def load_suite(spec: str, options: SuiteOptions | None = None) -> Suite:
    """The :class:`~spade_gym.evaluation.base.Suite` that ``spec`` names (a form of the module
    docstring), built with ``options``.

    Raises:
        ValueError: an unknown suite name (the message lists the forms and a close match), an
            unknown reasoning-gym task, a missing file.
        ImportError: the suite's optional dependency is missing (the message names the extra).
    """
    o = options or SuiteOptions()
    for name in ("items", "limit", "max_turns"):
        value = getattr(o, name)
        if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
            raise ValueError(f"SuiteOptions.{name} must be None or an int >= 1, got {value!r}")
    kind, sep, rest = spec.partition(":")
    if kind == "reasoning-gym":
        tasks = [t.strip() for t in rest.split(",") if t.strip()] if sep else None
        if sep and not tasks:
            raise ValueError(f"suite {spec!r}: name at least one task after 'reasoning-gym:'")
        return ReasoningGymSuite(tasks, items_per_task=o.items or 4, seed=o.seed, sampling=o.sampling)
    if kind in ("tool-use", "games") and not sep:
        return ProgramSuite("tool_use" if kind == "tool-use" else "game", **_program_options(o))
    if kind == "envs":
        # names as the registry shows them (Name, Name-v0, spade/Name-v0) all mean the environment Name
        names = [re.sub(r"-v\d+$", "", n.strip().removeprefix("spade/")) for n in rest.split(",") if n.strip()]
        if not names:
            raise ValueError(f"suite {spec!r}: name at least one environment after 'envs:'")
        if len(set(names)) != len(names):
            raise ValueError(f"suite {spec!r}: an environment is named more than once")
        return ProgramSuite(None, envs=names, **_program_options(o))
    if kind in _FILE_KINDS and sep:
        path = Path(rest)
        if not rest or not path.is_file():
            what = "a folder" if rest and path.is_dir() else "no file"
            raise ValueError(f"suite {spec!r}: {what} at {rest!r}; expected '{kind}:FILE' with a JSON-lines file")
        if not path.read_bytes().strip():
            raise ValueError(f"suite {spec!r}: {path} is empty: no item to score")
        if kind == "bfcl":
            return BFCLSuite(path, sampling=o.sampling, limit=o.limit)
        suite_class = {"math": MathFileSuite, "mc": MultipleChoiceFileSuite, "code": CodeFileSuite}
        return suite_class[kind](path, sampling=o.sampling, limit=o.limit)
    close = difflib.get_close_matches(kind, ["reasoning-gym", "tool-use", "games", "envs", *_FILE_KINDS], n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    if kind in _FILE_KINDS:
        hint = f"; {kind!r} needs a file: '{kind}:FILE'"
    raise ValueError(f"unknown suite {spec!r}{hint} (suites: {', '.join(SUITE_FORMS)})")


def _program_options(o: SuiteOptions) -> dict[str, Any]:
    return {
        "registry": o.registry,
        "episodes_per_env": o.items or 2,
        "seed": o.seed,
        "sampling": o.sampling,
        "max_turns": o.max_turns,
    }
