"""The plan IR: immutable nodes of a topology's logical plan.

Nodes are frozen attrs classes. Each one names its parents, so a topology is the DAG
reachable from its sinks. Nodes validate themselves on construction, so an invalid plan
cannot exist. This module never imports pyspark.
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from datetime import timedelta
from typing import Any, ClassVar, get_args

import attrs

from kspark._paths import resolve_path
from kspark._typing import TopicFormat, TopicLayout
from kspark.errors import InvalidArgumentError, InvalidTopologyError, TypeMappingError
from kspark.plan.types import Dynamic, TypeDesc, describe_type

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

#: The option of a file ``Topic`` that reads every folder under its path whose name
#: matches the regular expression that is the topic's name (``stream(re.compile(...))``).
PATTERN_OPTION = "kspark.pattern"

#: Topic formats whose ``path`` is a folder (for ``table`` it is a table name).
_FILE_FORMATS = frozenset({"jsonl", "parquet", "csv"})


def _check_name(name: str) -> None:
    if not name or not name.strip():
        raise InvalidArgumentError("a processor name must not be empty", parameter="name")


def _schema_type(tp: Any, topic: str, what: str) -> TypeDesc | None:
    """A topic's declared ``key_type`` or ``value_type`` as a type description."""
    if tp is None:
        return None
    try:
        return describe_type(tp)
    except TypeMappingError as exc:
        raise TypeMappingError(f"topic {topic!r}: {what}: {exc.message}") from exc


def _type_desc(tp: Any) -> TypeDesc | None:
    """A ``TopicSpec``'s ``key_type`` or ``value_type``: a type description, or a Python
    type to describe."""
    if tp is None or isinstance(tp, TypeDesc):
        return tp
    return describe_type(tp)


def _type_repr(tp: TypeDesc | None) -> str:
    return "None" if tp is None else tp.display()


@attrs.frozen(kw_only=True)
class TopicSpec:
    """Where a topic lives: a file directory, a Spark table, or Kafka (``kspark.Topic``).

    Build one with the class methods :meth:`jsonl`, :meth:`parquet`, :meth:`csv`,
    :meth:`table` and :meth:`kafka`.

    Parameters
    ----------
    name
        The topic's name in the topology (``describe()``, the test driver, bindings).
    format
        ``"jsonl"``, ``"parquet"`` or ``"csv"`` (a directory of files), ``"table"`` (a
        Spark table) or ``"kafka"``.
    path
        The directory of a file topic or the name of a table; None for Kafka. A relative
        or ``~`` path becomes absolute here, against the client's working directory, as
        the user meant it, before it reaches the server; a URI (``s3a://``, ``hdfs://``,
        ``file:/``) is kept as it is.
    layout
        ``"envelope"``: rows carry ``key``, ``value``, ``timestamp`` and optionally
        ``headers``, ``partition``, ``offset``. ``"value"``: each row is the value.
    key_field, timestamp_field
        With ``layout="value"``, the columns to take the key and the timestamp from.
    options
        ``(name, value)`` pairs passed to Spark's reader and writer.
    key_type, value_type
        The topic's schema, if it declares one (the factories take Python types). A source
        of the topic whose topology declares no types reads them; a sink converts dynamic
        keys and values to them, and a record that does not convert goes to the
        production exception handler under the sink's name.

    Examples
    --------
    >>> from kspark import Topic
    >>> Topic.jsonl("payments", "/data/payments")
    TopicSpec(name='payments', format='jsonl', path='/data/payments', layout='envelope', key_field=None, timestamp_field=None, options=(), key_type=None, value_type=None)
    >>> Topic.jsonl("counts", "/data/counts", value_type=int).value_type.display()
    'int'
    >>> Topic(name="rates", format="parquet", path="/data/rates", layout="value", key_field="ccy").key_field
    'ccy'
    """

    name: str
    format: TopicFormat
    path: str | None = None
    layout: TopicLayout = "envelope"
    key_field: str | None = None
    timestamp_field: str | None = None
    options: tuple[tuple[str, str], ...] = ()
    # shown by their names: two Topics that differ only in their schema must not look alike
    # in an error message
    key_type: TypeDesc | None = attrs.field(default=None, repr=_type_repr, converter=_type_desc)
    value_type: TypeDesc | None = attrs.field(default=None, repr=_type_repr, converter=_type_desc)

    def __attrs_post_init__(self) -> None:
        if not self.name:
            raise InvalidArgumentError("a topic needs a name", parameter="name")
        if self.format not in get_args(TopicFormat):
            raise InvalidArgumentError(
                f"topic {self.name!r}: unknown format {self.format!r}", parameter="format"
            )
        if self.format != "kafka" and not self.path:
            raise InvalidArgumentError(
                f"topic {self.name!r}: a {self.format} topic needs a path or table name",
                parameter="path",
            )
        if self.format in _FILE_FORMATS and self.path is not None:
            # resolved here, not on the server, whose working directory is not the user's
            object.__setattr__(self, "path", resolve_path(self.path))
        if self.layout not in get_args(TopicLayout):
            raise InvalidArgumentError(
                f"topic {self.name!r}: layout must be 'envelope' or 'value', not {self.layout!r}",
                parameter="layout",
            )
        if self.layout == "envelope" and (self.key_field or self.timestamp_field):
            raise InvalidArgumentError(
                f"topic {self.name!r}: key_field and timestamp_field need layout='value'",
                parameter="layout",
            )

    def option_dict(self) -> dict[str, str]:
        """``options`` as a dict.

        Returns
        -------
        dict
            Option name to value.

        Examples
        --------
        >>> Topic.kafka("t", bootstrap_servers="k:9092", startingOffsets="latest").option_dict()
        {'kafka.bootstrap.servers': 'k:9092', 'startingOffsets': 'latest'}
        """
        return dict(self.options)

    @classmethod
    def jsonl(
        cls,
        name: str,
        path: str,
        *,
        layout: TopicLayout = "envelope",
        key_field: str | None = None,
        timestamp_field: str | None = None,
        key_type: Any = None,
        value_type: Any = None,
    ) -> TopicSpec:
        """A directory of JSON-lines files.

        Parameters
        ----------
        name
            The topic's name in the topology.
        path
            The directory.
        layout, key_field, timestamp_field
            As for :class:`TopicSpec`.
        key_type, value_type
            The topic's schema (:class:`TopicSpec`); None: none declared.

        Returns
        -------
        TopicSpec
            The topic.

        Examples
        --------
        >>> Topic.jsonl("payments", "/data/payments", layout="value", key_field="account").format
        'jsonl'
        """
        return cls(
            name=name,
            format="jsonl",
            path=path,
            layout=layout,
            key_field=key_field,
            timestamp_field=timestamp_field,
            key_type=_schema_type(key_type, name, "key_type"),
            value_type=_schema_type(value_type, name, "value_type"),
        )

    @classmethod
    def parquet(
        cls,
        name: str,
        path: str,
        *,
        layout: TopicLayout = "envelope",
        key_field: str | None = None,
        timestamp_field: str | None = None,
        key_type: Any = None,
        value_type: Any = None,
    ) -> TopicSpec:
        """A directory of Parquet files.

        Parameters
        ----------
        name
            The topic's name in the topology.
        path
            The directory.
        layout, key_field, timestamp_field
            As for :class:`TopicSpec`.
        key_type, value_type
            The topic's schema (:class:`TopicSpec`); None: none declared.

        Returns
        -------
        TopicSpec
            The topic.

        Examples
        --------
        >>> Topic.parquet("rates", "/lake/rates", layout="value", key_field="currency").layout
        'value'
        """
        return cls(
            name=name,
            format="parquet",
            path=path,
            layout=layout,
            key_field=key_field,
            timestamp_field=timestamp_field,
            key_type=_schema_type(key_type, name, "key_type"),
            value_type=_schema_type(value_type, name, "value_type"),
        )

    @classmethod
    def csv(
        cls,
        name: str,
        path: str,
        *,
        key_field: str | None = None,
        timestamp_field: str | None = None,
        header: bool = True,
        key_type: Any = None,
        value_type: Any = None,
    ) -> TopicSpec:
        """A directory of CSV files; each row is a value (``layout='value'``).

        Parameters
        ----------
        name
            The topic's name in the topology.
        path
            The directory.
        key_field, timestamp_field
            The columns to take the key and the timestamp from.
        header
            Whether the files' first line names the columns.
        key_type, value_type
            The topic's schema (:class:`TopicSpec`); None: none declared.

        Returns
        -------
        TopicSpec
            The topic.

        Examples
        --------
        >>> Topic.csv("trades", "/data/trades", key_field="symbol").option_dict()
        {'header': 'true'}
        """
        return cls(
            name=name,
            format="csv",
            path=path,
            layout="value",
            key_field=key_field,
            timestamp_field=timestamp_field,
            options=(("header", str(header).lower()),),
            key_type=_schema_type(key_type, name, "key_type"),
            value_type=_schema_type(value_type, name, "value_type"),
        )

    @classmethod
    def table(
        cls,
        name: str,
        table_name: str | None = None,
        *,
        layout: TopicLayout = "envelope",
        key_field: str | None = None,
        timestamp_field: str | None = None,
        key_type: Any = None,
        value_type: Any = None,
    ) -> TopicSpec:
        """A Spark table (``spark.readStream.table``), by default the table named ``name``.

        Parameters
        ----------
        name
            The topic's name in the topology.
        table_name
            The Spark table's name; None: ``name``.
        layout, key_field, timestamp_field
            As for :class:`TopicSpec`.
        key_type, value_type
            The topic's schema (:class:`TopicSpec`); None: none declared.

        Returns
        -------
        TopicSpec
            The topic.

        Examples
        --------
        >>> Topic.table("orders", "sales.orders").path
        'sales.orders'
        """
        return cls(
            name=name,
            format="table",
            path=table_name or name,
            layout=layout,
            key_field=key_field,
            timestamp_field=timestamp_field,
            key_type=_schema_type(key_type, name, "key_type"),
            value_type=_schema_type(value_type, name, "value_type"),
        )

    @classmethod
    def kafka(
        cls,
        name: str,
        bootstrap_servers: str,
        *,
        key_type: Any = None,
        value_type: Any = None,
        **options: str,
    ) -> TopicSpec:
        """A Kafka topic.

        Parameters
        ----------
        name
            The Kafka topic's name, which is also its name in the topology.
        bootstrap_servers
            The cluster, ``host:port[,host:port...]``.
        key_type, value_type
            The topic's schema (:class:`TopicSpec`); None: none declared.
        **options
            Passed through to Spark's Kafka source or sink (``startingOffsets``, ...).

        Returns
        -------
        TopicSpec
            The topic.

        Examples
        --------
        >>> t = Topic.kafka("payments", bootstrap_servers="localhost:9092", startingOffsets="earliest")
        >>> t.option_dict()["kafka.bootstrap.servers"]
        'localhost:9092'
        """
        opts = {"kafka.bootstrap.servers": bootstrap_servers, **options}
        return cls(
            name=name,
            format="kafka",
            options=tuple(sorted(opts.items())),
            key_type=_schema_type(key_type, name, "key_type"),
            value_type=_schema_type(value_type, name, "value_type"),
        )


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
class StreamTableJoin(Node):
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

    def stores(self) -> tuple[str, ...]:
        return (self.store_name,)


@attrs.frozen(kw_only=True)
class StreamStreamJoin(Node):
    """A windowed stream-stream join (``join``, ``left_join``, ``outer_join``): records of
    ``left`` at ``t1`` and ``right`` at ``t2`` with one key join when
    ``t1 - before_ms <= t2 <= t1 + after_ms``. ``mode`` is ``inner``, ``left`` or ``outer``;
    both streams' records wait in ``store_name`` until their windows close
    (kspark_server.operators.window_join)."""

    left: Node
    right: Node
    joiner: Fn
    joiner_with_key: bool
    mode: str
    before_ms: int
    after_ms: int
    grace_ms: int
    store_name: str

    def __attrs_post_init__(self) -> None:
        # the windows are checked by kspark.JoinWindows, which makes them
        if self.mode not in ("inner", "left", "outer"):
            raise InvalidTopologyError(
                f"{self.name}: unknown stream-stream join mode {self.mode!r}", processor=self.name
            )

    @property
    def parents(self) -> tuple[Node, ...]:
        return (self.left, self.right)

    def stores(self) -> tuple[str, ...]:
        return (self.store_name,)


@attrs.frozen(kw_only=True)
class TableTableJoin(Node):
    """A same-key table-table join (``KTable.join``, ``left_join``, ``outer_join``): each
    update of either table may change the joined row of its key, as Kafka Streams'
    ``KTableKTableInnerJoin``/``LeftJoin``/``OuterJoin`` decide. ``mode`` is ``inner``,
    ``left`` or ``outer``; both tables' latest values and the result live in
    ``store_name`` (kspark_server.operators.table_join). The result is a table."""

    changes_value: ClassVar[bool] = True
    #: the joined table keeps the latest value per key
    versioned: ClassVar[bool] = False
    history_retention_ms: ClassVar[int] = 0

    left: Node
    right: Node
    joiner: Fn
    joiner_with_key: bool
    mode: str
    store_name: str

    def __attrs_post_init__(self) -> None:
        if self.mode not in ("inner", "left", "outer"):
            raise InvalidTopologyError(
                f"{self.name}: unknown table-table join mode {self.mode!r}", processor=self.name
            )

    @property
    def parents(self) -> tuple[Node, ...]:
        return (self.left, self.right)

    def stores(self) -> tuple[str, ...]:
        return (self.store_name,)


class DedupMode(enum.Enum):
    BY_KEY = "by_key"
    BY_KEY_VALUE = "by_key_value"
    BY_ID = "by_id"


@attrs.frozen(kw_only=True)
class Deduplicate(_Unary):
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

    def stores(self) -> tuple[str, ...]:
        return (self.store_name,)

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


#: The public name of :class:`TopicSpec`.
Topic = TopicSpec
