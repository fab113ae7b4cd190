"""The in-process engine's stand-in for Spark's state API: the ``GroupState`` of
``applyInPandasWithState``.

It keeps a task's group state in a plain dict, which stands for the task's part of Spark's
state store; the operators call it as they call Spark's, so it stands apart from the
engine that runs the operators (:mod:`kspark.testing.local`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["GroupState"]


class GroupState:
    """Spark's ``GroupState`` of one task under ``applyInPandasWithState``: its value in
    a dict, which stands for the task's part of Spark's state store."""

    def __init__(self, store: dict[str, Any]) -> None:
        self.store = store

    @property
    def exists(self) -> bool:
        return "group" in self.store

    @property
    def get(self) -> Any:
        return self.store["group"]

    def update(self, value: Any) -> None:
        self.store["group"] = tuple(value)
