"""What the registry stores about one environment (in its ``meta.json``): :class:`EnvRecord` and
:class:`EnvStats`; and the names of an entry's files."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import reprlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from spade_gym.errors import RegistryError
from spade_gym.program import SETTINGS, EnvProgram

__all__ = [
    "ENVS_DIR",
    "ENV_ID_PATTERN",
    "GYM_PREFIX",
    "META_FILE",
    "META_SCHEMA_VERSION",
    "NAME_PATTERN",
    "PROGRAM_ID_PATTERN",
    "SOURCE_FILE",
    "EnvRecord",
    "EnvStats",
]

#: ``schema_version`` written into every ``meta.json``.
META_SCHEMA_VERSION = 1
ENVS_DIR = "envs"
SOURCE_FILE = "env.py"
META_FILE = "meta.json"
#: An environment's name, its id (``<name>-v<version>``) and a program id (SHA-256 hex).
NAME_PATTERN = re.compile(r"[A-Z][A-Za-z0-9_]{0,99}")
ENV_ID_PATTERN = re.compile(r"(?P<name>[A-Z][A-Za-z0-9_]{0,99})-v(?P<version>0|[1-9][0-9]{0,8})")
PROGRAM_ID_PATTERN = re.compile(r"[0-9a-f]{64}")
#: The gymnasium namespace of registered environments.
GYM_PREFIX = "spade/"
#: Largest ``max_turns`` a record may hold (the program contract's), and longest description (a
#: program's size limit) and tag.
MAX_TURNS = 100_000
MAX_DESCRIPTION_CHARS = 100_000
MAX_TAG_CHARS = 200

_SHORT = reprlib.Repr()
_SHORT.maxstring, _SHORT.maxother, _SHORT.maxlevel = 60, 60, 2
_SHORT.maxlist = _SHORT.maxdict = _SHORT.maxtuple = _SHORT.maxset = 4


def shown(value: Any) -> str:
    """A short ``repr`` of a value read from a file (:mod:`reprlib`: a few items, strings cut), for messages."""
    try:
        return _SHORT.repr(value)
    except ValueError:  # an int too long to print
        return "<a very long int>"


@dataclass
class EnvStats:
    """What has been measured about one environment (``None``: not measured), and how often replay drew it.

    Attributes:
        episodes: episodes measured (int >= 0).
        mean_return_hint, mean_return_nohint: mean episode return with and without the privileged hint.
        regret: the Designer's regret (:mod:`spade_gym.regret`: what the hint adds beyond the
            no-hint return and beyond the hint alone), the replay score.
        times_sampled: draws by :meth:`Registry.sample` with ``mark=True``.
        last_sampled: the global sample counter after its last draw (``None``: never), PLR's ``C_i``.
        format_compliance: share of measured Agent turns with a parsable action, in [0, 1]
            (:func:`spade_gym.agent.format_compliance`).
    """

    episodes: int = 0
    mean_return_hint: float | None = None
    mean_return_nohint: float | None = None
    regret: float | None = None
    times_sampled: int = 0
    last_sampled: int | None = None
    format_compliance: float | None = None

    def validate(self) -> None:
        """Raise ``ValueError`` naming the first field with a value of the wrong type or range."""
        for name in ("episodes", "times_sampled"):
            value = getattr(self, name)
            if type(value) is not int or value < 0:
                raise ValueError(f"EnvStats.{name} = {shown(value)}; expected an int >= 0")
        if self.last_sampled is not None and (type(self.last_sampled) is not int or self.last_sampled < 0):
            raise ValueError(f"EnvStats.last_sampled = {shown(self.last_sampled)}; expected None or an int >= 0")
        for name in ("mean_return_hint", "mean_return_nohint", "regret"):
            value = getattr(self, name)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"EnvStats.{name} = {shown(value)}; expected None or a finite number")
        compliance = self.format_compliance
        if compliance is not None and (
            isinstance(compliance, bool) or not isinstance(compliance, (int, float)) or not 0 <= compliance <= 1
        ):
            raise ValueError(f"EnvStats.format_compliance = {shown(compliance)}; expected None or a number in [0, 1]")
        if self.regret is not None and self.regret < 0:
            raise ValueError(
                f"EnvStats.regret = {shown(self.regret)}; expected None or a number >= 0 (the regret is never negative)"
            )

    def to_dict(self) -> dict[str, Any]:
        """The fields as a JSON-ready dict."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> EnvStats:
        """Inverse of :meth:`to_dict` (missing keys: defaults); ValueError for an unknown key or bad value."""
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise ValueError(f"unknown statistics field(s) {shown(unknown)}; expected {sorted(known)}")
        return cls(**data).normalised()

    def normalised(self) -> EnvStats:
        """A validated (ValueError as :meth:`validate`) copy with the measured values as ``float``."""
        self.validate()
        measured = ("mean_return_hint", "mean_return_nohint", "regret", "format_compliance")
        floats: dict[str, Any] = {k: float(v) for k in measured if (v := getattr(self, k)) is not None}
        return dataclasses.replace(self, **floats)


@dataclass(frozen=True)
class EnvRecord:
    """One registered environment: where it lives, where it came from, what is known about it.

    Attributes:
        env_id: ``"<name>-v<version>"``, e.g. ``"ArithmeticChain-v0"``; ``version`` counts from 0.
        program_id: :attr:`EnvProgram.id` of the source (SHA-256 hex of the normalised source).
        setting: ``"reasoning"``, ``"tool_use"`` or ``"game"``.
        max_turns: agent actions after which an episode is truncated.
        path: the environment's folder (absolute).
        created: when it was registered, in unix seconds.
        document, validation: provenance of the grounding document and the validation report (JSON
            objects), or ``None``.
        parents: ids of the environments it was derived from.
        stats: a snapshot as read (change it with :meth:`Registry.update_stats`).
    """

    env_id: str
    name: str
    version: int
    program_id: str
    setting: str
    max_turns: int
    description: str
    tags: tuple[str, ...]
    path: Path
    created: float
    document: dict[str, Any] | None
    parents: tuple[str, ...]
    validation: dict[str, Any] | None
    stats: EnvStats = field(default_factory=EnvStats)

    def __hash__(self) -> int:
        return hash((self.env_id, self.program_id, self.path))

    @property
    def source_path(self) -> Path:
        return self.path / SOURCE_FILE

    @property
    def meta_path(self) -> Path:
        return self.path / META_FILE

    @property
    def gym_id(self) -> str:
        """The gymnasium id, ``"spade/<env_id>"``."""
        return GYM_PREFIX + self.env_id

    def program(self) -> EnvProgram:
        """Read the program from ``env.py``.

        Raises:
            RegistryError: ``env.py`` is missing or no longer matches :attr:`program_id`.
            ProgramError: it is not UTF-8 text.
        """
        try:
            program = EnvProgram.from_file(self.source_path)
        except FileNotFoundError:
            raise RegistryError(
                f"{self.source_path} is missing: the registry entry {self.env_id} is damaged (see Registry.problems())"
            ) from None
        if program.id != self.program_id:
            raise RegistryError(
                f"{self.source_path} was changed after registration: its program id is {program.id}, "
                f"the registry records {self.program_id}; register the new source with Registry.add instead"
            )
        return program

    def to_meta(self) -> dict[str, Any]:
        """The content of ``meta.json``: ``schema_version``, then every field but ``path``, in order."""
        meta = {f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "path"}
        meta.update(tags=list(self.tags), parents=list(self.parents), stats=self.stats.to_dict())
        return {"schema_version": META_SCHEMA_VERSION, **meta}

    @classmethod
    def from_meta(cls, meta: Mapping[str, Any], path: str | os.PathLike[str]) -> EnvRecord:
        """A record from decoded ``meta.json`` content (as :meth:`to_meta` writes it) and its folder.

        Raises:
            RegistryError: naming the first missing or mistyped field, or an unknown ``schema_version``.
        """
        if not isinstance(meta, Mapping):
            raise RegistryError(f"{META_FILE} holds a JSON {type(meta).__name__}; expected a JSON object")

        def get(
            key: str, kinds: type | tuple[type, ...], expected: str, ok: Callable[[Any], object] | None = None
        ) -> Any:
            if key not in meta:
                raise RegistryError(f"{META_FILE} lacks the field {key!r}; expected {expected}")
            value = meta[key]
            if not isinstance(value, kinds) or isinstance(value, bool) or (ok is not None and not ok(value)):
                raise RegistryError(f"{META_FILE}: field {key!r} is {shown(value)}; expected {expected}")
            return value

        schema = get("schema_version", int, f"an int (this spade_gym writes {META_SCHEMA_VERSION})")
        if schema != META_SCHEMA_VERSION:
            raise RegistryError(
                f"{META_FILE} has schema_version {schema}; this spade_gym reads version {META_SCHEMA_VERSION}"
            )
        env_id = get("env_id", str, "a string 'Name-v<k>'")
        name = get("name", str, "a CamelCase name")
        version = get("version", int, "an int >= 0")
        match = ENV_ID_PATTERN.fullmatch(env_id)
        if match is None or match["name"] != name or int(match["version"]) != version:
            raise RegistryError(
                f"{META_FILE}: env_id {shown(env_id)} does not match name {shown(name)} and version {shown(version)}; "
                "expected env_id == f'{name}-v{version}'"
            )
        program_id = get("program_id", str, "a 64-character SHA-256 hex digest", PROGRAM_ID_PATTERN.fullmatch)
        setting = get("setting", str, f"one of {SETTINGS}", lambda v: v in SETTINGS)
        max_turns = get("max_turns", int, f"an int in [1, {MAX_TURNS:,}]", lambda v: 1 <= v <= MAX_TURNS)

        def strings(key: str) -> list[str]:
            expected = f"a list of strings of at most {MAX_TAG_CHARS} characters"
            return get(key, list, expected, lambda v: all(isinstance(s, str) and len(s) <= MAX_TAG_CHARS for s in v))

        tags, parents = strings("tags"), strings("parents")
        document = get("document", (dict, type(None)), "a JSON object or null")
        validation = get("validation", (dict, type(None)), "a JSON object or null")
        try:
            stats = EnvStats.from_dict(get("stats", dict, "a JSON object of statistics"))
        except (TypeError, ValueError) as exc:
            raise RegistryError(f"{META_FILE}: field 'stats' is invalid: {str(exc)[:300]}") from None
        description = get("description", str, "a string")
        if len(description) > MAX_DESCRIPTION_CHARS:
            raise RegistryError(
                f"{META_FILE}: field 'description' has {len(description):,} characters; at most {MAX_DESCRIPTION_CHARS:,}"
            )
        return cls(
            env_id=env_id,
            name=name,
            version=version,
            program_id=program_id,
            setting=setting,
            max_turns=max_turns,
            description=description,
            tags=tuple(tags),
            path=Path(path),
            created=float(get("created", (int, float), "unix seconds (a number)")),
            document=document,
            parents=tuple(parents),
            validation=validation,
            stats=stats,
        )


def check_fields(
    name: object,
    setting: object,
    max_turns: object,
    description: object,
    tags: Iterable[str],
    parents: Iterable[str],
    document: Mapping[str, Any] | None,
    validation: Mapping[str, Any] | None,
) -> tuple[tuple[str, ...], tuple[str, ...], dict[str, Any] | None, dict[str, Any] | None]:
    """The arguments of :meth:`~spade_gym.registry.Registry.add` checked: ``(tags, parents, document,
    validation)`` as stored. ValueError or TypeError for a wrong type or range."""
    if not isinstance(name, str) or not NAME_PATTERN.fullmatch(name):
        raise ValueError(
            f"name = {name!r}; expected a CamelCase identifier of ASCII letters, digits and underscores "
            "starting with a capital letter, at most 100 characters, such as 'ArithmeticChain'"
        )
    check_setting(setting)
    if type(max_turns) is not int or not 1 <= max_turns <= MAX_TURNS:
        raise ValueError(f"max_turns = {max_turns!r}; expected an int from 1 to 100000")
    if not isinstance(description, str):
        raise TypeError(f"description is a {type(description).__name__}; expected a str")
    return (
        check_strings("tags", tags),
        check_strings("parents", parents),
        _json_object("document", document),
        _json_object("validation", validation),
    )


def check_setting(setting: object) -> None:
    if setting not in SETTINGS:
        raise ValueError(f"setting = {setting!r}; expected one of {SETTINGS}")


def check_threshold(threshold: object) -> None:
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not 0.0 < threshold <= 1.0:
        raise ValueError(f"near-duplicate threshold = {threshold!r}; expected a number in (0, 1]")


def check_strings(what: str, values: Iterable[str]) -> tuple[str, ...]:
    """``values`` as a tuple; TypeError for a single str or an item that is not a str."""
    if isinstance(values, str):
        raise TypeError(f"{what} = {values!r} is a single str; expected an iterable of str such as ({values!r},)")
    out = tuple(values)
    bad = [v for v in out if not isinstance(v, str)]
    if bad:
        raise TypeError(f"{what} holds {bad[0]!r} ({type(bad[0]).__name__}); expected only str")
    return out


def _json_object(what: str, value: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise TypeError(f"{what} is a {type(value).__name__}; expected a dict of JSON values or None")
    try:
        text = json.dumps(dict(value), allow_nan=False)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{what} is not JSON-serialisable ({exc}); expected a dict of JSON values") from None
    decoded: dict[str, Any] = json.loads(text)  # a copy, as it will read back
    return decoded
