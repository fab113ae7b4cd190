"""The in-process engine's stand-ins for Spark's state API: the handle of
``transformWithState`` with its value, list and map state variables, and the
``GroupState`` of ``applyInPandasWithState``.

Each keeps a task's state in a plain dict, which stands for the task's part of Spark's
state store; the operators call them as they call Spark's, so they stand apart from the
engine that runs the operators (:mod:`kspark.testing.local`).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

__all__ = ["GroupState", "ListVar", "MapVar", "StateHandle", "ValueVar"]


class ValueVar:
    """A value state variable, held in a dict (Spark's ``ValueState``)."""

    def __init__(self, store: dict[str, Any], name: str) -> None:
        self.store, self.name = store, name

    def exists(self) -> bool:
        return self.name in self.store

    def get(self) -> Any:
        return self.store.get(self.name)

    def update(self, v: tuple[Any, ...]) -> None:
        self.store[self.name] = v

    def clear(self) -> None:
        self.store.pop(self.name, None)


class ListVar(ValueVar):
    """A list state variable (Spark's ``ListState``)."""

    def get(self) -> Iterator[tuple[Any, ...]]:
        return iter(list(self.store.get(self.name, [])))

    def appendValue(self, v: tuple[Any, ...]) -> None:
        self.store.setdefault(self.name, []).append(v)


class MapVar(ValueVar):
    """A map state variable (Spark's ``MapState``)."""

    def getValue(self, key: tuple[Any, ...]) -> Any:
        return self.store.get(self.name, {}).get(key)

    def updateValue(self, key: tuple[Any, ...], v: tuple[Any, ...]) -> None:
        self.store.setdefault(self.name, {})[key] = v

    def containsKey(self, key: tuple[Any, ...]) -> bool:
        return key in self.store.get(self.name, {})

    def removeKey(self, key: tuple[Any, ...]) -> None:
        self.store.get(self.name, {}).pop(key, None)


class StateHandle:
    """Spark's ``StatefulProcessorHandle`` for one task: its state variables in a dict,
    which stands for the task's part of Spark's state store."""

    def __init__(self, store: dict[str, Any]) -> None:
        self.store = store

    def getMapState(self, name: str, key_schema: Any, schema: Any) -> MapVar:
        return MapVar(self.store, name)

    def getValueState(self, name: str, schema: Any) -> ValueVar:
        return ValueVar(self.store, name)

    def getListState(self, name: str, schema: Any) -> ListVar:
        return ListVar(self.store, name)


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
