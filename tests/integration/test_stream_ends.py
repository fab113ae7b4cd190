"""The ends of a stream on the real server: ``foreach``, ``print`` and
``to(topic_extractor)``, through the test driver and a ``StreamsApp`` on file topics."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import pytest

from kspark import Named, Printed, RecordContext, StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.errors import (
    InvalidArgumentError,
    LogAndContinueProcessingExceptionHandler,
    LogAndContinueProductionExceptionHandler,
)
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark


def cfg(app_id: str, **kw: Any) -> StreamsConfig:
    return StreamsConfig(application_id=app_id, num_partitions=2, **kw)


class AppendTo:
    """A foreach action that appends ``key=value`` lines to a file: the workers' own
    memory is not the test's, a shared file is."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __call__(self, key: Any, value: Any) -> None:
        if value == "boom":
            raise ValueError("no booms")
        with open(self.path, "a") as f:
            f.write(f"{key}={value}\n")


def lines(path: str) -> list[str]:
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return f.read().splitlines()


def test_foreach_sees_every_record_once_per_batch(spark: Any, app_id: str, tmp_path: Any) -> None:
    seen = str(tmp_path / "seen.txt")
    b = StreamsBuilder()
    words = b.stream("words", key_type=str, value_type=str)
    words.filter(lambda k, v: v != "skip").foreach(AppendTo(seen))
    with TopologyTestDriver(b.build(), cfg(app_id), session=spark) as d:
        src = d.create_input_topic("words", key_type=str, value_type=str)
        src.pipe_records([("a", "x", 1), ("b", "skip", 2), ("c", "y", 3)])
        d.process()
        assert sorted(lines(seen)) == ["a=x", "c=y"]
        src.pipe_input("d", "z", timestamp=4)
        d.process()
        assert sorted(lines(seen)) == ["a=x", "c=y", "d=z"]
        # an end of the stream: nothing written, nothing counted as dropped
        assert d.metrics().dropped_records_total == {}


@pytest.mark.parametrize("file_sink", ["auto", "batch_folders"])
def test_a_foreach_beside_a_sink_runs_with_either_writer(
    spark: Any, app_id: str, tmp_path: Any, file_sink: str
) -> None:
    """The branch that ends in foreach runs in the query of the sink's writer: Spark's
    file sink (the driver's pick for one sink) and the batch-folder writer alike."""
    seen = str(tmp_path / "seen.txt")
    b = StreamsBuilder()
    words = b.stream("words", key_type=str, value_type=str)
    words.filter(lambda k, v: v != "skip").foreach(AppendTo(seen))
    words.to("copied")
    with TopologyTestDriver(b.build(), cfg(app_id, file_sink=file_sink), session=spark) as d:
        src = d.create_input_topic("words", key_type=str, value_type=str)
        src.pipe_records([("a", "x", 1), ("b", "skip", 2), ("c", "y", 3)])
        out = d.create_output_topic("copied", key_type=str, value_type=str)
        assert out.read_key_values() == [("a", "x"), ("b", "skip"), ("c", "y")]
        assert sorted(lines(seen)) == ["a=x", "c=y"]


def test_a_failing_foreach_goes_to_the_processing_handler(
    spark: Any, app_id: str, tmp_path: Any
) -> None:
    seen = str(tmp_path / "seen.txt")
    b = StreamsBuilder()
    b.stream("words", key_type=str, value_type=str).foreach(AppendTo(seen), Named.as_("sink-fn"))
    config = cfg(app_id, processing_exception_handler=LogAndContinueProcessingExceptionHandler)
    with TopologyTestDriver(b.build(), config, session=spark) as d:
        src = d.create_input_topic("words", key_type=str, value_type=str)
        src.pipe_records([("a", "x", 1), ("b", "boom", 2), ("c", "y", 3)])
        d.process()
        assert sorted(lines(seen)) == ["a=x", "c=y"]
        dropped = d.metrics().dropped_records_total
        assert sum(dropped.values()) == 1
        assert {processor for processor, _ in dropped} == {"sink-fn"}


def test_print_to_sysout_shows_in_the_tests_output(
    spark: Any, app_id: str, capsys: pytest.CaptureFixture[str]
) -> None:
    b = StreamsBuilder()
    s = b.stream("in", key_type=str, value_type=int)
    s.print(Printed.to_sysout())
    s.print(Printed.to_sysout().with_label("big").with_key_value_mapper(lambda k, v: v * 10))
    s.print(Printed.to_sysout(), label="plain")
    with TopologyTestDriver(b.build(), cfg(app_id), session=spark) as d:
        src = d.create_input_topic("in", key_type=str, value_type=int)
        src.pipe_records([("a", 1, 1), (None, 2, 2)])
        capsys.readouterr()
        d.process()
        printed = capsys.readouterr().out.splitlines()
    # as Kafka Streams' Printed: "[label]: key, value", the label by default the name
    assert sorted(printed) == sorted(
        [
            "[KSTREAM-PRINTER-0000000001]: a, 1",
            "[KSTREAM-PRINTER-0000000001]: null, 2",
            "[big]: 10",
            "[big]: 20",
            "[plain]: a, 1",
            "[plain]: null, 2",
        ]
    )


def test_print_to_file_appends_lines(spark: Any, app_id: str, tmp_path: Any) -> None:
    out = str(tmp_path / "printed" / "orders.txt")
    b = StreamsBuilder()
    b.stream("orders", key_type=str, value_type=int).print(
        Printed.to_file(out).with_label("orders")
    )
    with TopologyTestDriver(b.build(), cfg(app_id), session=spark) as d:
        src = d.create_input_topic("orders", key_type=str, value_type=int)
        src.pipe_input("a", 1, timestamp=1)
        d.process()
        src.pipe_input("b", 2, timestamp=2)
        d.process()
    assert sorted(lines(out)) == ["[orders]: a, 1", "[orders]: b, 2"]


def by_region(key: str, value: dict[str, Any], ctx: RecordContext) -> str:
    return f"{ctx.topic}-{value['region']}"


def test_topic_extractor_routes_records_by_their_content(spark: Any, app_id: str) -> None:
    b = StreamsBuilder()
    orders = b.stream("orders", key_type=str)
    orders.to(by_region)
    orders.filter(lambda k, v: v["region"] == "eu").to("orders-eu")  # and a static sink
    with TopologyTestDriver(b.build(), cfg(app_id), session=spark) as d:
        src = d.create_input_topic("orders", key_type=str)
        src.pipe_records(
            [("a", {"region": "eu"}, 1), ("b", {"region": "us"}, 2), ("c", {"region": "eu"}, 3)]
        )
        eu = d.create_output_topic("orders-eu").read_key_values()
        us = d.create_output_topic("orders-us").read_key_values()
    # both sinks write orders-eu: its records from each, none replacing the other's
    assert sorted(eu) == sorted([("a", {"region": "eu"}), ("c", {"region": "eu"})] * 2)
    assert us == [("b", {"region": "us"})]


def test_record_context_has_the_source_position(spark: Any, app_id: str) -> None:
    def name(key: str, value: int, ctx: RecordContext) -> str:
        assert ctx.timestamp == value * 10
        assert dict(ctx.headers).get("h") == b"x"
        return f"p{ctx.partition}-o{ctx.offset}"

    b = StreamsBuilder()
    b.stream("in", key_type=str, value_type=int).to(name)
    with TopologyTestDriver(b.build(), cfg(app_id), session=spark) as d:
        src = d.create_input_topic("in", key_type=str, value_type=int)
        src.pipe_input("a", 1, timestamp=10, headers=[("h", b"x")])
        src.pipe_input("b", 2, timestamp=20, headers=[("h", b"x")])
        src.pipe_input("c", 3, timestamp=30, headers=[("h", b"x")], partition=1)
        assert d.create_output_topic("p0-o1", key_type=str, value_type=int).read_values() == [2]
        assert d.create_output_topic("p1-o0", key_type=str, value_type=int).read_values() == [3]
        assert d.create_output_topic("p0-o0", key_type=str, value_type=int).read_values() == [1]


def read_jsonl(folder: str) -> list[dict[str, Any]]:
    rows = []
    for root, _, files in os.walk(folder):
        for f in files:
            if f.endswith(".json"):
                with open(os.path.join(root, f)) as fh:
                    rows.extend(json.loads(line) for line in fh if line.strip())
    return rows


def test_unbound_names_go_to_the_production_handler(spark: Any, app_id: str, tmp_path: Any) -> None:
    base = str(tmp_path)
    os.makedirs(os.path.join(base, "in"))
    with open(os.path.join(base, "in", "a.jsonl"), "w") as f:
        for k, v in [("a", "known"), ("b", "unknown"), ("c", "known"), ("d", None)]:
            f.write(json.dumps({"key": k, "value": v, "timestamp": 1}) + "\n")
    b = StreamsBuilder()

    def pick(key: str, value: str | None, ctx: RecordContext) -> str:
        if value is None:
            raise KeyError("no value")
        return value

    b.stream("in", key_type=str, value_type=str).to(pick, Named.as_("route"))
    config = cfg(
        app_id,
        checkpoint_dir=os.path.join(base, "chk"),
        topics={
            "in": Topic.jsonl("in", os.path.join(base, "in")),
            "known": Topic.jsonl("known", os.path.join(base, "known")),
        },
        processing_exception_handler=LogAndContinueProcessingExceptionHandler,
        production_exception_handler=LogAndContinueProductionExceptionHandler,
    )
    app = StreamsApp(b.build(), config, session=spark)
    app.run_until_caught_up()
    written = read_jsonl(os.path.join(base, "known"))
    assert sorted(r["key"] for r in written) == ["a", "c"]
    reasons = app.metrics().dropped_reasons
    assert reasons == {("route", "production-error"): 1, ("route", "processing-error"): 1}
    assert not os.path.exists(os.path.join(base, "unknown"))


def test_a_stream_of_several_topics_keeps_each_records_topic(spark: Any, app_id: str) -> None:
    b = StreamsBuilder()
    b.stream(["eu", "us"], key_type=str, value_type=int).to(lambda k, v, ctx: f"copy-{ctx.topic}")
    with TopologyTestDriver(b.build(), cfg(app_id), session=spark) as d:
        eu = d.create_input_topic("eu", key_type=str, value_type=int)
        us = d.create_input_topic("us", key_type=str, value_type=int)
        eu.pipe_input("a", 1, timestamp=1)
        us.pipe_input("b", 2, timestamp=2)
        eu.pipe_input("c", 3, timestamp=3)
        d.process()
        assert d.create_output_topic("copy-eu", key_type=str, value_type=int).read_key_values() == [
            ("a", 1),
            ("c", 3),
        ]
        assert d.create_output_topic("copy-us", key_type=str, value_type=int).read_key_values() == [
            ("b", 2)
        ]
        assert d.metrics().input_records == 3


def test_a_pattern_reads_every_matching_topic(spark: Any, app_id: str) -> None:
    b = StreamsBuilder()
    b.stream(re.compile("orders-.*"), key_type=str, value_type=int).map_values(
        lambda k, v: v * 10, value_type=int
    ).to("all-orders")
    with TopologyTestDriver(b.build(), cfg(app_id), session=spark) as d:
        out = d.create_output_topic("all-orders", key_type=str, value_type=int)
        first = d.create_input_topic("orders-eu", key_type=str, value_type=int)
        first.pipe_input("a", 1, timestamp=1)
        assert out.read_key_values() == [("a", 10)]
        # a topic that appears later and matches is read too; a whole-name match only
        later = d.create_input_topic("orders-us", key_type=str, value_type=int)
        later.pipe_input("b", 2, timestamp=2)
        first.pipe_input("c", 3, timestamp=3)
        assert sorted(out.read_key_values()) == [("b", 20), ("c", 30)]
        with pytest.raises(InvalidArgumentError, match="patterns"):
            d.create_input_topic("returns-orders-x", key_type=str, value_type=int)


def test_a_pattern_under_data_dir_reads_matching_folders(
    spark: Any, app_id: str, tmp_path: Any
) -> None:
    base = str(tmp_path / "data")
    for folder, rows in (
        ("orders-eu", [("a", 1)]),
        ("orders-us", [("b", 2)]),
        ("refunds", [("z", 9)]),
    ):
        os.makedirs(os.path.join(base, folder))
        with open(os.path.join(base, folder, "part.jsonl"), "w") as f:
            for k, v in rows:
                f.write(json.dumps({"key": k, "value": v, "timestamp": 5}) + "\n")
    b = StreamsBuilder()
    b.stream(re.compile("orders-.*"), key_type=str, value_type=int).to(
        lambda k, v, ctx: f"seen-{ctx.topic}"
    )
    config = cfg(app_id, data_dir=base, checkpoint_dir=str(tmp_path / "chk"))
    StreamsApp(b.build(), config, session=spark).run_until_caught_up()
    assert [r["key"] for r in read_jsonl(os.path.join(base, "seen-orders-eu"))] == ["a"]
    assert [r["key"] for r in read_jsonl(os.path.join(base, "seen-orders-us"))] == ["b"]
    assert not os.path.exists(os.path.join(base, "seen-refunds"))
