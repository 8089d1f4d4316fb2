"""``spade plot RUN_DIR``: the curves of a self-play run as PNG files in ``RUN_DIR/plots/``.

The plots read the :data:`METRICS` keys of ``metrics.jsonl``, flat (``"regret/mean"``) or nested
(``{"regret": {"mean": ...}}``). A missing key leaves a gap and a plot without any of its keys is
not drawn. matplotlib's object API draws on the Agg canvas: no pyplot, no global backend switch.
"""

from __future__ import annotations

import io
import math
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spade_gym.files import replace_atomically
from spade_gym.trainer.run import METRICS_FILE, PLOTS_DIR, RunDir, RunDirError, flatten_record, read_metrics

__all__ = ["METRICS", "PLOTS", "flatten_record", "plot_run"]

#: The metrics the self-play loop logs per iteration, by key, and what each means.
METRICS: dict[str, str] = {
    "designer/reward_mean": "mean Designer reward over the iteration's designs",
    "designer/reward_std": "standard deviation of the Designer reward",
    "designer/designs": "designs generated",
    "designer/accepted": "designs that passed the validation gate and were registered",
    "designer/acceptance_rate": "accepted / designs, in [0, 1]",
    "designer/rejections": "mapping: rejected designs by the first failed check (static, load, contract, "
    "determinism, termination, feasibility, non_triviality, variety, novelty, no_code)",
    "designer/outcomes": "mapping: designs by reward outcome (invalid, duplicate, trivial, out_of_reach, regret)",
    "regret/mean": "mean regret of the accepted environments",
    "regret/max": "largest regret of the iteration",
    "agent/return_hint": "mean Agent return with the hint (regret episodes)",
    "agent/return_nohint": "mean Agent return without the hint (regret episodes)",
    "agent/return_replay": "mean Agent return on replayed environments",
    "agent/success_rate": "share of Agent training episodes with return >= 0.99",
    "registry/size": "environments in the run's registry after the iteration",
    "registry/added": "environments registered in the iteration",
    "novelty/mean": "mean novelty of the accepted environments (1 - the largest similarity to a registered one)",
    "tokens/designer": "tokens the Designer generated",
    "tokens/agent": "tokens the Agent generated",
    "tokens/train": "tokens in the iteration's update batch",
    "time/<phase>": "seconds per phase: design, validate, regret, rollout, update, checkpoint, other",
    "train/<name>": "update statistics: loss, grad_norm, kl, clip_fraction, learning_rate, ...",
}

#: The files :func:`plot_run` can write, and what each shows.
PLOTS: dict[str, str] = {
    "designer_reward.png": "Designer reward (mean and +- one standard deviation)",
    "acceptance.png": "acceptance rate, and rejected designs stacked by reason",
    "regret.png": "regret (mean and max)",
    "agent_return.png": "Agent return with and without the hint (and on replayed environments)",
    "registry.png": "registry size and the novelty of accepted environments",
    "time.png": "seconds per phase, stacked",
    "tokens.png": "generated tokens by role",
    "train.png": "update statistics",
}


def _number(value: Any) -> float:
    """A finite float, or NaN (a gap in the curve)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return math.nan
    value = float(value)
    return value if math.isfinite(value) else math.nan


class _Series:
    """The records as columns: iterations, and one value (or NaN) per iteration for any key."""

    def __init__(self, records: Sequence[Mapping[str, Any]]) -> None:
        self.rows = [flatten_record(r) for r in records]
        self.x = [int(r["iteration"]) for r in records]

    def has(self, key: str) -> bool:
        return any(not math.isnan(_number(row.get(key))) for row in self.rows)

    def get(self, key: str) -> list[float]:
        return [_number(row.get(key)) for row in self.rows]

    def keys(self, prefix: str) -> list[str]:
        """Keys under ``prefix/`` that hold a number somewhere, in first-seen order."""
        seen: dict[str, None] = {}
        for row in self.rows:
            for key in row:
                if key.startswith(prefix + "/") and key not in seen and not math.isnan(_number(row[key])):
                    seen[key] = None
        return list(seen)


def _figure(rows: int = 1, height: float = 3.2) -> tuple[Any, list[Any]]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    fig = Figure(figsize=(7.0, height * rows), layout="constrained")
    FigureCanvasAgg(fig)
    axes = [fig.add_subplot(rows, 1, i + 1) for i in range(rows)]
    for ax in axes:
        ax.grid(True, alpha=0.3)
        ax.set_xlabel("iteration")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))
    return fig, axes


def _line(ax: Any, s: _Series, key: str, label: str, **style: Any) -> bool:
    if not s.has(key):
        return False
    marker = "o" if len(s.x) <= 30 else None
    ax.plot(s.x, s.get(key), label=label, marker=marker, markersize=3, **style)
    return True


def _stacked_bars(ax: Any, s: _Series, keys: list[str], prefix: str) -> None:
    import numpy as np

    bottom = np.zeros(len(s.x))
    for key in keys:
        values = np.nan_to_num(np.array(s.get(key), dtype=float), nan=0.0)
        ax.bar(s.x, values, bottom=bottom, label=key[len(prefix) + 1 :], width=0.8)
        bottom += values


def _widen_iterations(ax: Any) -> None:
    """At least one iteration of width on the x axis: one point alone got ticks at +-0.04."""
    low, high = ax.get_xlim()
    if high - low < 1.0:
        middle = (low + high) / 2
        ax.set_xlim(middle - 0.5, middle + 0.5)


def _finish(fig: Any, axes: list[Any], title: str, path: Path) -> Path:
    """Title, legends, x axes at least one iteration wide; the PNG written atomically."""
    axes[0].set_title(title)
    for ax in axes:
        if ax.get_legend_handles_labels()[0]:
            ax.legend(fontsize="small", loc="upper left", bbox_to_anchor=(1.01, 1.0))  # beside, never over bars
    for ax in fig.axes:
        if ax.get_xlabel() == "iteration":
            _widen_iterations(ax)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=100)
    replace_atomically(path, buffer.getvalue())
    return path


def _designer_plots(s: _Series, out: Path) -> list[Path]:
    """The Designer's figures of :func:`plot_run` (reward, acceptance, regret) that ``s`` has data for."""
    written: list[Path] = []
    if s.has("designer/reward_mean"):
        fig, (ax,) = _figure()
        _line(ax, s, "designer/reward_mean", "mean")
        if s.has("designer/reward_std"):
            mean, std = s.get("designer/reward_mean"), s.get("designer/reward_std")
            ax.fill_between(
                s.x,
                [m - d for m, d in zip(mean, std, strict=True)],
                [m + d for m, d in zip(mean, std, strict=True)],
                alpha=0.2,
                label="+- std",
            )
        ax.set_ylabel("reward")
        written.append(_finish(fig, [ax], "Designer reward", out / "designer_reward.png"))

    reasons = s.keys("designer/rejections")
    if s.has("designer/acceptance_rate") or reasons:
        fig, axes = _figure(2 if reasons and s.has("designer/acceptance_rate") else 1)
        ax = axes[0]
        if s.has("designer/acceptance_rate"):
            _line(ax, s, "designer/acceptance_rate", "acceptance rate")
            ax.set_ylim(-0.02, 1.02)
            ax.set_ylabel("accepted / designs")
            ax = axes[-1]
        if reasons:
            _stacked_bars(ax, s, reasons, "designer/rejections")
            ax.set_ylabel("rejected designs")
            ax.set_title("rejections by first failed check")
        written.append(_finish(fig, axes, "Acceptance", out / "acceptance.png"))

    if s.has("regret/mean") or s.has("regret/max"):
        fig, (ax,) = _figure()
        _line(ax, s, "regret/mean", "mean")
        _line(ax, s, "regret/max", "max", linestyle="--")
        ax.set_ylabel("regret")
        written.append(_finish(fig, [ax], "Regret", out / "regret.png"))
    return written


def plot_run(run_dir: str | Path | RunDir) -> list[Path]:
    """Draw the curves of a run (:data:`PLOTS`, from its ``metrics.jsonl`` only) into
    ``run_dir/plots/``; returns the PNG files written, ``[]`` with a warning without metrics.
    RunDirError when ``run_dir`` is not a folder or its metrics cannot be read."""
    path = run_dir.path if isinstance(run_dir, RunDir) else Path(run_dir)
    if not path.is_dir():
        raise RunDirError(f"run folder {path} does not exist")
    records = read_metrics(path / METRICS_FILE)
    if not records:
        warnings.warn(f"{path / METRICS_FILE} holds no metrics yet: nothing to plot", RuntimeWarning, stacklevel=2)
        return []
    out = path / PLOTS_DIR
    out.mkdir(parents=True, exist_ok=True)
    s = _Series(records)
    written = _designer_plots(s, out)

    agent = [
        ("agent/return_hint", "with hint"),
        ("agent/return_nohint", "without hint"),
        ("agent/return_replay", "replayed envs"),
    ]
    if any(s.has(k) for k, _ in agent):
        fig, (ax,) = _figure()
        for key, label in agent:
            _line(ax, s, key, label)
        ax.set_ylim(-0.02, 1.02)
        ax.set_ylabel("mean return")
        written.append(_finish(fig, [ax], "Agent return", out / "agent_return.png"))

    if s.has("registry/size") or s.has("novelty/mean"):
        both = s.has("registry/size") and s.has("novelty/mean")
        fig, axes = _figure(2 if both else 1)
        if s.has("registry/size"):
            _line(axes[0], s, "registry/size", "environments")
            axes[0].set_ylabel("registry size")
        if s.has("novelty/mean"):
            _line(axes[-1], s, "novelty/mean", "novelty")
            axes[-1].set_ylabel("mean novelty")
        written.append(_finish(fig, axes, "Registry", out / "registry.png"))

    phases = [k for k in s.keys("time") if k != "time/total"]
    if phases:
        fig, (ax,) = _figure()
        _stacked_bars(ax, s, phases, "time")
        _line(ax, s, "time/total", "total (wall)", color="black")
        ax.set_ylabel("seconds")
        written.append(_finish(fig, [ax], "Time per phase", out / "time.png"))

    tokens = s.keys("tokens")
    if tokens:
        fig, (ax,) = _figure()
        for key in tokens:
            _line(ax, s, key, key[len("tokens/") :])
        ax.set_ylabel("tokens")
        written.append(_finish(fig, [ax], "Tokens", out / "tokens.png"))

    train = s.keys("train")[:6]
    if train:
        fig, axes = _figure(len(train), height=2.2)
        for ax, key in zip(axes, train, strict=True):
            _line(ax, s, key, key[len("train/") :])
            ax.set_ylabel(key[len("train/") :])
        written.append(_finish(fig, axes, "Update", out / "train.png"))
    return written
