"""The read-only views of aggregations' stores: app.store(name) of a count, reduce or
aggregate table.

A table of an aggregation answers get(key); a windowed one fetch(key, time_from,
time_to), the windows of a key that start in that range, as Kafka Streams'
ReadOnlyWindowStore.fetch does; a session-windowed one fetch(key), find_sessions and
fetch_session, as its ReadOnlySessionStore.
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
    micro-batch, as Kafka Streams' ``ReadOnlySessionStore``.

    It holds each key's sessions that can still take records (ending no more than the
    inactivity gap plus grace before stream time) and, with
    ``Materialized.with_retention``, the closed ones that ended within the retention.
    A session is ``(start, end, aggregate)``, start and end both included; a key's
    sessions never overlap, so each list is in order of start and of end alike.

    Obtained from :meth:`kspark.StreamsApp.store` or
    :meth:`kspark.testing.TopologyTestDriver.get_session_store`.

    Examples
    --------
    >>> from datetime import timedelta
    >>> from kspark import Materialized, SessionWindows, StreamsBuilder, StreamsConfig
    >>> from kspark.testing import TopologyTestDriver
    >>> b = StreamsBuilder()
    >>> _ = (
    ...     b.stream("clicks", key_type=str, value_type=str)
    ...     .group_by_key()
    ...     .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(timedelta(seconds=5)))
    ...     .count(materialized=Materialized.as_("visits").with_retention(timedelta(hours=1)))
    ...     .to_stream(lambda wk, n: wk.key)
    ...     .to("visit-counts")
    ... )
    >>> config = StreamsConfig(application_id="visits", num_partitions=1)
    >>> with TopologyTestDriver(b.build(), config, engine="local") as driver:
    ...     clicks = driver.create_input_topic("clicks")
    ...     for t in (0, 3_000, 60_000):
    ...         clicks.pipe_input("ann", "/home", timestamp=t)
    ...     visits = driver.get_session_store("visits")
    ...     print(visits.fetch("ann"))
    ...     print(visits.find_sessions("ann", 1_000, 59_000))
    ...     print(visits.fetch_session("ann", 0, 3_000))
    [(0, 3000, 2), (60000, 60000, 1)]
    [(0, 3000, 2)]
    2
    """

    def _sessions(self, key: K) -> list[tuple[int, int, V]]:
        hk = self._key(key)
        got = self._source.entries([hk]).get(hk)
        if got is None or got[1] is None:
            return []
        sessions = sorted(got[1][1], key=lambda x: int(x[0]))
        return [(int(x[0]), int(x[1]), self._vdec(x[2])) for x in sessions]

    def fetch(self, key: K) -> list[tuple[int, int, V]]:
        """``(start, end, aggregate)`` of each session of ``key``, oldest first (Kafka
        Streams' ``fetch(key)``); an empty list if it has none."""
        return self._sessions(key)

    def backward_fetch(self, key: K) -> list[tuple[int, int, V]]:
        """The sessions of ``key`` as :meth:`fetch` gives them, newest first."""
        return self._sessions(key)[::-1]

    def find_sessions(
        self, key: K, earliest_session_end_time: int, latest_session_start_time: int
    ) -> list[tuple[int, int, V]]:
        """``(start, end, aggregate)`` of the sessions of ``key`` that end at or after
        ``earliest_session_end_time`` and start at or before ``latest_session_start_time``
        (epoch ms, both bounds included), oldest first: those that overlap that range
        when it is not empty, as Kafka Streams' ``findSessions``."""
        lo, hi = int(earliest_session_end_time), int(latest_session_start_time)
        return [s for s in self._sessions(key) if s[1] >= lo and s[0] <= hi]

    def backward_find_sessions(
        self, key: K, earliest_session_end_time: int, latest_session_start_time: int
    ) -> list[tuple[int, int, V]]:
        """The sessions :meth:`find_sessions` gives, newest first."""
        return self.find_sessions(key, earliest_session_end_time, latest_session_start_time)[::-1]

    def fetch_session(self, key: K, session_start_time: int, session_end_time: int) -> V | None:
        """The aggregate of the session of ``key`` that starts at ``session_start_time``
        and ends at ``session_end_time`` exactly; None if the store holds no such
        session (Kafka Streams' ``fetchSession``)."""
        for start, end, agg in self._sessions(key):
            if start == int(session_start_time) and end == int(session_end_time):
                return agg
        return None


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
