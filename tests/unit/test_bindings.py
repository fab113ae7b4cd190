"""Plan-only tests of topic names in the topology and their bindings at app start."""

from __future__ import annotations

import json
import os
from typing import Any

import pytest

from kspark import StreamsBuilder, StreamsConfig, Topic
from kspark.bindings import bind_topology
from kspark.cli import load_config
from kspark.compiler import compile_topology
from kspark.errors import (
    CompilationError,
    ConfigError,
    InvalidTopologyError,
    UnboundTopicError,
)
from kspark.plan import nodes as n
from kspark.plan.topology import Topology
from kspark.testing import TopologyTestDriver


def names_only() -> Topology:
    b = StreamsBuilder()
    orders = b.stream("orders", key_type=str, value_type=int)
    rates = b.table("rates")
    orders.filter(lambda k, v: v > 0).to("checked")
    orders.left_join(rates, lambda v, r: [v, r]).to("priced")
    return b.build()


def topics_of(topology: Topology) -> dict[str, n.TopicSpec]:
    out: dict[str, n.TopicSpec] = {}
    for node in topology.nodes():
        if isinstance(node, n.Source | n.TableSource | n.Sink):
            assert node.topic is not None
            out[node.topic_name] = node.topic
    return out


def test_describe_shows_the_names() -> None:
    text = names_only().describe()
    for line in (
        "(topics: [orders])",
        "(topics: [rates])",
        "(topic: checked)",
        "(topic: priced)",
    ):
        assert line in text


def test_a_topic_given_in_the_dsl_binds_its_name_there() -> None:
    b = StreamsBuilder()
    b.stream(Topic.parquet("in", "/p/in")).to("out")
    (source,) = b.build().sources()
    assert source.topic_name == "in" and source.topic == Topic.parquet("in", "/p/in")
    assert b.build().sinks[0].topic is None


def test_data_dir_binds_every_name_to_json_lines_in_the_envelope_layout() -> None:
    cfg = StreamsConfig(application_id="a", data_dir="/data/")
    topics = topics_of(bind_topology(names_only(), cfg))
    assert topics["orders"] == Topic.jsonl("orders", "/data/orders")
    assert {t.format for t in topics.values()} == {"jsonl"}
    assert {t.layout for t in topics.values()} == {"envelope"}
    assert sorted(topics) == ["checked", "orders", "priced", "rates"]


def test_bootstrap_servers_bind_every_name_to_kafka_read_from_the_earliest_offset() -> None:
    cfg = StreamsConfig(application_id="a", bootstrap_servers="broker:9092", data_dir="/data")
    topics = topics_of(bind_topology(names_only(), cfg))
    assert topics["orders"] == Topic.kafka(
        "orders", bootstrap_servers="broker:9092", startingOffsets="earliest"
    )
    assert topics["checked"] == Topic.kafka("checked", bootstrap_servers="broker:9092")


def test_explicit_bindings_come_before_bootstrap_servers_and_data_dir() -> None:
    rates = Topic.table("rates", "catalog.rates")
    cfg = StreamsConfig(application_id="a", topics={"rates": rates}, data_dir="/data")
    topics = topics_of(bind_topology(names_only(), cfg))
    assert topics["rates"] == rates and topics["orders"].path == "/data/orders"
    assert cfg.topics == (("rates", rates),)
    assert cfg.topic_bindings == {"rates": rates}


def test_an_unbound_name_is_an_error_that_names_every_name_and_the_ways_to_bind() -> None:
    cfg = StreamsConfig(application_id="a", topics={"rates": Topic.jsonl("rates", "/r")})
    with pytest.raises(UnboundTopicError) as e:
        bind_topology(names_only(), cfg)
    assert e.value.code == "KSPARK_UNBOUND_TOPIC"
    assert isinstance(e.value, ConfigError)
    assert e.value.params["names"] == ["checked", "orders", "priced"]
    for part in ("'checked'", "'orders'", "'priced'", "topics=", "bootstrap_servers=", "data_dir="):
        assert part in e.value.message


def test_a_topology_topic_and_another_config_binding_for_the_same_name_conflict() -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", "/a")).to("out")
    same = StreamsConfig(application_id="a", topics={"in": Topic.jsonl("in", "/a")}, data_dir="/d")
    assert topics_of(bind_topology(b.build(), same))["in"].path == "/a"
    other = same.with_(topics={"in": Topic.jsonl("in", "/b")})
    with pytest.raises(ConfigError, match="'in' is bound twice") as e:
        bind_topology(b.build(), other)
    assert e.value.params["topic"] == "in"


def test_one_name_bound_to_two_topics_in_the_topology_is_refused() -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", "/a")).to(Topic.jsonl("in", "/b"))
    with pytest.raises(InvalidTopologyError, match="two different Topics"):
        bind_topology(b.build(), StreamsConfig(application_id="a"))


def test_a_name_the_topology_binds_once_is_bound_everywhere_it_is_used() -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("loop", "/loop")).to("out")
    b.stream("loop").to("out2")
    topics = topics_of(bind_topology(b.build(), StreamsConfig(application_id="a", data_dir="/d")))
    assert topics["loop"].path == "/loop" and topics["out2"].path == "/d/out2"


def test_the_compiler_refuses_an_unbound_topology() -> None:
    with pytest.raises(CompilationError, match="not bound"):
        compile_topology(names_only(), StreamsConfig(application_id="a"))


def test_config_validates_bindings() -> None:
    with pytest.raises(ConfigError, match="topics must map"):
        StreamsConfig(application_id="a", topics={"x": "/path"})  # type: ignore[dict-item]
    with pytest.raises(ConfigError, match="data_dir"):
        StreamsConfig(application_id="a", data_dir="")
    with pytest.raises(ConfigError, match="bootstrap_servers"):
        StreamsConfig(application_id="a", bootstrap_servers=9092)  # type: ignore[arg-type]


def test_a_config_file_binds_names(tmp_path: Any) -> None:
    path = os.path.join(tmp_path, "app.json")
    with open(path, "w") as f:
        json.dump(
            {
                "data_dir": "/data",
                "topics": {
                    "rates": {"format": "kafka", "options": {"kafka.bootstrap.servers": "b:1"}},
                    "orders": {"format": "parquet", "path": "/p/orders"},
                },
            },
            f,
        )
    cfg = load_config(path, "from-file")
    topics = topics_of(bind_topology(names_only(), cfg))
    assert topics["rates"] == Topic.kafka("rates", bootstrap_servers="b:1")
    assert topics["orders"] == Topic.parquet("orders", "/p/orders")
    assert topics["checked"] == Topic.jsonl("checked", "/data/checked")
    with open(path, "w") as f:
        json.dump({"topics": {"orders": {"format": "nope", "path": "/x"}}}, f)
    with pytest.raises(ConfigError, match=r"topics\.orders"):
        load_config(path, "from-file")


def test_the_test_driver_binds_every_name_to_its_own_folders() -> None:
    cfg = StreamsConfig(application_id="a", bootstrap_servers="broker:9092")
    driver = TopologyTestDriver(names_only(), cfg, session=object())
    try:
        topics = topics_of(driver.topology)
        assert {t.format for t in topics.values()} == {"parquet"}
        assert all(t.path and t.path.startswith(driver._workdir) for t in topics.values())
        assert driver.config.bootstrap_servers is None and driver.config.topics == ()
        assert driver.create_input_topic("orders").name == "orders"
        with pytest.raises(Exception, match="not a source"):
            driver.create_input_topic("checked")
    finally:
        import shutil

        shutil.rmtree(driver._workdir, ignore_errors=True)


def test_submit_refuses_unbound_names_before_it_connects() -> None:
    from kspark.runtime.submit import submit

    # nothing listens on port 1: an error about the server would mean it tried to connect
    with pytest.raises(UnboundTopicError, match="orders"):
        submit(names_only(), StreamsConfig(application_id="a"), "sc://127.0.0.1:1")
