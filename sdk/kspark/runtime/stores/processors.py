"""The read-only views of the Processor API's stores: key-value, versioned and window
stores, whose entries are the processor's task state's, keyed by store name
(:mod:`kspark_server.procstores`)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Generic, TypeVar

from kspark.runtime.stores.sources import _Source
from kspark.runtime.stores.tables import VersionedRecord
from kspark_server.spec import JsonSpec, StoreSpec

K = TypeVar("K")
V = TypeVar("V")


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
