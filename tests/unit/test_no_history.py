"""The tree describes what kspark is, not how it got there: no work sessions, branch names,
commit hashes, dated run logs or "tried, not adopted" diaries in the docs, the code, the
tests, the benches, the examples or the notebooks. A comment gives the reason; a decision
goes in a note under docs/design/, written as a decision."""

from __future__ import annotations

import json
import pathlib
import re
from collections.abc import Iterator

REPO = pathlib.Path(__file__).resolve().parents[2]
SCANNED = ["docs", "README.md", "sdk", "server_plugin", "tests", "bench", "examples", "notebooks"]
SUFFIXES = {".md", ".py", ".pyi", ".ipynb", ".toml", ".yml", ".yaml", ".txt", ".cfg", ".sh"}

_DATE = r"20\d\d-[01]\d-[0-3]\d"
_HEX = r"(?=[0-9a-f]*[0-9])(?=[0-9a-f]*[a-f])[0-9a-f]{7,40}"

#: What each pattern finds. Precise on purpose: "a Spark Connect session", hex in test
#: data and dates in records are legitimate text.
PATTERNS: dict[str, re.Pattern[str]] = {
    "a work session": re.compile(r"\b[Ss]essions? \d+\b|\b[Tt]his session\b"),
    "a branch name": re.compile(r"(?<![\w/.~-])h/[a-z][a-z0-9_-]+|\b[Tt]his branch\b"),
    "a commit hash": re.compile(rf"\bcommits?\b[^\n]{{0,12}}\b{_HEX}\b|`{_HEX}`"),
    "a dated run": re.compile(
        rf"\b(?:[Mm]easured|[Rr]uns?|[Rr]an|[Pp]rofiled)(?: on)?,? \(?{_DATE}\b"
        rf"|\({_DATE}(?:, |\))"
    ),
    "a diary": re.compile(
        r"\b(?:[Tt]ried, not adopted|[Nn]ot adopted\b)"
        r"|\bhelpers?'s? jobs\b|\bother helpers\b|\bshared with other (?:jobs|work|helpers)"
    ),
}


def _files() -> Iterator[pathlib.Path]:
    for name in SCANNED:
        root = REPO / name
        paths = [root] if root.is_file() else sorted(root.rglob("*"))
        for path in paths:
            if (
                path.is_file()
                and path.suffix in SUFFIXES
                and path.resolve() != pathlib.Path(__file__).resolve()
                and not any(p.startswith(".") or p == "__pycache__" for p in path.parts)
            ):
                yield path


def _lines(path: pathlib.Path) -> Iterator[tuple[str, str]]:
    """(where, text) of each line; for a notebook, of its cells' sources only (the outputs
    and execution metadata are the last run's, not text anyone wrote)."""
    text = path.read_text(encoding="utf-8", errors="replace")
    if path.suffix != ".ipynb":
        for n, line in enumerate(text.splitlines(), 1):
            yield str(n), line
        return
    for c, cell in enumerate(json.loads(text)["cells"], 1):
        for n, line in enumerate("".join(cell["source"]).splitlines(), 1):
            yield f"cell {c} line {n}", line


def mentions(lines: Iterator[tuple[str, str]]) -> Iterator[tuple[str, str, str]]:
    for where, line in lines:
        for what, pattern in PATTERNS.items():
            m = pattern.search(line)
            if m:
                yield where, what, m.group(0)


def test_no_development_history_in_the_tree() -> None:
    found = [
        f"{path.relative_to(REPO)}:{where}: {what} ({text!r})"
        for path in _files()
        for where, what, text in mentions(_lines(path))
    ]
    assert found == [], "\n".join(found)


def test_the_patterns_find_history_and_pass_ordinary_text() -> None:
    history = [
        "measured in session 12, after the cuts",
        "Session 10's UDF path",
        "the branch h/udf2, reverted",
        "commits `c8ca62a`, `51f43e3`",
        "Measured on 2026-11-27 with nothing else running",
        "(2026-11-23, one run)",
        "Tried, not adopted:",
        "a machine shared with other helpers' jobs",
        "before this session",
    ]
    ordinary = [
        "the Spark Connect session of the app",
        "session windows merge sessions within the gap",
        "run_id = 'd3b07384-d113-4ec2-a8b5-ea7f3a6c1c1e'",
        "sha = '4faf6c03b21d'",
        "TIMESTAMP'2024-01-01 00:00:01.250'",
        '"timestamp": "2026-01-01T00:00:00.000Z"',
        "a dataclass with a branch name",
        "path/to/h/x",
    ]
    assert [t for t in history if not list(mentions(iter([("1", t)])))] == []
    assert [t for t in ordinary if list(mentions(iter([("1", t)])))] == []
