"""The query of a stateless app over a file topic: what crosses into the chain's Python pass
and how Spark stages the source's checks (docs/design/stateless-chain.md), and that the
columns kept out of the pass still reach handlers, dead letters and the output."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kspark import StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.compiler.compiler import compile_topology
from kspark.compiler.lowering import build_dataframe
from kspark.errors import (
    DeadLetterRecord,
    ErrorHandlerContext,
    ProcessingExceptionHandler,
    Response,
)

pytestmark = pytest.mark.spark


@dataclasses.dataclass
class Ev:
    k: str
    v: int
    ts: int


def _inverse(e: Ev) -> int:
    return 1000 // e.v  # v == 0 fails


class Context(ProcessingExceptionHandler):
    """Sends the error context it was given to the dead-letter queue."""

    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        fields = {
            "topic": context.topic,
            "partition": context.partition,
            "offset_set": context.offset is not None,
            "headers": list(context.headers),
            "timestamp": context.timestamp,
        }
        return Response.resume([DeadLetterRecord(key="ctx", value=fields)])


def _app(spark: Any, base: str, app_id: str, fan_out: bool = False, **config: Any) -> StreamsApp:
    b = StreamsBuilder()
    source = Topic.parquet(
        "events", os.path.join(base, "in"), layout="value", key_field="k", timestamp_field="ts"
    )
    s = b.stream(source, key_type=str, value_type=Ev)
    if fan_out:
        s.flat_map_values(lambda e: [e.v, e.v], value_type=int).to(
            Topic.parquet("out", os.path.join(base, "out"))
        )
    else:
        s.map_values(_inverse, value_type=int).to(Topic.parquet("out", os.path.join(base, "out")))
    cfg = StreamsConfig(
        application_id=app_id,
        checkpoint_dir=os.path.join(base, "chk"),
        num_partitions=2,
        **config,
    )
    return StreamsApp(b.build(), cfg, session=spark)


def _write(base: str, values: list[int]) -> None:
    os.makedirs(os.path.join(base, "in"), exist_ok=True)
    table = pa.table(
        {
            "k": [f"k{v}" for v in values],
            "v": pa.array(values, pa.int64()),
            "ts": pa.array([1000 + v for v in values], pa.int64()),
        }
    )
    pq.write_table(table, os.path.join(base, "in", "part-0.parquet"))


def test_constant_columns_stay_out_of_the_pass_and_the_count_follows_the_checks(
    spark: Any, app_id: str
) -> None:
    base = tempfile.mkdtemp()
    _write(base, [1, 2])
    app = _app(spark, base, app_id)
    df = build_dataframe(compile_topology(app.topology, app.config), spark)
    plan = df._explain_string(extended=True)  # type: ignore[operator]
    physical = plan[plan.index("== Physical Plan ==") :]
    (call,) = [line for line in physical.splitlines() if "MapInArrow" in line]
    passed = call[call.index("(") : call.index(")")]
    # the topic's name, partition and (no) headers are the same for every record: they
    # are added after the pass, not converted to Arrow and back
    for name in ("headers", "topic", "partition", "ks_sub", "ks_seq"):
        assert f"{name}#" not in passed, call
    assert "key#" in passed and "value#" in passed and "offset#" in passed
    # the columns' types are the declared ones: nothing can fail to read, no check
    assert "KSPARK_DESERIALIZATION_FAILED" not in physical
    # the records are counted after the timestamp check, so that the check runs in the
    # source's stage and not in one of its own after the count
    lines = physical.splitlines()
    count = next(i for i, line in enumerate(lines) if "CollectMetrics kspark_in:" in line)
    check = next(i for i, line in enumerate(lines) if "KSPARK_INVALID_TIMESTAMP" in line)
    assert count < check  # above it in the printed tree: applied after it


def test_constant_columns_reach_handlers_and_output(spark: Any, app_id: str) -> None:
    base = tempfile.mkdtemp()
    _write(base, [1, 0, 4])
    app = _app(
        spark,
        base,
        app_id,
        processing_exception_handler=Context,
        dead_letter_queue_topic=Topic.jsonl("dlq", os.path.join(base, "dlq")),
    )
    report = app.run_until_caught_up(progress=False)
    assert report.input_records == 3
    out = spark.read.parquet(os.path.join(base, "out")).collect()
    assert sorted((r["key"], r["value"], r["partition"] in (0, 1)) for r in out) == [
        ("k1", 1000, True),
        ("k4", 250, True),
    ]
    assert all(list(r["headers"]) == [] for r in out)
    dead = spark.read.json(os.path.join(base, "dlq")).collect()
    (row,) = dead
    assert (row["topic"], row["partition"], list(row["headers"] or [])) == ("events", 0, [])
    ctx = json.loads(row["value"])
    assert ctx == {
        "topic": "events",
        "partition": 0,
        "offset_set": True,
        "headers": [],
        "timestamp": 1000,
    }


def test_a_fan_out_numbers_its_records_in_the_pass(spark: Any, app_id: str) -> None:
    base = tempfile.mkdtemp()
    _write(base, [1, 2])
    app = _app(spark, base, app_id, fan_out=True)
    df = build_dataframe(compile_topology(app.topology, app.config), spark)
    plan = df._explain_string(extended=True)  # type: ignore[operator]
    physical = plan[plan.index("== Physical Plan ==") :]
    (call,) = [line for line in physical.splitlines() if "MapInArrow" in line]
    passed = call[call.index("(") : call.index(")")]
    assert "ks_sub#" in passed and "topic#" not in passed, call
    app.run_until_caught_up(progress=False)
    out = spark.read.parquet(os.path.join(base, "out")).collect()
    assert sorted((r["key"], r["value"]) for r in out) == [
        ("k1", 1),
        ("k1", 1),
        ("k2", 2),
        ("k2", 2),
    ]
