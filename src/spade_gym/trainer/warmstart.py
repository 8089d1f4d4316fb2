"""The cold start: a short supervised stage that teaches a small model the formats before self-play.

Self-play carries a signal only once the policy writes what the loop parses (the Agent's actions,
the Designer's fenced program), so a small supervised stage on formatted examples comes first, as in
DeepSeek-R1's cold-start SFT (DeepSeek-AI 2025, section 2.3.1), Absolute Zero (Zhao et al. 2025) and
R-Zero (Huang et al. 2025); see docs/DESIGN.md, "Learning at small scale".

Data (:func:`build_dataset`), from the seed library minus ``run.held_out_envs``: the turns of the
episodes each environment's ``oracle()`` solves, prompted as a rollout prompts the Agent; Designer
prompts whose target is a seed program (write mode) or the edit blocks to a :func:`variants` of it
that the gate accepts (edit mode). Training (:func:`run_warmstart`): LoRA adapters (``policy.lora``,
or :data:`WARMSTART_LORA` merged afterwards), AdamW on the token-mean NLL of the targets, cached by
content hash (:func:`warmstart_hash`) and resumable every ``warmstart.save_every`` steps.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import hashlib
import io
import json
import math
import random
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from spade_gym.agent import agent_prompt, extract_action, start_episode
from spade_gym.designer import build_prompt, edit_blocks, extract_design
from spade_gym.errors import SpadeError
from spade_gym.files import replace_atomically
from spade_gym.ladder import knob_variant
from spade_gym.policies.scoring import CHECKPOINT_TOKENS
from spade_gym.program import SUCCESS_RETURN, knob_nodes, knobs
from spade_gym.registry.gymnasium import bundled_registry_path
from spade_gym.registry.records import EnvRecord
from spade_gym.registry.store import Registry
from spade_gym.trainer.config import ConfigError, SelfPlayConfig
from spade_gym.trainer.state import load_trainable_state, trainable_state
from spade_gym.validation import ValidationConfig

__all__ = [
    "WARMSTART_LORA",
    "SFTSample",
    "WarmstartData",
    "WarmstartResult",
    "build_dataset",
    "check_chat_template",
    "check_warmstart_config",
    "format_action",
    "run_warmstart",
    "training_pool",
    "variants",
    "warmstart_dir",
    "warmstart_hash",
]

#: Cold-start LoRA adapters of a run that trains all weights (``policy.lora: null``), merged afterwards.
WARMSTART_LORA: dict[str, Any] = {"r": 16, "lora_alpha": 32, "target_modules": ["q_proj", "k_proj", "v_proj", "o_proj"]}

#: Format version of the cache entries (part of the content hash).
_CACHE_VERSION = 1
_RESULT, _ADAPTER, _STATE, _DATA = "result.json", "adapter.pt", "state.pt", "data.json"
#: Samples of each role whose loss is reported before and after the stage (the first ones).
_EVAL_SAMPLES = {"agent": 6, "designer": 1}
_MAX_GRAD_NORM = 1.0


@dataclass(frozen=True)
class SFTSample:
    """One supervised sample (the loss is on ``target_ids``, ending with the end-of-turn token);
    ``role`` ``"agent"``/``"designer"``, ``kind`` ``"turn<k>[+hint]"`` or ``"write"``/``"edit"``."""

    role: str
    prompt_ids: tuple[int, ...]
    target_ids: tuple[int, ...]
    target: str
    env: str
    kind: str


@dataclass
class WarmstartData:
    """The cold-start samples (Agent first), the pool's environment names, and the counts of
    left-out items by reason (``"too_long"``, ``"oracle_failed"``, ...)."""

    samples: list[SFTSample]
    envs: list[str]
    skipped: dict[str, int] = field(default_factory=dict)

    def of(self, role: str) -> list[SFTSample]:
        return [s for s in self.samples if s.role == role]

    def digest(self) -> str:
        """SHA-256 hex of the samples' roles, token ids and sources (the dataset's content)."""
        h = hashlib.sha256()
        for s in self.samples:
            h.update(json.dumps([s.role, s.env, s.kind, s.prompt_ids, s.target_ids]).encode())
        return h.hexdigest()


def format_action(setting: str, action: str) -> str:
    """``<answer>{action}</answer>``, or for a tool call ``<tool_call>{json}</tool_call>`` (JSON as
    :func:`~spade_gym.agent.extract_action` re-serialises it): the format the runner extracts."""
    if setting == "tool_use":
        try:
            call = json.loads(action)
        except ValueError:
            call = None
        if isinstance(call, dict) and isinstance(call.get("name"), str):
            return f"<tool_call>{json.dumps(call, ensure_ascii=False)}</tool_call>"
    return f"<answer>{action}</answer>"


def _library(registry: Registry | None) -> AbstractContextManager[Registry]:
    """``registry``, or the bundled seed library (closed after the block)."""
    return nullcontext(registry) if registry is not None else Registry(bundled_registry_path())


def training_pool(config: SelfPlayConfig, registry: Registry | None = None) -> list[EnvRecord]:
    """The run's training pool, sorted by name: ``registry`` (default: the seed library) minus
    ``run.held_out_envs``, only ``run.seed_tags`` when given; ConfigError when it is empty."""
    held, tags = set(config.run.held_out_envs), set(config.run.seed_tags)
    with _library(registry) as reg:
        pool = sorted((r for r in reg if r.name not in held and (not tags or tags & set(r.tags))), key=lambda r: r.name)
    if not pool:
        raise ConfigError(
            f"config key 'run.held_out_envs' holds every environment of the seed library ({len(held)}) that "
            f"run.seed_tags {sorted(tags) or '(all)'} selects: the cold start (warmstart.enabled) needs at least "
            "one training environment with an oracle; hold fewer out",
            key="run.held_out_envs",
        )
    return pool


def check_warmstart_config(config: SelfPlayConfig) -> None:
    """The cheap checks of the cold start, before any model loads: ConfigError for an empty pool or
    a designer-off baseline whose ``run.fixed_pool`` is not the seed library."""
    if config.run.designer == "off" and config.run.fixed_pool != "seed-library":
        raise ConfigError(
            f"config key 'run.fixed_pool' = {config.run.fixed_pool!r} with warmstart.enabled: the cold start "
            "learns from the oracles of the seed library (minus run.held_out_envs), the pool both arms share; "
            "set run.fixed_pool: seed-library or warmstart.enabled: false",
            key="run.fixed_pool",
        )
    training_pool(config)


def check_chat_template(tokenizer: Any, spec: str = "default") -> None:
    """ConfigError naming ``policy.spec`` when the tokenizer's chat template cannot render a system
    message (the roles' instructions are system messages)."""
    marker = "SPADE-SYSTEM-ROLE-CHECK-7f3a"
    cause: Exception | None = None
    try:
        text = tokenizer.apply_chat_template(
            [{"role": "system", "content": marker}, {"role": "user", "content": "hi"}],
            tokenize=False,
            add_generation_prompt=True,
        )
        problem = "" if marker in str(text) else "drops the system message"
    except Exception as exc:
        cause, problem = exc, f"cannot render a system message ({type(exc).__name__}: {exc})"
    if problem:
        raise ConfigError(
            f"config key 'policy.spec' = {spec!r}: the model's chat template {problem}; the cold start and "
            "self-play need a template with a system role",
            key="policy.spec",
        ) from cause


def _encode(policy: Any, messages: list[dict[str, str]], target: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(prompt ids, target ids + end of turn)`` as the policy tokenizes them."""
    prompt = tuple(policy.encode(messages))
    ids = policy.tokenizer(target, add_special_tokens=False)["input_ids"]
    return prompt, (*(int(t) for t in ids), int(policy.eos_token_ids[0]))


def _agent_samples(
    config: SelfPlayConfig, policy: Any, pool: Sequence[EnvRecord], skipped: dict[str, int], tick: Callable[[], None]
) -> list[SFTSample]:
    """One sample per turn of the oracle's solved episodes (every other one hinted), drawn
    round-robin over the environments, first turns first."""
    from spade_gym.env import SandboxedEnv

    ws = config.warmstart
    per_env: dict[str, list[SFTSample]] = {}
    for record in pool:
        tick()
        try:
            env = SandboxedEnv(record.program())
        except SpadeError:
            skipped["env_failed"] = skipped.get("env_failed", 0) + 1
            continue
        got: list[SFTSample] = []
        with env:
            limit = min(env.max_turns, config.agent.max_turns or env.max_turns)
            head = agent_prompt(env.setting, env.description, env.tools)  # as a rollout sends it
            for j in range(ws.agent_seeds):
                hint = j % 2 == 1
                episode: list[SFTSample] = []
                try:
                    observation = start_episode(env, ws.seed * 1_000_003 + j, hint)
                    messages = [*head, {"role": "user", "content": observation}]
                    total = 0.0
                    # the oracle plays the whole episode (so its success is known); the turns the
                    # Agent gets (agent.max_turns) are the samples
                    for turn in range(env.max_turns):
                        action = env.oracle()
                        target = format_action(env.setting, action)
                        parsed = extract_action(target, env.setting)
                        if parsed.action is None or (parsed.action != action and env.setting != "tool_use"):
                            total = -1.0
                            break
                        if turn < limit:
                            prompt_ids, target_ids = _encode(policy, messages, target)
                            kind = f"turn{turn}" + ("+hint" if hint else "")
                            episode.append(SFTSample("agent", prompt_ids, target_ids, target, record.name, kind))
                        observation, reward, terminated, truncated, info = env.step(parsed.action)
                        total += float(reward)
                        messages += [{"role": "assistant", "content": target}, {"role": "user", "content": observation}]
                        if terminated or truncated or "sandbox_error" in info:
                            break
                except SpadeError:
                    total = -1.0
                if total < SUCCESS_RETURN:  # never teach the actions of an episode the oracle does not solve
                    skipped["oracle_failed"] = skipped.get("oracle_failed", 0) + 1
                    continue
                got.extend(episode)
        if got:
            per_env[record.name] = got
    # round robin over the environments (first turns first), so a small budget still covers the pool
    rng = random.Random(ws.seed)
    names = sorted(per_env)
    rng.shuffle(names)
    queues = {n: sorted(per_env[n], key=lambda s: (int(s.kind[4:].split("+")[0]), s.kind)) for n in names}
    out: list[SFTSample] = []
    while len(out) < ws.agent_examples and any(queues.values()):
        for n in names:
            while queues[n]:
                sample = queues[n].pop(0)
                if len(sample.prompt_ids) + len(sample.target_ids) > _max_tokens(config, policy):
                    skipped["too_long"] = skipped.get("too_long", 0) + 1
                    continue
                out.append(sample)
                break
            if len(out) >= ws.agent_examples:
                break
    return out


def _max_tokens(config: SelfPlayConfig, policy: Any) -> int:
    window = getattr(policy, "context_window", None)
    return min(config.warmstart.max_seq_tokens, window or config.warmstart.max_seq_tokens)


def variants(source: str, rng: random.Random) -> str:
    """``source`` with its difficulty knobs (:func:`~spade_gym.program.knobs`) moved a little, for
    edit mode: each by ``+-max(1, round(0.25 * |value|))``, at least one, a positive knob staying
    >= 1; the rest of the text is unchanged. ValueError when it does not parse or has no knob."""
    try:
        tree = ast.parse(source)
    except SyntaxError as exc:
        raise ValueError(f"the program does not parse: {exc}") from exc
    nodes = knob_nodes(tree)
    if not nodes:
        raise ValueError("the program has no difficulty knob (module-level UPPERCASE integer constant)")
    out = source
    changed = rng.randrange(len(nodes))  # this one always changes
    for k, (name, node) in enumerate(nodes):
        value = cast(int, node.value)
        if k != changed and rng.random() < 0.5:
            continue
        step = max(1, round(0.25 * abs(value)))
        new = value + step if value <= 0 or rng.random() < 0.5 else value - step
        if value >= 1 and new < 1:
            new = value + step
        out = knob_variant(out, name, new)
    return out


def _normalise(source: str) -> str:
    return source.strip("\n") + "\n"


#: The gate on fixed seeds for variant targets, so the dataset and its hash are the same every run.
_TARGET_GATE = ValidationConfig(seeds=tuple(range(1000, 1010)), answer_seeds=tuple(range(5000, 5010)))


def _designer_samples(
    config: SelfPlayConfig,
    policy: Any,
    pool: Sequence[EnvRecord],
    registry: Registry,
    skipped: dict[str, int],
    tick: Callable[[], None],
) -> list[SFTSample]:
    """Write-mode and edit-mode samples, the shortest seed programs first."""
    from spade_gym.documents import load_documents
    from spade_gym.memory import EnvironmentMemory, MemoryConfig, MemoryItem, verdict
    from spade_gym.validation import validate

    ws, d = config.warmstart, config.designer
    if ws.designer_examples == 0:
        return []
    rng = random.Random(ws.seed + 1)
    documents = load_documents("builtin", seed=ws.seed, max_tokens=d.document_max_tokens)
    memory = EnvironmentMemory(registry, MemoryConfig(k=d.memory_k, include_source=d.include_source))
    pool_ids = {r.env_id for r in pool}
    held = [r.env_id for r in registry if r.env_id not in pool_ids]
    sources = {r.env_id: _normalise(r.program().source) for r in pool}
    order = sorted(pool, key=lambda r: (len(sources[r.env_id]), r.name))  # the shortest programs first
    n_edit = round(ws.designer_examples * ws.edit_share)
    wanted = {"edit": n_edit, "write": ws.designer_examples - n_edit}
    out: list[SFTSample] = []
    limit = _max_tokens(config, policy)
    for mode in ("write", "edit"):
        taken = 0
        # edit targets are random knob variants: the pool is visited again until there are enough
        passes = 1 if mode == "write" else -(-wanted[mode] // max(len(order), 1)) + 1
        for record in [r for _ in range(passes) for r in order]:
            if taken >= wanted[mode]:
                break
            tick()
            source = sources[record.env_id]
            items = memory.select(rng, setting=record.setting, exclude=[record.env_id, *held])
            parent, target_source = None, source
            if mode == "edit":
                if not knobs(source):
                    continue
                for _ in range(10):  # a variant the gate accepts (a knob moved too far can break it)
                    target_source = _normalise(variants(source, rng))
                    if validate(target_source, _TARGET_GATE).accepted:
                        break
                else:
                    skipped["variant_invalid"] = skipped.get("variant_invalid", 0) + 1
                    continue
                parent = MemoryItem(record, "random", verdict(record.stats), source)
            document = documents.sample(1)[0]
            prompt = build_prompt(
                document, items, setting=record.setting, mode=mode, parent=parent, include_source=d.include_source
            )
            target = f"```python\n{target_source}```" if parent is None else edit_blocks(source, target_source)
            if extract_design(target, prompt).source != target_source:
                skipped["extraction_mismatch"] = skipped.get("extraction_mismatch", 0) + 1
                continue
            prompt_ids, target_ids = _encode(policy, prompt.messages, target)
            if len(prompt_ids) + len(target_ids) > limit:
                skipped["too_long"] = skipped.get("too_long", 0) + 1
                continue
            out.append(SFTSample("designer", prompt_ids, target_ids, target, record.name, mode))
            taken += 1
    return out


def build_dataset(
    config: SelfPlayConfig,
    policy: Any,
    *,
    registry: Registry | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> WarmstartData:
    """The cold-start samples of both roles (see the module docstring), tokenized by ``policy``
    (a transformers policy); ``progress(done, total)`` over the environments visited. ConfigError
    when the pool is empty or gives no successful oracle episode."""
    with _library(registry) as reg:
        pool = training_pool(config, reg)
        skipped: dict[str, int] = {}
        examples = config.warmstart.designer_examples
        total = len(pool) + min(examples, len(pool)) + examples  # Agent, write, edit visits
        done = [0]

        def tick() -> None:
            done[0] += 1
            if progress is not None:
                progress(min(done[0], total), total)

        agent = _agent_samples(config, policy, pool, skipped, tick)
        if not agent:
            raise ConfigError(
                f"config key 'run.held_out_envs': no environment of the cold start's training pool "
                f"({', '.join(r.name for r in pool)}) gave an oracle episode that succeeds within "
                f"warmstart.max_seq_tokens = {config.warmstart.max_seq_tokens} (skipped: {skipped or 'none'}); "
                "the cold start needs environments whose oracle() solves them",
                key="run.held_out_envs",
            )
        designer = _designer_samples(config, policy, pool, reg, skipped, tick)
        if progress is not None:
            progress(total, total)
        return WarmstartData(agent + designer, [r.name for r in pool], skipped)


def _lora_config(config: SelfPlayConfig, policy: Any) -> dict[str, Any]:
    model = getattr(policy, "model", None)
    peft_config = getattr(model, "peft_config", None)
    if peft_config:
        return dict(next(iter(peft_config.values())).to_dict())
    return dict(config.policy.lora) if config.policy.lora is not None else dict(WARMSTART_LORA)


def warmstart_hash(config: SelfPlayConfig, policy: Any, data: WarmstartData) -> str:
    """SHA-256 hex naming a cache entry: the base model (spec, dtype, architecture), the LoRA config,
    the ``warmstart`` section without ``enabled``/``cache_dir``, and the dataset's digest."""
    section = dataclasses.asdict(config.warmstart)
    section.pop("enabled")
    section.pop("cache_dir")
    model_config = getattr(getattr(policy, "model", None), "config", None)
    to_dict = getattr(model_config, "to_dict", None)
    arch = to_dict() if callable(to_dict) else {}
    arch = {k: v for k, v in arch.items() if k not in ("_name_or_path", "transformers_version")}
    key = {
        "version": _CACHE_VERSION,
        "model": {"spec": config.policy.spec.removeprefix("vllm:"), "dtype": str(policy.dtype), "arch": arch},
        "lora": _lora_config(config, policy),
        "warmstart": section,
        "data": data.digest(),
    }
    text = json.dumps(
        key, sort_keys=True, default=lambda v: sorted(v, key=str) if isinstance(v, set | frozenset) else str(v)
    )
    return hashlib.sha256(text.encode()).hexdigest()


def warmstart_dir(config: SelfPlayConfig) -> Path:
    """``warmstart.cache_dir``, else ``<cache>/warmstart`` in the embedded model's cache."""
    if config.warmstart.cache_dir is not None:
        return Path(config.warmstart.cache_dir).expanduser()
    from spade_gym.policies.embedded import cache_dir

    return cache_dir() / "warmstart"


def _atomic_save(obj: Any, path: Path) -> None:
    import torch

    buffer = io.BytesIO()
    torch.save(obj, buffer)
    replace_atomically(path, buffer.getvalue())


@dataclass
class WarmstartResult:
    """What :func:`run_warmstart` did: the cache entry, whether it was ``cached``, the steps, the
    loss of every step, each role's mean NLL (nats per target token, ``None`` without samples) of
    its first samples before and after, the dataset, seconds, and whether the adapters were
    ``merged`` into the weights (a run without ``policy.lora``)."""

    hash: str
    path: Path
    adapter_path: Path
    cached: bool
    steps: int
    steps_run: int
    resumed_from: int
    losses: list[float]
    loss_before: dict[str, float | None]
    loss_after: dict[str, float | None]
    agent_samples: int
    designer_samples: int
    envs: list[str]
    skipped: dict[str, int]
    wall_s: float
    merged: bool = False
    step_s: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["path"], out["adapter_path"] = str(self.path), str(self.adapter_path)
        return out


def _schedule(data: WarmstartData, config: SelfPlayConfig) -> list[list[int]]:
    """Sample indices of every step's batch, seeded (Designer batches hold one sample)."""
    ws = config.warmstart
    rng = random.Random(ws.seed + 2)
    index = {"agent": [], "designer": []}  # type: dict[str, list[int]]
    for i, s in enumerate(data.samples):
        index[s.role].append(i)
    roles = ["agent"] * (ws.agent_steps if index["agent"] else 0)
    roles += ["designer"] * (ws.designer_steps if index["designer"] else 0)
    rng.shuffle(roles)
    queues: dict[str, list[int]] = {"agent": [], "designer": []}
    batches = []
    for role in roles:
        size = ws.micro_batch_size if role == "agent" else 1
        batch = []
        for _ in range(size):
            if not queues[role]:
                queues[role] = list(index[role])
                rng.shuffle(queues[role])
            batch.append(queues[role].pop())
        batches.append(batch)
    return batches


def _mean_nll(policy: Any, samples: Sequence[SFTSample]) -> float | None:
    import torch

    if not samples:
        return None
    with torch.no_grad():
        lps = policy.sequence_logprobs([(list(s.prompt_ids), list(s.target_ids)) for s in samples])
    return -math.fsum(float(lp.sum()) for lp in lps) / sum(len(s.target_ids) for s in samples)


def _eval_losses(policy: Any, data: WarmstartData) -> dict[str, float | None]:
    return {role: _mean_nll(policy, data.of(role)[:n]) for role, n in _EVAL_SAMPLES.items()}


def sample_loss(policy: Any, batch: Sequence[SFTSample]) -> Any:
    """The token-mean negative log-likelihood of the batch's target tokens (a scalar tensor with
    gradients); prompt tokens are never loss tokens."""
    lps = policy.sequence_logprobs([(list(s.prompt_ids), list(s.target_ids)) for s in batch])
    tokens = sum(len(s.target_ids) for s in batch)
    return -sum(lp.sum() for lp in lps) / tokens


def run_warmstart(
    config: SelfPlayConfig,
    policy: Any,
    *,
    registry: Registry | None = None,
    say: Callable[[str], None] | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    stop_after: int | None = None,
) -> WarmstartResult:
    """Train (or load from the cache) the cold-start adapters into ``policy``, a trainable
    transformers policy; on return it holds its LoRA adapters or, without adapters, the weights with
    :data:`WARMSTART_LORA` merged in. ``warmstart.enabled`` is not read. ``progress(phase, done,
    total)`` gets phases ``"data"`` and ``"train"``; ``stop_after`` stops (state saved) after that
    many steps in all, as an interruption would.

    Raises:
        ConfigError: an empty pool or one without successful oracle episodes, a designer-off
            baseline on another pool, a chat template without a system role.
        ValueError: ``policy`` has no ``sequence_logprobs``.
    """
    import torch

    say, report = say or (lambda line: None), progress or (lambda phase, done, total: None)
    if not hasattr(policy, "sequence_logprobs"):
        raise ValueError(f"the cold start trains a transformers policy, got a {type(policy).__name__}")
    if registry is None:
        check_warmstart_config(config)
    check_chat_template(policy.tokenizer, config.policy.spec)
    started = time.perf_counter()
    data = build_dataset(config, policy, registry=registry, progress=lambda d, t: report("data", d, t))
    digest = warmstart_hash(config, policy, data)
    entry = warmstart_dir(config) / digest[:24]
    entry.mkdir(parents=True, exist_ok=True)
    merged = not hasattr(policy.model, "peft_config")
    if merged:  # a fully fine-tuned run: train temporary adapters, merged into the weights at the end
        policy.model = policy.attach_peft(dict(WARMSTART_LORA), None)
    schedule = _schedule(data, config)
    result_path, adapter_path, state_path = entry / _RESULT, entry / _ADAPTER, entry / _STATE
    if result_path.is_file() and adapter_path.is_file():
        report("train", len(schedule), len(schedule))
        return _load_cached(policy, entry, digest, merged, say)
    samples = [[s.role, s.env, s.kind] for s in data.samples]
    replace_atomically(
        entry / _DATA, json.dumps({"envs": data.envs, "skipped": data.skipped, "samples": samples}, indent=1)
    )
    params = [p for p in policy.model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(params, lr=config.warmstart.learning_rate, weight_decay=0.0)
    resumed = state_path.is_file()
    start, losses, loss_before, step_s = _resume(policy, optimizer, state_path, config.warmstart.seed)
    if resumed:
        say(f"cold start: resuming at step {start} of {len(schedule)} from {state_path}")
    say(
        f"cold start: {len(schedule) - start} of {len(schedule)} steps to train on {len(data.of('agent'))} Agent and "
        f"{len(data.of('designer'))} Designer samples from {len(data.envs)} environments (cached in {entry})"
    )
    if loss_before is None:
        loss_before = _eval_losses(policy, data)

    save = functools.partial(_save_state, state_path, policy, optimizer, losses, step_s, loss_before)

    def result(steps_run: int, loss_after: dict[str, float | None]) -> WarmstartResult:
        return WarmstartResult(
            digest, entry, adapter_path, False, len(schedule), steps_run, start, losses, loss_before, loss_after,
            len(data.of("agent")), len(data.of("designer")), data.envs, data.skipped,
            time.perf_counter() - started, merged, step_s,
        )  # fmt: skip

    was_training = policy.model.training
    policy.model.train()
    report("train", start, len(schedule))
    steps_run = 0
    try:
        for step in range(start, len(schedule)):
            if stop_after is not None and step >= stop_after:
                save(step)
                say(f"cold start: stopped after step {step} of {len(schedule)} (state in {state_path})")
                return result(steps_run, {})
            began = time.perf_counter()
            losses.append(_train_step(policy, optimizer, params, [data.samples[i] for i in schedule[step]]))
            step_s.append(time.perf_counter() - began)
            steps_run += 1
            report("train", step + 1, len(schedule))
            if (step + 1) % config.warmstart.save_every == 0 and step + 1 < len(schedule):
                save(step + 1)
    finally:
        policy.model.train(was_training)
        optimizer.zero_grad(set_to_none=True)
    loss_after = _eval_losses(policy, data)
    _atomic_save(trainable_state(policy), adapter_path)
    done = result(steps_run, loss_after)
    _write_result(done, result_path)
    state_path.unlink(missing_ok=True)
    _finish(policy, merged)
    say(
        f"cold start: {len(schedule)} steps in {done.wall_s:.0f} s, loss agent {_fmt(loss_before['agent'])} -> "
        f"{_fmt(loss_after['agent'])}, designer {_fmt(loss_before['designer'])} -> {_fmt(loss_after['designer'])}; "
        f"adapters {adapter_path}"
    )
    return done


def _load_cached(policy: Any, entry: Path, digest: str, merged: bool, say: Callable[[str], None]) -> WarmstartResult:
    """The finished cache ``entry``'s result, its adapters loaded into ``policy``."""
    import torch

    adapter_path = entry / _ADAPTER
    load_trainable_state(policy, torch.load(adapter_path, map_location="cpu", weights_only=True))
    saved = json.loads((entry / _RESULT).read_text(encoding="utf-8"))
    _finish(policy, merged)
    say(f"cold start: loaded the cached adapters {adapter_path} (hash {digest[:12]})")
    saved.update(path=entry, adapter_path=adapter_path, cached=True, steps_run=0, merged=merged, hash=digest)
    return WarmstartResult(**saved)


def _write_result(result: WarmstartResult, path: Path) -> None:
    """Write ``result`` without its per-run fields: the cache entry is finished once this file exists."""
    saved = result.to_dict()
    for key in ("path", "adapter_path", "cached", "steps_run", "merged", "hash"):
        saved.pop(key)
    replace_atomically(path, json.dumps(saved, indent=1))


def _save_state(
    path: Path, policy: Any, optimizer: Any, losses: list[float], step_s: list[float], loss_before: Any, step: int
) -> None:
    """Save an interrupted cold start at ``step``: adapters, optimizer, losses and torch RNG."""
    import torch

    state = {
        "step": step,
        "losses": losses,
        "step_s": step_s,
        "loss_before": loss_before,
        "adapter": trainable_state(policy),
        "optimizer": optimizer.state_dict(),
        "rng": {"torch": torch.get_rng_state()},
    }
    _atomic_save(state, path)


def _train_step(policy: Any, optimizer: Any, params: list[Any], batch: list[Any]) -> float:
    """One supervised step on ``batch`` (samples): the mean token loss, summed over passes."""
    import torch

    optimizer.zero_grad(set_to_none=True)
    tokens = sum(len(s.target_ids) for s in batch)
    total = 0.0
    pairs = [(list(s.prompt_ids), list(s.target_ids)) for s in batch]
    # a backward pass per forward pass, long ones checkpointed: bounded memory
    for _, lps in policy.score_batches(pairs, checkpoint_tokens=CHECKPOINT_TOKENS):
        loss = -sum(lp.sum() for lp in lps) / tokens
        loss.backward()
        total += float(loss.detach())
    torch.nn.utils.clip_grad_norm_(params, _MAX_GRAD_NORM)
    optimizer.step()
    return total


def _resume(policy: Any, optimizer: Any, state_path: Path, seed: int) -> tuple[int, list[float], Any, list[float]]:
    """``(step, losses, loss_before, step_s)`` of an interrupted cold start, its adapters, optimizer
    and torch RNG restored; a fresh start (the stage's own initial adapters, whatever the policy held
    before) when ``state_path`` is missing."""
    import torch

    if not state_path.is_file():
        _reset_adapters(policy, seed)
        return 0, [], None, []
    state = torch.load(state_path, map_location="cpu", weights_only=False)
    load_trainable_state(policy, state["adapter"])
    optimizer.load_state_dict(state["optimizer"])
    torch.set_rng_state(state["rng"]["torch"])  # the data order is a function of warmstart.seed
    return int(state["step"]), list(state["losses"]), state["loss_before"], list(state.get("step_s", []))


def _reset_adapters(policy: Any, seed: int) -> None:
    """Re-initialise every LoRA adapter as peft does, from ``seed``."""
    import torch
    from peft.tuners.lora import LoraLayer

    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        for module in policy.model.modules():
            if isinstance(module, LoraLayer):
                for name in list(module.lora_A):
                    module.reset_lora_parameters(name, True)


def _finish(policy: Any, merged: bool) -> None:
    """Merge a fully fine-tuned run's temporary adapters into its weights, all trainable again."""
    if merged:
        policy.model = policy.model.merge_and_unload()
        for parameter in policy.model.parameters():
            parameter.requires_grad_(True)
    policy.model.eval()


def _fmt(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.3f}"
