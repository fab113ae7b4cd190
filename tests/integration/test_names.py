"""Topologies that name their topics and use functions without types (issue 16): the test
driver binds the names itself, values with no declared type are dynamic (JSON values),
and the same topology runs unchanged on files through ``StreamsConfig(data_dir=...)``."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from datetime import timedelta
from typing import Any

import pytest

from kspark import Materialized, StreamsApp, StreamsBuilder, StreamsConfig
from kspark.plan.topology import Topology
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark


@dataclasses.dataclass
class Priced:
    id: str
    rate: float | None


def untyped_topology() -> Topology:
    b = StreamsBuilder()
    events = b.stream("events")  # keys are strings, values dicts: nothing declares them
    events.filter(lambda k, v: v["n"] > 0).map_values(lambda v: v["n"] * 10).to("tens")
    events.map_values(lambda k, v: f"{k}:{v['tag']}").to("labels")
    events.deduplicate_by_key_value(lambda k, v: v["id"], timedelta(seconds=10)).to("unique")
    rates = b.table("rates", materialized=Materialized.as_versioned("rates", timedelta(hours=1)))
    events.left_join(rates, lambda v, r: {"id": v["id"], "rate": r}).to("priced")
    numbers = b.stream("numbers")  # ints
    numbers.filter(lambda k, v: v % 2 == 0).map_values(lambda v: v // 2).to("halves")
    b.stream("words").map_values(lambda v: v.upper()).to("upper")  # strings
    return b.build()


EVENTS = [
    ("a", {"id": "e1", "n": 1, "tag": "x"}, 1_000),
    ("b", {"id": "e2", "n": 0, "tag": "y"}, 2_000),
    ("a", {"id": "e1", "n": 1, "tag": "x"}, 3_000),  # a retransmission of e1
    ("c", {"id": "e3", "n": 5, "tag": "z"}, 4_000),
]


def test_names_only_and_untyped_lambdas_in_the_test_driver(spark: Any, app_id: str) -> None:
    cfg = StreamsConfig(application_id=app_id, num_partitions=2)
    with TopologyTestDriver(untyped_topology(), cfg, session=spark) as d:
        rates = d.create_input_topic("rates")
        rates.pipe_input("a", 1.5, timestamp=0)
        rates.pipe_input("c", 2.0, timestamp=0)
        d.process()  # the rates first: the join looks them up as of each event's time
        events = d.create_input_topic("events", key_type=str, value_type=dict)
        for k, v, ts in EVENTS:
            events.pipe_input(k, v, timestamp=ts)
        numbers = d.create_input_topic("numbers")
        numbers.pipe_records([("n", 4, 1), ("n", 5, 2), ("n", 10, 3)])
        d.create_input_topic("words").pipe_value_list(["kafka", "spark"])

        tens = d.create_output_topic("tens", key_type=str, value_type=int).read_key_values()
        assert tens == [("a", 10), ("a", 10), ("c", 50)]
        labels = d.create_output_topic("labels", key_type=str, value_type=str).read_values()
        assert labels == ["a:x", "b:y", "a:x", "c:z"]
        unique = d.create_output_topic("unique", key_type=str, value_type=dict).read_values()
        assert sorted(v["id"] for v in unique) == ["e1", "e2", "e3"]
        priced = d.create_output_topic("priced", key_type=str, value_type=Priced)
        assert sorted(priced.read_values(), key=lambda p: (p.id, p.rate or 0)) == [
            Priced("e1", 1.5),
            Priced("e1", 1.5),
            Priced("e2", None),
            Priced("e3", 2.0),
        ]
        halves = d.create_output_topic("halves").read_key_values()
        assert halves == [("n", 2), ("n", 5)]
        upper = d.create_output_topic("upper", value_type=str).read_values()
        assert upper == ["KAFKA", "SPARK"]
        assert d.metrics().by_name()["records-consumed-total"] == 2 + 4 + 3 + 2


def test_a_value_that_does_not_convert_to_the_output_type_fails_on_that_record(
    spark: Any, app_id: str
) -> None:
    cfg = StreamsConfig(application_id=app_id, num_partitions=1)
    with TopologyTestDriver(untyped_topology(), cfg, session=spark) as d:
        d.create_input_topic("words").pipe_input(None, "not a number")
        out = d.create_output_topic("upper", value_type=int)
        with pytest.raises(Exception, match="declared type is long"):
            out.read_values()


def pages_topology() -> Topology:
    b = StreamsBuilder()
    (
        b.stream("clicks")
        .filter(lambda k, v: v["page"] != "/health")
        .map_values(lambda k, v: {"user": k, "page": v["page"], "n": len(v["page"])})
        .to("views")
    )
    return b.build()


CLICKS = [
    ("u1", {"page": "/a"}, 1),
    ("u2", {"page": "/health"}, 2),
    ("u3", {"page": "/books"}, 3),
]


def test_one_topology_runs_in_the_driver_then_unchanged_on_files(spark: Any, app_id: str) -> None:
    topology = pages_topology()
    cfg = StreamsConfig(application_id=app_id, num_partitions=2)
    with TopologyTestDriver(topology, cfg, session=spark) as d:
        src = d.create_input_topic("clicks")
        for k, v, ts in CLICKS:
            src.pipe_input(k, v, timestamp=ts)
        in_driver = d.create_output_topic("views").read_key_values()
    assert in_driver == [
        ("u1", {"user": "u1", "page": "/a", "n": 2}),
        ("u3", {"user": "u3", "page": "/books", "n": 6}),
    ]

    with tempfile.TemporaryDirectory() as data:
        # JSON lines in the envelope layout, as data_dir binds every name
        os.makedirs(os.path.join(data, "clicks"))
        with open(os.path.join(data, "clicks", "part-0.jsonl"), "w") as f:
            for k, v, ts in CLICKS:
                f.write(json.dumps({"key": k, "value": v, "timestamp": ts}) + "\n")
        files = cfg.with_(data_dir=data, checkpoint_dir=os.path.join(data, "checkpoint"))
        report = StreamsApp(topology, files, session=spark).run_until_caught_up()
        assert report.input_records == 3
        rows = spark.read.json(os.path.join(data, "views")).select("key", "value").collect()
        # the sink writes dynamic keys and values as JSON text
        on_files = sorted((json.loads(r["key"]), json.loads(r["value"])) for r in rows)
    assert on_files == sorted(in_driver)


# -- a Topic with a schema, bound in StreamsConfig(topics=...) -------------------------
@dataclasses.dataclass
class Order:
    id: str
    qty: int


def test_topics_with_a_schema_type_the_source_and_convert_at_the_sink(
    spark: Any, app_id: str
) -> None:
    from kspark import Topic
    from kspark.errors import LogAndContinueProductionExceptionHandler

    b = StreamsBuilder()
    # names only, and a lambda with no types: it gets Orders because the topic says so
    b.stream("orders").map_values(lambda o: o.qty * 10 if o.qty != 2 else "x").to("out")
    with tempfile.TemporaryDirectory() as data:
        os.makedirs(os.path.join(data, "orders"))
        with open(os.path.join(data, "orders", "a.jsonl"), "w") as f:
            for i in (1, 2, 3):
                f.write(json.dumps({"id": f"o{i}", "qty": i}) + "\n")
        cfg = StreamsConfig(
            application_id=app_id,
            checkpoint_dir=os.path.join(data, "chk"),
            num_partitions=1,
            production_exception_handler=LogAndContinueProductionExceptionHandler,
            topics={
                # layout="value" needs a record type: the topology does not give one
                "orders": Topic.jsonl(
                    "orders",
                    os.path.join(data, "orders"),
                    layout="value",
                    key_field="id",
                    key_type=str,
                    value_type=Order,
                ),
                "out": Topic.parquet("out", os.path.join(data, "out"), value_type=int),
            },
        )
        app = StreamsApp(b.build(), cfg, session=spark)
        app.run_until_caught_up()
        out = spark.read.parquet(os.path.join(data, "out"))
        assert dict(out.dtypes)["value"] == "bigint"  # converted: not JSON text
        assert sorted((r.key, r.value) for r in out.collect()) == [("o1", 10), ("o3", 30)]
        # "x" is no int: the sink's production failure, counted under the sink's name
        assert app.metrics().dropped_by_reason() == {
            ("KSTREAM-SINK-0000000002", "production-error"): 1
        }


def test_a_sink_topic_with_a_schema_converts_in_the_test_driver(spark: Any, app_id: str) -> None:
    from kspark import Topic
    from kspark.errors import LogAndContinueProductionExceptionHandler

    b = StreamsBuilder()
    b.stream("in").map_values(lambda v: v if v != 2 else "x").to(
        Topic.jsonl("out", "/deployed/out", value_type=int)
    )
    cfg = StreamsConfig(
        application_id=app_id,
        num_partitions=1,
        production_exception_handler=LogAndContinueProductionExceptionHandler,
    )
    with TopologyTestDriver(b.build(), cfg, session=spark) as d:
        src = d.create_input_topic("in")
        for i, k in enumerate("abc", start=1):
            src.pipe_input(k, i, timestamp=i)
        assert d.create_output_topic("out").read_key_values() == [("a", 1), ("c", 3)]
        assert d.metrics().dropped_by_reason() == {
            ("KSTREAM-SINK-0000000002", "production-error"): 1
        }
