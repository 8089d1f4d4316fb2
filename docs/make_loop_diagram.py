"""Draw docs/loop.png, the SPADE self-play loop shown at the top of the README.

.venv/bin/python docs/make_loop_diagram.py
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib.patches import FancyBboxPatch  # noqa: E402

OUT = Path(__file__).resolve().parent / "loop.png"
DESIGNER, AGENT, CHECK, DATA = "#fde2c8", "#cfe3f7", "#e4e4e4", "#d9f0d3"

# name: (x, y, text, colour), centres in axis units (0-16 wide, 0-8 high)
BOXES = {
    "designer": (2.0, 6.6, "Environment Designer\n(the LM)", DESIGNER),
    "program": (6.0, 6.6, "environment program\n(Python, class Env)", DATA),
    "gate": (10.0, 6.6, "validation gate\n(sandbox, oracle, trivial\npolicies, novelty)", CHECK),
    "audit": (14.0, 6.6, "audit\n(replays its checks\non the regret seeds)", CHECK),
    "regret": (14.0, 3.9, "regret = hint - no hint\nAgent plays k episodes\nwith and without the hint", AGENT),
    "registry": (9.2, 3.9, "registry\n(accepted programs\n+ measured returns)", DATA),
    "replay": (5.6, 3.9, "prioritised replay\n(environments drawn\nby regret)", DATA),
    "agent": (2.0, 3.9, "Reasoning Agent\n(the same LM)", AGENT),
    "grpo_a": (3.6, 1.2, "GRPO update of the Agent\n(group-relative advantages)", AGENT),
    "grpo_d": (12.9, 1.2, "GRPO update of the Designer\n(reward: regret; -1 invalid,\n-0.5 duplicate)", DESIGNER),
}
# (from, to, label, where the label sits along the arrow)
ARROWS = [
    ("designer", "program", "writes", 0.5),
    ("program", "gate", "", 0.5),
    ("gate", "audit", "accepted", 0.5),
    ("audit", "regret", "", 0.5),
    ("regret", "registry", "admitted", 0.5),
    ("registry", "replay", "", 0.5),
    ("replay", "agent", "episodes", 0.5),
    ("agent", "grpo_a", "trajectories", 0.5),
    ("regret", "grpo_d", "reward", 0.5),
    ("gate", "grpo_d", "refused", 0.2),
]
W, H = 3.3, 1.45


def _edge(name: str, towards: tuple[float, float]) -> tuple[float, float]:
    """The point where the line from ``name``'s centre towards ``towards`` leaves its box."""
    x, y = BOXES[name][:2]
    dx, dy = towards[0] - x, towards[1] - y
    scale = min((W / 2) / abs(dx) if dx else float("inf"), (H / 2) / abs(dy) if dy else float("inf"))
    return x + dx * scale, y + dy * scale


def main() -> None:
    fig, ax = plt.subplots(figsize=(10, 5.2), dpi=100)
    ax.set_xlim(0, 16)
    ax.set_ylim(0.2, 7.6)
    ax.axis("off")
    for x, y, text, colour in BOXES.values():
        box = FancyBboxPatch((x - W / 2, y - H / 2), W, H, boxstyle="round,pad=0.05", fc=colour, ec="#555555")
        ax.add_patch(box)
        ax.text(x, y, text, ha="center", va="center", fontsize=8.5)
    for start, end, label, at in ARROWS:
        a, b = _edge(start, BOXES[end][:2]), _edge(end, BOXES[start][:2])
        ax.annotate("", xy=b, xytext=a, arrowprops={"arrowstyle": "-|>", "color": "#333333", "lw": 1.3})
        if label:
            x, y = a[0] + (b[0] - a[0]) * at, a[1] + (b[1] - a[1]) * at
            ax.text(x + 0.1, y + 0.12, label, ha="left" if at < 0.5 else "center", fontsize=7.5, style="italic")
    ax.annotate(
        "",
        xy=(2.0, 5.85),
        xytext=(2.0, 4.65),
        arrowprops={"arrowstyle": "<|-|>", "color": "#888888", "lw": 1.0, "linestyle": "--"},
    )
    ax.text(2.15, 5.25, "one model,\nshared weights", fontsize=7.5, color="#555555", va="center")
    ax.text(8.0, 7.45, "SPADE self-play: one iteration", ha="center", fontsize=11, weight="bold")
    fig.savefig(OUT, bbox_inches="tight")
    print(f"{OUT} ({OUT.stat().st_size // 1024} KiB)")


if __name__ == "__main__":
    main()
