"""The aggregation DSL rules: the nodes that grouped streams, grouped tables and
cogrouped streams add (``count``, ``reduce``, ``aggregate``, ``KTable.group_by`` and
``cogroup``). :mod:`kspark.dsl.grouped` holds the typed classes and wraps the nodes these
rules return; the rules see the builder and the grouped streams through the protocols of
:mod:`kspark.dsl._building`."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

from kspark.dsl import _infer
from kspark.dsl.options import Materialized, Named
from kspark.errors import InvalidArgumentError, InvalidTopologyError
from kspark.plan import graph
from kspark.plan import nodes as n
from kspark.plan.grouped import (
    Aggregate,
    CogroupAggregate,
    CogroupInput,
    SessionWindowsDef,
    SlidingWindowsDef,
    TableGroupBy,
    TimeWindowsDef,
    windowed_type,
)
from kspark.plan.types import DYNAMIC, Dynamic

if TYPE_CHECKING:
    from kspark.dsl._building import Builder, Grouping

__all__ = [
    "add_cogrouped",
    "aggregate",
    "cogroup_aggregate",
    "key_changed",
    "store_name",
    "table_aggregate",
    "table_group_by",
]

#: the windows of a windowed aggregation (None: per key)
Windows = TimeWindowsDef | SessionWindowsDef | SlidingWindowsDef | None

#: one grouped stream of a cogroup and its aggregator
Part = tuple["Grouping", Callable[..., Any]]
G = TypeVar("G", bound="Grouping")

_COGROUP_AGG = "COGROUPKSTREAM-AGGREGATE"
_COGROUP_MERGE = "COGROUPKSTREAM-MERGE"


def store_name(builder: Builder, materialized: Materialized | None, prefix: str) -> str:
    """The store of an aggregation: ``materialized``'s name, or a generated one."""
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


def aggregate(
    grouping: Grouping,
    op: str,
    prefix: str,
    named: Named | None,
    materialized: Materialized | None,
    *,
    windows: Windows,
    emit_on_close: bool,
    value_type: Any,
    **fns: Any,
) -> Aggregate:
    """The node of a grouped stream's ``count``, ``reduce`` or ``aggregate`` (``op``),
    per key or per window; ``fns`` are its functions, by field name."""
    builder = grouping._builder
    # Kafka Streams names the store before the processor
    store = store_name(builder, materialized, prefix)
    name, seq = builder._next(prefix, named)
    for what, fn in fns.items():
        _infer.check_callable(fn, what, name)
    key = grouping._node.key_type or DYNAMIC
    return Aggregate(
        name=name,
        seq=seq,
        parent=grouping._node,
        op=op,
        store_name=store,
        windows=windows,
        emit_on_close=emit_on_close,
        retention_ms=0 if materialized is None else materialized.retention_ms,
        repartition=grouping._repartition,
        grouped_name=grouping._grouped_name,
        key_type=windowed_type(key) if windows is not None else key,
        value_type=value_type,
        **fns,
    )


def key_changed(node: n.Node) -> bool:
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


def table_group_by(
    builder: Builder,
    parent: n.Node,
    selector: Callable[..., Any],
    grouped_name: str | None,
    key_type: Any,
    value_type: Any,
) -> TableGroupBy:
    """The node of ``KTable.group_by(selector)``: each row re-keyed by ``selector``."""
    name, seq = builder._next("KTABLE-SELECT", grouped_name)
    _infer.check_callable(selector, "selector", name)
    hk, hv = _infer.pair_hints(_infer.return_hint(selector))
    return TableGroupBy(
        name=name,
        seq=seq,
        parent=parent,
        selector=selector,
        store_name=f"{name}-STATE-STORE",
        grouped_name=grouped_name,
        key_type=_infer.resolve(key_type, hk, name, "key_type"),
        value_type=_infer.resolve(value_type, hv, name, "value_type"),
    )


def table_aggregate(
    builder: Builder,
    parent: TableGroupBy,
    op: str,
    prefix: str,
    named: Named | None,
    materialized: Materialized | None,
    *,
    value_type: Any,
    **fns: Any,
) -> Aggregate:
    """The node of a grouped table's ``count``, ``reduce`` or ``aggregate`` (``op``)."""
    store = store_name(builder, materialized, prefix)
    name, seq = builder._next(prefix, named)
    for what, fn in fns.items():
        _infer.check_callable(fn, what, name)
    return Aggregate(
        name=name,
        seq=seq,
        parent=parent,
        op=op,
        store_name=store,
        repartition=True,
        grouped_name=parent.grouped_name,
        key_type=parent.key_type or DYNAMIC,
        value_type=value_type,
        **fns,
    )


def add_cogrouped(
    parts: tuple[tuple[G, Callable[..., Any]], ...], grouped: G, aggregator: Callable[..., Any]
) -> tuple[tuple[G, Callable[..., Any]], ...]:
    """``parts`` with one more grouped stream, ``grouped``, and its aggregator (the
    caller checks that ``grouped`` is a ``KGroupedStream``)."""
    _infer.check_callable(aggregator, "aggregator", _COGROUP_AGG)
    if any(g is grouped for g, _ in parts):
        raise InvalidArgumentError(
            "this grouped stream is cogrouped already; group the stream again "
            "(group_by_key()) to aggregate its records twice",
            parameter="grouped_stream",
        )
    if parts and grouped._builder is not parts[0][0]._builder:
        raise InvalidArgumentError(
            "cogrouped streams must come from the same StreamsBuilder",
            parameter="grouped_stream",
        )
    more = (*parts, (grouped, aggregator))
    _cogroup_key_type(more)
    return more


def cogroup_aggregate(
    parts: tuple[Part, ...],
    windows: TimeWindowsDef | SessionWindowsDef | None,
    initializer: Callable[[], Any],
    named: Named | None,
    materialized: Materialized | None,
    value_type: Any,
    merger: Callable[..., Any] | None = None,
) -> CogroupAggregate:
    """The nodes of a cogrouped stream's ``aggregate``: one input per grouped stream,
    which the builder keeps, and the aggregation that merges them (returned)."""
    if named is not None and not isinstance(named, Named):
        raise InvalidArgumentError(f"named must be a Named, got {named!r}", parameter="named")
    builder = parts[0][0]._builder
    _infer.check_callable(initializer, "initializer", _COGROUP_MERGE)
    if merger is not None:
        _infer.check_callable(merger, "merger", _COGROUP_MERGE)
    # Kafka Streams names the store first, then each input's processor, then the merge
    store = store_name(builder, materialized, _COGROUP_AGG)
    key = _cogroup_key_type(parts)
    inputs: list[CogroupInput] = []
    for i, (grouped, aggregator) in enumerate(parts):
        name, seq = builder._next(
            _COGROUP_AGG, None if named is None else f"{named.name}-cogroup-agg-{i}"
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
    name, seq = builder._next(
        _COGROUP_MERGE, None if named is None else f"{named.name}-cogroup-merge"
    )
    hints = [_infer.return_hint(a) for _, a in parts] + [_infer.return_hint(initializer)]
    hint = next((h for h in hints if h is not None), None)
    return CogroupAggregate(
        name=name,
        seq=seq,
        parent=inputs[0],
        more=tuple(inputs[1:]),
        op="aggregate",
        initializer=initializer,
        aggregator=parts[0][1],
        merger=merger,
        store_name=store,
        windows=windows,
        retention_ms=0 if materialized is None else materialized.retention_ms,
        key_type=windowed_type(key) if windows is not None else key,
        value_type=_infer.resolve(value_type, hint, name, "value_type"),
    )


def _cogroup_key_type(parts: tuple[Part, ...]) -> Any:
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
