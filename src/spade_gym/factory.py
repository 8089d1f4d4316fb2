"""The environment factory: a Designer writing environments unattended, the gate as the verifier.

Best-of-N: pose a prompt (prompt ``p`` targets setting ``p mod len(settings)``), sample ``group``
designs, keep those the gate accepts, measure their regret and register them; again, for ``count``
designs or ``seconds`` of wall time. A stopped run resumes from its folder: ``registry/``,
``designs.jsonl`` (one line per design), ``prompts.jsonl`` (one line per prompt: its chat messages)
and ``factory.json`` (settings and :class:`FactorySummary`).

A design is *valid* when it passes every check but novelty, *accepted* when it is also new to the
registry and registered, and *new* when accepted and not a variant of a program the Designer was
shown or of a seed (:func:`spade_gym.design_novelty.closest_reference` below
``near_duplicate_threshold``). Rates come with 95% Wilson intervals; the yield is new environments
per hour of wall time and per CPU-hour (this process and its sandbox workers).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os
import time
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, TextIO

from spade_gym.design_novelty import closest_reference
from spade_gym.designer import (
    MODES,
    DesignerConfig,
    DesignOutcome,
    draw_group,
    evaluate_completion,
    generate_designs,
    validate_designs,
)
from spade_gym.documents import DocumentSource
from spade_gym.errors import Category
from spade_gym.evaluation import confidence_interval
from spade_gym.files import replace_atomically
from spade_gym.memory import EnvironmentMemory
from spade_gym.policies.base import Completion, Policy
from spade_gym.registry.gymnasium import HELD_OUT_SEED_ENVS, open_registry
from spade_gym.registry.store import Registry

__all__ = [
    "DESIGNS_FILE",
    "PROMPTS_FILE",
    "FactoryConfig",
    "FactorySummary",
    "cpu_seconds",
    "read_designs",
    "run_factory",
]

#: The per-design log in a factory folder.
DESIGNS_FILE = "designs.jsonl"
PROMPTS_FILE = "prompts.jsonl"
SUMMARY_FILE = "factory.json"


def cpu_seconds() -> float:
    """CPU seconds (user and system) of this process and of its children that have ended."""
    t = os.times()
    return t.user + t.system + t.children_user + t.children_system


@dataclass(frozen=True)
class FactoryConfig:
    """How the factory runs.

    Attributes:
        designer: the Designer's settings (prompt variant, sampling, validation, memory, regret k).
        group: designs sampled per prompt (best-of-N: N), ``>= 1``.
        mode: ``"write"``, ``"edit"``, or ``None``: drawn per prompt with ``designer.edit_probability``.
        count: stop after this many designs in all (resumed runs included); ``None``: no limit.
        seconds: stop after this many seconds of wall time in all; ``None``: no limit.
        seed: seed of the prompts (prompt ``p`` is posed with seed ``seed * 100_000 + p``) and sampling.
        held_out: seed environments kept out of the registry (never shown, never compared).

    Raises:
        ValueError: a value out of range, or neither ``count`` nor ``seconds``.
    """

    designer: DesignerConfig = field(default_factory=DesignerConfig)
    group: int = 4
    mode: str | None = "write"
    count: int | None = None
    seconds: float | None = None
    seed: int = 0
    held_out: tuple[str, ...] = tuple(HELD_OUT_SEED_ENVS)

    def __post_init__(self) -> None:
        if self.group < 1:
            raise ValueError(f"FactoryConfig.group must be >= 1, got {self.group}")
        if self.mode is not None and self.mode not in MODES:
            raise ValueError(f"FactoryConfig.mode must be one of {MODES} or None, got {self.mode!r}")
        if self.count is None and self.seconds is None:
            raise ValueError("FactoryConfig needs count or seconds (when to stop)")
        if self.count is not None and self.count < 1:
            raise ValueError(f"FactoryConfig.count must be >= 1, got {self.count}")
        if self.seconds is not None and self.seconds <= 0:
            raise ValueError(f"FactoryConfig.seconds must be > 0, got {self.seconds}")


@dataclass(frozen=True)
class FactorySummary:
    """Counts and yield of a factory folder (every design of ``designs.jsonl``).

    ``seconds``: wall time of generation, validation and regret; ``cpu_seconds``: CPU time of the
    same; ``tokens``: new tokens generated (0 when the policy reports none).
    """

    designs: int = 0
    prompts: int = 0
    valid: int = 0
    accepted: int = 0
    new: int = 0
    seconds: float = 0.0
    cpu_seconds: float = 0.0
    generation_seconds: float = 0.0
    tokens: int = 0
    categories: dict[str, int] = field(default_factory=dict)

    @classmethod
    def of(cls, lines: list[dict[str, Any]]) -> FactorySummary:
        """The summary of designs.jsonl lines."""
        categories = Counter(line["category"] for line in lines)
        return cls(
            designs=len(lines),
            prompts=len({line["prompt"] for line in lines}),
            valid=sum(bool(line["valid"]) for line in lines),
            accepted=sum(bool(line["accepted"]) for line in lines),
            new=sum(bool(line["new"]) for line in lines),
            seconds=sum(float(line["seconds"]) for line in lines),
            cpu_seconds=sum(float(line["cpu_seconds"]) for line in lines),
            generation_seconds=sum(float(line["generation_s"]) for line in lines),
            tokens=sum(int(line["tokens"]) for line in lines),
            categories=dict(sorted(categories.items())),
        )

    def rate(self, what: str) -> tuple[float, float, float]:
        """``(rate, low, high)`` of ``"valid"``, ``"accepted"`` or ``"new"`` per design, with the
        95% Wilson interval (``(0, 0, 1)`` without designs)."""
        hits = int(getattr(self, what))
        if not self.designs:
            return 0.0, 0.0, 1.0
        low, high = confidence_interval([1.0] * hits + [0.0] * (self.designs - hits))
        return hits / self.designs, low, high

    @property
    def new_per_hour(self) -> float:
        """New environments per hour of wall time."""
        return 3600.0 * self.new / self.seconds if self.seconds else 0.0

    @property
    def new_per_cpu_hour(self) -> float:
        """New environments per CPU-hour."""
        return 3600.0 * self.new / self.cpu_seconds if self.cpu_seconds else 0.0

    def line(self) -> str:
        """The one-line progress report."""
        minutes, secs = divmod(int(self.seconds), 60)
        return (
            f"{self.designs} designs ({self.prompts} prompts) in {minutes}m{secs:02d}s: valid {self.valid}, accepted "
            f"{self.accepted}, new {self.new} ({self.new_per_hour:.0f}/h, {self.new_per_cpu_hour:.0f}/CPU-h)"
        )

    def to_dict(self) -> dict[str, Any]:
        """The summary as JSON values, the rates and their intervals included."""
        data = asdict(self)
        for what in ("valid", "accepted", "new"):
            rate, low, high = self.rate(what)
            data[f"{what}_rate"], data[f"{what}_ci95"] = rate, [low, high]
        data["new_per_hour"], data["new_per_cpu_hour"] = self.new_per_hour, self.new_per_cpu_hour
        data["tokens_per_design"] = self.tokens / self.designs if self.designs else 0.0
        data["seconds_per_design"] = self.seconds / self.designs if self.designs else 0.0
        return data


def read_designs(out: Path) -> list[dict[str, Any]]:
    """The lines of ``out/designs.jsonl`` (a torn last line, from a killed run, is dropped)."""
    path = Path(out) / DESIGNS_FILE
    if not path.is_file():
        return []
    lines = []
    for raw in path.read_text(encoding="utf-8").splitlines():
        with contextlib.suppress(ValueError):
            lines.append(json.loads(raw))
    return lines


class _LazyAgent:
    """The Agent, loaded on the first accepted design from a spec or a function, or given as a policy."""

    def __init__(self, agent: Policy | str | Callable[[], Policy]) -> None:
        self._make = agent
        self._loaded: Policy | None = agent if isinstance(agent, Policy) else None

    def get(self) -> Policy:
        """The Agent's policy (loaded now if needed)."""
        if self._loaded is None:
            if isinstance(self._make, str):
                from spade_gym.policies import load_policy

                self._loaded = load_policy(self._make)
            else:
                assert callable(self._make)
                self._loaded = self._make()
        return self._loaded

    def __getattr__(self, name: str) -> Any:  # the policy's attributes: name, generate, encode, ...
        return getattr(self.get(), name)


def _line(
    prompt_index: int, g: int, prompt: Any, outcome: DesignOutcome, completion: Completion, timing: dict[str, float]
) -> dict[str, Any]:
    report = outcome.report
    valid = report.accepted or report.category == Category.DUPLICATE
    reference, similarity = (None, 0.0)
    if outcome.source is not None and valid:
        reference, similarity = closest_reference(outcome.source)
    threshold = report.config.get("near_duplicate_threshold", 0.9) if report.config else 0.9
    estimate = outcome.estimate
    return {
        "prompt": prompt_index,
        "sample": g,
        "mode": prompt.mode,
        "variant": prompt.variant,
        "target_setting": prompt.setting,
        "category": report.category,
        "valid": valid,
        "accepted": outcome.accepted,
        "new": outcome.accepted and similarity < threshold,
        "closest": reference.label if reference is not None else None,
        "similarity": round(similarity, 3),
        "env_id": outcome.record.env_id if outcome.record else None,
        "gym_id": outcome.record.gym_id if outcome.record else None,
        "name": report.name,
        "setting": report.setting,
        "max_turns": report.max_turns,
        "tools": None if outcome.source is None else ("tools" in outcome.source),
        "return_hint": estimate.mean_hint if estimate else None,
        "return_nohint": estimate.mean_nohint if estimate else None,
        "regret": estimate.regret if estimate else None,
        "problem": None if report.accepted else report.feedback()[:600],
        "note": outcome.note,
        "tokens": completion.num_tokens,
        **timing,
        "document": prompt.document.source if prompt.document is not None else None,
        "completion": outcome.completion,
        "source": outcome.source,
    }


def _design_group(
    p: int,
    size: int,
    designer: Policy,
    documents: DocumentSource,
    memory: EnvironmentMemory,
    registry: Registry,
    agent: _LazyAgent,
    config: FactoryConfig,
    posed: TextIO,
) -> Iterator[dict[str, Any]]:
    """Pose prompt ``p``, sample ``size`` designs, judge each; yield their designs.jsonl lines."""
    began, cpu_began = time.perf_counter(), cpu_seconds()
    group_seed = config.seed * 100_000 + p
    settings = config.designer.settings  # in turn, so that every setting is measured alike
    draws = draw_group(
        group_seed,
        size,
        documents=documents,
        memory=memory,
        config=config.designer,
        mode=config.mode,
        setting=settings[p % len(settings)],
    )
    prompt = draws.prompt
    provenance = prompt.provenance()  # its "prompt" is the variant: the line's "prompt" is the index designs name
    posed.write(
        json.dumps({**provenance, "variant": provenance.get("prompt"), "prompt": p, "messages": prompt.messages}) + "\n"
    )
    posed.flush()
    sampling = replace(config.designer.sampling_for(prompt.mode), n=size, seed=group_seed)
    completions = generate_designs(designer, [prompt], sampling)
    generated = time.perf_counter() - began
    reports = validate_designs([c.text for c in completions], prompt, config.designer)
    # the group's generation and validation, shared evenly by its designs
    shared, cpu_shared = (time.perf_counter() - began) / size, (cpu_seconds() - cpu_began) / size
    for g, completion in enumerate(completions):
        started, cpu_started = time.perf_counter(), cpu_seconds()
        outcome = evaluate_completion(
            completion.text,
            prompt,
            registry=registry,
            agent=agent,
            config=config.designer,
            sampling_seed=draws.agent_seeds[g],
            validated=reports.pop(completion.text, None),
        )
        timing = {
            "generation_s": generated / size,
            "validation_s": outcome.validation_s,
            "regret_s": outcome.regret_s,
            "seconds": time.perf_counter() - started + shared,
            "cpu_seconds": cpu_seconds() - cpu_started + cpu_shared,
        }
        yield _line(p, g, prompt, outcome, completion, timing)


def run_factory(
    out: str | Path,
    designer: Policy,
    documents: DocumentSource,
    config: FactoryConfig,
    *,
    agent: Policy | str | Callable[[], Policy] = "default",
    progress: Callable[[FactorySummary, dict[str, Any]], None] | None = None,
) -> FactorySummary:
    """Write environments into the folder ``out`` until ``config.count`` designs or ``config.seconds``
    of wall time (resumed runs included), and return the summary of the whole folder.

    Args:
        out: the factory folder (created; an existing one is resumed: its registry and its designs
            count, the next prompt is the one after its last).
        designer: the Designer's policy (any backend; inference only).
        agent: the Agent whose regret is measured (a policy, a spec, or a function making one),
            loaded on the first accepted design.
        progress: called after each design with the summary so far and the design's line.

    Raises:
        PolicyError: a policy failed. SandboxSetupError: no sandbox worker can start.
        RegistryError: the folder's registry cannot be opened.
    """
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    lines = read_designs(out)
    summary = FactorySummary.of(lines)
    registry = open_registry(out / "registry", seed_library=True, exclude=config.held_out)
    memory = EnvironmentMemory(registry, config.designer.memory)
    lazy = _LazyAgent(agent)
    settings = {
        "designer": designer.name,
        "group": config.group,
        "mode": config.mode,
        "variant": config.designer.prompt,
        "feedback": config.designer.feedback,
        "seed": config.seed,
        "temperature": config.designer.sampling.temperature,
        "max_new_tokens": config.designer.sampling.max_new_tokens,
    }
    first = max((int(line["prompt"]) for line in lines), default=-1) + 1
    try:
        with open(out / DESIGNS_FILE, "a", encoding="utf-8") as log, open(out / PROMPTS_FILE, "a") as posed:
            for p in itertools.count(first):
                if (config.count is not None and summary.designs >= config.count) or (
                    config.seconds is not None and summary.seconds >= config.seconds
                ):
                    break
                size = config.group if config.count is None else min(config.group, config.count - summary.designs)
                for line in _design_group(p, size, designer, documents, memory, registry, lazy, config, posed):
                    log.write(json.dumps(line, ensure_ascii=False) + "\n")
                    log.flush()
                    lines.append(line)
                    summary = FactorySummary.of(lines)
                    if progress is not None:
                        progress(summary, line)
                summary_json = {"settings": settings, "summary": summary.to_dict()}
                replace_atomically(out / SUMMARY_FILE, json.dumps(summary_json, indent=1))
    finally:
        registry.close()
    return summary
