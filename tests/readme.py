"""The examples of the README and the docs/ pages, read by the tests that run them."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def readme_example(heading: str, index: int = 0, language: str = "python", doc: str = "README.md") -> str:
    """The ``index``-th fenced ``language`` block of the section of ``doc`` (a Markdown file relative
    to the repository root, e.g. ``"docs/integrations.md"``) whose heading line is ``heading``
    (e.g. ``"## TRL"``), up to the next heading of the same or a higher level.

    Raises:
        LookupError: no such section or block.
    """
    lines = (ROOT / doc).read_text(encoding="utf-8").splitlines()
    level = len(heading) - len(heading.lstrip("#"))
    try:
        start = lines.index(heading)
    except ValueError:
        raise LookupError(f"{doc} has no heading {heading!r}") from None
    end = next(
        (
            i
            for i in range(start + 1, len(lines))
            if lines[i].startswith("#")
            and len(lines[i]) - len(lines[i].lstrip("#")) <= level
            and not _in_fence(lines, i)
        ),
        len(lines),
    )
    blocks: list[str] = []
    current: list[str] | None = None
    for line in lines[start + 1 : end]:
        if current is None and line.strip() == f"```{language}":
            current = []
        elif current is not None and line.strip() == "```":
            blocks.append("\n".join(current) + "\n")
            current = None
        elif current is not None:
            current.append(line)
    if index >= len(blocks):
        raise LookupError(f"{doc} section {heading!r} has {len(blocks)} ```{language} block(s), not {index + 1}")
    return blocks[index]


def _in_fence(lines: list[str], i: int) -> bool:
    return sum(1 for line in lines[:i] if line.strip().startswith("```")) % 2 == 1
