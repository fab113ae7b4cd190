"""The suite's own layout: pytest imports test modules by their file name (rootdir-relative
packages are not used), so two test files with one name in different folders break the
collection of the whole run."""

from __future__ import annotations

import collections
import pathlib

TESTS = pathlib.Path(__file__).resolve().parent.parent


def test_no_two_test_files_share_a_name() -> None:
    names = collections.Counter(p.name for p in TESTS.rglob("test_*.py"))
    assert [n for n, c in names.items() if c > 1] == []
