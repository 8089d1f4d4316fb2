"""Gymnasium registration of registered environments.

Every environment of a registry becomes the Gymnasium id ``spade/<Name>-v<k>`` with a string entry
point and JSON-able keyword arguments (the path of its ``env.py``), so ``spec.to_json()`` round-trips
and specs reach subprocesses. ``spade/Generated-v0`` draws from a registry at every reset.
A newly written program is added and registered at once by :func:`spade_gym.stages.admit`.
"""

from __future__ import annotations

import difflib
import importlib.resources
import os
import warnings
from collections.abc import Collection, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import gymnasium

if TYPE_CHECKING:
    from spade_gym.registry.records import EnvRecord
    from spade_gym.registry.store import Registry

__all__ = [
    "ENTRY_POINT",
    "VECTOR_ENTRY_POINT",
    "bundled_registry_path",
    "register_record",
    "register_registry",
    "register_builtin_ids",
    "open_registry",
    "resolve_env_ids",
]

ENTRY_POINT = "spade_gym.env:SandboxedEnv"

# Each version of a spade/ environment is its own environment (an edit of its parent), not an
# upgrade: gymnasium's "spade/X-v1 is out of date, consider v2" does not apply to replay.
warnings.filterwarnings("ignore", message=r".*The environment spade/\S+ is out of date", category=DeprecationWarning)
VECTOR_ENTRY_POINT = "spade_gym.vector:make_vector_env"


def bundled_registry_path() -> Path:
    """The registry shipped with the package: the top-level ``envs_registry/`` of a source checkout
    (installed editable), or ``spade_gym/envs_registry`` inside an installed wheel."""
    return Path(str(importlib.resources.files("spade_gym.envs_registry")))


#: Seed environments held out of self-play by default (``run.held_out_envs``): whole tasks that
#: training never sees, for held-out evaluation (``spade eval --suite tool-use / games``).
HELD_OUT_SEED_ENVS: tuple[str, ...] = (
    "InboxCodeRelay",
    "TravelBookingConstraints",
    "LightsOut3x3",
    "MastermindCodeBreaker",
)


def open_registry(
    path: str | os.PathLike[str],
    *,
    seed_library: bool = True,
    exclude: Collection[str] = HELD_OUT_SEED_ENVS,
    include_tags: Collection[str] = (),
) -> Registry:
    """Open the :class:`~spade_gym.registry.store.Registry` at ``path``, creating it if new (missing or empty).

    With ``seed_library`` a new registry gets every bundled environment (name, version, statistics,
    and the tag ``"seed"``) as the Designer's initial memory, except the names in ``exclude``
    (default :data:`HELD_OUT_SEED_ENVS`, held out for evaluation) and, if ``include_tags`` is
    given, those carrying none of them.

    Raises:
        RegistryError: ``path`` is a file, or a non-empty folder that is not a registry.
        ValueError: ``exclude`` names no seed environment, or none carries any of ``include_tags``.
    """
    from spade_gym.errors import RegistryError
    from spade_gym.registry.records import ENVS_DIR
    from spade_gym.registry.store import Registry

    root = Path(path).expanduser()
    if root.is_dir() and not (root / ENVS_DIR).is_dir() and any(root.iterdir()):
        raise RegistryError(
            f"{root} is not an environment registry (no {ENVS_DIR}/ folder) and is not empty: "
            "give a new or empty folder, or an existing registry"
        )
    registry = Registry(root, create=True)
    if seed_library and len(registry) == 0 and bundled_registry_path().is_dir():
        with warnings.catch_warnings(action="ignore"):  # a rebuilt index of the bundled registry is routine, not news
            bundled = Registry(bundled_registry_path())
        unknown = sorted(set(exclude) - {r.name for r in bundled})
        tags = set(include_tags)
        if unknown or (tags and not any(tags & set(r.tags) for r in bundled)):
            known = sorted({t for r in bundled for t in r.tags})
            bundled.close()
            registry.close()
            if unknown:
                raise ValueError(f"exclude names no seed environment: {', '.join(unknown)}")
            raise ValueError(f"no seed environment has any of the tags {sorted(tags)} (tags: {', '.join(known)})")
        for record in bundled:
            if record.name in exclude or (tags and not tags & set(record.tags)):
                continue
            registry.add(
                record.program(),
                name=record.name,
                setting=record.setting,
                max_turns=record.max_turns,
                description=record.description,
                tags=(*record.tags, "seed") if "seed" not in record.tags else record.tags,
                document=record.document,
                parents=record.parents,
                validation=record.validation,
                stats=replace(record.stats, times_sampled=0, last_sampled=None),
                allow_near_duplicates=True,
            )
        bundled.close()
    return registry


def register_record(record: EnvRecord) -> str:
    """Register one environment with Gymnasium as ``spade/<env_id>``; return the id.

    Registering the same program again is a no-op; a different program under an id that is already
    taken (two registries with the same ``<Name>-v<k>``) replaces it, with Gymnasium's warning.
    """
    gym_id = record.gym_id
    kwargs = {"program": str(record.source_path)}
    existing = gymnasium.registry.get(gym_id)
    if existing is not None and existing.kwargs == kwargs:
        return gym_id
    gymnasium.register(id=gym_id, entry_point=ENTRY_POINT, vector_entry_point=VECTOR_ENTRY_POINT, kwargs=kwargs)
    return gym_id


def register_registry(path: str | os.PathLike[str] | None = None) -> list[str]:
    """Register with Gymnasium every environment of the registry at ``path`` (default:
    ``SPADE_REGISTRY``, else the bundled one); return the ids, in creation order.

    Raises:
        RegistryError: the registry cannot be opened (e.g. the folder does not exist).
    """
    from spade_gym.registry.store import Registry

    registry = Registry(Path(path or os.environ.get("SPADE_REGISTRY") or bundled_registry_path()))
    return [register_record(record) for record in registry]


def register_builtin_ids() -> None:
    """Register the built-in ``spade/`` ids below and the bundled registry's environments."""
    designer = {"agent": "default", "registry": None, "documents": None, "config": None, "memory": None, "reward": None}
    specs: dict[str, dict[str, Any]] = {
        "spade/Program-v0": {"entry_point": ENTRY_POINT, "vector_entry_point": VECTOR_ENTRY_POINT},
        "spade/Generated-v0": {
            "entry_point": "spade_gym.generated:GeneratedEnv",
            "vector_entry_point": "spade_gym.vector:make_generated_vector_env",
            "kwargs": {"registry": None, "setting": None, "sampling": "uniform"},
        },
        "spade/Designer-v0": {"entry_point": "spade_gym.designer:SpadeDesignerEnv", "kwargs": designer},
        "spade/ReasoningGym-v0": {
            "entry_point": "spade_gym.reasoning_gym:ReasoningGymEnv",
            "kwargs": {"split": "train", "task_config": None},
        },
        "spade/DesignerParams-v0": {
            "entry_point": "spade_gym.integrations.sb3:DesignerParamsEnv",
            "kwargs": {"agent": None, "families": None},
        },
    }
    for gym_id, spec in specs.items():
        if gym_id not in gymnasium.registry:
            gymnasium.register(id=gym_id, **spec)
    if bundled_registry_path().is_dir():
        with warnings.catch_warnings(action="ignore"):  # a rebuilt index of the bundled registry is routine, not news
            register_registry(bundled_registry_path())


#: Entry points of the ids the Agent (and every integration) can play: environment programs and reasoning-gym tasks.
_PLAYABLE = ("spade_gym.env:SandboxedEnv", "spade_gym.reasoning_gym:ReasoningGymEnv")


def resolve_env_ids(
    env_ids: Sequence[str] | str | None = None, registry: str | os.PathLike[str] | None = None
) -> list[str]:
    """The Gymnasium ids to play (by the Agent, an integration, a server), checked, in the order given.

    Args:
        env_ids: ids (a str for one); ``None``/empty: every environment of ``registry`` except
            :data:`~spade_gym.registry.gymnasium.HELD_OUT_SEED_ENVS`.
        registry: a registry folder to register first; ``None``: ``$SPADE_REGISTRY``, else the seed library.

    Raises:
        EnvNotFound: an unknown id (the message suggests the closest).
        RegistryError: ``registry`` cannot be opened.
        ValueError: an id that is not an environment program or reasoning-gym task.
    """
    from spade_gym.errors import EnvNotFound

    registered: list[str] = []
    if registry is not None or not env_ids:
        held_out = {f"spade/{name}-v0" for name in HELD_OUT_SEED_ENVS}
        registered = [gym_id for gym_id in register_registry(registry) if gym_id not in held_out]
    ids = [env_ids] if isinstance(env_ids, str) else list(env_ids or registered)
    if not ids:
        raise ValueError("no environments to play: give env_ids, or a registry that holds environments")
    for env_id in ids:
        if not isinstance(env_id, str) or env_id not in gymnasium.registry:
            known = [
                name
                for name, spec in gymnasium.registry.items()
                if name.startswith("spade/") and spec.entry_point in _PLAYABLE and spec.kwargs.get("program")
            ]
            close = difflib.get_close_matches(str(env_id), known, n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(close)}?" if close else "; see `spade envs list`"
            raise EnvNotFound(f"unknown environment id {env_id!r}{hint}")
        entry = gymnasium.registry[env_id].entry_point
        if entry not in _PLAYABLE:
            raise ValueError(
                f"{env_id} is not an environment program or reasoning-gym task (its entry point is {entry!r}); "
                "give the ids of a registry's environments, e.g. spade/ArithmeticChain-v0"
            )
    return ids
