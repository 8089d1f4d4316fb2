"""Helpers that read the hostile/valid program corpora and play a program through the sandbox."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from spade_gym import EnvProgram, ProgramError, SandboxClient, SandboxConfig, SpadeError
from spade_gym.sandbox import Budget

ROOT = Path(__file__).resolve().parent.parent
SHARED_CASES = ROOT.parent / "shared" / "sandbox_cases"
EXTRA_CASES = ROOT / "tests" / "sandbox_cases_extra"
EXAMPLES = ROOT / "examples" / "programs"

#: The layers whose cases this suite decides (the validation gate's are decided by the gate).
SANDBOX_LAYERS = (
    "static check",
    "sandbox",
    "output contract",
    "(none - contain)",
    "all layers let it through",
)


@dataclass(frozen=True)
class Case:
    path: Path
    outcomes: tuple[str, ...]
    layer: str

    @property
    def id(self) -> str:
        return self.path.stem


def _layers_from_index(index: Path) -> dict[str, str]:
    """``{file name: layer}`` from the INDEX.md table's "layer ..." column, if it has one."""
    layers: dict[str, str] = {}
    column = None
    if index.exists():
        for line in index.read_text().splitlines():
            cells = [c.strip() for c in line.strip().strip("|").split("|")]
            if column is None:
                column = next((i for i, c in enumerate(cells) if c.startswith("layer")), None)
            elif len(cells) > column and cells[0].startswith("`"):
                layers[cells[0].strip("`")] = cells[column]
    return layers


def load_cases(folder: Path) -> list[Case]:
    """Every ``*.py`` case in ``folder`` with its ``# Outcome`` header and, from INDEX.md, its layer."""
    layers = _layers_from_index(folder / "INDEX.md")
    cases = []
    for path in sorted(folder.glob("*.py")):
        match = re.search(r"^# Outcome\s*:\s*(\S+)", path.read_text(), re.M)
        if match:
            cases.append(Case(path, tuple(match.group(1).split("|")), layers.get(path.name, "sandbox")))
    return cases


def play(source: str, config: SandboxConfig | None = None, seeds: tuple[int, ...] = (0, 1), max_steps: int = 60) -> str:
    """Statically check, load and play ``source`` with its oracle; return the outcome category.

    Each seed is an episode on the same instance: reset, then (hint, oracle, step) until the episode
    ends or ``max_steps``. Returns ``"ACCEPT"`` when nothing failed, else the error's category.
    """
    try:
        EnvProgram(source).check(restricted_compile=False)
    except ProgramError as exc:
        return exc.category
    config = config or SandboxConfig()
    with SandboxClient(config) as client:
        try:
            spec = client.load(source)
            for seed in seeds:
                budget = Budget(config.episode_budget_s)
                client.reset(seed, budget)
                for _ in range(min(spec.max_turns, max_steps)):
                    client.hint(budget)
                    _obs, _r, terminated, truncated, _info = client.step(client.oracle(budget), budget)
                    if terminated or truncated:
                        break
        except SpadeError as exc:
            return exc.category
    return "ACCEPT"
