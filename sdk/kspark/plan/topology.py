"""A built topology: the plan DAG from its sources to its sinks, and ``describe()``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import attrs

from kspark._typing import TopicRole
from kspark.errors import InvalidTopologyError
from kspark.plan import graph, render
from kspark.plan.nodes import (
    DynamicSink,
    Foreach,
    Node,
    Print,
    Sink,
    Source,
    StreamStreamJoin,
    StreamTableJoin,
    TableSource,
    TopicSpec,
)
from kspark.plan.processing import is_global_source
from kspark.plan.types import TypeDesc

#: The ends that are a stream's output as a sink is: the topology needs one of them or a sink.
_OUTPUTS = (Foreach, Print, DynamicSink)

__all__ = ["Topology"]


def _parents(node: Node) -> tuple[Node, ...]:
    return node.parents


@attrs.frozen(kw_only=True)
class Topology:
    """An immutable, validated topology, made by :meth:`kspark.StreamsBuilder.build`.

    Examples
    --------
    >>> from kspark import StreamsBuilder
    >>> b = StreamsBuilder()
    >>> b.stream("in", key_type=str, value_type=int).filter(lambda k, v: v > 0).to("out")
    >>> print(b.build().describe())  # doctest: +NORMALIZE_WHITESPACE
    Topologies:
       Sub-topology: 0
        Source: KSTREAM-SOURCE-0000000000 (topics: [in])
          --> KSTREAM-FILTER-0000000001
        Processor: KSTREAM-FILTER-0000000001 (stores: [])
          --> KSTREAM-SINK-0000000002
          <-- KSTREAM-SOURCE-0000000000
        Sink: KSTREAM-SINK-0000000002 (topic: out)
          <-- KSTREAM-FILTER-0000000001
    """

    sinks: tuple[Sink, ...]
    #: Processors that lead to no sink of one topic (``foreach``, ``print``,
    #: ``to(topic_extractor)``, a branch that ends in ``peek``, a table only queried
    #: through its store): they run like every other processor, and their records go
    #: nowhere after them, as in Kafka Streams.
    ends: tuple[Node, ...] = ()

    def _roots(self) -> tuple[Node, ...]:
        return (*self.sinks, *self.ends)

    def __attrs_post_init__(self) -> None:
        # a stream must end somewhere: in a topic, or in an action on each record
        if not self.sinks and not any(isinstance(e, _OUTPUTS) for e in self.ends):
            raise InvalidTopologyError(
                "the topology has no sink; end at least one stream with .to(topic) or "
                ".foreach(action)"
            )
        dupes = [n for n, c in Counter(node.name for node in self.nodes()).items() if c > 1]
        if dupes:
            raise InvalidTopologyError(
                f"processor names must be unique; used more than once: {sorted(dupes)}",
                names=sorted(dupes),
            )
        stores = [s for node in self.nodes() for s in node.stores()]
        dupe_stores = [n for n, c in Counter(stores).items() if c > 1]
        if dupe_stores:
            raise InvalidTopologyError(
                f"state store names must be unique; used more than once: {sorted(dupe_stores)}",
                stores=sorted(dupe_stores),
            )

    def nodes(self) -> tuple[Node, ...]:
        """All nodes in a deterministic topological order (parents first)."""
        return tuple(sorted(graph.toposort(self._roots(), _parents), key=lambda n: n.seq))

    def sources(self) -> tuple[Source | TableSource, ...]:
        return tuple(n for n in self.nodes() if isinstance(n, Source | TableSource))

    def node(self, name: str) -> Node:
        for n in self.nodes():
            if n.name == name:
                return n
        raise KeyError(name)

    def children(self) -> dict[str, list[str]]:
        """Processor name -> the names of the processors that read from it."""
        nodes = self.nodes()
        kids = graph.children(nodes, _parents)
        return {n.name: [c.name for c in kids[id(n)]] for n in nodes}

    def stores(self) -> dict[str, str]:
        """Store name -> the processor that owns it."""
        return {s: n.name for n in self.nodes() for s in n.stores()}

    def subtopologies(self) -> list[list[Node]]:
        """Groups of processors connected without a repartition in between."""
        nodes = self.nodes()
        parent_of: dict[str, str] = {n.name: n.name for n in nodes}

        def find(x: str) -> str:
            while parent_of[x] != x:
                parent_of[x] = parent_of[parent_of[x]]
                x = parent_of[x]
            return x

        for n in nodes:
            if n.repartitions:
                continue
            for p in n.parents:
                # a global source feeds every task and generates none of its own: it is a
                # sub-topology of its own, as Kafka Streams describes a global store
                if not is_global_source(p):
                    parent_of[find(p.name)] = find(n.name)
        groups: dict[str, list[Node]] = {}
        for n in nodes:
            groups.setdefault(find(n.name), []).append(n)
        return sorted(groups.values(), key=lambda g: g[0].seq)

    def describe(self) -> str:
        """A text description in the layout of Kafka Streams' ``Topology.describe()``.

        A repartition starts a new sub-topology, as a repartition topic does in Kafka
        Streams.

        Examples
        --------
        >>> from datetime import timedelta
        >>> from kspark import StreamsBuilder
        >>> b = StreamsBuilder()
        >>> (
        ...     b.stream("clicks", key_type=str, value_type=int)
        ...     .select_key(lambda k, v: str(v), key_type=str)
        ...     .repartition()
        ...     .deduplicate_by_key(timedelta(minutes=5))
        ...     .to("out")
        ... )
        >>> print(b.build().describe())  # doctest: +NORMALIZE_WHITESPACE
        Topologies:
           Sub-topology: 0
            Source: KSTREAM-SOURCE-0000000000 (topics: [clicks])
              --> KSTREAM-KEY-SELECT-0000000001
            Processor: KSTREAM-KEY-SELECT-0000000001 (stores: [])
              --> KSTREAM-REPARTITION-0000000002
              <-- KSTREAM-SOURCE-0000000000
           Sub-topology: 1
            Processor: KSTREAM-REPARTITION-0000000002 (stores: [])
              --> KSTREAM-DEDUPLICATE-0000000003
              <-- KSTREAM-KEY-SELECT-0000000001
            Processor: KSTREAM-DEDUPLICATE-0000000003 (stores: [KSTREAM-DEDUPLICATE-STATE-STORE-0000000004])
              --> KSTREAM-SINK-0000000005
              <-- KSTREAM-REPARTITION-0000000002
            Sink: KSTREAM-SINK-0000000005 (topic: out)
              <-- KSTREAM-DEDUPLICATE-0000000003
        """
        return render.describe(self)

    def with_topics(self, fn: Callable[[str, TopicSpec | None, TopicRole], TopicSpec]) -> Topology:
        """A copy whose sources and sinks read and write ``fn(name, topic, role)`` instead,
        where ``name`` is the topic's name in the topology, ``topic`` the ``Topic`` the
        topology binds it to (None for a name alone) and ``role`` is ``"source"``,
        ``"sink"`` or ``"pattern"`` (a source of the topics a regular expression matches,
        ``name`` the expression). Names and everything else stay the same."""

        def remap(node: Node, new: Callable[[Node], Node]) -> Node:
            changes = _new_parents(node, new)
            if isinstance(node, Source) and node.pattern:
                changes["topic"] = fn(node.topic_name, node.topic, "pattern")
            elif isinstance(node, Source | TableSource):
                changes["topic"] = fn(node.topic_name, node.topic, "source")
                if isinstance(node, Source) and node.more_topics:
                    changes["more_topics"] = tuple(
                        (name, fn(name, topic, "source")) for name, topic in node.more_topics
                    )
            elif isinstance(node, Sink):
                changes["topic"] = fn(node.topic_name, node.topic, "sink")
            return attrs.evolve(node, **changes)

        return self.map_nodes(remap)

    def with_source_types(
        self, fn: Callable[[Source | TableSource], tuple[TypeDesc, TypeDesc]]
    ) -> Topology:
        """A copy whose sources have the key and value types ``fn(source)``, and whose
        processors that keep their input's key or value type (a filter, a dedup, a sink;
        the key through ``map_values``...) keep the new one. A processor that makes its
        own key or value (``map``, a joiner) keeps the type it has."""

        def remap(node: Node, new: Callable[[Node], Node]) -> Node:
            changes = _new_parents(node, new)
            if isinstance(node, Source | TableSource):
                changes["key_type"], changes["value_type"] = fn(node)
            elif node.parents:
                old, now = node.parents[0], new(node.parents[0])
                if not node.changes_key and node.key_type == old.key_type:
                    changes["key_type"] = now.key_type
                keeps_value = not node.changes_value and not isinstance(
                    node, StreamTableJoin | StreamStreamJoin
                )
                if keeps_value and node.value_type == old.value_type:
                    changes["value_type"] = now.value_type
            return attrs.evolve(node, **changes)

        return self.map_nodes(remap)

    def map_nodes(self, remap: Callable[[Node, Callable[[Node], Node]], Node]) -> Topology:
        """A copy whose every node is ``remap(node, new)``, where ``new`` gives a parent's
        remapped node (:func:`kspark.plan.graph.map_nodes`)."""
        new = graph.map_nodes(self._roots(), _parents, remap)
        return Topology(
            sinks=tuple(new(s) for s in self.sinks),  # type: ignore[misc]
            ends=tuple(new(e) for e in self.ends),
        )

    def to_mermaid(self) -> str:
        """The topology as a Mermaid flowchart, for notebooks and docs."""
        return render.topology_mermaid(self)

    def to_svg(self) -> str:
        """The topology drawn as an SVG picture (left to right), with no external tools.

        Jupyter shows a ``Topology`` as this picture (``_repr_svg_``); GitHub shows it in
        a committed notebook's outputs.

        Examples
        --------
        >>> from kspark import StreamsBuilder, Topic
        >>> b = StreamsBuilder()
        >>> b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int).to(
        ...     Topic.jsonl("out", "/tmp/out")
        ... )
        >>> b.build().to_svg().startswith("<svg")
        True
        """
        return render.topology_svg(self)

    def _repr_svg_(self) -> str:
        return self.to_svg()

    def to_dot(self) -> str:
        """The topology in Graphviz DOT."""
        return render.topology_dot(self)


def _new_parents(node: Node, new: Callable[[Node], Node]) -> dict[str, Any]:
    """The changes that give ``node`` the parents ``new`` makes of its own (for
    ``attrs.evolve``); none for the inputs ``new`` keeps as they are."""
    changes: dict[str, Any] = {}
    for a in attrs.fields(type(node)):
        value = getattr(node, a.name)
        if isinstance(value, Node):
            if (made := new(value)) is not value:
                changes[a.name] = made
        elif isinstance(value, tuple) and value and all(isinstance(v, Node) for v in value):
            mapped = tuple(new(v) for v in value)
            if any(m is not v for m, v in zip(mapped, value, strict=True)):
                changes[a.name] = mapped
    return changes
