"""Interactive queries: read an app's state stores from its checkpoint, from the client.

The stores are read with Spark's state data source (``format("statestore")``), so no
running query is needed, and the answer is the state as of the last committed micro-batch.
A versioned store answers ``get(key)``, ``get(key, as_of)`` (KIP-960) and
``versions(key, from_ts, to_ts)`` (KIP-968) with exactly the rules the join uses: the
same :class:`kspark_server.versioned.VersionedStore` code wraps the state read back.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterator
from typing import Any, Generic, NamedTuple, TypeVar

from kspark.compiler import stages as st
from kspark.compiler.lowering import flat_schema
from kspark.errors import StoreError
from kspark_server.spec import (
    AggregateSpec,
    FkResolveSpec,
    JoinSpec,
    JsonSpec,
    ProcessorSpec,
    StoreSpec,
    TableJoinSpec,
    TypeSpec,
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


def _operator_id(spark: Any, checkpoint: str, name: str) -> int:
    """The stateful operator that holds state variable ``name``, from the checkpoint's
    state metadata."""
    try:
        rows = spark.read.format("state-metadata").load(checkpoint).collect()
    except Exception as exc:
        raise StoreError(
            f"cannot read the state metadata of checkpoint {checkpoint}: {exc}. Has the app "
            "completed a micro-batch?"
        ) from exc
    for r in rows:
        # the operator's properties (a JSON text) list its state variables by name
        props = " ".join(str(v) for v in r.asDict().values())
        if f'"stateName":"{name}"' in props.replace(" ", ""):
            return int(r["operatorId"])
    ids = sorted({int(r["operatorId"]) for r in rows})
    if len(ids) == 1:
        return ids[0]
    raise StoreError(
        f"no operator of checkpoint {checkpoint} holds store {name!r} (operators {ids})"
    )


def _base_change(r: Any) -> tuple[int, int, bytes | None]:
    """(task key, chunk number, chunk or None) of a row of the base's change feed (a map
    state: ``user_map_key`` is the chunk number)."""
    value = r["user_map_value"]
    blob = None if r["change_type"] == "delete" or value is None else value[0]
    return int(r["key"][0]), int(r["user_map_key"][0]), blob


def _state_reader(spark: Any, op: int, var: str) -> Any:
    """Spark's state reader of state variable ``var`` of stateful operator ``op``."""
    return spark.read.format("statestore").option("operatorId", op).option("stateVarName", var)


def _log_reader(spark: Any, op: int, name: str) -> Any:
    """Spark's state reader of store ``name``'s log, each task's list of changes whole."""
    from kspark_server import statevars

    reader = _state_reader(spark, op, statevars.log_name(name))
    return reader.option("flattenCollectionTypes", "false")


def _task_logs(spark: Any, checkpoint: str, op: int, name: str) -> dict[int, list[bytes]]:
    """Each task's log of changes, oldest first."""
    rows = _log_reader(spark, op, name).load(checkpoint).select("key", "list_value").collect()
    return {int(r["key"][0]): [e[0] for e in (r["list_value"] or [])] for r in rows}


def _base_rows(spark: Any, checkpoint: str, op: int, name: str) -> Any:
    """Store ``name``'s base, one row per chunk: ``key`` (the task key), ``blob`` and its
    number ``chunk`` (the ``<store>`` map state, :mod:`kspark_server.statevars`)."""
    from pyspark.sql import functions as F

    raw = _state_reader(spark, op, name).load(checkpoint)
    return raw.select(
        "key",
        F.col("user_map_value.blob").alias("blob"),
        F.col("user_map_key.chunk").alias("chunk"),
    )


def task_frame(spark: Any, checkpoint: str, op: int, name: str) -> Any:
    """A DataFrame of store ``name``'s base chunks, one row each: ``blob`` (the chunk),
    ``first`` (whether it is its task's chunk 0) and ``log`` (the task's changes), read on
    the server with Spark's state reader (:mod:`kspark_server.queries`)."""
    from pyspark.sql import functions as F

    base = _base_rows(spark, checkpoint, op, name).withColumn("first", F.col("chunk") == 0)
    log = _log_reader(spark, op, name).load(checkpoint)
    log = log.select("key", F.col("list_value.blob").alias("log"))
    return base.join(log, "key", "left").select("blob", "first", "log")


class _Source:
    """Where a read-only store's entries come from: ``entries(keys)`` gives the
    ``(table_time, per-key value)`` of each key found; ``count()`` and ``items()``."""

    def entries(self, keys: list[Hashable]) -> dict[Hashable, tuple[Any, Any]]:
        raise NotImplementedError

    def count(self) -> int:
        raise NotImplementedError

    def items(self) -> Iterator[tuple[Hashable, tuple[Any, Any]]]:
        raise NotImplementedError


class _CheckpointSource(_Source):
    """Entries read from the checkpoint by a job on the server that returns only the
    entries asked for (:mod:`kspark_server.queries`): a lookup costs the client one
    entry, whatever the store's size."""

    def __init__(self, spark: Any, checkpoint: str, name: str) -> None:
        self._frame = task_frame(spark, checkpoint, _operator_id(spark, checkpoint, name), name)

    @staticmethod
    def _decode(rows: list[Any]) -> Iterator[tuple[Hashable, tuple[Any, Any]]]:
        from kspark_server import stateenc

        for r in rows:
            sc = stateenc.unpack(r["scalars"])
            yield stateenc.unpack(r["key"]), (sc.get("table_time"), stateenc.unpack(r["entry"])[0])

    def entries(self, keys: list[Hashable]) -> dict[Hashable, tuple[Any, Any]]:
        from kspark_server import queries, stateenc

        wanted = [stateenc.pack(k) for k in keys]
        rows = self._frame.mapInPandas(
            queries.lookup(wanted), flat_schema(queries.ENTRY_SCHEMA)
        ).collect()
        return dict(self._decode(rows))

    def count(self) -> int:
        from pyspark.sql import functions as F

        from kspark_server import queries

        row = (
            self._frame.mapInPandas(queries.count(), flat_schema(queries.COUNT_SCHEMA))
            .agg(F.sum("entries").alias("n"))
            .collect()[0]
        )
        return int(row["n"] or 0)

    def items(self) -> Iterator[tuple[Hashable, tuple[Any, Any]]]:
        from kspark_server import queries

        rows = self._frame.mapInPandas(
            queries.scan(), flat_schema(queries.ENTRY_SCHEMA)
        ).toLocalIterator()
        yield from self._decode(rows)


class _MemorySource(_Source):
    """Entries of task states held in memory (a replica's)."""

    def __init__(self, tasks: dict[int, Any], versioned: bool) -> None:
        self._tasks, self._versioned = tasks, versioned

    def _table(self, st: Any) -> tuple[Any, dict[Any, Any]]:
        if self._versioned:
            return st["table"]["time"], st["table"]["data"]
        return None, st["table"]

    def entries(self, keys: list[Hashable]) -> dict[Hashable, tuple[Any, Any]]:
        out = {}
        for task in self._tasks.values():
            time, data = self._table(task)
            out.update({k: (time, data[k]) for k in keys if k in data})
        return out

    def count(self) -> int:
        return sum(len(self._table(task)[1]) for task in self._tasks.values())

    def items(self) -> Iterator[tuple[Hashable, tuple[Any, Any]]]:
        for task in self._tasks.values():
            time, data = self._table(task)
            for k, v in data.items():
                yield k, (time, v)


class _StoreView(Generic[K, V]):
    """What the read-only views of a store share: entries from a :class:`_Source`, keys
    encoded as the operator stores them, values decoded to their type (from JSON text
    when ``packed``)."""

    def __init__(
        self, name: str, source: _Source, key: TypeSpec, value: TypeSpec, packed: bool
    ) -> None:
        from kspark_server import codec

        self.name = name
        self._source = source
        self._kenc = codec.encoder(key, "key")
        dec = codec.decoder(value)
        self._vdec: Any = (lambda v: dec(json.loads(v))) if packed else dec
        self._hashable = codec.hashable

    def approximate_num_entries(self) -> int:
        """Keys with a value (a versioned store's: with a version; a windowed
        aggregation's: (key, window) pairs)."""
        return self._source.count()


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


class ReadOnlyProcessorStore(Generic[K, V]):
    """A key-value store of a processor (the Processor API) as of the app's last committed
    micro-batch: ``get``, ``all`` and ``approximate_num_entries``, over all its tasks.

    Its entries are the processor's task state's entries keyed ``(store name, key)``
    (:mod:`kspark_server.procstores`)."""

    def __init__(self, name: str, source: _Source, store: StoreSpec) -> None:
        from kspark_server import codec

        self.name = name
        self._source = source
        plain = isinstance(store.key, JsonSpec)
        self._kenc = codec.plain if plain else codec.encoder(store.key, "key")
        self._kdec = codec.plain if plain else codec.decoder(store.key, plain=True)
        dynamic = isinstance(store.value, JsonSpec)
        self._vdec = codec.plain if dynamic else codec.decoder(store.value, plain=True)
        self._hashable = codec.hashable

    def get(self, key: K) -> V | None:
        """The value of ``key`` (None: no value)."""
        sk = (self.name, self._hashable(self._kenc(key)))
        found = self._source.entries([sk]).get(sk)
        return None if found is None else self._vdec(found[1][1])

    def all(self) -> Iterator[tuple[K, V]]:
        """Every ``(key, value)`` of the store, in no particular order."""
        for sk, (_, entry) in self._source.items():
            if isinstance(sk, tuple) and sk and sk[0] == self.name:
                yield self._kdec(entry[0]), self._vdec(entry[1])

    def approximate_num_entries(self) -> int:
        """The number of entries."""
        return sum(1 for _ in self.all())


class ReadOnlyProcessorVersionedStore(Generic[K, V]):
    """A versioned store of a processor (the Processor API) as of the app's last committed
    micro-batch: ``get(key)`` and ``get(key, as_of_timestamp)``, as the processor's own
    :class:`kspark.state.VersionedKeyValueStore` answers them.

    Its entries are ``(store name, key) -> [key, [timestamps, values]]`` in the
    processor's task state (:mod:`kspark_server.procstores`); the versions a processor
    keeps are those within its history retention, so an ``as_of`` older than that finds
    the oldest kept version's predecessor gone, as in the processor."""

    def __init__(self, name: str, source: _Source, store: StoreSpec) -> None:
        self._kv: ReadOnlyProcessorStore[K, Any] = ReadOnlyProcessorStore(name, source, store)
        self.name = name

    def _versions(self, key: K) -> tuple[list[int], list[Any]]:
        kv = self._kv
        sk = (self.name, kv._hashable(kv._kenc(key)))
        found = kv._source.entries([sk]).get(sk)
        if found is None:
            return [], []
        tss, vals = found[1][1]
        return list(tss), list(vals)

    def get(self, key: K, as_of_timestamp: int | None = None) -> VersionedRecord[V] | None:
        """The version of ``key`` valid at ``as_of_timestamp`` (the latest: None), or None
        where the key had no value then."""
        tss, vals = self._versions(key)
        at = len(tss) - 1
        if as_of_timestamp is not None:
            at = max((i for i, t in enumerate(tss) if t <= as_of_timestamp), default=-1)
        if at < 0 or vals[at] is None:
            return None
        valid_to = tss[at + 1] if at + 1 < len(tss) else None
        return VersionedRecord(self._kv._vdec(vals[at]), tss[at], valid_to)

    def all(self) -> Iterator[tuple[K, V]]:
        """Every key with a current (latest, not deleted) value, in no particular order."""
        kv = self._kv
        for sk, (_, entry) in kv._source.items():
            if isinstance(sk, tuple) and sk and sk[0] == self.name:
                vals = entry[1][1]
                if vals and vals[-1] is not None:
                    yield kv._kdec(entry[0]), kv._vdec(vals[-1])


class ReadOnlyProcessorWindowStore(Generic[K, V]):
    """A window store of a processor (the Processor API) as of the app's last committed
    micro-batch: ``fetch(key, time_from, time_to)`` and ``fetch_all(time_from, time_to)``.

    Its entries are ``(store name, key, window start[, sequence]) -> [key, value]`` in the
    processor's task state (:mod:`kspark_server.procstores`). The processor removes
    expired windows as its stream time moves; a window it would skip as expired but has not
    removed yet is still answered here."""

    def __init__(self, name: str, source: _Source, store: StoreSpec) -> None:
        self._kv: ReadOnlyProcessorStore[K, Any] = ReadOnlyProcessorStore(name, source, store)
        self.name = name

    def _windows(self, time_from: int, time_to: int) -> list[tuple[Any, Any, int, int]]:
        kv = self._kv
        out = []
        for sk, (_, entry) in kv._source.items():
            if isinstance(sk, tuple) and len(sk) >= 3 and sk[0] == self.name:
                if time_from <= sk[2] <= time_to and entry is not None:
                    out.append((sk[1], entry, int(sk[2]), int(sk[3]) if len(sk) > 3 else 0))
        out.sort(key=lambda w: (w[2], w[3]))
        return out

    def fetch(self, key: K, time_from: int, time_to: int) -> list[tuple[int, V]]:
        """``(window start, value)`` of ``key``'s windows that start in
        ``[time_from, time_to]``, by start (with duplicates retained, in put order)."""
        kv = self._kv
        hk = kv._hashable(kv._kenc(key))
        return [
            (start, kv._vdec(e[1]))
            for h, e, start, _ in self._windows(time_from, time_to)
            if h == hk
        ]

    def fetch_all(self, time_from: int, time_to: int) -> list[tuple[tuple[K, int], V]]:
        """``((key, window start), value)`` of every window that starts in
        ``[time_from, time_to]``, by start."""
        kv = self._kv
        return [
            ((kv._kdec(e[0]), start), kv._vdec(e[1]))
            for _, e, start, _ in self._windows(time_from, time_to)
        ]


def _processor_view(name: str, source: _Source, store: StoreSpec) -> Any:
    """The read-only view of a processor's store ``name``, by its kind."""
    if store.kind == "versioned":
        return ReadOnlyProcessorVersionedStore(name, source, store)
    if store.kind == "window":
        return ReadOnlyProcessorWindowStore(name, source, store)
    return ReadOnlyProcessorStore(name, source, store)


def open_store(spark: Any, checkpoint: str, output: st.Output, name: str) -> Any:
    """The read-only view of store ``name`` of a compiled app whose query checkpoint is
    ``checkpoint``."""
    found = _find_stage(output, name).spec
    if isinstance(found, ProcessorSpec):
        (store,) = [d for d in found.stores if d.name == name]
        source = _CheckpointSource(spark, checkpoint, found.store)
        return _processor_view(name, source, store)
    spec = _table_spec(output, name, "answer interactive queries")
    return _view(name, _CheckpointSource(spark, checkpoint, name), spec)


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


__all__ = [
    "ReadOnlyAggregateStore",
    "ReadOnlyJoinedStore",
    "ReadOnlyKeyValueStore",
    "ReadOnlyProcessorStore",
    "ReadOnlyProcessorVersionedStore",
    "ReadOnlyProcessorWindowStore",
    "ReadOnlySessionStore",
    "ReadOnlySlidingWindowStore",
    "ReadOnlyVersionedStore",
    "ReadOnlyWindowStore",
    "StoreReplica",
    "ValueAndTimestamp",
    "VersionedRecord",
    "open_store",
]


class StoreReplica:
    """A client-side copy of one store, kept current from the checkpoint's change feed.

    Kafka Streams keeps standby replicas of a task's stores warm on other instances, so
    that interactive queries and fail-over do not wait for a restore. Spark has no such
    thing; this is the part of it that serves reads: the replica loads the store once with
    Spark's state reader, then :meth:`refresh` applies only what changed since (the state
    reader's change feed over the changelog checkpoints). Reads are answered from memory,
    also while the app or its server is down, as of the last refresh
    (:attr:`as_of_batch`).

    Obtained from :meth:`kspark.StreamsApp.replica`.
    """

    def __init__(self, spark: Any, checkpoint: str, output: st.Output, name: str) -> None:
        self.name = name
        self._spark = spark
        self._checkpoint = checkpoint
        self._spec = _table_spec(output, name, "have replicas")
        self._tasks: dict[int, Any] = {}
        # each task's state as stored: its base's chunks (by number) and its log of changes
        self._bases: dict[int, dict[int, bytes]] = {}
        self._logs: dict[int, list[bytes]] = {}
        self._view: Any = None
        #: the last micro-batch whose state the replica holds (None before the first load)
        self.as_of_batch: int | None = None

    def use_session(self, spark: Any) -> None:
        """Refresh through ``spark`` from now on (after the old session's server went
        away: the replica's contents stay)."""
        self._spark = spark

    def refresh(self) -> int:
        """Catch up with the checkpoint; returns how many task states changed."""
        from kspark.runtime.checkpoints import last_committed
        from kspark_server import taskstate

        last = last_committed(self._spark, self._checkpoint)
        if last is None or last == self.as_of_batch:
            return 0
        op = _operator_id(self._spark, self._checkpoint, self.name)
        reader = _state_reader(self._spark, op, self.name)
        kind, versioned = self._spec.kind, self._spec.versioned
        dirty: set[int] = set()
        if self.as_of_batch is None:
            rows = _base_rows(self._spark, self._checkpoint, op, self.name)
            for r in rows.select("key", "chunk", "blob").collect():
                if r["blob"] is not None:
                    self._bases.setdefault(int(r["key"][0]), {})[int(r["chunk"])] = r["blob"]
            self._logs = _task_logs(self._spark, self._checkpoint, op, self.name)
            dirty = set(self._bases)
        else:
            # (batch, rank, task, chunk, bytes): within a batch a base's chunks come
            # first (each chunk number changes at most once a batch), then the log's
            # clearing, then its append (the order the operator writes them in)
            events: list[tuple[int, int, int, int, bytes | None]] = []
            feed = self._feed(reader, last)
            for r in feed.select(
                "batch_id",
                "change_type",
                "key",
                "user_map_key",
                "user_map_value",
            ).collect():
                task, number, blob = _base_change(r)
                events.append((int(r["batch_id"]), 0, task, number, blob))
            for r in self._log_feed(op, last):
                append = r["change_type"] == "append" and r["list_element"] is not None
                events.append(
                    (
                        int(r["batch_id"]),
                        2 if append else 1,
                        int(r["key"][0]),
                        0,
                        r["list_element"][0] if append else None,
                    )
                )
            events.sort(key=lambda e: e[:4])
            for _, rank, task, number, blob in events:
                dirty.add(task)
                if rank == 0:
                    if blob is None:
                        self._bases.get(task, {}).pop(number, None)
                    else:
                        self._bases.setdefault(task, {})[number] = blob
                elif rank == 1:
                    self._logs.pop(task, None)
                elif blob is not None:
                    self._logs.setdefault(task, []).append(blob)
        for task in dirty:
            chunks = self._bases.get(task)
            if chunks and 0 in chunks:
                self._tasks[task] = taskstate.materialize(
                    kind, versioned, [chunks[i] for i in sorted(chunks)], self._logs.get(task, ())
                )
            else:
                self._bases.pop(task, None)
                self._logs.pop(task, None)
                self._tasks.pop(task, None)
        changed = len(dirty)
        self.as_of_batch = last
        self._view = _view(self.name, _MemorySource(self._tasks, versioned), self._spec)
        return changed

    def _feed(self, reader: Any, last: int) -> Any:
        assert self.as_of_batch is not None
        return (
            reader.option("readChangeFeed", "true")
            .option("changeStartBatchId", self.as_of_batch + 1)
            .option("changeEndBatchId", last)
            .load(self._checkpoint)
        )

    def _log_feed(self, op: int, last: int) -> list[Any]:
        from kspark_server import statevars

        reader = _state_reader(self._spark, op, statevars.log_name(self.name))
        return list(
            self._feed(reader, last)
            .select("batch_id", "change_type", "key", "list_element")
            .collect()
        )

    def _store(self) -> Any:
        if self._view is None:
            self.refresh()
        if self._view is None:
            raise StoreError(f"store {self.name}: the app has not committed a micro-batch yet")
        return self._view

    def get(self, key: Any, as_of: int | None = None) -> Any:
        """As :meth:`ReadOnlyVersionedStore.get`, from the replica."""
        return self._store().get(key, as_of=as_of)

    def versions(self, key: Any, from_ts: int | None = None, to_ts: int | None = None) -> Any:
        return self._store().versions(key, from_ts, to_ts)

    def fetch(self, key: Any, *time_range: int) -> Any:
        """As ``fetch`` of :class:`ReadOnlyWindowStore` (``key,
        time_from, time_to``) or of a session store (``key``), from the replica."""
        return self._store().fetch(key, *time_range)

    def approximate_num_entries(self) -> int:
        return int(self._store().approximate_num_entries())


# -- aggregations' stores: app.store(name) of a count, reduce or aggregate table --------
#
# A table of an aggregation answers get(key); a windowed one fetch(key, time_from,
# time_to), the windows of a key that start in that range, as Kafka Streams'
# ReadOnlyWindowStore.fetch does; a session-windowed one fetch(key), the key's sessions.

#: The most windows one ``fetch`` looks up (each is one key of the store).
MAX_FETCH_WINDOWS = 100_000


class _AggregateView(_StoreView[K, V]):
    def __init__(self, name: str, source: _Source, spec: AggregateSpec) -> None:
        super().__init__(name, source, spec.input.key, spec.output.value, spec.packed.out)
        self._spec = spec

    def _key(self, key: K) -> Hashable:
        if key is None:
            raise StoreError(f"store {self.name}: a None key has no aggregate")
        return self._hashable(self._kenc(key))  # type: ignore[no-any-return]


class ReadOnlyAggregateStore(_AggregateView[K, V]):
    """The table of an aggregation, as of the app's last committed micro-batch.

    Obtained from :meth:`kspark.StreamsApp.store`.
    """

    def get(self, key: K, as_of: int | None = None) -> V | None:
        """The aggregate of ``key``; None if it has none. The store keeps no history, so
        ``as_of`` must be None."""
        if as_of is not None:
            raise StoreError(
                f"store {self.name} is an aggregation's latest-value store and keeps no "
                "history; it answers get(key) only"
            )
        hk = self._key(key)
        found = self._source.entries([hk]).get(hk)
        if found is None or found[1] is None:
            return None
        return self._vdec(found[1][0])  # type: ignore[no-any-return]


class ReadOnlyWindowStore(_AggregateView[K, V]):
    """The table of a windowed aggregation, as of the app's last committed micro-batch.

    Windows leave the store once they close (stream time past their end plus grace):
    its retention is the window size plus the grace period.
    """

    def fetch(self, key: K, time_from: int, time_to: int) -> list[tuple[int, V]]:
        """``(window start, aggregate)`` of the windows of ``key`` that start in
        ``[time_from, time_to]`` (epoch ms), oldest first."""
        advance = self._spec.window_advance_ms
        first = max(0, -(-int(time_from) // advance) * advance)
        starts = range(first, int(time_to) + 1, advance)
        if len(starts) > MAX_FETCH_WINDOWS:
            raise StoreError(
                f"store {self.name}: fetch of {len(starts)} windows; ask for at most "
                f"{MAX_FETCH_WINDOWS} at a time"
            )
        hk = self._key(key)
        wanted = [(hk, s) for s in starts]
        found = self._source.entries(wanted)  # type: ignore[arg-type]
        out = []
        for k in wanted:
            got = found.get(k)
            if got is not None and got[1] is not None:
                out.append((k[1], self._vdec(got[1][1])))
        return out


class ReadOnlySessionStore(_AggregateView[K, V]):
    """The table of a session-windowed aggregation, as of the app's last committed
    micro-batch: each key's sessions that can still take records."""

    def fetch(self, key: K) -> list[tuple[int, int, V]]:
        """``(start, end, aggregate)`` of each session of ``key`` (start and end both
        included), oldest first."""
        hk = self._key(key)
        got = self._source.entries([hk]).get(hk)
        if got is None or got[1] is None:
            return []
        return [(int(x[0]), int(x[1]), self._vdec(x[2])) for x in got[1][1]]


class ReadOnlySlidingWindowStore(ReadOnlyWindowStore[K, V]):
    """The table of a sliding-windowed aggregation, as of the app's last committed
    micro-batch. A window stays in the store while a later record may still build a
    window from it: until stream time passes its start plus twice the time difference
    plus grace (Kafka Streams' retention for sliding windows)."""

    def fetch(self, key: K, time_from: int, time_to: int) -> list[tuple[int, V]]:
        """``(window start, aggregate)`` of the windows of ``key`` that start in
        ``[time_from, time_to]`` (epoch ms), oldest first; a window ends its time
        difference after its start, both ends included."""
        hk = self._key(key)
        got = self._source.entries([hk]).get(hk)
        if got is None or got[1] is None:
            return []
        return [
            (int(w[0]), self._vdec(w[1]))
            for w in got[1][1]
            if int(time_from) <= int(w[0]) <= int(time_to)
        ]


def open_aggregate_store(name: str, source: _Source, spec: AggregateSpec) -> Any:
    """The read-only view of an aggregation's store."""
    if spec.session_gap_ms > 0:
        return ReadOnlySessionStore(name, source, spec)
    if spec.sliding:
        return ReadOnlySlidingWindowStore(name, source, spec)
    if spec.window_size_ms > 0:
        return ReadOnlyWindowStore(name, source, spec)
    return ReadOnlyAggregateStore(name, source, spec)
