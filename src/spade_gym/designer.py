"""The Environment Designer: prompts, the draws of a design, repair rounds, and ``SpadeDesignerEnv``.

One design: :func:`build_prompt` (``"write"`` a new environment, or ``"edit"`` a memory one, ACCEL's
level editing, Parker-Holder et al. 2022) -> ``policy.generate`` -> :func:`evaluate_completion`, the
stages of :mod:`spade_gym.stages`. :func:`design` adds repair rounds; :class:`SpadeDesignerEnv`
(``spade/Designer-v0``) is the one-step gymnasium form.
"""

from __future__ import annotations

import copy
import random
import re
import shutil
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium
from gymnasium.utils import seeding

from spade_gym.contract import unfilled_placeholders
from spade_gym.design_prompts import (
    DEFAULT_PROMPT,
    DESIGNER_EDIT_SYSTEM_PROMPT,
    DESIGNER_SYSTEM_PROMPT,
    EDIT_DIVIDER,
    EDIT_REPLACE,
    EDIT_SEARCH,
    EDIT_TASK,
    PROMPT_VARIANTS,
    system_prompt,
    write_task,
)
from spade_gym.documents import Document, DocumentSource, load_documents, make_document
from spade_gym.fill import fill_designs
from spade_gym.ladder import library_ladder
from spade_gym.memory import EnvironmentMemory, MemoryConfig, MemoryItem, format_memory, pick_parent, read_source
from spade_gym.policies.base import Completion, Policy, Prompt, SamplingParams
from spade_gym.program import OUT_OF_REACH_BELOW, SETTINGS, EnvProgram, knobs
from spade_gym.registry.gymnasium import open_registry
from spade_gym.registry.store import Registry
from spade_gym.regret import RewardConfig
from spade_gym.repair import repair_feedback, same_program
from spade_gym.spaces import UnicodeText
from spade_gym.stages import (
    DESIGNER_TEMPERATURE,
    EDIT_MAX_NEW_TOKENS,
    EDIT_PROBABILITY,
    EDIT_PROBABILITY_SMALL,
    EDIT_TOKEN_FLOOR,
    MAX_COMPLETION_CHARS,
    WRITE_MAX_NEW_TOKENS,
    DesignerConfig,
    DesignerPrompt,
    DesignOutcome,
    ExtractedProgram,
    apply_edits,
    edit_blocks,
    evaluate_completion,
    extract_design,
    extract_program,
    has_edits,
)
from spade_gym.validation import ValidationReport

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
    "MAX_COMPLETION_CHARS",
    "MODES",
    "DesignDraw",
    "DesignOutcome",
    "DesignerConfig",
    "DesignerPrompt",
    "ExtractedProgram",
    "GroupDraws",
    "SpadeDesignerEnv",
    "auto_edit_probability",
    "build_prompt",
    "generate_designs",
    "design_token_floor",
    "design",
    "draw_design",
    "draw_group",
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
    "validate_designs",
]

#: The Designer's two modes: a new environment from the document, or a variant of a memory one.
MODES = ("write", "edit")
#: Parameters below which ``auto`` counts a model as small.
SMALL_MODEL_PARAMETERS = 1.5e9
#: The fewest new tokens of a design when no tokenizer can measure the seed programs (about the worked example's).
DESIGN_TOKEN_FLOOR = 256
#: Longest prompt in characters (a longer completion than :data:`MAX_COMPLETION_CHARS` is refused
#: unparsed, ``TOO_LONG``).
MAX_PROMPT_CHARS = 200_000


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
    source and its setting wins. Raises ValueError for an unknown ``mode``, ``setting`` or
    ``variant``, or edit mode with an empty memory; TypeError for another type of ``document``.
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
        hinted = parent.record.stats.mean_return_hint
        direction = "easier" if hinted is not None and hinted < OUT_OF_REACH_BELOW else "harder"
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
        else:
            done = policy.generate([prompt.messages], sampling)
        out += [replace(c, prompt_index=index) for c in done]
    return out


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

    A rejected attempt is answered with its feedback (``config.feedback``; only the latest attempt
    stays in the conversation). ``agent`` defaults to ``policy``. Returns the last attempt's outcome,
    each failed attempt in ``attempts`` (category, feedback, ``"same"``: a resubmitted program).
    Raises PolicyError, SandboxSetupError; ValueError for ``repairs < 0``.
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
    the last size in the model's name (``"Qwen2.5-0.5B"``, never the URL), 1.35e8 for the embedded one."""
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
    """``designer.edit_probability: auto``: :data:`EDIT_PROBABILITY_SMALL` for a model under
    :data:`SMALL_MODEL_PARAMETERS` or on ``device="cpu"``, else :data:`EDIT_PROBABILITY`."""
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
    """``(tokens, why)``: the token length of the shortest seed program (``registry``, default the
    bundled library) under the policy's tokenizer, or :data:`DESIGN_TOKEN_FLOOR` when that tokenizer
    is not on this machine. Raises the SpadeError of converting the embedded model."""
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


# -- The draws of a design --

_DRAW: Any = object()  # propose(document=...) not given: draw one from the documents


@dataclass(frozen=True)
class DesignDraw:
    """What one design episode draws: the ``prompt`` and ``agent_seed``, the Agent's sampling seed
    for the regret episodes of the design that answers it."""

    prompt: DesignerPrompt
    agent_seed: int


def draw_design(
    np_random: np.random.Generator,
    *,
    documents: DocumentSource,
    memory: EnvironmentMemory,
    config: DesignerConfig,
    prompt: DesignerPrompt | None = None,
    setting: str | None = None,
    mode: str | None = None,
    document: Document | str | None = _DRAW,
) -> DesignDraw:
    """One design episode's draws, in this order: from ``np_random`` the seed of a ``random.Random``;
    from that the Agent's seed, then (unless ``prompt`` is posed again) :func:`propose`'s. Both
    :meth:`SpadeDesignerEnv.reset` and :func:`draw_group` draw with it. ValueError as :func:`propose`."""
    rng = random.Random(int(np_random.integers(2**63)))
    agent_seed = rng.randrange(2**62)
    if prompt is None:
        prompt = propose(
            rng, documents=documents, memory=memory, config=config, setting=setting, mode=mode, document=document
        )
    return DesignDraw(prompt, agent_seed)


@dataclass(frozen=True)
class GroupDraws:
    """What one design group draws from its ``seed``: the ``prompt`` and one Agent seed per design."""

    seed: int
    prompt: DesignerPrompt
    agent_seeds: tuple[int, ...]


def draw_group(
    seed: int,
    size: int,
    *,
    documents: DocumentSource,
    memory: EnvironmentMemory,
    config: DesignerConfig,
    mode: str | None = None,
    setting: str | None = None,
) -> GroupDraws:
    """The draws of ``size`` designs of one prompt from ``seed``, the same as :class:`SpadeDesignerEnv`
    makes for ``reset(seed=seed)`` and then ``reset(options={"prompt": prompt})`` per design.
    ValueError as :func:`propose`."""
    documents.reseed(seed)
    np_random, _ = seeding.np_random(seed)
    draw = partial(draw_design, np_random, documents=documents, memory=memory, config=config)
    prompt = draw(setting=setting, mode=mode).prompt
    return GroupDraws(seed, prompt, tuple(draw(prompt=prompt).agent_seed for _ in range(size)))


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
    ``documents`` the document, unless given (edit mode with an empty memory writes). ValueError for
    an unknown mode."""
    setting = setting if setting is not None else rng.choice(config.settings)
    if mode is None:
        mode = "edit" if rng.random() < config.edit_chance else "write"
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


def validate_designs(
    completions: Sequence[str], prompt: DesignerPrompt | None, config: DesignerConfig, executor: Executor | None = None
) -> dict[str, ValidationReport]:
    """Validate a group's programs at once on ``executor``, without the registry (novelty runs later):
    a report per completion text that holds a program. Raises SandboxSetupError."""
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
    (``spade/Designer-v0``): ``reset`` poses the prompt, ``step(completion)`` judges it.

    ``agent``: a policy or a spec loaded on the first accepted program. ``registry``: a registry or
    folder, ``None``: a temporary one. ``documents``: a source or a
    :func:`~spade_gym.documents.load_documents` spec. ``memory`` and ``reward`` replace those of
    ``config``. Raises DocumentError when the document source holds no usable document.
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
        if memory is not None:  # the whole memory config (its mix too); the prompt reads k and include_source
            self.config = replace(self.config, memory_k=memory.k, include_source=memory.include_source)
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
        self.memory = EnvironmentMemory(self.registry, memory or self.config.memory)
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
        """Start a design episode; ``(prompt_text, info)``. ``options``: ``"document"``, ``"setting"``,
        ``"mode"``, or alone ``"prompt"``: a :class:`DesignerPrompt` to pose again (a GRPO group).
        Raises ValueError for an unknown option, setting or mode."""
        super().reset(seed=seed)
        options = dict(options or {})
        unknown = sorted(set(options) - {"document", "setting", "mode", "prompt"})
        if unknown:
            raise ValueError(f"unknown reset option(s) {unknown}; expected 'document', 'setting', 'mode' or 'prompt'")
        if "prompt" in options and (len(options) > 1 or not isinstance(options["prompt"], DesignerPrompt)):
            raise ValueError("reset option 'prompt' takes a DesignerPrompt and no other option")
        if seed is not None:  # super().reset seeded self.np_random: the draws of draw_group(seed, ...)
            self.documents.reseed(seed)
        draw = draw_design(self.np_random, documents=self.documents, memory=self.memory, config=self.config, **options)
        self._prompt, self._sampling_seed = draw.prompt, draw.agent_seed
        info = {"messages": self._prompt.messages, "provenance": self._prompt.provenance()}
        return self._prompt.text[:MAX_PROMPT_CHARS], copy.deepcopy(info)

    def prevalidate(self, completions: Sequence[str]) -> float:
        """Validate several completions at once (:func:`validate_designs`); returns the wall seconds."""
        started = time.perf_counter()
        todo = [text for text in completions if isinstance(text, str) and text not in self._validated]
        self._validated.update(validate_designs(todo, self._prompt, self.config, self.executor))
        return time.perf_counter() - started

    def step(self, action: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Judge the Designer's completion: ``(feedback, reward, True, False, info)``. Raises
        gymnasium.error.ResetNeeded outside an episode, TypeError for a non-``str`` action."""
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
