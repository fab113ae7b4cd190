"""The Processor API's state stores, over a task's state (:mod:`kspark_server.taskstate`).

All stores of one processor live in its task state, one entry per store key: the state key
is ``(store name, key)`` (the key in its hashable form), the entry ``[key, value]`` with
key and value as their codecs encode them (plain Python that MessagePack holds; see
:mod:`kspark_server.stateenc`). A versioned store's value is ``[timestamps, values]``;
a window store's state key is ``(store name, key, window start)`` (and a sequence number
when it retains duplicates).

The stores work on a :class:`Table` of entries: the operator's reads go through the
batch's changes to the executor-local store (``kspark_server.operators.processor``), so a
batch loads only what its processor reads; a scan (``all``, ``range``, ``prefix_scan``,
``fetch_all``) reads the store's entries of the task and sorts them by key as Python
compares them. This module is shared by the client (the build-time check of ``init``) and
the workers.

Examples
--------
>>> tbl = MemoryTable()
>>> kv = KVStore("counts", tbl, None, None)
>>> kv.put("b", 2); kv.put("a", 1); kv.put_if_absent("a", 9)
1
>>> with kv.all() as it:
...     list(it)
[('a', 1), ('b', 2)]
>>> kv.delete("a"), kv.get("a"), kv.approximate_num_entries()
(1, None, 1)
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

from kspark_server import codec
from kspark_server.papi import (
    KeyValueIterator,
    KeyValueStore,
    StateStoreError,
    VersionedKeyValueStore,
    VersionedRecord,
    WindowStore,
    WindowStoreIterator,
)
from kspark_server.spec import JsonSpec, TypeSpec

__all__ = [
    "KVStore",
    "MemoryTable",
    "ReadOnlyKVStore",
    "Table",
    "VersionedKVStore",
    "WindowKVStore",
    "store_for",
]

Codec = Callable[[Any], Any]


class Table:
    """The entries of a processor's task state: ``get``, ``set`` (None removes) and
    ``scan`` of one store's entries."""

    def get(self, sk: Any) -> Any:
        raise NotImplementedError

    def set(self, sk: Any, entry: Any) -> None:
        raise NotImplementedError

    def scan(self, store: str) -> Iterator[tuple[Any, Any]]:
        """Every ``(state key, entry)`` of ``store``, in no order."""
        raise NotImplementedError


class MemoryTable(Table):
    """A table in a dict (the build-time check of a processor's ``init``; tests)."""

    def __init__(self) -> None:
        self.data: dict[Any, Any] = {}

    def get(self, sk: Any) -> Any:
        return self.data.get(sk)

    def set(self, sk: Any, entry: Any) -> None:
        if entry is None:
            self.data.pop(sk, None)
        else:
            self.data[sk] = entry

    def scan(self, store: str) -> Iterator[tuple[Any, Any]]:
        return iter([(k, e) for k, e in self.data.items() if k[0] == store])


def _codecs(t: TypeSpec | None) -> tuple[Codec, Codec]:
    """(to stored, from stored) of a store's key or value type; dynamic values are
    stored as they are."""
    if t is None or isinstance(t, JsonSpec):
        return codec.plain, codec.plain
    return codec.encoder(t, "store value"), codec.decoder(t, plain=True)


def _order(x: Any) -> Any:
    """A sort key that orders keys as Python does, and keys of mixed types by type name."""
    return (type(x).__name__, x) if x is not None else ("", 0)


def _sorted(pairs: list[tuple[Any, Any]], reverse: bool = False) -> list[tuple[Any, Any]]:
    try:
        return sorted(pairs, key=lambda p: p[0], reverse=reverse)
    except TypeError:
        return sorted(pairs, key=lambda p: _order(p[0]), reverse=reverse)


class _ListIterator(KeyValueIterator[Any, Any]):
    def __init__(self, pairs: Iterable[tuple[Any, Any]]) -> None:
        self._it = iter(pairs)

    def __next__(self) -> tuple[Any, Any]:
        return next(self._it)

    def peek_next_key(self) -> Any:
        """Not supported: raises (iterate instead)."""
        raise NotImplementedError("peek_next_key: iterate instead")


class KVStore(KeyValueStore[Any, Any]):
    """A key-value store of a processor's task."""

    def __init__(
        self, name: str, table: Table, key_type: TypeSpec | None, value_type: TypeSpec | None
    ) -> None:
        self.name = name
        self._t = table
        self._kenc, self._kdec = _codecs(key_type)
        self._venc, self._vdec = _codecs(value_type)

    def _sk(self, key: Any) -> Any:
        if key is None:
            raise ValueError(f"store {self.name}: a key must not be None")
        k = self._kenc(key)
        return (self.name, k if type(k) is str else codec.hashable(k))

    def get(self, key: Any) -> Any:
        e = self._t.get(self._sk(key))
        return None if e is None else self._vdec(e[1])

    def put(self, key: Any, value: Any) -> None:
        sk = self._sk(key)
        self._t.set(sk, None if value is None else [self._kenc(key), self._venc(value)])

    def put_if_absent(self, key: Any, value: Any) -> Any:
        old = self.get(key)
        if old is None:
            self.put(key, value)
        return old

    def put_all(self, entries: list[tuple[Any, Any]]) -> None:
        for k, v in entries:
            self.put(k, v)

    def delete(self, key: Any) -> Any:
        old = self.get(key)
        self._t.set(self._sk(key), None)
        return old

    def _pairs(self) -> list[tuple[Any, Any]]:
        kdec, vdec = self._kdec, self._vdec
        return [(kdec(e[0]), vdec(e[1])) for _, e in self._t.scan(self.name)]

    def _range(self, lo: Any, hi: Any, reverse: bool) -> KeyValueIterator[Any, Any]:
        pairs = [
            (k, v) for k, v in self._pairs() if (lo is None or k >= lo) and (hi is None or k <= hi)
        ]
        return _ListIterator(_sorted(pairs, reverse))

    def range(self, from_key: Any, to_key: Any) -> KeyValueIterator[Any, Any]:
        return self._range(from_key, to_key, False)

    def reverse_range(self, from_key: Any, to_key: Any) -> KeyValueIterator[Any, Any]:
        return self._range(from_key, to_key, True)

    def all(self) -> KeyValueIterator[Any, Any]:
        return _ListIterator(_sorted(self._pairs()))

    def reverse_all(self) -> KeyValueIterator[Any, Any]:
        return _ListIterator(_sorted(self._pairs(), True))

    def prefix_scan(self, prefix: str) -> KeyValueIterator[Any, Any]:
        pairs = [(k, v) for k, v in self._pairs() if str(k).startswith(prefix)]
        return _ListIterator(_sorted(pairs))

    def approximate_num_entries(self) -> int:
        return sum(1 for _ in self._t.scan(self.name))


class ReadOnlyKVStore(KeyValueStore[Any, Any]):
    """A global store as a processor sees it: its reads, and writes refused (only the
    store's state-update processor writes it).

    Examples
    --------
    >>> store = ReadOnlyKVStore(KVStore("rates", MemoryTable(), None, None), "P")
    >>> store.get("EUR") is None
    True
    >>> store.put("EUR", 1.1)
    Traceback (most recent call last):
    ...
    kspark_server.papi.StateStoreError: processor P cannot write global store 'rates' ...
    """

    def __init__(self, store: KVStore, processor: str) -> None:
        self.name = store.name
        self._s = store
        self._processor = processor

    def _refuse(self, what: str) -> Any:
        raise StateStoreError(
            f"processor {self._processor} cannot write global store {self.name!r} ({what}): "
            "a global store is read-only for the topology's processors; its topic feeds it "
            "through its state-update processor (StreamsBuilder.add_global_store(..., "
            "state_update_supplier=...)), so write the topic instead"
        )

    def get(self, key: Any) -> Any:
        return self._s.get(key)

    def put(self, key: Any, value: Any) -> None:
        self._refuse("put")

    def put_if_absent(self, key: Any, value: Any) -> Any:
        return self._refuse("put_if_absent")

    def put_all(self, entries: list[tuple[Any, Any]]) -> None:
        self._refuse("put_all")

    def delete(self, key: Any) -> Any:
        return self._refuse("delete")

    def range(self, from_key: Any, to_key: Any) -> KeyValueIterator[Any, Any]:
        return self._s.range(from_key, to_key)

    def reverse_range(self, from_key: Any, to_key: Any) -> KeyValueIterator[Any, Any]:
        return self._s.reverse_range(from_key, to_key)

    def all(self) -> KeyValueIterator[Any, Any]:
        return self._s.all()

    def reverse_all(self) -> KeyValueIterator[Any, Any]:
        return self._s.reverse_all()

    def prefix_scan(self, prefix: str) -> KeyValueIterator[Any, Any]:
        return self._s.prefix_scan(prefix)

    def approximate_num_entries(self) -> int:
        return self._s.approximate_num_entries()


class VersionedKVStore(VersionedKeyValueStore[Any, Any]):
    """A versioned store of a processor's task: per key, its versions' timestamps and
    values (None: a tombstone), older than ``history_retention`` behind the store's
    observed stream time dropped as later puts come."""

    def __init__(
        self,
        name: str,
        table: Table,
        key_type: TypeSpec | None,
        value_type: TypeSpec | None,
        history_retention_ms: int,
        observed: dict[str, Any],
    ) -> None:
        self.name = name
        self._t = table
        self._kenc, _ = _codecs(key_type)
        self._venc, self._vdec = _codecs(value_type)
        self.retention = history_retention_ms
        #: the store's observed stream time (the largest put timestamp), kept in scalars
        self._observed = observed

    def _sk(self, key: Any) -> Any:
        if key is None:
            raise ValueError(f"store {self.name}: a key must not be None")
        return (self.name, codec.hashable(self._kenc(key)))

    def _versions(self, key: Any) -> tuple[list[int], list[Any]]:
        e = self._t.get(self._sk(key))
        if e is None:
            return [], []
        return list(e[1][0]), list(e[1][1])

    def put(self, key: Any, value: Any, timestamp: int) -> int:
        time = self._observed.get(self.name)
        time = timestamp if time is None else max(int(time), timestamp)
        self._observed[self.name] = time
        if timestamp < time - self.retention:
            return -1  # older than the history retention: not put (as Kafka Streams)
        tss, vals = self._versions(key)
        stored = None if value is None else self._venc(value)
        at = {t: i for i, t in enumerate(tss)}
        if timestamp in at:
            vals[at[timestamp]] = stored
        else:
            tss.append(timestamp)
            vals.append(stored)
            pairs = sorted(zip(tss, vals, strict=True), key=lambda p: p[0])
            tss, vals = [p[0] for p in pairs], [p[1] for p in pairs]
        # keep the newest version older than the retention bound: it is valid at the bound
        bound = time - self.retention
        first = 0
        while first + 1 < len(tss) and tss[first + 1] <= bound:
            first += 1
        tss, vals = tss[first:], vals[first:]
        live = any(v is not None for v in vals)
        self._t.set(self._sk(key), [self._kenc(key), [tss, vals]] if live else None)
        return timestamp

    def get(self, key: Any, as_of_timestamp: int | None = None) -> VersionedRecord[Any] | None:
        tss, vals = self._versions(key)
        if not tss:
            return None
        if as_of_timestamp is None:
            i = len(tss) - 1
        else:
            time = self._observed.get(self.name)
            if time is not None and as_of_timestamp < int(time) - self.retention:
                return None
            i = -1
            for j, t in enumerate(tss):
                if t <= as_of_timestamp:
                    i = j
            if i < 0:
                return None
        if vals[i] is None:
            return None
        valid_to = tss[i + 1] if i + 1 < len(tss) else None
        return VersionedRecord(self._vdec(vals[i]), tss[i], valid_to)

    def delete(self, key: Any, timestamp: int) -> VersionedRecord[Any] | None:
        old = self.get(key, timestamp)
        self.put(key, None, timestamp)
        return old


class _WindowIterator(WindowStoreIterator[Any]):
    def __init__(self, pairs: Iterable[tuple[int, Any]]) -> None:
        self._it = iter(pairs)

    def __next__(self) -> tuple[int, Any]:
        return next(self._it)


class WindowKVStore(WindowStore[Any, Any]):
    """A window store of a processor's task: per key and window start, a value (or every
    put's value, with ``retain_duplicates``); windows that start before the store's
    observed stream time minus the retention are dropped."""

    def __init__(
        self,
        name: str,
        table: Table,
        key_type: TypeSpec | None,
        value_type: TypeSpec | None,
        retention_ms: int,
        retain_duplicates: bool,
        observed: dict[str, Any],
    ) -> None:
        self.name = name
        self._t = table
        self._kenc, self._kdec = _codecs(key_type)
        self._venc, self._vdec = _codecs(value_type)
        self.retention = retention_ms
        self.duplicates = retain_duplicates
        self._observed = observed

    def _bound(self) -> int | None:
        time = self._observed.get(self.name)
        return None if time is None else int(time) - self.retention

    def put(self, key: Any, value: Any, window_start: int) -> None:
        if key is None:
            raise ValueError(f"store {self.name}: a key must not be None")
        time = self._observed.get(self.name)
        self._observed[self.name] = window_start if time is None else max(int(time), window_start)
        bound = self._bound()
        if bound is not None and window_start <= bound:
            return  # expired: dropped, as Kafka Streams' window store drops it
        hk = codec.hashable(self._kenc(key))
        if self.duplicates:
            if value is None:
                return  # Kafka Streams ignores a null put with duplicates retained
            seq = int(self._observed.get(f"{self.name}#seq") or 0) + 1
            self._observed[f"{self.name}#seq"] = seq
            sk: tuple[Any, ...] = (self.name, hk, int(window_start), seq)
        else:
            sk = (self.name, hk, int(window_start))
        entry = None if value is None else [self._kenc(key), self._venc(value)]
        self._t.set(sk, entry)
        self._expire(bound)

    def _expire(self, bound: int | None) -> None:
        # reads skip expired windows already; removing them takes a scan of the store, so
        # it runs each time the bound has moved by half the retention
        mark = f"{self.name}#expired"
        last = self._observed.get(mark)
        if bound is None or (last is not None and bound - int(last) < max(1, self.retention // 2)):
            return
        self._observed[mark] = bound
        for sk, _ in self._t.scan(self.name):
            if sk[2] <= bound:
                self._t.set(sk, None)

    def _windows(self, lo: int, hi: int) -> list[tuple[Any, int, Any, Any]]:
        bound = self._bound()
        out = []
        for sk, e in self._t.scan(self.name):
            start = sk[2]
            if lo <= start <= hi and (bound is None or start > bound):
                out.append((sk, start, e[0], e[1]))
        return out

    def fetch(self, key: Any, time_from: int, time_to: int) -> WindowStoreIterator[Any]:
        hk = codec.hashable(self._kenc(key))
        found = sorted(
            (w for w in self._windows(time_from, time_to) if w[0][1] == hk),
            key=lambda w: (w[1], w[0][3] if len(w[0]) > 3 else 0),
        )
        return _WindowIterator([(start, self._vdec(v)) for _, start, _, v in found])

    def fetch_all(self, time_from: int, time_to: int) -> KeyValueIterator[tuple[Any, int], Any]:
        found = self._windows(time_from, time_to)
        pairs = [((self._kdec(k), start), self._vdec(v)) for _, start, k, v in found]
        try:
            pairs.sort(key=lambda p: (p[0][1], p[0][0]))
        except TypeError:
            pairs.sort(key=lambda p: (p[0][1], _order(p[0][0])))
        return _ListIterator(pairs)


def store_for(
    kind: str,
    name: str,
    table: Table,
    key_type: TypeSpec | None,
    value_type: TypeSpec | None,
    observed: dict[str, Any],
    *,
    history_retention_ms: int = 0,
    retention_ms: int = 0,
    retain_duplicates: bool = False,
) -> Any:
    """The store interface of a store of ``kind`` over ``table``."""
    if kind == "versioned":
        return VersionedKVStore(name, table, key_type, value_type, history_retention_ms, observed)
    if kind == "window":
        return WindowKVStore(
            name, table, key_type, value_type, retention_ms, retain_duplicates, observed
        )
    return KVStore(name, table, key_type, value_type)
