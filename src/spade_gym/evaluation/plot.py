"""Bar plots of held-out results: one group of bars per suite, one bar per policy, 95% intervals."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from spade_gym.evaluation.base import SuiteResult

__all__ = ["plot_comparison"]


def plot_comparison(results: Mapping[str, Sequence[SuiteResult]], path: str | Path, *, title: str = "") -> Path:
    """Draw every policy's score per suite with its 95% confidence interval as a PNG.

    Args:
        results: policy label -> its suite results (suites missing for a policy are left blank).
        path: the PNG file to write.
        title: the figure's title.

    Returns:
        The path written.

    Raises:
        ImportError: matplotlib is not installed (the ``train`` extra has it).
        ValueError: no results.
    """
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        raise ImportError("plotting needs matplotlib: pip install 'spade_gym[train]'") from None
    suites = list(dict.fromkeys(r.suite for rs in results.values() for r in rs))
    if not suites:
        raise ValueError("no results to plot")
    width = 0.8 / max(len(results), 1)
    fig, ax = plt.subplots(figsize=(max(4.0, 1.6 * len(suites) * max(len(results), 1) / 2 + 2), 3.6))
    for k, (label, rs) in enumerate(results.items()):
        by_suite = {r.suite: r for r in rs}
        xs, ys, lows, highs = [], [], [], []
        for i, suite in enumerate(suites):
            if suite in by_suite:
                r = by_suite[suite]
                low, high = r.interval()
                xs.append(i + (k - (len(results) - 1) / 2) * width)
                ys.append(r.score)
                lows.append(r.score - low)
                highs.append(high - r.score)
        ax.bar(xs, ys, width, yerr=[lows, highs], capsize=3, label=label)
    ax.set_xticks(range(len(suites)), suites, rotation=15, ha="right")
    ax.set_ylabel("score (95% CI)")
    ax.set_ylim(0, 1)
    ax.set_title(title)
    ax.legend(frameon=False)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path
