"""Cogrouping (KIP-150): several grouped streams aggregated into one table,
``CogroupedKStream``.

``KGroupedStream.cogroup(aggregator)`` starts a cogrouped stream; each further
``cogroup(grouped_stream, aggregator)`` adds a grouped stream of the same key type, with
its own value type and its own aggregator, and ``aggregate(initializer)`` folds them all
into one aggregate per key: one store, one table, one operator, the records of all inputs
in the order their task processes them. ``windowed_by(TimeWindows...)`` or
``windowed_by(SessionWindows...)`` aggregate per window or per session.

Examples
--------
>>> from kspark import StreamsBuilder
>>> b = StreamsBuilder()
>>> views = b.stream("views", key_type=str, value_type=int)
>>> clicks = b.stream("clicks", key_type=str, value_type=str)
>>> stats = (
...     views.group_by_key()
...     .cogroup(lambda user, seconds, total: total + seconds)
...     .cogroup(clicks.group_by_key(), lambda user, page, total: total + 1)
...     .aggregate(lambda: 0, value_type=int)
... )
>>> stats.to_stream().to("stats")
>>> print(b.build().describe())  # doctest: +NORMALIZE_WHITESPACE
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [views])
      --> COGROUPKSTREAM-AGGREGATE-0000000003
    Source: KSTREAM-SOURCE-0000000001 (topics: [clicks])
      --> COGROUPKSTREAM-AGGREGATE-0000000004
    Processor: COGROUPKSTREAM-AGGREGATE-0000000003 (stores: [COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000002]) [operator: fused into the cogrouped aggregation]
      --> COGROUPKSTREAM-MERGE-0000000005
      <-- KSTREAM-SOURCE-0000000000
    Processor: COGROUPKSTREAM-AGGREGATE-0000000004 (stores: [COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000002]) [operator: fused into the cogrouped aggregation]
      --> COGROUPKSTREAM-MERGE-0000000005
      <-- KSTREAM-SOURCE-0000000001
    Processor: COGROUPKSTREAM-MERGE-0000000005 (stores: []) [operator: kspark task operator (per-task state)]
      --> KTABLE-TOSTREAM-0000000006
      <-- COGROUPKSTREAM-AGGREGATE-0000000003, COGROUPKSTREAM-AGGREGATE-0000000004
    Processor: KTABLE-TOSTREAM-0000000006 (stores: [])
      --> KSTREAM-SINK-0000000007
      <-- COGROUPKSTREAM-MERGE-0000000005
    Sink: KSTREAM-SINK-0000000007 (topic: stats)
      <-- KTABLE-TOSTREAM-0000000006
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar, overload

from kspark.dsl import _infer
from kspark.dsl.grouped import SessionWindows, TimeWindows, _store
from kspark.dsl.options import Materialized, Named
from kspark.errors import InvalidArgumentError, InvalidTopologyError
from kspark.plan.grouped import (
    CogroupAggregate,
    CogroupInput,
    SessionWindowsDef,
    TimeWindowsDef,
    windowed_type,
)
from kspark.plan.types import DYNAMIC, Dynamic
from kspark_server.windows import Windowed

if TYPE_CHECKING:
    from kspark.dsl.grouped import KGroupedStream
    from kspark.dsl.streams import KTable

__all__ = [
    "CogroupedKStream",
    "SessionWindowedCogroupedKStream",
    "TimeWindowedCogroupedKStream",
]

K = TypeVar("K")
V = TypeVar("V")
VA = TypeVar("VA")

_AGG = "COGROUPKSTREAM-AGGREGATE"
_MERGE = "COGROUPKSTREAM-MERGE"

#: one grouped stream of a cogroup and its aggregator
_Part = tuple["KGroupedStream[Any, Any]", Callable[..., Any]]


class _Cogrouped(Generic[K, VA]):
    """What cogrouped streams share: their grouped streams with their aggregators, and
    the windows (None: per key)."""

    __slots__ = ("_parts", "_windows")

    def __init__(
        self,
        parts: tuple[_Part, ...],
        windows: TimeWindowsDef | SessionWindowsDef | None = None,
    ) -> None:
        self._parts = parts
        self._windows = windows

    def _aggregate(
        self,
        initializer: Callable[[], Any],
        named: Named | None,
        materialized: Materialized | None,
        value_type: Any,
        merger: Callable[..., Any] | None = None,
    ) -> KTable[Any, Any]:
        from kspark.dsl.streams import KTable

        if named is not None and not isinstance(named, Named):
            raise InvalidArgumentError(f"named must be a Named, got {named!r}", parameter="named")
        builder = self._parts[0][0]._builder
        _infer.check_callable(initializer, "initializer", _MERGE)
        if merger is not None:
            _infer.check_callable(merger, "merger", _MERGE)
        # Kafka Streams names the store first, then each input's processor, then the merge
        store = _store(builder, materialized, _AGG)
        key = _key_type(self._parts)
        inputs: list[CogroupInput] = []
        for i, (grouped, aggregator) in enumerate(self._parts):
            name, seq = builder._next(
                _AGG, None if named is None else f"{named.name}-cogroup-agg-{i}"
            )
            inputs.append(
                CogroupInput(
                    name=name,
                    seq=seq,
                    parent=grouped._node,
                    index=i,
                    aggregator=aggregator,
                    store_name=store,
                    repartition=grouped._repartition,
                    grouped_name=grouped._grouped_name,
                    key_type=grouped._node.key_type or DYNAMIC,
                    value_type=grouped._node.value_type or DYNAMIC,
                )
            )
            builder._added(inputs[-1])
        name, seq = builder._next(_MERGE, None if named is None else f"{named.name}-cogroup-merge")
        hints = [_infer.return_hint(a) for _, a in self._parts] + [_infer.return_hint(initializer)]
        hint = next((h for h in hints if h is not None), None)
        node = CogroupAggregate(
            name=name,
            seq=seq,
            parent=inputs[0],
            more=tuple(inputs[1:]),
            op="aggregate",
            initializer=initializer,
            aggregator=self._parts[0][1],
            merger=merger,
            store_name=store,
            windows=self._windows,
            retention_ms=0 if materialized is None else materialized.retention_ms,
            key_type=windowed_type(key) if self._windows is not None else key,
            value_type=_infer.resolve(value_type, hint, name, "value_type"),
        )
        return KTable(builder, node)


class CogroupedKStream(_Cogrouped[K, VA]):
    """Grouped streams of one key type cogrouped into one aggregation (Kafka Streams'
    ``CogroupedKStream``, KIP-150). Made by :meth:`KGroupedStream.cogroup`.

    Each grouped stream keeps its own value type and has its own aggregator
    ``aggregator(key, value, aggregate) -> aggregate``; they share the aggregate type
    ``VA``, one store and one result table. A record of any input updates its key's
    aggregate through its input's aggregator, in the order its task processes the
    records of all inputs (by offset within a partition, by timestamp across them).
    Records with a null key or a null value are dropped and counted, as in
    ``aggregate``.
    """

    def cogroup(
        self, grouped_stream: KGroupedStream[K, V], aggregator: Callable[[K, V, VA], VA]
    ) -> CogroupedKStream[K, VA]:
        """Adds ``grouped_stream``, whose records ``aggregator`` folds into the same
        aggregate.

        Parameters
        ----------
        grouped_stream
            A grouped stream of the same key type (``group_by_key()`` or ``group_by``);
            if it needs a repartition, it is repartitioned as its own aggregation would
            be.
        aggregator
            The new aggregate from the key, one of ``grouped_stream``'s values and the
            aggregate so far.

        Returns
        -------
        CogroupedKStream
            The cogrouped stream with one more input.

        Examples
        --------
        >>> from kspark import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> a = b.stream("a", key_type=str, value_type=int).group_by_key()
        >>> c = b.stream("c", key_type=str, value_type=str).group_by_key()
        >>> both = a.cogroup(lambda k, n, agg: agg + n).cogroup(c, lambda k, s, agg: agg + len(s))
        >>> both.aggregate(lambda: 0, value_type=int).node.value_type.display()
        'int'
        """
        from kspark.dsl.grouped import KGroupedStream

        if not isinstance(grouped_stream, KGroupedStream):
            raise InvalidArgumentError(
                f"cogroup takes a KGroupedStream (group_by_key() or group_by(...)), got "
                f"{grouped_stream!r}",
                parameter="grouped_stream",
            )
        _infer.check_callable(aggregator, "aggregator", _AGG)
        if any(g is grouped_stream for g, _ in self._parts):
            raise InvalidArgumentError(
                "this grouped stream is cogrouped already; group the stream again "
                "(group_by_key()) to aggregate its records twice",
                parameter="grouped_stream",
            )
        if grouped_stream._builder is not self._parts[0][0]._builder:
            raise InvalidArgumentError(
                "cogrouped streams must come from the same StreamsBuilder",
                parameter="grouped_stream",
            )
        parts = (*self._parts, (grouped_stream, aggregator))
        _key_type(parts)
        return CogroupedKStream(parts)

    @overload
    def windowed_by(self, windows: TimeWindows) -> TimeWindowedCogroupedKStream[K, VA]: ...
    @overload
    def windowed_by(self, windows: SessionWindows) -> SessionWindowedCogroupedKStream[K, VA]: ...
    def windowed_by(
        self, windows: TimeWindows | SessionWindows
    ) -> TimeWindowedCogroupedKStream[K, VA] | SessionWindowedCogroupedKStream[K, VA]:
        """Aggregate per time window (or per session) instead of per key only.

        Examples
        --------
        >>> from datetime import timedelta
        >>> from kspark import StreamsBuilder, TimeWindows
        >>> b = StreamsBuilder()
        >>> a = b.stream("a", key_type=str, value_type=int).group_by_key()
        >>> w = TimeWindows.of_size_with_no_grace(timedelta(minutes=1))
        >>> t = a.cogroup(lambda k, n, agg: agg + n).windowed_by(w).aggregate(lambda: 0)
        >>> t.node.key_type.display(), t.node.windows.size_ms
        ('Windowed', 60000)
        """
        if not isinstance(windows, TimeWindows | SessionWindows):
            raise InvalidArgumentError(
                f"windowed_by takes TimeWindows or SessionWindows, got {windows!r}",
                parameter="windows",
            )
        if isinstance(windows, SessionWindows):
            return SessionWindowedCogroupedKStream(self._parts, windows.spec())
        return TimeWindowedCogroupedKStream(self._parts, windows.spec())

    def aggregate(
        self,
        initializer: Callable[[], VA],
        named: Named | None = None,
        materialized: Materialized | None = None,
        *,
        value_type: type[VA] | None = None,
    ) -> KTable[K, VA]:
        """Folds every input's records of a key into one aggregate, from
        ``initializer()``, each by its input's aggregator.

        Parameters
        ----------
        initializer
            The aggregate of a key before its first record.
        named
            The processors' names: ``<name>-cogroup-agg-<i>`` for each input and
            ``<name>-cogroup-merge`` for the aggregation, as in Kafka Streams.
        materialized
            The store's name (``Materialized.as_(name)``), which ``app.store(name)``
            reads.
        value_type
            The aggregate's type, when the functions' annotations do not say it.

        Returns
        -------
        KTable
            Each key's aggregate; per micro-batch, the latest aggregate of every key that
            changed.

        Examples
        --------
        >>> from kspark import Materialized, Named, StreamsBuilder
        >>> b = StreamsBuilder()
        >>> a = b.stream("a", key_type=str, value_type=int).group_by_key()
        >>> t = a.cogroup(lambda k, n, agg: agg + n).aggregate(
        ...     lambda: 0, Named.as_("sum"), Materialized.as_("sums"), value_type=int
        ... )
        >>> t.name, t.store_name, [i.name for i in t.node.inputs]
        ('sum-cogroup-merge', 'sums', ['sum-cogroup-agg-0'])
        """
        return self._aggregate(initializer, named, materialized, value_type)


class TimeWindowedCogroupedKStream(_Cogrouped[K, VA]):
    """A cogrouped stream aggregated per time window (Kafka Streams'
    ``TimeWindowedCogroupedKStream``); its table is keyed by ``Windowed[K]``. A record
    later than its window's end plus grace, by its task's stream time (over all inputs),
    is dropped from that window and counted."""

    def aggregate(
        self,
        initializer: Callable[[], VA],
        named: Named | None = None,
        materialized: Materialized | None = None,
        *,
        value_type: type[VA] | None = None,
    ) -> KTable[Windowed[K], VA]:
        """Folds every input's records of a key and window into one aggregate, from
        ``initializer()``, each by its input's aggregator (see
        :meth:`CogroupedKStream.aggregate`)."""
        return self._aggregate(initializer, named, materialized, value_type)


class SessionWindowedCogroupedKStream(_Cogrouped[K, VA]):
    """A cogrouped stream aggregated per session (Kafka Streams'
    ``SessionWindowedCogroupedKStream``); its table is keyed by ``Windowed[K]``. A
    record of any input that brings sessions together merges them with
    ``session_merger``."""

    def aggregate(
        self,
        initializer: Callable[[], VA],
        session_merger: Callable[[K, VA, VA], VA],
        named: Named | None = None,
        materialized: Materialized | None = None,
        *,
        value_type: type[VA] | None = None,
    ) -> KTable[Windowed[K], VA]:
        """Folds each session's records of every input, from ``initializer()``, each by
        its input's aggregator; ``session_merger(key, aggregate1, aggregate2)`` joins the
        aggregates of two sessions that a record brings together."""
        return self._aggregate(initializer, named, materialized, value_type, session_merger)


def start(grouped: KGroupedStream[Any, Any], aggregator: Callable[..., Any]) -> Any:
    """The cogrouped stream of ``grouped`` alone (``KGroupedStream.cogroup``)."""
    _infer.check_callable(aggregator, "aggregator", _AGG)
    return CogroupedKStream(((grouped, aggregator),))


def _key_type(parts: tuple[_Part, ...]) -> Any:
    """The inputs' one key type: a dynamic key takes the declared one; two declared key
    types must be equal."""
    declared = [g._node.key_type for g, _ in parts if g._node.key_type is not None]
    known = [t for t in declared if not isinstance(t, Dynamic)]
    for t in known[1:]:
        if t != known[0]:
            raise InvalidTopologyError(
                "cogrouped streams must have one key type, got "
                f"{known[0].display()} and {t.display()}; select_key or map one of them first"
            )
    return known[0] if known else DYNAMIC
