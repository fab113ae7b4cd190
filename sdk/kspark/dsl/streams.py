"""The typed, fluent DSL: ``StreamsBuilder``, ``KStream``, ``KTable`` and ``KGroupedTable``.

Every call returns a new object around a new plan node; nothing is mutated but the
builder's list of sinks and its name counter, as in Kafka Streams' ``StreamsBuilder``.

Examples
--------
>>> from kspark import StreamsBuilder
>>> b = StreamsBuilder()
>>> words = b.stream("lines", key_type=str, value_type=str)
>>> upper = words.map_values(lambda v: v.upper(), value_type=str)
>>> upper.to("upper")
>>> [n.name for n in b.build().nodes()]
['KSTREAM-SOURCE-0000000000', 'KSTREAM-MAPVALUES-0000000001', 'KSTREAM-SINK-0000000002']

Topics are named here and bound to where they live when the app starts (see
:mod:`kspark.bindings`). Keys and values with no declared type are dynamic: any
JSON-compatible value, ``Any`` for mypy:

>>> clicks = b.stream("clicks").filter(lambda user, click: click["page"] != "/health")
>>> clicks.node.value_type.display()
'any'
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeAlias, TypeVar, overload

from kspark.dsl import _aggregation as agg
from kspark.dsl import _infer, processing, streamjoin
from kspark.dsl.globaltable import GlobalKTable, stream_global_join
from kspark.dsl.joinwindows import JoinWindows, StreamJoined
from kspark.dsl.options import (
    Branched,
    Deduplicated,
    Grouped,
    Joined,
    Materialized,
    Named,
    Repartitioned,
    to_ms,
)
from kspark.errors import InvalidArgumentError, InvalidTopologyError
from kspark.plan import graph
from kspark.plan import nodes as n
from kspark.plan.grouped import Aggregate, Suppress, TableGroupBy
from kspark.plan.processing import GlobalStoreSource, Process, ProcessValues, StoreDef
from kspark.plan.suppression import SuppressTimeLimit
from kspark.plan.topology import Topology
from kspark.plan.types import TypeDesc, describe_type

if TYPE_CHECKING:
    import pyarrow as pa

    from kspark.dsl.grouped import KGroupedStream
    from kspark.dsl.printed import Printed
    from kspark.dsl.stores import StoreBuilder
    from kspark.dsl.suppressed import Suppressed
    from kspark_server.envelope import RecordContext
    from kspark_server.papi import FixedKeyProcessor, Processor

__all__ = ["BranchedKStream", "KGroupedTable", "KStream", "KTable", "StreamsBuilder"]

K = TypeVar("K")
V = TypeVar("V")
KR = TypeVar("KR")
VR = TypeVar("VR")
VT = TypeVar("VT")
VO = TypeVar("VO")
KO = TypeVar("KO")
KT = TypeVar("KT")
VA = TypeVar("VA")
ID = TypeVar("ID")
N = TypeVar("N", bound=n.Node)

_INT_TYPE = describe_type(int)

#: What :meth:`StreamsBuilder.stream` reads: a topic, several, or those a pattern matches.
SourceTopics: TypeAlias = "str | n.TopicSpec | Sequence[str | n.TopicSpec] | re.Pattern[str]"


class StreamsBuilder:
    """Builds a topology: the entry point of the DSL, like Kafka Streams' ``StreamsBuilder``.

    Processor names are generated from a per-builder counter
    (``KSTREAM-FILTER-0000000001``), so the same code always gives the same names and the
    same state store names across restarts.

    Examples
    --------
    >>> from kspark import StreamsBuilder
    >>> b = StreamsBuilder()
    >>> b.stream("clicks", key_type=str, value_type=str).to("copy")
    >>> print(b.build().describe())  # doctest: +NORMALIZE_WHITESPACE
    Topologies:
       Sub-topology: 0
        Source: KSTREAM-SOURCE-0000000000 (topics: [clicks])
          --> KSTREAM-SINK-0000000001
        Sink: KSTREAM-SINK-0000000001 (topic: copy)
          <-- KSTREAM-SOURCE-0000000000
    """

    def __init__(self) -> None:
        self._counter = 0
        self._sinks: list[n.Sink] = []
        # every processor the user added, by identity: build() keeps the ones that lead
        # to no sink too
        self._nodes: dict[int, n.Node] = {}
        self._join_stores: set[str] = set()
        self._state_stores: dict[str, StoreDef] = {}
        self._global_stores: dict[str, GlobalStoreSource] = {}

    def _added(self, node: n.Node) -> None:
        self._nodes[id(node)] = node

    # -- naming -----------------------------------------------------------------------
    def _next(self, prefix: str, named: Named | str | None = None) -> tuple[str, int]:
        seq = self._counter
        self._counter += 1
        if isinstance(named, Named):
            return named.name, seq
        if isinstance(named, str):
            return named, seq
        return f"{prefix}-{seq:010d}", seq

    def _store_name(self, prefix: str) -> str:
        seq = self._counter
        self._counter += 1
        return f"{prefix}-STATE-STORE-{seq:010d}"

    # -- sources ----------------------------------------------------------------------
    @overload
    def stream(
        self,
        topic: SourceTopics,
        *,
        key_type: type[K],
        value_type: type[V],
        named: Named | None = None,
    ) -> KStream[K, V]: ...
    @overload
    def stream(
        self,
        topic: SourceTopics,
        *,
        key_type: type[K],
        value_type: None = None,
        named: Named | None = None,
    ) -> KStream[K, Any]: ...
    @overload
    def stream(
        self,
        topic: SourceTopics,
        *,
        key_type: None = None,
        value_type: type[V],
        named: Named | None = None,
    ) -> KStream[Any, V]: ...
    @overload
    def stream(
        self,
        topic: SourceTopics,
        *,
        key_type: None = None,
        value_type: None = None,
        named: Named | None = None,
    ) -> KStream[Any, Any]: ...
    def stream(
        self,
        topic: SourceTopics,
        *,
        key_type: Any = None,
        value_type: Any = None,
        named: Named | None = None,
    ) -> KStream[Any, Any]:
        """A stream of the records of ``topic``.

        Parameters
        ----------
        topic
            The topic's name, bound to where its records live when the app starts (see
            :class:`~kspark.StreamsConfig` ``topics``, ``bootstrap_servers`` and
            ``data_dir``); or a ``Topic`` such as ``Topic.jsonl(name, path)``, which binds
            the name right here. A list of them reads several topics as one stream (each
            record keeps its topic in its context). A compiled regular expression
            (``re.compile("orders-.*")``) reads every topic whose whole name matches it:
            Kafka topics through the source's pattern subscription with
            ``bootstrap_servers`` (topics created later are read too), or the folders
            under ``data_dir``.
        key_type, value_type
            The record's key and value types: primitives, dataclasses or attrs classes.
            Without one, keys or values are *dynamic*: any JSON-compatible value
            (``dict``, ``list`` and ``typing.Any`` declare the same).
        named
            A processor name instead of the generated ``KSTREAM-SOURCE-<n>``.

        Returns
        -------
        KStream
            The topic's records, typed ``KStream[K, V]`` by the declared types.

        Examples
        --------
        >>> from kspark import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> clicks = b.stream("clicks", key_type=str, value_type=int)
        >>> clicks.name
        'KSTREAM-SOURCE-0000000000'
        >>> clicks.node.key_type.display(), clicks.node.value_type.display()
        ('str', 'int')
        >>> b.stream("orders").node.value_type.display()
        'any'
        >>> import re
        >>> print(b.stream(["eu", "us"]).node.topic_parts())
        (('eu', None), ('us', None))
        >>> b.stream(re.compile("orders-.*")).node.pattern
        True
        """
        parts, pattern = _source_topics(topic)
        topic_name, bound = parts[0]
        name, seq = self._next("KSTREAM-SOURCE", named)
        declares = next((t for _, t in parts if t is not None), None)
        node = n.Source(
            name=name,
            seq=seq,
            topic_name=topic_name,
            topic=bound,
            more_topics=parts[1:],
            pattern=pattern,
            key_type=_source_type(key_type, declares, name, "key_type"),
            value_type=_source_type(value_type, declares, name, "value_type"),
        )
        return KStream(self, node)

    @overload
    def table(
        self,
        topic: str | n.TopicSpec,
        *,
        key_type: type[K],
        value_type: type[V],
        materialized: Materialized | None = None,
        named: Named | None = None,
    ) -> KTable[K, V]: ...
    @overload
    def table(
        self,
        topic: str | n.TopicSpec,
        *,
        key_type: type[K],
        value_type: None = None,
        materialized: Materialized | None = None,
        named: Named | None = None,
    ) -> KTable[K, Any]: ...
    @overload
    def table(
        self,
        topic: str | n.TopicSpec,
        *,
        key_type: None = None,
        value_type: type[V],
        materialized: Materialized | None = None,
        named: Named | None = None,
    ) -> KTable[Any, V]: ...
    @overload
    def table(
        self,
        topic: str | n.TopicSpec,
        *,
        key_type: None = None,
        value_type: None = None,
        materialized: Materialized | None = None,
        named: Named | None = None,
    ) -> KTable[Any, Any]: ...
    def table(
        self,
        topic: str | n.TopicSpec,
        *,
        key_type: Any = None,
        value_type: Any = None,
        materialized: Materialized | None = None,
        named: Named | None = None,
    ) -> KTable[Any, Any]:
        """A table whose rows are the latest value per key of ``topic``'s changelog.

        A record with value None (a tombstone) deletes its key. With
        ``Materialized.as_versioned(...)`` the table keeps history for as-of joins.

        Parameters
        ----------
        topic
            The topic's name, bound when the app starts, or a ``Topic`` (see
            :meth:`stream`).
        key_type, value_type
            The record's key and value types: primitives, dataclasses or attrs classes;
            dynamic (any JSON-compatible value) when not given.
        materialized
            How the table is stored: its store name, and whether it is versioned.
        named
            A processor name instead of the generated one.

        Returns
        -------
        KTable
            The table.

        Examples
        --------
        >>> from datetime import timedelta
        >>> from kspark import Materialized, StreamsBuilder
        >>> rates = StreamsBuilder().table(
        ...     "rates", key_type=str, value_type=float,
        ...     materialized=Materialized.as_versioned("rates", timedelta(days=1)),
        ... )
        >>> rates.name, rates.store_name
        ('KTABLE-SOURCE-0000000000', 'rates')
        """
        topic_name, bound = _topic_arg(topic)
        name, seq = self._next("KTABLE-SOURCE", named)
        node = n.TableSource(
            name=name,
            seq=seq,
            topic_name=topic_name,
            topic=bound,
            key_type=_source_type(key_type, bound, name, "key_type"),
            value_type=_source_type(value_type, bound, name, "value_type"),
            **self._table_store(materialized, "KTABLE-SOURCE"),
        )
        return KTable(self, node)

    def _table_store(self, materialized: Materialized | None, prefix: str) -> dict[str, Any]:
        """A table's store, as its node's fields: named by ``materialized`` (else a name
        generated from ``prefix``), versioned or not, and its history retention."""
        mat = materialized or Materialized()
        retention = mat.history_retention
        return {
            "store_name": mat.store_name or self._store_name(prefix),
            "versioned": mat.versioned,
            "history_retention_ms": to_ms(retention, "history_retention") if retention else 0,
        }

    @overload
    def global_table(
        self,
        topic: str | n.TopicSpec,
        *,
        key_type: type[K],
        value_type: type[V],
        materialized: Materialized | None = None,
        named: Named | None = None,
    ) -> GlobalKTable[K, V]: ...
    @overload
    def global_table(
        self,
        topic: str | n.TopicSpec,
        *,
        key_type: type[K],
        value_type: None = None,
        materialized: Materialized | None = None,
        named: Named | None = None,
    ) -> GlobalKTable[K, Any]: ...
    @overload
    def global_table(
        self,
        topic: str | n.TopicSpec,
        *,
        key_type: None = None,
        value_type: type[V],
        materialized: Materialized | None = None,
        named: Named | None = None,
    ) -> GlobalKTable[Any, V]: ...
    @overload
    def global_table(
        self,
        topic: str | n.TopicSpec,
        *,
        key_type: None = None,
        value_type: None = None,
        materialized: Materialized | None = None,
        named: Named | None = None,
    ) -> GlobalKTable[Any, Any]: ...
    def global_table(
        self,
        topic: str | n.TopicSpec,
        *,
        key_type: Any = None,
        value_type: Any = None,
        materialized: Materialized | None = None,
        named: Named | None = None,
    ) -> GlobalKTable[Any, Any]:
        """A global table: the latest value per key of ``topic``'s changelog, which a
        stream joins on a key its key selector picks from each record, whatever the
        stream's own key and partitioning (Kafka Streams' ``globalTable``).

        A record with value None (a tombstone) deletes its key. A stream joins it with
        ``KStream.join(table, key_selector, joiner)`` or ``left_join``: each stream record
        joins the table's value for ``key_selector(key, value)`` as of when the record is
        processed, never waiting for the table, and keeps its own key
        (docs/joins.md, "Global tables").

        Parameters
        ----------
        topic
            The topic's name, bound when the app starts, or a ``Topic`` (see
            :meth:`stream`).
        key_type, value_type
            The record's key and value types; dynamic when not given.
        materialized
            The table's store name (``Materialized.as_(name)``), which
            ``app.store(name)`` reads. A global table keeps latest values only.
        named
            A processor name instead of the generated one.

        Returns
        -------
        GlobalKTable
            The table, for stream joins.

        Examples
        --------
        >>> from dataclasses import dataclass
        >>> from kspark import Materialized, StreamsBuilder, Topic
        >>> @dataclass
        ... class Payment:
        ...     currency: str
        ...     amount: float
        >>> b = StreamsBuilder()
        >>> rates = b.global_table(Topic.jsonl("rates", "/tmp/rates"), key_type=str,
        ...                        value_type=float, materialized=Materialized.as_("rates"))
        >>> payments = b.stream(Topic.jsonl("payments", "/tmp/payments"), key_type=int,
        ...                     value_type=Payment)
        >>> payments.left_join(
        ...     rates, lambda account, p: p.currency,
        ...     lambda p, rate: None if rate is None else p.amount * rate, value_type=float,
        ... ).to(Topic.jsonl("converted", "/tmp/converted"))
        >>> print(b.build().describe())  # doctest: +NORMALIZE_WHITESPACE
        Topologies:
           Sub-topology: 0 for global store (will not generate tasks)
            Source: KTABLE-SOURCE-0000000000 (topics: [rates])
           Sub-topology: 1
            Source: KSTREAM-SOURCE-0000000001 (topics: [payments])
              --> KSTREAM-LEFTJOIN-0000000002
            Processor: KSTREAM-LEFTJOIN-0000000002 (stores: [rates])
              --> KSTREAM-SINK-0000000003
              <-- KSTREAM-SOURCE-0000000001
            Sink: KSTREAM-SINK-0000000003 (topic: converted)
              <-- KSTREAM-LEFTJOIN-0000000002
        """
        topic_name, bound = _topic_arg(topic)
        name, seq = self._next("KTABLE-SOURCE", named)
        node = n.GlobalTableSource(
            name=name,
            seq=seq,
            topic_name=topic_name,
            topic=bound,
            key_type=_source_type(key_type, bound, name, "key_type"),
            value_type=_source_type(value_type, bound, name, "value_type"),
            **self._table_store(materialized, "KTABLE-SOURCE"),
        )
        return GlobalKTable(self, node)

    def _add_sink(self, sink: n.Sink) -> None:
        self._sinks.append(sink)

    def add_state_store(self, builder: StoreBuilder[Any]) -> StreamsBuilder:
        """Adds a state store that processors connect to by name
        (``KStream.process(supplier, name)``).

        Parameters
        ----------
        builder
            A store builder from :class:`kspark.state.Stores`.

        Returns
        -------
        StreamsBuilder
            This builder.

        Examples
        --------
        >>> from kspark import StreamsBuilder
        >>> from kspark.state import Stores
        >>> b = StreamsBuilder().add_state_store(Stores.key_value_store_builder(
        ...     Stores.persistent_key_value_store("counts"), key_type=str, value_type=int))
        >>> sorted(b._state_stores)
        ['counts']
        """
        build = getattr(builder, "build", None)
        store = build() if callable(build) else None
        if not isinstance(store, StoreDef):
            raise InvalidArgumentError(
                "add_state_store takes a store builder, such as Stores.key_value_store_builder"
                f"(Stores.persistent_key_value_store(name)), got {builder!r}",
                parameter="builder",
            )
        self._check_new_store(store.name)
        self._state_stores[store.name] = store
        return self

    def _check_new_store(self, name: str) -> None:
        if name in self._state_stores or name in self._join_stores or name in self._global_stores:
            raise InvalidTopologyError(
                f"a state store named {name!r} was added already", stores=[name]
            )

    def add_global_store(
        self,
        store_builder: StoreBuilder[Any],
        topic: str | n.TopicSpec,
        *,
        key_type: type[Any] | None = None,
        value_type: type[Any] | None = None,
        state_update_supplier: Callable[[], Processor[Any, Any, Any, Any]] | None = None,
        named: Named | str | None = None,
    ) -> StreamsBuilder:
        """Adds a global store: a read-only key-value store that the processors of every
        task see whole, fed by ``topic`` (Kafka Streams' ``addGlobalStore``).

        Each of ``topic``'s records goes to the state-update processor, which writes the
        store: by default it puts the record's value under its key, and deletes the key
        for a null value. A processor of the topology gets the store by name
        (``context.get_state_store(name)`` in its ``init``), without naming it in
        ``process``; it may read it (``get``, ``range``, ``all``, ...), and a write fails
        with :class:`~kspark.processor.StateStoreError`. See docs/processor-api.md,
        "Global stores", for when a processor sees an update.

        Parameters
        ----------
        store_builder
            ``Stores.key_value_store_builder(...)``: the store's name and types.
        topic
            The topic that feeds the store: a name, bound as any topic name is, or a
            ``Topic``.
        key_type, value_type
            The topic's record types (by default the store's).
        state_update_supplier
            A ``Processor`` class, or a function of no argument making one, whose
            ``process(record)`` writes the store (``context.get_state_store(name)`` in its
            ``init``). It forwards nothing.
        named
            The name of the store's source processor.

        Returns
        -------
        StreamsBuilder
            This builder.

        Raises
        ------
        InvalidTopologyError
            If a store of that name was added already, or the store is not a key-value
            store.

        Examples
        --------
        >>> from kspark import StreamsBuilder
        >>> from kspark.state import Stores
        >>> b = StreamsBuilder().add_global_store(
        ...     Stores.key_value_store_builder(
        ...         Stores.persistent_key_value_store("rates"), key_type=str, value_type=float
        ...     ),
        ...     "rates",
        ... )
        >>> sorted(b._global_stores)
        ['rates']
        """
        build = getattr(store_builder, "build", None)
        store = build() if callable(build) else None
        if not isinstance(store, StoreDef):
            raise InvalidArgumentError(
                "add_global_store takes a store builder, such as "
                "Stores.key_value_store_builder(Stores.persistent_key_value_store(name)), got "
                f"{store_builder!r}",
                parameter="store_builder",
            )
        self._check_new_store(store.name)
        topic_name, bound = _topic_arg(topic)
        name, seq = self._next("KSTREAM-SOURCE", named)
        if state_update_supplier is not None:
            processing.check_supplier(state_update_supplier, False, name)
        node = GlobalStoreSource(
            name=name,
            seq=seq,
            topic_name=topic_name,
            topic=bound,
            key_type=_source_type(key_type, bound, name, "key_type")
            if key_type is not None or bound is not None
            else store.key_type,
            value_type=_source_type(value_type, bound, name, "value_type")
            if value_type is not None or bound is not None
            else store.value_type,
            store_name=store.name,
            store=store,
            update_supplier=state_update_supplier,
        )
        self._global_stores[store.name] = node
        return self

    def build(self) -> Topology:
        """The topology of every processor added so far.

        As in Kafka Streams, a processor whose records reach no sink is kept and runs: a
        branch that ends in ``peek`` calls its action for each record, and a table that
        nothing reads keeps its store for interactive queries. Such processors are the
        topology's :attr:`~kspark.plan.topology.Topology.ends`.

        Returns
        -------
        Topology
            The validated, immutable topology, ready for ``StreamsApp`` or the test driver.

        Examples
        --------
        >>> from kspark import StreamsBuilder, Topic
        >>> b = StreamsBuilder()
        >>> b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int).to(
        ...     Topic.jsonl("out", "/tmp/out")
        ... )
        >>> [n.name for n in b.build().nodes()]
        ['KSTREAM-SOURCE-0000000000', 'KSTREAM-SINK-0000000001']

        A branch that ends in ``peek`` stays in the topology:

        >>> src = b.stream(Topic.jsonl("audit", "/tmp/audit"), key_type=str, value_type=int)
        >>> src.filter(lambda k, v: v < 0).peek(lambda k, v: print("negative", k, v)).name
        'KSTREAM-PEEK-0000000004'
        >>> src.to(Topic.jsonl("audited", "/tmp/audited"))
        >>> [end.name for end in b.build().ends]
        ['KSTREAM-PEEK-0000000004']
        """
        added = sorted(self._nodes.values(), key=lambda node: node.seq)
        nodes = graph.toposort([*added, *self._sinks], lambda node: node.parents)
        has_child = {id(p) for node in nodes for p in node.parents}
        sinks: tuple[n.Node, ...] = tuple(self._sinks)
        ends: tuple[n.Node, ...] = tuple(
            node for node in added if id(node) not in has_child and not isinstance(node, n.Sink)
        )
        if self._state_stores or any(isinstance(x, Process) for x in nodes):
            # the processors of branches that reach no sink get their stores too
            roots = processing.connect_stores(
                (*sinks, *ends), self._state_stores, self._global_stores
            )
            sinks, ends = roots[: len(sinks)], roots[len(sinks) :]
        return Topology(sinks=sinks, ends=ends)  # type: ignore[arg-type]


def _windows(joined: Any, windows: JoinWindows | None) -> Any:
    """The third argument of a join, given by position or, for two streams, as
    ``windows=``."""
    if windows is None:
        return joined
    if joined is not None:
        raise InvalidArgumentError(
            "give the join windows once: as the third argument or as windows=",
            parameter="windows",
        )
    return windows


def _source_type(tp: Any, topic: n.TopicSpec | None, processor: str, what: str) -> TypeDesc:
    """A source's declared type: ``tp``, or, without one, what its ``Topic`` declares
    (a conflict between the two is refused when the app binds its topics,
    :func:`kspark.bindings.bind_topology`)."""
    schema = getattr(topic, what) if topic is not None else None
    if tp is None and schema is not None:
        return schema  # type: ignore[no-any-return]
    return _infer.resolve(tp, None, processor, what)


def _source_topics(topic: object) -> tuple[tuple[tuple[str, n.TopicSpec | None], ...], bool]:
    """The topics of ``stream(topic)``: each as its name and its ``Topic`` if given; and
    whether the one name is a pattern."""
    if isinstance(topic, re.Pattern):
        if not isinstance(topic.pattern, str) or not topic.pattern:
            raise InvalidArgumentError(
                "a topic pattern is a non-empty str regular expression", parameter="topic"
            )
        return ((topic.pattern, None),), True
    if isinstance(topic, list | tuple):
        if not topic:
            raise InvalidArgumentError("stream() needs at least one topic", parameter="topic")
        parts = tuple(_topic_arg(t) for t in topic)
        names = [name for name, _ in parts]
        if len(set(names)) != len(names):
            raise InvalidArgumentError(
                f"stream() names a topic more than once: {names}", parameter="topic"
            )
        return parts, False
    return (_topic_arg(topic),), False


def _topic_arg(topic: object) -> tuple[str, n.TopicSpec | None]:
    """The name of a topic given by name or as a ``Topic``, and the ``Topic`` if given."""
    if isinstance(topic, n.TopicSpec):
        return topic.name, topic
    if isinstance(topic, str) and topic.strip():
        return topic, None
    raise InvalidArgumentError(
        "expected a topic name (a non-empty str) or a Topic such as Topic.jsonl(name, path), "
        f"got {topic!r}",
        parameter="topic",
    )


def _check_vectorized(fn: Callable[..., Any], processor: str, what: str) -> None:
    """A vectorized function takes one argument, the batch's values."""
    if _infer.positional_arity(fn) not in (None, 1):
        raise InvalidArgumentError(
            f"{processor}: a vectorized {what} takes one argument, the batch's values as a "
            "pyarrow.Array",
            processor=processor,
            parameter=what,
        )


def _after(parent: n.Node, cls: Callable[..., N], name: str, seq: int, **fields: Any) -> N:
    """A new processor ``cls`` after ``parent``: ``fields`` are its own; its key and value
    types are ``parent``'s unless ``fields`` say otherwise."""
    types = {"key_type": parent.key_type, "value_type": parent.value_type}
    return cls(name=name, seq=seq, parent=parent, **types | fields)


class KStream(Generic[K, V]):
    """An unbounded stream of key-value records. Build one with :meth:`StreamsBuilder.stream`.

    Each method adds one processor and returns a new stream around it; the stream it is
    called on is unchanged, so one stream can feed several processors.

    Examples
    --------
    >>> from kspark import StreamsBuilder
    >>> b = StreamsBuilder()
    >>> words = b.stream("words", key_type=str, value_type=str)
    >>> words.filter(lambda k, w: w != "").to("non-empty")
    >>> words.map_values(len, value_type=int).to("lengths")
    >>> [sink.name for sink in b.build().sinks]
    ['KSTREAM-SINK-0000000002', 'KSTREAM-SINK-0000000004']
    """

    __slots__ = ("_builder", "_node")

    def __init__(self, builder: StreamsBuilder, node: n.Node) -> None:
        self._builder = builder
        self._node = node
        builder._added(node)

    @property
    def node(self) -> n.Node:
        """The plan node this stream wraps."""
        return self._node

    @property
    def name(self) -> str:
        """The name of the processor that produces this stream."""
        return self._node.name

    def _wrap(self, node: n.Node) -> KStream[Any, Any]:
        return KStream(self._builder, node)

    def _child(self, cls: type[n.Node], name: str, seq: int, **fields: Any) -> KStream[Any, Any]:
        """The stream of a new processor ``cls`` after this one (:func:`_after`)."""
        return self._wrap(_after(self._node, cls, name, seq, **fields))

    # -- stateless --------------------------------------------------------------------
    @overload
    def filter(
        self,
        predicate: Callable[[K, V], bool],
        named: Named | None = None,
        *,
        vectorized: Literal[False] = False,
    ) -> KStream[K, V]: ...

    @overload
    def filter(
        self,
        predicate: Callable[[pa.Array], pa.Array],
        named: Named | None = None,
        *,
        vectorized: Literal[True],
    ) -> KStream[K, V]: ...

    def filter(
        self,
        predicate: Callable[..., Any],
        named: Named | None = None,
        *,
        vectorized: bool = False,
    ) -> KStream[K, V]:
        """Keeps the records for which ``predicate(key, value)`` is true.

        Parameters
        ----------
        predicate
            A function of the key and the value; with ``vectorized=True``, a function of
            a batch of values.
        named
            A processor name instead of the generated one.
        vectorized
            Call ``predicate`` once per batch (as Spark's pandas UDFs do) with the values
            of the batch as a ``pyarrow.Array`` (a ``StructArray`` for a record type,
            nulls for null values); it returns a boolean array of the same length, or
            anything ``pyarrow.array`` takes. A record is kept where the answer is true;
            a null answer drops it. If ``predicate`` raises, the batch runs again one
            record at a time (one-value arrays), so that the exception handler sees only
            the failing records.

        Returns
        -------
        KStream
            The records that ``predicate`` keeps, with the same types.

        Examples
        --------
        >>> import pyarrow.compute as pc
        >>> from kspark import Named, StreamsBuilder, Topic
        >>> s = StreamsBuilder().stream(Topic.jsonl("t", "/tmp/t"), key_type=str, value_type=int)
        >>> s.filter(lambda k, v: v > 0).name
        'KSTREAM-FILTER-0000000001'
        >>> s.filter(lambda k, v: v > 0, Named.as_("positive")).name
        'positive'
        >>> s.filter(lambda values: pc.greater(values, 0), vectorized=True).node.vectorized
        True
        """
        name, seq = self._builder._next("KSTREAM-FILTER", named)
        _infer.check_callable(predicate, "predicate", name)
        if vectorized:
            _check_vectorized(predicate, name, "predicate")
        return self._child(n.Filter, name, seq, fn=predicate, vectorized=vectorized)

    def filter_not(
        self, predicate: Callable[[K, V], bool], named: Named | None = None
    ) -> KStream[K, V]:
        """Keeps the records for which ``predicate(key, value)`` is false.

        Parameters
        ----------
        predicate
            A function of the key and the value.
        named
            A processor name instead of the generated one.

        Returns
        -------
        KStream
            The records that ``predicate`` rejects.

        Examples
        --------
        >>> from kspark import StreamsBuilder, Topic
        >>> b = StreamsBuilder()
        >>> s = b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
        >>> s.filter_not(lambda k, v: v < 0).name
        'KSTREAM-FILTER-0000000001'
        """
        name, seq = self._builder._next("KSTREAM-FILTER", named)
        _infer.check_callable(predicate, "predicate", name)
        return self._child(n.Filter, name, seq, fn=predicate, negate=True)

    def filter_expr(self, condition: str, named: Named | None = None) -> KStream[K, V]:
        """Keeps the records for which the Spark SQL ``condition`` is true, evaluated by
        Spark itself (in the JVM, no Python): ``filter_expr("amount > 100")``.

        The condition is one Spark SQL boolean expression over these columns:

        - a record value's fields, by name (``amount``); any other declared value as
          ``value``;
        - the record's ``key`` and ``timestamp`` (epoch ms), unless the value has a field
          of that name, which then hides it (Spark's names ignore case).

        Parameters
        ----------
        condition
            A Spark SQL boolean expression, as in ``DataFrame.filter``: any of Spark's
            functions, no aggregates or subqueries. A record is kept where it is true; a
            false or null answer drops it (a null value's fields are null).
        named
            A processor name instead of the generated one.

        Returns
        -------
        KStream
            The records that pass, unchanged.

        Raises
        ------
        InvalidArgumentError
            If the stream's values are dynamic (no declared value type), or the condition
            is not a non-empty str.

        Notes
        -----
        Spark checks the condition when the app starts: one that does not parse, names a
        column that is not there, or is not a boolean stops the start with an
        ``InvalidTopologyError`` naming this processor. A condition that fails on a
        record at run time (``1 / 0`` under ANSI mode) stops the app, like any Spark SQL
        error: the processing exception handler does not see it, as no Python runs.
        Use ``try_divide`` and the other ``try_`` functions where a record may fail.

        A ``filter_expr`` cuts the fused Python chain in two, so place it before Python
        steps rather than between them: the records it drops then never reach Python.

        Examples
        --------
        >>> import dataclasses
        >>> from kspark import Named, StreamsBuilder, Topic
        >>> @dataclasses.dataclass
        ... class Payment:
        ...     id: str
        ...     amount: int
        >>> s = StreamsBuilder().stream(Topic.jsonl("t", "/tmp/t"), key_type=str, value_type=Payment)
        >>> s.filter_expr("amount > 100").name
        'KSTREAM-FILTER-0000000001'
        >>> s.filter_expr("key LIKE 'eu-%' AND amount > 100", Named.as_("big-eu")).node.condition
        "key LIKE 'eu-%' AND amount > 100"
        """
        name, seq = self._builder._next("KSTREAM-FILTER", named)
        return self._child(n.FilterExpr, name, seq, condition=condition)

    def map(
        self,
        mapper: Callable[[K, V], tuple[KR, VR]],
        named: Named | None = None,
        *,
        key_type: type[KR] | None = None,
        value_type: type[VR] | None = None,
    ) -> KStream[KR, VR]:
        """Replaces each record by ``mapper(key, value)``, a ``(key, value)`` pair.

        Parameters
        ----------
        mapper
            A function of the key and the value that returns the new ``(key, value)``.
        named
            A processor name instead of the generated one.
        key_type, value_type
            The new key and value types, when the mapper's return annotation
            ``tuple[KR, VR]`` does not say them.

        Returns
        -------
        KStream
            One record per input record, with its new key and value.

        Examples
        --------
        >>> from kspark import StreamsBuilder
        >>> s = StreamsBuilder().stream("words", key_type=str, value_type=str)
        >>> def by_length(key: str, word: str) -> tuple[int, str]:
        ...     return len(word), word
        >>> m = s.map(by_length)
        >>> m.name, m.node.key_type.display(), m.node.changes_key
        ('KSTREAM-MAP-0000000001', 'int', True)
        """
        name, seq = self._builder._next("KSTREAM-MAP", named)
        _infer.check_callable(mapper, "mapper", name)
        hk, hv = _infer.pair_hints(_infer.return_hint(mapper))
        return self._child(
            n.Map,
            name,
            seq,
            fn=mapper,
            key_type=_infer.resolve(key_type, hk, name, "key_type"),
            value_type=_infer.resolve(value_type, hv, name, "value_type"),
        )

    @overload
    def map_values(
        self,
        mapper: Callable[[V], VR],
        named: Named | None = None,
        *,
        value_type: type[VR] | None = None,
        vectorized: Literal[False] = False,
    ) -> KStream[K, VR]: ...

    @overload
    def map_values(
        self,
        mapper: Callable[[K, V], VR],
        named: Named | None = None,
        *,
        value_type: type[VR] | None = None,
        vectorized: Literal[False] = False,
    ) -> KStream[K, VR]: ...

    @overload
    def map_values(
        self,
        mapper: Callable[[pa.Array], pa.Array],
        named: Named | None = None,
        *,
        value_type: type[VR],
        vectorized: Literal[True],
    ) -> KStream[K, VR]: ...

    def map_values(
        self,
        mapper: Callable[..., Any],
        named: Named | None = None,
        *,
        value_type: type[Any] | None = None,
        vectorized: bool = False,
    ) -> KStream[Any, Any]:
        """Replaces each value by ``mapper(value)`` or ``mapper(key, value)``; keeps the key.

        The new value type comes from ``value_type`` or the mapper's return annotation.

        Parameters
        ----------
        mapper
            A function of the value, or of the key and the value; with
            ``vectorized=True``, a function of a batch of values.
        named
            A processor name instead of the generated one.
        value_type
            The new value type, when the mapper's annotation does not say it (required
            with ``vectorized=True``).
        vectorized
            Call ``mapper`` once per batch (as Spark's pandas UDFs do) with the values of
            the batch as a ``pyarrow.Array`` (a ``StructArray`` for a record type, nulls
            for null values); it returns the new values as an array of the same length,
            of ``value_type``'s Arrow type (or anything ``pyarrow.array`` takes and casts
            to it). If ``mapper`` raises, the batch runs again one record at a time
            (one-value arrays), so that the exception handler sees only the failing
            records.

        Returns
        -------
        KStream
            One record per input record, with the same key and the new value.

        Examples
        --------
        >>> from kspark import StreamsBuilder, Topic
        >>> s = StreamsBuilder().stream(Topic.jsonl("t", "/tmp/t"), key_type=str, value_type=int)
        >>> doubled = s.map_values(lambda v: v * 2.0, value_type=float)
        >>> doubled.name, doubled.node.value_type.display()
        ('KSTREAM-MAPVALUES-0000000001', 'float')
        >>> def tag(key: str, value: int) -> str:  # two parameters: gets the key too
        ...     return f"{key}:{value}"
        >>> s.map_values(tag).node.value_type.display()
        'str'
        >>> import pyarrow.compute as pc
        >>> tenfold = s.map_values(lambda vs: pc.multiply(vs, 10), vectorized=True, value_type=int)
        >>> tenfold.node.vectorized
        True
        """
        name, seq = self._builder._next("KSTREAM-MAPVALUES", named)
        _infer.check_callable(mapper, "mapper", name)
        if vectorized:
            _check_vectorized(mapper, name, "mapper")
            if value_type is None:
                raise InvalidArgumentError(
                    f"{name}: a vectorized mapper needs value_type=, the type of the values "
                    "it returns",
                    processor=name,
                    parameter="value_type",
                )
        return self._child(
            n.MapValues,
            name,
            seq,
            fn=mapper,
            with_key=not vectorized and _infer.takes_key(mapper, 1, name, "mapper"),
            vectorized=vectorized,
            value_type=_infer.resolve(
                value_type, None if vectorized else _infer.return_hint(mapper), name, "value_type"
            ),
        )

    def flat_map(
        self,
        mapper: Callable[[K, V], Iterable[tuple[KR, VR]]],
        named: Named | None = None,
        *,
        key_type: type[KR] | None = None,
        value_type: type[VR] | None = None,
    ) -> KStream[KR, VR]:
        """Replaces each record by the ``(key, value)`` pairs ``mapper(key, value)`` yields.

        Parameters
        ----------
        mapper
            A function of the key and the value that returns an iterable of pairs.
        key_type, value_type
            The new key and value types, when ``mapper``'s annotations do not say them.
        named
            A processor name instead of the generated one.

        Returns
        -------
        KStream
            Zero or more records per input record, with new keys.

        Examples
        --------
        >>> from kspark import StreamsBuilder, Topic
        >>> b = StreamsBuilder()
        >>> s = b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
        >>> pairs = s.flat_map(lambda k, v: [(k, v), (k.upper(), v)], key_type=str, value_type=int)
        >>> pairs.node.changes_key
        True
        """
        name, seq = self._builder._next("KSTREAM-FLATMAP", named)
        _infer.check_callable(mapper, "mapper", name)
        hk, hv = _infer.pair_hints(_infer.element_hint(_infer.return_hint(mapper)))
        return self._child(
            n.FlatMap,
            name,
            seq,
            fn=mapper,
            key_type=_infer.resolve(key_type, hk, name, "key_type"),
            value_type=_infer.resolve(value_type, hv, name, "value_type"),
        )

    @overload
    def flat_map_values(
        self,
        mapper: Callable[[V], Iterable[VR]],
        named: Named | None = None,
        *,
        value_type: type[VR] | None = None,
    ) -> KStream[K, VR]: ...

    @overload
    def flat_map_values(
        self,
        mapper: Callable[[K, V], Iterable[VR]],
        named: Named | None = None,
        *,
        value_type: type[VR] | None = None,
    ) -> KStream[K, VR]: ...

    def flat_map_values(
        self,
        mapper: Callable[..., Any],
        named: Named | None = None,
        *,
        value_type: type[Any] | None = None,
    ) -> KStream[Any, Any]:
        """Replaces each value by the values ``mapper`` yields; keeps the key.

        Parameters
        ----------
        mapper
            ``mapper(value)``, or ``mapper(key, value)`` when it takes two parameters,
            returning an iterable of values.
        value_type
            The new value type, when ``mapper``'s annotations do not say it.
        named
            A processor name instead of the generated one.

        Returns
        -------
        KStream
            Zero or more records per input record, with the same key.

        Examples
        --------
        >>> from kspark import StreamsBuilder, Topic
        >>> b = StreamsBuilder()
        >>> s = b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
        >>> s.flat_map_values(lambda v: [v, -v], value_type=int).node.changes_key
        False
        """
        name, seq = self._builder._next("KSTREAM-FLATMAPVALUES", named)
        _infer.check_callable(mapper, "mapper", name)
        hint = _infer.element_hint(_infer.return_hint(mapper))
        return self._child(
            n.FlatMapValues,
            name,
            seq,
            fn=mapper,
            with_key=_infer.takes_key(mapper, 1, name, "mapper"),
            value_type=_infer.resolve(value_type, hint, name, "value_type"),
        )

    def select_key(
        self,
        mapper: Callable[[K, V], KR],
        named: Named | None = None,
        *,
        key_type: type[KR] | None = None,
    ) -> KStream[KR, V]:
        """Sets each record's key to ``mapper(key, value)``.

        Parameters
        ----------
        mapper
            A function of the key and the value that returns the new key.
        key_type
            The new key type, when ``mapper``'s annotations do not say it.
        named
            A processor name instead of the generated one.

        Returns
        -------
        KStream
            The records with their new keys and the same values.

        Examples
        --------
        >>> from kspark import StreamsBuilder, Topic
        >>> b = StreamsBuilder()
        >>> s = b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
        >>> s.select_key(lambda k, v: str(v), key_type=str).name
        'KSTREAM-KEY-SELECT-0000000001'
        """
        return self._select_key(mapper, "mapper", named, key_type)

    def _select_key(
        self, fn: Callable[..., Any], what: str, named: Named | None, key_type: type[Any] | None
    ) -> KStream[Any, V]:
        name, seq = self._builder._next("KSTREAM-KEY-SELECT", named)
        _infer.check_callable(fn, what, name)
        return self._child(
            n.SelectKey,
            name,
            seq,
            fn=fn,
            key_type=_infer.resolve(key_type, _infer.return_hint(fn), name, "key_type"),
        )

    def peek(self, action: Callable[[K, V], object], named: Named | None = None) -> KStream[K, V]:
        """Calls ``action(key, value)`` for each record and passes the record on.

        Parameters
        ----------
        action
            A function of the key and the value; what it returns is ignored. It runs on
            the server's Python workers: use it for logging or metrics.
        named
            A processor name instead of the generated one.

        Returns
        -------
        KStream
            The same records, unchanged.

        Examples
        --------
        >>> from kspark import StreamsBuilder
        >>> s = StreamsBuilder().stream("payments", key_type=str, value_type=float)
        >>> s.peek(lambda k, v: print(k, v)).name
        'KSTREAM-PEEK-0000000001'
        """
        name, seq = self._builder._next("KSTREAM-PEEK", named)
        _infer.check_callable(action, "action", name)
        return self._child(n.Peek, name, seq, fn=action)

    def process(
        self,
        supplier: Callable[[], Processor[K, V, KR, VR]],
        *store_names: str,
        key_type: type[KR] | None = None,
        value_type: type[VR] | None = None,
        named: Named | str | None = None,
    ) -> KStream[KR, VR]:
        """Runs a custom :class:`~kspark.processor.Processor` on each record (the
        Processor API; see docs/processor-api.md).

        Each task makes its own processor with ``supplier()`` for each micro-batch and
        gives it a context (forward, schedule punctuators, get state stores). The
        processor may forward any key, so a stateful step after it repartitions.

        Parameters
        ----------
        supplier
            A processor class, or a function of no argument returning a new processor.
        store_names
            The state stores the processor uses, added with
            ``StreamsBuilder.add_state_store``.
        key_type, value_type
            The forwarded records' types, when the processor's generic base
            (``Processor[KIn, VIn, KOut, VOut]``) does not say them.
        named
            A processor name instead of the generated one.

        Returns
        -------
        KStream
            The records the processor forwards.

        Examples
        --------
        >>> from kspark import StreamsBuilder
        >>> from kspark.processor import Processor, ProcessorContext, Record
        >>> class Upper(Processor[str, str, str, str]):
        ...     def init(self, context: ProcessorContext[str, str]) -> None:
        ...         self.context = context
        ...     def process(self, record: Record[str, str]) -> None:
        ...         self.context.forward(record.with_key(record.value.upper()))
        >>> s = StreamsBuilder().stream("words", key_type=str, value_type=str).process(Upper)
        >>> s.name, s.node.changes_key
        ('KSTREAM-PROCESSOR-0000000001', True)
        """
        name, seq = self._builder._next("KSTREAM-PROCESSOR", named)
        processing.check_supplier(supplier, False, name)
        hk, hv = processing.output_hints(supplier, False)
        return self._child(
            Process,
            name,
            seq,
            supplier=supplier,
            store_names=processing.check_store_names(store_names, name),
            store_defs=(),
            key_type=_infer.resolve(key_type, hk, name, "key_type"),
            value_type=_infer.resolve(value_type, hv, name, "value_type"),
        )

    def process_values(
        self,
        supplier: Callable[[], FixedKeyProcessor[K, V, VR]],
        *store_names: str,
        value_type: type[VR] | None = None,
        named: Named | str | None = None,
    ) -> KStream[K, VR]:
        """Runs a custom :class:`~kspark.processor.FixedKeyProcessor`: as :meth:`process`,
        but each forwarded record keeps its input record's key, so nothing repartitions.

        Parameters
        ----------
        supplier
            A processor class, or a function of no argument returning a new processor.
        store_names
            The state stores the processor uses.
        value_type
            The forwarded values' type, when the processor's generic base does not say it.
        named
            A processor name instead of the generated one.

        Returns
        -------
        KStream
            The records the processor forwards.

        Examples
        --------
        >>> from kspark import StreamsBuilder
        >>> from kspark.processor import FixedKeyProcessor, FixedKeyProcessorContext, FixedKeyRecord
        >>> class Length(FixedKeyProcessor[str, str, int]):
        ...     def init(self, context: FixedKeyProcessorContext[str, int]) -> None:
        ...         self.context = context
        ...     def process(self, record: FixedKeyRecord[str, str]) -> None:
        ...         self.context.forward(record.with_value(len(record.value)))
        >>> s = StreamsBuilder().stream("words", key_type=str, value_type=str)
        >>> s.process_values(Length).node.value_type.display()
        'int'
        """
        name, seq = self._builder._next("KSTREAM-PROCESSVALUES", named)
        processing.check_supplier(supplier, True, name)
        _, hv = processing.output_hints(supplier, True)
        return self._child(
            ProcessValues,
            name,
            seq,
            supplier=supplier,
            store_names=processing.check_store_names(store_names, name),
            store_defs=(),
            value_type=_infer.resolve(value_type, hv, name, "value_type"),
        )

    def merge(self, other: KStream[K, V], named: Named | None = None) -> KStream[K, V]:
        """The records of both streams. Both must have the same key and value types.

        Parameters
        ----------
        other
            The other stream, from the same builder.
        named
            A processor name instead of the generated one.

        Returns
        -------
        KStream
            The records of both streams.

        Examples
        --------
        >>> from kspark import StreamsBuilder, Topic
        >>> b = StreamsBuilder()
        >>> s = b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
        >>> other = b.stream(Topic.jsonl("more", "/tmp/more"), key_type=str, value_type=int)
        >>> [p.name for p in s.merge(other).node.parents]
        ['KSTREAM-SOURCE-0000000000', 'KSTREAM-SOURCE-0000000001']
        """
        name, seq = self._builder._next("KSTREAM-MERGE", named)
        if not isinstance(other, KStream):
            raise InvalidArgumentError(f"{name}: merge takes a KStream", processor=name)
        if other._builder is not self._builder:
            raise InvalidTopologyError(
                f"{name}: cannot merge streams of two different StreamsBuilders", processor=name
            )
        kt = self._node.key_type or other._node.key_type
        vt = self._node.value_type or other._node.value_type
        for a, b, what in (
            (self._node.key_type, other._node.key_type, "key"),
            (self._node.value_type, other._node.value_type, "value"),
        ):
            if a is not None and b is not None and a != b:
                raise InvalidTopologyError(
                    f"{name}: merged streams have different {what} types "
                    f"({a.display()} and {b.display()}); map one of them first",
                    processor=name,
                )
        return self._wrap(
            n.Merge(
                name=name, seq=seq, inputs=(self._node, other._node), key_type=kt, value_type=vt
            )
        )

    def split(self, named: Named | None = None) -> BranchedKStream[K, V]:
        """Splits the stream into branches by predicates, the first true predicate wins.

        Parameters
        ----------
        named
            A prefix for the branches' names instead of the generated
            ``KSTREAM-BRANCH-<n>-``.

        Returns
        -------
        BranchedKStream
            The split: add branches with ``branch()``, then end it with
            ``default_branch()`` or ``no_default_branch()``.

        Examples
        --------
        >>> from kspark import StreamsBuilder, Topic, Branched
        >>> s = StreamsBuilder().stream(Topic.jsonl("t", "/tmp/t"), key_type=str, value_type=int)
        >>> branches = (
        ...     s.split()
        ...     .branch(lambda k, v: v < 0, Branched.as_("negative"))
        ...     .default_branch(Branched.as_("rest"))
        ... )
        >>> sorted(branches)
        ['KSTREAM-BRANCH-0000000001-negative', 'KSTREAM-BRANCH-0000000001-rest']
        """
        prefix = named.name if named else "KSTREAM-BRANCH"
        return BranchedKStream(self, prefix=prefix, user_prefix=named is not None)

    def repartition(self, repartitioned: Repartitioned | None = None) -> KStream[K, V]:
        """Redistributes records by key over the app's tasks (or ``num_partitions``).

        Parameters
        ----------
        repartitioned
            A name and a number of partitions; by default a generated name and the app's
            ``StreamsConfig.num_partitions``.

        Returns
        -------
        KStream
            The same records, starting a new sub-topology.

        Examples
        --------
        >>> from kspark import StreamsBuilder, Topic
        >>> b = StreamsBuilder()
        >>> s = b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
        >>> r = s.repartition(Repartitioned.as_("by-key").with_num_partitions(4))
        >>> r.name, r.node.repartitions
        ('by-key', True)
        """
        opts = repartitioned or Repartitioned()
        name, seq = self._builder._next("KSTREAM-REPARTITION", opts.name)
        return self._child(n.Repartition, name, seq, num_partitions=opts.num_partitions)

    def to(
        self,
        topic: str | n.TopicSpec | Callable[[K, V, RecordContext], str],
        named: Named | None = None,
    ) -> None:
        """Writes the stream to ``topic``, or to the topic each record names.

        Parameters
        ----------
        topic
            The topic's name, bound when the app starts, or a ``Topic`` such as
            ``Topic.jsonl(name, path)`` (see :meth:`StreamsBuilder.stream`); or a topic
            name extractor, ``topic(key, value, record_context) -> str``, which picks each
            record's topic (Kafka Streams' ``TopicNameExtractor``; ``record_context`` is a
            :class:`~kspark.RecordContext`). Each name it gives is bound as any topic name
            is (``StreamsConfig`` ``topics``, ``bootstrap_servers``, ``data_dir``); a
            record whose name the app does not bind goes to the production exception
            handler, and one whose extractor raises to the processing exception handler.
        named
            A processor name instead of the generated one.

        Returns
        -------
        None
            The stream ends here; :meth:`StreamsBuilder.build` includes it.

        Examples
        --------
        >>> from kspark import StreamsBuilder, Topic
        >>> b = StreamsBuilder()
        >>> s = b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
        >>> s.to("out", Named.as_("write-out"))
        >>> b.build().sinks[0].name
        'write-out'
        >>> s.to(lambda k, v, ctx: "big" if v > 100 else "small")
        >>> b.build().ends[0].kind
        'DynamicSink'
        """
        if callable(topic) and not isinstance(topic, n.TopicSpec):
            name, seq = self._builder._next("KSTREAM-SINK", named)
            _infer.check_callable(topic, "topic", name)
            self._builder._added(_after(self._node, n.DynamicSink, name, seq, extractor=topic))
            return
        topic_name, bound = _topic_arg(topic)
        name, seq = self._builder._next("KSTREAM-SINK", named)
        sink = _after(self._node, n.Sink, name, seq, topic_name=topic_name, topic=bound)
        self._builder._add_sink(sink)

    def foreach(self, action: Callable[[K, V], object], named: Named | None = None) -> None:
        """Calls ``action(key, value)`` for each record; the stream ends here.

        ``action`` runs in the Spark executors' Python workers, at least once per record:
        when Spark retries a task or a micro-batch, or the app restarts after a failure,
        the records of the micro-batch that did not complete are processed again and
        ``action`` sees them again. Make its effects idempotent (an upsert by key, say)
        where that matters. If ``action`` raises, the processing exception handler decides,
        with the record's context, as for any processor.

        Parameters
        ----------
        action
            A function of the key and the value; what it returns is ignored.
        named
            A processor name instead of the generated ``KSTREAM-FOREACH-<n>``.

        Returns
        -------
        None
            The stream ends here; :meth:`StreamsBuilder.build` includes it.

        Examples
        --------
        >>> from kspark import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.stream("payments", key_type=str, value_type=float).foreach(lambda k, v: None)
        >>> [t.name for t in b.build().ends]
        ['KSTREAM-FOREACH-0000000001']
        """
        name, seq = self._builder._next("KSTREAM-FOREACH", named)
        _infer.check_callable(action, "action", name)
        self._builder._added(_after(self._node, n.Foreach, name, seq, fn=action))

    def print(self, printed: Printed[K, V], label: str | None = None) -> None:
        """Prints each record as a line ``[label]: key, value``; the stream ends here.

        As Kafka Streams' ``print``: lines go to standard output (``Printed.to_sysout()``)
        or to a file (``Printed.to_file(path)``) where the records are processed, in the
        executors' Python workers; the test driver shows ``to_sysout`` lines on the
        test's standard output. Like :meth:`foreach`, at least once.

        Parameters
        ----------
        printed
            Where to print, and the label and mapper (:class:`~kspark.Printed`).
        label
            The label, instead of ``printed``'s (and of the processor's name, the default).

        Returns
        -------
        None
            The stream ends here; :meth:`StreamsBuilder.build` includes it.

        Examples
        --------
        >>> from kspark import Printed, StreamsBuilder
        >>> b = StreamsBuilder()
        >>> b.stream("orders", key_type=str, value_type=int).print(Printed.to_sysout(), label="in")
        >>> b.build().ends[0].label
        'in'
        """
        from kspark.dsl.printed import Printed as _Printed

        if not isinstance(printed, _Printed):
            raise InvalidArgumentError(
                "print takes a Printed: Printed.to_sysout() or Printed.to_file(path)",
                parameter="printed",
            )
        name, seq = self._builder._next("KSTREAM-PRINTER", printed.name)
        shown = label if label is not None else printed.label
        node = _after(
            self._node,
            n.Print,
            name,
            seq,
            label=shown if shown is not None else name,
            file_path=printed.file_path,
            mapper=printed.mapper,
        )
        self._builder._added(node)

    # -- joins ------------------------------------------------------------------------
    @overload
    def join(
        self,
        table: GlobalKTable[KT, VT],
        key_selector: Callable[[K, V], KT | None],
        joiner: Callable[[V, VT], VR],
        named: Named | str | None = None,
        /,
        *,
        value_type: type[VR] | None = None,
    ) -> KStream[K, VR]: ...

    @overload
    def join(
        self,
        table: GlobalKTable[KT, VT],
        key_selector: Callable[[K, V], KT | None],
        joiner: Callable[[K, V, VT], VR],
        named: Named | str | None = None,
        /,
        *,
        value_type: type[VR] | None = None,
    ) -> KStream[K, VR]: ...

    @overload
    def join(
        self,
        table: KTable[K, VT],
        joiner: Callable[[V, VT], VR],
        joined: Joined | None = None,
        *,
        value_type: type[VR] | None = None,
    ) -> KStream[K, VR]: ...

    @overload
    def join(
        self,
        table: KTable[K, VT],
        joiner: Callable[[K, V, VT], VR],
        joined: Joined | None = None,
        *,
        value_type: type[VR] | None = None,
    ) -> KStream[K, VR]: ...

    @overload
    def join(
        self,
        other: KStream[K, VO],
        joiner: Callable[[V, VO], VR],
        windows: JoinWindows,
        /,
        stream_joined: StreamJoined | Named | None = None,
        *,
        value_type: type[VR] | None = None,
    ) -> KStream[K, VR]: ...

    @overload
    def join(
        self,
        other: KStream[K, VO],
        joiner: Callable[[V, VO], VR],
        /,
        *,
        windows: JoinWindows,
        stream_joined: StreamJoined | Named | None = None,
        value_type: type[VR] | None = None,
    ) -> KStream[K, VR]: ...

    @overload
    def join(
        self,
        other: KStream[K, VO],
        joiner: Callable[[K, V, VO], VR],
        windows: JoinWindows,
        /,
        stream_joined: StreamJoined | Named | None = None,
        *,
        value_type: type[VR] | None = None,
    ) -> KStream[K, VR]: ...

    @overload
    def join(
        self,
        other: KStream[K, VO],
        joiner: Callable[[K, V, VO], VR],
        /,
        *,
        windows: JoinWindows,
        stream_joined: StreamJoined | Named | None = None,
        value_type: type[VR] | None = None,
    ) -> KStream[K, VR]: ...

    def join(
        self,
        table: KTable[Any, Any] | KStream[Any, Any] | GlobalKTable[Any, Any],
        joiner: Callable[..., Any],
        joined: Joined | JoinWindows | Callable[..., Any] | None = None,
        stream_joined: StreamJoined | Named | str | None = None,
        *,
        windows: JoinWindows | None = None,
        value_type: type[Any] | None = None,
    ) -> KStream[Any, Any]:
        """Inner-joins each stream record with the table's value for its key (a
        stream-table join), or with the other stream's records of its key within the join
        windows (a stream-stream join, see docs/joins.md).

        Against a latest-value table the join uses the table's current value, against a
        versioned table its value as of the stream record's timestamp. Against another
        stream, a record at ``t1`` joins each record of the other stream with its key at
        ``t2`` where ``t1 - before <= t2 <= t1 + after``, whichever arrives first; the
        result's timestamp is ``max(t1, t2)``. Both streams' records wait in the join's
        store until their windows close.

        Parameters
        ----------
        table
            The table, or the other stream, from the same builder with this stream's key
            type; or a :class:`~kspark.GlobalKTable`, joined with
            ``join(table, key_selector, joiner, named)``: each record joins the table's
            value for ``key_selector(key, value)`` and keeps its own key (see
            :meth:`StreamsBuilder.global_table`).
        joiner
            ``joiner(value, other_value)`` or ``joiner(key, value, other_value)`` gives the
            joined value; a stream record whose key has no table value is dropped.
        joined
            Against a table, a :class:`~kspark.Joined`: a processor name and a grace period
            (a grace period needs a versioned table). Against a stream, the
            :class:`~kspark.JoinWindows`.
        stream_joined
            Against a stream, a :class:`~kspark.StreamJoined` or :class:`~kspark.Named`
            that names the join's processor and its store.
        windows
            Against a stream, the :class:`~kspark.JoinWindows` given by name
            (``join(other, joiner, windows=w)``) instead of as the third argument.
        value_type
            The joined value's type, when the joiner does not say it: a class used as the
            joiner gives its instances, an annotated function its return annotation; a
            lambda says nothing, and its values are dynamic.

        Returns
        -------
        KStream
            One record per match, with the joiner's value.

        Examples
        --------
        An as-of join against a versioned table, which waits 30 seconds for late table
        updates (KIP-923):

        >>> from datetime import timedelta
        >>> from kspark import Joined, Materialized, StreamsBuilder, Topic
        >>> b = StreamsBuilder()
        >>> rates = b.table(
        ...     Topic.jsonl("rates", "/tmp/rates"), key_type=str, value_type=float,
        ...     materialized=Materialized.as_versioned("rates", history_retention=timedelta(hours=1)),
        ... )
        >>> payments = b.stream(Topic.jsonl("payments", "/tmp/payments"), key_type=str, value_type=float)
        >>> payments.join(
        ...     rates, lambda amount, rate: amount * rate,
        ...     Joined.as_("convert").with_grace_period(timedelta(seconds=30)), value_type=float,
        ... ).to(Topic.jsonl("converted", "/tmp/converted"))
        >>> print(b.build().describe())  # doctest: +NORMALIZE_WHITESPACE
        Topologies:
           Sub-topology: 0
            Source: KTABLE-SOURCE-0000000000 (topics: [rates])
              --> convert
            Source: KSTREAM-SOURCE-0000000001 (topics: [payments])
              --> convert
            Processor: convert (stores: [rates])
              --> KSTREAM-SINK-0000000003
              <-- KSTREAM-SOURCE-0000000001, KTABLE-SOURCE-0000000000
            Sink: KSTREAM-SINK-0000000003 (topic: converted)
              <-- convert

        Two streams, joined within five minutes of each other:

        >>> from kspark import JoinWindows
        >>> views = b.stream(Topic.jsonl("views", "/tmp/views"), key_type=str, value_type=str)
        >>> clicks = b.stream(Topic.jsonl("clicks", "/tmp/clicks"), key_type=str, value_type=str)
        >>> clicks.join(
        ...     views, lambda click, view: f"{click}/{view}",
        ...     JoinWindows.of_time_difference_with_no_grace(timedelta(minutes=5)), value_type=str,
        ... ).name
        'KSTREAM-JOIN-0000000006'
        """
        return self._join(
            table, joiner, _windows(joined, windows), stream_joined, value_type, "inner"
        )

    @overload
    def left_join(
        self,
        table: GlobalKTable[KT, VT],
        key_selector: Callable[[K, V], KT | None],
        joiner: Callable[[V, VT | None], VR],
        named: Named | str | None = None,
        /,
        *,
        value_type: type[VR] | None = None,
    ) -> KStream[K, VR]: ...

    @overload
    def left_join(
        self,
        table: GlobalKTable[KT, VT],
        key_selector: Callable[[K, V], KT | None],
        joiner: Callable[[K, V, VT | None], VR],
        named: Named | str | None = None,
        /,
        *,
        value_type: type[VR] | None = None,
    ) -> KStream[K, VR]: ...

    @overload
    def left_join(
        self,
        table: KTable[K, VT],
        joiner: Callable[[V, VT | None], VR],
        joined: Joined | None = None,
        *,
        value_type: type[VR] | None = None,
    ) -> KStream[K, VR]: ...

    @overload
    def left_join(
        self,
        table: KTable[K, VT],
        joiner: Callable[[K, V, VT | None], VR],
        joined: Joined | None = None,
        *,
        value_type: type[VR] | None = None,
    ) -> KStream[K, VR]: ...

    @overload
    def left_join(
        self,
        other: KStream[K, VO],
        joiner: Callable[[V, VO | None], VR],
        windows: JoinWindows,
        /,
        stream_joined: StreamJoined | Named | None = None,
        *,
        value_type: type[VR] | None = None,
    ) -> KStream[K, VR]: ...

    @overload
    def left_join(
        self,
        other: KStream[K, VO],
        joiner: Callable[[V, VO | None], VR],
        /,
        *,
        windows: JoinWindows,
        stream_joined: StreamJoined | Named | None = None,
        value_type: type[VR] | None = None,
    ) -> KStream[K, VR]: ...

    @overload
    def left_join(
        self,
        other: KStream[K, VO],
        joiner: Callable[[K, V, VO | None], VR],
        windows: JoinWindows,
        /,
        stream_joined: StreamJoined | Named | None = None,
        *,
        value_type: type[VR] | None = None,
    ) -> KStream[K, VR]: ...

    @overload
    def left_join(
        self,
        other: KStream[K, VO],
        joiner: Callable[[K, V, VO | None], VR],
        /,
        *,
        windows: JoinWindows,
        stream_joined: StreamJoined | Named | None = None,
        value_type: type[VR] | None = None,
    ) -> KStream[K, VR]: ...

    def left_join(
        self,
        table: KTable[Any, Any] | KStream[Any, Any] | GlobalKTable[Any, Any],
        joiner: Callable[..., Any],
        joined: Joined | JoinWindows | Callable[..., Any] | None = None,
        stream_joined: StreamJoined | Named | str | None = None,
        *,
        windows: JoinWindows | None = None,
        value_type: type[Any] | None = None,
    ) -> KStream[Any, Any]:
        """Like :meth:`join`, but a record of this stream that joins nothing gives
        ``joiner(value, None)``: at once against a table; against another stream once its
        window has closed (its timestamp plus ``after`` plus the grace period), never
        before, so that no result is emitted that a later match would contradict.

        Parameters
        ----------
        table
            The table, the other stream, or a global table, as in :meth:`join`.
        joiner
            ``joiner(value, other_value)`` or ``joiner(key, value, other_value)``;
            ``other_value`` is None for a record that joins nothing.
        joined
            A :class:`~kspark.Joined` against a table, the :class:`~kspark.JoinWindows`
            against a stream, as in :meth:`join`.
        stream_joined
            Against a stream, the processor's and the store's names, as in :meth:`join`.
        windows
            Against a stream, the :class:`~kspark.JoinWindows` by name, as in :meth:`join`.
        value_type
            The joined value's type, when the joiner does not say it, as in :meth:`join`.

        Returns
        -------
        KStream
            Each match, and each record of this stream that joins nothing, with the
            joiner's value.

        Examples
        --------
        >>> from kspark import StreamsBuilder, Topic
        >>> b = StreamsBuilder()
        >>> s = b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
        >>> t = b.table(Topic.jsonl("names", "/tmp/names"), key_type=str, value_type=str)
        >>> s.left_join(t, lambda v, name: f"{name}:{v}", value_type=str).name
        'KSTREAM-LEFTJOIN-0000000003'
        """
        return self._join(
            table, joiner, _windows(joined, windows), stream_joined, value_type, "left"
        )

    @overload
    def outer_join(
        self,
        other: KStream[K, VO],
        joiner: Callable[[V | None, VO | None], VR],
        windows: JoinWindows,
        stream_joined: StreamJoined | Named | None = None,
        *,
        value_type: type[VR] | None = None,
    ) -> KStream[K, VR]: ...

    @overload
    def outer_join(
        self,
        other: KStream[K, VO],
        joiner: Callable[[K, V | None, VO | None], VR],
        windows: JoinWindows,
        stream_joined: StreamJoined | Named | None = None,
        *,
        value_type: type[VR] | None = None,
    ) -> KStream[K, VR]: ...

    def outer_join(
        self,
        other: KStream[Any, Any],
        joiner: Callable[..., Any],
        windows: JoinWindows,
        stream_joined: StreamJoined | Named | None = None,
        *,
        value_type: type[Any] | None = None,
    ) -> KStream[Any, Any]:
        """Joins this stream with ``other`` within ``windows``, keeping the records of both
        that join nothing (Kafka Streams' ``KStream#outerJoin``).

        Records join as in :meth:`join`. A record of either stream that joined nothing
        gives ``joiner(value, None)`` (this stream's) or ``joiner(None, other_value)`` (the
        other's) once its window has closed, never before, with its own timestamp.

        Parameters
        ----------
        other
            The other stream, from the same builder, with this stream's key type.
        joiner
            ``joiner(value, other_value)`` or ``joiner(key, value, other_value)``; one of
            the two values is None for a record that joined nothing.
        windows
            Which timestamps join, and the grace period for out-of-order records.
        stream_joined
            The processor's and the store's names.
        value_type
            The joined value's type, when ``joiner``'s annotations do not say it.

        Returns
        -------
        KStream
            The joined records, keyed as both inputs.

        Examples
        --------
        >>> from datetime import timedelta
        >>> from kspark import JoinWindows, StreamJoined, StreamsBuilder
        >>> b = StreamsBuilder()
        >>> orders = b.stream("orders", key_type=str, value_type=int)
        >>> payments = b.stream("payments", key_type=str, value_type=int)
        >>> matched = orders.outer_join(
        ...     payments, lambda order, paid: (order or 0) - (paid or 0),
        ...     JoinWindows.of_time_difference_and_grace(timedelta(hours=1), timedelta(minutes=5)),
        ...     StreamJoined.as_("unpaid-orders"), value_type=int,
        ... )
        >>> matched.name, matched.node.stores()
        ('KSTREAM-OUTERJOIN-0000000002', ('unpaid-orders',))
        """
        return self._join(other, joiner, windows, stream_joined, value_type, "outer")

    def _join(
        self,
        other: KTable[Any, Any] | KStream[Any, Any] | GlobalKTable[Any, Any],
        joiner: Callable[..., Any],
        joined: Joined | JoinWindows | Callable[..., Any] | None,
        stream_joined: StreamJoined | Named | str | None,
        value_type: type[Any] | None,
        mode: streamjoin.JoinMode,
    ) -> KStream[Any, Any]:
        # the overloads tell mypy which arguments go together; this tells a caller who
        # gets it wrong at run time
        if isinstance(other, GlobalKTable):
            # join(table, key_selector, joiner, named): the joiner comes third
            if mode == "outer" or not callable(joined) or isinstance(joined, JoinWindows):
                raise InvalidArgumentError(
                    "a global table joins with join(table, key_selector, joiner) or "
                    "left_join(table, key_selector, joiner)",
                    parameter="joiner",
                )
            return self._wrap(
                stream_global_join(self, other, joiner, joined, stream_joined, value_type, mode)
            )
        if callable(joined) and not isinstance(joined, JoinWindows):
            raise InvalidArgumentError(
                "a key selector goes with a GlobalKTable; a KTable joins on the stream's key",
                parameter="joined",
            )
        if isinstance(stream_joined, str):
            raise InvalidArgumentError(
                "a name as the fourth argument goes with a GlobalKTable join",
                parameter="stream_joined",
            )
        if isinstance(other, KStream):
            return self._wrap(
                streamjoin.stream_join(self, other, joiner, joined, stream_joined, value_type, mode)
            )
        if mode == "outer":
            raise InvalidArgumentError(
                f"outer_join joins two streams, got {type(other).__name__}", parameter="other"
            )
        if stream_joined is not None or isinstance(joined, JoinWindows):
            raise InvalidArgumentError(
                "JoinWindows and StreamJoined go with a stream-stream join; a stream-table "
                "join takes Joined",
                parameter="joined",
            )
        if not isinstance(other, KTable):
            raise InvalidArgumentError(
                f"a stream joins a KTable or a KStream, got {type(other).__name__}",
                parameter="table",
            )
        return self._wrap(
            streamjoin.stream_table_join(self, other, joiner, joined, value_type, mode)
        )

    # -- grouping (kspark.dsl.grouped) -------------------------------------------------
    def group_by_key(self, grouped: Grouped | None = None) -> KGroupedStream[K, V]:
        """Groups the records by their key, for ``count``, ``reduce``, ``aggregate`` or
        ``windowed_by`` (see :class:`~kspark.KGroupedStream`).

        Parameters
        ----------
        grouped
            The grouping's name (``Grouped.as_(name)``).

        Returns
        -------
        KGroupedStream
            The grouped stream.

        Examples
        --------
        >>> from kspark import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> counts = b.stream("clicks", key_type=str, value_type=str).group_by_key().count()
        >>> counts.name, counts.node.stateful
        ('KSTREAM-AGGREGATE-0000000002', True)
        """
        from kspark.dsl import grouped as g

        return g.group(self, grouped, selected=False)

    def group_by(
        self,
        selector: Callable[[K, V], KR],
        grouped: Grouped | None = None,
        *,
        key_type: type[KR] | None = None,
    ) -> KGroupedStream[KR, V]:
        """Re-keys each record with ``selector(key, value)``, then groups by the new key.

        Parameters
        ----------
        selector
            The new key of a record.
        grouped
            The grouping's name (``Grouped.as_(name)``).
        key_type
            The new key's type, when ``selector``'s annotations do not say it.

        Returns
        -------
        KGroupedStream
            The grouped stream; its aggregation starts a new sub-topology, as Kafka
            Streams' repartition topic does.

        Examples
        --------
        >>> from kspark import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> s = b.stream("payments", key_type=str, value_type=float)
        >>> t = s.group_by(lambda k, v: "big" if v > 100 else "small", key_type=str).count()
        >>> t.node.parent.name, t.node.repartitions
        ('KSTREAM-KEY-SELECT-0000000001', True)
        """
        from kspark.dsl import grouped as g

        keyed = self._select_key(selector, "selector", None, key_type)
        return g.group(keyed, grouped, selected=True)

    # -- tables ------------------------------------------------------------------------
    def to_table(
        self,
        materialized: Materialized | Named | None = None,
        named: Named | Materialized | None = None,
    ) -> KTable[K, V]:
        """This stream as a table's changelog: each record upserts its key, and a record
        with value None deletes it (Kafka Streams' ``KStream#toTable``).

        Parameters
        ----------
        materialized
            How the table is stored. ``Materialized.as_versioned(name, retention)`` keeps
            history, so a stream joined with the table sees the value as of each of its
            records' timestamps. Default: a latest-value store with a generated name.
        named
            The processor's name. Either argument may come first, as in Kafka Streams'
            ``toTable(Named, Materialized)``.

        Returns
        -------
        KTable
            The table, stored under ``materialized``'s store name.

        Examples
        --------
        >>> from datetime import timedelta
        >>> from kspark import Materialized, StreamsBuilder, Topic
        >>> b = StreamsBuilder()
        >>> updates = b.stream(Topic.jsonl("rate-updates", "/tmp/u"), key_type=str, value_type=float)
        >>> rates = updates.filter(lambda k, v: v > 0).to_table(
        ...     Materialized.as_versioned("rates", timedelta(hours=1))
        ... )
        >>> rates.name, rates.store_name
        ('KSTREAM-TOTABLE-0000000002', 'rates')
        """
        mat: Materialized | None = None
        nm: Named | None = None
        for arg in (materialized, named):
            if arg is None:
                continue
            if isinstance(arg, Materialized) and mat is None:
                mat = arg
            elif isinstance(arg, Named) and nm is None:
                nm = arg
            else:
                raise InvalidArgumentError(
                    f"to_table takes one Materialized and one Named, got {arg!r}",
                    parameter="materialized",
                )
        name, seq = self._builder._next("KSTREAM-TOTABLE", nm)
        store = self._builder._table_store(mat, "KSTREAM-TOTABLE")
        return KTable(self._builder, _after(self._node, n.ToTable, name, seq, **store))

    # -- deduplication (KIP-655) --------------------------------------------------------
    def deduplicate_by_key(
        self, interval: timedelta, deduplicated: Deduplicated | None = None
    ) -> KStream[K, V]:
        """Drops records whose key was forwarded within ``interval`` of their timestamp.

        Parameters
        ----------
        interval
            How long, in stream time, a forwarded key stops its duplicates.
        deduplicated
            Processor and store names.

        Returns
        -------
        KStream
            The records that are not duplicates.

        Examples
        --------
        >>> from datetime import timedelta
        >>> from kspark import Deduplicated, StreamsBuilder, Topic
        >>> b = StreamsBuilder()
        >>> (
        ...     b.stream(Topic.jsonl("clicks", "/tmp/clicks"), key_type=str, value_type=int)
        ...     .deduplicate_by_key(timedelta(minutes=5), Deduplicated.as_("dedup-clicks"))
        ...     .to(Topic.jsonl("unique", "/tmp/unique"))
        ... )
        >>> print(b.build().describe())  # doctest: +NORMALIZE_WHITESPACE
        Topologies:
           Sub-topology: 0
            Source: KSTREAM-SOURCE-0000000000 (topics: [clicks])
              --> dedup-clicks
            Processor: dedup-clicks (stores: [KSTREAM-DEDUPLICATE-STATE-STORE-0000000002])
              --> KSTREAM-SINK-0000000003
              <-- KSTREAM-SOURCE-0000000000
            Sink: KSTREAM-SINK-0000000003 (topic: unique)
              <-- dedup-clicks
        """
        return self._dedup(n.DedupMode.BY_KEY, None, interval, deduplicated)

    def deduplicate_by_key_value(
        self,
        id_selector: Callable[[K, V], ID | None],
        interval: timedelta,
        deduplicated: Deduplicated | None = None,
    ) -> KStream[K, V]:
        """Drops records whose (key, id) pair was forwarded within ``interval``.

        Parameters
        ----------
        id_selector
            ``id_selector(key, value)`` gives a record's id.
        interval
            How long, in stream time, a forwarded (key, id) pair stops its duplicates.
        deduplicated
            Processor and store names.

        Returns
        -------
        KStream
            The records that are not duplicates.

        Examples
        --------
        >>> from datetime import timedelta
        >>> from kspark import StreamsBuilder, Topic
        >>> b = StreamsBuilder()
        >>> s = b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
        >>> d = s.deduplicate_by_key_value(lambda k, v: str(v), timedelta(minutes=5))
        >>> d.node.stateful, d.node.repartitions
        (True, False)
        """
        return self._dedup(n.DedupMode.BY_KEY_VALUE, id_selector, interval, deduplicated)

    def deduplicate(
        self,
        id_selector: Callable[[K, V], ID | None],
        interval: timedelta,
        deduplicated: Deduplicated | None = None,
    ) -> KStream[K, V]:
        """Drops records whose id was forwarded within ``interval``, over all partitions.

        The records are redistributed by id first, so the same id from two keys is one.

        Parameters
        ----------
        id_selector
            ``id_selector(key, value)`` gives a record's id.
        interval
            How long, in stream time, a forwarded id stops its duplicates.
        deduplicated
            Processor and store names.

        Returns
        -------
        KStream
            The records that are not duplicates.

        Examples
        --------
        >>> from datetime import timedelta
        >>> from kspark import StreamsBuilder, Topic
        >>> b = StreamsBuilder()
        >>> s = b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
        >>> d = s.deduplicate(lambda k, v: str(v), timedelta(minutes=5))
        >>> d.node.stateful, d.node.repartitions
        (True, True)
        """
        return self._dedup(n.DedupMode.BY_ID, id_selector, interval, deduplicated)

    def _dedup(
        self,
        mode: n.DedupMode,
        id_selector: Callable[..., Any] | None,
        interval: timedelta,
        deduplicated: Deduplicated | None,
    ) -> KStream[Any, Any]:
        opts = deduplicated or Deduplicated()
        name, seq = self._builder._next("KSTREAM-DEDUPLICATE", opts.name)
        if id_selector is not None:
            _infer.check_callable(id_selector, "id_selector", name)
        if not isinstance(interval, timedelta):
            raise InvalidArgumentError(
                f"{name}: interval must be a datetime.timedelta, got {type(interval).__name__}",
                processor=name,
                parameter="interval",
            )
        store = opts.store_name or self._builder._store_name("KSTREAM-DEDUPLICATE")
        return self._child(
            n.Deduplicate,
            name,
            seq,
            mode=mode,
            interval_ms=interval // timedelta(milliseconds=1),
            id_selector=id_selector,
            store_name=store,
        )


class BranchedKStream(Generic[K, V]):
    """The result of :meth:`KStream.split`: add branches, then ``default_branch()`` or
    ``no_default_branch()`` to get a ``dict`` of branch name to stream.

    Examples
    --------
    >>> from kspark import Branched, Named, StreamsBuilder
    >>> s = StreamsBuilder().stream("numbers", key_type=str, value_type=int)
    >>> split = s.split(Named.as_("sign-")).branch(lambda k, v: v < 0, Branched.as_("neg"))
    >>> sorted(split.default_branch(Branched.as_("rest")))
    ['sign-neg', 'sign-rest']
    """

    def __init__(self, stream: KStream[K, V], *, prefix: str, user_prefix: bool) -> None:
        self._stream = stream
        self._prefix = prefix
        self._user_prefix = user_prefix
        self._predicates: list[Callable[[Any, Any], bool]] = []
        self._names: list[str | None] = []
        self._builder = stream._builder
        self._split_name, _ = self._builder._next("KSTREAM-BRANCH", None)

    def branch(
        self, predicate: Callable[[K, V], bool], branched: Branched | None = None
    ) -> BranchedKStream[K, V]:
        """Adds a branch of the records for which ``predicate`` is the first true one.

        Parameters
        ----------
        predicate
            A function of the key and the value.
        branched
            The branch's name; by default its number.

        Returns
        -------
        BranchedKStream
            This split, to add more branches or end it.

        Examples
        --------
        >>> from kspark import Branched, StreamsBuilder, Topic
        >>> b = StreamsBuilder()
        >>> s = b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
        >>> branches = s.split().branch(lambda k, v: v < 0, Branched.as_("neg")).no_default_branch()
        >>> list(branches)
        ['KSTREAM-BRANCH-0000000001-neg']
        """
        _infer.check_callable(predicate, "predicate", self._split_name)
        self._predicates.append(predicate)
        self._names.append(branched.name if branched else None)
        return self

    def default_branch(self, branched: Branched | None = None) -> dict[str, KStream[K, V]]:
        """Ends the split with a branch for the records no predicate took.

        Parameters
        ----------
        branched
            The default branch's name; by default its number.

        Returns
        -------
        dict
            Branch name to stream, the default branch last.

        Examples
        --------
        >>> from kspark import Branched, StreamsBuilder, Topic
        >>> b = StreamsBuilder()
        >>> s = b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
        >>> branches = s.split().branch(lambda k, v: v < 0).default_branch(Branched.as_("rest"))
        >>> len(branches)
        2
        """
        return self._finish(default=branched or Branched())

    def no_default_branch(self) -> dict[str, KStream[K, V]]:
        """Ends the split; records no predicate took are dropped.

        Returns
        -------
        dict
            Branch name to stream.

        Examples
        --------
        >>> from kspark import Branched, StreamsBuilder, Topic
        >>> b = StreamsBuilder()
        >>> s = b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
        >>> len(s.split().branch(lambda k, v: v < 0).no_default_branch())
        1
        """
        return self._finish(default=None)

    def _finish(self, default: Branched | None) -> dict[str, KStream[K, V]]:
        # Kafka Streams' naming: prefix + branch name, or prefix + position (from 1), and
        # prefix + "0" for an unnamed default branch; the map key is the processor name.
        if not self._predicates and default is None:
            raise InvalidTopologyError(f"{self._split_name}: a split needs at least one branch")
        preds = tuple(self._predicates)
        entries = [(i, name or str(i + 1)) for i, name in enumerate(self._names)]
        if default is not None:
            entries.append((len(preds), default.name or "0"))
        prefix = self._prefix if self._user_prefix else f"{self._split_name}-"
        out: dict[str, KStream[K, V]] = {}
        for index, suffix in entries:
            key = prefix + suffix
            if key in out:
                raise InvalidTopologyError(f"{self._split_name}: branch name {key!r} used twice")
            name, seq = self._builder._next("KSTREAM-BRANCHCHILD", key)
            out[key] = self._stream._child(
                n.Branch, name, seq, predicates=preds, index=index, split=self._split_name
            )
        return out


class KTable(Generic[K, V]):
    """A changelog stream seen as a table: the latest value per key.

    Build one with :meth:`StreamsBuilder.table` or :meth:`KStream.to_table`.

    Examples
    --------
    >>> from kspark import StreamsBuilder
    >>> b = StreamsBuilder()
    >>> names = b.table("names", key_type=str, value_type=str)
    >>> names.filter(lambda k, v: v != "").to_stream().to("names-changelog")
    >>> names.store_name
    'KTABLE-SOURCE-STATE-STORE-0000000001'
    """

    __slots__ = ("_builder", "_node")

    def __init__(self, builder: StreamsBuilder, node: n.Node) -> None:
        self._builder = builder
        self._node = node
        builder._added(node)

    @property
    def node(self) -> n.Node:
        """The plan node this table wraps."""
        return self._node

    @property
    def name(self) -> str:
        """The name of the processor that produces this table."""
        return self._node.name

    def _child(self, cls: type[n.Node], name: str, seq: int, **fields: Any) -> KTable[Any, Any]:
        """The table of a new processor ``cls`` after this one (:func:`_after`)."""
        return KTable(self._builder, _after(self._node, cls, name, seq, **fields))

    @property
    def store_name(self) -> str:
        """The name of the store a join against this table uses."""
        return self._source().store_name

    def _source(
        self,
    ) -> n.TableSource | n.ToTable | Aggregate | n.TableTableJoin | n.ForeignKeyJoin:
        node = self._node
        while not isinstance(
            node, n.TableSource | n.ToTable | Aggregate | n.TableTableJoin | n.ForeignKeyJoin
        ):
            assert isinstance(
                node, n.TableFilter | n.TableMapValues | Suppress | SuppressTimeLimit
            ), node
            node = node.parent
        return node

    def suppress(self, suppressed: Suppressed) -> KTable[K, V]:
        """Holds back the table's updates.

        With ``Suppressed.until_window_closes()`` (a windowed aggregation's table), each
        window's final result is emitted once, when stream time passes the window's end
        plus its grace period. With ``Suppressed.until_time_limit(limit, buffer)`` (any
        table), each key's updates wait until stream time passes the time of the key's
        oldest waiting update plus ``limit``, and only the latest is emitted, with its
        own timestamp; tombstones too. A bounded buffer that is full emits its oldest
        keys early or stops the app, as ``buffer`` says (docs/aggregations.md).

        Parameters
        ----------
        suppressed
            ``Suppressed.until_window_closes(...)`` or
            ``Suppressed.until_time_limit(...)``, optionally ``.with_name(name)``.

        Returns
        -------
        KTable
            The table of the updates that were let through.

        Examples
        --------
        >>> from datetime import timedelta
        >>> from kspark import BufferConfig, StreamsBuilder, Suppressed, TimeWindows
        >>> b = StreamsBuilder()
        >>> w = TimeWindows.of_size_and_grace(timedelta(minutes=1), timedelta(seconds=10))
        >>> counts = b.stream("clicks", key_type=str, value_type=str).group_by_key().windowed_by(w).count()
        >>> final = counts.suppress(Suppressed.until_window_closes())
        >>> final.name
        'KTABLE-SUPPRESS-0000000003'
        >>> prices = b.table("prices", key_type=str, value_type=float)
        >>> calm = prices.suppress(Suppressed.until_time_limit(
        ...     timedelta(seconds=10), BufferConfig.max_records(1000).emit_early_when_full()))
        >>> calm.node.store_name
        'KTABLE-SUPPRESS-STATE-STORE-0000000007'
        """
        from kspark.dsl.suppressed import Suppressed as _Suppressed

        if not isinstance(suppressed, _Suppressed):
            raise InvalidArgumentError(
                f"suppress takes a Suppressed, got {suppressed!r}", parameter="suppressed"
            )
        name, seq = self._builder._next("KTABLE-SUPPRESS", suppressed.name)
        if suppressed.time_limit_ms is None:
            return self._child(Suppress, name, seq, suppress_name=suppressed.name)
        # Kafka Streams names the buffer after the suppression when it is named
        store = (
            f"{suppressed.name}-store"
            if suppressed.name is not None
            else self._builder._store_name("KTABLE-SUPPRESS")
        )
        buffer = suppressed.buffer_config
        return self._child(
            SuppressTimeLimit,
            name,
            seq,
            store_name=store,
            time_limit_ms=suppressed.time_limit_ms,
            max_records=buffer.max_records_,
            max_bytes=buffer.max_bytes_,
            when_full=buffer.when_full,
            suppress_name=suppressed.name,
        )

    def filter(self, predicate: Callable[[K, V], bool], named: Named | None = None) -> KTable[K, V]:
        """Keeps the rows for which ``predicate(key, value)`` is true; others are deleted.

        Parameters
        ----------
        predicate
            A function of the key and the value.
        named
            A processor name instead of the generated one.

        Returns
        -------
        KTable
            The table of the rows that pass; a row that stops passing becomes a tombstone.

        Examples
        --------
        >>> from kspark import StreamsBuilder, Topic
        >>> b = StreamsBuilder()
        >>> t = b.table(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
        >>> t.filter(lambda k, v: v > 0).name
        'KTABLE-FILTER-0000000002'
        """
        name, seq = self._builder._next("KTABLE-FILTER", named)
        _infer.check_callable(predicate, "predicate", name)
        return self._child(n.TableFilter, name, seq, fn=predicate)

    def filter_not(
        self, predicate: Callable[[K, V], bool], named: Named | None = None
    ) -> KTable[K, V]:
        """Keeps the rows for which ``predicate(key, value)`` is false.

        Parameters
        ----------
        predicate
            A function of the key and the value.
        named
            A processor name instead of the generated one.

        Returns
        -------
        KTable
            The table of the rows that ``predicate`` rejects.

        Examples
        --------
        >>> from kspark import StreamsBuilder, Topic
        >>> b = StreamsBuilder()
        >>> t = b.table(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
        >>> t.filter_not(lambda k, v: v > 0).node.negate
        True
        """
        name, seq = self._builder._next("KTABLE-FILTER", named)
        _infer.check_callable(predicate, "predicate", name)
        return self._child(n.TableFilter, name, seq, fn=predicate, negate=True)

    @overload
    def map_values(
        self,
        mapper: Callable[[V], VR],
        named: Named | None = None,
        *,
        value_type: type[VR] | None = None,
    ) -> KTable[K, VR]: ...

    @overload
    def map_values(
        self,
        mapper: Callable[[K, V], VR],
        named: Named | None = None,
        *,
        value_type: type[VR] | None = None,
    ) -> KTable[K, VR]: ...

    def map_values(
        self,
        mapper: Callable[..., Any],
        named: Named | None = None,
        *,
        value_type: type[Any] | None = None,
    ) -> KTable[Any, Any]:
        """Maps each row's value; tombstones stay tombstones.

        Parameters
        ----------
        mapper
            ``mapper(value)``, or ``mapper(key, value)`` when it takes two parameters.
        value_type
            The new value type, when ``mapper``'s annotations do not say it.
        named
            A processor name instead of the generated one.

        Returns
        -------
        KTable
            The table with the mapped values and the same store.

        Examples
        --------
        >>> from kspark import StreamsBuilder, Topic
        >>> b = StreamsBuilder()
        >>> t = b.table(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
        >>> m = t.map_values(lambda v: v * 2, value_type=int)
        >>> m.store_name == t.store_name
        True
        """
        name, seq = self._builder._next("KTABLE-MAPVALUES", named)
        _infer.check_callable(mapper, "mapper", name)
        return self._child(
            n.TableMapValues,
            name,
            seq,
            fn=mapper,
            with_key=_infer.takes_key(mapper, 1, name, "mapper"),
            value_type=_infer.resolve(value_type, _infer.return_hint(mapper), name, "value_type"),
        )

    # -- re-grouping (KGroupedTable, below) -------------------------------------------
    def group_by(
        self,
        selector: Callable[[K, V], tuple[KR, VR]],
        grouped: Grouped | None = None,
        *,
        key_type: type[KR] | None = None,
        value_type: type[VR] | None = None,
    ) -> KGroupedTable[KR, VR]:
        """Re-groups the table's rows by ``selector(key, value)``, a ``(group key,
        value)`` pair, for ``count``, ``reduce`` or ``aggregate`` per group (see
        :class:`~kspark.KGroupedTable`).

        Every update of this table moves its row: its old value leaves the group the
        old selection named, its new value joins the group the new one names. A pair
        whose group key or value is None joins no group (dropped and counted).

        Parameters
        ----------
        selector
            A function of the key and the value that returns the ``(group key, value)``.
        grouped
            The grouping's name (``Grouped.as_(name)``): the re-keying processor's.
        key_type, value_type
            The group key's and the selected value's types, when the selector's return
            annotation ``tuple[KR, VR]`` does not say them.

        Returns
        -------
        KGroupedTable
            The grouped table; its aggregation starts a new sub-topology, as Kafka
            Streams' repartition topic does.

        Examples
        --------
        >>> import dataclasses
        >>> from kspark import StreamsBuilder
        >>> @dataclasses.dataclass
        ... class Customer:
        ...     name: str
        ...     region: str
        >>> b = StreamsBuilder()
        >>> customers = b.table("customers", key_type=str, value_type=Customer)
        >>> by_region = customers.group_by(
        ...     lambda k, c: (c.region, c), key_type=str, value_type=Customer
        ... )
        >>> counts = by_region.count()
        >>> counts.node.parent.name, counts.node.repartitions
        ('KTABLE-SELECT-0000000002', True)
        """
        if grouped is not None and not isinstance(grouped, Grouped):
            raise InvalidArgumentError(
                f"grouped must be a Grouped, got {grouped!r}", parameter="grouped"
            )
        grouped_name = grouped.name if grouped is not None else None
        node = agg.table_group_by(
            self._builder, self._node, selector, grouped_name, key_type, value_type
        )
        return KGroupedTable(self._builder, node)

    # -- table-table joins (kspark.dsl.streamjoin) ------------------------------------
    @overload
    def join(
        self,
        other: KTable[K, VO],
        joiner: Callable[[V, VO], VR],
        named: Named | str | None = None,
        materialized: Materialized | None = None,
        *,
        value_type: type[VR] | None = None,
    ) -> KTable[K, VR]: ...

    @overload
    def join(
        self,
        other: KTable[K, VO],
        joiner: Callable[[K, V, VO], VR],
        named: Named | str | None = None,
        materialized: Materialized | None = None,
        *,
        value_type: type[VR] | None = None,
    ) -> KTable[K, VR]: ...

    @overload
    def join(
        self,
        other: KTable[KO, VO],
        foreign_key_extractor: Callable[..., KO | None],
        joiner: Callable[[V, VO], VR],
        /,
        *,
        value_type: type[VR] | None = None,
    ) -> KTable[K, VR]: ...

    @overload
    def join(
        self,
        other: KTable[KO, VO],
        *,
        foreign_key_extractor: Callable[..., KO | None],
        joiner: Callable[[V, VO], VR],
        named: Named | str | None = None,
        materialized: Materialized | None = None,
        value_type: type[VR] | None = None,
    ) -> KTable[K, VR]: ...

    def join(
        self,
        other: KTable[Any, Any],
        joiner: Callable[..., Any] | None = None,
        named: Named | str | Callable[..., Any] | None = None,
        materialized: Materialized | Named | str | None = None,
        *,
        value_type: type[Any] | None = None,
        foreign_key_extractor: Callable[..., Any] | None = None,
    ) -> KTable[Any, Any]:
        """Joins this table with ``other`` on the key (Kafka Streams' ``KTable#join``),
        or on a foreign key (KIP-213) given ``foreign_key_extractor``.

        Each update of either table whose key has a value in both gives the key's new
        joined row, ``joiner(value, other_value)``; a delete on either side deletes the
        joined row (a tombstone). Both tables are co-partitioned by key.

        A foreign-key join, ``join(other, foreign_key_extractor, joiner)``, joins each
        value of this table with ``other``'s value of the key
        ``foreign_key_extractor(value)`` (or ``(key, value)``) gives it; ``other`` may
        have another key type and partitioning. The result is keyed by this table's key;
        a change of a value's foreign key retracts its old result, and results are never
        emitted out of order for a key (docs/joins.md has the table of which change emits
        what).

        Parameters
        ----------
        other
            The other table, from the same builder, with this table's key type (a
            foreign-key join: any key type).
        joiner
            ``joiner(value, other_value)`` or ``joiner(key, value, other_value)``.
        foreign_key_extractor
            A foreign-key join's ``extractor(value)`` or ``extractor(key, value)``: the
            key of ``other`` that a value joins; None joins nothing.
        named
            A processor name instead of the generated one.
        materialized
            The result's store name (``Materialized.as_(name)``), which
            ``app.store(name)`` reads.
        value_type
            The joined value's type, when ``joiner``'s annotations do not say it.

        Returns
        -------
        KTable
            The joined table: it can be filtered, joined, queried and streamed.

        Examples
        --------
        >>> from kspark import Materialized, StreamsBuilder
        >>> b = StreamsBuilder()
        >>> orders = b.table("orders", key_type=str, value_type=int)
        >>> limits = b.table("limits", key_type=str, value_type=int)
        >>> checked = orders.join(
        ...     limits, lambda o, lim: o <= lim, materialized=Materialized.as_("checked"),
        ...     value_type=bool,
        ... )
        >>> checked.name, checked.store_name
        ('KTABLE-MERGE-0000000004', 'checked')
        >>> customers = b.table("customers", key_type=str, value_type=str)
        >>> named = orders.join(customers, lambda o: f"c{o}", lambda o, c: f"{o}@{c}",
        ...                     value_type=str)
        >>> named.name
        'KTABLE-FK-JOIN-OUTPUT-0000000007'
        """
        return self._table_join(
            other, joiner, named, materialized, value_type, "inner", foreign_key_extractor
        )

    @overload
    def left_join(
        self,
        other: KTable[K, VO],
        joiner: Callable[[V, VO | None], VR],
        named: Named | str | None = None,
        materialized: Materialized | None = None,
        *,
        value_type: type[VR] | None = None,
    ) -> KTable[K, VR]: ...

    @overload
    def left_join(
        self,
        other: KTable[K, VO],
        joiner: Callable[[K, V, VO | None], VR],
        named: Named | str | None = None,
        materialized: Materialized | None = None,
        *,
        value_type: type[VR] | None = None,
    ) -> KTable[K, VR]: ...

    @overload
    def left_join(
        self,
        other: KTable[KO, VO],
        foreign_key_extractor: Callable[..., KO | None],
        joiner: Callable[[V, VO | None], VR],
        /,
        *,
        value_type: type[VR] | None = None,
    ) -> KTable[K, VR]: ...

    @overload
    def left_join(
        self,
        other: KTable[KO, VO],
        *,
        foreign_key_extractor: Callable[..., KO | None],
        joiner: Callable[[V, VO | None], VR],
        named: Named | str | None = None,
        materialized: Materialized | None = None,
        value_type: type[VR] | None = None,
    ) -> KTable[K, VR]: ...

    def left_join(
        self,
        other: KTable[Any, Any],
        joiner: Callable[..., Any] | None = None,
        named: Named | str | Callable[..., Any] | None = None,
        materialized: Materialized | Named | str | None = None,
        *,
        value_type: type[Any] | None = None,
        foreign_key_extractor: Callable[..., Any] | None = None,
    ) -> KTable[Any, Any]:
        """Like :meth:`join`, but every key of this table has a joined row:
        ``joiner(value, None)`` while ``other`` has no value for it (Kafka Streams'
        ``KTable#leftJoin``). A delete in ``other`` gives ``joiner(value, None)``; a
        delete in this table deletes the joined row. With ``foreign_key_extractor``, a
        foreign-key left join: a value whose foreign key is None or has no value in
        ``other`` joins None.

        Parameters
        ----------
        other
            The other table, as in :meth:`join`.
        joiner
            ``joiner(value, other_value)`` or ``joiner(key, value, other_value)``;
            ``other_value`` may be None.
        foreign_key_extractor
            A foreign-key join's extractor, as in :meth:`join`.
        named
            A processor name instead of the generated one.
        materialized
            The result's store name, as in :meth:`join`.
        value_type
            The joined value's type, when ``joiner``'s annotations do not say it.

        Returns
        -------
        KTable
            The joined table.

        Examples
        --------
        >>> from kspark import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> orders = b.table("orders", key_type=str, value_type=int)
        >>> limits = b.table("limits", key_type=str, value_type=int)
        >>> orders.left_join(limits, lambda o, lim: lim is None or o <= lim, value_type=bool).name
        'KTABLE-MERGE-0000000004'
        >>> orders.left_join(
        ...     limits, foreign_key_extractor=lambda o: "default", joiner=lambda o, lim: lim,
        ...     value_type=int,
        ... ).name
        'KTABLE-FK-JOIN-OUTPUT-0000000006'
        """
        return self._table_join(
            other, joiner, named, materialized, value_type, "left", foreign_key_extractor
        )

    @overload
    def outer_join(
        self,
        other: KTable[K, VO],
        joiner: Callable[[V | None, VO | None], VR],
        named: Named | str | None = None,
        materialized: Materialized | None = None,
        *,
        value_type: type[VR] | None = None,
    ) -> KTable[K, VR]: ...

    @overload
    def outer_join(
        self,
        other: KTable[K, VO],
        joiner: Callable[[K, V | None, VO | None], VR],
        named: Named | str | None = None,
        materialized: Materialized | None = None,
        *,
        value_type: type[VR] | None = None,
    ) -> KTable[K, VR]: ...

    def outer_join(
        self,
        other: KTable[Any, Any],
        joiner: Callable[..., Any],
        named: Named | str | None = None,
        materialized: Materialized | None = None,
        *,
        value_type: type[Any] | None = None,
    ) -> KTable[Any, Any]:
        """Joins the two tables keeping the keys of both (Kafka Streams'
        ``KTable#outerJoin``): a key with a value on either side has the joined row
        ``joiner(value, other_value)``, the missing side None; the row is deleted once
        both sides are.

        Parameters
        ----------
        other
            The other table, as in :meth:`join`.
        joiner
            ``joiner(value, other_value)`` or ``joiner(key, value, other_value)``; either
            value may be None.
        named
            A processor name instead of the generated one.
        materialized
            The result's store name, as in :meth:`join`.
        value_type
            The joined value's type, when ``joiner``'s annotations do not say it.

        Returns
        -------
        KTable
            The joined table.

        Examples
        --------
        >>> from kspark import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> a = b.table("a", key_type=str, value_type=int)
        >>> c = b.table("c", key_type=str, value_type=int)
        >>> a.outer_join(c, lambda x, y: (x or 0) + (y or 0), "sum", value_type=int).name
        'sum'
        """
        return self._table_join(other, joiner, named, materialized, value_type, "outer")

    def _table_join(
        self,
        other: KTable[Any, Any],
        joiner: Callable[..., Any] | None,
        named: Named | str | Callable[..., Any] | None,
        materialized: Materialized | Named | str | None,
        value_type: type[Any] | None,
        mode: streamjoin.JoinMode,
        extractor: Callable[..., Any] | None = None,
    ) -> KTable[Any, Any]:
        """A same-key join, or a foreign-key join: given ``foreign_key_extractor=``, or
        positionally as ``(other, foreign_key_extractor, joiner)`` (then ``named`` and
        ``materialized`` go by keyword, with ``foreign_key_extractor=``)."""
        if extractor is None and callable(named):
            if materialized is not None:
                raise InvalidArgumentError(
                    f"{mode} join of {self.name}: a foreign-key join takes named= and "
                    "materialized= with foreign_key_extractor= and joiner= by keyword"
                )
            extractor, joiner, named = joiner, named, None
        if joiner is None:
            raise InvalidArgumentError(f"{mode} join of {self.name}: a joiner is required")
        if not isinstance(other, KTable):
            what = "a table" if extractor is None else "a foreign-key join"
            raise InvalidArgumentError(
                f"{mode} join of {self.name}: {what} joins a KTable, got {type(other).__name__}",
                parameter="other",
            )
        if isinstance(materialized, Named | str) or callable(named):
            raise InvalidArgumentError(
                f"{mode} join of {self.name}: pass named= and materialized= by keyword"
            )
        if extractor is not None:
            if mode == "outer":
                raise InvalidArgumentError(
                    f"outer join of {self.name}: a foreign-key join is inner or left"
                )
            fk_mode: Literal["inner", "left"] = "inner" if mode == "inner" else "left"
            fk = streamjoin.foreign_key_join(
                self, other, extractor, joiner, named, materialized, value_type, fk_mode
            )
            return KTable(self._builder, fk)
        node = streamjoin.table_join(self, other, joiner, named, materialized, value_type, mode)
        return KTable(self._builder, node)

    @overload
    def to_stream(self, named: Named | None = None, /) -> KStream[K, V]: ...
    @overload
    def to_stream(self, *, named: Named | None = None) -> KStream[K, V]: ...
    @overload
    def to_stream(
        self,
        mapper: Callable[[K, V], KR],
        named: Named | None = None,
        *,
        key_type: type[KR] | None = None,
    ) -> KStream[KR, V]: ...
    def to_stream(
        self,
        mapper: Callable[..., Any] | Named | None = None,
        named: Named | None = None,
        *,
        key_type: type[Any] | None = None,
    ) -> KStream[Any, Any]:
        """The table's changelog as a stream; deletes appear with value None.

        Parameters
        ----------
        mapper
            ``mapper(key, value)`` gives each record's new key (Kafka Streams'
            ``toStream(KeyValueMapper)``), for example the plain key of a windowed
            table's ``Windowed`` key. A ``Named`` here names the processor.
        named
            A processor name instead of the generated one.
        key_type
            The new key's type, when ``mapper``'s annotations do not say it.

        Returns
        -------
        KStream
            One record per update of the table.

        Examples
        --------
        >>> from kspark import StreamsBuilder, Topic
        >>> b = StreamsBuilder()
        >>> t = b.table(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
        >>> t.to_stream().name
        'KTABLE-TOSTREAM-0000000002'
        """
        if isinstance(mapper, Named):
            mapper, named = None, mapper
        name, seq = self._builder._next("KTABLE-TOSTREAM", named)
        stream: KStream[Any, Any] = KStream(
            self._builder, _after(self._node, n.ToStream, name, seq)
        )
        if mapper is None:
            return stream
        return stream.select_key(mapper, key_type=key_type)


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
        node = agg.table_aggregate(
            self._builder, self._node, op, prefix, named, materialized, value_type=value_type, **fns
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
        return self._table("count", "KTABLE-AGGREGATE", named, materialized, value_type=_INT_TYPE)

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
