"""Loaded by the test server's Python workers (via PYTHONPATH): makes kspark, kspark_server
and the test modules unimportable there, so every behaviour test proves that code reaches
the server by value, as it must on a remote server that lacks it."""

from __future__ import annotations

import sys

_BLOCKED_ROOTS = {"kspark", "kspark_server", "tests", "conftest", "helpers", "examples"}


class _Blocker:
    def find_spec(self, name, path=None, target=None):
        root = name.split(".")[0]
        if root in _BLOCKED_ROOTS or root.startswith("test_"):
            raise ModuleNotFoundError(
                f"No module named {name!r} (blocked on the test server)", name=name
            )
        return None


sys.meta_path.insert(0, _Blocker())
