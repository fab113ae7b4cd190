"""Plan nodes of grouping and aggregation: :class:`Aggregate` (``count``, ``reduce``,
``aggregate``, windowed or not), :class:`CogroupAggregate` with its
:class:`CogroupInput` nodes (``cogroup(...).aggregate``) and :class:`Suppress` (final
results of windows).

A grouped stream is no node of its own: ``group_by_key()`` and ``group_by()`` only say
how the next aggregation groups (``group_by`` adds a key-selecting step before it), as in
Kafka Streams, where ``KGroupedStream`` adds no processor either.

Examples
--------
>>> from kspark.plan.types import describe_type
>>> windowed_type(describe_type(str)).display()
'Windowed'
>>> TimeWindowsDef(size_ms=60_000, advance_ms=60_000, grace_ms=0).retention_ms
60000
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, ClassVar

import attrs

from kspark.errors import InvalidArgumentError, InvalidTopologyError
from kspark.plan.nodes import Node, Source, _OneStore, _Unary
from kspark.plan.types import Field, Primitive, Record, TypeDesc
from kspark_server.spec import Change
from kspark_server.windows import Window, Windowed

__all__ = [
    "Aggregate",
    "CogroupAggregate",
    "CogroupInput",
    "RegroupedSource",
    "SessionWindowsDef",
    "SlidingWindowsDef",
    "Suppress",
    "TableGroupBy",
    "TimeWindowsDef",
    "change_type",
    "windowed_type",
]

Fn = Callable[..., Any]

#: What each aggregation compiles to (``describe()`` shows it).
OPERATOR = "kspark task operator (per-task state)"


@attrs.frozen(kw_only=True)
class TimeWindowsDef:
    """Tumbling (``advance_ms == size_ms``) or hopping time windows, with a grace period
    for out-of-order records. ``kspark.TimeWindows`` makes them, and checks that each
    duration is positive (the grace period: not negative)."""

    size_ms: int
    advance_ms: int
    grace_ms: int

    def __attrs_post_init__(self) -> None:
        if not 0 < self.advance_ms <= self.size_ms:
            raise InvalidArgumentError(
                f"a window advance must be positive and at most the size ({self.size_ms} ms), "
                f"got {self.advance_ms} ms",
                parameter="advance",
            )

    @property
    def retention_ms(self) -> int:
        """How long a window stays in the store after it starts: size plus grace."""
        return self.size_ms + self.grace_ms


@attrs.frozen(kw_only=True)
class SessionWindowsDef:
    """Session windows: a key's records less than ``gap_ms`` apart share a session.
    ``kspark.SessionWindows`` makes them, and checks the gap (positive) and the grace
    period (not negative)."""

    gap_ms: int
    grace_ms: int

    @property
    def retention_ms(self) -> int:
        """How long a session stays in the store after its end: gap plus grace (a record
        up to a gap later may still extend it, until stream time passes that plus grace)."""
        return self.gap_ms + self.grace_ms


@attrs.frozen(kw_only=True)
class SlidingWindowsDef:
    """Sliding windows (KIP-450): windows of ``size_ms`` with both ends included, one
    ending at each record and one starting just after it, only where records are.
    ``kspark.SlidingWindows`` makes them, and checks the time difference (positive) and
    the grace period (not negative)."""

    size_ms: int
    grace_ms: int

    @property
    def retention_ms(self) -> int:
        """How long the store keeps a window after it starts: twice the time difference
        plus grace, as Kafka Streams' sliding windows' store (a later record's new
        windows are built from the windows before it)."""
        return 2 * self.size_ms + self.grace_ms


_LONG = Primitive(py=int, spark="long")
_WINDOW = Record(
    cls=Window, fields=(Field(name="start", type=_LONG), Field(name="end", type=_LONG))
)


def windowed_type(key: TypeDesc) -> Record:
    """The type of a windowed table's key: ``Windowed`` of ``key``, a struct
    ``key, window: {start, end}``."""
    return Record(
        cls=Windowed, fields=(Field(name="key", type=key), Field(name="window", type=_WINDOW))
    )


def change_type(value: TypeDesc) -> Record:
    """The type of a grouped table's records between its two operators: ``Change`` of
    ``value``, a struct ``new, old``."""
    return Record(cls=Change, fields=(Field(name="new", type=value), Field(name="old", type=value)))


@attrs.frozen(kw_only=True)
class TableGroupBy(_OneStore, _Unary):
    """``KTable.group_by(selector)``: each update of the parent table, re-keyed by
    ``selector(key, value) -> (group key, value)``, as the changes of the groups it leaves
    and joins (Kafka Streams' ``KTableRepartitionMap``). ``key_type`` and ``value_type``
    are the selected pair's; the operator keeps each source key's selection in
    ``store_name`` (kspark_server.operators.table_group_by). Only an aggregation
    (:class:`Aggregate`, with a subtractor) reads it."""

    changes_key: ClassVar[bool] = True
    changes_value: ClassVar[bool] = True

    selector: Fn
    store_name: str
    #: the name ``Grouped.as_`` gave the grouping (Kafka's repartition topic name)
    grouped_name: str | None = None

    @property
    def operator(self) -> str:
        return OPERATOR


@attrs.frozen(kw_only=True)
class RegroupedSource(Source):
    """The changes of a :class:`TableGroupBy` read back from the internal topic it writes
    to when the topology is cut into sub-topologies (:mod:`kspark.compiler.subtopologies`),
    as Kafka Streams' aggregation reads the subtract/add pairs of a re-grouped table from
    its repartition topic. ``key_type`` and ``value_type`` are the selected pair's, as the
    grouping's; each record is a :func:`change_type` of the value."""


@attrs.frozen(kw_only=True)
class Aggregate(_OneStore, _Unary):
    """``count``, ``reduce(reducer)`` or ``aggregate(initializer, aggregator)`` of the
    records grouped by key, into a table; per time window when ``windows`` is set (the
    table's key is then ``Windowed``). The grouped streams of :mod:`kspark.dsl.grouped`
    give each ``op`` its functions (the operator's spec checks them again)."""

    changes_value: ClassVar[bool] = True

    op: str
    reducer: Fn | None = None
    initializer: Fn | None = None
    aggregator: Fn | None = None
    #: joins two sessions' aggregates (``aggregate`` over session windows)
    merger: Fn | None = None
    #: takes an old value out of a grouped table's aggregate (``reduce``, ``aggregate``)
    subtractor: Fn | None = None
    store_name: str
    windows: TimeWindowsDef | SessionWindowsDef | SlidingWindowsDef | None = None
    #: ``EmitStrategy.on_window_close()``: each window's final result once, when stream
    #: time passes its end plus grace (KIP-825), instead of every update
    emit_on_close: bool = False
    #: ``Materialized.with_retention``: how long the store keeps a window after its start
    #: (a session: after its end), closed or not (0: until it closes, or for sliding
    #: windows until no record can read it)
    retention_ms: int = 0
    #: whether Kafka Streams would read the grouped records from a repartition topic
    #: (``group_by``, or a key changed upstream): a new sub-topology starts here
    repartition: bool = False
    #: the name ``Grouped.as_`` gave the grouping (Kafka's repartition topic name)
    grouped_name: str | None = None
    #: a table made by an aggregation keeps the latest value per key
    versioned: ClassVar[bool] = False
    history_retention_ms: ClassVar[int] = 0

    def __attrs_post_init__(self) -> None:
        grouped_table = isinstance(self.parent, TableGroupBy | RegroupedSource)
        if grouped_table and self.windows is not None:
            raise InvalidTopologyError(
                f"{self.name}: a grouped table aggregates without windows",
                processor=self.name,
            )
        if (grouped_table and self.op != "count") != (self.subtractor is not None):
            raise InvalidTopologyError(
                f"{self.name}: a subtractor goes with reduce and aggregate of a grouped table",
                processor=self.name,
            )
        if self.emit_on_close and not isinstance(self.windows, TimeWindowsDef | SlidingWindowsDef):
            raise InvalidTopologyError(
                f"{self.name}: EmitStrategy.on_window_close() needs time or sliding windows",
                processor=self.name,
            )

        self._check_retention()

    def _check_retention(self) -> None:
        """Refuse ``Materialized.with_retention`` without windows, or shorter than the
        windows need (Kafka Streams refuses both too)."""
        if not self.retention_ms:
            return
        w = self.windows
        if w is None:
            raise InvalidTopologyError(
                f"{self.name}: Materialized.with_retention needs time, sliding or session windows",
                processor=self.name,
            )
        if self.retention_ms < w.retention_ms:
            what = (
                "size plus grace"
                if isinstance(w, TimeWindowsDef)
                else "inactivity gap plus grace"
                if isinstance(w, SessionWindowsDef)
                else "twice the time difference plus grace"
            )
            raise InvalidTopologyError(
                f"{self.name}: the retention of store {self.store_name!r} "
                f"({self.retention_ms} ms) must be at least {w.retention_ms} ms (the windows' "
                f"{what}); give Materialized.with_retention a longer one",
                processor=self.name,
            )

    @property
    def grouped_table(self) -> bool:
        """Whether the records are a grouped table's changes (``KTable.group_by``)."""
        return isinstance(self.parent, TableGroupBy | RegroupedSource)

    @property
    def repartitions(self) -> bool:
        return self.repartition

    @property
    def operator(self) -> str:
        """What the aggregation compiles to: the operator, and for sliding windows or
        ``EmitStrategy.on_window_close()`` what it emits."""
        notes = []
        if isinstance(self.windows, SlidingWindowsDef):
            w = self.windows
            notes.append(f"sliding windows of {w.size_ms} ms, grace {w.grace_ms} ms")
        if self.emit_on_close:
            notes.append("emits on window close")
        return OPERATOR if not notes else f"{OPERATOR}; {'; '.join(notes)}"


@attrs.frozen(kw_only=True)
class CogroupInput(_Unary):
    """One grouped stream of a cogrouped aggregation (Kafka Streams'
    ``COGROUPKSTREAM-AGGREGATE`` processor of that input): its records go into the
    aggregation's one store through ``aggregator(key, value, aggregate)``. It compiles to
    nothing of its own: :class:`CogroupAggregate` reads its parent, tagged with
    ``index``. ``describe()`` lists the shared store here, as Kafka Streams does."""

    index: int
    aggregator: Fn
    store_name: str
    #: whether Kafka Streams would read this input from a repartition topic
    repartition: bool = False
    grouped_name: str | None = None

    @property
    def repartitions(self) -> bool:
        return self.repartition

    def shown_stores(self) -> tuple[str, ...]:
        return (self.store_name,)

    @property
    def operator(self) -> str:
        return "fused into the cogrouped aggregation"


@attrs.frozen(kw_only=True)
class CogroupAggregate(Aggregate):
    """``cogroup(...).aggregate(initializer)``: one aggregation of several grouped
    streams (KIP-150), each folded in by its own :class:`CogroupInput`'s aggregator, into
    one store and one table (Kafka Streams' ``COGROUPKSTREAM-MERGE`` processor). ``parent``
    is the first input, ``more`` the others, in the order they were cogrouped."""

    more: tuple[CogroupInput, ...] = ()

    def __attrs_post_init__(self) -> None:
        inputs = self.inputs
        if not all(isinstance(i, CogroupInput) for i in inputs) or [
            i.index for i in inputs
        ] != list(range(len(inputs))):
            raise InvalidTopologyError(
                f"{self.name}: a cogrouped aggregation reads its CogroupInput nodes, in order",
                processor=self.name,
            )
        if self.op != "aggregate" or self.initializer is None:
            raise InvalidTopologyError(
                f"{self.name}: a cogrouped aggregation takes an initializer",
                processor=self.name,
            )
        self._check_retention()

    @property
    def inputs(self) -> tuple[CogroupInput, ...]:
        """The grouped streams' nodes, in order."""
        first = self.parent
        assert isinstance(first, CogroupInput)  # checked when made
        return (first, *self.more)

    @property
    def parents(self) -> tuple[Node, ...]:
        return (self.parent, *self.more)

    def shown_stores(self) -> tuple[str, ...]:
        return ()

    @property
    def repartitions(self) -> bool:
        return False


@attrs.frozen(kw_only=True)
class Suppress(_Unary):
    """``suppress(Suppressed.until_window_closes(...))``: a windowed aggregation's final
    result per window only, once stream time passes the window's end plus its grace.

    It runs inside the aggregation's own operator (no second store): the windows it
    holds back are the aggregation's entries, which stay until they close anyway.
    """

    #: the name ``Suppressed.with_name`` gave (Kafka's buffer name)
    suppress_name: str | None = None

    def __attrs_post_init__(self) -> None:
        parent = self.parent
        if not isinstance(parent, Aggregate) or not isinstance(
            parent.windows, TimeWindowsDef | SlidingWindowsDef
        ):
            raise InvalidTopologyError(
                f"{self.name}: Suppressed.until_window_closes needs the table of a windowed "
                "aggregation over TimeWindows or SlidingWindows "
                "(group_by_key().windowed_by(...).count() and the like)",
                processor=self.name,
            )

    @property
    def operator(self) -> str:
        return "fused into " + self.parent.name
