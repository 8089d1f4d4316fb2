"""Held-out evaluation: does self-play make the Agent better? Every suite has one interface,
``Suite.run(policy) -> SuiteResult`` (:mod:`spade_gym.evaluation.base`)."""

from spade_gym.evaluation.base import (
    DEFAULT_SAMPLING,
    Comparison,
    ItemRecord,
    Suite,
    SuiteResult,
    compare_results,
    confidence_interval,
    generate_answers,
    load_results,
    read_jsonl,
    save_results,
)
from spade_gym.evaluation.bfcl import BFCLSuite
from spade_gym.evaluation.files import CodeFileSuite, MathFileSuite, MultipleChoiceFileSuite, extract_code

__all__ = [
    "BFCLSuite",
    "CodeFileSuite",
    "DEFAULT_SAMPLING",
    "Comparison",
    "ItemRecord",
    "MathFileSuite",
    "MultipleChoiceFileSuite",
    "Suite",
    "SuiteResult",
    "compare_results",
    "confidence_interval",
    "extract_code",
    "generate_answers",
    "load_results",
    "read_jsonl",
    "save_results",
]
