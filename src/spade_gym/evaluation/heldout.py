"""Held-out evaluation of a self-play run's Agent in three parts (:data:`PARTS`): unseen seeds
(from :data:`~spade_gym.evaluation.environments.HELD_OUT_SEED_BASE` up) of its training
environments, their ladders' ``held_out`` difficulty levels (:mod:`spade_gym.ladder`), and whole
unseen environments (``eval.envs``). Each part is played at the Agent's temperature and, with
``eval.greedy``, greedily; it is sized for a 95% interval of half-width ``h`` at worst (``p = 1/2``):
``n = ceil(z^2 / (4 h^2))`` episodes, spread evenly over its environments.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

from annotated_types import Ge, Gt, Le

from spade_gym.agent import Episode, RolloutConfig, rollout
from spade_gym.evaluation.base import Z95, Comparison, ItemRecord, SuiteResult, compare_results, load_results
from spade_gym.evaluation.environments import HELD_OUT_SEED_BASE, episode_record
from spade_gym.ladder import knob_variant, library_ladder
from spade_gym.options import option, option_factory
from spade_gym.policies.base import policy_name
from spade_gym.program import knobs
from spade_gym.registry.gymnasium import bundled_registry_path
from spade_gym.registry.store import Registry

__all__ = [
    "PARTS",
    "EvalSection",
    "HeldOut",
    "HeldOutItem",
    "evaluate_heldout",
    "gain_line",
    "gain_metrics",
    "heldout_items",
    "heldout_report",
    "ladders_of",
    "paired_gains",
    "part_size",
    "save_path",
    "seed_records",
    "seen_levels",
]

#: The three parts, in report order, and how each reads.
PARTS: dict[str, str] = {"seeds": "unseen seeds", "levels": "unseen difficulty levels", "envs": "unseen environments"}
Part = Literal["seeds", "levels", "envs"]


@dataclass
class EvalSection:
    """Held-out evaluation of the Agent before and after the run (spade_gym.evaluation.heldout):
    unseen seeds of the training environments, unseen difficulty levels, whole unseen environments."""

    enabled: bool = option(False, "evaluate the Agent on held-out episodes before iteration 0 and after the last")
    parts: list[Part] = option_factory(
        lambda: list(PARTS),
        "which parts: 'seeds' (unseen seeds of the training environments), 'levels' (each training "
        "environment's ladder held_out knob value), 'envs' (eval.envs)",
    )
    half_width: Annotated[float, Gt(0), Le(0.5)] = option(
        0.1,
        "95% interval half-width each part is sized for: ceil(1.96^2 / (4 half_width^2)) episodes (97 at 0.1), "
        "spread evenly over the part's environments",
    )
    envs: list[str] = option_factory(
        list,
        "the whole unseen environments of part 'envs': seed environments that run.held_out_envs holds out of "
        "training; []: every graded one of run.held_out_envs",
    )
    greedy: bool = option(True, "also play every held-out episode greedily (a second figure; doubles the time)")
    every: Annotated[int, Ge(0)] = option(
        0, "also evaluate after every N iterations (a curve over Agent steps); 0: before and after only"
    )
    seed: Annotated[int, Ge(0)] = option(0, "offset of the held-out episode seeds (from 2**40 up)")


def part_size(half_width: float, z: float = Z95) -> int:
    """Episodes a part needs for a 95% interval of ``half_width`` at worst (``p = 1/2``)."""
    return math.ceil(z * z / (4.0 * half_width * half_width))


@dataclass(frozen=True)
class HeldOutItem:
    """One held-out episode: its ``part``, the environment's ``label`` (``"Name"``, or
    ``"Name@KNOB=v"`` for a difficulty level), the program ``source`` and the reset ``seed``."""

    part: str
    label: str
    source: str = field(repr=False)
    seed: int

    @property
    def item_id(self) -> str:
        return f"{self.label}/{self.seed}"


def heldout_items(
    section: EvalSection, pool: Sequence[Any], unseen: Sequence[Any], ladders: dict[str, Any]
) -> dict[str, list[HeldOutItem]]:
    """The episodes of each enabled part (an empty part is left out).

    Args:
        pool: the training environments (:class:`~spade_gym.registry.records.EnvRecord`).
        unseen: the whole unseen environments (records of the seed library).
        ladders: :class:`~spade_gym.ladder.Ladder` by environment name, for part ``"levels"``;
            a ladder whose ``held_out`` is not above the pool program's knob value is skipped.
    """
    n = part_size(section.half_width)
    base = HELD_OUT_SEED_BASE + section.seed
    envs: dict[str, list[tuple[str, str]]] = {"seeds": [], "levels": [], "envs": []}
    for record in sorted(pool, key=lambda r: r.name):
        source = record.source_path.read_text(encoding="utf-8")
        envs["seeds"].append((record.name, source))
        ladder = ladders.get(record.name)
        if ladder is not None and knobs(source).get(ladder.knob, ladder.held_out) < ladder.held_out:
            label = f"{record.name}@{ladder.knob}={ladder.held_out}"
            envs["levels"].append((label, knob_variant(source, ladder.knob, ladder.held_out)))
    envs["envs"] = [(r.name, r.source_path.read_text(encoding="utf-8")) for r in sorted(unseen, key=lambda r: r.name)]
    out: dict[str, list[HeldOutItem]] = {}
    for part in (p for p in PARTS if p in section.parts and envs[p]):
        each = math.ceil(n / len(envs[part]))
        out[part] = [HeldOutItem(part, label, source, base + i) for label, source in envs[part] for i in range(each)]
    return out


@dataclass
class HeldOut:
    """One evaluation: per part, the ``sampled`` result (at the Agent's temperature) and the
    ``greedy`` one (empty without ``eval.greedy``), and the wall ``seconds``."""

    sampled: dict[str, SuiteResult]
    greedy: dict[str, SuiteResult] = field(default_factory=dict)
    seconds: float = 0.0

    def results(self) -> list[SuiteResult]:
        return [*self.sampled.values(), *self.greedy.values()]

    def metrics(self, prefix: str = "eval") -> dict[str, float]:
        """``{"eval/seeds/success": .., "eval/seeds/low": .., "eval/seeds/high": .., "eval/seeds/greedy": ..}``."""
        out: dict[str, float] = {}
        for part, result in self.sampled.items():
            low, high = result.interval()
            out.update({f"{prefix}/{part}/success": result.score, f"{prefix}/{part}/low": low})
            out[f"{prefix}/{part}/high"] = high
            out[f"{prefix}/{part}/n"] = result.n
            if part in self.greedy:
                out[f"{prefix}/{part}/greedy"] = self.greedy[part].score
        out[f"{prefix}/seconds"] = self.seconds
        return out

    @classmethod
    def from_results(cls, results: Sequence[SuiteResult], seconds: float = 0.0) -> HeldOut:
        """Rebuild from :meth:`results` (as saved by ``save_results``)."""
        parts: dict[bool, dict[str, SuiteResult]] = {False: {}, True: {}}
        for r in results:
            greedy = r.suite.endswith("-greedy")
            parts[greedy][r.suite.removeprefix("heldout-").removesuffix("-greedy")] = r
        return cls(parts[False], parts[True], seconds)


def evaluate_heldout(
    policy: Any,
    items: dict[str, list[HeldOutItem]],
    sampling: Any,
    *,
    greedy: bool = True,
    max_turns: int | None = None,
    max_episodes: int = 64,
    progress: Callable[[int, int], None] | None = None,
) -> HeldOut:
    """Play every item once at ``sampling`` (and once greedily with ``greedy``), all parts in one
    batched rollout each; an item scores 1 for a success (return >= 0.99), else 0 (its return is in
    ``metadata["return"]``, a failure's reason in ``error``)."""
    began = time.perf_counter()
    flat = [item for part in items.values() for item in part]
    settings = [("", sampling)] + ([("-greedy", replace(sampling, temperature=0.0, top_p=1.0))] if greedy else [])
    out: dict[str, dict[str, SuiteResult]] = {}
    for suffix, params in settings:
        config = RolloutConfig(sampling=params, max_turns=max_turns, max_episodes=max_episodes)
        trajectories, _ = rollout([Episode(i.source, i.seed) for i in flat], policy, config, progress=progress)
        by_part: dict[str, list[ItemRecord]] = {}
        for item, trajectory in zip(flat, trajectories, strict=True):
            record = episode_record(item.item_id, trajectory, {"env": item.label, "seed": item.seed})
            record.score = float(record.error is None and trajectory.success)  # success, not the return
            by_part.setdefault(item.part, []).append(record)
        config_json = json.loads(json.dumps({"sampling": asdict(params), "max_turns": max_turns}))  # as saved
        out[suffix] = {
            part: SuiteResult(f"heldout-{part}{suffix}", policy_name(policy), records, 0.0, config_json)
            for part, records in by_part.items()
        }
    return HeldOut(out[""], out.get("-greedy", {}), time.perf_counter() - began)


def gain_line(before: SuiteResult, after: SuiteResult, what: str = "unseen seeds") -> str:
    """``held-out success (unseen seeds): B [lo, hi] -> A [lo, hi], gain G [lo, hi]`` (95%
    intervals; the gain is paired by item)."""
    gain = compare_results(after, before).text()
    return f"held-out success ({what}): {before.score_text()} -> {after.score_text()}, gain {gain}"


def seen_levels(items: Sequence[HeldOutItem], records: Sequence[Any]) -> list[str]:
    """The labels of difficulty-level items (``"Name@KNOB=v"``) that a registered environment of the
    same name has at that knob value (a Designer's variant reached it): no longer unseen."""
    out = []
    for label in sorted({i.label for i in items}):
        name, _, knob = label.partition("@")
        key, _, value = knob.partition("=")
        for record in records:
            if record.name == name and knobs(record.source_path.read_text(encoding="utf-8")).get(key) == int(value):
                out.append(label)
                break
    return out


def paired_gains(after: HeldOut, before: HeldOut) -> dict[str, Comparison]:
    """``after - before`` per part both have (sampled), paired by item."""
    return {p: compare_results(r, before.sampled[p]) for p, r in after.sampled.items() if p in before.sampled}


def gain_metrics(after: HeldOut, before: HeldOut, prefix: str = "eval") -> dict[str, float]:
    """Per part, the paired gain over ``before`` and its 95% interval: ``eval/seeds/gain``, ``.._low``, ``.._high``."""
    out: dict[str, float] = {}
    for part, gain in paired_gains(after, before).items():
        out[f"{prefix}/{part}/gain"] = gain.difference
        out[f"{prefix}/{part}/gain_low"], out[f"{prefix}/{part}/gain_high"] = gain.low, gain.high
    return out


def graded(names: Sequence[str]) -> list[str]:
    """The names among ``names`` of seed environments tagged ``graded`` (small enough for a CPU model)."""
    return [r.name for r in seed_records(names) if "graded" in r.tags]


def ladders_of(names: Sequence[str]) -> dict[str, Any]:
    """The bundled seed library's ladders of ``names`` (by name; environments without one left out)."""
    return {name: ladder for name in names if (ladder := library_ladder(name)) is not None}


def seed_records(names: Sequence[str]) -> list[Any]:
    """The bundled seed library's records named ``names``."""
    with Registry(bundled_registry_path()) as library:
        return [r for r in library.records() if r.name in set(names)]


def save_path(run_dir: str | Path, tag: str) -> Path:
    """Where a run keeps evaluation ``tag`` (``"before"``, ``"after"``, ``"iteration-3"``)."""
    return Path(run_dir) / "eval" / f"{tag}.json"


def heldout_report(run_dir: str | Path) -> list[str]:
    """The summary lines of a run's held-out evaluation (``[]`` when it has none): per part, sampled
    before -> after with 95% intervals and the paired gain (the ``"seeds"`` line is exactly
    :func:`gain_line`'s form, for scripts), then the greedy figures."""
    paths = save_path(run_dir, "before"), save_path(run_dir, "after")
    if not all(p.is_file() for p in paths):
        return []
    before, after = (HeldOut.from_results(load_results(p)) for p in paths)
    lines = []
    seen = json.loads(paths[1].read_text(encoding="utf-8")).get("seen_levels") or []
    for part, what in PARTS.items():
        if part in before.sampled and part in after.sampled:
            b, a = before.sampled[part], after.sampled[part]
            envs = sorted({str(r.metadata.get("env")) for r in b.items})
            lines.append(gain_line(b, a, what))
            lines.append(f"  ({b.n} episodes at the Agent's temperature on {', '.join(envs)})")
            if part == "levels" and seen:
                lines.append(f"  (the Designer registered variants at {', '.join(seen)}: not unseen by the end)")
    for part, what in PARTS.items():
        if part in before.greedy and part in after.greedy:
            gain = compare_results(after.greedy[part], before.greedy[part]).text()
            lines.append(
                f"  greedy, {what}: {before.greedy[part].score:.3f} -> {after.greedy[part].score:.3f}, gain {gain}"
            )
    return lines
