"""Spark's own file sink for file topics (``StreamsConfig.file_sink``): which apps get it,
exactly-once output through its ``_spark_metadata`` log, downstream reads, and the
refusals that keep a topic in one layout (kspark.runtime.filesink)."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from datetime import timedelta
from typing import Any

import pytest

from kspark import StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.errors import ConfigError, RescaleError

pytestmark = pytest.mark.spark


@dataclasses.dataclass
class Ev:
    k: str
    v: int
    ts: int


def _write(folder: str, name: str, values: list[int]) -> None:
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{name}")
    with open(tmp, "w") as f:
        for v in values:
            f.write(json.dumps({"k": f"k{v % 5}", "v": v, "ts": 1000 * v}) + "\n")
    os.replace(tmp, os.path.join(folder, name))


def _source(base: str) -> Topic:
    return Topic.jsonl(
        "in", os.path.join(base, "in"), layout="value", key_field="k", timestamp_field="ts"
    )


def _stateless(base: str, out: str = "out") -> Any:
    b = StreamsBuilder()
    s = b.stream(_source(base), key_type=str, value_type=Ev)
    s.map_values(lambda e: e.v * 10, value_type=int).to(Topic.jsonl("out", os.path.join(base, out)))
    return b.build()


def _dedup(base: str) -> Any:
    b = StreamsBuilder()
    s = b.stream(_source(base), key_type=str, value_type=Ev)
    s.deduplicate_by_key_value(lambda k, e: e.v, timedelta(hours=1)).map_values(
        lambda e: e.v, value_type=int
    ).to(Topic.jsonl("out", os.path.join(base, "out")))
    return b.build()


def _config(base: str, app_id: str, **kw: Any) -> StreamsConfig:
    return StreamsConfig(
        application_id=app_id, checkpoint_dir=os.path.join(base, "chk"), num_partitions=2, **kw
    )


def _values(spark: Any, folder: str) -> list[int]:
    return sorted(r["value"] for r in spark.read.json(folder).select("value").collect())


def test_stateless_app_writes_through_spark_sink_exactly_once(spark: Any, app_id: str) -> None:
    with tempfile.TemporaryDirectory() as base:
        out = os.path.join(base, "out")
        _write(os.path.join(base, "in"), "a.jsonl", list(range(6)))
        app = StreamsApp(_stateless(base), _config(base, app_id), session=spark)
        app.run_until_caught_up(progress=False)
        # Spark's layout: its log, no batch folders (the foreachBatch writer is not used)
        assert os.path.isdir(os.path.join(out, "_spark_metadata"))
        assert not [d for d in os.listdir(out) if d.startswith("batch_id=")]
        assert _values(spark, out) == [v * 10 for v in range(6)]
        # a restart without new input writes nothing; new input is written once
        app.run_until_caught_up(progress=False)
        _write(os.path.join(base, "in"), "b.jsonl", list(range(6, 9)))
        report = app.run_until_caught_up(progress=False)
        assert _values(spark, out) == [v * 10 for v in range(9)]
        # the counts still come from the query's observed metrics
        assert report.output_records == 3


def test_downstream_app_reads_a_spark_sink_topic(spark: Any, app_id: str) -> None:
    with tempfile.TemporaryDirectory() as base:
        _write(os.path.join(base, "in"), "a.jsonl", list(range(5)))
        StreamsApp(_stateless(base), _config(base, app_id), session=spark).run_until_caught_up(
            progress=False
        )
        # a second app reads the first one's topic (an envelope topic)
        b2 = StreamsBuilder()
        b2.stream(
            Topic.jsonl("out", os.path.join(base, "out")), key_type=str, value_type=int
        ).map_values(lambda v: v + 1, value_type=int).to(
            Topic.jsonl("out2", os.path.join(base, "out2"))
        )
        cfg2 = StreamsConfig(
            application_id=app_id + "-down",
            checkpoint_dir=os.path.join(base, "chk2"),
            num_partitions=2,
        )
        StreamsApp(b2.build(), cfg2, session=spark).run_until_caught_up(progress=False)
        assert _values(spark, os.path.join(base, "out2")) == [v * 10 + 1 for v in range(5)]


def test_stateful_app_keeps_batch_folders_and_spark_sink_refuses_rescale(
    spark: Any, app_id: str
) -> None:
    with tempfile.TemporaryDirectory() as base:
        _write(os.path.join(base, "in"), "a.jsonl", [1, 2, 2, 3])
        StreamsApp(_dedup(base), _config(base, app_id), session=spark).run_until_caught_up(
            progress=False
        )
        out = os.path.join(base, "out")
        assert [d for d in os.listdir(out) if d.startswith("batch_id=")]
        assert not os.path.exists(os.path.join(out, "_spark_metadata"))
        # a topic in batch folders is not switched to Spark's sink
        with pytest.raises(ConfigError, match="batch_id=N folders"):
            StreamsApp(
                _dedup(base), _config(base, app_id, file_sink="spark"), session=spark
            ).run_until_caught_up(progress=False)

    with tempfile.TemporaryDirectory() as base:
        _write(os.path.join(base, "in"), "a.jsonl", [1, 2, 2, 3])
        cfg = _config(base, app_id + "-s", file_sink="spark")
        app = StreamsApp(_dedup(base), cfg, session=spark)
        app.run_until_caught_up(progress=False)
        assert _values(spark, os.path.join(base, "out")) == [1, 2, 3]
        with pytest.raises(RescaleError, match="file_sink='spark'"):
            app.rescale(3, progress=False)
        # and the batch-folder writer does not write into Spark's layout
        with pytest.raises(ConfigError, match="_spark_metadata"):
            StreamsApp(
                _dedup(base), cfg.with_(file_sink="batch_folders"), session=spark
            ).run_until_caught_up(progress=False)


def test_spark_sink_refused_with_a_dead_letter_queue(spark: Any, app_id: str) -> None:
    with tempfile.TemporaryDirectory() as base:
        _write(os.path.join(base, "in"), "a.jsonl", [1])
        cfg = _config(
            base,
            app_id,
            file_sink="spark",
            processing_exception_handler="dead-letter-queue",
            dead_letter_queue_topic=Topic.jsonl("dlq", os.path.join(base, "dlq")),
        )
        with pytest.raises(ConfigError, match="dead-letter queue"):
            StreamsApp(_stateless(base), cfg, session=spark).run_until_caught_up(progress=False)


def test_driver_reads_spark_sink_topics_in_output_order(spark: Any) -> None:
    from kspark.testing import TopologyTestDriver

    b = StreamsBuilder()
    left = b.stream("left", key_type=str, value_type=int)
    right = b.stream("right", key_type=str, value_type=int)
    left.merge(right).flat_map_values(lambda v: [v, -v], value_type=int).to("out")
    with TopologyTestDriver(b.build(), session=spark) as d:
        lt = d.create_input_topic("left", key_type=str, value_type=int)
        rt = d.create_input_topic("right", key_type=str, value_type=int)
        out = d.create_output_topic("out", key_type=str, value_type=int)
        for i in range(1, 7):  # interleaved over the two inputs (two files, two partitions)
            (lt if i % 2 else rt).pipe_input(f"k{i}", i, timestamp=i)
        assert out.read_values() == [x for i in range(1, 7) for x in (i, -i)]
        # written by Spark's file sink (the app has no state), read back batch by batch
        assert os.path.isdir(os.path.join(d._topic_path("out"), "_spark_metadata"))
        lt.pipe_input("k7", 7, timestamp=7)
        assert out.read_values() == [7, -7]
