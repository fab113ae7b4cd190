"""Global tables (``StreamsBuilder.global_table``) and the stream-global-table join rule
(``KStream.join(global_table, key_selector, joiner)``: :mod:`kspark.dsl.streams` holds
the methods and their typed overloads and wraps the node the rule returns; the rule sees
the stream and its builder through the protocols of :mod:`kspark.dsl._building`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from kspark.dsl import _infer
from kspark.dsl.options import Named
from kspark.dsl.streamjoin import same_builder
from kspark.errors import InvalidArgumentError
from kspark.plan import nodes as n

if TYPE_CHECKING:
    from kspark.dsl._building import Builder, Node
    from kspark.dsl.streamjoin import JoinMode

__all__ = ["GlobalKTable", "stream_global_join"]

K = TypeVar("K")
V = TypeVar("V")

#: Processor name prefixes, as Kafka Streams names a stream-global-table join.
_PREFIX = {"inner": "KSTREAM-JOIN", "left": "KSTREAM-LEFTJOIN"}


class GlobalKTable(Generic[K, V]):
    """A table that streams join on a key they pick from each record, whatever their own
    key and partitioning (Kafka Streams' ``GlobalKTable``).

    Build one with :meth:`StreamsBuilder.global_table`; join it with
    ``KStream.join(table, key_selector, joiner)`` or ``left_join``. A stream record joins
    the table's latest value for ``key_selector(key, value)`` as of when it is processed,
    and keeps its own key (docs/joins.md, "Global tables").

    Examples
    --------
    >>> from kspark import Materialized, StreamsBuilder
    >>> b = StreamsBuilder()
    >>> rates = b.global_table("rates", key_type=str, value_type=float,
    ...                        materialized=Materialized.as_("rates"))
    >>> rates.store_name
    'rates'
    """

    __slots__ = ("_builder", "_node")

    def __init__(self, builder: Builder, node: n.GlobalTableSource) -> None:
        # not added to the builder's processors: a global table is part of the topology
        # through the joins that read it, each of which keeps its own copy
        self._builder = builder
        self._node = node

    @property
    def node(self) -> n.GlobalTableSource:
        """The plan node of the table's source."""
        return self._node

    @property
    def name(self) -> str:
        """The name of the table's source processor."""
        return self._node.name

    @property
    def store_name(self) -> str:
        """The name of the store that a join against this table keeps (Kafka Streams'
        ``queryableStoreName``): ``app.store(store_name)`` reads it."""
        return self._node.store_name


def stream_global_join(
    this: Node,
    table: GlobalKTable[Any, Any],
    key_selector: Callable[..., Any],
    joiner: Callable[..., Any],
    named: object,
    value_type: type[Any] | None,
    mode: JoinMode,
) -> n.StreamGlobalTableJoin:
    """The plan node of ``this.join(table, key_selector, joiner)`` (``mode`` "inner") or
    ``left_join``."""
    if named is not None and not isinstance(named, Named | str):
        raise InvalidArgumentError(
            f"a global-table join takes a Named (or a name) after the joiner, got {named!r}",
            parameter="named",
        )
    builder = this._builder
    name, seq = builder._next(_PREFIX[mode], named)
    same_builder(builder, table._builder, name, "the global table")
    _infer.check_callable(key_selector, "key_selector", name)
    _infer.check_callable(joiner, "joiner", name)
    if _infer.positional_arity(key_selector) not in (None, 2):
        raise InvalidArgumentError(
            f"{name}: key_selector takes (key, value) and gives the table key",
            processor=name,
            parameter="key_selector",
        )
    source = table.node
    # a second join against the table keeps a store of its own, as for a KTable
    store = source.store_name
    if store in builder._join_stores:
        store = f"{store}-{name}"
    builder._join_stores.add(store)
    return n.StreamGlobalTableJoin(
        name=name,
        seq=seq,
        stream=this.node,
        table=source,
        key_selector=key_selector,
        joiner=joiner,
        joiner_with_key=_infer.takes_key(joiner, 2, name, "joiner"),
        left=mode == "left",
        store_name=store,
        key_type=this.node.key_type,
        value_type=_infer.resolve(value_type, _infer.return_hint(joiner), name, "value_type"),
    )
