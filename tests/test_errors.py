"""Outcome categories read as their plain names wherever they are written, and the worker's error
records are rebuilt only from the categories it may send."""

from __future__ import annotations

import json

from spade_gym.errors import CATEGORIES, Category, DuplicateEnvironment, SandboxTimeout, WorkerCrash, error_from_payload
from spade_gym.validation import validate


def test_a_category_is_written_as_its_name() -> None:
    record = {"category": Category.DUPLICATE, "counts": {Category.TIMEOUT: 2}}
    assert json.dumps(record) == '{"category": "DUPLICATE", "counts": {"TIMEOUT": 2}}'
    assert f"{Category.HINT_LEAK}" == str(Category.HINT_LEAK) == "HINT_LEAK"
    assert repr(record) == repr({"category": "DUPLICATE", "counts": {"TIMEOUT": 2}})
    assert Category.TRIVIAL.lower() == "trivial"
    assert all(Category(name) == name for name in ("ACCEPT", "NO_CODE", "WRONG_SETTING"))


def test_an_error_carries_its_class_category() -> None:
    assert DuplicateEnvironment("copy").to_dict()["category"] == "DUPLICATE"
    assert json.dumps(SandboxTimeout("slow").to_dict()) == (
        '{"type": "SandboxTimeout", "category": "TIMEOUT", "message": "slow", "traceback": ""}'
    )


def test_a_worker_record_keeps_only_a_known_category() -> None:
    error = error_from_payload({"type": "SandboxTimeout", "category": "TIMEOUT", "message": "slow"})
    assert type(error) is SandboxTimeout and error.category is Category.TIMEOUT
    forged = error_from_payload({"type": "SandboxTimeout", "category": "ACCEPT", "message": "x"})
    assert forged.category == Category.TIMEOUT  # not a worker category: the class's own
    assert "ACCEPT" not in CATEGORIES
    assert type(error_from_payload(["not", "a", "dict"])) is WorkerCrash


def test_a_report_json_shows_plain_names() -> None:
    report = validate("class Env:\n    def reset(self, seed):\n        return 1 +\n")
    text = json.dumps(report.to_dict())
    assert text == json.dumps(json.loads(text))
    assert report.category == "COMPILE_REJECTED" and '"category": "COMPILE_REJECTED"' in text
