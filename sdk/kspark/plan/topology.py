"""A built topology: the plan DAG from its sources to its sinks, and ``describe()``."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import attrs

from kspark.errors import InvalidTopologyError
from kspark.plan.nodes import (
    Deduplicate,
    DedupMode,
    Node,
    Repartition,
    Sink,
    Source,
    TableSource,
    TopicSpec,
)

__all__ = ["Topology"]


def _is_cut(node: Node) -> bool:
    """Whether ``node`` reads from a repartition topic, which starts a new sub-topology."""
    return isinstance(node, Repartition) or (
        isinstance(node, Deduplicate) and node.mode is DedupMode.BY_ID
    )


@attrs.frozen(kw_only=True)
class Topology:
    """An immutable, validated topology, made by :meth:`kspark.StreamsBuilder.build`.

    Examples
    --------
    >>> from kspark import StreamsBuilder, Topic
    >>> b = StreamsBuilder()
    >>> b.stream(Topic.parquet("in", "/tmp/in"), key_type=str, value_type=int).filter(
    ...     lambda k, v: v > 0
    ... ).to(Topic.parquet("out", "/tmp/out"))
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

    def __attrs_post_init__(self) -> None:
        if not self.sinks:
            raise InvalidTopologyError(
                "the topology has no sink; end at least one stream with .to(topic)"
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
        seen: dict[int, Node] = {}

        def visit(node: Node) -> None:
            if id(node) in seen:
                return
            for parent in node.parents:
                visit(parent)
            seen[id(node)] = node

        for sink in self.sinks:
            visit(sink)
        return tuple(sorted(seen.values(), key=lambda n: n.seq))

    def sources(self) -> tuple[Source | TableSource, ...]:
        return tuple(n for n in self.nodes() if isinstance(n, Source | TableSource))

    def node(self, name: str) -> Node:
        for n in self.nodes():
            if n.name == name:
                return n
        raise KeyError(name)

    def children(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {n.name: [] for n in self.nodes()}
        for n in self.nodes():
            for p in n.parents:
                out[p.name].append(n.name)
        return out

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
            if _is_cut(n):
                continue
            for p in n.parents:
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
        >>> from kspark import StreamsBuilder, Topic
        >>> b = StreamsBuilder()
        >>> (
        ...     b.stream(Topic.jsonl("clicks", "/tmp/clicks"), key_type=str, value_type=int)
        ...     .select_key(lambda k, v: str(v), key_type=str)
        ...     .repartition()
        ...     .deduplicate_by_key(timedelta(minutes=5))
        ...     .to(Topic.jsonl("out", "/tmp/out"))
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
        children = self.children()
        lines = ["Topologies:"]
        for i, group in enumerate(self.subtopologies()):
            lines.append(f"   Sub-topology: {i}")
            for n in group:
                if isinstance(n, Source | TableSource):
                    lines.append(f"    Source: {n.name} (topics: [{n.topic.name}])")
                elif isinstance(n, Sink):
                    lines.append(f"    Sink: {n.name} (topic: {n.topic.name})")
                else:
                    lines.append(f"    Processor: {n.name} (stores: [{', '.join(n.stores())}])")
                if children[n.name]:
                    lines.append(f"      --> {', '.join(children[n.name])}")
                if n.parents:
                    lines.append(f"      <-- {', '.join(p.name for p in n.parents)}")
        return "\n".join(lines)

    def with_topics(self, fn: Callable[[TopicSpec, str], TopicSpec]) -> Topology:
        """A copy whose sources and sinks read and write ``fn(topic, role)`` instead, where
        ``role`` is ``"source"`` or ``"sink"``. Names and everything else stay the same."""
        memo: dict[int, Node] = {}

        def remap(node: Node) -> Node:
            if id(node) in memo:
                return memo[id(node)]
            changes: dict[str, Any] = {}
            for a in attrs.fields(type(node)):
                value = getattr(node, a.name)
                if isinstance(value, Node):
                    changes[a.name] = remap(value)
                elif isinstance(value, tuple) and value and all(isinstance(v, Node) for v in value):
                    changes[a.name] = tuple(remap(v) for v in value)
            if isinstance(node, Source | TableSource):
                changes["topic"] = fn(node.topic, "source")
            elif isinstance(node, Sink):
                changes["topic"] = fn(node.topic, "sink")
            memo[id(node)] = attrs.evolve(node, **changes)
            return memo[id(node)]

        sinks = tuple(remap(s) for s in self.sinks)
        return Topology(sinks=sinks)  # type: ignore[arg-type]

    def to_mermaid(self) -> str:
        """The topology as a Mermaid flowchart, for notebooks and docs."""
        lines = ["flowchart LR"]
        for n in self.nodes():
            label = n.name
            if isinstance(n, Source | TableSource | Sink):
                label = f"{n.name}<br/>topic: {n.topic.name}"
            elif n.stores():
                label = f"{n.name}<br/>stores: {', '.join(n.stores())}"
            shape = ("[(", ")]") if isinstance(n, Source | TableSource | Sink) else ("[", "]")
            lines.append(f'    {_mid(n.name)}{shape[0]}"{label}"{shape[1]}')
        for n in self.nodes():
            for p in n.parents:
                lines.append(f"    {_mid(p.name)} --> {_mid(n.name)}")
        return "\n".join(lines)

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
        from kspark.plan.render import topology_svg

        return topology_svg(self)

    def _repr_svg_(self) -> str:
        return self.to_svg()

    def to_dot(self) -> str:
        """The topology in Graphviz DOT."""
        lines = ["digraph topology {", "  rankdir=LR;"]
        for n in self.nodes():
            shape = "cylinder" if isinstance(n, Source | TableSource | Sink) else "box"
            extra = f"\\nstores: {', '.join(n.stores())}" if n.stores() else ""
            lines.append(f'  "{n.name}" [shape={shape}, label="{n.name}{extra}"];')
        for n in self.nodes():
            for p in n.parents:
                lines.append(f'  "{p.name}" -> "{n.name}";')
        lines.append("}")
        return "\n".join(lines)


def _mid(name: str) -> str:
    return "".join(c if c.isalnum() else "_" for c in name)
