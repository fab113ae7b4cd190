"""The specs of the stateful operators, which run per task and keep task state: dedup,
the joins, the grouped tables and aggregations, suppression and the Processor API's
processors (:data:`StatefulSpec`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, ClassVar

from kspark_server.contract.parts import OperatorFields, Packed, StateOptions
from kspark_server.contract.valuetypes import KeyValue, TypeSpec, check_type
from kspark_server.contract.version import Fn, SpecError

__all__ = [
    "AggregateSpec",
    "Change",
    "CogroupInput",
    "DedupSpec",
    "FkMatchSpec",
    "FkResolveSpec",
    "FkSubscribeSpec",
    "GlobalStoreSpec",
    "JoinSpec",
    "ProcessorSpec",
    "StatefulSpec",
    "StoreSpec",
    "SuppressSpec",
    "TableGroupBySpec",
    "TableJoinSpec",
    "WindowJoinSpec",
]


@dataclasses.dataclass(frozen=True, kw_only=True)
class _Stateful(OperatorFields):
    """The fields of every stateful spec besides an operator's own: the task state's name
    (``store``), which values travel as JSON text and how the task state is kept."""

    store: str
    packed: Packed
    state: StateOptions = StateOptions()


@dataclasses.dataclass(frozen=True, kw_only=True)
class DedupSpec(_Stateful):
    """KIP-655 deduplication, per task."""

    kind: ClassVar[str] = "dedup"
    #: ``by_key``, ``by_key_value`` (by ``id_selector``) or ``by_id`` (by the ``ks_id``
    #: column of a :class:`DedupIdSpec` stage)
    mode: str
    interval_ms: int
    id_selector: Fn | None
    input: KeyValue
    versioned: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if self.mode not in ("by_key", "by_key_value", "by_id"):
            raise SpecError(f"{self.processor}: unknown deduplication mode {self.mode!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class JoinSpec(_Stateful):
    """A stream-table join, per task; the table is versioned or keeps latest values."""

    kind: ClassVar[str] = "join"
    left: bool
    versioned: bool
    history_retention_ms: int
    grace_ms: int
    joiner: Fn
    joiner_with_key: bool
    stream: KeyValue
    table: KeyValue
    output: KeyValue
    #: a global-table join: every record's table key is in ``ks_gkey`` (a stream
    #: record's from its key selector, a table update's its own key), and ``key`` is the
    #: stream record's own key, which the output keeps
    global_table: bool = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class WindowJoinSpec(_Stateful):
    """A windowed stream-stream join, per task (:mod:`kspark_server.operators.window_join`).

    ``mode`` is ``inner``, ``left`` or ``outer``. A left record at ``t1`` joins a right
    record at ``t2`` when ``t1 - before_ms <= t2 <= t1 + after_ms``; a record is late once
    the task's stream time passes its window's end plus ``grace_ms``. The right stream's
    values travel in ``ks_tvalue`` (``packed.tvalue``), as a stream-table join's table.
    """

    kind: ClassVar[str] = "windowjoin"
    mode: str
    before_ms: int
    after_ms: int
    grace_ms: int
    joiner: Fn
    joiner_with_key: bool
    left: KeyValue
    right: KeyValue
    output: KeyValue
    versioned: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if self.mode not in ("inner", "left", "outer"):
            raise SpecError(f"{self.processor}: unknown stream-stream join mode {self.mode!r}")
        if self.before_ms + self.after_ms < 0 or self.grace_ms < 0:
            raise SpecError(f"{self.processor}: invalid join windows")


@dataclasses.dataclass(frozen=True, kw_only=True)
class TableJoinSpec(_Stateful):
    """A same-key table-table join, per task (:mod:`kspark_server.operators.table_join`).

    ``mode`` is ``inner``, ``left`` or ``outer``. Both tables' updates arrive in one input,
    the right table's tagged ``ks_jside == 1`` with their value in ``ks_tvalue``; the
    operator keeps each key's latest value of both sides and of the result, and emits the
    result's changes (None: a tombstone).
    """

    kind: ClassVar[str] = "tablejoin"
    mode: str
    joiner: Fn
    joiner_with_key: bool
    left: KeyValue
    right: KeyValue
    output: KeyValue
    versioned: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if self.mode not in ("inner", "left", "outer"):
            raise SpecError(f"{self.processor}: unknown table-table join mode {self.mode!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class FkSubscribeSpec(_Stateful):
    """The first stage of a foreign-key table-table join, keyed by the left table's key
    (:mod:`kspark_server.operators.fk_subscribe`).

    Keeps each left key's foreign key and a version number, and sends subscription
    messages (``output.value``: MessagePack bytes) keyed by the foreign key (``fk``, the
    right table's key type): subscribe, unsubscribe, delete.
    """

    kind: ClassVar[str] = "fksubscribe"
    extractor: Fn
    extractor_with_key: bool
    left: KeyValue
    fk: TypeSpec
    output: KeyValue
    versioned: ClassVar[bool] = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class FkMatchSpec(_Stateful):
    """The second stage of a foreign-key join, keyed by the foreign key
    (:mod:`kspark_server.operators.fk_match`): the subscriptions (``stream``, side 0) and
    the right table's updates (side 1, their value in ``ks_tvalue``). Keeps the right
    table's values and each foreign key's subscribers, and answers each subscription and
    each right update with responses keyed by the left key (``output.value``: bytes)."""

    kind: ClassVar[str] = "fkmatch"
    stream: KeyValue
    right: KeyValue
    output: KeyValue
    versioned: ClassVar[bool] = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class FkResolveSpec(_Stateful):
    """The last stage of a foreign-key join, keyed by the left key
    (:mod:`kspark_server.operators.fk_resolve`): takes the responses of the newest
    version of each left key only, calls the joiner and keeps the result, which
    ``app.store(name)`` answers.

    ``mode`` is ``inner`` or ``left``; ``key``, ``left_value`` and ``right_value`` are
    the types the joiner's arguments decode to, the values having travelled as JSON text
    where ``left_packed`` / ``right_packed``.
    """

    kind: ClassVar[str] = "fkresolve"
    mode: str
    joiner: Fn
    joiner_with_key: bool
    key: TypeSpec
    left_value: TypeSpec
    right_value: TypeSpec
    left_packed: bool
    right_packed: bool
    input: KeyValue
    output: KeyValue
    versioned: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if self.mode not in ("inner", "left"):
            raise SpecError(f"{self.processor}: unknown foreign-key join mode {self.mode!r}")


@dataclasses.dataclass(frozen=True)
class Change:
    """A grouped table's change as it travels from the re-keying operator to the
    aggregation (Kafka Streams' ``Change``): the value to add to the record's group
    (``new``) and the value to subtract from it (``old``), either None.

    Examples
    --------
    >>> Change(new="EU", old=None)
    Change(new='EU', old=None)
    """

    new: Any
    old: Any


@dataclasses.dataclass(frozen=True, kw_only=True)
class TableGroupBySpec(_Stateful):
    """``KTable.group_by(selector)``, per task of the source table's key
    (:mod:`kspark_server.operators.table_group_by`): keeps each source key's last
    selected ``(group key, value)`` and turns each update into the :class:`Change` records
    of the groups it leaves and joins. ``output``'s value is the ``Change`` record type."""

    kind: ClassVar[str] = "tablegroupby"
    selector: Fn
    input: KeyValue
    #: the group key and the selected value's types
    selected: KeyValue
    output: KeyValue
    versioned: ClassVar[bool] = False


@dataclasses.dataclass(frozen=True, kw_only=True)
class SuppressSpec(_Stateful):
    """``KTable.suppress(Suppressed.until_time_limit(...))``, per task of the table's key
    (:mod:`kspark_server.operators.suppress`): each key's latest update waits in a buffer
    until stream time passes the time of the key's oldest buffered update plus
    ``time_limit_ms``. ``max_records`` and ``max_bytes`` bound the buffer (None:
    unbounded); ``when_full`` says what a full buffer does: ``emit`` its oldest updates
    early, or ``shut_down`` the app."""

    kind: ClassVar[str] = "suppress"
    time_limit_ms: int
    max_records: int | None = None
    max_bytes: int | None = None
    when_full: str = "emit"
    input: KeyValue
    output: KeyValue
    versioned: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if self.time_limit_ms < 0:
            raise SpecError(f"{self.processor}: the time limit must not be negative")
        for name in ("max_records", "max_bytes"):
            bound = getattr(self, name)
            if bound is not None and bound < 0:
                raise SpecError(f"{self.processor}: {name} must not be negative, got {bound}")
        if self.when_full not in ("emit", "shut_down"):
            raise SpecError(f"{self.processor}: unknown buffer-full strategy {self.when_full!r}")


@dataclasses.dataclass(frozen=True, kw_only=True)
class CogroupInput:
    """One grouped stream of a cogrouped aggregation: its values' type and the aggregator
    (``aggregator(key, value, aggregate)``) that folds them into the shared aggregate."""

    value: TypeSpec
    aggregator: Fn

    def __post_init__(self) -> None:
        check_type(self.value, "cogrouped value")


@dataclasses.dataclass(frozen=True, kw_only=True)
class AggregateSpec(_Stateful):
    """``count``, ``reduce`` or ``aggregate`` of a grouped stream, per task, optionally
    over time windows (``window_size_ms > 0``; ``sliding`` ones too) and with only final
    results per window (``suppress``: ``Suppressed.until_window_closes`` or
    ``EmitStrategy.on_window_close()``); see :mod:`kspark_server.operators.aggregate`."""

    kind: ClassVar[str] = "aggregate"
    #: ``count``, ``reduce`` or ``aggregate``
    op: str
    reducer: Fn | None = None
    initializer: Fn | None = None
    aggregator: Fn | None = None
    input: KeyValue
    output: KeyValue
    #: 0: not windowed
    window_size_ms: int = 0
    window_advance_ms: int = 0
    grace_ms: int = 0
    #: session windows of this inactivity gap (0: none); ``merger`` joins two sessions'
    #: aggregates (``aggregate``)
    session_gap_ms: int = 0
    merger: Fn | None = None
    suppress: bool = False
    #: sliding windows (KIP-450) of ``window_size_ms``, both ends included: one ends at
    #: each record, one starts just after it (``window_advance_ms`` is then the size)
    sliding: bool = False
    #: how long the store keeps a window after its start, closed or not (0: until it
    #: closes; sliding windows: until no record can read it)
    retention_ms: int = 0
    #: the input is a grouped table's changes (values :class:`Change`): ``count``,
    #: ``reduce`` and ``aggregate`` subtract each old value before they add the new one,
    #: with ``subtractor`` (``reduce``: ``subtractor(aggregate, old)``, ``aggregate``:
    #: ``subtractor(key, old, aggregate)``)
    table: bool = False
    subtractor: Fn | None = None
    #: a cogrouped aggregation (KIP-150): its inputs, in order. Record ``i`` of the
    #: operator's input names its grouped stream in column ``ks_input``; input 0's value is
    #: in ``value``, input ``j``'s (``j > 0``) in ``ks_value<j>``. ``aggregator`` and
    #: ``input.value`` are input 0's.
    cogroup: tuple[CogroupInput, ...] = ()
    versioned: ClassVar[bool] = False

    def __post_init__(self) -> None:
        if self.cogroup and (
            self.op != "aggregate"
            or self.table
            or self.packed.value
            or self.aggregator is not self.cogroup[0].aggregator
        ):
            raise SpecError(
                f"{self.processor}: a cogrouped aggregation is an aggregate of streams, its "
                "first input's aggregator its own, its values unpacked"
            )
        if self.table and (self.window_size_ms or self.session_gap_ms or self.suppress):
            raise SpecError(f"{self.processor}: a grouped table aggregates without windows")
        if (self.table and self.op != "count") != (self.subtractor is not None):
            raise SpecError(
                f"{self.processor}: a subtractor goes with reduce and aggregate of a grouped table"
            )
        if self.session_gap_ms < 0 or (self.session_gap_ms > 0 and self.window_size_ms > 0):
            raise SpecError(f"{self.processor}: time windows or session windows, not both")
        if self.session_gap_ms > 0 and (
            self.suppress or (self.op == "aggregate") != (self.merger is not None)
        ):
            raise SpecError(
                f"{self.processor}: session windows take a merger with aggregate, and no "
                "suppression"
            )
        if self.op not in ("count", "reduce", "aggregate"):
            raise SpecError(f"{self.processor}: unknown aggregation {self.op!r}")
        if (self.op == "reduce") != (self.reducer is not None):
            raise SpecError(f"{self.processor}: a reducer goes with reduce")
        if (self.op == "aggregate") != (
            self.initializer is not None and self.aggregator is not None
        ):
            raise SpecError(f"{self.processor}: an initializer and aggregator go with aggregate")
        if self.window_size_ms < 0 or (
            self.window_size_ms > 0 and not 0 < self.window_advance_ms <= self.window_size_ms
        ):
            raise SpecError(
                f"{self.processor}: windows need 0 < advance <= size, got size "
                f"{self.window_size_ms} and advance {self.window_advance_ms}"
            )
        if self.retention_ms and (
            self.retention_ms < 0 or (self.window_size_ms == 0 and self.session_gap_ms == 0)
        ):
            raise SpecError(f"{self.processor}: a retention goes with windows")
        if self.sliding and (self.window_size_ms == 0 or self.table):
            raise SpecError(f"{self.processor}: sliding windows need a size, and a stream")
        if self.suppress and self.window_size_ms == 0:
            raise SpecError(f"{self.processor}: suppression needs windows")


@dataclasses.dataclass(frozen=True, kw_only=True)
class StoreSpec:
    """A state store of a user processor: ``kind`` is ``key_value``, ``versioned`` or
    ``window``; ``key`` and ``value`` its types."""

    name: str
    kind: str
    key: TypeSpec
    value: TypeSpec
    logging: bool = True
    history_retention_ms: int = 0
    retention_ms: int = 0
    window_size_ms: int = 0
    retain_duplicates: bool = False

    def __post_init__(self) -> None:
        if self.kind not in ("key_value", "versioned", "window"):
            raise SpecError(f"store {self.name}: unknown store kind {self.kind!r}")
        check_type(self.key, f"store {self.name} key")
        check_type(self.value, f"store {self.name} value")


@dataclasses.dataclass(frozen=True, kw_only=True)
class GlobalStoreSpec:
    """A global store a user processor reads (``StreamsBuilder.add_global_store``): its
    name, key and value types, and the processor that applies its topic's records
    (``update_supplier``; None puts each record, and deletes on a null value). The
    topic's records reach every task of the processor (``ks_jside`` 1, the key in
    ``ks_gkey``, the value in ``ks_tvalue``)."""

    name: str
    key: TypeSpec
    value: TypeSpec
    update_supplier: Fn | None = None
    #: the name of the store's source processor (errors of the update processor name it)
    source: str = ""

    def __post_init__(self) -> None:
        check_type(self.key, f"global store {self.name} key")
        check_type(self.value, f"global store {self.name} value")


@dataclasses.dataclass(frozen=True, kw_only=True)
class ProcessorSpec(_Stateful):
    """A user processor of the Processor API (``KStream.process``), per task
    (:mod:`kspark_server.operators.processor`). ``supplier()`` makes one processor per task and
    micro-batch; ``fixed_key``: a ``FixedKeyProcessor`` (``process_values``). ``store``
    names the task state that holds all of ``stores`` (and the punctuation schedule)."""

    kind: ClassVar[str] = "processor"
    supplier: Fn
    fixed_key: bool
    stores: tuple[StoreSpec, ...] = ()
    application_id: str = ""
    input: KeyValue
    output: KeyValue
    global_store: GlobalStoreSpec | None = None
    versioned: ClassVar[bool] = False


StatefulSpec = (
    DedupSpec
    | JoinSpec
    | WindowJoinSpec
    | AggregateSpec
    | TableJoinSpec
    | TableGroupBySpec
    | SuppressSpec
    | FkSubscribeSpec
    | FkMatchSpec
    | FkResolveSpec
    | ProcessorSpec
)
