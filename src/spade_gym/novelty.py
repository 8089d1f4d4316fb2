"""The novelty check: is a program a copy of a registered environment, judged by what it does?

Text similarity is no test (a copy padded with dead data, or with its task statement reworded, keeps
the old behaviour), so a candidate is compared by behaviour with every registered environment of its
setting and ``max_turns``:

1. Each registered environment has a **probe** (``probe.json`` in its folder, made when first needed):
   on the registry's secret :data:`PROBE_SEEDS` seeds (``probe_seeds.json``), the actions of
   :data:`KINDS` episodes (at most :data:`PROBE_TURNS` turns), the reward and flags each returned, and
   a **view** of each observation: a hash of its tokens less the *template* (the tokens every seed's
   first observation shares: the task statement's fixed wording).
2. The candidate's first views are compared with every probe's; each environment matching on at
   least :data:`DUPLICATE_SHARE` of the seeds has its probe replayed on the candidate, which
   **duplicates** it when on that share of the seeds every step gives the same reward, flags and view.

A program with the :func:`~spade_gym.registry.dedup.ast_hash` of a registered one (a renamed copy) is
an exact duplicate, without running it.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING, Any

from spade_gym.errors import Category, SandboxSetupError, SpadeError
from spade_gym.files import read_bounded, replace_atomically, write_durably
from spade_gym.program import EnvProgram
from spade_gym.sandbox import Budget, HostBudget, SandboxClient
from spade_gym.seeds import draw_seeds
from spade_gym.trivial import garbage_action
from spade_gym.verdict import ValidationConfig, ValidationReport, conclude

if TYPE_CHECKING:
    from spade_gym.registry import EnvRecord, Registry

__all__ = [
    "DUPLICATE_SHARE",
    "PROBE_FILE",
    "PROBE_SEEDS",
    "PROBE_TURNS",
    "Probe",
    "ProbeEpisode",
    "check_novelty",
    "duplicate_of",
    "near_miss",
    "first_views",
    "probe_of",
    "probe_seeds",
    "record_probe",
    "replay_probe",
]

#: The probe's file in an environment's registry folder, and the registry's probe seeds' file.
PROBE_FILE = "probe.json"
PROBE_SEEDS_FILE = "probe_seeds.json"
#: Seeds of a probe, and turns of a probe episode at most.
PROBE_SEEDS = 6
PROBE_TURNS = 16
#: Characters of an observation a view reads (bounds the host's work on 1 MiB observations).
VIEW_CHARS = 16_384
#: Share of a probe's seeds on which a candidate must behave the same to be a duplicate.
DUPLICATE_SHARE = 0.75
#: Largest ``probe.json`` read, bytes.
MAX_PROBE_BYTES = 1 << 20
#: The probe's episodes per seed: the program's own oracle, near misses (the oracle's action with its
#: last letter or digit changed: what a wrong answer is told) and malformed answers.
KINDS = ("oracle", "near", "garbage")
_PROBE_VERSION = 1
_TOKEN = re.compile(r"[0-9a-z]+")


@dataclass(frozen=True)
class ProbeEpisode:
    """One probe episode: its ``seed`` and ``kind``, the ``actions`` sent, ``steps`` (reward rounded
    to 1e-6, terminated, truncated) and ``views`` (first observation, then one per step)."""

    seed: int
    kind: str
    actions: tuple[str, ...]
    steps: tuple[tuple[float, bool, bool], ...]
    views: tuple[str, ...]


@dataclass(frozen=True)
class Probe:
    """An environment's behavioural fingerprint: its ``setting``, ``max_turns`` (as the host plays
    it), tool names, and :class:`ProbeEpisode` s (:data:`KINDS` on each seed)."""

    setting: str
    max_turns: int
    tools: tuple[str, ...]
    episodes: tuple[ProbeEpisode, ...]

    @property
    def seeds(self) -> list[int]:
        return list(dict.fromkeys(e.seed for e in self.episodes))

    def to_json(self) -> str:
        return json.dumps({"version": _PROBE_VERSION, **asdict(self)}, ensure_ascii=False)

    @classmethod
    def from_json(cls, text: str) -> Probe:
        """Inverse of :meth:`to_json`; ValueError naming what is wrong."""
        data = json.loads(text)
        if not isinstance(data, dict) or data.get("version") != _PROBE_VERSION:
            raise ValueError(f"not a version {_PROBE_VERSION} probe")
        try:
            episodes = tuple(
                ProbeEpisode(
                    int(e["seed"]),
                    str(e["kind"]),
                    tuple(str(a) for a in e["actions"]),
                    tuple((float(r), bool(te), bool(tr)) for r, te, tr in e["steps"]),
                    tuple(str(v) for v in e["views"]),
                )
                for e in data["episodes"]
            )
            probe = cls(str(data["setting"]), int(data["max_turns"]), tuple(map(str, data["tools"])), episodes)
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(f"a malformed probe ({type(exc).__name__}: {str(exc)[:80]})") from None
        if probe.max_turns < 1 or any(len(e.views) != len(e.steps) + 1 for e in episodes):
            raise ValueError("a malformed probe (max_turns < 1, or views that do not match the steps)")
        return probe


def near_miss(action: str) -> str:
    """``action`` with its last digit or letter changed (``"41"`` -> ``"42"``, ``"cat"`` -> ``"cau"``);
    ``action + "x"`` when it has neither."""
    for i in range(len(action) - 1, -1, -1):
        c = action[i]
        if c.isdigit():
            return action[:i] + str((int(c) + 1) % 10) + action[i + 1 :]
        if "a" <= c.lower() <= "z":
            nxt = chr((ord(c.lower()) - 96) % 26 + 97)
            return action[:i] + (nxt.upper() if c.isupper() else nxt) + action[i + 1 :]
    return action + "x"


def _tool_names(tools: Sequence[Any]) -> tuple[str, ...]:
    names = []
    for tool in tools:
        function = tool.get("function", tool) if isinstance(tool, dict) else {}
        names.append(str(function.get("name", "")) if isinstance(function, dict) else "")
    return tuple(sorted(names))


def _tokens(text: str) -> list[str]:
    return _TOKEN.findall(text[:VIEW_CHARS].lower())


class _Played:
    """Episodes played for a probe: their actions, steps and token lists (views need every seed's first)."""

    def __init__(self) -> None:
        self.rows: list[tuple[int, str, list[str], list[tuple[float, bool, bool]], list[list[str]]]] = []

    def views(self) -> list[ProbeEpisode]:
        firsts: dict[int, set[str]] = {}
        for seed, _kind, _actions, _steps, tokens in self.rows:
            firsts.setdefault(seed, set(tokens[0]))
        template = set.intersection(*firsts.values()) if len(firsts) > 1 else set()

        def view(tokens: list[str]) -> str:
            data = " ".join(t for t in tokens if t not in template)
            return hashlib.blake2b(data.encode(), digest_size=8).hexdigest()

        return [
            ProbeEpisode(seed, kind, tuple(actions), tuple(steps), tuple(view(t) for t in tokens))
            for seed, kind, actions, steps, tokens in self.rows
        ]


def _play(
    client: SandboxClient,
    seed: int,
    kind: str,
    act: Callable[[int], str],
    budget: Budget,
    host: HostBudget,
    played: _Played,
) -> None:
    """One probe episode as the Agent's: reset, ``hint()``, then up to :data:`PROBE_TURNS` steps."""
    obs, _info = client.call("reset", {"seed": seed}, budget)
    client.call("hint", None, budget)
    actions: list[str] = []
    steps: list[tuple[float, bool, bool]] = []
    tokens = [_tokens(obs)]
    for turn in range(PROBE_TURNS):
        if why := host.exhausted():
            raise _OutOfBudget(why)
        action = act(turn)
        actions.append(action)
        obs, reward, terminated, truncated, _info = client.call("step", {"action": action}, budget)
        steps.append((round(float(reward), 6), bool(terminated), bool(truncated)))
        tokens.append(_tokens(obs))
        if terminated or truncated:
            break
    played.rows.append((seed, kind, actions, steps, tokens))


class _OutOfBudget(Exception):
    pass


def record_probe(
    program: EnvProgram | str, seeds: Sequence[int] | None = None, config: ValidationConfig | None = None
) -> Probe:
    """Play ``program``'s probe on ``seeds`` (default: :data:`PROBE_SEEDS` fresh ones) in one worker,
    within ``config.budget_s`` and ``host_budget_s``. Raises SpadeError when the program fails or
    the budget runs out, SandboxSetupError when no worker starts."""
    program = EnvProgram(program) if isinstance(program, str) else program
    config = config or ValidationConfig()
    budget = Budget(config.budget_s, what="probe", wall=True, wall_factor=config.sandbox.wall_factor)
    host = HostBudget(config.host_budget_s, "probe")
    host.charge()
    seeds = list(seeds) if seeds is not None else draw_seeds(PROBE_SEEDS, f"probe-{program.id}")
    played = _Played()
    with SandboxClient(replace(config.sandbox, hash_seed=config.hash_seeds[0])) as client:
        spec = client.load(program.source)
        for seed in seeds:
            for kind in KINDS:

                def act(turn: int, kind: str = kind, seed: int = seed) -> str:
                    if kind == "garbage":
                        return garbage_action(config.random_text_seed, seed, turn)
                    action = str(client.call("oracle", None, budget))
                    return near_miss(action) if kind == "near" else action

                try:
                    _play(client, seed, kind, act, budget, host, played)
                except _OutOfBudget as exc:
                    raise SpadeError(f"recording the probe: {exc}", category=Category.TIMEOUT) from None
    max_turns = min(spec.max_turns, config.sandbox.max_turns)
    return Probe(spec.setting, max_turns, _tool_names(spec.tools), tuple(played.views()))


def replay_probe(client: SandboxClient, source: str, probe: Probe, budget: Budget, host: HostBudget) -> tuple[int, int]:
    """Replay ``probe``'s actions on the program ``source`` loaded in ``client``: ``(seeds on which
    every step gave the same reward, flags and view, seeds)``. A failing program differs on that
    seed (its worker is started again). Raises SpadeError when the worker budget runs out."""
    played = _Played()
    failed: set[int] = set()
    for episode in probe.episodes:
        if why := budget.exhausted():
            raise SpadeError(why, category=Category.TIMEOUT)
        actions = episode.actions

        def replayed(turn: int, actions: tuple[str, ...] = actions) -> str:
            return actions[turn] if turn < len(actions) else ""

        try:
            _play(client, episode.seed, episode.kind, replayed, budget, host, played)
        except SandboxSetupError:
            raise
        except SpadeError:
            failed.add(episode.seed)
            if not client.alive:
                client.load(source)
            played.rows.append((episode.seed, episode.kind, [], [], [[]]))
    same: dict[int, bool] = {}
    for mine, theirs in zip(played.views(), probe.episodes, strict=True):
        match = mine.seed not in failed and mine.steps == theirs.steps and mine.views == theirs.views
        same[theirs.seed] = same.get(theirs.seed, True) and match
    return sum(same.values()), len(same)


def probe_seeds(registry: Registry) -> list[int]:
    """The registry's probe seeds: read from ``probe_seeds.json`` at its root, else drawn
    (:func:`~spade_gym.seeds.draw_seeds`) and written there (kept in memory when it is read-only)."""
    path = registry.root / PROBE_SEEDS_FILE
    for _attempt in range(2):
        text = read_bounded(path, 4096)
        if text is not None:
            try:
                seeds = json.loads(text)
                if isinstance(seeds, list) and len(seeds) == PROBE_SEEDS and all(type(s) is int for s in seeds):
                    return seeds
            except ValueError:
                pass
        seeds = _SEEDS.setdefault(str(registry.root), draw_seeds(PROBE_SEEDS, f"probe-seeds-{registry.root}"))
        try:
            write_durably(path, json.dumps(seeds).encode(), exclusive=True)  # the first writer's seeds win
            return seeds
        except FileExistsError:
            continue  # written by another process meanwhile: read it
        except OSError:
            return seeds
    return _SEEDS[str(registry.root)]


_SEEDS: dict[str, list[int]] = {}


def first_views(client: SandboxClient, seeds: Sequence[int], budget: Budget) -> dict[int, str]:
    """The view of the first observation of ``reset(seed)`` (then ``hint()``, as the Agent's) for each
    seed, the template taken over these seeds: what a probe's episodes start with."""
    played = _Played()
    for seed in seeds:
        obs, _info = client.call("reset", {"seed": seed}, budget)
        client.call("hint", None, budget)
        played.rows.append((seed, "first", [], [], [_tokens(obs)]))
    return {episode.seed: episode.views[0] for episode in played.views()}


def probe_of(record: EnvRecord, seeds: Sequence[int], config: ValidationConfig) -> Probe | None:
    """``record``'s probe on ``seeds``: read from its folder, else recorded and written there (kept in
    memory when the folder is read-only); ``None`` when the registered program cannot be probed."""
    path = record.path / PROBE_FILE
    text = read_bounded(path, MAX_PROBE_BYTES)
    if text is not None:
        try:
            probe = Probe.from_json(text)
            if probe.seeds == list(seeds):
                return probe
        except ValueError:
            pass  # damaged, or of other seeds: recorded again
    cached = _CACHE.get((str(record.path), record.program_id, tuple(seeds)))
    if cached is not None:
        return cached
    try:
        probe = record_probe(record.program(), seeds, config)
    except SandboxSetupError:
        raise
    except SpadeError:
        return None
    try:
        replace_atomically(path, probe.to_json())
    except OSError:
        _CACHE[(str(record.path), record.program_id, tuple(seeds))] = probe
    return probe


_CACHE: dict[tuple[str, str, tuple[int, ...]], Probe] = {}


def duplicate_of(program: EnvProgram, registry: Registry | None, config: ValidationConfig) -> tuple[str, str] | None:
    """``(category, why)`` when ``program`` duplicates an environment of ``registry`` (``DUPLICATE``,
    the module's rules) or cannot be compared with them (``TIMEOUT`` when it exhausts
    ``config.budget_s`` of worker CPU or ``host_budget_s`` of the host's, else its error's category);
    ``None`` when it is novel. SandboxSetupError: no worker starts.
    """
    if registry is None:
        return None
    exact = registry.exact_duplicate(program)
    if exact is not None:
        return Category.DUPLICATE, (
            f"the program is an exact duplicate of the registered {exact.env_id}: the same code up to names, the "
            "environment's name, docstrings, comments and layout"
        )
    budget = Budget(config.budget_s, what="novelty check", wall=True, wall_factor=config.sandbox.wall_factor)
    host = HostBudget(config.host_budget_s, "novelty check")
    host.charge()
    with SandboxClient(replace(config.sandbox, hash_seed=config.hash_seeds[0])) as client:
        try:
            spec = client.load(program.source)
        except SandboxSetupError:
            raise
        except SpadeError as exc:
            return _not_compared(exc)
        max_turns, tools = min(spec.max_turns, config.sandbox.max_turns), _tool_names(spec.tools)
        seeds = probe_seeds(registry)
        needed = math.ceil(DUPLICATE_SHARE * len(seeds))
        mine: dict[int, str] | None = None
        for record in registry.records(spec.setting):
            if min(record.max_turns, config.sandbox.max_turns) != max_turns:
                continue
            probe = probe_of(record, seeds, config)
            if probe is None or probe.tools != tools or probe.max_turns != max_turns:
                continue
            try:
                if mine is None:
                    mine = first_views(client, seeds, budget)
            except SpadeError as exc:
                return _not_compared(exc)
            theirs = {e.seed: e.views[0] for e in probe.episodes}
            if sum(mine.get(seed) == view for seed, view in theirs.items()) < needed:
                continue  # another task from the first observation on: no replay
            try:
                same, played = replay_probe(client, program.source, probe, budget, host)
            except _OutOfBudget as exc:
                return Category.TIMEOUT, f"the novelty check could not finish: {exc} (ValidationConfig.host_budget_s)"
            except SpadeError as exc:
                return (
                    Category.TIMEOUT,
                    f"the novelty check could not finish: {exc.message} (ValidationConfig.budget_s)",
                )
            if same >= math.ceil(DUPLICATE_SHARE * played):
                return Category.DUPLICATE, (
                    f"the program behaves like the registered {record.env_id}: on {same} of {played} probe episodes "
                    "it accepts the same answers, pays the same rewards and shows the Agent the same task"
                )
    return None


def _not_compared(exc: SpadeError) -> tuple[str, str]:
    return exc.category, f"the program could not be compared with the registered environments: {exc.message}"


def check_novelty(
    report: ValidationReport, program: EnvProgram | str, registry: Registry, config: ValidationConfig | None = None
) -> ValidationReport:
    """Run the novelty check of a report made without a registry: ``check_novelty(validate(p, c), p,
    r, c)`` gives the verdict of ``validate(p, c, registry=r)``, as a new report (the check stays
    unrun when validation stopped before it). ``config``: default the report's own limits.

    Raises ValueError when ``report`` is not the report of ``program``.
    """
    program = EnvProgram(program) if isinstance(program, str) else program
    if report.program_id != program.id:
        raise ValueError(f"the report is of program {report.program_id}, not of the given program {program.id}")
    if config is None:  # the report's own budgets, as far as the novelty check uses them
        defaults, saved = ValidationConfig(), report.config
        keys = ("budget_s", "host_budget_s")
        config = replace(defaults, **{key: type(getattr(defaults, key))(saved[key]) for key in keys if key in saved})
    out = ValidationReport.from_dict(report.to_dict())
    novelty = out.check("novelty")
    if novelty.passed is None:  # validation stopped before the novelty check
        return out
    started = time.perf_counter()
    problem = duplicate_of(program, registry, config)
    seconds = round(time.perf_counter() - started, 6)
    novelty.passed, novelty.category, novelty.message = (True, None, "") if problem is None else (False, *problem)
    novelty.seconds += seconds
    out.seconds = round(out.seconds + seconds, 6)
    conclude(out)
    return out
