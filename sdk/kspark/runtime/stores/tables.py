"""The read-only views of tables' stores: versioned (as-of) and latest-value tables, and
table-table joins' results; and which view a table store gets."""

from __future__ import annotations

from collections.abc import Hashable, Iterator
from typing import Any, Generic, NamedTuple, TypeVar

from kspark.compiler import stages as st
from kspark.errors import StoreError
from kspark.runtime.stores.aggregates import open_aggregate_store
from kspark.runtime.stores.sources import _Source, _StoreView
from kspark_server.spec import (
    AggregateSpec,
    FkResolveSpec,
    JoinSpec,
    ProcessorSpec,
    TableJoinSpec,
)

K = TypeVar("K")
V = TypeVar("V")


class ValueAndTimestamp(NamedTuple, Generic[V]):
    """A value and the timestamp it is valid from."""

    value: V
    timestamp: int


class VersionedRecord(NamedTuple, Generic[V]):
    """One version: its value and validity interval (``valid_to`` exclusive, None while
    the version is current)."""

    value: V
    valid_from: int
    valid_to: int | None


def _find_stage(output: st.Output, name: str) -> st.Stateful:
    found = [
        s
        for s in output.stages()
        if isinstance(s, st.Stateful)
        and (
            s.spec.store == name
            or (isinstance(s.spec, ProcessorSpec) and name in {d.name for d in s.spec.stores})
        )
    ]
    if not found:
        known = sorted(output.stores)
        raise StoreError(
            f"no state store named {name!r} in this topology; its stores are {known}. "
            "Name a store with Materialized.as_versioned(name, ...) or Deduplicated.with_store_name(name)"
        )
    return found[0]


class _ReadOnlyStore(_StoreView[K, V]):
    """What the two views of a table's store share: a join's table keys and values."""

    def __init__(self, name: str, source: _Source, spec: JoinSpec) -> None:
        super().__init__(name, source, spec.table.key, spec.table.value, spec.packed.tvalue)
        self._retention = spec.history_retention_ms


class ReadOnlyVersionedStore(_ReadOnlyStore[K, V]):
    """A versioned table's store as of the app's last committed micro-batch.

    Obtained from :meth:`kspark.StreamsApp.store` or
    :meth:`kspark.testing.TopologyTestDriver.store`. Each call reads the checkpoint on
    the server and brings back only the key's versions.
    """

    def _key(self, key: K) -> Hashable:
        if key is None:
            raise StoreError(f"store {self.name}: a None key has no versions")
        return self._hashable(self._kenc(key))  # type: ignore[no-any-return]

    def _owner(self, hk: Hashable) -> Any:
        from kspark_server.versioned import VersionedStore

        found = self._source.entries([hk]).get(hk)
        if found is None:
            return None
        time, versions = found
        return VersionedStore({"time": time, "data": {hk: versions}}, self._retention)

    def get(self, key: K, as_of: int | None = None) -> ValueAndTimestamp[V] | None:
        """The value of ``key`` valid at ``as_of`` (epoch ms; default: now), with the
        timestamp it is valid from; None if there was none, it was deleted, or ``as_of`` is
        older than the store's history retention."""
        hk = self._key(key)
        s = self._owner(hk)
        if s is None:
            return None
        found = s.get(hk, as_of=as_of)
        if found is None:
            return None
        return ValueAndTimestamp(self._vdec(found.value), found.valid_from)

    def versions(
        self, key: K, from_ts: int | None = None, to_ts: int | None = None
    ) -> list[VersionedRecord[V]]:
        """The versions of ``key`` valid at some time in ``[from_ts, to_ts]``, oldest first."""
        hk = self._key(key)
        s = self._owner(hk)
        if s is None:
            return []
        return [
            VersionedRecord(self._vdec(v.value), v.valid_from, v.valid_to)
            for v in s.versions(hk, from_ts, to_ts)
        ]

    def __iter__(self) -> Iterator[tuple[Any, ValueAndTimestamp[V]]]:
        """Each key's latest value (keys as stored: records as sorted field tuples)."""
        from kspark_server.versioned import VersionedStore

        for hk, (time, versions) in self._source.items():
            found = VersionedStore({"time": time, "data": {hk: versions}}, self._retention).get(hk)
            if found is not None:
                yield hk, ValueAndTimestamp(self._vdec(found.value), found.valid_from)


class ReadOnlyKeyValueStore(_ReadOnlyStore[K, V]):
    """A latest-value table's store as of the app's last committed micro-batch."""

    def get(self, key: K, as_of: int | None = None) -> V | None:
        if as_of is not None:
            raise StoreError(
                f"store {self.name} is a latest-value store and keeps no history; "
                "use Materialized.as_versioned(...) to query as of a time"
            )
        hk = self._hashable(self._kenc(key))
        found = self._source.entries([hk]).get(hk)
        return None if found is None or found[1] is None else self._vdec(found[1])


class ReadOnlyJoinedStore(_StoreView[K, V]):
    """A table-table join's result as of the app's last committed micro-batch."""

    def __init__(self, name: str, source: _Source, spec: TableJoinSpec | FkResolveSpec) -> None:
        super().__init__(name, source, spec.output.key, spec.output.value, spec.packed.out)

    def get(self, key: K, as_of: int | None = None) -> V | None:
        """The joined value of ``key``; None if the key has no joined row."""
        if as_of is not None:
            raise StoreError(
                f"store {self.name} is a table-table join's latest-value store and keeps no history"
            )
        hk = self._hashable(self._kenc(key))
        found = self._source.entries([hk]).get(hk)
        if found is None or found[1] is None or found[1][4] is None:
            return None
        return self._vdec(found[1][4])  # type: ignore[no-any-return]

    def __iter__(self) -> Iterator[tuple[Any, V]]:
        """Each key's joined value (keys as stored: records as sorted field tuples)."""
        for hk, (_, entry) in self._source.items():
            if entry is not None and entry[4] is not None:
                yield hk, self._vdec(entry[4])


def _table_spec(
    output: st.Output, name: str, what: str
) -> JoinSpec | AggregateSpec | TableJoinSpec | FkResolveSpec:
    """The spec of the operator that holds store ``name``, a table's store (a table's
    join, or an aggregation): only those ``what``."""
    spec = _find_stage(output, name).spec
    if not isinstance(spec, JoinSpec | AggregateSpec | TableJoinSpec | FkResolveSpec):
        raise StoreError(
            f"store {name!r} belongs to {spec.processor} ({spec.kind}); only table stores {what}"
        )
    return spec


def _view(
    name: str, source: _Source, spec: JoinSpec | AggregateSpec | TableJoinSpec | FkResolveSpec
) -> Any:
    """The read-only view of table store ``name`` over ``source``."""
    if isinstance(spec, TableJoinSpec | FkResolveSpec):
        # a foreign-key join's entries keep the result where a table-table join's do
        return ReadOnlyJoinedStore(name, source, spec)
    if isinstance(spec, AggregateSpec):
        # an aggregation's entries have a latest-value table's layout
        return open_aggregate_store(name, source, spec)
    if spec.versioned:
        return ReadOnlyVersionedStore(name, source, spec)
    return ReadOnlyKeyValueStore(name, source, spec)
