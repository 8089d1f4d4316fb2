"""Bar plots of held-out results: one group of bars per suite, one bar per policy, 95% intervals."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from spade_gym.errors import install_hint
from spade_gym.evaluation.base import SuiteResult

__all__ = ["interval_bars", "plot_comparison", "pyplot", "save_figure"]


def plot_comparison(results: Mapping[str, Sequence[SuiteResult]], path: str | Path, *, title: str = "") -> Path:
    """Draw every policy's score per suite with its 95% interval as a PNG; returns ``path``.

    ``results`` maps a policy label to its suite results. Raises ImportError without matplotlib (the
    ``train`` extra), ValueError without results.
    """
    plt = pyplot()
    suites = list(dict.fromkeys(r.suite for rs in results.values() for r in rs))
    if not suites:
        raise ValueError("no results to plot")
    width = 0.8 / max(len(results), 1)
    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * len(suites) * max(len(results), 1) / 2 + 2), 3.6))
    for k, (label, rs) in enumerate(results.items()):
        by_suite = {r.suite: r for r in rs}
        present = [(i, by_suite[suite]) for i, suite in enumerate(suites) if suite in by_suite]
        xs = [i + (k - (len(results) - 1) / 2) * width for i, _ in present]
        interval_bars(ax, xs, [r for _, r in present], width, capsize=3, label=label)
    ax.set_xticks(range(len(suites)), suites, rotation=15, ha="right")
    ax.set_ylabel("score (95% CI)")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend(frameon=False)
    return save_figure(plt, fig, path, 120)


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend; ImportError naming the extra when it is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError(f"plotting needs matplotlib: {install_hint('train')}") from None
    return plt


def interval_bars(ax: Any, xs: Sequence[float], results: Sequence[SuiteResult], width: float, **kwargs: Any) -> None:
    """Bars of the results' scores at ``xs`` with their 95% intervals."""
    spans = [(r.score, *r.interval()) for r in results]
    errors = [[y - low for y, low, _ in spans], [high - y for y, _, high in spans]]
    ax.bar(xs, [y for y, _, _ in spans], width, yerr=errors, **kwargs)


def save_figure(plt: Any, fig: Any, path: str | Path, dpi: int) -> Path:
    """Lay out ``fig``, write it to ``path`` (parents made) at ``dpi`` and close it; returns ``path``."""
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi)
    plt.close(fig)
    return path
