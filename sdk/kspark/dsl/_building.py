"""What the DSL's rule modules need of the fluent classes, as protocols.

The rules (:mod:`kspark.dsl.streamjoin`, :mod:`kspark.dsl.globaltable`,
:mod:`kspark.dsl._aggregation`) check their arguments, name the processors and return
plan nodes; ``KStream``, ``KTable`` and the grouped streams wrap those nodes. The rules
see a ``StreamsBuilder``, a stream, a table and a grouped stream through these protocols
only, so they import neither :mod:`kspark.dsl.streams` nor :mod:`kspark.dsl.grouped`:
the fluent classes import the rules, never the other way round.
"""

from __future__ import annotations

from typing import Protocol, TypeAlias

from kspark.dsl.options import Named
from kspark.plan import nodes as n
from kspark.plan.grouped import Aggregate

__all__ = ["Builder", "Grouping", "Node", "TableNode", "TableSourceNode"]

#: The node that keeps a table's rows: what a join against the table reads.
TableSourceNode: TypeAlias = (
    n.TableSource | n.ToTable | Aggregate | n.TableTableJoin | n.ForeignKeyJoin
)


class Builder(Protocol):
    """A ``StreamsBuilder``: its processor names, its store names and its nodes."""

    #: the stores of the stream-table and stream-global-table joins so far
    _join_stores: set[str]

    def _added(self, node: n.Node) -> None: ...

    def _next(self, prefix: str, named: Named | str | None = None) -> tuple[str, int]: ...

    def _store_name(self, prefix: str) -> str: ...


class Node(Protocol):
    """A ``KStream`` or a ``KTable``: its builder and its plan node."""

    @property
    def _builder(self) -> Builder: ...

    @property
    def node(self) -> n.Node: ...


class TableNode(Node, Protocol):
    """A ``KTable``, which also gives the node that keeps its rows."""

    def _source(self) -> TableSourceNode: ...


class Grouping(Protocol):
    """A grouped stream: the stream's node and whether the aggregation repartitions it."""

    @property
    def _builder(self) -> Builder: ...

    @property
    def _node(self) -> n.Node: ...

    @property
    def _repartition(self) -> bool: ...

    @property
    def _grouped_name(self) -> str | None: ...
