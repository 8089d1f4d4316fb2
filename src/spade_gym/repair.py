"""Repair feedback for the Designer: what failed, on which line, the shape expected, what changed."""

from __future__ import annotations

import difflib
import re

from spade_gym.contract import contract_problems, skeleton
from spade_gym.validation import ValidationReport

__all__ = ["MAX_DIFF_LINES", "repair_feedback", "same_program"]

#: Longest diff against the previous attempt shown, in lines.
MAX_DIFF_LINES = 40
_LINE = re.compile(r"\bline (\d+)\b")


def _normalised(source: str) -> str:
    return "\n".join(line.rstrip() for line in source.strip().splitlines() if line.strip())


def same_program(a: str | None, b: str | None) -> bool:
    """Whether two sources are the same program up to blank lines and trailing spaces."""
    return a is not None and b is not None and _normalised(a) == _normalised(b)


def _quote(lines: list[str], number: int) -> str:
    text = lines[number - 1].strip() if 0 < number <= len(lines) else ""
    return f"line {number}: `{text[:160]}`" if text else f"line {number}"


def repair_feedback(
    report: ValidationReport,
    source: str | None,
    previous_source: str | None = None,
    *,
    problem: str | None = None,
    setting: str | None = None,
) -> str:
    """The feedback of one refused design for the Designer's next round: the ``report``'s feedback (or
    the ``problem`` and the ``setting``'s skeleton when no program was found), ``Where:`` lines
    quoting the lines the report and the contract lint name with the form expected there, and a
    diff against ``previous_source`` (or the note that nothing changed)."""
    parts = [report.feedback() if source is not None or problem is None else f"No program was found: {problem}."]
    if source is None:
        shown = setting or "reasoning"
        parts.append(
            f"Fill in this skeleton ({shown} environment) and answer with it in one ```python block:\n```python\n{skeleton(shown)}```"
        )
        return "\n\n".join(parts)
    lines = source.splitlines()
    where: list[str] = []
    for failure in report.failures:
        for number in dict.fromkeys(int(n) for n in _LINE.findall(failure.message)):
            where.append(f"- {_quote(lines, number)} (the {failure.name} check)")
    for slip in contract_problems(source):
        quoted = _quote(lines, slip.line) if slip.line else "the module"
        expected = f"; expected: `{slip.expected}`" if slip.expected else ""
        where.append(f"- {quoted}: {slip.message}{expected}")
    if where:
        parts.append("Where:\n" + "\n".join(dict.fromkeys(where)))
    if previous_source is not None:
        if same_program(previous_source, source):
            parts.append(
                "Since your previous attempt: nothing changed. This is the same program, refused for the same "
                "reason: change the lines named above."
            )
        else:
            diff = list(
                difflib.unified_diff(
                    previous_source.splitlines(), lines, "previous attempt", "this attempt", n=1, lineterm=""
                )
            )
            shown_diff = diff[:MAX_DIFF_LINES] + (
                [f"... ({len(diff) - MAX_DIFF_LINES} more lines)"] if len(diff) > MAX_DIFF_LINES else []
            )
            parts.append("Since your previous attempt you changed:\n" + "\n".join(shown_diff))
    return "\n\n".join(parts)
