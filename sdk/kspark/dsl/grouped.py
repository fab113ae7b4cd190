"""Grouped streams, their aggregations and windows: ``KGroupedStream``,
``TimeWindowedKStream``, ``SlidingWindowedKStream``, ``SessionWindowedKStream``, the
cogrouped streams (``CogroupedKStream``, KIP-150), and the options they take: ``Grouped``,
``TimeWindows``, ``SlidingWindows``, ``EmitStrategy``, ``Suppressed``.

``KStream.group_by_key()`` and ``KStream.group_by(selector)`` group a stream;
``count()``, ``reduce()`` and ``aggregate()`` turn it into a table whose value per key is
the aggregate so far. ``windowed_by(TimeWindows...)`` aggregates per time window
instead, into a table keyed by ``Windowed[K]``.

This module and :mod:`kspark.dsl.streams` name each other (a stream groups into a grouped
stream, which aggregates into a table); :mod:`kspark.dsl._aggregation` builds the plan
nodes, and the grouped table of ``KTable.group_by`` lives with ``KTable``.

Each aggregation compiles to kspark's own per-task operator
(:mod:`kspark_server.operators.aggregate`), which emits, per micro-batch, the latest value of each
key it changed: Kafka Streams with a record cache and a commit interval of one
micro-batch (see docs/aggregations.md).

Examples
--------
>>> from datetime import timedelta
>>> from kspark import StreamsBuilder, TimeWindows
>>> b = StreamsBuilder()
>>> clicks = b.stream("clicks", key_type=str, value_type=str)
>>> per_user = clicks.group_by_key().count()
>>> per_user.to_stream().to("counts")
>>> per_minute = clicks.group_by_key().windowed_by(
...     TimeWindows.of_size_with_no_grace(timedelta(minutes=1))
... ).count()
>>> per_minute.node.key_type.display()
'Windowed'
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, Self, TypeVar, overload

from kspark.dsl import _aggregation as agg
from kspark.dsl import _infer
from kspark.dsl.options import Grouped, Materialized, Named
from kspark.dsl.streams import KGroupedTable
from kspark.dsl.suppressed import BufferConfig, Suppressed
from kspark.dsl.windows import EmitStrategy, SessionWindows, SlidingWindows, TimeWindows
from kspark.errors import InvalidArgumentError
from kspark.plan import nodes as n
from kspark.plan.grouped import SessionWindowsDef, SlidingWindowsDef, TimeWindowsDef
from kspark.plan.types import describe_type
from kspark_server.windows import Windowed

if TYPE_CHECKING:
    from kspark.dsl.streams import KStream, KTable, StreamsBuilder

__all__ = [
    "BufferConfig",
    "CogroupedKStream",
    "EmitStrategy",
    "Grouped",
    "KGroupedStream",
    "KGroupedTable",
    "SessionWindowedCogroupedKStream",
    "SessionWindowedKStream",
    "SessionWindows",
    "SlidingWindowedKStream",
    "SlidingWindows",
    "Suppressed",
    "TimeWindowedCogroupedKStream",
    "TimeWindowedKStream",
    "TimeWindows",
]

K = TypeVar("K")
V = TypeVar("V")
VA = TypeVar("VA")
KT = TypeVar("KT")

_INT = describe_type(int)


class _Aggregating(Generic[K, V, KT]):
    """What grouped streams share: the grouped stream, ``count`` and ``reduce`` into a
    table keyed by ``KT`` (the key, or ``Windowed[K]``)."""

    __slots__ = ("_builder", "_emit_on_close", "_grouped_name", "_node", "_repartition", "_windows")

    def __init__(
        self,
        builder: StreamsBuilder,
        node: n.Node,
        *,
        repartition: bool,
        grouped_name: str | None,
        windows: TimeWindowsDef | SessionWindowsDef | SlidingWindowsDef | None = None,
        emit_on_close: bool = False,
    ) -> None:
        self._builder = builder
        self._node = node
        self._repartition = repartition
        self._grouped_name = grouped_name
        self._windows = windows
        self._emit_on_close = emit_on_close

    def _table(
        self,
        op: str,
        prefix: str,
        named: Named | None,
        materialized: Materialized | None,
        *,
        value_type: Any,
        **fns: Any,
    ) -> KTable[Any, Any]:
        from kspark.dsl.streams import KTable

        node = agg.aggregate(
            self,
            op,
            prefix,
            named,
            materialized,
            windows=self._windows,
            emit_on_close=self._emit_on_close,
            value_type=value_type,
            **fns,
        )
        return KTable(self._builder, node)

    def count(
        self, named: Named | None = None, materialized: Materialized | None = None
    ) -> KTable[KT, int]:
        """The number of records per key (per key and window, once windowed), as a table.

        Records with a null key are dropped and counted (``dropped-records``), and so are,
        not windowed, records with a null value, as in Kafka Streams.

        Parameters
        ----------
        named
            The processor's name instead of ``KSTREAM-AGGREGATE-<n>``.
        materialized
            The store's name (``Materialized.as_(name)``), which ``app.store(name)``
            reads.

        Returns
        -------
        KTable
            Each key's (or window's) count; per micro-batch, the latest count of every
            key that changed.

        Examples
        --------
        >>> from kspark import Materialized, StreamsBuilder
        >>> b = StreamsBuilder()
        >>> counts = b.stream("clicks", key_type=str, value_type=str).group_by_key().count(
        ...     materialized=Materialized.as_("clicks-per-user")
        ... )
        >>> counts.to_stream().to("counts")
        >>> print(b.build().describe())  # doctest: +NORMALIZE_WHITESPACE
        Topologies:
           Sub-topology: 0
            Source: KSTREAM-SOURCE-0000000000 (topics: [clicks])
              --> KSTREAM-AGGREGATE-0000000001
            Processor: KSTREAM-AGGREGATE-0000000001 (stores: [clicks-per-user]) [operator: kspark task operator (per-task state)]
              --> KTABLE-TOSTREAM-0000000002
              <-- KSTREAM-SOURCE-0000000000
            Processor: KTABLE-TOSTREAM-0000000002 (stores: [])
              --> KSTREAM-SINK-0000000003
              <-- KSTREAM-AGGREGATE-0000000001
            Sink: KSTREAM-SINK-0000000003 (topic: counts)
              <-- KTABLE-TOSTREAM-0000000002

        Per minute, or per session:

        >>> from datetime import timedelta
        >>> from kspark import SessionWindows, TimeWindows
        >>> s = b.stream("views", key_type=str, value_type=str).group_by_key()
        >>> s.windowed_by(TimeWindows.of_size_with_no_grace(timedelta(minutes=1))).count().name
        'KSTREAM-AGGREGATE-0000000006'
        >>> w = SessionWindows.of_inactivity_gap_with_no_grace(timedelta(minutes=5))
        >>> s.windowed_by(w).count().node.windows
        SessionWindowsDef(gap_ms=300000, grace_ms=0)
        """
        return self._table("count", "KSTREAM-AGGREGATE", named, materialized, value_type=_INT)

    def reduce(
        self,
        reducer: Callable[[V, V], V],
        named: Named | None = None,
        materialized: Materialized | None = None,
    ) -> KTable[KT, V]:
        """Combines each key's values (per window, or per session) with
        ``reducer(aggregate, value)``; the first value is the aggregate as it comes, and
        merging two sessions reduces their aggregates the same way.

        ``reducer`` runs per record on the server, guarded by the processing exception
        handler.

        Examples
        --------
        >>> from kspark import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> totals = b.stream("amounts", key_type=str, value_type=float).group_by_key().reduce(
        ...     lambda total, amount: total + amount
        ... )
        >>> totals.name, totals.store_name
        ('KSTREAM-REDUCE-0000000002', 'KSTREAM-REDUCE-STATE-STORE-0000000001')
        """
        return self._table(
            "reduce",
            "KSTREAM-REDUCE",
            named,
            materialized,
            value_type=self._node.value_type,
            reducer=reducer,
        )

    def _aggregate(
        self,
        initializer: Callable[[], Any],
        aggregator: Callable[[Any, Any, Any], Any],
        named: Named | None,
        materialized: Materialized | None,
        value_type: Any,
        **merger: Any,
    ) -> KTable[Any, Any]:
        hint = _infer.return_hint(aggregator) or _infer.return_hint(initializer)
        prefix = "KSTREAM-AGGREGATE"
        return self._table(
            "aggregate",
            prefix,
            named,
            materialized,
            value_type=_infer.resolve(value_type, hint, prefix, "value_type"),
            initializer=initializer,
            aggregator=aggregator,
            **merger,
        )


class _Folding(_Aggregating[K, V, KT]):
    """Grouped streams whose ``aggregate`` takes no merger (all but sessions)."""

    def aggregate(
        self,
        initializer: Callable[[], VA],
        aggregator: Callable[[K, V, VA], VA],
        named: Named | None = None,
        materialized: Materialized | None = None,
        *,
        value_type: type[VA] | None = None,
    ) -> KTable[KT, VA]:
        """Folds each key's values (per window, once windowed): ``initializer()`` starts a key's aggregate, and
        ``aggregator(key, value, aggregate)`` gives the next.

        Parameters
        ----------
        initializer
            The aggregate of a key before its first record.
        aggregator
            The new aggregate from the key, the record's value and the aggregate so far.
        named, materialized
            The processor's and the store's names.
        value_type
            The aggregate's type, when the functions' annotations do not say it.

        Examples
        --------
        >>> from kspark import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> words = b.stream("words", key_type=str, value_type=str)
        >>> lengths = words.group_by_key().aggregate(
        ...     lambda: 0, lambda k, w, total: total + len(w), value_type=int
        ... )
        >>> lengths.node.value_type.display()
        'int'
        """
        return self._aggregate(initializer, aggregator, named, materialized, value_type)


class KGroupedStream(_Folding[K, V, K]):
    """A stream grouped by key, ready to aggregate (Kafka Streams' ``KGroupedStream``).

    Made by :meth:`KStream.group_by_key` or :meth:`KStream.group_by`.
    """

    def cogroup(self, aggregator: Callable[[K, V, VA], VA]) -> CogroupedKStream[K, VA]:
        """Starts a cogrouped aggregation (KIP-150) whose first input is this grouped
        stream, its records folded in by ``aggregator(key, value, aggregate)``; add more
        grouped streams with ``.cogroup(grouped, aggregator)``, then ``aggregate``.

        Examples
        --------
        >>> from kspark import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> g = b.stream("views", key_type=str, value_type=int).group_by_key()
        >>> g.cogroup(lambda user, n, total: total + n).aggregate(lambda: 0).name
        'COGROUPKSTREAM-MERGE-0000000003'
        """
        return CogroupedKStream(agg.add_cogrouped((), self, aggregator))

    @overload
    def windowed_by(self, windows: TimeWindows) -> TimeWindowedKStream[K, V]: ...
    @overload
    def windowed_by(self, windows: SessionWindows) -> SessionWindowedKStream[K, V]: ...
    @overload
    def windowed_by(self, windows: SlidingWindows) -> SlidingWindowedKStream[K, V]: ...
    def windowed_by(
        self, windows: TimeWindows | SessionWindows | SlidingWindows
    ) -> TimeWindowedKStream[K, V] | SessionWindowedKStream[K, V] | SlidingWindowedKStream[K, V]:
        """Aggregate per time window, sliding window or session instead of per key only.

        Examples
        --------
        >>> from datetime import timedelta
        >>> from kspark import StreamsBuilder, TimeWindows
        >>> b = StreamsBuilder()
        >>> s = b.stream("clicks", key_type=str, value_type=str)
        >>> hopping = TimeWindows.of_size_and_grace(timedelta(minutes=10), timedelta(minutes=1))
        >>> t = s.group_by_key().windowed_by(hopping.advance_by(timedelta(minutes=5))).count()
        >>> t.node.windows
        TimeWindowsDef(size_ms=600000, advance_ms=300000, grace_ms=60000)
        """
        if not isinstance(windows, TimeWindows | SessionWindows | SlidingWindows):
            raise InvalidArgumentError(
                f"windowed_by takes TimeWindows, SlidingWindows or SessionWindows, got {windows!r}",
                parameter="windows",
            )
        kind: type[Any] = (
            SessionWindowedKStream
            if isinstance(windows, SessionWindows)
            else SlidingWindowedKStream
            if isinstance(windows, SlidingWindows)
            else TimeWindowedKStream
        )
        return kind(  # type: ignore[no-any-return]
            self._builder,
            self._node,
            repartition=self._repartition,
            grouped_name=self._grouped_name,
            windows=windows.spec(),
        )


class _Emitting(_Folding[K, V, Windowed[K]]):
    """Windowed grouped streams that take an emit strategy (KIP-825)."""

    def emit_strategy(self, strategy: EmitStrategy) -> Self:
        """The same windowed stream, emitting as ``strategy`` says:
        ``EmitStrategy.on_window_close()`` emits each window's final result once, when
        stream time passes its end plus grace; ``on_window_update()`` (the default) its
        latest value per micro-batch.

        Parameters
        ----------
        strategy
            ``EmitStrategy.on_window_close()`` or ``EmitStrategy.on_window_update()``.

        Returns
        -------
        TimeWindowedKStream or SlidingWindowedKStream
            A stream of the same kind, whose aggregations emit as ``strategy`` says.

        Examples
        --------
        >>> from datetime import timedelta
        >>> from kspark import EmitStrategy, StreamsBuilder, TimeWindows
        >>> b = StreamsBuilder()
        >>> s = b.stream("clicks", key_type=str, value_type=str).group_by_key()
        >>> w = s.windowed_by(TimeWindows.of_size_with_no_grace(timedelta(minutes=1)))
        >>> w.emit_strategy(EmitStrategy.on_window_close()).count().node.emit_on_close
        True
        """
        if not isinstance(strategy, EmitStrategy):
            raise InvalidArgumentError(
                f"emit_strategy takes an EmitStrategy, got {strategy!r}", parameter="strategy"
            )
        return type(self)(
            self._builder,
            self._node,
            repartition=self._repartition,
            grouped_name=self._grouped_name,
            windows=self._windows,
            emit_on_close=strategy.on_close,
        )


class TimeWindowedKStream(_Emitting[K, V]):
    """A grouped stream aggregated per time window (Kafka Streams' ``TimeWindowedKStream``).

    Its tables are keyed by ``Windowed[K]``: the key and the window (``.window.start``,
    ``.window.end``, epoch ms, end exclusive). A record later than a window's end plus
    grace, by its task's stream time, is dropped from that window and counted.
    """


class SlidingWindowedKStream(_Emitting[K, V]):
    """A grouped stream aggregated per sliding window (Kafka Streams'
    ``TimeWindowedKStream`` over ``SlidingWindows``, KIP-450).

    Its tables are keyed by ``Windowed[K]`` whose window ``[start, end]`` includes both
    ends (``end - start`` is the time difference). Records with a null key or value are
    dropped and counted, as in Kafka Streams.

    Examples
    --------
    >>> from datetime import timedelta
    >>> from kspark import SlidingWindows, StreamsBuilder
    >>> b = StreamsBuilder()
    >>> s = b.stream("clicks", key_type=str, value_type=str).group_by_key()
    >>> w = SlidingWindows.of_time_difference_without_a_grace(timedelta(seconds=10))
    >>> s.windowed_by(w).count().node.windows
    SlidingWindowsDef(size_ms=10000, grace_ms=0)
    """


class SessionWindowedKStream(_Aggregating[K, V, Windowed[K]]):
    """A grouped stream aggregated per session (Kafka Streams' ``SessionWindowedKStream``).

    Its tables are keyed by ``Windowed[K]`` whose window is the session's first and last
    record time (both included). When a record joins two sessions, the table emits a
    tombstone (value None) for each session merged away and the merged session's value.
    """

    def aggregate(
        self,
        initializer: Callable[[], VA],
        aggregator: Callable[[K, V, VA], VA],
        merger: Callable[[K, VA, VA], VA],
        named: Named | None = None,
        materialized: Materialized | None = None,
        *,
        value_type: type[VA] | None = None,
    ) -> KTable[Windowed[K], VA]:
        """Folds each session's values, from ``initializer()`` with
        ``aggregator(key, value, aggregate)``; ``merger(key, aggregate1, aggregate2)``
        joins the aggregates of two sessions that a record brings together."""
        _infer.check_callable(merger, "merger", "KSTREAM-AGGREGATE")
        return self._aggregate(
            initializer, aggregator, named, materialized, value_type, merger=merger
        )


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

        node = agg.cogroup_aggregate(
            self._parts, self._windows, initializer, named, materialized, value_type, merger
        )
        return KTable(self._parts[0][0]._builder, node)


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
        if not isinstance(grouped_stream, KGroupedStream):
            raise InvalidArgumentError(
                f"cogroup takes a KGroupedStream (group_by_key() or group_by(...)), got "
                f"{grouped_stream!r}",
                parameter="grouped_stream",
            )
        return CogroupedKStream(agg.add_cogrouped(self._parts, grouped_stream, aggregator))

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


def group(
    stream: KStream[Any, Any], grouped: Grouped | None, *, selected: bool
) -> KGroupedStream[Any, Any]:
    """The grouped stream of ``stream`` (already re-keyed when ``selected``)."""
    if grouped is not None and not isinstance(grouped, Grouped):
        raise InvalidArgumentError(
            f"grouped must be a Grouped, got {grouped!r}", parameter="grouped"
        )
    return KGroupedStream(
        stream._builder,
        stream.node,
        repartition=selected or agg.key_changed(stream.node),
        grouped_name=grouped.name if grouped is not None else None,
    )
