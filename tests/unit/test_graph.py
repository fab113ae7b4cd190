"""The plan's one graph walk (kspark.plan.graph), node semantics, and the compiler's rules."""

from __future__ import annotations

import inspect
from datetime import timedelta

import pytest

from kspark import Joined, Materialized, StreamsBuilder, StreamsConfig, Topic
from kspark.compiler import compile_topology
from kspark.compiler import compiler as compiler_module
from kspark.errors import InvalidTopologyError
from kspark.plan import fkjoin as fkjoin_nodes
from kspark.plan import graph
from kspark.plan import grouped as grouped_nodes
from kspark.plan import nodes as n
from kspark.plan import processing as processing_nodes
from kspark.plan import suppression as suppression_nodes

CFG = StreamsConfig(application_id="graph-test", num_partitions=2)


def test_toposort_emits_shared_inputs_once_after_all_their_inputs() -> None:
    inputs = {"a": [], "b": ["a"], "c": ["a"], "d": ["b", "c"], "e": ["c"]}
    order = graph.toposort(["d", "e"], inputs.__getitem__)
    assert order == ["a", "b", "c", "d", "e"]


def test_toposort_tells_equal_nodes_apart_by_identity() -> None:
    # two distinct but equal values are two nodes, as two equal plan nodes are two processors
    x, y = [1], [1]
    assert graph.toposort([x, y], lambda _: ()) == [x, y]


def test_walks_are_not_limited_by_the_recursion_limit() -> None:
    deep = 20_000
    assert len(graph.toposort([deep], lambda i: [i - 1] if i else [])) == deep + 1
    assert len(graph.preorder([deep], lambda i: [i - 1] if i else [])) == deep + 1


def test_a_long_chain_builds_describes_and_compiles() -> None:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
    for _ in range(3000):
        s = s.filter(lambda k, v: True)
    s.to(Topic.jsonl("out", "/tmp/out"))
    topology = b.build()
    assert len(topology.nodes()) == 3002
    assert topology.describe().count("Processor:") == 3000
    (chain,) = [s for s in compile_topology(topology, CFG).stages() if s.inputs]
    assert len(chain.spec.steps) == 3000  # type: ignore[attr-defined]


def test_map_nodes_handles_a_shared_node_once() -> None:
    calls: list[str] = []
    inputs = {"a": [], "b": ["a"], "c": ["a", "b"]}

    def count(node: str, result: object) -> str:
        calls.append(node)
        return node.upper()

    lookup = graph.map_nodes(["c"], inputs.__getitem__, count)
    assert calls == ["a", "b", "c"] and lookup("b") == "B"


def test_nodes_say_whether_they_change_keys_values_or_repartition() -> None:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int)
    assert s.select_key(lambda k, v: k, key_type=str).node.changes_key
    assert not s.select_key(lambda k, v: k, key_type=str).node.changes_value
    assert s.map_values(lambda v: v, value_type=int).node.changes_value
    assert not s.filter(lambda k, v: True).node.changes_key
    assert s.repartition().node.repartitions
    by_id = s.deduplicate(lambda k, v: str(v), timedelta(seconds=1))
    by_key = s.deduplicate_by_key(timedelta(seconds=1))
    assert by_id.node.repartitions and not by_key.node.repartitions
    assert by_key.node.stateful and not s.node.stateful


def _node_classes() -> list[type[n.Node]]:
    found: list[type[n.Node]] = []
    todo: list[type[n.Node]] = [n.Node]
    while todo:
        cls = todo.pop()
        todo.extend(cls.__subclasses__())
        if not cls.__name__.startswith("_") and cls is not n.Node:
            found.append(cls)
    return found


@pytest.mark.parametrize("cls", _node_classes(), ids=lambda c: c.__name__)
def test_every_plan_node_class_has_a_compiler_rule(cls: type[n.Node]) -> None:
    if cls in (n.Sink, n.DynamicSink):
        # sinks are the roots the compiler starts from (_Compiler.compile)
        return
    rule = getattr(compiler_module._Compiler, f"visit_{cls.__name__}", None)
    assert callable(rule), f"the compiler has no visit_{cls.__name__}"
    assert list(inspect.signature(rule).parameters) == ["self", "node"]


def test_the_node_class_list_covers_the_plan_module() -> None:
    # nodes of aggregations live in kspark.plan.grouped, the Processor API's in
    # kspark.plan.processing, the time-limited suppression's in kspark.plan.suppression,
    # a foreign-key join's stages in kspark.plan.fkjoin
    modules = (n, grouped_nodes, processing_nodes, suppression_nodes, fkjoin_nodes)
    public = {
        getattr(m, name)
        for m in modules
        for name in m.__all__
        if isinstance(getattr(m, name), type)
    }
    found = {cls.__name__ for cls in _node_classes()}
    assert {c.__name__ for c in public if issubclass(c, n.Node)} - {"Node"} == found


def _versioned_join(retention: timedelta, grace: timedelta) -> None:
    b = StreamsBuilder()
    rates = b.table(
        Topic.jsonl("rates", "/tmp/rates"),
        key_type=str,
        value_type=float,
        materialized=Materialized.as_versioned("rates", history_retention=retention),
    )
    s = b.stream(Topic.jsonl("payments", "/tmp/payments"), key_type=str, value_type=float)
    s.join(rates, lambda a, r: a * r, Joined.as_("convert").with_grace_period(grace)).to(
        Topic.jsonl("out", "/tmp/out")
    )
    b.build()


def test_a_grace_period_longer_than_the_history_retention_is_refused() -> None:
    with pytest.raises(InvalidTopologyError) as info:
        _versioned_join(timedelta(minutes=1), timedelta(minutes=2))
    message = str(info.value)
    assert "convert" in message and "0:02:00" in message and "0:01:00" in message
    assert info.value.params == {
        "processor": "convert",
        "grace_ms": 120_000,
        "history_retention_ms": 60_000,
    }


def test_a_grace_period_equal_to_the_history_retention_is_accepted() -> None:
    _versioned_join(timedelta(minutes=1), timedelta(minutes=1))


def test_find_stops_at_the_first_match_and_never_walks_past_a_stop() -> None:
    inputs = {"sink": ["a", "b"], "a": ["src"], "b": ["c"], "c": ["src"], "src": []}
    walked: list[str] = []

    def match(node: str) -> bool:
        walked.append(node)
        return node == "c"

    assert graph.find(["sink"], inputs.__getitem__, match) == "c"
    assert walked == ["sink", "a", "src", "b", "c"]  # depth first, src once
    assert graph.find(["sink"], inputs.__getitem__, match, stop_at=lambda x: x == "b") is None


def test_find_takes_a_long_chain_without_recursion() -> None:
    assert graph.find([5000], lambda i: [i - 1] if i else [], lambda i: i == 0) == 0


def test_a_key_change_behind_a_stateful_operator_needs_no_repartition() -> None:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("in", "/in"), key_type=str, value_type=int)
    assert s.select_key(lambda k, v: v, key_type=int).group_by_key()._repartition
    # the count regroups by key: what comes after it is grouped, whatever came before
    counted = s.select_key(lambda k, v: v, key_type=int).group_by_key().count().to_stream()
    assert not counted.map_values(lambda v: v, value_type=int).group_by_key()._repartition
