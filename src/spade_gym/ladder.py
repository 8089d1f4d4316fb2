"""Difficulty ladders: one knob (a module-level ``UPPERCASE = <int>`` constant,
:func:`spade_gym.program.knobs`) of an environment program, the range it works over, and the
Agent's no-hint success measured at each value, stated in the graded seed environments'
``meta.json`` under ``"ladder"``::

    "ladder": {"knob": "N_ITEMS", "low": 1, "high": 9, "held_out": 4,
               "measured": {"policy": "...", "episodes": 16, "temperature": 0.5, "seeds_from": 0,
                            "success": {"1": 0.94, "2": 0.5, ...}}}

``spade envs measure --ladder`` fills ``measured`` (:func:`measure_ladders`).
"""

from __future__ import annotations

import ast
import json
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from spade_gym.agent import Episode, RolloutConfig, rollout
from spade_gym.contract import replace_spans
from spade_gym.files import replace_atomically
from spade_gym.policies.base import policy_name
from spade_gym.program import knob_nodes, knobs
from spade_gym.registry.gymnasium import bundled_registry_path

__all__ = [
    "LADDER_KEY",
    "Ladder",
    "knob_variant",
    "ladder_line",
    "library_ladder",
    "measure_ladders",
    "read_ladder",
    "write_ladder",
]

#: The ``meta.json`` key of a ladder.
LADDER_KEY = "ladder"


@dataclass(frozen=True)
class Ladder:
    """One environment's difficulty ladder (the module docstring's ``meta.json`` entry).

    Attributes:
        knob: the program's knob constant, e.g. ``"N_ITEMS"``.
        low, high: the range of values the program is correct for (a larger value breaks it).
        held_out: the level of the held-out evaluation's *unseen difficulty* part, harder than the
            seed pool's, in ``[low, high]``.
        measured: ``{"policy", "episodes", "temperature", "seeds_from", "success": {value: rate}}``
            from :func:`measure_ladders`, or ``{}`` before any measurement.

    ValueError for a range that is empty or does not hold ``held_out``.
    """

    knob: str
    low: int
    high: int
    held_out: int
    measured: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not (isinstance(self.knob, str) and self.knob.isupper() and self.knob.isidentifier()):
            raise ValueError(f"Ladder.knob = {self.knob!r}; expected an UPPERCASE constant name such as 'N_ITEMS'")
        for name in ("low", "high", "held_out"):
            value = getattr(self, name)
            if type(value) is not int:
                raise ValueError(f"Ladder.{name} = {value!r}; expected an int")
        if not self.low <= self.held_out <= self.high:
            raise ValueError(
                f"Ladder {self.knob}: expected low <= held_out <= high, got {self.low}, {self.held_out}, {self.high}"
            )

    @property
    def values(self) -> list[int]:
        """Every knob value of the range, easiest first."""
        return list(range(self.low, self.high + 1))

    def success(self) -> dict[int, float]:
        """The measured no-hint success rate per knob value (``{}`` before a measurement)."""
        return {int(k): float(v) for k, v in (self.measured.get("success") or {}).items()}

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Any) -> Ladder:
        """ValueError for data that is not a ladder."""
        if not isinstance(data, dict):
            raise ValueError(f"a ladder is a JSON object, got {type(data).__name__}")
        known = {"knob", "low", "high", "held_out", "measured"}
        if not {"knob", "low", "high", "held_out"} <= set(data) <= known:
            raise ValueError(f"a ladder has the keys {sorted(known)} (measured optional), got {sorted(data)}")
        return cls(**data)


def read_ladder(env_dir: str | Path) -> Ladder | None:
    """The ladder in ``env_dir/meta.json``, or ``None`` when it states none; ValueError for one that
    is malformed (naming the file)."""
    meta = Path(env_dir) / "meta.json"
    data = json.loads(meta.read_text(encoding="utf-8"))
    if LADDER_KEY not in data:
        return None
    try:
        return Ladder.from_dict(data[LADDER_KEY])
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{meta}: {exc}") from None


def write_ladder(env_dir: str | Path, ladder: Ladder) -> None:
    """Set ``"ladder"`` in ``env_dir/meta.json``, atomically; the other keys are unchanged."""
    meta = Path(env_dir) / "meta.json"
    data = json.loads(meta.read_text(encoding="utf-8"))
    data[LADDER_KEY] = ladder.to_dict()
    replace_atomically(meta, json.dumps(data, ensure_ascii=False, allow_nan=False, indent=2) + "\n")


def knob_variant(source: str, knob: str, value: int) -> str:
    """``source`` with the module-level constant ``knob`` set to ``value`` (only that literal's text
    changes). ValueError when the program has no such knob."""
    tree = ast.parse(source)
    nodes = dict(knob_nodes(tree))
    if knob not in nodes:
        raise ValueError(f"the program has no knob {knob!r} (its knobs: {', '.join(knobs(source)) or 'none'})")
    node = nodes[knob]
    return replace_spans(source, [(node.lineno, node.col_offset, node.end_col_offset or 0, str(int(value)))])


def library_ladder(name: str) -> Ladder | None:
    """The ladder the bundled seed library states for the environment named ``name`` (a
    Designer's variant shares its parent's name), or ``None``."""
    for folder in sorted((bundled_registry_path() / "envs").glob(f"{name}-v*")):
        if (folder / "meta.json").is_file():
            ladder = read_ladder(folder)
            if ladder is not None:
                return ladder
    return None


def ladder_line(ladder: Ladder) -> str:
    """One line for the Designer's prompt and ``spade envs list``: ``"N_ITEMS 1..9 (no-hint success
    1: 0.94, 2: 0.50, ...)"``."""
    rates = ladder.success()
    measured = ", ".join(f"{k}: {v:.2f}" for k, v in sorted(rates.items()))
    return f"{ladder.knob} {ladder.low}..{ladder.high}" + (f" (no-hint success {measured})" if measured else "")


def measure_ladders(
    env_dirs: Sequence[Path],
    policy: Any,
    *,
    episodes: int,
    sampling: Any,
    seed: int = 0,
    max_turns: int | None = None,
    max_episodes: int = 64,
    progress: Callable[[int, int], None] | None = None,
) -> dict[Path, Ladder]:
    """Play ``episodes`` no-hint episodes (seeds ``seed ..``) at every knob value of each folder's
    ladder in one batched rollout, and write the success rates into each ``meta.json``.

    Returns the updated ladders by folder (folders without a ladder are skipped). ValueError for
    ``episodes < 1`` or a ladder whose knob the program lacks.
    """
    if episodes < 1:
        raise ValueError(f"episodes must be >= 1, got {episodes}")
    plan: list[tuple[Path, Ladder, int]] = []
    batch: list[Episode] = []
    for env_dir in env_dirs:
        ladder = read_ladder(env_dir)
        if ladder is None:
            continue
        source = (Path(env_dir) / "env.py").read_text(encoding="utf-8")
        for value in ladder.values:
            program = knob_variant(source, ladder.knob, value)
            plan.append((Path(env_dir), ladder, value))
            batch += [Episode(program, seed + i) for i in range(episodes)]
    config = RolloutConfig(sampling=sampling, max_turns=max_turns, max_episodes=max_episodes)
    trajectories, _ = rollout(batch, policy, config, progress=progress)
    rates: dict[Path, dict[str, float]] = {}
    for n, (env_dir, _ladder, value) in enumerate(plan):
        played = trajectories[n * episodes : (n + 1) * episodes]
        rates.setdefault(env_dir, {})[str(value)] = sum(t.success for t in played) / episodes
    out: dict[Path, Ladder] = {}
    for env_dir, success in rates.items():
        ladder = next(lad for d, lad, _ in plan if d == env_dir)
        measured = {
            "policy": policy_name(policy),
            "episodes": episodes,
            "temperature": sampling.temperature,
            "seeds_from": seed,
            "success": success,
        }
        out[env_dir] = replace(ladder, measured=measured)
        write_ladder(env_dir, out[env_dir])
    return out
