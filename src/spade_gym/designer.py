"""The Environment Designer: prompts, program extraction, repair rounds, and ``SpadeDesignerEnv``.

One design (docs/DESIGN.md, "The data flow"): :func:`build_prompt` in ``"write"`` mode (a new
environment) or ``"edit"`` mode (a variant of a memory environment, ACCEL's level editing,
Parker-Holder et al. 2022, section 3) -> ``policy.generate`` -> :func:`extract_design` ->
:func:`evaluate_completion` (gate, regret, registration, reward). :func:`design` adds repair rounds;
:class:`SpadeDesignerEnv` (``spade/Designer-v0``) is the one-step gymnasium form.
"""

from __future__ import annotations

import copy
import itertools
import random
import re
import shutil
import tempfile
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import gymnasium
from annotated_types import Ge, Le, MinLen

from spade_gym.agent import RolloutConfig
from spade_gym.audit import audit
from spade_gym.chance import swapped_success
from spade_gym.contract import rename_env_class, unfilled_placeholders
from spade_gym.design_novelty import copies_prompt_example
from spade_gym.design_prompts import (
    DEFAULT_PROMPT,
    DESIGNER_EDIT_SYSTEM_PROMPT,
    DESIGNER_SYSTEM_PROMPT,
    EDIT_DIVIDER,
    EDIT_REPLACE,
    EDIT_SEARCH,
    EDIT_TASK,
    PROMPT_VARIANTS,
    PromptVariant,
    system_prompt,
    write_task,
)
from spade_gym.documents import Document, DocumentSource, load_documents, make_document
from spade_gym.errors import DuplicateEnvironment
from spade_gym.fill import fill_designs
from spade_gym.ladder import library_ladder
from spade_gym.memory import EnvironmentMemory, MemoryConfig, MemoryItem, format_memory, pick_parent, read_source
from spade_gym.novelty import check_novelty
from spade_gym.options import Why, first_refusal
from spade_gym.policies.base import Completion, Policy, Prompt, SamplingParams
from spade_gym.program import OUT_OF_REACH_BELOW, SETTINGS, EnvProgram, Setting, knobs
from spade_gym.registry.gymnasium import open_registry, register_record
from spade_gym.registry.records import EnvRecord, EnvStats
from spade_gym.registry.store import Registry
from spade_gym.regret import (
    REGRET_EPISODES,
    DesignerReward,
    RegretEstimate,
    RewardConfig,
    designer_reward,
    estimate_regret,
)
from spade_gym.repair import repair_feedback, same_program
from spade_gym.spaces import UnicodeText
from spade_gym.validation import CHECKS, CheckResult, ValidationConfig, ValidationReport, validate

if TYPE_CHECKING:
    import numpy as np

    from spade_gym.executor import Executor

__all__ = [
    "DESIGNER_SYSTEM_PROMPT",
    "DESIGNER_TEMPERATURE",
    "DESIGN_TOKEN_FLOOR",
    "EDIT_PROBABILITY",
    "EDIT_MAX_NEW_TOKENS",
    "EDIT_TOKEN_FLOOR",
    "WRITE_MAX_NEW_TOKENS",
    "EDIT_PROBABILITY_SMALL",
    "MODES",
    "DesignOutcome",
    "DesignerConfig",
    "DesignerPrompt",
    "ExtractedProgram",
    "SpadeDesignerEnv",
    "auto_edit_probability",
    "build_prompt",
    "generate_designs",
    "design_token_floor",
    "design",
    "design_draws",
    "episode_draw",
    "evaluate_completion",
    "extract_program",
    "extract_design",
    "apply_edits",
    "edit_blocks",
    "has_edits",
    "DESIGNER_EDIT_SYSTEM_PROMPT",
    "EDIT_SEARCH",
    "EDIT_DIVIDER",
    "EDIT_REPLACE",
    "model_parameters",
    "propose",
    "propose_group",
    "validate_designs",
]

#: The Designer's two modes: a new environment from the document, or a variant of a memory one.
MODES = ("write", "edit")
#: Default chance that a design is an edit of a memory environment (:attr:`DesignerConfig.edit_probability`).
EDIT_PROBABILITY = 0.25
#: The chance ``designer.edit_probability: auto`` gives a small model (see :func:`auto_edit_probability`).
EDIT_PROBABILITY_SMALL = 0.75
#: Parameters below which ``auto`` counts a model as small.
SMALL_MODEL_PARAMETERS = 1.5e9
#: The fewest new tokens of a design when no tokenizer can measure the seed programs (about the worked example's).
DESIGN_TOKEN_FLOOR = 256
#: New tokens of a write-mode design by default (the seed programs are 400-1,400 tokens).
WRITE_MAX_NEW_TOKENS = 1536
#: New tokens of an edit-mode design by default (the cold start's knob variants take 40-120).
EDIT_MAX_NEW_TOKENS = 256
#: The Designer's default sampling temperature: with the embedded model and its cold start 8 of 12
#: edits are valid at 0.5 (``examples/design_rate.py``); larger models do well at 0.7-1.0.
DESIGNER_TEMPERATURE: float = 0.5
#: The fewest new tokens an edit-mode design may have: one short edit block.
EDIT_TOKEN_FLOOR = 32
#: Longest prompt and completion in characters; a longer completion is refused (``TOO_LONG``) unparsed.
MAX_PROMPT_CHARS = 200_000
MAX_COMPLETION_CHARS = 1_000_000

#: The ranges of :class:`DesignerConfig`'s fields, stated once (the config's ``designer`` section
#: uses the same types, with :data:`~spade_gym.design_prompts.PromptVariant` and
#: :data:`~spade_gym.program.Setting`): a probability, an edit-mode token budget.
Probability = Annotated[float, Ge(0), Le(1)]
EditTokens = Annotated[int, Ge(EDIT_TOKEN_FLOOR), Why("one edit block")]


@dataclass(frozen=True)
class DesignerPrompt:
    """One Designer prompt (system and user chat ``messages``) and what went into it.

    ``setting``: the target, or ``None`` (the Designer chooses). In edit mode ``parent`` is the env
    id to vary and ``parent_source`` the program the edit blocks apply to; else both are ``None``.
    ``variant``: the write-mode prompt variant (:data:`~spade_gym.design_prompts.PROMPT_VARIANTS`).
    """

    messages: list[dict[str, str]]
    mode: str
    setting: str | None
    document: Document | None
    memory: tuple[MemoryItem, ...] = ()
    parent: str | None = None
    parent_source: str | None = None
    variant: str = DEFAULT_PROMPT

    @property
    def text(self) -> str:
        """The system message, a blank line, the user message."""
        return "\n\n".join(m["content"] for m in self.messages)

    def provenance(self) -> dict[str, Any]:
        """What the registry stores about this prompt."""
        return {
            "mode": self.mode,
            "setting": self.setting,
            "document": self.document.source if self.document is not None else None,
            "memory": [item.record.env_id for item in self.memory],
            "parent": self.parent,
            "prompt": self.variant,
        }


def build_prompt(
    document: Document | str | None,
    memory: Sequence[MemoryItem] = (),
    *,
    setting: str | None = None,
    mode: str = "write",
    parent: MemoryItem | None = None,
    include_source: bool = False,
    variant: str = DEFAULT_PROMPT,
) -> DesignerPrompt:
    """Build the Designer prompt from a document (a ``Document``, text or ``None``) and memory.

    In edit mode ``parent`` (default: :func:`~spade_gym.memory.pick_parent`) is shown with its
    source and its setting wins. ``include_source`` shows every memory environment's source.
    ``variant``: the write-mode prompt (``"skeleton"``: the setting's ``Env`` to fill; ``"example"``:
    a worked example). Raises ValueError for an unknown ``mode``, ``setting`` or ``variant``, or
    edit mode with an empty memory; TypeError for a ``document`` that is not a ``Document``,
    ``str`` or ``None``.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    if variant not in PROMPT_VARIANTS:
        raise ValueError(f"prompt variant must be one of {PROMPT_VARIANTS}, got {variant!r}")
    if setting is not None and setting not in SETTINGS:
        raise ValueError(f"setting must be one of {SETTINGS} or None, got {setting!r}")
    if isinstance(document, str):
        document = make_document(document)
    elif document is not None and not isinstance(document, Document):
        raise TypeError(f"document must be a Document, a str or None, got {type(document).__name__}")
    items = tuple(memory)
    if mode == "edit":
        if parent is None:
            parent = pick_parent(items, random.Random(0))
        if parent is None:
            raise ValueError("edit mode needs at least one memory environment to vary")
        if parent not in items:
            items = (parent, *items)
    sections = []
    if document is not None:
        title = f" ({document.title})" if document.title else ""
        sections.append(f"Document{title}:\n<document>\n{document.text}\n</document>")
    else:
        sections.append("No document is available this time: take the idea from the environments below.")
    shown = format_memory([i for i in items if i is not parent], include_source=include_source)
    if shown:
        sections.append("Environments written before, with the agent's measured returns:\n" + shown)
    parent_source = None
    if mode == "edit":
        assert parent is not None
        parent_source = parent.source if parent.source is not None else read_source(parent.record)
        if parent_source is None:
            raise ValueError(
                f"edit mode: the program of {parent.record.env_id} cannot be read (damaged registry entry)"
            )
        parent = replace(parent, source=parent_source)
        setting = parent.record.setting  # a variant keeps its parent's setting (a knob edit cannot change it)
        sections.append("The environment to vary:\n" + format_memory([parent], include_source=True))
        stats = parent.record.stats
        direction = "harder"
        if stats.mean_return_hint is not None and stats.mean_return_hint < OUT_OF_REACH_BELOW:
            direction = "easier"
        found = ", ".join(f"{k} = {v}" for k, v in knobs(parent_source).items())
        moves = f": move a difficulty knob ({found}) or change a rule" if found else ""
        ladder = library_ladder(parent.record.name)
        if found and ladder is not None and ladder.success():  # where the edge of the Agent's ability lies
            rates = ", ".join(f"{k} {v:.2f}" for k, v in sorted(ladder.success().items()))
            moves += f" (the agent's measured success without the hint by {ladder.knob}: {rates})"
        task = EDIT_TASK.format(parent=parent.record.env_id, direction=direction, knobs=moves, setting=setting)
    else:
        task = write_task(setting, variant, document is not None)
    sections.append(task)
    messages = [
        {"role": "system", "content": system_prompt(mode, variant)},
        {"role": "user", "content": "\n\n".join(sections)},
    ]
    return DesignerPrompt(
        messages=messages,
        mode=mode,
        setting=setting,
        document=document,
        memory=items,
        parent=parent.record.env_id if mode == "edit" and parent is not None else None,
        parent_source=parent_source,
        variant=variant,
    )


def generate_designs(policy: Policy, prompts: Sequence[DesignerPrompt], sampling: SamplingParams) -> list[Completion]:
    """``sampling.n`` completions per prompt, grouped by prompt: one ``policy.generate`` call, and a
    write-mode ``"fill"`` prompt's designs filled part by part (:func:`~spade_gym.fill.fill_designs`)."""
    if not any(p.variant == "fill" and p.mode == "write" for p in prompts):
        return policy.generate([p.messages for p in prompts], sampling)
    out: list[Completion] = []
    for index, prompt in enumerate(prompts):
        if prompt.variant == "fill" and prompt.mode == "write":
            seed = None if sampling.seed is None else sampling.seed + index * sampling.n
            done = fill_designs(policy, prompt.messages, prompt.setting or "reasoning", replace(sampling, seed=seed))
            out += [replace(c, prompt_index=index) for c in done]
        else:
            out += [replace(c, prompt_index=index) for c in policy.generate([prompt.messages], sampling)]
    return out


# -- Extraction --

_FENCE = re.compile(r"^[ \t]*```[ \t]*([\w+-]*)[ \t]*$", re.MULTILINE)
_CLASS_ENV = re.compile(r"^class[ \t]+Env\b", re.MULTILINE)
_CODE_START = re.compile(r"^(?:import |from \w|class |def |@|[A-Z_][A-Z0-9_]* *=|\"\"\"|''')", re.MULTILINE)


@dataclass(frozen=True)
class ExtractedProgram:
    """The program ``source`` found in a completion, or ``None`` and the ``problem``; ``note``: how
    it was found (e.g. several blocks, an unclosed fence)."""

    source: str | None
    problem: str | None = None
    note: str | None = None


def extract_program(completion: str) -> ExtractedProgram:
    """Find the environment program in a Designer completion.

    The **last** fenced block defining ``class Env`` (an unclosed last fence runs to the end);
    else unfenced code from the first code-like line before ``class Env`` to the end, dropping
    trailing lines that do not parse; else the last block (or the whole text) whose one class
    defines ``reset`` and ``step``, that class renamed ``Env`` (:func:`~spade_gym.contract.rename_env_class`,
    said in ``note``); else no program.
    """
    if not isinstance(completion, str):
        return ExtractedProgram(None, f"the completion is a {type(completion).__name__}, expected text")
    text = completion.replace("\r\n", "\n")
    if not text.strip():
        return ExtractedProgram(None, "the completion is empty: write the module in a ```python code block")
    fences = list(_FENCE.finditer(text))
    blocks = [text[a.end() : b.start()].strip("\n") for a, b in zip(fences[::2], fences[1::2], strict=False)]
    unclosed = len(fences) % 2 == 1
    if unclosed:  # the last block runs to the end
        blocks.append(text[fences[-1].end() :].strip("\n"))
    with_env = [b for b in blocks if _CLASS_ENV.search(b)]
    if with_env:
        notes = []
        if len(with_env) > 1:
            notes.append(f"{len(with_env)} code blocks define class Env; used the last one")
        if unclosed and with_env[-1] is blocks[-1]:
            notes.append("the last code block was never closed (cut at the token limit?)")
        return ExtractedProgram(with_env[-1].strip("\n") + "\n", note="; ".join(notes) or None)
    env = _CLASS_ENV.search(text)
    if env is None:
        for block in reversed(blocks or [text]):  # the one class of a block, named otherwise (`class DecayEnv:`)
            renamed, note = rename_env_class(block.strip("\n") + "\n")
            if note is not None:
                return ExtractedProgram(renamed, note=note)
        found = f"{len(blocks)} code block(s), none defining class Env" if blocks else "no code"
        return ExtractedProgram(None, f"the completion holds {found}: define class Env in a ```python code block")
    starts = [m.start() for m in _CODE_START.finditer(text, 0, env.start() + 1)]
    # the code starts at the first code-like line after the last prose line before `class Env`
    begin = env.start()
    for start in reversed(starts):
        between = text[start:begin]
        if all(not line.strip() or _looks_like_code(line) for line in between.splitlines()):
            begin = start
        else:
            break
    lines = text[begin:].splitlines()
    while lines and not _parses("\n".join(lines)):
        lines.pop()
    if not lines:
        lines = text[begin:].splitlines()  # unparsable: let the gate name the syntax error
    return ExtractedProgram("\n".join(lines).strip("\n") + "\n", note="no code fence; took the unfenced code")


_EDIT_MARKER = re.compile(r"^[ \t]*(<{5,9}[ \t]*SEARCH|={5,9}|>{5,9}[ \t]*REPLACE)[ \t]*$", re.MULTILINE)


def has_edits(completion: str) -> bool:
    """Whether a completion holds at least one edit-block marker (``<<<<<<< SEARCH``)."""
    return isinstance(completion, str) and any(m.group(1).startswith("<") for m in _EDIT_MARKER.finditer(completion))


def edit_blocks(parent: str, child: str) -> str:
    """The edit blocks that turn ``parent`` into ``child`` (``""`` when equal), as :func:`apply_edits` reads.

    One block per changed run of lines, its SEARCH text widened until it occurs once in ``parent``.
    """
    import difflib

    old, new = parent.splitlines(), child.splitlines()
    blocks = []
    for tag, i1, i2, j1, j2 in difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes():
        if tag == "equal":
            continue
        while True:  # widen until the SEARCH text is unique and not empty
            search = "\n".join(old[i1:i2])
            if i2 > i1 and search.strip() and "\n".join(old).count(search) == 1:
                break
            if i1 == 0 and i2 == len(old):
                break
            if i2 < len(old):
                i2, j2 = i2 + 1, j2 + 1
            if i1 > 0 and (i2 - i1 < 2 or i2 == len(old)):
                i1, j1 = i1 - 1, j1 - 1
        blocks.append("\n".join([EDIT_SEARCH, *old[i1:i2], EDIT_DIVIDER, *new[j1:j2], EDIT_REPLACE]))
    return "\n".join(blocks) + ("\n" if blocks else "")


def _find_lines(haystack: list[str], needle: list[str]) -> int | None:
    """First index where ``needle`` matches ``haystack`` line by line up to surrounding whitespace."""
    lines = [line.strip() for line in haystack]
    wanted = [line.strip() for line in needle]
    return next((i for i in range(len(lines) - len(wanted) + 1) if lines[i : i + len(wanted)] == wanted), None)


def apply_edits(parent: str, completion: str) -> ExtractedProgram:
    """Apply the edit blocks (aider's SEARCH/REPLACE format) of a completion to the ``parent`` program.

    Blocks apply in order; the first occurrence of the SEARCH lines is replaced, matched exactly or
    else line by line up to surrounding whitespace (the replacement then re-indented). Returns
    ``source=None`` and the problem for no block, a malformed or unclosed one, an empty or missing
    SEARCH, or edits that change nothing.
    """
    text = completion.replace("\r\n", "\n")
    source = parent.replace("\r\n", "\n")
    markers = list(_EDIT_MARKER.finditer(text))
    if not markers:
        return ExtractedProgram(
            None, f"no edit block: answer with {EDIT_SEARCH} / {EDIT_DIVIDER} / {EDIT_REPLACE} blocks"
        )
    notes: list[str] = []
    n = k = 0
    while k < len(markers):
        kinds = [m.group(1)[0] for m in markers[k : k + 3]]
        if kinds[:1] != ["<"]:
            return ExtractedProgram(None, f"edit block {n + 1}: expected {EDIT_SEARCH} before {markers[k].group(1)!r}")
        if len(kinds) < 3:
            return ExtractedProgram(
                None, f"edit block {n + 1} was never closed with {EDIT_REPLACE} (cut at the token limit?)"
            )
        if kinds != ["<", "=", ">"]:
            return ExtractedProgram(
                None,
                f"edit block {n + 1} is malformed: expected {EDIT_SEARCH}, {EDIT_DIVIDER}, {EDIT_REPLACE} in order",
            )
        n += 1
        search = text[markers[k].end() + 1 : markers[k + 1].start()].rstrip("\n")
        replace_ = text[markers[k + 1].end() + 1 : markers[k + 2].start()].rstrip("\n")
        k += 3
        if not search.strip():
            return ExtractedProgram(None, f"edit block {n} has an empty SEARCH part: copy the lines to change")
        if search in source:
            source = source.replace(search, replace_, 1)
            continue
        lines = source.split("\n")
        wanted = search.split("\n")
        at = _find_lines(lines, wanted)
        if at is None:
            first = wanted[0].strip()[:80]
            return ExtractedProgram(
                None, f"edit block {n}: its SEARCH lines (starting {first!r}) are not in the program; copy them exactly"
            )
        have = len(lines[at]) - len(lines[at].lstrip())
        given = len(wanted[0]) - len(wanted[0].lstrip())
        shift = have - given
        new_lines = [
            (" " * shift + line if shift > 0 else line[min(-shift, len(line) - len(line.lstrip())) :])
            if line.strip()
            else line
            for line in replace_.split("\n")
        ]
        lines[at : at + len(wanted)] = new_lines
        source = "\n".join(lines)
        notes.append(f"edit block {n} matched up to whitespace")
    if source.strip() == parent.replace("\r\n", "\n").strip():
        return ExtractedProgram(None, "the edit blocks leave the program unchanged: change the name and a rule or size")
    return ExtractedProgram(source.strip("\n") + "\n", note="; ".join([f"{n} edit block(s) applied", *notes]))


def _edits_parent(completion: str, prompt: DesignerPrompt | None) -> bool:
    return prompt is not None and prompt.parent_source is not None and has_edits(completion)


def extract_design(completion: str, prompt: DesignerPrompt | None) -> ExtractedProgram:
    """The program a completion designs for ``prompt``: edit blocks applied to an edit prompt's parent
    (:func:`apply_edits`), else a whole module (:func:`extract_program`)."""
    if _edits_parent(completion, prompt):
        assert prompt is not None and prompt.parent_source is not None
        return apply_edits(prompt.parent_source, completion)
    found = extract_program(completion)
    if found.source is None and prompt is not None and prompt.parent_source is not None:
        # an edit prompt asks for edit blocks: say so, not only how to write a whole module
        found = replace(
            found,
            problem=f"{found.problem}; or, to vary the parent, answer with edit blocks "
            "(<<<<<<< SEARCH / ======= / >>>>>>> REPLACE) whose SEARCH lines are copied from it",
        )
    return found


def _looks_like_code(line: str) -> bool:
    return (
        line.startswith((" ", "\t", "#")) or bool(_CODE_START.match(line)) or "=" in line or line.rstrip().endswith(":")
    )


def _parses(source: str) -> bool:
    import ast

    try:
        ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return False
    return True


# -- Evaluation: gate -> regret -> registry -> reward --


@dataclass(frozen=True)
class DesignerConfig:
    """Settings of a design step (everything but the policies, registry and documents).

    ``k``: regret episodes per arm. ``regret_seeds``: the first of ``k`` fixed regret seeds, or
    ``None``: drawn per design, so a program cannot tell regret episodes from others. ``rollout``:
    the Agent's regret rollout (temperature > 0). ``sampling``: the Designer's in write mode.
    ``memory``: the environments shown (``memory.include_source``: with their source). ``prompt``:
    the write-mode prompt variant. ``feedback``: what a repair round of :func:`design` is told
    (``"precise"``: :func:`~spade_gym.repair.repair_feedback`; ``"report"``: the gate's report).
    Raises ValueError naming the field for a value out of its type's range.
    """

    k: Annotated[int, Ge(1)] = REGRET_EPISODES
    regret_seeds: int | None = None
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    sampling: SamplingParams = field(
        default_factory=lambda: SamplingParams(temperature=DESIGNER_TEMPERATURE, max_new_tokens=WRITE_MAX_NEW_TOKENS)
    )
    reward: RewardConfig = field(default_factory=RewardConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    settings: Annotated[tuple[Setting, ...], MinLen(1)] = SETTINGS
    edit_probability: Probability = EDIT_PROBABILITY
    edit_max_new_tokens: EditTokens = EDIT_MAX_NEW_TOKENS
    prompt: PromptVariant = DEFAULT_PROMPT
    feedback: Literal["precise", "report"] = "precise"

    def __post_init__(self) -> None:
        refused = first_refusal(self)
        if refused is not None:
            name, value, expected = refused
            raise ValueError(f"DesignerConfig.{name} must be {expected}, got {value!r}")
        if self.rollout.sampling.greedy:
            raise ValueError("DesignerConfig.rollout.sampling.temperature must be > 0: regret needs sampling")

    def sampling_for(self, mode: str) -> SamplingParams:
        """``sampling``, with ``edit_max_new_tokens`` new tokens in edit mode."""
        if mode == "edit":
            return replace(self.sampling, max_new_tokens=self.edit_max_new_tokens)
        return self.sampling


@dataclass
class DesignOutcome:
    """Everything one design produced: the (last) completion, its program, report (``NO_CODE`` when
    none) and reward; for an accepted program the regret ``estimate`` and registry ``record``;
    :func:`design`'s ``rounds`` and failed ``attempts``; wall seconds per stage."""

    completion: str
    source: str | None
    report: ValidationReport
    reward: DesignerReward
    estimate: RegretEstimate | None = None
    record: EnvRecord | None = None
    note: str | None = None
    rounds: int = 0
    attempts: list[dict[str, str]] = field(default_factory=list)
    generation_s: float = 0.0
    validation_s: float = 0.0
    regret_s: float = 0.0
    registry_s: float = 0.0

    @property
    def accepted(self) -> bool:
        """Whether the program passed the validation gate and was registered."""
        return self.record is not None

    def feedback(self) -> str:
        """The report's feedback for the Designer, with the regret when measured."""
        lines = [self.report.feedback()]
        if self.estimate is not None:
            e = self.estimate
            alone = "" if e.mean_hint_only is None else f", {e.mean_hint_only:.2f} with the hint alone"
            lines.append(
                f"Agent return: {e.mean_hint:.2f} with the hint, {e.mean_nohint:.2f} without{alone} "
                f"({e.k} episodes each); regret {e.regret:.2f}: {e.reason}."
            )
        lines.append(f"Reward: {self.reward.reward:.2f} ({self.reward.outcome}).")
        if self.record is not None:
            lines.append(f"Registered as {self.record.gym_id}.")
        return "\n".join(lines)

    def info(self) -> dict[str, Any]:
        """The outcome as JSON values (the ``info`` of :meth:`SpadeDesignerEnv.step`)."""
        return {
            "accepted": self.accepted,
            "category": self.report.category,
            "outcome": self.reward.outcome,
            "reward": self.reward.reward,
            "env_id": self.record.env_id if self.record else None,
            "gym_id": self.record.gym_id if self.record else None,
            "report": self.report.to_dict(),
            "regret": self.estimate.summary() if self.estimate else None,
            "note": self.note,
            "rounds": self.rounds,
            "attempts": list(self.attempts),
            "timings": {key: getattr(self, key) for key in ("generation_s", "validation_s", "regret_s", "registry_s")},
        }


def _refuse(report: ValidationReport, check: str, category: str, message: str) -> None:
    """Turn an accepted report into a refusal by ``check`` (found after the gate ran)."""
    result = report.check(check)
    result.passed, result.category, result.message = False, category, message
    report.accepted, report.category = False, category


def evaluate_completion(
    completion: str,
    prompt: DesignerPrompt | None,
    *,
    registry: Registry,
    agent: Policy | None,
    config: DesignerConfig | None = None,
    sampling_seed: int | None = None,
    validated: ValidationReport | None = None,
    executor: Executor | None = None,
) -> DesignOutcome:
    """Judge one Designer completion: extract, validate, audit, estimate regret, register, reward.

    An accepted program (trivial and out-of-reach ones too) is registered, also with gymnasium as
    ``spade/<Name>-v<k>``. ``validated``: its report from :func:`validate_designs` (only novelty
    then runs here). ``sampling_seed``: the Agent's, when ``config.rollout`` has none. Bad
    completions get a report and the ``invalid`` or ``duplicate`` reward, never an exception.

    Raises ValueError for an accepted program and ``agent is None``; SandboxSetupError when no
    sandbox worker can start and PolicyError when the Agent policy fails (neither the program's fault).
    """
    config = config or DesignerConfig()
    if isinstance(completion, str) and len(completion) > MAX_COMPLETION_CHARS:
        problem = f"the completion has {len(completion):,} characters; at most {MAX_COMPLETION_CHARS:,} are read"
        extracted, category = ExtractedProgram(None, problem), "TOO_LONG"
    else:
        extracted, category = extract_design(completion, prompt), "NO_CODE"
    if extracted.source is None:
        report = ValidationReport(program_id="", checks=[CheckResult(name) for name in CHECKS])
        _refuse(report, "static", category, extracted.problem or "no program")
        return DesignOutcome(completion, None, report, designer_reward(False, config=config.reward))
    left = unfilled_placeholders(extracted.source)
    if left:  # the skeleton copied, not filled: refused before the gate runs
        report = ValidationReport(program_id=EnvProgram(extracted.source).id, checks=[CheckResult(n) for n in CHECKS])
        lines = ", ".join(str(p.line) for p in left[:8])
        _refuse(
            report,
            "static",
            "UNFILLED",
            f"the skeleton's placeholders are still in the program (lines {lines}): "
            "write your own code and text in their place",
        )
        return DesignOutcome(completion, extracted.source, report, designer_reward(False, config=config.reward))
    edited = _edits_parent(completion, prompt)
    started = time.perf_counter()
    program = EnvProgram(extracted.source, origin="designer")
    if validated is not None and validated.program_id == program.id:
        report = check_novelty(validated, program, registry, config.validation)
    else:
        report = validate(program, config.validation, registry=registry)
    outcome = DesignOutcome(
        completion,
        extracted.source,
        report,
        designer_reward(False, config=config.reward),
        note=extracted.note,
        validation_s=time.perf_counter() - started,
    )
    if report.accepted:  # the programs the prompt showed count as registered
        copy_of = copies_prompt_example(program, config.validation)
        if copy_of is not None:
            _refuse(report, "novelty", "DUPLICATE", copy_of)
        outcome.validation_s = time.perf_counter() - started
    if report.category == "DUPLICATE":
        outcome.reward = designer_reward(False, duplicate=True, config=config.reward)
        return outcome
    if report.accepted and prompt is not None and prompt.setting and report.setting != prompt.setting:
        _refuse(
            report,
            "static",
            "WRONG_SETTING",
            f"the task asked for a {prompt.setting} environment; this one declares setting = {report.setting!r}",
        )
    if not report.accepted:
        return outcome
    if agent is None:
        raise ValueError("an accepted program needs an Agent policy to estimate its regret")
    started = time.perf_counter()
    rollout = config.rollout
    if rollout.sampling.seed is None and sampling_seed is not None:
        rollout = replace(rollout, sampling=replace(rollout.sampling, seed=sampling_seed))
    if config.regret_seeds is not None:
        seeds = list(range(config.regret_seeds, config.regret_seeds + config.k))
    else:
        source = random.Random(f"regret-{sampling_seed}") if sampling_seed is not None else random.SystemRandom()
        seeds = source.sample(range(2**31), config.k)
    env = program if executor is None else executor.env(program)
    # the gate's checks again, on the regret seeds and in the Agent's kind of episode: a program
    # that behaves only while validated, or only on the gate's seeds, is refused here
    checked = audit(env, seeds, config.validation, max_turns=rollout.max_turns)
    if not checked.passed:
        assert checked.category is not None
        check = {"TRIVIAL": "non_triviality", "HINT_LEAK": "non_triviality", "ORACLE_FAILED": "feasibility"}.get(
            checked.category, "contract"
        )
        _refuse(report, check, checked.category, f"audit on the regret seeds: {checked.message}")
        outcome.regret_s = time.perf_counter() - started
        return outcome
    estimate = estimate_regret(env, agent, config.k, seeds, config=rollout)
    outcome.estimate, outcome.regret_s = estimate, time.perf_counter() - started
    played = (*estimate.hint, *estimate.nohint, *estimate.hint_only)
    failed = [t for t in played if t.error is not None]
    if failed:  # a program that breaks on seeds the gate did not play is not registered
        first = failed[0]
        _refuse(
            report,
            "contract",
            str(first.error.get("category") or "ENV_EXCEPTION") if first.error else "ENV_EXCEPTION",
            f"{len(failed)} of {len(played)} Agent episodes failed (seed {first.seed}: "
            f"{(first.error or {}).get('message', '')[:300]})",
        )
        return outcome
    started = time.perf_counter()
    assert report.name and report.setting and report.max_turns
    try:
        record = registry.add(
            program,
            name=report.name,
            setting=report.setting,
            max_turns=report.max_turns,
            description=report.description or "",
            tags=("designer", "edit" if edited else "write") if prompt else ("designer",),
            document=prompt.provenance() if prompt else None,
            # a variant only when its edit blocks were applied to the parent (a whole module is new)
            parents=(prompt.parent,) if prompt and prompt.parent and edited else (),
            validation={**report.to_dict(), "regret": estimate.summary()},
            # the gate judged near duplicates by behaviour (a variant passes); exact ones are still refused
            allow_near_duplicates=True,
            stats=EnvStats(
                episodes=len(played),
                mean_return_hint=estimate.mean_hint,
                mean_return_nohint=estimate.mean_nohint,
                regret=estimate.regret,
            ),
        )
    except DuplicateEnvironment as exc:  # registered by another writer since the novelty check
        _refuse(report, "novelty", "DUPLICATE", exc.message)
        outcome.reward = designer_reward(False, duplicate=True, config=config.reward)
        outcome.registry_s = time.perf_counter() - started
        return outcome
    register_record(record)
    outcome.record, outcome.registry_s = record, time.perf_counter() - started
    chance = None
    if config.reward.shaping != "none" and config.reward.above_chance:
        chance = swapped_success(program, estimate.nohint, max_turns=rollout.max_turns)
    outcome.reward = designer_reward(True, estimate, config=config.reward, chance=chance)
    return outcome


def design(
    policy: Policy,
    prompt: DesignerPrompt,
    *,
    registry: Registry,
    agent: Policy | None = None,
    config: DesignerConfig | None = None,
    seed: int | None = None,
    repairs: int = 2,
) -> DesignOutcome:
    """Write one environment with ``policy``: generate, evaluate, and repair up to ``repairs`` times.

    A rejected attempt is answered with its feedback (only the latest attempt stays in the
    conversation): :func:`~spade_gym.repair.repair_feedback` with ``config.feedback == "precise"``
    (the failing check, the lines, the expected shapes, a diff against the previous attempt), the
    gate's report alone with ``"report"``. ``agent`` defaults to ``policy``. Returns the last
    attempt's outcome; each failed attempt is in ``attempts`` (its category, the feedback sent,
    and ``"same": "yes"`` when it resubmitted the previous attempt's program). Raises PolicyError
    when a policy fails, SandboxSetupError when no sandbox worker can start; ValueError for
    ``repairs < 0``.
    """
    if repairs < 0:
        raise ValueError(f"repairs must be >= 0, got {repairs}")
    config = config or DesignerConfig()
    agent = agent or policy
    messages = list(prompt.messages)
    attempts: list[dict[str, str]] = []
    generation_s = 0.0
    outcome: DesignOutcome | None = None
    previous: str | None = None
    again = (
        "Write the whole corrected module again in one ```python code block."
        if prompt.mode == "write"
        else f"Answer again with edit blocks against the program of {prompt.parent} (not against your attempt)."
    )
    for round_ in range(repairs + 1):
        sampling = config.sampling_for(prompt.mode)
        if seed is not None and sampling.seed is None:
            sampling = replace(sampling, seed=seed + round_)
        started = time.perf_counter()
        if round_ == 0:
            completion = generate_designs(policy, [prompt], sampling)[0].text
        else:
            completion = policy.generate([messages], sampling)[0].text
        generation_s += time.perf_counter() - started
        outcome = evaluate_completion(
            completion, prompt, registry=registry, agent=agent, config=config, sampling_seed=seed
        )
        outcome.rounds = round_ + 1
        if outcome.accepted or round_ == repairs:
            break
        if config.feedback == "precise":
            problem = extract_design(completion, prompt).problem if outcome.source is None else None
            feedback = repair_feedback(
                outcome.report, outcome.source, previous, problem=problem, setting=prompt.setting
            )
        else:
            feedback = outcome.report.feedback()
        same = "yes" if previous is not None and same_program(previous, outcome.source) else "no"
        attempts.append({"category": outcome.report.category, "feedback": feedback, "same": same})
        previous = outcome.source or previous
        messages = [
            *prompt.messages,
            {"role": "assistant", "content": completion},
            {"role": "user", "content": feedback + "\n\n" + again},
        ]
    assert outcome is not None
    outcome.attempts, outcome.generation_s = attempts, generation_s
    return outcome


# -- Settings for small models: edit weighting and the token budget of a design --

_SIZE = re.compile(r"(?<![0-9A-Za-z.])(\d+(?:\.\d+)?)\s*([MmBb])(?![A-Za-z])")


def model_parameters(spec: str) -> float | None:
    """The parameter count a policy spec states, or ``None``: a ``llamacpp:`` alias's own count, else
    the last size in the model's name (``"Qwen2.5-0.5B"``; for ``openai:<model>@<url>`` the model
    name, never the URL), 1.35e8 for the embedded default."""
    from spade_gym.policies import DEFAULT_NAMES, parse_policy_spec
    from spade_gym.policies.gguf import GGUF_MODELS

    try:
        backend, fields = parse_policy_spec(spec)
    except ValueError:
        return None
    name = fields.get("model", "default")
    if backend == "embedded" or name.lower() in DEFAULT_NAMES:
        return 1.35e8
    if backend == "llamacpp" and name.lower() in GGUF_MODELS:
        return GGUF_MODELS[name.lower()].parameters
    found = _SIZE.findall(name.rsplit("/", 1)[-1])
    if not found:
        return None
    number, unit = found[-1]
    return float(number) * (1e6 if unit in "Mm" else 1e9)


def auto_edit_probability(spec: str, device: str | None = None) -> float:
    """The edit probability of ``designer.edit_probability: auto``: :data:`EDIT_PROBABILITY_SMALL` for a
    model under :data:`SMALL_MODEL_PARAMETERS` or on ``device="cpu"`` (a small model rarely writes a
    whole valid program, but a one-knob edit is a few tokens away), else :data:`EDIT_PROBABILITY`."""
    parameters = model_parameters(spec)
    small = device == "cpu" or (parameters is not None and parameters < SMALL_MODEL_PARAMETERS)
    return EDIT_PROBABILITY_SMALL if small else EDIT_PROBABILITY


def _tokenizer_file(spec: str) -> Path | None:
    """The ``tokenizer.json`` of a policy spec when it is on this machine without a download."""
    from spade_gym.policies import DEFAULT_NAMES

    name = spec.strip().removeprefix("vllm:")
    if name.lower() in DEFAULT_NAMES:
        from spade_gym.policies.embedded import embedded_model_dir

        return embedded_model_dir(progress=False) / "tokenizer.json"
    if name.startswith(("openai:", "llamacpp:")):
        return None
    local = Path(name).expanduser()
    if local.is_dir():
        return local / "tokenizer.json" if (local / "tokenizer.json").is_file() else None
    try:
        from huggingface_hub import try_to_load_from_cache
    except ImportError:
        return None
    cached = try_to_load_from_cache(name, "tokenizer.json")
    return Path(cached) if isinstance(cached, str) else None


def design_token_floor(spec: str, registry: Registry | None = None) -> tuple[int, str]:
    """``(tokens, why)``: the fewest new tokens a design needs, the token length of the shortest seed
    program (``registry``, default the bundled library) under the policy's tokenizer, or
    :data:`DESIGN_TOKEN_FLOOR` when that tokenizer is not on this machine. Raises the SpadeError of
    converting the embedded model, as loading it would."""
    try:
        from tokenizers import Tokenizer
    except ImportError:  # the train extra is not installed
        path = None
    else:
        path = _tokenizer_file(spec)
    if path is None or not path.is_file():
        return DESIGN_TOKEN_FLOOR, f"the fixed floor DESIGN_TOKEN_FLOOR (no tokenizer of {spec!r} on this machine)"
    tokenizer = Tokenizer.from_file(str(path))
    if registry is None:
        from spade_gym.registry.gymnasium import bundled_registry_path

        registry = Registry(bundled_registry_path())
    lengths = sorted(
        (len(tokenizer.encode(record.source_path.read_text(encoding="utf-8")).ids), record.env_id)
        for record in registry
    )
    if not lengths:
        return DESIGN_TOKEN_FLOOR, "the fixed floor DESIGN_TOKEN_FLOOR (the seed library is empty)"
    tokens, env_id = lengths[0]
    return tokens, f"the shortest seed program, {env_id}, under the tokenizer of {spec!r}"


# -- One design group as plain calls: propose -> (policy.generate) -> validate_designs -> evaluate_completion --

_DRAW: Any = object()  # propose(document=...) not given: draw one from the documents


def episode_draw(np_random: np.random.Generator) -> tuple[random.Random, int]:
    """One design episode's draws from ``np_random``: ``(rng for propose, Agent sampling seed)``."""
    rng = random.Random(int(np_random.integers(2**63)))
    return rng, rng.randrange(2**62)


def design_draws(seed: int) -> tuple[random.Random, Iterator[int]]:
    """One design group's draws as :class:`SpadeDesignerEnv` makes them (``reset(seed=seed)``, then
    ``reset(options={"prompt": ...})`` per design): ``(rng for propose, endless Agent seeds)``."""
    from gymnasium.utils import seeding

    np_random, _ = seeding.np_random(seed)
    rng, _ = episode_draw(np_random)
    return rng, (episode_draw(np_random)[1] for _ in itertools.count())


def propose(
    rng: random.Random,
    *,
    documents: DocumentSource,
    memory: EnvironmentMemory,
    config: DesignerConfig,
    setting: str | None = None,
    mode: str | None = None,
    document: Document | str | None = _DRAW,
) -> DesignerPrompt:
    """Pose one design prompt, drawing from ``rng`` the setting, mode, memory and parent, and from
    ``documents`` the document, unless given (edit mode falls back to write with an empty memory).
    Raises ValueError for an unknown mode."""
    setting = setting if setting is not None else rng.choice(config.settings)
    if mode is None:
        mode = "edit" if rng.random() < config.edit_probability else "write"
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, got {mode!r}")
    items = memory.select(rng, setting=setting)
    if mode == "edit" and not items:
        mode = "write"
    if document is _DRAW:
        document = documents.sample(1)[0]
    parent = pick_parent(items, rng) if mode == "edit" else None
    return build_prompt(
        document,
        items,
        setting=setting,
        mode=mode,
        parent=parent,
        include_source=config.memory.include_source,
        variant=config.prompt,
    )


def propose_group(
    seed: int,
    *,
    documents: DocumentSource,
    memory: EnvironmentMemory,
    config: DesignerConfig,
    mode: str | None = None,
    setting: str | None = None,
) -> tuple[DesignerPrompt, Iterator[int]]:
    """``(prompt, agent_seeds)`` of one design group as ``SpadeDesignerEnv.reset(seed=seed)`` poses
    it: reseed the documents, then :func:`propose` with :func:`design_draws` (``setting``: given,
    else drawn). ValueError as there."""
    documents.reseed(seed)
    rng, agent_seeds = design_draws(seed)
    prompt = propose(rng, documents=documents, memory=memory, config=config, mode=mode, setting=setting)
    return prompt, agent_seeds


def validate_designs(
    completions: Sequence[str], prompt: DesignerPrompt | None, config: DesignerConfig, executor: Executor | None = None
) -> dict[str, ValidationReport]:
    """Validate a group's programs at once on ``executor``, without the registry (novelty runs later
    in :func:`evaluate_completion`): a report per completion text that holds a program.

    Raises SandboxSetupError when no sandbox worker can start.
    """
    from spade_gym.executor import LocalExecutor

    programs: dict[str, EnvProgram] = {}
    for text in completions:
        if len(text) > MAX_COMPLETION_CHARS or text in programs:
            continue
        extracted = extract_design(text, prompt)
        if extracted.source is not None and not unfilled_placeholders(extracted.source):
            programs[text] = EnvProgram(extracted.source, origin="designer")
    reports = (executor or LocalExecutor()).validate_many(list(programs.values()), config.validation)
    return dict(zip(programs, reports, strict=True))


# -- The gymnasium environment --


class SpadeDesignerEnv(gymnasium.Env[str, str]):
    """The Environment Designer as a one-step gymnasium environment whose reward is regret
    (``spade/Designer-v0``): ``reset`` poses the prompt (``info``: ``messages``, ``provenance``),
    ``step(completion)`` runs :func:`evaluate_completion` and ends the episode.

    ``agent``: a policy or a spec loaded on the first accepted program. ``registry``: a registry or
    folder (created with the seed library if ``seed_library``), ``None``: a temporary one.
    ``documents``: a source or :func:`~spade_gym.documents.load_documents` spec. ``memory`` and
    ``reward`` replace those of ``config``. ``executor``: where validation and regret run.
    Raises DocumentError when the document source holds no usable document.
    """

    metadata: dict[str, Any] = {"render_modes": []}

    def __init__(
        self,
        agent: Policy | str | None = "default",
        registry: Registry | str | Path | None = None,
        documents: DocumentSource | str | None = None,
        config: DesignerConfig | None = None,
        *,
        memory: MemoryConfig | None = None,
        reward: RewardConfig | None = None,
        seed_library: bool = True,
        executor: Executor | None = None,
    ) -> None:
        self.config = config or DesignerConfig()
        self.executor = executor
        self._validated: dict[str, ValidationReport] = {}
        if memory is not None:
            self.config = replace(self.config, memory=memory)
        if reward is not None:
            self.config = replace(self.config, reward=reward)
        self._agent_spec = agent if isinstance(agent, str) else "default"
        self._agent: Policy | None = None if agent is None or isinstance(agent, str) else agent
        self._tmpdir: str | None = None
        if registry is None:
            self._tmpdir = tempfile.mkdtemp(prefix="spade-designer-")
            registry = Path(self._tmpdir) / "registry"
        self.registry = (
            registry if isinstance(registry, Registry) else open_registry(registry, seed_library=seed_library)
        )
        self.documents = (
            documents if documents is not None and not isinstance(documents, str) else load_documents(documents)
        )
        self.memory = EnvironmentMemory(self.registry, self.config.memory)
        self.observation_space = UnicodeText(max_length=MAX_PROMPT_CHARS)
        self.action_space = UnicodeText(max_length=MAX_COMPLETION_CHARS)
        self._prompt: DesignerPrompt | None = None
        self._sampling_seed: int | None = None
        #: The :class:`DesignOutcome` of the last ``step``, with its trajectories; ``None`` before.
        self.last_outcome: DesignOutcome | None = None

    @property
    def agent(self) -> Policy:
        """The Agent policy (loaded on first use from its spec)."""
        if self._agent is None:
            from spade_gym.policies import load_policy

            self._agent = load_policy(self._agent_spec)
        return self._agent

    @property
    def prompt(self) -> DesignerPrompt | None:
        """The prompt of the current episode (``None`` before ``reset`` and after ``step``)."""
        return self._prompt

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start a design episode; ``(prompt_text, info)``.

        ``options``: ``"document"`` (text, a ``Document`` or ``None``), ``"setting"``, ``"mode"``, or
        alone ``"prompt"``: a :class:`DesignerPrompt` to pose again (the G episodes of a GRPO group).
        Raises ValueError for an unknown option, setting or mode.
        """
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = sorted(set(options) - {"document", "setting", "mode", "prompt"})
        if unknown:
            raise ValueError(f"unknown reset option(s) {unknown}; expected 'document', 'setting', 'mode' or 'prompt'")
        if seed is not None:
            self.documents.reseed(seed)
        rng, self._sampling_seed = episode_draw(self.np_random)
        if "prompt" in options:
            if len(options) > 1 or not isinstance(options["prompt"], DesignerPrompt):
                raise ValueError("reset option 'prompt' takes a DesignerPrompt and no other option")
            self._prompt = options["prompt"]
        else:
            self._prompt = propose(rng, documents=self.documents, memory=self.memory, config=self.config, **options)
        info = {"messages": self._prompt.messages, "provenance": self._prompt.provenance()}
        return self._prompt.text[:MAX_PROMPT_CHARS], copy.deepcopy(info)

    def prevalidate(self, completions: Sequence[str]) -> float:
        """Validate several completions at once (:func:`validate_designs`); their later ``step`` runs
        only the novelty check. Returns the wall seconds; SandboxSetupError as there."""
        started = time.perf_counter()
        todo = [text for text in completions if isinstance(text, str) and text not in self._validated]
        self._validated.update(validate_designs(todo, self._prompt, self.config, self.executor))
        return time.perf_counter() - started

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Judge the Designer's completion (:func:`evaluate_completion`): ``(feedback, reward, True, False, info)``.

        Raises gymnasium.error.ResetNeeded outside an episode, TypeError for a non-``str`` action.
        """
        if self._prompt is None:
            raise gymnasium.error.ResetNeeded("call reset() before step(): a design episode is one step")
        if not isinstance(action, str):
            raise TypeError(f"the action must be the Designer's completion text (str), got {type(action).__name__}")
        prompt, self._prompt = self._prompt, None
        outcome = evaluate_completion(
            action,
            prompt,
            registry=self.registry,
            agent=_LazyPolicy(self),
            config=self.config,
            sampling_seed=self._sampling_seed,
            validated=self._validated.pop(action, None),
            executor=self.executor,
        )
        self.last_outcome = outcome
        info = outcome.info()
        info["provenance"] = copy.deepcopy(prompt.provenance())
        return outcome.feedback()[:MAX_PROMPT_CHARS], float(outcome.reward.reward), True, False, info

    def close(self) -> None:
        """Close the registry and delete a temporary one."""
        if self._tmpdir is not None:
            self.registry.close()
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None
        super().close()


class _LazyPolicy:
    """The env's Agent, loaded from its spec only when a program is accepted and its regret measured."""

    name: str  # read through __getattr__ from the loaded Agent
    context_window: int | None

    def __init__(self, env: SpadeDesignerEnv) -> None:
        self._env = env

    def generate(self, prompts: Sequence[Prompt], sampling: SamplingParams | None = None) -> list[Completion]:
        return self._env.agent.generate(prompts, sampling)

    def __getattr__(self, name: str) -> Any:  # name, context_window and backend extras (encode, ...)
        return getattr(self._env.agent, name)
