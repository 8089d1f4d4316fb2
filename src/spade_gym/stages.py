"""The Designer's design path as named stages: extract -> gate -> audit -> regret -> admit -> reward.

Each stage is a plain function of the frozen :class:`Design` and of the frozen result of the stage
before; a stage that refuses the program says why in the report and the path ends there
(docs/DESIGN.md, "The data flow"). :func:`evaluate_completion` runs them in order; :func:`admit` is
also how :func:`register_program` (``spade envs add``, imports) adds a program.
"""

from __future__ import annotations

import random
import re
import time
from dataclasses import dataclass, field, replace
from functools import partial
from typing import TYPE_CHECKING, Annotated, Any, Literal

from annotated_types import Ge, Gt, Le, MinLen

from spade_gym.agent import RolloutConfig
from spade_gym.audit import AuditResult
from spade_gym.audit import audit as audit_env
from spade_gym.chance import swapped_success
from spade_gym.contract import parse_module, rename_env_class, unfilled_placeholders
from spade_gym.design_novelty import copies_prompt_example
from spade_gym.design_prompts import DEFAULT_PROMPT, EDIT_DIVIDER, EDIT_REPLACE, EDIT_SEARCH, PromptVariant
from spade_gym.documents import Document
from spade_gym.errors import Category, DuplicateEnvironment
from spade_gym.memory import MemoryConfig, MemoryItem
from spade_gym.novelty import check_novelty
from spade_gym.options import FINITE, Why, first_refusal, option, option_factory
from spade_gym.policies.base import SamplingParams
from spade_gym.program import SETTINGS, EnvProgram, Setting
from spade_gym.registry.gymnasium import register_record
from spade_gym.registry.records import EnvRecord, EnvStats
from spade_gym.regret import (
    REGRET_EPISODES,
    DesignerReward,
    RegretEstimate,
    RewardConfig,
    designer_reward,
    estimate_regret,
)
from spade_gym.validation import CHECKS, CheckResult, ValidationConfig, ValidationReport, validate

if TYPE_CHECKING:
    from collections.abc import Sequence

    from spade_gym.executor import Executor
    from spade_gym.policies.base import Policy
    from spade_gym.registry.store import Registry

__all__ = [
    "DesignerPrompt",
    "DESIGNER_TEMPERATURE",
    "EDIT_MAX_NEW_TOKENS",
    "EDIT_PROBABILITY",
    "EDIT_PROBABILITY_SMALL",
    "EDIT_TOKEN_FLOOR",
    "WRITE_MAX_NEW_TOKENS",
    "DesignerConfig",
    "EditTokens",
    "Probability",
    "MAX_COMPLETION_CHARS",
    "Audited",
    "Design",
    "DesignOutcome",
    "Extracted",
    "ExtractedProgram",
    "Gated",
    "Measured",
    "admit",
    "apply_edits",
    "audit",
    "edit_blocks",
    "evaluate_completion",
    "extract",
    "extract_design",
    "extract_program",
    "gate",
    "has_edits",
    "provenance",
    "refuse",
    "refuse_audited",
    "register_program",
    "regret",
    "reward",
]

#: Longest completion in characters; a longer one is refused (``TOO_LONG``) unparsed.
MAX_COMPLETION_CHARS = 1_000_000


#: Default chance that a design is an edit of a memory environment (:attr:`DesignerConfig.edit_probability`).
EDIT_PROBABILITY = 0.25
#: The chance ``designer.edit_probability: auto`` gives a small model (see :func:`auto_edit_probability`).
EDIT_PROBABILITY_SMALL = 0.75
#: New tokens of a write-mode design by default (the seed programs are 400-1,400 tokens).
WRITE_MAX_NEW_TOKENS = 1536
#: New tokens of an edit-mode design by default (the cold start's knob variants take 40-120).
EDIT_MAX_NEW_TOKENS = 256
#: The Designer's default sampling temperature: with the embedded model and its cold start 8 of 12
#: edits are valid at 0.5 (``examples/design_rate.py``); larger models do well at 0.7-1.0.
DESIGNER_TEMPERATURE: float = 0.5
#: The fewest new tokens an edit-mode design may have: one short edit block.
EDIT_TOKEN_FLOOR = 32
#: The ranges of :class:`DesignerConfig`'s fields, stated once: a probability, an edit-mode token budget.
Probability = Annotated[float, Ge(0), Le(1)]
EditTokens = Annotated[int, Ge(EDIT_TOKEN_FLOOR), Why("one edit block")]


@dataclass(frozen=True)
class DesignerConfig:
    """The Environment Designer's settings: the ``designer`` section of a self-play config (the fields
    with a help text) and, set from the rest of a run's config or in Python: ``k``, regret episodes
    per arm; ``regret_seeds``, the first of ``k`` fixed regret seeds (``None``: drawn per design);
    ``rollout``, the Agent's regret rollout; ``validation``, the gate's limits; ``feedback``, what a
    repair round is told (``"precise"``: :func:`~spade_gym.repair.repair_feedback`; ``"report"``:
    the gate's report). Raises ValueError naming the field for a value out of its type's range.
    """

    policy: str | None = option(
        None,
        "a Designer model of its own, frozen (inference only; its designs are not trained): a policy spec such as "
        "'llamacpp:qwen2.5-coder-1.5b'; null: policy.spec plays both roles (the paper)",
    )
    prompt: PromptVariant = option(
        DEFAULT_PROMPT,
        "write-mode prompt: 'skeleton' (the setting's Env class to fill), 'example' (one worked example), "
        "'examples' (a worked example of the target setting) or 'fill' (the host writes the skeleton, the model "
        "its holes; needs designer.policy); see docs/designer.md",
    )
    documents: str = option(
        "builtin",
        "document source the designs are grounded on: 'builtin', a .jsonl/.parquet/.txt file or folder, "
        "or 'hf:<dataset>[:<config>]'",
    )
    document_max_tokens: Annotated[int, Ge(1)] = option(1024, "token budget per document shown in the prompt")
    prompts_per_iteration: Annotated[int, Ge(1)] = option(2, "Designer prompts (documents) per iteration")
    group_size: Annotated[int, Ge(2), Why("a group of one design has no relative advantage")] = option(
        4, "designs sampled per prompt, G: one GRPO group, advantages are relative within it"
    )
    max_new_tokens: Annotated[int, Ge(1)] = option(
        WRITE_MAX_NEW_TOKENS,
        "most tokens per design (a whole program): a run refuses a value below the token length of the shortest "
        "seed program under the policy's tokenizer (256 when that tokenizer is not on the machine) before the "
        "model loads",
    )
    edit_max_new_tokens: EditTokens = option(
        EDIT_MAX_NEW_TOKENS,
        "most tokens per edit-mode design: edit blocks against the parent program, not a whole module",
    )
    temperature: Annotated[float, Gt(0), FINITE, Why("a group of greedy samples is degenerate")] = option(
        DESIGNER_TEMPERATURE,
        "sampling temperature of designs (default measured with the embedded model, see docs/learning.md; larger models "
        "do well at 0.7-1.0)",
    )
    top_p: Annotated[float, Gt(0), Le(1)] = option(1.0, "nucleus sampling mass of designs")
    settings: Annotated[tuple[Setting, ...], MinLen(1)] = option(
        SETTINGS, "target settings, drawn uniformly per prompt"
    )
    edit_probability: Probability | Literal["auto"] = option(
        "auto",
        "chance that a prompt asks to edit a memory environment instead of writing a new one; 'auto': "
        "0.75 for a small model (under 1.5B parameters by its name, the embedded default, or policy.device cpu), "
        "whose whole programs from a document are rarely valid while a variant of a shown program is a few tokens "
        "away, else 0.25 (spade_gym.designer.auto_edit_probability)",
    )
    memory_k: Annotated[int, Ge(0)] = option(
        MemoryConfig.k, "earlier environments shown in the prompt (the environment memory; 0: off)"
    )
    include_source: bool = option(False, "show the source of every memory environment (longer prompts)")
    reward: RewardConfig = option_factory(
        RewardConfig, "the Designer's reward: penalties, thresholds and shaping (spade_gym.regret.RewardConfig)"
    )
    # set from the rest of a run's config, or in Python (no help text: not config keys)
    k: Annotated[int, Ge(1)] = REGRET_EPISODES
    regret_seeds: int | None = None
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    validation: ValidationConfig = field(default_factory=ValidationConfig)
    feedback: Literal["precise", "report"] = "precise"

    def __post_init__(self) -> None:
        refused = first_refusal(self)
        if refused is not None:
            name, value, expected = refused
            raise ValueError(f"DesignerConfig.{name} must be {expected}, got {value!r}")
        if self.rollout.sampling.greedy:
            raise ValueError("DesignerConfig.rollout.sampling.temperature must be > 0: regret needs sampling")

    @property
    def sampling(self) -> SamplingParams:
        """The Designer's sampling in write mode: ``temperature``, ``top_p``, ``max_new_tokens``."""
        return SamplingParams(temperature=self.temperature, top_p=self.top_p, max_new_tokens=self.max_new_tokens)

    @property
    def memory(self) -> MemoryConfig:
        """The environment memory shown in a prompt: ``memory_k`` environments, ``include_source``."""
        return MemoryConfig(k=self.memory_k, include_source=self.include_source)

    @property
    def edit_chance(self) -> float:
        """``edit_probability`` as a number: ``"auto"`` not resolved for a policy is :data:`EDIT_PROBABILITY`."""
        return EDIT_PROBABILITY if self.edit_probability == "auto" else float(self.edit_probability)

    def sampling_for(self, mode: str) -> SamplingParams:
        """``sampling``, with ``edit_max_new_tokens`` new tokens in edit mode."""
        if mode == "edit":
            return replace(self.sampling, max_new_tokens=self.edit_max_new_tokens)
        return self.sampling


@dataclass(frozen=True)
class DesignerPrompt:
    """One Designer prompt (system and user chat ``messages``) and what went into it: the target
    ``setting`` (``None``: the Designer chooses); in edit mode the ``parent`` env id and
    ``parent_source``, the program the edit blocks apply to."""

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


@dataclass(frozen=True)
class Design:
    """One Designer completion to judge, and where: the arguments of :func:`evaluate_completion`."""

    completion: str
    prompt: DesignerPrompt | None
    registry: Registry
    agent: Policy | None
    config: DesignerConfig
    sampling_seed: int | None = None
    validated: ValidationReport | None = None
    executor: Executor | None = None


@dataclass
class DesignOutcome:
    """Everything one design produced: the (last) completion, its program, report and reward; for an
    accepted program the regret ``estimate`` and ``record``; repair ``rounds`` and failed ``attempts``;
    wall seconds per stage."""

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
        """The outcome as JSON values (the ``info`` of :meth:`~spade_gym.designer.SpadeDesignerEnv.step`)."""
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


def refuse(report: ValidationReport, check: str, category: str, message: str) -> None:
    """Turn an accepted report into a refusal by ``check`` (found after the gate ran)."""
    result = report.check(check)
    result.passed, result.category, result.message = False, category, message
    report.accepted, report.category = False, category


# -- Stage 1: extract --

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
    """The environment program of a completion: the last fenced block defining ``class Env`` (an
    unclosed last fence runs to the end); else unfenced code from the first code-like line before
    ``class Env``, less trailing lines that do not parse; else the last block (or the whole text)
    whose one class defines ``reset`` and ``step``, renamed ``Env``; else no program."""
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
    while lines and parse_module("\n".join(lines)) is None:
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
    """Apply the edit blocks (aider's SEARCH/REPLACE format) of a completion to ``parent``, in order:
    the first occurrence of the SEARCH lines, matched exactly or else line by line up to surrounding
    whitespace (the replacement re-indented), is replaced. Returns ``source=None`` and the problem for
    no block, a malformed or unclosed one, an empty or missing SEARCH, or edits that change nothing."""
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


@dataclass(frozen=True)
class Extracted:
    """What :func:`extract` found: the program ``source``, how (``note``, ``edited``), or the ``refusal``."""

    source: str | None
    note: str | None = None
    edited: bool = False
    refusal: ValidationReport | None = None


def extract(design: Design) -> Extracted:
    """Stage 1: the program a completion designs (:func:`extract_design`); refused as ``TOO_LONG``,
    ``NO_CODE`` or ``UNFILLED`` (the skeleton's placeholders left in it)."""
    completion, prompt = design.completion, design.prompt
    if isinstance(completion, str) and len(completion) > MAX_COMPLETION_CHARS:
        problem = f"the completion has {len(completion):,} characters; at most {MAX_COMPLETION_CHARS:,} are read"
        found, category = ExtractedProgram(None, problem), Category.TOO_LONG
    else:
        found, category = extract_design(completion, prompt), Category.NO_CODE
    if found.source is None:
        return Extracted(None, refusal=_refusal("", category, found.problem or "no program"))
    left = unfilled_placeholders(found.source)
    if left:  # the skeleton copied, not filled
        lines = ", ".join(str(p.line) for p in left[:8])
        message = (
            f"the skeleton's placeholders are still in the program (lines {lines}): "
            "write your own code and text in their place"
        )
        return Extracted(found.source, refusal=_refusal(EnvProgram(found.source).id, Category.UNFILLED, message))
    return Extracted(found.source, found.note, _edits_parent(completion, prompt))


def _refusal(program_id: str, category: str, message: str) -> ValidationReport:
    """The report of a program refused before the gate: its static check failed with ``category``."""
    report = ValidationReport(program_id=program_id, checks=[CheckResult(name) for name in CHECKS])
    refuse(report, "static", category, message)
    return report


# -- Stage 2: gate --


@dataclass(frozen=True)
class Gated:
    """What :func:`gate` judged: the ``program``, its ``report`` (later stages refuse in it), wall ``seconds``."""

    program: EnvProgram
    report: ValidationReport
    seconds: float


def gate(design: Design, extracted: Extracted) -> Gated:
    """Stage 2: the validation gate against the registry (only novelty when ``design.validated`` is the
    program's report); a copy of a program the prompt showed is ``DUPLICATE``, a setting other than
    the prompt's ``WRONG_SETTING``."""
    assert extracted.source is not None
    config, started = design.config, time.perf_counter()
    program = EnvProgram(extracted.source, origin="designer")
    if design.validated is not None and design.validated.program_id == program.id:
        report = check_novelty(design.validated, program, design.registry, config.validation)
    else:
        report = validate(program, config.validation, registry=design.registry)
    seconds = time.perf_counter() - started
    if report.accepted:  # the programs the prompt showed count as registered
        copy_of = copies_prompt_example(program, config.validation)
        if copy_of is not None:
            refuse(report, "novelty", Category.DUPLICATE, copy_of)
        seconds = time.perf_counter() - started
    prompt = design.prompt
    if report.accepted and prompt is not None and prompt.setting and report.setting != prompt.setting:
        refuse(
            report,
            "static",
            Category.WRONG_SETTING,
            f"the task asked for a {prompt.setting} environment; this one declares setting = {report.setting!r}",
        )
    return Gated(program, report, seconds)


# -- Stage 3: audit --


@dataclass(frozen=True)
class Audited:
    """What :func:`audit` played on (``env``, the regret ``seeds``, the seeded ``rollout``) and when."""

    env: Any
    seeds: tuple[int, ...]
    rollout: RolloutConfig
    started: float
    seconds: float


def audit(design: Design, gated: Gated) -> Audited:
    """Stage 3: the gate's checks again on the regret seeds (:func:`~spade_gym.audit.audit`):
    ``config.regret_seeds`` on, else ``k`` drawn from ``design.sampling_seed`` (or the system's randomness)."""
    config, started = design.config, time.perf_counter()
    rollout = config.rollout
    if rollout.sampling.seed is None and design.sampling_seed is not None:
        rollout = replace(rollout, sampling=replace(rollout.sampling, seed=design.sampling_seed))
    if config.regret_seeds is not None:
        seeds = list(range(config.regret_seeds, config.regret_seeds + config.k))
    else:
        draw = random.Random(f"regret-{design.sampling_seed}") if design.sampling_seed is not None else None
        seeds = (draw or random.SystemRandom()).sample(range(2**31), config.k)
    env = gated.program if design.executor is None else design.executor.env(gated.program)
    checked = audit_env(env, seeds, config.validation, max_turns=rollout.max_turns)
    refuse_audited(gated.report, checked, "the regret seeds")
    return Audited(env, tuple(seeds), rollout, started, time.perf_counter() - started)


def refuse_audited(report: ValidationReport, checked: AuditResult, seeds: str) -> None:
    """Refuse ``report`` for a failed audit on ``seeds`` (words for the message); a passed one is a no-op."""
    if checked.passed:
        return
    assert checked.category is not None
    checks: dict[str, str] = {
        Category.TRIVIAL: "non_triviality",
        Category.HINT_LEAK: "non_triviality",
        Category.ORACLE_FAILED: "feasibility",
    }
    check = checks.get(checked.category, "contract")
    refuse(report, check, checked.category, f"audit on {seeds}: {checked.message}")


# -- Stage 4: regret --


@dataclass(frozen=True)
class Measured:
    """What :func:`regret` measured: the ``estimate`` and the wall ``seconds`` of the audit and it."""

    estimate: RegretEstimate
    seconds: float


def regret(design: Design, gated: Gated, audited: Audited) -> Measured:
    """Stage 4: the Agent's episodes on the audited seeds (:func:`~spade_gym.regret.estimate_regret`);
    a program that breaks in one of them is refused. Raises ValueError without an Agent."""
    if design.agent is None:
        raise ValueError("an accepted program needs an Agent policy to estimate its regret")
    estimate = estimate_regret(audited.env, design.agent, design.config.k, audited.seeds, config=audited.rollout)
    measured = Measured(estimate, time.perf_counter() - audited.started)
    played = (*estimate.hint, *estimate.nohint, *estimate.hint_only)
    failed = [(t.seed, t.error) for t in played if t.error is not None]
    if failed:  # a program that breaks on seeds the gate did not play is not registered
        seed, error = failed[0]
        category = str(error.get("category") or Category.ENV_EXCEPTION)
        message = (
            f"{len(failed)} of {len(played)} Agent episodes failed (seed {seed}: {error.get('message', '')[:300]})"
        )
        refuse(gated.report, "contract", category, message)
    return measured


# -- Stage 5: admit --


def admit(
    program: EnvProgram,
    report: ValidationReport,
    registry: Registry,
    *,
    tags: Sequence[str] = (),
    document: dict[str, Any] | None = None,
    parents: Sequence[str] = (),
    estimate: RegretEstimate | None = None,
) -> EnvRecord | None:
    """Stage 5, the one way an accepted program enters a registry: add it with its provenance (and an
    ``estimate``'s regret) and register it with Gymnasium as ``spade/<Name>-v<k>``. An exact duplicate
    added since the novelty check is refused in ``report`` (``DUPLICATE``) and ``None`` returned.
    Raises ValueError for a report that is not accepted, RegistryError when the entry cannot be written.
    """
    if not report.accepted:
        raise ValueError(f"only an accepted program is admitted; this report says {report.category}")
    assert report.name and report.setting and report.max_turns
    validation = report.to_dict() if estimate is None else {**report.to_dict(), "regret": estimate.summary()}
    stats = None
    if estimate is not None:
        stats = EnvStats(
            episodes=len(estimate.hint) + len(estimate.nohint) + len(estimate.hint_only),
            mean_return_hint=estimate.mean_hint,
            mean_return_nohint=estimate.mean_nohint,
            regret=estimate.regret,
        )
    try:
        record = registry.add(
            program,
            name=report.name,
            setting=report.setting,
            max_turns=report.max_turns,
            description=report.description or "",
            tags=tuple(tags),
            document=document,
            parents=tuple(parents),
            validation=validation,
            stats=stats,
            allow_near_duplicates=True,  # the gate judged near duplicates by behaviour; exact ones are refused
        )
    except DuplicateEnvironment as exc:  # added by another writer since the novelty check
        refuse(report, "novelty", Category.DUPLICATE, exc.message)
        return None
    register_record(record)
    return record


def provenance(design: Design, extracted: Extracted) -> dict[str, Any]:
    """What :func:`admit` stores of a design's origin: tags, the prompt's provenance, and the parent
    of a variant (only when edit blocks were applied to it)."""
    prompt = design.prompt
    if prompt is None:
        return {"tags": ("designer",), "document": None, "parents": ()}
    edited = extracted.edited
    return {
        "tags": ("designer", "edit" if edited else "write"),
        "document": prompt.provenance(),
        "parents": (prompt.parent,) if prompt.parent and edited else (),
    }


# -- Stage 6: reward --


def reward(
    design: Design, program: EnvProgram | None = None, measured: Measured | None = None, *, duplicate: bool = False
) -> DesignerReward:
    """Stage 6: the Designer's reward (:func:`~spade_gym.regret.designer_reward`): ``duplicate`` or
    ``invalid`` for a refused program; for an admitted ``program`` from its regret, with the success
    of swapped answers (:func:`~spade_gym.chance.swapped_success`) as chance level when asked for."""
    config = design.config.reward
    if program is None or measured is None:
        return designer_reward(False, duplicate=duplicate, config=config)
    chance = None
    if config.shaping != "none" and config.above_chance:
        chance = swapped_success(program, measured.estimate.nohint, max_turns=design.config.rollout.max_turns)
    return designer_reward(True, measured.estimate, config=config, chance=chance)


# -- The path --


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
    """Judge one Designer completion, stage by stage; the first refusal ends it. ``validated``: its
    report from :func:`~spade_gym.designer.validate_designs`; ``sampling_seed``: the Agent's, when
    ``config.rollout`` has none. A bad completion gets a report and a reward, never an exception.

    Raises ValueError for an accepted program and ``agent is None``; SandboxSetupError when no
    sandbox worker can start and PolicyError when the Agent policy fails.
    """
    if config is None:
        config = DesignerConfig()
    design = Design(completion, prompt, registry, agent, config, sampling_seed, validated, executor)
    extracted = extract(design)
    if extracted.refusal is not None:
        return DesignOutcome(completion, extracted.source, extracted.refusal, reward(design))
    gated = gate(design, extracted)
    report = gated.report
    outcome = partial(
        DesignOutcome, completion, extracted.source, report, note=extracted.note, validation_s=gated.seconds
    )
    if not report.accepted:
        return outcome(reward(design, duplicate=report.category == Category.DUPLICATE))
    if agent is None:
        raise ValueError("an accepted program needs an Agent policy to estimate its regret")
    audited = audit(design, gated)
    if not report.accepted:
        return outcome(reward(design), regret_s=audited.seconds)
    measured = regret(design, gated, audited)
    outcome = partial(outcome, estimate=measured.estimate, regret_s=measured.seconds)
    if not report.accepted:  # an Agent episode failed
        return outcome(reward(design))
    started = time.perf_counter()
    record = admit(gated.program, report, registry, estimate=measured.estimate, **provenance(design, extracted))
    outcome = partial(outcome, record=record, registry_s=time.perf_counter() - started)
    if record is None:  # a copy of a program added since the gate
        return outcome(reward(design, duplicate=True))
    return outcome(reward(design, gated.program, measured))


def register_program(
    program: EnvProgram | str,
    registry: Registry,
    *,
    config: ValidationConfig | None = None,
    tags: Sequence[str] = (),
    document: dict[str, Any] | None = None,
    parents: Sequence[str] = (),
) -> tuple[ValidationReport, EnvRecord | None]:
    """Validate ``program`` (or its source) against ``registry``, audit it on ``REGRET_EPISODES``
    unseen seeds and :func:`admit` it if both pass. Returns ``(report, record)``, ``record`` ``None``
    when refused."""
    if isinstance(program, str):
        program = EnvProgram(program)
    report = validate(program, config, registry=registry)
    if not report.accepted:
        return report, None
    seeds = random.SystemRandom().sample(range(2**31), REGRET_EPISODES)
    refuse_audited(report, audit_env(program, seeds, config), "unseen seeds")
    if not report.accepted:
        return report, None
    return report, admit(program, report, registry, tags=tags, document=document, parents=parents)
