"""What a self-play run tells its user: the summary line of each iteration, the "what moved" lines
at the end (first and last value of every figure that shows a signal), what the Designer produced
and earned, and why an iteration took no step."""

from __future__ import annotations

import math
import statistics
from collections import Counter
from typing import Any

from spade_gym.trainer.grpo import UpdateStats

__all__ = ["MOVED_KEYS", "designer_summary", "summary_line", "training_state", "what_moved"]


def training_state(update: UpdateStats | None) -> str:
    """What this iteration's update did, for the stall warning: which roles were trained on."""
    trained = {} if update is None or not update.optimizer_steps else update.trained_samples
    agent, designer = trained.get("agent", 0), trained.get("designer", 0)
    if agent and designer:
        return f"both roles still train ({agent} Agent and {designer} Designer samples this iteration)"
    if agent:
        return f"the Agent still trains on replayed environments ({agent} samples this iteration)"
    if designer:
        return f"only the Designer trained this iteration ({designer} samples); the Agent's returns were equal in every group"
    return "no optimizer step was taken this iteration (every group's returns were equal)"


def summary_line(i: int, m: dict[str, Any]) -> str:
    def missing(key: str) -> bool:
        value = m.get(key)
        return value is None or (isinstance(value, float) and math.isnan(value))

    def num(key: str, fmt: str = ".2f") -> str:
        return "-" if missing(key) else format(m[key], fmt)

    no_step = "" if m.get("train/optimizer_steps") else " (no optimizer step: every group's returns were equal)"
    if missing("regret/mean"):
        regret = "- (none accepted)" if m.get("designer/designs") else "-"
    else:  # the two returns it comes from: a regret of 0 can hide a negative gap
        outcomes = m.get("designer/outcomes") or {}
        reach = ", out of reach" if isinstance(outcomes, dict) and outcomes.get("out_of_reach") else ""
        regret = f"{num('regret/mean')} (hint {num('agent/return_hint')}, no hint {num('agent/return_nohint')}{reach})"
    return (
        f"iteration {i}: designs {num('designer/designs', 'd')} accepted {num('designer/accepted', 'd')} "
        f"reward {num('designer/reward_mean')} regret {regret} | agent replay return "
        f"{num('agent/return_replay')} | steps: agent {num('steps/agent', 'd')}, designer "
        f"{num('steps/designer', 'd')} | loss {num('train/loss', '.4f')}{no_step} | registry "
        f"{num('registry/size', 'd')} | {num('time/total', '.0f')} s ({_phase_times(m)})"
    )


#: The phases of an iteration as the summary line names them: (metrics key, label).
_PHASES = (
    ("time/design", "design"),
    ("time/validate", "gate"),
    ("time/regret", "regret"),
    ("time/designer_update", "Designer update"),
    ("time/rollout", "Agent rollouts"),
    ("time/update", "Agent updates"),
    ("time/eval", "held-out eval"),
)


def _phase_times(m: dict[str, Any]) -> str:
    """``"design 80, gate 12, ..."``: seconds per phase that took any."""
    return ", ".join(f"{label} {m[k]:.0f}" for k, label in _PHASES if isinstance(m.get(k), int | float) and m[k] >= 0.5)


#: The figures of :func:`what_moved`: (metrics key, label).
MOVED_KEYS: tuple[tuple[str, str], ...] = (
    ("designer/valid_rate", "Designer valid rate (valid programs, duplicates included)"),
    ("designer/accepted", "Designer accepted designs"),
    ("designer/reward_mean", "Designer mean reward"),
    ("regret/mean", "regret of accepted designs"),
    ("agent/return_hint", "Agent return with hint (regret episodes)"),
    ("agent/return_nohint", "Agent return without hint (regret episodes)"),
    ("agent/return_replay", "Agent return on replayed environments"),
    ("agent/format_compliance", "Agent format compliance"),
    ("train/designer/trained_samples", "Designer samples with nonzero advantage"),
    ("train/agent/trained_samples", "Agent samples with nonzero advantage"),
    ("train/optimizer_steps", "optimizer steps"),
    ("train/loss", "loss"),
)


def designer_summary(metrics: list[dict[str, Any]]) -> str:
    """What the Designer produced and earned over a run's ``metrics.jsonl`` rows, in one line."""
    designs = sum(int(m.get("designer/designs") or 0) for m in metrics)
    if not designs:
        return "Designer: off (no design phase)"
    accepted = sum(int(m.get("designer/accepted") or 0) for m in metrics)
    rewards = [m["designer/reward_mean"] * m["designer/designs"] for m in metrics if m.get("designer/designs")]
    outcomes: Counter[str] = Counter()
    for m in metrics:
        outcomes.update(m.get("designer/outcomes") or {})
    return (
        f"Designer: {designs} designs, {accepted} accepted, mean reward {sum(rewards) / designs:+.3f} "
        f"({', '.join(f'{k} {v}' for k, v in outcomes.most_common())}); Agent steps "
        f"{metrics[-1].get('steps/agent_total', '-')}, Designer steps {metrics[-1].get('steps/designer_total', '-')}"
    )


def what_moved(metrics: list[dict[str, Any]]) -> list[str]:
    """One line per figure of :data:`MOVED_KEYS` over ``metrics.jsonl`` rows: first -> last value
    and the run's total or mean, e.g. ``"Designer mean reward: 0.25 -> 0.50 (mean 0.38)"``; a
    figure never logged reads ``"-"``, with why where it is known."""
    if not metrics:
        return ["no iteration finished"]

    def value(m: dict[str, Any], key: str) -> float | None:
        v = m.get(key)
        return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None

    def fmt(v: float | None) -> str:
        return "-" if v is None else (f"{v:.0f}" if float(v).is_integer() else f"{v:.3f}")

    lines = []
    for key, label in MOVED_KEYS:
        counted = key.endswith(("trained_samples", "optimizer_steps", "accepted"))
        rows = [{key: 0, **m} for m in metrics] if counted else metrics  # a count not logged (no update) is 0
        values = [v for v in (value(m, key) for m in rows) if v is not None]
        first, last = value(rows[0], key), value(rows[-1], key)
        whole = f"total {fmt(sum(values))}" if counted else f"mean {fmt(statistics.fmean(values))}" if values else ""
        line = f"{label}: {fmt(first)} -> {fmt(last)}" + (f" ({whole})" if values else "")
        needs_accepted = key == "regret/mean" or (key.startswith("agent/return_") and "replay" not in key)
        if needs_accepted and not values:
            line += " (no accepted design: no regret episodes)"
        elif needs_accepted and (first is None or last is None):
            line += " (-: no accepted design in that iteration)"
        if key == "train/loss" and not values:
            line += " (no optimizer step: every group's rewards were equal, so every advantage was 0)"
        lines.append(line)
    return lines
