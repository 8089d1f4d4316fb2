"""Share what spade_gym makes: rollouts, registries and designs as JSONL files or dataset folders.

A *dataset folder* is one JSONL file and a ``README.md`` dataset card, which ``datasets.load_dataset``
reads and ``hf upload --repo-type dataset`` publishes. Rows hold JSON values only; nested records
whose keys vary (errors, meta) are JSON text, so every row has one schema.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from spade_gym.agent import Trajectory
from spade_gym.errors import Category, DuplicateEnvironment, ProgramError, RegistryError
from spade_gym.files import replace_atomically
from spade_gym.program import EnvProgram
from spade_gym.registry import FLAGGED_TAG, Registry
from spade_gym.registry.records import EnvRecord

__all__ = [
    "ImportOutcome",
    "designer_sft_rows",
    "import_registry",
    "iter_rows",
    "read_rows",
    "registry_rows",
    "rollout_rows",
    "write_rows",
]

# No `configs:` in the card: datasets finds the one JSONL file itself, and caches it by its mtime (with
# `configs`, datasets 5 keys its cache by the card alone, so a folder written again loads stale rows).
_CARD = """---
tags:
- spade-gym
---
# {title}

{about} The rows are in `{file}`.
"""


def write_rows(rows: Iterable[Mapping[str, Any]], out: str | os.PathLike[str], *, name: str, about: str) -> Path:
    """Write ``rows`` as JSONL to ``out`` (a ``.jsonl`` path), or as a dataset folder ``out/`` holding
    ``<name>.jsonl`` and a dataset card saying ``about``; return the file written. Atomic per file.

    Raises:
        ValueError: a value that is not JSON (NaN and infinities included).
    """
    target = Path(out)
    folder = None if target.suffix == ".jsonl" else target
    path = folder / f"{name}.jsonl" if folder is not None else target
    path.parent.mkdir(parents=True, exist_ok=True)
    text = "".join(json.dumps(dict(row), ensure_ascii=False, allow_nan=False) + "\n" for row in rows)
    replace_atomically(path, text)
    if folder is not None:
        replace_atomically(folder / "README.md", _CARD.format(file=path.name, title=name, about=about))
    return path


#: Longest row :func:`iter_rows` reads (bytes); a longer line is refused unread (a program is at most 100 KB).
MAX_ROW_BYTES = 8 * 2**20


def iter_rows(source: str | os.PathLike[str], *, max_row_bytes: int = MAX_ROW_BYTES) -> Iterator[dict[str, Any]]:
    """The rows of a JSONL file or of a dataset folder (its one ``.jsonl`` file), one line at a time.

    Raises:
        ValueError: no such file or folder, a folder without exactly one ``.jsonl`` file, a line over
            ``max_row_bytes``, or a line that is not a JSON object (each named by file and line).
    """
    path = Path(source)
    if path.is_dir():
        files = sorted(path.glob("*.jsonl"))
        if len(files) != 1:
            raise ValueError(f"{path} holds {len(files)} .jsonl files; a dataset folder holds exactly one")
        path = files[0]
    if not path.is_file():
        raise ValueError(f"{path} is neither a .jsonl file nor a dataset folder")
    with open(path, "rb") as fh:
        for number, line in enumerate(iter(lambda: fh.readline(max_row_bytes + 1), b""), 1):
            if len(line) > max_row_bytes:  # refused at once: the rest of the line is never read
                raise ValueError(
                    f"{path}:{number} is longer than {max_row_bytes:,} bytes; a row is a program and its meta"
                )
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except (ValueError, RecursionError) as exc:
                raise ValueError(f"{path}:{number} is not JSON ({str(exc)[:200]})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}:{number} is a JSON {type(row).__name__}, not an object")
            yield row


def read_rows(source: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """All rows of :func:`iter_rows` (same errors)."""
    return list(iter_rows(source))


def rollout_rows(trajectories: Iterable[Trajectory]) -> list[dict[str, Any]]:
    """One row per episode: its chat ``messages``, per-turn ``actions`` (``None``: a malformed tool
    call, not sent), ``rewards`` and ``format_ok``, the outcome, and ``error`` as JSON text."""
    return [
        {
            "env_id": t.env_id,
            "seed": t.seed,
            "hint": t.hint,
            "messages": [{"role": m["role"], "content": m["content"]} for m in t.messages],
            "actions": [turn.action for turn in t.turns],
            "rewards": list(t.rewards),
            "format_ok": [turn.format_ok for turn in t.turns],
            "episode_return": t.episode_return,
            "success": t.success,
            "turns": t.num_turns,
            "terminated": t.terminated,
            "truncated": t.truncated,
            "error": None if t.error is None else json.dumps(t.error, ensure_ascii=False, default=str),
        }
        for t in trajectories
    ]


def registry_rows(registry: Registry, *, include_flagged: bool = False) -> list[dict[str, Any]]:
    """One row per environment, in creation order, with its ``program`` source and ``meta.json`` as
    JSON text; flagged environments are left out unless ``include_flagged``."""
    return [
        {
            "env_id": record.env_id,
            "setting": record.setting,
            "description": record.description,
            "program": record.program().source,
            "meta": json.dumps(record.to_meta(), ensure_ascii=False),
        }
        for record in registry
        if include_flagged or FLAGGED_TAG not in record.tags
    ]


@dataclass(frozen=True)
class ImportOutcome:
    """What :func:`import_registry` did with one row: ``status`` is ``"added"`` (as ``env_id``),
    ``"duplicate"`` (of a registered environment, named in ``message``) or ``"refused"`` (by the gate
    or as malformed; ``message`` says why)."""

    source_id: str
    status: str
    env_id: str | None = None
    message: str = ""


def import_registry(
    source: str | os.PathLike[str] | Sequence[Mapping[str, Any]],
    registry: Registry,
    *,
    validate: bool = True,
    config: Any = None,
) -> list[ImportOutcome]:
    """Add the environments of a dataset folder, JSONL file or rows (:func:`registry_rows`) to ``registry``.

    With ``validate`` (default) every program passes the validation gate (``config``: its
    :class:`~spade_gym.validation.ValidationConfig`) as a new design would (a shared pool is untrusted
    code); else only the static check runs. Provenance and measured statistics are kept; sampling
    counts start at 0.

    Raises:
        ValueError: ``source`` cannot be read (see :func:`iter_rows`); nothing is added then.
        RegistryError: ``registry`` cannot be written.
    """
    from spade_gym.registry.gymnasium import register_record
    from spade_gym.stages import register_program

    rows: Iterable[Mapping[str, Any]]
    if isinstance(source, str | os.PathLike):
        for _ in iter_rows(source):  # the whole file is checked before anything is added; then streamed
            pass
        rows = iter_rows(source)
    else:
        rows = source
    outcomes = []
    for number, row in enumerate(rows, 1):
        source_id = str(row.get("env_id", f"row {number}"))
        try:
            meta: Any = json.loads(row["meta"]) if isinstance(row.get("meta"), str) else row.get("meta")
            record = EnvRecord.from_meta(meta, ".")
            program = EnvProgram(row["program"]) if isinstance(row.get("program"), str) else None
            if program is None or program.id != record.program_id:
                raise RegistryError(f"its program is missing or is not the one its meta names ({record.program_id})")
        except (KeyError, ValueError, TypeError, RegistryError, ProgramError) as exc:
            outcomes.append(ImportOutcome(source_id, "refused", message=f"malformed row: {exc}"))
            continue
        try:
            program.check()
        except ProgramError as exc:
            outcomes.append(ImportOutcome(source_id, "refused", message=exc.message))
            continue
        measured = replace(record.stats, times_sampled=0, last_sampled=None)
        provenance: dict[str, Any] = {"tags": record.tags, "document": record.document, "parents": record.parents}
        if validate:
            report, added = register_program(program, registry, config=config, **provenance)
            if added is None:
                status = "duplicate" if report.category == Category.DUPLICATE else "refused"
                why = "; ".join(f"{c.name} ({c.category}): {c.message}" for c in report.failures)
                outcomes.append(ImportOutcome(source_id, status, message=why[:1000]))
                continue
            stats = {k: v for k, v in measured.to_dict().items() if k not in ("times_sampled", "last_sampled")}
            added = registry.update_stats(added.env_id, **stats)
        else:
            try:
                added = registry.add(
                    program,
                    name=record.name,
                    setting=record.setting,
                    max_turns=record.max_turns,
                    description=record.description,
                    validation=record.validation,
                    stats=measured,
                    allow_near_duplicates=True,
                    **provenance,
                )
            except DuplicateEnvironment as exc:
                outcomes.append(ImportOutcome(source_id, "duplicate", message=exc.message))
                continue
            register_record(added)
        outcomes.append(ImportOutcome(source_id, "added", env_id=added.env_id))
    return outcomes


def designer_sft_rows(
    designs: str | os.PathLike[str], *, min_reward: float | None = None
) -> tuple[list[dict[str, Any]], dict[str, int]]:
    """Chat SFT rows for the Designer from a run's ``designs.jsonl`` (or its run folder): every accepted
    design with a reward of at least ``min_reward``. Returns ``(rows, skipped)``: the designs left out, by reason.

    Raises:
        ValueError: no ``designs.jsonl`` there, or a line that is not a JSON object.
    """
    from spade_gym.trainer.run import DESIGN_TEXT_CHARS

    path = Path(designs)
    path = path / "designs.jsonl" if path.is_dir() else path
    rows, skipped = [], {"not accepted": 0, "below min_reward": 0, "no prompt recorded": 0, "completion cut": 0}
    for design in read_rows(path):
        reason = None
        if not design.get("env_id"):
            reason = "not accepted"
        elif min_reward is not None and float(design.get("reward", 0.0)) < min_reward:
            reason = "below min_reward"
        elif not isinstance(design.get("messages"), list):
            reason = "no prompt recorded"  # written before designs.jsonl recorded the prompt
        elif len(str(design.get("completion", ""))) >= DESIGN_TEXT_CHARS:
            reason = "completion cut"
        if reason is not None:
            skipped[reason] += 1
            continue
        prompt = [{"role": m["role"], "content": m["content"]} for m in design["messages"]]
        rows.append(
            {
                "messages": [*prompt, {"role": "assistant", "content": design["completion"]}],
                "env_id": design["env_id"],
                **{key: design.get(key) for key in ("reward", "mode", "setting", "iteration")},
            }
        )
    return rows, skipped
