"""The read-only views of aggregations' stores: app.store(name) of a count, reduce or
aggregate table.

A table of an aggregation answers get(key); a windowed one fetch(key, time_from,
time_to), the windows of a key that start in that range, as Kafka Streams'
ReadOnlyWindowStore.fetch does; a session-windowed one fetch(key), the key's sessions.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, TypeVar

from kspark.errors import StoreError
from kspark.runtime.stores.sources import _Source, _StoreView
from kspark_server.spec import AggregateSpec

K = TypeVar("K")
V = TypeVar("V")

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
