"""A ``Topic`` with a schema (issue 16): ``key_type=`` and ``value_type=`` on the topic
factories. A source whose topology declares no types reads the topic's; a sink converts
dynamic records to them (a record that does not convert is the sink's production
failure); a conflict is a clear ``ConfigError``. Plan only: no Spark."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kspark import StreamsBuilder, StreamsConfig, Topic
from kspark.bindings import bind_topology
from kspark.compiler import compile_topology
from kspark.compiler import stages as st
from kspark.errors import ConfigError, TypeMappingError
from kspark.plan import nodes as n
from kspark.plan.types import DYNAMIC, describe_type
from kspark_server.spec import JsonSpec, PrimSpec


@dataclasses.dataclass
class Order:
    id: str
    qty: int


FACTORIES: dict[str, Any] = {
    "jsonl": lambda **t: Topic.jsonl("t", "/d/t", **t),
    "parquet": lambda **t: Topic.parquet("t", "/d/t", **t),
    "csv": lambda **t: Topic.csv("t", "/d/t", **t),
    "table": lambda **t: Topic.table("t", "db.t", **t),
    "kafka": lambda **t: Topic.kafka("t", "k:9092", startingOffsets="earliest", **t),
}


@pytest.mark.parametrize("fmt", sorted(FACTORIES))
def test_every_factory_takes_a_schema(fmt: str) -> None:
    t = FACTORIES[fmt](key_type=str, value_type=Order)
    assert (t.key_type, t.value_type) == (describe_type(str), describe_type(Order))
    bare = FACTORIES[fmt]()
    assert (bare.key_type, bare.value_type) == (None, None)
    assert t != bare  # a binding with another schema is another binding


def test_a_type_that_does_not_map_is_refused_naming_the_topic() -> None:
    with pytest.raises(TypeMappingError, match="topic 'x': value_type"):
        Topic.jsonl("x", "/d/x", value_type=complex)


def orders_to_out() -> Any:
    b = StreamsBuilder()
    b.stream("orders").filter(lambda k, v: v is not None).map_values(lambda v: v).to("out")
    return b.build()


def test_a_bound_source_reads_the_topics_types_downstream_too() -> None:
    cfg = StreamsConfig(
        application_id="a",
        data_dir="/d",
        topics={
            "orders": Topic.jsonl(
                "orders",
                "/d/orders",
                layout="value",
                key_field="id",
                value_type=Order,
                key_type=str,
            )
        },
    )
    bound = bind_topology(orders_to_out(), cfg)
    by_kind = {type(node).__name__: node for node in bound.nodes()}
    assert by_kind["Source"].value_type == describe_type(Order)
    assert by_kind["Filter"].value_type == describe_type(Order)  # keeps its input's
    assert by_kind["Filter"].key_type == describe_type(str)
    assert by_kind["MapValues"].key_type == describe_type(str)
    assert by_kind["MapValues"].value_type == DYNAMIC  # makes its own
    # a value-layout topic needs a record type: the Topic's schema gives it
    (part,) = compile_topology(bound, cfg).sinks
    assert part.stage.key_type == describe_type(str)


def test_a_topic_given_in_the_topology_gives_its_types_right_there() -> None:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("in", "/d/in", key_type=str, value_type=int))
    assert (s.node.key_type, s.node.value_type) == (describe_type(str), describe_type(int))
    t = b.table(Topic.jsonl("rates", "/d/rates", value_type=float))
    assert (t.node.key_type, t.node.value_type) == (DYNAMIC, describe_type(float))


def test_a_source_type_that_conflicts_with_the_topics_is_a_config_error() -> None:
    b = StreamsBuilder()
    b.stream("orders", value_type=int).to("out")
    cfg = StreamsConfig(
        application_id="a",
        data_dir="/d",
        topics={"orders": Topic.jsonl("orders", "/d/orders", value_type=str)},
    )
    with pytest.raises(ConfigError, match="declares value_type=str") as info:
        bind_topology(b.build(), cfg)
    assert "KSTREAM-SOURCE-0000000000" in str(info.value) and "'orders'" in str(info.value)


def _sink_chain(cfg: StreamsConfig, build: Any) -> st.Chain:
    b = StreamsBuilder()
    build(b)
    (part,) = compile_topology(bind_topology(b.build(), cfg), cfg).sinks
    assert isinstance(part.stage, st.Chain)
    return part.stage


def test_a_sink_converts_dynamic_records_to_the_topics_types() -> None:
    cfg = StreamsConfig(
        application_id="a",
        data_dir="/d",
        topics={"out": Topic.parquet("out", "/d/out", key_type=str, value_type=int)},
    )
    chain = _sink_chain(cfg, lambda b: b.stream("in").to("out"))
    assert chain.spec.sink == "KSTREAM-SINK-0000000001"  # its failures: the production handler
    assert chain.spec.input.value == JsonSpec()
    assert chain.spec.output.key == PrimSpec(spark="string")
    assert chain.spec.output.value == PrimSpec(spark="long")


def test_a_sink_of_other_declared_types_is_a_config_error() -> None:
    cfg = StreamsConfig(
        application_id="a",
        data_dir="/d",
        topics={"out": Topic.jsonl("out", "/d/out", value_type=int)},
    )
    with pytest.raises(ConfigError, match="declares value_type=int") as info:
        _sink_chain(cfg, lambda b: b.stream("in", value_type=str).to("out"))
    assert "KSTREAM-SINK-0000000001" in str(info.value)


def test_no_schema_leaves_a_dynamic_sink_as_it_was() -> None:
    cfg = StreamsConfig(application_id="a", data_dir="/d")
    b = StreamsBuilder()
    b.stream("in").to("out")
    (part,) = compile_topology(bind_topology(b.build(), cfg), cfg).sinks
    assert not isinstance(part.stage, st.Chain)
    assert isinstance(part.stage, st.Read)
    assert isinstance(bind_topology(b.build(), cfg).sinks[0], n.Sink)


def test_a_config_file_gives_a_topics_types_by_name(tmp_path: Any) -> None:
    import json
    import os

    from kspark.cli import load_config

    path = os.path.join(tmp_path, "app.json")
    with open(path, "w") as f:
        json.dump(
            {
                "data_dir": "/data",
                "topics": {
                    "out": {"format": "parquet", "path": "/p/out", "value_type": "int"},
                    "in": {
                        "format": "jsonl",
                        "path": "/p/in",
                        "key_type": "str",
                        "value_type": "decimal:Decimal",
                    },
                },
            },
            f,
        )
    topics = load_config(path, "from-file").topic_bindings
    assert topics["out"] == Topic.parquet("out", "/p/out", value_type=int)
    assert topics["in"].key_type == describe_type(str)
    assert topics["in"].value_type == describe_type(__import__("decimal").Decimal)
    with open(path, "w") as f:
        json.dump({"topics": {"in": {"format": "jsonl", "path": "/x", "value_type": "nope"}}}, f)
    with pytest.raises(ConfigError, match=r"topics\.in\.value_type"):
        load_config(path, "from-file")


def test_a_topic_spec_takes_python_types_too() -> None:
    t = n.TopicSpec(name="t", format="jsonl", path="/t", value_type=int)
    assert t.value_type == describe_type(int) and t == Topic.jsonl("t", "/t", value_type=int)


def test_the_test_driver_keeps_a_bindings_schema() -> None:
    from kspark.testing import TopologyTestDriver

    b = StreamsBuilder()
    b.stream("orders").to(Topic.jsonl("out", "/d/out", value_type=int))
    cfg = StreamsConfig(
        application_id="a",
        topics={"orders": Topic.kafka("orders", "k:9092", key_type=str, value_type=Order)},
    )
    driver = TopologyTestDriver(b.build(), cfg, session=object())
    try:
        source, sink = sorted(
            (node for node in driver.app.topology.nodes() if isinstance(node, n.Source | n.Sink)),
            key=lambda node: node.seq,
        )
        assert source.topic is not None and source.topic.format == "parquet"  # its own folder
        assert (source.key_type, source.value_type) == (describe_type(str), describe_type(Order))
        assert sink.topic is not None and sink.topic.value_type == describe_type(int)
    finally:
        driver.close()


def test_a_topic_bound_twice_with_other_types_says_which_types() -> None:
    """Two Topics that differ only in their schema must not look alike in the error."""
    b = StreamsBuilder()
    b.stream(Topic.jsonl("orders", "/d/orders", value_type=int)).to("out")
    cfg = StreamsConfig(
        application_id="a",
        data_dir="/d",
        topics={"orders": Topic.jsonl("orders", "/d/orders", value_type=str)},
    )
    with pytest.raises(ConfigError, match=r"value_type=int\).*value_type=str\)"):
        bind_topology(b.build(), cfg)
