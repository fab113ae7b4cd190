"""A foreign-key join's three stages as plan nodes: :class:`FkSubscribe`,
:class:`FkMatch` and :class:`FkResolve`, one stateful operator each
(``kspark_server.operators.fk_messages``).

A topology holds a foreign-key join as one :class:`~kspark.plan.nodes.ForeignKeyJoin`.
No stateful operator may read another's output in the same micro-batch, so the
sub-topology cut
(:mod:`kspark.compiler.subtopologies`) first replaces each join by its stages
(:func:`expand`), and then sends the subscriptions and the responses between them through
internal topics, as Kafka Streams sends them through its subscription-registration and
subscription-response topics (docs/design/sub-topologies.md).

Examples
--------
>>> from kspark import StreamsBuilder
>>> b = StreamsBuilder()
>>> orders = b.table("orders", key_type=str, value_type=str)
>>> customers = b.table("customers", key_type=int, value_type=str)
>>> joined = orders.join(customers, lambda o: len(o), lambda o, c: o, value_type=str)
>>> joined.to_stream().to("out")
>>> sub, match, resolve = stages(joined.node)
>>> [s.name for s in (sub, match, resolve)] == [
...     joined.node.name + "-SUBSCRIPTION", joined.node.name + "-REGISTRATION", joined.node.name]
True
>>> [type(x).__name__ for x in expand(b.build()).nodes() if x.stateful]
['FkSubscribe', 'FkMatch', 'FkResolve']
"""

from __future__ import annotations

from collections.abc import Callable
from typing import ClassVar, cast

import attrs

from kspark.plan import graph
from kspark.plan.nodes import Fn, ForeignKeyJoin, Node, Sink, _OneStore, _Unary
from kspark.plan.topology import Topology, _new_parents
from kspark.plan.types import TypeDesc, describe_type

__all__ = ["FkMatch", "FkResolve", "FkSubscribe", "expand", "stages"]

#: The messages between the stages: MessagePack bytes.
MESSAGE = describe_type(bytes)


@attrs.frozen(kw_only=True)
class FkSubscribe(_OneStore, _Unary):
    """The first stage, keyed by the left key: each left update's subscriptions, keyed by
    its foreign key (``key_type``, the right table's key type)."""

    changes_key: ClassVar[bool] = True
    changes_value: ClassVar[bool] = True

    extractor: Fn
    extractor_with_key: bool
    store_name: str


@attrs.frozen(kw_only=True)
class FkMatch(_OneStore, Node):
    """The second stage, keyed by the foreign key: the right table and its subscribers;
    its responses are keyed by the left key (``key_type``)."""

    changes_key: ClassVar[bool] = True
    changes_value: ClassVar[bool] = True

    subscriptions: Node
    right: Node
    store_name: str

    @property
    def parents(self) -> tuple[Node, ...]:
        return (self.subscriptions, self.right)


@attrs.frozen(kw_only=True)
class FkResolve(_OneStore, _Unary):
    """The last stage, keyed by the left key: the join's result table, in
    ``store_name``, under the join's own name. ``left_value_type`` and
    ``right_value_type`` are the joined tables' value types, which the responses carry."""

    changes_value: ClassVar[bool] = True

    joiner: Fn
    joiner_with_key: bool
    mode: str
    store_name: str
    left_value_type: TypeDesc | None
    right_value_type: TypeDesc | None


def stages(
    node: ForeignKeyJoin, left: Node | None = None, right: Node | None = None
) -> tuple[FkSubscribe, FkMatch, FkResolve]:
    """``node``'s three stages, reading ``left`` and ``right`` (by default the join's own
    inputs). Each owns one of the join's stores, and the last one is the join: same
    name, types and result store."""
    left = node.left if left is None else left
    right = node.right if right is None else right
    subscribe = FkSubscribe(
        name=f"{node.name}-SUBSCRIPTION",
        key_type=node.right.key_type,
        value_type=MESSAGE,
        seq=node.seq,
        parent=left,
        extractor=node.extractor,
        extractor_with_key=node.extractor_with_key,
        store_name=node.subscription_store,
    )
    match = FkMatch(
        name=f"{node.name}-REGISTRATION",
        key_type=node.left.key_type,
        value_type=MESSAGE,
        seq=node.seq,
        subscriptions=subscribe,
        right=right,
        store_name=node.registration_store,
    )
    resolve = FkResolve(
        name=node.name,
        key_type=node.key_type,
        value_type=node.value_type,
        seq=node.seq,
        parent=match,
        joiner=node.joiner,
        joiner_with_key=node.joiner_with_key,
        mode=node.mode,
        store_name=node.store_name,
        left_value_type=node.left.value_type,
        right_value_type=node.right.value_type,
    )
    return subscribe, match, resolve


def expand(topology: Topology) -> Topology:
    """``topology`` with each foreign-key join replaced by its :func:`stages`; the same
    topology when it has none. Every other node is kept, with its inputs replaced."""
    if not any(isinstance(x, ForeignKeyJoin) for x in topology.nodes()):
        return topology

    def rebuild(node: Node, new: Callable[[Node], Node]) -> Node:
        if isinstance(node, ForeignKeyJoin):
            return stages(node, new(node.left), new(node.right))[-1]
        return with_inputs(node, new)

    new = graph.map_nodes(topology._roots(), lambda x: x.parents, rebuild)
    return attrs.evolve(
        topology,
        sinks=tuple(cast(Sink, new(s)) for s in topology.sinks),
        ends=tuple(new(e) for e in topology.ends),
    )


def with_inputs(node: Node, new: Callable[[Node], Node]) -> Node:
    """``node`` reading ``new(input)`` for each of its inputs (itself if none changed)."""
    changes = _new_parents(node, new)
    return attrs.evolve(node, **changes) if changes else node
