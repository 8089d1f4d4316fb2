"""The self-play run configuration: one YAML file, checked strictly before any work starts.

:class:`SelfPlayConfig` is a tree of dataclasses, one per section, whose fields carry their help and
range (:mod:`spade_gym.options`), so :meth:`SelfPlayConfig.to_yaml`, :func:`describe_config`
(``spade selfplay --help-config``), the errors and the code say the same thing. Loading raises
:class:`ConfigError` naming the dotted key of an unknown key (with a "did you mean"), a wrong type
(pydantic strict mode: no coercion, except an int for a float) or a value out of range. YAML 1.2
scalars: only ``true``/``false`` are booleans, ``1e-4`` is a float, ``010`` is ten. Every key is
optional: an empty file is the default run.

Example::

    >>> config = SelfPlayConfig().with_overrides(["train.learning_rate=1e-4", "run.iterations=2"])
    >>> config.train.learning_rate, config.run.iterations
    (0.0001, 2)
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import re
import reprlib
import sys
import textwrap
import types
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn, TypeVar, Union, get_args, get_origin, get_type_hints

from annotated_types import Ge, Gt, Le

from spade_gym.agent import AGENT_MAX_NEW_TOKENS, AGENT_TEMPERATURE, AGENT_TOP_P, RolloutConfig
from spade_gym.errors import ConfigError, install_hint
from spade_gym.evaluation.heldout import EvalSection
from spade_gym.options import (
    FINITE,
    Why,
    adapter,
    config_fields,
    option,
    option_factory,
    refusal,
    strict_yaml_loader,
    type_name,
)
from spade_gym.policies.base import SamplingParams
from spade_gym.registry.gymnasium import HELD_OUT_SEED_ENVS, bundled_registry_path
from spade_gym.regret import REGRET_EPISODES, RewardConfig
from spade_gym.sandbox import MAX_EPISODE_TURNS
from spade_gym.stages import DesignerConfig
from spade_gym.trainer.grpo import GRPOConfig

__all__ = [
    "AgentSection",
    "ConfigError",
    "DesignerRewardSection",
    "PolicySection",
    "RunSection",
    "SECTIONS",
    "SelfPlayConfig",
    "WarmstartSection",
    "describe_config",
    "parse_fixed_pool",
]

_T = TypeVar("_T")

#: Keys older versions wrote into a run's config.yaml with the only value they could hold.
RETIRED_KEYS: dict[tuple[str, str], Any] = {("designer", "repair_rounds"): 0}


@dataclass
class PolicySection:
    """The language model that plays both roles (Designer and Agent share its weights)."""

    spec: str = option(
        "default",
        "which model and backend, as for the --policy option of `spade eval` and `spade design`: 'default' (the "
        "embedded SmolLM2-135M-Instruct), "
        "a Hugging Face id or local path, or 'vllm:<id or path>' for generation on vLLM",
    )
    device: str | None = option(
        None, "'cpu', 'cuda', 'cuda:N' or 'mps' for the trained weights; null: the best available device"
    )
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = option(
        "auto", "weights dtype; 'auto': bfloat16 on a GPU that supports it (float16 otherwise), float32 on CPU"
    )
    lora: dict[str, Any] | None = option(
        None,
        "train LoRA adapters instead of all weights: peft LoraConfig fields, e.g. "
        "{r: 8, lora_alpha: 16, target_modules: [q_proj, v_proj]}; null: full fine-tuning",
    )
    max_batch_size: Annotated[int, Ge(1)] = option(32, "most sequences per generate call of the transformers backend")


#: The ``designer.reward`` section: :class:`spade_gym.regret.RewardConfig` itself (one definition).
DesignerRewardSection = RewardConfig


@dataclass
class AgentSection:
    """The Reasoning Agent: regret episodes, replayed environments and its sampling."""

    k: Annotated[int, Ge(1)] = option(
        REGRET_EPISODES, "regret episodes per arm (with and without the hint) for each accepted design"
    )
    max_new_tokens: Annotated[int, Ge(1)] = option(AGENT_MAX_NEW_TOKENS, "most tokens per Agent turn")
    temperature: Annotated[float, Gt(0), FINITE, Why("regret needs sampling")] = option(
        AGENT_TEMPERATURE, "sampling temperature of the Agent (default measured, see docs/learning.md)"
    )
    top_p: Annotated[float, Gt(0), Le(1)] = option(
        AGENT_TOP_P, "nucleus sampling mass of the Agent (default measured, see docs/learning.md)"
    )
    max_turns: Annotated[int, Ge(1)] = option(
        MAX_EPISODE_TURNS,
        "cap on Agent turns per episode, whatever the environment declares (the sandbox caps every episode at "
        "this default too)",
    )
    max_episodes: Annotated[int, Ge(1)] = option(
        64, "most episodes (sandbox workers) alive at once; more are played in waves"
    )
    train_on_regret_episodes: bool = option(
        True, "the no-hint regret episodes double as Agent training data (docs/DESIGN.md)"
    )
    updates_per_iteration: Annotated[int, Ge(1), Le(256)] = option(
        8,
        "Agent steps per design phase (ACCEL/PLR's schedule): each draws replay_envs environments by prioritised "
        "replay, plays them and takes one GRPO update; the Designer updates once per design phase (default "
        "measured, docs/learning.md)",
    )
    credit: Literal["episode", "turn"] = option(
        "episode",
        "credit of a multi-turn episode's turns: 'episode' (each turn gets the episode return) or 'turn' (its "
        "return-to-go, scored against the same turn of the group's other episodes)",
    )
    replay_envs: Annotated[int, Ge(0)] = option(4, "registry environments replayed per Agent step")
    episodes_per_env: Annotated[int, Ge(2), Why("a group of one episode has no relative advantage")] = option(
        4, "Agent episodes per replayed environment: one GRPO group"
    )
    replay_seeds: Annotated[int, Ge(1)] = option(
        1,
        "reset seeds the episodes of one replayed environment are spread over (at most episodes_per_env); 1: GRPO's "
        "group of one task instance; more: the group is the environment, its mean return the baseline (a small "
        "model's answers to one instance are nearly constant, so one-seed groups give no advantage)",
    )
    replay_strategy: Literal["replay", "uniform"] = option(
        "replay", "how replayed environments are drawn: 'replay' (rank-based prioritised by regret) or 'uniform'"
    )
    replay_beta: Annotated[float, Gt(0), FINITE] = option(
        0.1, "rank temperature beta of prioritised replay; smaller concentrates on the highest regret"
    )
    replay_rho: Annotated[float, Ge(0), Le(1)] = option(0.1, "staleness coefficient rho of prioritised replay")
    replay_unmeasured_first: bool = option(
        True, "rank environments without a regret estimate above every measured one (so they get measured)"
    )

    def rollout(self, seed: int | None = None) -> RolloutConfig:
        """The Agent's :class:`~spade_gym.agent.RolloutConfig`; ``seed``: its sampling seed."""
        sampling = SamplingParams(
            temperature=self.temperature, top_p=self.top_p, max_new_tokens=self.max_new_tokens, seed=seed
        )
        return RolloutConfig(sampling=sampling, max_episodes=self.max_episodes, max_turns=self.max_turns)


@dataclass
class RunSection:
    """The run: where it writes, how long it runs, checkpoints and logging."""

    out: str = option("runs/selfplay", "run folder: config, registry, metrics, TensorBoard events, checkpoints, plots")
    iterations: Annotated[int, Ge(1)] = option(3, "self-play iterations")
    seed: Annotated[int, Ge(0)] = option(0, "seed of every random generator of the run")
    checkpoint_every: Annotated[int, Ge(1)] = option(
        1, "save a checkpoint every N iterations and after the last; a killed run loses at most N iterations"
    )
    keep_checkpoints: Annotated[int, Ge(1)] = option(2, "checkpoints kept on disk, the newest")
    designer: Literal["on", "off"] = option(
        "on", "'on': SPADE self-play; 'off': the baseline, the Agent alone on run.fixed_pool"
    )
    fixed_pool: str = option(
        "seed-library",
        "environments of the designer='off' baseline: 'seed-library' (the bundled environments) or "
        "'reasoning-gym:<task>[,<task>...]'",
    )
    held_out_envs: list[str] = option_factory(
        lambda: list(HELD_OUT_SEED_ENVS),
        "seed environments left out of the run's registry (never designed from, replayed or trained on): "
        "whole tasks held out for `spade eval --suite tool-use / games`; [] trains on the whole seed library",
    )
    seed_tags: list[str] = option_factory(
        list,
        "only seed environments with one of these tags start the run's registry (its training pool and the "
        "Designer's memory), e.g. [graded] for the small graded environments a CPU model can learn from; "
        "[]: every seed environment",
    )
    executor: Literal["local", "ray"] = option(
        "local",
        "where validation and the Agent's environments run: 'local' (this machine's worker processes) or "
        "'ray' (Ray tasks and actors, see the ray section; needs spade-gym[ray]); results are the same",
    )
    budget_minutes: Annotated[float, Gt(0), FINITE] | None = option(
        None,
        "wall minutes the run must fit: a config estimated over it (unit costs of the embedded model on 2 CPU "
        "cores, spade_gym.trainer.budget) is refused before any work, naming the key to change; null: unchecked",
    )
    tensorboard: bool = option(True, "write TensorBoard events to <out>/tb (needs the tensorboard package)")
    log_every: Annotated[int, Ge(1)] = option(1, "print a one-line summary every N iterations")


@dataclass
class RaySection:
    """Ray settings, used when ``run.executor`` is ``'ray'`` (see docs/integrations.md, "Ray: scaling out")."""

    address: str | None = option(
        None,
        "cluster to join: null starts a local Ray instance; 'auto' joins this node's cluster; "
        "'ray://<head>:10001' connects through Ray Client",
    )
    num_cpus: Annotated[int, Ge(1)] | None = option(
        None, "CPUs of a local instance started here (null: all); only with address null"
    )
    validation_cpus: Annotated[float, Gt(0), FINITE] = option(
        1.0, "CPUs reserved per validation task (a validation uses two sandbox workers)"
    )
    env_hosts: Annotated[int, Ge(1)] | None = option(
        None, "actors hosting the Agent's environments; null: one per alive node"
    )
    max_retries: Annotated[int, Ge(0)] = option(
        1, "reruns of a validation task whose worker died, before it counts as failed"
    )
    generation_gpus: Annotated[float, Ge(0), FINITE] = option(
        1.0, "GPUs of the Ray actor that hosts the vLLM engine when policy.spec is 'vllm:<id>'"
    )


@dataclass
class WarmstartSection:
    """The cold start: a short supervised stage before self-play (spade_gym.trainer.warmstart): the
    oracle's actions for the Agent, the seed programs for the Designer, never the held-out environments."""

    enabled: bool = option(
        False, "train (or load from the cache) the cold-start LoRA adapter before iteration 0 of self-play"
    )
    agent_seeds: Annotated[int, Ge(1)] = option(
        2, "oracle episodes played per training-pool environment, one seed each"
    )
    agent_examples: Annotated[int, Ge(1)] = option(
        48, "most Agent samples (one per oracle turn), drawn round-robin over the pool's environments"
    )
    agent_steps: Annotated[int, Ge(0)] = option(8, "optimizer steps on Agent batches")
    designer_examples: Annotated[int, Ge(0)] = option(
        4, "most Designer samples (write and edit mode; a seed program or a variant of it as target)"
    )
    designer_steps: Annotated[int, Ge(0)] = option(
        2, "optimizer steps on Designer batches (0 with designer_examples 0)"
    )
    edit_share: Annotated[float, Ge(0), Le(1)] = option(
        0.5, "share of the Designer samples in edit mode (a variant of a seed program with knobs)"
    )
    learning_rate: Annotated[float, Gt(0), FINITE] = option(3e-4, "AdamW learning rate of the adapters")
    micro_batch_size: Annotated[int, Ge(1)] = option(
        2, "samples per optimizer step; Designer steps take 1 (long sequences)"
    )
    max_seq_tokens: Annotated[int, Ge(16)] = option(
        3072, "samples whose prompt plus target is longer than this many tokens are skipped"
    )
    save_every: Annotated[int, Ge(1)] = option(4, "save the resumable training state every N steps")
    seed: Annotated[int, Ge(0)] = option(0, "seed of the episodes, the data order and the variants")
    cache_dir: str | None = option(
        None,
        "folder of the cached adapters, one per content hash; null: <cache>/warmstart, where <cache> is "
        "$SPADE_CACHE or ~/.cache/spade_gym (the embedded model's cache)",
    )


def _check_seed_library(r: Any) -> None:
    """ConfigError when ``run.held_out_envs`` or ``run.seed_tags`` names what the seed library lacks."""
    if r.held_out_envs and bundled_registry_path().is_dir():
        seed_names = {p.name.rsplit("-v", 1)[0] for p in (bundled_registry_path() / "envs").iterdir()}
        unknown = sorted(set(r.held_out_envs) - seed_names)
        if unknown:
            raise ConfigError(
                f"config key 'run.held_out_envs' names no seed environment: {', '.join(unknown)} "
                "(`spade envs list` shows the seed library)",
                key="run.held_out_envs",
            )
    if r.seed_tags and bundled_registry_path().is_dir():
        tags: set[str] = set()
        for meta in (bundled_registry_path() / "envs").glob("*/meta.json"):
            try:
                tags.update(json.loads(meta.read_text()).get("tags", []))
            except (OSError, ValueError):
                continue
        unknown = sorted(set(r.seed_tags) - tags)
        if unknown:
            raise ConfigError(
                f"config key 'run.seed_tags' names tags no seed environment has: {', '.join(unknown)} "
                f"(tags: {', '.join(sorted(tags))})",
                key="run.seed_tags",
            )


@dataclass
class SelfPlayConfig:
    """Everything a self-play run needs, read from one YAML file (``spade selfplay --config FILE``);
    the constructors check every key, :meth:`validate` checks a config built in Python."""

    policy: PolicySection = option_factory(PolicySection, PolicySection.__doc__ or "")
    designer: DesignerConfig = option_factory(
        DesignerConfig, "The Environment Designer: how many programs it writes per iteration and how."
    )
    agent: AgentSection = option_factory(AgentSection, AgentSection.__doc__ or "")
    train: GRPOConfig = option_factory(
        GRPOConfig,
        """The GRPO update of the shared policy: the fields, defaults, help and ranges of
    spade_gym.trainer.grpo.GRPOConfig, with designer_weight and agent_weight for its role_weights
    and run.seed for its shuffle seed.""",
    )
    run: RunSection = option_factory(RunSection, RunSection.__doc__ or "")
    ray: RaySection = option_factory(RaySection, RaySection.__doc__ or "")
    warmstart: WarmstartSection = option_factory(WarmstartSection, WarmstartSection.__doc__ or "")
    eval: EvalSection = option_factory(EvalSection, EvalSection.__doc__ or "")

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> SelfPlayConfig:
        """Build and validate a config from ``{section: {key: value}}`` (missing keys: defaults);
        ConfigError for an unknown key, a wrong type or a value out of range."""
        try:
            config = _build(cls, data, "")
            config.validate()
        except RecursionError:  # a mapping nested hundreds deep, or one that holds itself
            raise ConfigError("the config is nested too deeply, or a value contains itself") from None
        return config

    @classmethod
    def from_yaml(cls, path: str | Path, *, saved: bool = False) -> SelfPlayConfig:
        """Read a YAML config file (duplicate keys refused) and build it; ConfigError when it cannot
        be read or parsed, is not a mapping, or fails :meth:`from_dict`. ``saved``: a run folder's
        own ``config.yaml``, where keys older versions wrote with their only value are dropped."""
        path = Path(path)
        try:
            text = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"cannot read config file {path}: {exc}") from exc
        data = _load_yaml(text, str(path))
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise ConfigError(
                f"config file {path} must be a mapping of sections ({', '.join(SECTIONS)}), got {_show(data)}"
            )
        if saved:
            for (section, key), only in RETIRED_KEYS.items():
                if isinstance(data.get(section), dict) and data[section].get(key, only) == only:
                    data[section].pop(key, None)
        return cls.from_dict(data)

    def with_overrides(self, overrides: Sequence[str]) -> SelfPlayConfig:
        """A new, validated config with ``KEY=VALUE`` overrides (``"train.learning_rate=1e-4"``).

        Values are YAML scalars or flow collections (``designer.settings=[reasoning, game]``); a
        string field takes the text as it is. ConfigError as :meth:`from_dict`, or without ``=``.
        """
        data = self.to_dict()
        for item in overrides:
            key, sep, raw = item.partition("=")
            key = key.strip()
            if not sep or not key:
                raise ConfigError(f"override {item!r} must look like KEY=VALUE, e.g. 'train.learning_rate=1e-4'")
            parts = key.split(".")
            if any(not p for p in parts):
                raise ConfigError(f"override key {key!r} has an empty part", key=key)
            value: Any = raw
            if not _is_str_field(parts) or raw.strip()[:1] in ("'", '"'):
                value = _load_yaml(raw, f"override {key}")
            node: dict[str, Any] = data
            for depth, part in enumerate(parts[:-1]):
                child = node.get(part)
                if child is None:  # an unknown key (named by _build) or a null mapping (policy.lora)
                    child = node[part] = {}
                if not isinstance(child, dict):
                    where = ".".join(parts[: depth + 1])
                    raise ConfigError(f"override {key!r}: {where!r} is a value, not a section", key=key)
                node = child
            node[parts[-1]] = value
        return type(self).from_dict(data)

    def to_dict(self) -> dict[str, Any]:
        """``{section: {key: value}}``, as :meth:`from_dict` takes it (copies, as ``dataclasses.asdict``
        makes them: a value that holds itself raises RecursionError)."""
        return _keys(self, dataclasses.asdict(self))

    def to_yaml(self, path: str | Path | None = None) -> str:
        """The config as YAML, every field's help as a comment; also written to ``path`` if given."""
        text = _render_yaml(self)
        if path is not None:
            Path(path).write_text(text, encoding="utf-8")
        return text

    def validate(self) -> None:
        """ConfigError naming the first key of the wrong type or out of range, and what is expected."""
        _build(type(self), self.to_dict(), "")
        p, d, a, t, r = self.policy, self.designer, self.agent, self.train, self.run
        if p.device is not None and not re.fullmatch(r"cpu|cuda|cuda:\d+|mps", p.device):
            _range("policy.device", p.device, "'cpu', 'cuda', 'cuda:N', 'mps' or null")
        if not p.spec.strip():
            _range("policy.spec", p.spec, "a policy spec such as 'default'")

        if not d.documents.strip():
            _range("designer.documents", d.documents, "'builtin', a file or folder, or 'hf:<dataset>'")
        if len(set(d.settings)) != len(d.settings):
            _range("designer.settings", d.settings, "a list of distinct settings")

        if a.replay_seeds > a.episodes_per_env:
            _range("agent.replay_seeds", a.replay_seeds, f"at most agent.episodes_per_env ({a.episodes_per_env})")

        if not r.out.strip():
            _range("run.out", r.out, "a folder path")
        try:
            kind, tasks = parse_fixed_pool(r.fixed_pool)
            if kind == "reasoning-gym":
                from spade_gym.reasoning_gym import check_task

                for task in tasks:
                    check_task(task)
        except (ImportError, ValueError) as exc:
            raise ConfigError(f"config key 'run.fixed_pool' = {r.fixed_pool!r}: {exc}", key="run.fixed_pool") from None

        _check_seed_library(r)

        unheld = sorted(set(self.eval.envs) - set(r.held_out_envs))
        if unheld:
            raise ConfigError(
                f"config key 'eval.envs' names {', '.join(unheld)}, which run.held_out_envs does not hold out of "
                "training: an environment the Agent trains on is not an unseen one; add it to run.held_out_envs",
                key="eval.envs",
            )

        y = self.ray
        if y.num_cpus is not None and y.address is not None:
            _range("ray.num_cpus", y.num_cpus, "null when ray.address is set (a cluster has its own CPUs)")
        if r.executor == "ray":
            from spade_gym.errors import MissingDependency, require

            try:
                require("ray", "ray", "run.executor = 'ray'")
            except MissingDependency as exc:
                raise ConfigError(f"config key 'run.executor': {exc}", key="run.executor") from None

        w = self.warmstart
        if w.cache_dir is not None and not w.cache_dir.strip():
            _range("warmstart.cache_dir", w.cache_dir, "a folder path or null")
        if w.agent_steps + w.designer_steps == 0:
            _range(
                "warmstart.agent_steps", w.agent_steps, "agent_steps + designer_steps >= 1 (nothing would be trained)"
            )

        if self.designer.prompt == "fill" and not self.designer.policy:
            raise ConfigError(
                "config key 'designer.prompt' = 'fill' needs a Designer of its own (designer.policy, e.g. "
                "'llamacpp:qwen2.5-coder-1.5b'): a filled module is not one sample of the model, so the shared "
                "model cannot be trained on it",
                key="designer.prompt",
            )

        # Across sections: a run must produce some training data.
        if r.designer == "off" and a.replay_envs == 0:
            raise ConfigError(
                "config key 'agent.replay_envs' = 0 with run.designer = 'off': the baseline trains the Agent only "
                "on replayed run.fixed_pool environments; set agent.replay_envs >= 1",
                key="agent.replay_envs",
            )
        if t.designer_weight == 0 and t.agent_weight == 0:
            raise ConfigError(
                "config keys 'train.designer_weight' and 'train.agent_weight' are both 0: nothing would be trained",
                key="train.designer_weight",
            )

    def make_executor(self) -> Any:
        """The :class:`~spade_gym.executor.Executor` of ``run.executor`` (MissingDependency: no Ray)."""
        from spade_gym.executor import make_executor

        if self.run.executor == "local":
            return make_executor("local")
        options = dataclasses.asdict(self.ray)
        options.pop("generation_gpus")  # the vLLM actor's, not the executor's
        return make_executor("ray", **options)

    def designer_config(self) -> DesignerConfig:
        """The ``designer`` section for a design step: the Agent's regret rollout and ``k`` from the
        ``agent`` section, ``edit_probability`` resolved (:meth:`edit_probability`)."""
        return dataclasses.replace(
            self.designer, k=self.agent.k, rollout=self.agent.rollout(), edit_probability=self.edit_probability()
        )

    def edit_probability(self) -> float:
        """``designer.edit_probability``, ``auto`` resolved for the policy's spec and device."""
        value = self.designer.edit_probability
        if value == "auto":
            from spade_gym.designer import auto_edit_probability

            if self.designer.policy:  # a Designer of its own: its size decides, not the trained model's device
                return auto_edit_probability(self.designer.policy)
            return auto_edit_probability(self.policy.spec, self.policy.device)
        return float(value)

    def check_design_budget(self) -> None:
        """ConfigError when ``designer.max_new_tokens`` is below the shortest seed program's token
        length (:func:`spade_gym.designer.design_token_floor`), unless no design writes a whole
        program (``run.designer: off``, edit probability 1). Nothing is downloaded."""
        if self.run.designer == "off" or self.edit_probability() == 1.0:  # edits only: no whole module
            return
        from spade_gym.designer import design_token_floor

        floor, why = design_token_floor(self.designer.policy or self.policy.spec)
        if self.designer.max_new_tokens < floor:
            raise ConfigError(
                f"config key 'designer.max_new_tokens' = {self.designer.max_new_tokens} is below {floor} tokens, "
                f"{why}: a design cut there is never a whole program and earns the invalid reward every time; "
                f"set designer.max_new_tokens >= {floor} (or run.designer: off)",
                key="designer.max_new_tokens",
            )

    def replay_config(self) -> Any:
        """The :class:`spade_gym.registry.sampler.ReplayConfig` of ``agent.replay_*``."""
        from spade_gym.registry.sampler import ReplayConfig

        a = self.agent
        return ReplayConfig(beta=a.replay_beta, rho=a.replay_rho, unmeasured_first=a.replay_unmeasured_first)


#: Every section of :class:`SelfPlayConfig`, by key.
SECTIONS: dict[str, type] = get_type_hints(SelfPlayConfig)
#: What each section is (its field's help), by key.
_SECTION_HELP: dict[str, str] = {f.name: f.metadata["help"] for f in dataclasses.fields(SelfPlayConfig)}


def parse_fixed_pool(spec: str) -> tuple[str, list[str]]:
    """``run.fixed_pool`` as ``("seed-library", [])`` or ``("reasoning-gym", [task, ...])``;
    ValueError for anything else."""
    expected = "expected 'seed-library' or 'reasoning-gym:<task>[,<task>...]'"
    if spec == "seed-library":
        return "seed-library", []
    kind, sep, rest = spec.partition(":")
    if kind != "reasoning-gym" or not sep:
        raise ValueError(expected)
    tasks = [t.strip() for t in rest.split(",")]
    if not tasks or any(not re.fullmatch(r"[A-Za-z0-9_]+", t) for t in tasks):
        raise ValueError(f"{expected}; task names are letters, digits and '_'")
    repeated = sorted({t for t in tasks if tasks.count(t) > 1})
    if repeated:
        raise ValueError(f"task {', '.join(map(repr, repeated))} named more than once")
    return "reasoning-gym", tasks


def _show(value: Any) -> str:
    """``'text' (str)``: a value, cut short, and its type."""
    kinds: dict[type, str] = {dict: "mapping", list: "list"}
    kind = "null" if value is None else kinds.get(type(value), type(value).__name__)
    text = _repr(value)
    return text if value is None else f"{text} ({kind})"


_SHORT_REPR = reprlib.Repr()
_SHORT_REPR.maxlevel, _SHORT_REPR.maxstring, _SHORT_REPR.maxother = 3, 60, 60
_SHORT_REPR.maxdict = _SHORT_REPR.maxlist = _SHORT_REPR.maxtuple = _SHORT_REPR.maxset = 4


def _repr(value: Any) -> str:
    """``repr(value)`` cut to 80 characters, built by :mod:`reprlib` (a few items per level, three
    levels), so a huge or self-repeating value (YAML aliases) costs no more than a short one; an
    int too long for ``repr`` is described."""
    try:
        text = _SHORT_REPR.repr(value)
    except ValueError:
        return f"<an int of more than {sys.get_int_max_str_digits()} digits>"
    return text if len(text) <= 80 else text[:77] + "..."


#: Most values (scalars, lists and mappings, counted as YAML aliases expand them) a config may hold.
MAX_CONFIG_VALUES = 100_000


def _check_size(value: Any, where: str) -> Any:
    """``value`` when it expands to at most :data:`MAX_CONFIG_VALUES` values; a ConfigError
    otherwise, found after counting that many (a YAML alias bomb is never expanded)."""
    stack: list[tuple[Any, bool]] = [(value, False)]
    path: set[int] = set()  # containers being expanded: a value inside itself is left to the config check
    count = 0
    while stack:
        item, leaving = stack.pop()
        if leaving:
            path.discard(id(item))
            continue
        count += 1
        if count > MAX_CONFIG_VALUES:
            raise ConfigError(
                f"{where} holds more than {MAX_CONFIG_VALUES:,} values as its aliases expand; a config is a few "
                "hundred (are YAML anchors and aliases repeated inside each other?)"
            )
        if isinstance(item, dict | list | tuple) and id(item) not in path:
            path.add(id(item))
            stack.append((item, True))
            children = [*item.keys(), *item.values()] if isinstance(item, dict) else item
            stack.extend((child, False) for child in children)
    return value


def _wrong(key: str, value: Any, tp: Any) -> ConfigError:
    return ConfigError(f"config key {key!r} = {_show(value)}; expected {type_name(tp, ranges=False)}", key=key)


#: pydantic's error types for a value of the right type that an ``Annotated`` constraint refuses.
_RANGE_ERRORS = {"greater_than", "greater_than_equal", "less_than", "less_than_equal", "predicate_failed"}
#: pydantic's error types of a tuple of the right element types that has the wrong length or an element out of range.
_TUPLE_RANGE_ERRORS = _RANGE_ERRORS | {"missing", "too_short", "too_long"}


def _check(value: Any, tp: Any, key: str) -> Any:
    """``value`` checked against ``tp``; an error names the innermost key that failed."""
    from pydantic import ValidationError

    if isinstance(tp, type) and dataclasses.is_dataclass(tp):
        if not isinstance(value, Mapping):
            raise _wrong(key, value, tp)
        return _build(tp, value, key)
    given = value
    bare = get_origin(tp.__origin__ if get_origin(tp) is Annotated else tp)
    if isinstance(value, tuple) and bare is not tuple:  # a Python caller's tuple for a list
        value = list(value)
    elif isinstance(value, list) and bare is tuple:  # a YAML list for a tuple (adam_betas, designer.settings)
        value = tuple(value)
    try:
        return adapter(tp).validate_python(value)
    except ValidationError as exc:
        # the first error's path into a list or mapping names its element; a union's branch names stop the walk,
        # and so does a tuple whose length or element range is wrong (its range is the whole tuple's)
        errors = sorted(exc.errors(), key=lambda e: e["type"] in _TUPLE_RANGE_ERRORS)  # a wrong type first
        path = errors[0]["loc"]
        value, walked = given, 0
        for n, part in enumerate(path):
            inner = (
                [a for a in get_args(tp) if a is not type(None)] if get_origin(tp) in (Union, types.UnionType) else []
            )
            tp = inner[0] if len(inner) == 1 else tp
            tp = tp.__origin__ if get_origin(tp) is Annotated and get_origin(tp.__origin__) in (list, tuple) else tp
            if get_origin(tp) is list and isinstance(part, int):
                key, value, tp = f"{key}[{part}]", value[part], get_args(tp)[0]
            elif get_origin(tp) is tuple and isinstance(part, int) and errors[0]["type"] not in _TUPLE_RANGE_ERRORS:
                args = get_args(tp)
                key, value, tp = f"{key}[{part}]", value[part], args[0] if args[-1] is Ellipsis else args[part]
            elif get_origin(tp) is dict and path[n + 1 : n + 2] == ("[key]",) and isinstance(value, Mapping):
                # the path holds the key as text: name the key itself
                key_type = get_args(tp)[0]
                raise _wrong(
                    f"{key} (a key)", next((k for k in value if refusal(k, key_type)), part), key_type
                ) from None
            elif get_origin(tp) is dict and isinstance(value, Mapping) and part in value:
                key, value, tp = f"{key}.{part}", value[part], get_args(tp)[1]
            else:
                break
            walked = n + 1
        kinds = {e["type"] for e in errors if e["loc"][:walked] == path[:walked]}  # the errors under the named key
        if kinds & _RANGE_ERRORS or (get_origin(tp) is tuple and kinds & _TUPLE_RANGE_ERRORS):
            _range(key, value, type_name(tp))  # the right type, out of its Annotated range
        raise _wrong(key, value, tp) from None


def _leaf_keys(cls: type, prefix: str = "") -> list[str]:
    """Every dotted key under a dataclass (sections expanded)."""
    hints = get_type_hints(cls)
    keys = []
    for f in config_fields(cls):
        dotted = f"{prefix}{f.name}"
        tp = hints[f.name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            keys.extend(_leaf_keys(tp, dotted + "."))
        else:
            keys.append(dotted)
    return keys


def _unknown(cls: type, key: Any, prefix: str) -> ConfigError:
    names = [f.name for f in config_fields(cls)]
    dotted = f"{prefix}.{key}" if prefix else str(key)
    close = difflib.get_close_matches(str(key), names, n=1, cutoff=0.6)
    suggestion = f"{prefix}.{close[0]}" if prefix and close else (close[0] if close else "")
    if not suggestion:  # a key put in the wrong section: 'learning_rate' at the top level
        elsewhere = [k for k in _leaf_keys(SelfPlayConfig) if k.rsplit(".", 1)[-1] == str(key) and k != dotted]
        suggestion = elsewhere[0] if elsewhere else ""
    hint = f"; did you mean {suggestion!r}?" if suggestion else "."
    where = f"of section {prefix!r}" if prefix else "(top-level sections)"
    return ConfigError(f"unknown config key {dotted!r}{hint} Known keys {where}: {', '.join(names)}", key=dotted)


def _keys(obj: Any, data: dict[str, Any]) -> dict[str, Any]:
    return {
        f.name: _keys(value, data[f.name]) if dataclasses.is_dataclass(value) else data[f.name]
        for f in config_fields(obj)
        for value in [getattr(obj, f.name)]
    }


def _build(cls: type[_T], data: Mapping[str, Any], prefix: str) -> _T:
    """An instance of dataclass ``cls`` from ``data``, every key and value checked."""
    if not isinstance(data, Mapping):
        raise _wrong(prefix, data, cls)
    hints = get_type_hints(cls, include_extras=True)
    names = {f.name for f in config_fields(cls)}
    kwargs = {}
    for key, value in data.items():
        if not isinstance(key, str) or key not in names:
            raise _unknown(cls, key, prefix)
        kwargs[key] = _check(value, hints[key], f"{prefix}.{key}" if prefix else key)
    try:
        return cls(**kwargs)
    except ValueError as exc:  # a section whose own checks refuse a combination (RewardConfig's window)
        raise ConfigError(f"config section {prefix!r}: {exc}", key=prefix) from exc


def _range(key: str, value: Any, expected: str) -> NoReturn:
    raise ConfigError(f"config key {key!r} = {_repr(value)}; expected {expected}", key=key)


def _is_str_field(parts: Sequence[str]) -> bool:
    """Whether the dotted path names a string field."""
    tp: Any = SelfPlayConfig
    for part in parts:
        hints = get_type_hints(tp) if isinstance(tp, type) and dataclasses.is_dataclass(tp) else {}
        if part not in hints:
            return False
        tp = hints[part]
    return tp is str or (get_origin(tp) is Literal and all(isinstance(c, str) for c in get_args(tp)))


def _yaml() -> Any:
    try:
        import yaml
    except ImportError as exc:  # pragma: no cover - PyYAML comes with the train extra
        raise ConfigError(f"reading a YAML config needs PyYAML: {install_hint('train')}") from exc
    return yaml


def _load_yaml(text: str, where: str) -> Any:
    yaml = _yaml()
    try:
        return _check_size(yaml.load(text, Loader=strict_yaml_loader()), where)  # noqa: S506 - a SafeLoader subclass
    except yaml.YAMLError as exc:
        raise ConfigError(f"{where} is not valid YAML: {exc}") from exc
    except RecursionError:
        raise ConfigError(f"{where} is nested too deeply") from None
    except ValueError as exc:  # an int longer than Python converts (sys.get_int_max_str_digits)
        raise ConfigError(f"{where}: {exc}") from None


def _scalar_yaml(value: Any) -> str:
    """``value`` as one line of YAML that the strict loader reads back equal (a tuple as a list)."""
    yaml = _yaml()
    value = list(value) if isinstance(value, tuple) else value
    text = yaml.safe_dump(value, default_flow_style=True, sort_keys=False, allow_unicode=True, width=10**9)
    text = text.strip().removesuffix("...").strip()  # the document end marker
    if _load_yaml(text, "rendered value") != value:  # a string the YAML 1.1 dumper left plain ("1e-4")
        text = json.dumps(value, ensure_ascii=False)
    return text


def _comment(text: str, indent: str) -> list[str]:
    return [f"{indent}# {line}" for line in textwrap.wrap(text, width=100 - len(indent) - 2, break_on_hyphens=False)]


def _render_section(obj: Any, indent: str) -> list[str]:
    hints = get_type_hints(type(obj), include_extras=True)
    lines: list[str] = []
    for f in config_fields(obj):
        value = getattr(obj, f.name)
        tp = hints[f.name]
        ranged = any(get_origin(a) is Annotated for a in (tp, *get_args(tp)))  # its range follows its help
        lines.extend(_comment(f.metadata.get("help", "") + (f"; {type_name(tp)}" if ranged else ""), indent))
        if dataclasses.is_dataclass(tp):
            lines.append(f"{indent}{f.name}:")
            lines.extend(_render_section(value, indent + "  "))
        else:
            lines.append(f"{indent}{f.name}: {_scalar_yaml(value)}")
    return lines


def _render_yaml(config: SelfPlayConfig) -> str:
    lines = [
        "# spade self-play configuration: spade selfplay --config FILE",
        "# Every key is optional (a missing key takes its default); an unknown key is an error.",
        "# `spade selfplay --help-config` describes every key.",
    ]
    for name in SECTIONS:
        section = getattr(config, name)
        lines.append("")
        lines.extend(_comment(" ".join(_SECTION_HELP[name].split()), ""))
        lines.append(f"{name}:")
        lines.extend(_render_section(section, "  "))
    return "\n".join(lines) + "\n"


def _describe(cls: type, prefix: str, lines: list[str]) -> None:
    hints = get_type_hints(cls, include_extras=True)
    defaults = cls()
    for f in config_fields(cls):
        dotted = f"{prefix}.{f.name}"
        tp = hints[f.name]
        if isinstance(tp, type) and dataclasses.is_dataclass(tp):
            lines.append(f"  {dotted}: section -- {f.metadata.get('help', '')}")
            _describe(tp, dotted, lines)
            continue
        default = getattr(defaults, f.name)
        lines.append(f"  {dotted}: {type_name(tp)} = {_scalar_yaml(default)}")
        help_lines = textwrap.wrap(f.metadata.get("help", ""), width=94, break_on_hyphens=False)
        lines.extend(" " * 6 + line for line in help_lines)  # 100 columns in all


def describe_config() -> str:
    """Every field of :class:`SelfPlayConfig`: its dotted key, type, default and help, by section
    (``spade selfplay --help-config`` and the docs)."""
    lines = [
        "Self-play configuration (YAML; every key optional, unknown keys are errors).",
        "Override any key on the command line with --set KEY=VALUE (repeatable), e.g. --set train.learning_rate=1e-4.",
    ]
    for name, cls in SECTIONS.items():
        lines.append("")
        lines.append(f"{name}: {' '.join(_SECTION_HELP[name].split())}")
        _describe(cls, name, lines)
    return "\n".join(lines) + "\n"
