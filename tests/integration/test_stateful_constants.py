"""Deduplication and stream-table joins straight after file topics: the envelope columns
that are the same for every record (a file topic's name, partition and empty headers)
stay out of the operator's Python worker, into it and out of it, and still reach
handlers, dead letters and the output."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from kspark import Materialized, StreamsApp, StreamsBuilder, StreamsConfig, Topic
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


class Context(ProcessingExceptionHandler):
    """Sends the error context it was given to the dead-letter queue."""

    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        fields = {
            "processor": context.processor_node_id,
            "topic": context.topic,
            "partition": context.partition,
            "headers": list(context.headers),
        }
        return Response.resume([DeadLetterRecord(key="ctx", value=fields)])


def _write(folder: str, rows: list[tuple[str, int, int]]) -> None:
    os.makedirs(folder, exist_ok=True)
    table = pa.table(
        {
            "k": [k for k, _, _ in rows],
            "v": pa.array([v for _, v, _ in rows], pa.int64()),
            "ts": pa.array([ts for _, _, ts in rows], pa.int64()),
        }
    )
    pq.write_table(table, os.path.join(folder, "part-0.parquet"))


def _topic(name: str, base: str) -> Topic:
    return Topic.parquet(
        name, os.path.join(base, name), layout="value", key_field="k", timestamp_field="ts"
    )


def _config(base: str, app_id: str) -> StreamsConfig:
    return StreamsConfig(
        application_id=app_id,
        checkpoint_dir=os.path.join(base, "chk"),
        num_partitions=2,
        processing_exception_handler=Context,
        dead_letter_queue_topic=Topic.jsonl("dlq", os.path.join(base, "dlq")),
    )


def _inverse(e: Ev) -> int:
    return 1000 // e.v  # v == 0 fails


def _dedup_app(spark: Any, base: str, app_id: str) -> StreamsApp:
    b = StreamsBuilder()
    b.stream(_topic("events", base), key_type=str, value_type=Ev).deduplicate_by_key(
        timedelta(minutes=1)
    ).map_values(_inverse, value_type=int).to(Topic.parquet("out", os.path.join(base, "out")))
    cfg = _config(base, app_id)
    return StreamsApp(b.build(), cfg, session=spark)


def _passes(spark: Any, app: StreamsApp) -> tuple[str, str]:
    """The columns going into the operator's Python worker and coming out of it (Spark's
    ``FlatMapGroupsInPandasWithState``: its function's arguments, its grouping columns,
    then its output)."""
    output = compile_topology(app.topology, app.config)
    df = build_dataframe(output, spark, checkpoint=f"{app.config.checkpoint_dir}/query")
    plan = df._explain_string(extended=True)  # type: ignore[operator]
    physical = plan[plan.index("== Physical Plan ==") :]
    (line,) = [s for s in physical.splitlines() if "FlatMapGroupsInPandasWithState" in s]
    inputs = line[line.index("(") : line.index(")")]
    outputs = line[line.index("], [") + 4 :]
    return inputs, outputs[: outputs.index("]")]


def test_dedup_keeps_constant_columns_out_of_its_passes(spark: Any, app_id: str) -> None:
    base = tempfile.mkdtemp()
    _write(os.path.join(base, "events"), [("a", 1, 1000)])
    packed, unpacked = _passes(spark, _dedup_app(spark, base, app_id))
    for name in ("headers", "topic", "partition", "ks_seq", "ks_sub"):
        assert f"{name}#" not in packed, packed
        assert f"{name}#" not in unpacked, unpacked
    # the struct value crosses as flat columns (value__ks0...)
    assert "key#" in packed and "value" in packed and "offset#" in packed
    assert "key#" in unpacked and "offset#" in unpacked


def test_dedup_output_and_downstream_handlers_see_the_constants(spark: Any, app_id: str) -> None:
    base = tempfile.mkdtemp()
    _write(os.path.join(base, "events"), [("a", 1, 1000), ("a", 5, 1001), ("z", 0, 1002)])
    app = _dedup_app(spark, base, app_id)
    app.run_until_caught_up(progress=False)
    out = spark.read.parquet(os.path.join(base, "out")).collect()
    assert [(r["key"], r["value"], list(r["headers"])) for r in out] == [("a", 1000, [])]
    (dead,) = spark.read.json(os.path.join(base, "dlq")).collect()
    assert (dead["topic"], dead["partition"]) == ("events", 0)
    ctx = json.loads(dead["value"])
    assert (ctx["topic"], ctx["partition"], ctx["headers"]) == ("events", 0, [])


@dataclasses.dataclass
class Rate:
    k: str
    v: int
    ts: int


def _joiner(e: Ev, r: Rate) -> int:
    return e.v // r.v  # a rate of 0 fails


def test_join_keeps_the_constants_both_sources_share(spark: Any, app_id: str) -> None:
    base = tempfile.mkdtemp()
    _write(os.path.join(base, "rates"), [("a", 2, 10), ("z", 0, 10)])
    _write(os.path.join(base, "events"), [("a", 10, 2000), ("z", 7, 2001)])
    b = StreamsBuilder()
    rates = b.table(
        _topic("rates", base),
        key_type=str,
        value_type=Rate,
        materialized=Materialized.as_versioned("rates-store", timedelta(days=1)),
    )
    b.stream(_topic("events", base), key_type=str, value_type=Ev).join(
        rates, _joiner, value_type=int
    ).to(Topic.parquet("out", os.path.join(base, "out")))
    cfg = _config(base, app_id)
    app = StreamsApp(b.build(), cfg, session=spark)
    packed, unpacked = _passes(spark, app)
    # the two topics' names differ: topic crosses; partition and headers do not
    assert "topic#" in packed and "topic#" in unpacked
    for name in ("headers", "partition", "ks_seq", "ks_sub"):
        assert f"{name}#" not in packed and f"{name}#" not in unpacked
    app.run_until_caught_up(progress=False)
    out = spark.read.parquet(os.path.join(base, "out")).collect()
    assert [(r["key"], r["value"], list(r["headers"])) for r in out] == [("a", 5, [])]
    (dead,) = spark.read.json(os.path.join(base, "dlq")).collect()
    ctx = json.loads(dead["value"])
    assert (ctx["topic"], ctx["partition"], ctx["headers"]) == ("events", 0, [])
