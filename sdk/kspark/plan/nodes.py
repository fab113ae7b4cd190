"""The plan IR: immutable nodes of a topology's logical plan.

Nodes are frozen attrs classes. Each one names its parents, so a topology is the DAG
reachable from its sinks. Nodes validate themselves on construction, so an invalid plan
cannot exist. This module never imports pyspark.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from datetime import timedelta
from typing import Any, ClassVar

import attrs

from kspark.errors import InvalidArgumentError, InvalidTopologyError
from kspark.plan.topics import PATTERN_OPTION, Topic, TopicSpec
from kspark.plan.types import Dynamic, TypeDesc

__all__ = [
    "PATTERN_OPTION",
    "Branch",
    "DedupMode",
    "Deduplicate",
    "DynamicSink",
    "Filter",
    "FilterExpr",
    "FlatMap",
    "FlatMapValues",
    "Foreach",
    "ForeignKeyJoin",
    "GlobalTableSource",
    "Map",
    "MapValues",
    "Merge",
    "Node",
    "Peek",
    "Print",
    "Repartition",
    "SelectKey",
    "Sink",
    "Source",
    "StreamGlobalTableJoin",
    "StreamStreamJoin",
    "StreamTableJoin",
    "TableFilter",
    "TableMapValues",
    "TableSource",
    "TableTableJoin",
    "ToStream",
    "ToTable",
    "Topic",
    "TopicSpec",
]

Fn = Callable[..., Any]


def _check_name(name: str) -> None:
    if not name or not name.strip():
        raise InvalidArgumentError("a processor name must not be empty", parameter="name")


@attrs.frozen(kw_only=True)
class Node:
    """Base of all plan nodes: a processor with a unique, deterministic name.

    What the compiler and ``describe()`` need to know about a processor is said by the
    node itself (as Kafka Streams' ``GraphNode`` does): :attr:`changes_key`,
    :attr:`changes_value`, :attr:`repartitions` and :attr:`stateful`.
    """

    #: whether the processor may give a record a new key (``isKeyChangingOperation``)
    changes_key: ClassVar[bool] = False
    #: whether the processor may give a record a new value, so the value's type comes from it
    changes_value: ClassVar[bool] = False

    name: str = attrs.field(validator=lambda _i, _a, v: _check_name(v))
    key_type: TypeDesc | None
    value_type: TypeDesc | None
    #: creation order in the builder; parents always have a lower ``seq``
    seq: int = 0

    @property
    def parents(self) -> tuple[Node, ...]:
        return ()

    @property
    def kind(self) -> str:
        """A short label for ``describe()``."""
        return type(self).__name__

    def stores(self) -> tuple[str, ...]:
        """Names of the state stores this processor owns."""
        return ()

    def shown_stores(self) -> tuple[str, ...]:
        """The stores ``describe()`` lists for this processor: those it owns, or, for
        processors that share one (a cogrouped aggregation's), where Kafka Streams lists
        it."""
        return self.stores()

    @property
    def stateful(self) -> bool:
        """Whether the processor owns a state store."""
        return bool(self.stores())

    @property
    def repartitions(self) -> bool:
        """Whether the processor reads from a repartition topic, so it starts a new
        sub-topology (a shuffle by key, or by id for ``deduplicate``)."""
        return False


def _check_topic_name(_inst: object, _attr: object, value: Any) -> None:
    if not isinstance(value, str) or not value.strip():
        raise InvalidArgumentError(
            f"a topic name must be a non-empty str, got {value!r}", parameter="topic"
        )


@attrs.frozen(kw_only=True)
class _TopicNode(Node):
    """A source or sink: it names a topic, and may bind the name to a :class:`Topic`.

    An unbound name (``topic`` None) is bound when the app starts, by
    :func:`kspark.bindings.bind_topology` from the app's :class:`~kspark.StreamsConfig`.
    """

    #: the topic's name in the topology; ``describe()`` and the test driver use it
    topic_name: str = attrs.field(validator=_check_topic_name)
    #: where the topic lives, if the topology says so (``stream(Topic.jsonl(...))``)
    topic: TopicSpec | None = None


@attrs.frozen(kw_only=True)
class Source(_TopicNode):
    """A stream read from one topic, from several (``more_topics``), or from every topic
    whose name matches a regular expression (``pattern``: ``topic_name`` is the
    expression, matched against whole names as Kafka's pattern subscription does)."""

    #: the further topics of a source of several (``stream(["a", "b"])``): their names,
    #: each with its ``Topic`` where the topology binds it
    more_topics: tuple[tuple[str, TopicSpec | None], ...] = ()
    pattern: bool = False

    def topic_parts(self) -> tuple[tuple[str, TopicSpec | None], ...]:
        """Each topic of the source, as its name and its ``Topic`` (None if unbound)."""
        return ((self.topic_name, self.topic), *self.more_topics)


@attrs.frozen(kw_only=True)
class TableSource(_TopicNode):
    """A KTable read from a topic's changelog; ``store_name`` is its materialized store.

    The store lives in the operator that reads it (a stream-table join), which lists it.
    """

    store_name: str
    versioned: bool = False
    history_retention_ms: int = 0


@attrs.frozen(kw_only=True)
class GlobalTableSource(TableSource):
    """A global table (``StreamsBuilder.global_table``): a table that a stream joins on a
    key its key selector picks from each record, with no co-partitioning; only
    :class:`StreamGlobalTableJoin` reads it. Latest values only."""

    def __attrs_post_init__(self) -> None:
        if self.versioned:
            raise InvalidTopologyError(
                f"{self.name}: a global table keeps the latest value per key; materialize "
                "it with Materialized.as_(name), or join a versioned KTable instead",
                processor=self.name,
            )


class _OneStore:
    """A node that owns one store, ``store_name`` (first among the node's bases, so that
    its :meth:`stores` is the one used)."""

    __slots__ = ()
    store_name: str

    def stores(self) -> tuple[str, ...]:
        return (self.store_name,)


@attrs.frozen(kw_only=True)
class _Unary(Node):
    parent: Node

    @property
    def parents(self) -> tuple[Node, ...]:
        return (self.parent,)


@attrs.frozen(kw_only=True)
class Filter(_Unary):
    """Keeps records for which ``fn(key, value)`` is true (false when ``negate``); with
    ``vectorized``, ``fn(values)`` takes a batch's values as a ``pyarrow.Array`` and
    returns as many booleans."""

    fn: Fn
    negate: bool = False
    vectorized: bool = False


@attrs.frozen(kw_only=True)
class FilterExpr(_Unary):
    """Keeps records for which the Spark SQL ``condition`` is true, evaluated in the JVM
    over the value's fields (``KStream.filter_expr``); a false or null answer drops the
    record."""

    condition: str = attrs.field()

    @condition.validator
    def _check_condition(self, _attr: object, value: Any) -> None:
        if not isinstance(value, str) or not value.strip():
            raise InvalidArgumentError(
                f"{self.name}: filter_expr needs a Spark SQL condition as a non-empty str, "
                f"got {value!r}",
                processor=self.name,
                parameter="condition",
            )

    def __attrs_post_init__(self) -> None:
        # the JVM sees a declared value's columns; dynamic values are JSON text
        if self.value_type is None or isinstance(self.value_type, Dynamic):
            raise InvalidArgumentError(
                f"{self.name}: filter_expr needs a declared value type (a record type's "
                "fields, or a primitive as `value`, are what the condition reads); this "
                "stream's values are dynamic: declare value_type= upstream, or use filter()",
                processor=self.name,
                parameter="condition",
            )


@attrs.frozen(kw_only=True)
class Map(_Unary):
    """``fn(key, value) -> (new_key, new_value)``."""

    changes_key: ClassVar[bool] = True
    changes_value: ClassVar[bool] = True

    fn: Fn


@attrs.frozen(kw_only=True)
class MapValues(_Unary):
    """``fn(value)`` or, with ``with_key``, ``fn(key, value)`` gives the new value; with
    ``vectorized``, ``fn(values)`` takes a batch's values as a ``pyarrow.Array`` and
    returns as many new values."""

    changes_value: ClassVar[bool] = True

    fn: Fn
    with_key: bool = False
    vectorized: bool = False


@attrs.frozen(kw_only=True)
class FlatMap(_Unary):
    """``fn(key, value)`` gives an iterable of ``(key, value)`` pairs."""

    changes_key: ClassVar[bool] = True
    changes_value: ClassVar[bool] = True

    fn: Fn


@attrs.frozen(kw_only=True)
class FlatMapValues(_Unary):
    changes_value: ClassVar[bool] = True

    fn: Fn
    with_key: bool = False


@attrs.frozen(kw_only=True)
class SelectKey(_Unary):
    changes_key: ClassVar[bool] = True

    fn: Fn


@attrs.frozen(kw_only=True)
class Peek(_Unary):
    fn: Fn


@attrs.frozen(kw_only=True)
class Branch(_Unary):
    """One branch of a ``split``: records whose first true predicate is ``index``.

    ``index == len(predicates)`` is the default branch, which takes what no predicate took.
    """

    predicates: tuple[Fn, ...]
    index: int
    #: the split's processor name, which a failing predicate is reported under
    split: str | None = None


@attrs.frozen(kw_only=True)
class Merge(Node):
    inputs: tuple[Node, ...]

    @property
    def parents(self) -> tuple[Node, ...]:
        return self.inputs


@attrs.frozen(kw_only=True)
class Repartition(_Unary):
    """Redistributes records by key over ``num_partitions`` tasks (None: the app's)."""

    num_partitions: int | None = None

    @property
    def repartitions(self) -> bool:
        return True


@attrs.frozen(kw_only=True)
class TableFilter(_Unary):
    """A KTable filter: records that fail become tombstones for their key."""

    fn: Fn
    negate: bool = False


@attrs.frozen(kw_only=True)
class TableMapValues(_Unary):
    changes_value: ClassVar[bool] = True

    fn: Fn
    with_key: bool = False


@attrs.frozen(kw_only=True)
class ToStream(_Unary):
    pass


@attrs.frozen(kw_only=True)
class ToTable(_Unary):
    """A stream read as a table's changelog (``KStream.to_table``): each record upserts
    its key, a None value deletes it. ``store_name`` is the table's materialized store.

    Like :class:`TableSource`, the store lives in the operator that reads the table.
    """

    store_name: str
    versioned: bool = False
    history_retention_ms: int = 0


@attrs.frozen(kw_only=True)
class StreamTableJoin(_OneStore, Node):
    """A stream-table join; ``left`` keeps stream records with no table match."""

    stream: Node
    table: Node
    joiner: Fn
    joiner_with_key: bool
    left: bool
    store_name: str
    versioned: bool = False
    history_retention_ms: int = 0
    grace_ms: int = 0

    def __attrs_post_init__(self) -> None:
        # Kafka Streams refuses this too ("History retention must be at least grace
        # period"): a record held back for the grace period could look up a version that
        # the table has already dropped.
        if self.versioned and self.grace_ms > self.history_retention_ms:
            grace = timedelta(milliseconds=self.grace_ms)
            retention = timedelta(milliseconds=self.history_retention_ms)
            raise InvalidTopologyError(
                f"{self.name}: the grace period ({grace}) is longer than the history "
                f"retention ({retention}) of the versioned table it joins; history retention "
                "must be at least the grace period",
                processor=self.name,
                grace_ms=self.grace_ms,
                history_retention_ms=self.history_retention_ms,
            )

    @property
    def parents(self) -> tuple[Node, ...]:
        return (self.stream, self.table)


@attrs.frozen(kw_only=True)
class StreamGlobalTableJoin(StreamTableJoin):
    """A stream-global-table join: each stream record joins the table's value for
    ``key_selector(key, value)`` and keeps its own key (``left`` keeps records with no
    table value). The stream's key type (``key_type``) need not be the table's."""

    key_selector: Fn


@attrs.frozen(kw_only=True)
class _PairJoin(_OneStore, Node):
    """A join of ``left`` and ``right`` by ``joiner`` in one of :attr:`MODES`, its state in
    ``store_name``."""

    MODES: ClassVar[tuple[str, ...]] = ("inner", "left", "outer")
    #: the join's kind in errors
    KIND: ClassVar[str]

    left: Node
    right: Node
    joiner: Fn
    joiner_with_key: bool
    mode: str
    store_name: str

    def __attrs_post_init__(self) -> None:
        if self.mode not in self.MODES:
            raise InvalidTopologyError(
                f"{self.name}: unknown {self.KIND} join mode {self.mode!r}", processor=self.name
            )

    @property
    def parents(self) -> tuple[Node, ...]:
        return (self.left, self.right)


@attrs.frozen(kw_only=True)
class StreamStreamJoin(_PairJoin):
    """A windowed stream-stream join (``join``, ``left_join``, ``outer_join``): records of
    ``left`` at ``t1`` and ``right`` at ``t2`` with one key join when
    ``t1 - before_ms <= t2 <= t1 + after_ms``. ``mode`` is ``inner``, ``left`` or ``outer``;
    both streams' records wait in ``store_name`` until their windows close
    (kspark_server.operators.window_join)."""

    KIND: ClassVar[str] = "stream-stream"

    # the windows are checked by kspark.JoinWindows, which makes them
    before_ms: int
    after_ms: int
    grace_ms: int


@attrs.frozen(kw_only=True)
class TableTableJoin(_PairJoin):
    """A same-key table-table join (``KTable.join``, ``left_join``, ``outer_join``): each
    update of either table may change the joined row of its key, as Kafka Streams'
    ``KTableKTableInnerJoin``/``LeftJoin``/``OuterJoin`` decide. ``mode`` is ``inner``,
    ``left`` or ``outer``; both tables' latest values and the result live in
    ``store_name`` (kspark_server.operators.table_join). The result is a table."""

    changes_value: ClassVar[bool] = True
    #: the joined table keeps the latest value per key
    versioned: ClassVar[bool] = False
    history_retention_ms: ClassVar[int] = 0
    KIND: ClassVar[str] = "table-table"


@attrs.frozen(kw_only=True)
class ForeignKeyJoin(_PairJoin):
    """A foreign-key table-table join (KIP-213; ``KTable.join(other, foreign_key_extractor,
    joiner)`` and ``left_join``): each left value joins the right table's value of the
    key ``extractor`` gives it. The result is a table keyed by the left key, in
    ``store_name``; the left values' foreign keys and the subscriptions live in
    ``subscription_store`` and ``registration_store``
    (kspark_server.operators.fk_messages). ``mode`` is ``inner`` or ``left``."""

    changes_value: ClassVar[bool] = True
    versioned: ClassVar[bool] = False
    history_retention_ms: ClassVar[int] = 0
    MODES: ClassVar[tuple[str, ...]] = ("inner", "left")
    KIND: ClassVar[str] = "foreign-key"

    extractor: Fn
    extractor_with_key: bool

    @property
    def subscription_store(self) -> str:
        """The store of the left keys' foreign keys and versions."""
        return f"{self.store_name}-fk-subscriptions"

    @property
    def registration_store(self) -> str:
        """The store of the right table's values and each foreign key's subscribers."""
        return f"{self.store_name}-fk-registrations"

    def stores(self) -> tuple[str, ...]:
        return (self.store_name, self.subscription_store, self.registration_store)


class DedupMode(enum.Enum):
    BY_KEY = "by_key"
    BY_KEY_VALUE = "by_key_value"
    BY_ID = "by_id"


@attrs.frozen(kw_only=True)
class Deduplicate(_OneStore, _Unary):
    """KIP-655 deduplication within ``interval_ms`` of stream time."""

    mode: DedupMode
    interval_ms: int
    id_selector: Fn | None
    store_name: str

    def __attrs_post_init__(self) -> None:
        if self.interval_ms < 0:
            raise InvalidArgumentError(
                f"{self.name}: the deduplication interval must not be negative "
                f"(got {timedelta(milliseconds=self.interval_ms)})",
                processor=self.name,
                parameter="interval",
            )
        if (self.mode is DedupMode.BY_KEY) != (self.id_selector is None):
            raise InvalidTopologyError(
                f"{self.name}: an id selector goes with deduplicate_by_key_value and deduplicate",
                processor=self.name,
            )

    @property
    def repartitions(self) -> bool:
        # by id, records move to the task of their id (Kafka Streams repartitions by it)
        return self.mode is DedupMode.BY_ID


@attrs.frozen(kw_only=True)
class Sink(_TopicNode):
    """Writes its parent's records to the topic it names."""

    parent: Node

    @property
    def parents(self) -> tuple[Node, ...]:
        return (self.parent,)


@attrs.frozen(kw_only=True)
class Foreach(_Unary):
    """Calls ``fn(key, value)`` for each record of its parent; the stream ends here
    (``foreach``)."""

    fn: Fn


@attrs.frozen(kw_only=True)
class Print(_Unary):
    """Prints each record of its parent as a line ``[label]: key, value`` (or what
    ``mapper`` makes of the record), to the workers' standard output or appended to
    ``file_path``; the stream ends here (``print``)."""

    label: str
    file_path: str | None = None
    mapper: Fn | None = None


@attrs.frozen(kw_only=True)
class DynamicSink(_Unary):
    """Writes each record to the topic ``extractor(key, value, record_context)`` names.

    The names are bound when the app starts, as any topic name is: ``bindings`` are the
    topics bound by name (the topology's ``Topic`` objects and ``StreamsConfig.topics``),
    ``default`` binds every other name (a Kafka topic on ``bootstrap_servers``, or for
    files the folder ``<default.path>/<name>``). ``bound`` is False until then.
    """

    extractor: Fn
    bindings: tuple[TopicSpec, ...] = ()
    default: TopicSpec | None = None
    bound: bool = False
