"""Novelty against what the Designer was shown: the prompt's own programs count as registered.

The gate's novelty check compares a program with the registry. A prompt that shows a complete
program (the worked example of the ``"example"`` variant) would otherwise let its copy through as a
"new" environment: :func:`copies_prompt_example` applies the registry's rule to the programs of
:data:`~spade_gym.design_prompts.PROMPT_EXAMPLES` (an exact copy up to names and layout, or a
near duplicate that behaves the same). :func:`closest_reference` measures how far a program is
from the prompt's examples and the seed library, for the "genuinely new" count of the design rate
(an accepted variant of a seed or of the example is valid but not a whole new environment).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from spade_gym.design_prompts import PROMPT_EXAMPLES
from spade_gym.program import EnvProgram
from spade_gym.registry.dedup import jaccard, minhash_to_bytes, signatures
from spade_gym.registry.store import NEAR_DUPLICATE_THRESHOLD
from spade_gym.validation import ValidationConfig

if TYPE_CHECKING:
    from spade_gym.novelty import Probe

_NAME = re.compile(r"^\s+name\s*=\s*[\"'](\w+)[\"']", re.MULTILINE)

__all__ = ["Reference", "closest_reference", "copies_prompt_example", "references"]


@dataclass(frozen=True)
class Reference:
    """A program a design is measured against: ``label`` (``"example ListSum"``, ``"seed CountListItems"``),
    its ``name``, ``source``, and its signatures."""

    label: str
    name: str
    source: str
    ast_hash: str
    sketch: bytes


def _reference(label: str, source: str) -> Reference:
    sig = signatures(source)
    found = _NAME.search(source)
    name = found.group(1) if found else ""
    return Reference(f"{label} {name}".strip(), name, source, sig.ast_hash, minhash_to_bytes(sig.minhash()))


@lru_cache(maxsize=1)
def references() -> tuple[Reference, ...]:
    """The prompt's examples and the bundled seed library, with their signatures (computed once)."""
    from spade_gym.registry.gymnasium import bundled_registry_path
    from spade_gym.registry.store import Registry

    found = [_reference("example", source) for source in PROMPT_EXAMPLES]
    registry = Registry(bundled_registry_path())
    try:
        found += [_reference("seed", record.source_path.read_text(encoding="utf-8")) for record in registry]
    finally:
        registry.close()
    return tuple(found)


def closest_reference(source: str, among: Sequence[Reference] | None = None) -> tuple[Reference | None, float]:
    """``(reference, similarity)``: the prompt example or seed program most similar to ``source``
    (Jaccard of token shingles, 1.0 for an exact copy up to names and layout), or ``(None, 0.0)``."""
    among = references() if among is None else among
    sig = signatures(source)
    best: tuple[Reference | None, float] = (None, 0.0)
    for ref in among:
        similarity = 1.0 if ref.ast_hash == sig.ast_hash else jaccard(sig.minhash(), ref.sketch)
        if similarity > best[1]:
            best = (ref, similarity)
    return best


def _behaves_like(program: EnvProgram, source: str, config: ValidationConfig) -> bool:
    """Whether ``program`` behaves like ``source`` on ``source``'s probe (the novelty check's rule,
    :mod:`spade_gym.novelty`). A program that cannot be compared does not behave like it."""
    from dataclasses import replace

    from spade_gym.errors import SandboxSetupError, SpadeError
    from spade_gym.novelty import DUPLICATE_SHARE, replay_probe
    from spade_gym.sandbox import Budget, HostBudget, SandboxClient

    try:
        probe = _example_probe(source, config)
    except SpadeError:
        return False
    budget = Budget(config.budget_s, what="novelty check", wall=True, wall_factor=config.sandbox.wall_factor)
    host = HostBudget(config.host_budget_s, "novelty check")
    with SandboxClient(replace(config.sandbox, hash_seed=config.hash_seeds[0])) as client:
        try:
            spec = client.load(program.source)
            if spec.setting != probe.setting or min(spec.max_turns, config.sandbox.max_turns) != probe.max_turns:
                return False
            same, played = replay_probe(client, program.source, probe, budget, host)
        except SandboxSetupError:
            raise
        except SpadeError:
            return False
    return same >= DUPLICATE_SHARE * played


_PROBES: dict[str, Probe] = {}


def _example_probe(source: str, config: ValidationConfig) -> Probe:
    """The probe of a prompt example on fixed seeds, recorded once per process."""
    from spade_gym.novelty import PROBE_SEEDS, record_probe

    if source not in _PROBES:
        _PROBES[source] = record_probe(source, list(range(1, PROBE_SEEDS + 1)), config)
    return _PROBES[source]


def copies_prompt_example(program: EnvProgram, config: ValidationConfig) -> str | None:
    """Why ``program`` duplicates a program the prompt showed (as the gate words a duplicate of a
    registered environment), or ``None``: an exact copy up to names and layout, or a near duplicate
    (token similarity at least the registry's ``NEAR_DUPLICATE_THRESHOLD``) that behaves the same
    on the example's probe (:mod:`spade_gym.novelty`). SandboxSetupError when no sandbox worker can start."""
    examples = [ref for ref in references() if ref.label.startswith("example")]
    ref, similarity = closest_reference(program.source, examples)
    if ref is None or similarity < NEAR_DUPLICATE_THRESHOLD:
        return None
    if similarity == 1.0 or _behaves_like(program, ref.source, config):
        return (
            f"the program is a copy of the prompt's worked example {ref.name} (similarity {similarity:.2f}, and it "
            "behaves the same): the example shows the form; write an environment of your own"
        )
    return None
