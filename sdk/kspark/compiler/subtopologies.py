"""Sub-topologies: internal topics between stateful operators.

Spark runs one ``applyInPandasWithState`` in a streaming query, and kspark groups
every stateful operator of an app in it (docs/design/sub-topologies.md). So no operator
may read another's output in the same micro-batch: as Kafka Streams cuts a topology into
sub-topologies at its repartition topics, :func:`cut` puts an *internal topic* after
the operators whose output the query cannot read in the same pass. Their records are
written to the topic by the query's own sink, in its batch folder, when the micro-batch
commits; what read them reads the topic as one more source, in a later micro-batch. The
topics are Parquet folders under the app's checkpoint (:data:`INTERNAL_DIR`), on a path
every executor sees. Keys and values keep their Spark columns there; a dynamic one (no
declared type) is the JSON text it travels as between stages, in a ``string`` column.
"""

from __future__ import annotations

import os
from collections.abc import Callable

import attrs

from kspark.errors import CompilationError
from kspark.plan import fkjoin, graph
from kspark.plan import nodes as n
from kspark.plan.grouped import Aggregate, RegroupedSource, Suppress, TableGroupBy, change_type
from kspark.plan.topics import TopicSpec
from kspark.plan.topology import Topology

__all__ = ["INTERNAL_DIR", "cut", "internal_topics"]

#: The folder of an app's internal topics, under its ``checkpoint_dir``.
INTERNAL_DIR = "internal-topics"

#: Marks a topic as an internal topic: the runtime reads it again until it is drained.
INTERNAL_OPTION = "kspark.internal"


def internal_topics(topology: Topology) -> tuple[TopicSpec, ...]:
    """The internal topics that :func:`cut` added to ``topology``."""
    return tuple(
        s.topic
        for s in topology.sinks
        if s.topic is not None and (INTERNAL_OPTION, "true") in s.topic.options
    )


def cut(
    topology: Topology, stateful: set[str], checkpoint_dir: str, application_id: str
) -> Topology:
    """``topology`` with internal topics where ONE ``applyInPandasWithState`` cannot run
    the ``stateful`` processors (those that run as a stateful operator) in one pass.

    Spark refuses a plan in which the operator appears twice, and a plan that reads its
    output along two paths holds it twice (Spark Connect sends a tree). So with two or
    more operators, every operator's output leaves the query through an internal topic
    (the query reads the operator's output once, as the rows of those topics' sinks), and
    whatever read that output (a sink, stateless steps, another operator) reads the
    topic, in a later micro-batch. A foreign-key join's stages are operators of their
    own (:func:`kspark.plan.fkjoin.expand`). Unchanged with fewer than two operators.

    Raises
    ------
    CompilationError
        For an output kspark cannot put in a topic: one whose key or value has no type
        description at all (a dynamic one goes as its JSON text), or one read as a
        global table.
    """
    whole = topology
    # a foreign-key join is three operators: its stages, as plan nodes, cross topics too
    topology = fkjoin.expand(topology)
    nodes = topology.nodes()
    ops = [_output_node(topology, node) for node in nodes if node.name in stateful]
    if len(ops) < 2:
        return whole
    crossing = {op.name for op in ops}
    sinks: list[n.Sink] = []
    sources: dict[tuple[str, bool], n.Node] = {}
    counter = [max((node.seq for node in nodes), default=0)]

    def remap(node: n.Node, new: Callable[[n.Node], n.Node]) -> n.Node:
        changes: dict[str, object] = {}
        for a in attrs.fields(type(node)):
            value = getattr(node, a.name)
            if isinstance(value, n.Node):
                if value.name in crossing:
                    changes[a.name] = _source(node, a.name, value, new(value))
                else:
                    changes[a.name] = new(value)
            elif isinstance(value, tuple) and value and all(isinstance(v, n.Node) for v in value):
                changes[a.name] = tuple(
                    _source(node, a.name, v, new(v)) if v.name in crossing else new(v)
                    for v in value
                )
        return attrs.evolve(node, **changes)  # type: ignore[arg-type]

    def _topic(op: n.Node, made: n.Node) -> TopicSpec:
        name = f"{application_id}-{op.name}-internal"
        topic = attrs.evolve(
            TopicSpec.parquet(name, os.path.join(checkpoint_dir, INTERNAL_DIR, op.name)),
            options=(("kspark.ordered", "true"), (INTERNAL_OPTION, "true")),
        )
        if not any(s.topic_name == name for s in sinks):
            # a dynamic key or value (Dynamic) crosses as the JSON text it travels as
            # between stages: the topic's column is a string, as in the query
            for what, t in (("key", made.key_type), ("value", made.value_type)):
                if t is None:
                    _refuse(
                        op,
                        f"the {what} type of its records is not known, and they cross an "
                        f"internal topic: declare it ({what}_type=...)",
                    )
            counter[0] += 1
            value_type = made.value_type
            if isinstance(op, TableGroupBy) and value_type is not None:
                # a re-grouped table's records are the changes of its groups
                value_type = change_type(value_type)
            sinks.append(
                n.Sink(
                    name=f"{op.name}-INTERNAL-SINK",
                    key_type=made.key_type,
                    value_type=value_type,
                    topic_name=name,
                    topic=topic,
                    parent=made,
                    seq=counter[0],
                )
            )
        return topic

    def _source(reader: n.Node, edge: str, op: n.Node, made: n.Node) -> n.Node:
        table = isinstance(reader, n.StreamTableJoin) and edge == "table"
        if table and isinstance(reader, n.StreamGlobalTableJoin):
            _refuse(op, f"{reader.name} reads its output as a global table")
        found = sources.get((op.name, table))
        if found is not None:
            return found
        topic = _topic(op, made)
        common: dict[str, object] = {
            "name": f"{op.name}-INTERNAL-{'TABLE-SOURCE' if table else 'SOURCE'}",
            "key_type": made.key_type,
            "value_type": made.value_type,
            "topic_name": topic.name,
            "topic": topic,
            # a source has no parents: any seq before its readers' will do
            "seq": -len(sources) - 1,
        }
        if table:
            assert isinstance(reader, n.StreamTableJoin)
            src: n.Node = n.TableSource(store_name=reader.store_name, **common)  # type: ignore[arg-type]
        elif isinstance(op, TableGroupBy):
            # the aggregation reads the subtract/add pairs of the groups a row leaves and
            # joins, as from Kafka Streams' repartition topic after KTable#groupBy
            src = RegroupedSource(**common)  # type: ignore[arg-type]
        else:
            src = n.Source(**common)  # type: ignore[arg-type]
        sources[(op.name, table)] = src
        return src

    new = graph.map_nodes(topology._roots(), lambda x: x.parents, remap)
    out_sinks = tuple(new(s) for s in topology.sinks)
    out_ends: list[n.Node] = []
    for e in topology.ends:
        if e.name in crossing:
            # a table only queried through its store: its records go to its topic
            _topic(e, new(e))
        else:
            out_ends.append(new(e))
    return Topology(sinks=(*out_sinks, *sinks), ends=tuple(out_ends))  # type: ignore[arg-type]


def _output_node(topology: Topology, op: n.Node) -> n.Node:
    """The node whose records are stateful operator ``op``'s output: its suppression, for
    a windowed aggregation that holds its windows back until they close (the suppression
    runs inside the aggregation's operator, its only reader); ``op`` itself otherwise."""
    if isinstance(op, Aggregate):
        readers = topology.children().get(op.name, [])
        if len(readers) == 1:
            found = [x for x in topology.nodes() if x.name == readers[0]]
            if found and isinstance(found[0], Suppress):
                return found[0]
    return op


def _refuse(node: n.Node, why: str) -> None:
    raise CompilationError(
        f"{node.name}: kspark sends the output of each stateful operator of an app with "
        "several through an internal topic, and this one's cannot go: "
        f"{why}. Split the topology into apps joined by a topic of your own",
        processor=node.name,
    )
