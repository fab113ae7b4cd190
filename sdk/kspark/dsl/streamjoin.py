"""The join DSL rules: the nodes that ``KStream.join``, ``left_join`` and ``outer_join``
add, a stream-table join when their second argument is a table and a stream-stream join
when it is a stream, and the nodes of the table-table joins (:mod:`kspark.dsl.streams`
holds the methods and their typed overloads, and wraps the nodes these rules return; the
rules see streams and tables through the protocols of :mod:`kspark.dsl._building`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Literal

from kspark.dsl import _infer
from kspark.dsl.joinwindows import JoinWindows, StreamJoined
from kspark.dsl.options import Joined, Materialized, Named, to_ms
from kspark.errors import InvalidArgumentError, InvalidTopologyError
from kspark.plan import nodes as n
from kspark.plan.types import DYNAMIC, Dynamic, TypeDesc

if TYPE_CHECKING:
    from kspark.dsl._building import Builder, Node, TableNode

__all__ = ["foreign_key_join", "same_builder", "stream_join", "stream_table_join", "table_join"]

JoinMode = Literal["inner", "left", "outer"]

#: Processor name prefixes, as Kafka Streams names the join's (merge) processor.
_PREFIX = {"inner": "KSTREAM-JOIN", "left": "KSTREAM-LEFTJOIN", "outer": "KSTREAM-OUTERJOIN"}


def _key_type(this: n.Node, other: n.Node, name: str, mismatch: str) -> TypeDesc:
    """The join's key type. A dynamic key on one side is converted to the other side's
    declared key type; two declared key types must be equal (``mismatch`` is the error,
    formatted with both)."""
    mine, theirs = this.key_type or DYNAMIC, other.key_type or DYNAMIC
    if not isinstance(mine, Dynamic) and not isinstance(theirs, Dynamic) and mine != theirs:
        raise InvalidTopologyError(
            f"{name}: " + mismatch.format(mine.display(), theirs.display()), processor=name
        )
    return theirs if isinstance(mine, Dynamic) else mine


def same_builder(builder: Builder, theirs: Builder, name: str, what: str) -> None:
    """Refuse a join whose other input, ``what``, comes from another builder."""
    if theirs is not builder:
        raise InvalidTopologyError(
            f"{name}: {what} comes from another StreamsBuilder", processor=name
        )


def stream_table_join(
    this: Node,
    table: TableNode,
    joiner: Callable[..., Any],
    joined: Joined | None,
    value_type: type[Any] | None,
    mode: JoinMode,
) -> n.StreamTableJoin:
    """The plan node of ``this.join(table, ...)`` (``mode`` "inner") or ``left_join``."""
    builder = this._builder
    opts = joined or Joined()
    name, seq = builder._next(_PREFIX[mode], opts.name)
    same_builder(builder, table._builder, name, "the table")
    _infer.check_callable(joiner, "joiner", name)
    source = table._source()
    if opts.grace_period is not None and not source.versioned:
        raise InvalidTopologyError(
            f"{name}: Joined.with_grace_period needs a versioned table; materialize "
            f"{source.name} with Materialized.as_versioned(...)",
            processor=name,
        )
    key_type = _key_type(
        this.node,
        table.node,
        name,
        "stream key type {} differs from table key type {}; select_key the stream first",
    )
    # two joins against one table each keep a store of their own; so does a join against
    # an aggregated table, whose store the aggregation owns (the join keeps its own copy
    # of the table's latest values, fed by the table's updates)
    store = source.store_name
    if store in builder._join_stores or source.stores():
        store = f"{store}-{name}"
    builder._join_stores.add(store)
    return n.StreamTableJoin(
        name=name,
        seq=seq,
        stream=this.node,
        table=table.node,
        joiner=joiner,
        joiner_with_key=_infer.takes_key(joiner, 2, name, "joiner"),
        left=mode == "left",
        store_name=store,
        versioned=source.versioned,
        history_retention_ms=source.history_retention_ms,
        grace_ms=to_ms(opts.grace_period, "grace_period") if opts.grace_period else 0,
        key_type=key_type,
        value_type=_infer.resolve(value_type, _infer.return_hint(joiner), name, "value_type"),
    )


def stream_join(
    this: Node,
    other: Node,
    joiner: Callable[..., Any],
    windows: object,
    stream_joined: StreamJoined | Named | None,
    value_type: type[Any] | None,
    mode: JoinMode,
) -> n.StreamStreamJoin:
    """The plan node of ``this.<mode>_join(other, joiner, windows, stream_joined)``."""
    builder = this._builder
    opts = stream_joined if stream_joined is not None else StreamJoined()
    if isinstance(opts, Named):
        opts = StreamJoined(name=opts.name)
    if not isinstance(opts, StreamJoined):
        raise InvalidArgumentError(
            f"stream_joined must be a StreamJoined or Named, got {opts!r}",
            parameter="stream_joined",
        )
    name, seq = builder._next(_PREFIX[mode], opts.name)
    if not isinstance(windows, JoinWindows):
        raise InvalidArgumentError(
            f"{name}: a stream-stream join needs JoinWindows (for example "
            "JoinWindows.of_time_difference_with_no_grace(timedelta(minutes=5))), got "
            f"{windows!r}",
            processor=name,
            parameter="windows",
        )
    same_builder(builder, other._builder, name, "the other stream")
    _infer.check_callable(joiner, "joiner", name)
    key_type = _key_type(
        this.node,
        other.node,
        name,
        "the streams' key types differ ({} and {}); select_key one of them first",
    )
    return n.StreamStreamJoin(
        name=name,
        seq=seq,
        left=this.node,
        right=other.node,
        joiner=joiner,
        joiner_with_key=_infer.takes_key(joiner, 2, name, "joiner"),
        mode=mode,
        before_ms=windows.before_ms,
        after_ms=windows.after_ms,
        grace_ms=windows.grace_ms,
        store_name=opts.store_name or builder._store_name(_PREFIX[mode]),
        key_type=key_type,
        value_type=_infer.resolve(value_type, _infer.return_hint(joiner), name, "value_type"),
    )


#: Processor name prefixes of table-table joins (Kafka Streams' merge processor's).
_TABLE_PREFIX = "KTABLE-MERGE"


def table_join(
    this: TableNode,
    other: TableNode,
    joiner: Callable[..., Any],
    named: Named | str | None,
    materialized: Materialized | None,
    value_type: type[Any] | None,
    mode: JoinMode,
) -> n.TableTableJoin:
    """The plan node of ``this.<mode>_join(other, joiner)``, two tables on the same key
    (the caller checks that ``other`` is a ``KTable``)."""
    builder = this._builder
    name, seq = builder._next(_TABLE_PREFIX, named)
    same_builder(builder, other._builder, name, "the other table")
    _infer.check_callable(joiner, "joiner", name)
    for side in (this, other):
        if side._source().versioned:
            raise InvalidTopologyError(
                f"{name}: {side._source().name} is a versioned table; a table-table join "
                "reads latest-value tables (materialize it with Materialized.as_(...))",
                processor=name,
            )
    mat = materialized or Materialized()
    if mat.versioned:
        raise InvalidTopologyError(
            f"{name}: a table-table join's result is a latest-value table; use "
            "Materialized.as_(name)",
            processor=name,
        )
    key_type = _key_type(
        this.node,
        other.node,
        name,
        "the tables' key types differ ({} and {}); a same-key join needs one key type",
    )
    return n.TableTableJoin(
        name=name,
        seq=seq,
        left=this.node,
        right=other.node,
        joiner=joiner,
        joiner_with_key=_infer.takes_key(joiner, 2, name, "joiner"),
        mode=mode,
        store_name=mat.store_name or builder._store_name(_TABLE_PREFIX),
        key_type=key_type,
        value_type=_infer.resolve(value_type, _infer.return_hint(joiner), name, "value_type"),
    )


#: Processor name prefix of foreign-key joins (Kafka Streams' result processor's).
_FK_PREFIX = "KTABLE-FK-JOIN-OUTPUT"


def foreign_key_join(
    this: TableNode,
    other: TableNode,
    extractor: Callable[..., Any],
    joiner: Callable[..., Any],
    named: Named | str | None,
    materialized: Materialized | None,
    value_type: type[Any] | None,
    mode: Literal["inner", "left"],
) -> n.ForeignKeyJoin:
    """The plan node of ``this.<mode>_join(other, extractor, joiner)``: each left value
    joins ``other``'s value of the key ``extractor`` gives it (KIP-213; the caller checks
    that ``other`` is a ``KTable``)."""
    builder = this._builder
    name, seq = builder._next(_FK_PREFIX, named)
    same_builder(builder, other._builder, name, "the other table")
    _infer.check_callable(extractor, "foreign_key_extractor", name)
    _infer.check_callable(joiner, "joiner", name)
    for side in (this, other):
        if side._source().versioned:
            raise InvalidTopologyError(
                f"{name}: {side._source().name} is a versioned table; a foreign-key join "
                "reads latest-value tables (materialize it with Materialized.as_(...))",
                processor=name,
            )
    mat = materialized or Materialized()
    if mat.versioned:
        raise InvalidTopologyError(
            f"{name}: a foreign-key join's result is a latest-value table; use "
            "Materialized.as_(name)",
            processor=name,
        )
    return n.ForeignKeyJoin(
        name=name,
        seq=seq,
        left=this.node,
        right=other.node,
        extractor=extractor,
        extractor_with_key=_infer.takes_key(extractor, 1, name, "foreign_key_extractor"),
        joiner=joiner,
        joiner_with_key=_infer.takes_key(joiner, 2, name, "joiner"),
        mode=mode,
        store_name=mat.store_name or builder._store_name(_FK_PREFIX),
        key_type=this.node.key_type,
        value_type=_infer.resolve(value_type, _infer.return_hint(joiner), name, "value_type"),
    )
