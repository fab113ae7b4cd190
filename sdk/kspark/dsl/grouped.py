"""Grouping, aggregation and windows: ``KGroupedStream``, ``TimeWindowedKStream``,
``SlidingWindowedKStream``, ``Grouped``, ``TimeWindows``, ``SlidingWindows``,
``EmitStrategy``, ``Suppressed``.

``KStream.group_by_key()`` and ``KStream.group_by(selector)`` group a stream;
``count()``, ``reduce()`` and ``aggregate()`` turn it into a table whose value per key is
the aggregate so far. ``windowed_by(TimeWindows...)`` aggregates per time window
instead, into a table keyed by ``Windowed[K]``.

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

import attrs

from kspark.dsl import _infer
from kspark.dsl.options import Materialized, Named, factory, optional_name
from kspark.dsl.suppressed import BufferConfig, Suppressed
from kspark.dsl.windows import EmitStrategy, SessionWindows, SlidingWindows, TimeWindows
from kspark.errors import InvalidArgumentError
from kspark.plan import graph
from kspark.plan import nodes as n
from kspark.plan.grouped import (
    Aggregate,
    SessionWindowsDef,
    SlidingWindowsDef,
    TableGroupBy,
    TimeWindowsDef,
    windowed_type,
)
from kspark.plan.types import DYNAMIC, describe_type
from kspark_server.windows import Windowed

if TYPE_CHECKING:
    from kspark.dsl.cogroup import CogroupedKStream
    from kspark.dsl.streams import KStream, KTable, StreamsBuilder

__all__ = [
    "BufferConfig",
    "EmitStrategy",
    "Grouped",
    "KGroupedStream",
    "KGroupedTable",
    "SessionWindowedKStream",
    "SessionWindows",
    "SlidingWindowedKStream",
    "SlidingWindows",
    "Suppressed",
    "TimeWindowedKStream",
    "TimeWindows",
]

K = TypeVar("K")
V = TypeVar("V")
VA = TypeVar("VA")
KT = TypeVar("KT")

_INT = describe_type(int)


@attrs.frozen(kw_only=True)
class Grouped:
    """Options of ``group_by_key`` and ``group_by``: the grouping's name (in Kafka
    Streams, its repartition topic's).

    Examples
    --------
    >>> Grouped.as_("by-user")
    Grouped(name='by-user')
    """

    name: str | None = optional_name("name")

    @factory
    def as_(self, name: str) -> Grouped:
        """A ``Grouped`` named ``name``.

        Examples
        --------
        >>> Grouped.as_("by-user").name
        'by-user'
        """
        return attrs.evolve(self, name=name)

    @factory
    def with_name(self, name: str) -> Grouped:
        """A copy named ``name``.

        Examples
        --------
        >>> Grouped().with_name("g").name
        'g'
        """
        return attrs.evolve(self, name=name)


def _store(builder: StreamsBuilder, materialized: Materialized | None, prefix: str) -> str:
    if materialized is not None and not isinstance(materialized, Materialized):
        raise InvalidArgumentError(
            f"materialized must be a Materialized, got {materialized!r}", parameter="materialized"
        )
    if materialized is not None and materialized.versioned:
        raise InvalidArgumentError(
            f"{prefix}: an aggregation's table keeps its latest value per key; "
            "Materialized.as_versioned is not supported here, use Materialized.as_(name)",
            parameter="materialized",
        )
    if materialized is not None and materialized.store_name:
        return materialized.store_name
    return builder._store_name(prefix)


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

        # Kafka Streams names the store before the processor
        store = _store(self._builder, materialized, prefix)
        name, seq = self._builder._next(prefix, named)
        for what, fn in fns.items():
            _infer.check_callable(fn, what, name)
        key = self._node.key_type or DYNAMIC
        node = Aggregate(
            name=name,
            seq=seq,
            parent=self._node,
            op=op,
            store_name=store,
            windows=self._windows,
            emit_on_close=self._emit_on_close,
            retention_ms=0 if materialized is None else materialized.retention_ms,
            repartition=self._repartition,
            grouped_name=self._grouped_name,
            key_type=windowed_type(key) if self._windows is not None else key,
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
        from kspark.dsl.cogroup import start

        cogrouped: CogroupedKStream[K, VA] = start(self, aggregator)
        return cogrouped

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
        repartition=selected or _key_changed(stream.node),
        grouped_name=grouped.name if grouped is not None else None,
    )


def _key_changed(node: n.Node) -> bool:
    """Whether a key-changing step comes after the last repartition, keyed stateful
    operator or source upstream: Kafka Streams then groups through a repartition topic, so
    a new sub-topology starts."""

    def changes_key(cur: n.Node) -> bool:
        # a deduplication by id: its records are partitioned by id, not by key
        return cur.changes_key or (isinstance(cur, n.Deduplicate) and cur.repartitions)

    def grouped_by_key(cur: n.Node) -> bool:
        # a join or a deduplication by key has its input grouped by the key already
        return cur.repartitions or cur.stateful or isinstance(cur, n.Source | n.TableSource)

    found = graph.find([node], lambda cur: cur.parents, changes_key, stop_at=grouped_by_key)
    return found is not None


class KGroupedTable(Generic[K, V]):
    """A table re-grouped by a new key, ready to aggregate (Kafka Streams'
    ``KGroupedTable``). Made by :meth:`KTable.group_by`.

    Each update of the source table moves its row between groups: the aggregation takes
    the old value out of the group it leaves (the subtractor) before it adds the new value
    to the group it joins (the adder), as Kafka Streams' ``KTableAggregate`` does. The
    result is a table keyed by the group (see docs/aggregations.md, which lists what each
    change emits).

    Examples
    --------
    >>> from kspark import StreamsBuilder
    >>> b = StreamsBuilder()
    >>> regions = b.table("customers", key_type=str, value_type=str)
    >>> per_region = regions.group_by(lambda k, region: (region, k), key_type=str, value_type=str)
    >>> per_region.count().node.key_type.display()
    'str'
    """

    __slots__ = ("_builder", "_node")

    def __init__(self, builder: StreamsBuilder, node: TableGroupBy) -> None:
        self._builder = builder
        self._node = node
        builder._added(node)

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

        store = _store(self._builder, materialized, prefix)
        name, seq = self._builder._next(prefix, named)
        for what, fn in fns.items():
            _infer.check_callable(fn, what, name)
        node = Aggregate(
            name=name,
            seq=seq,
            parent=self._node,
            op=op,
            store_name=store,
            repartition=True,
            grouped_name=self._node.grouped_name,
            key_type=self._node.key_type or DYNAMIC,
            value_type=value_type,
            **fns,
        )
        return KTable(self._builder, node)

    def count(
        self, named: Named | None = None, materialized: Materialized | None = None
    ) -> KTable[K, int]:
        """The number of source rows in each group, as a table.

        A row that moves to another group counts one less in the old group and one more
        in the new; a group whose rows all left keeps the count 0 (Kafka Streams removes
        no row either).

        Parameters
        ----------
        named
            The processor's name instead of ``KTABLE-AGGREGATE-<n>``.
        materialized
            The store's name (``Materialized.as_(name)``), which ``app.store(name)`` reads.

        Returns
        -------
        KTable
            Each group's count; per micro-batch, the latest count of every group that
            changed.

        Examples
        --------
        >>> from kspark import Materialized, StreamsBuilder
        >>> b = StreamsBuilder()
        >>> customers = b.table("customers", key_type=str, value_type=str)
        >>> per_region = customers.group_by(
        ...     lambda k, region: (region, region), key_type=str, value_type=str
        ... ).count(materialized=Materialized.as_("customers-per-region"))
        >>> per_region.to_stream().to("region-counts")
        >>> print(b.build().describe())  # doctest: +NORMALIZE_WHITESPACE
        Topologies:
           Sub-topology: 0
            Source: KTABLE-SOURCE-0000000000 (topics: [customers])
              --> KTABLE-SELECT-0000000002
            Processor: KTABLE-SELECT-0000000002 (stores: [KTABLE-SELECT-0000000002-STATE-STORE]) [operator: kspark task operator (per-task state)]
              --> KTABLE-AGGREGATE-0000000003
              <-- KTABLE-SOURCE-0000000000
           Sub-topology: 1
            Processor: KTABLE-AGGREGATE-0000000003 (stores: [customers-per-region]) [operator: kspark task operator (per-task state)]
              --> KTABLE-TOSTREAM-0000000004
              <-- KTABLE-SELECT-0000000002
            Processor: KTABLE-TOSTREAM-0000000004 (stores: [])
              --> KSTREAM-SINK-0000000005
              <-- KTABLE-AGGREGATE-0000000003
            Sink: KSTREAM-SINK-0000000005 (topic: region-counts)
              <-- KTABLE-TOSTREAM-0000000004
        """
        return self._table("count", "KTABLE-AGGREGATE", named, materialized, value_type=_INT)

    def reduce(
        self,
        adder: Callable[[V, V], V],
        subtractor: Callable[[V, V], V],
        named: Named | None = None,
        materialized: Materialized | None = None,
    ) -> KTable[K, V]:
        """Combines each group's values: ``adder(aggregate, new)`` adds a row's new value,
        ``subtractor(aggregate, old)`` takes its old value out; a group's first value is
        its aggregate as it comes.

        Both run per change on the server, guarded by the processing exception handler.
        A None result deletes the group's row (a tombstone).

        Parameters
        ----------
        adder, subtractor
            Functions of the aggregate and a value, returning the new aggregate.
        named, materialized
            The processor's and the store's names.

        Returns
        -------
        KTable
            Each group's aggregate, keyed by the group.

        Examples
        --------
        >>> from kspark import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> balances = b.table("balances", key_type=str, value_type=int)
        >>> totals = balances.group_by(
        ...     lambda account, amount: (account[:2], amount), key_type=str, value_type=int
        ... ).reduce(lambda total, v: total + v, lambda total, v: total - v)
        >>> totals.name, totals.node.value_type.display()
        ('KTABLE-REDUCE-0000000004', 'int')
        """
        return self._table(
            "reduce",
            "KTABLE-REDUCE",
            named,
            materialized,
            value_type=self._node.value_type,
            reducer=adder,
            subtractor=subtractor,
        )

    def aggregate(
        self,
        initializer: Callable[[], VA],
        adder: Callable[[K, V, VA], VA],
        subtractor: Callable[[K, V, VA], VA],
        named: Named | None = None,
        materialized: Materialized | None = None,
        *,
        value_type: type[VA] | None = None,
    ) -> KTable[K, VA]:
        """Folds each group's values: ``initializer()`` starts a group's aggregate,
        ``adder(key, new, aggregate)`` adds a row's new value and
        ``subtractor(key, old, aggregate)`` takes its old value out (``key``: the group).

        Parameters
        ----------
        initializer
            The aggregate of a group before its first value.
        adder, subtractor
            Functions of the group key, a value and the aggregate, returning the new
            aggregate; a None result deletes the group's row.
        named, materialized
            The processor's and the store's names.
        value_type
            The aggregate's type, when the functions' annotations do not say it.

        Returns
        -------
        KTable
            Each group's aggregate, keyed by the group.

        Examples
        --------
        >>> from kspark import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> names = b.table("names", key_type=str, value_type=str)
        >>> letters = names.group_by(
        ...     lambda k, name: (name[:1], name), key_type=str, value_type=str
        ... ).aggregate(
        ...     lambda: 0,
        ...     lambda k, name, total: total + len(name),
        ...     lambda k, name, total: total - len(name),
        ...     value_type=int,
        ... )
        >>> letters.name, letters.node.value_type.display()
        ('KTABLE-AGGREGATE-0000000004', 'int')
        """
        hint = _infer.return_hint(adder) or _infer.return_hint(initializer)
        prefix = "KTABLE-AGGREGATE"
        return self._table(
            "aggregate",
            prefix,
            named,
            materialized,
            value_type=_infer.resolve(value_type, hint, prefix, "value_type"),
            initializer=initializer,
            aggregator=adder,
            subtractor=subtractor,
        )


def group_table(
    table: KTable[Any, Any],
    selector: Callable[..., Any],
    grouped: Grouped | None,
    key_type: Any,
    value_type: Any,
) -> KGroupedTable[Any, Any]:
    """The grouped table of ``table`` re-keyed by ``selector`` (``KTable.group_by``)."""
    if grouped is not None and not isinstance(grouped, Grouped):
        raise InvalidArgumentError(
            f"grouped must be a Grouped, got {grouped!r}", parameter="grouped"
        )
    builder = table._builder
    name, seq = builder._next("KTABLE-SELECT", grouped.name if grouped is not None else None)
    _infer.check_callable(selector, "selector", name)
    hk, hv = _infer.pair_hints(_infer.return_hint(selector))
    node = TableGroupBy(
        name=name,
        seq=seq,
        parent=table.node,
        selector=selector,
        store_name=f"{name}-STATE-STORE",
        grouped_name=grouped.name if grouped is not None else None,
        key_type=_infer.resolve(key_type, hk, name, "key_type"),
        value_type=_infer.resolve(value_type, hv, name, "value_type"),
    )
    return KGroupedTable(builder, node)
