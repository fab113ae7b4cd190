"""Stream-table joins: latest-value tables, and versioned tables joined as of the stream
record's time (KIP-889, KIP-914, KIP-923)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from kspark import Joined, Materialized, StreamsBuilder, StreamsConfig, Topic
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark


def topology(versioned: bool, left: bool, retention_ms: int = 10_000, grace_ms: int = 0) -> Any:
    b = StreamsBuilder()
    mat = Materialized.as_versioned("b-store", timedelta(milliseconds=retention_ms)) if versioned else Materialized.as_("b-store")
    table = b.table(Topic.jsonl("B", "/unused"), key_type=str, value_type=str, materialized=mat)
    stream = b.stream(Topic.jsonl("A", "/unused"), key_type=str, value_type=str)
    joined = Joined.with_grace_period(Joined(), timedelta(milliseconds=grace_ms)) if grace_ms else None
    join = stream.left_join if left else stream.join
    join(table, lambda a, bv: f"({a},{bv})", joined, value_type=str).to(Topic.jsonl("out", "/unused"))
    return b.build()


def drive(spark: Any, app_id: str, topo: Any, batches: list[list[tuple[str, str | None, str | None, int]]]) -> list[str]:
    cfg = StreamsConfig(application_id=app_id, num_partitions=2)
    with TopologyTestDriver(topo, cfg, session=spark) as d:
        a = d.create_input_topic("A", key_type=str, value_type=str)
        bt = d.create_input_topic("B", key_type=str, value_type=str)
        for batch in batches:
            for side, k, v, ts in batch:
                (a if side == "A" else bt).pipe_input(k, v, timestamp=ts)
            d.process()
        return d.create_output_topic("out", key_type=str, value_type=str).read_values()


SEED = [("B", "k", "b0", 0), ("A", "k", "a1", 1), ("B", "k", "b3", 3), ("A", "k", "a4", 4), ("A", "k", "a2", 2)]


def test_seed_motivating_example_joins_as_of_the_stream_time(spark: Any, app_id: str) -> None:
    # one record per micro-batch, as the seed tells it
    out = drive(spark, app_id, topology(versioned=True, left=False), [[r] for r in SEED])
    assert out == ["(a1,b0)", "(a4,b3)", "(a2,b0)"]


def test_latest_value_table_uses_the_latest_value(spark: Any, app_id: str) -> None:
    out = drive(spark, app_id, topology(versioned=False, left=False), [[r] for r in SEED])
    assert out == ["(a1,b0)", "(a4,b3)", "(a2,b3)"]


def test_versioned_semantics_in_one_batch(spark: Any, app_id: str) -> None:
    records = [
        ("B", "k", "v10", 10),
        ("B", "k", "v20", 20),
        ("B", "k", "v20b", 20),  # same timestamp: replaces v20
        ("B", "k", None, 30),  # tombstone: deleted as of 30
        ("A", "k", "a15", 15),
        ("A", "k", "a25", 25),
        ("A", "k", "a35", 35),
        ("A", None, "anull", 36),  # None key
        ("A", "x", "ax", 37),  # no table value
    ]
    inner = drive(spark, app_id, topology(versioned=True, left=False), [records])
    assert inner == ["(a15,v10)", "(a25,v20b)"]
    left = drive(spark, app_id + "l", topology(versioned=True, left=True), [records])
    assert left == ["(a15,v10)", "(a25,v20b)", "(a35,None)", "(anull,None)", "(ax,None)"]


def test_history_retention(spark: Any, app_id: str) -> None:
    batches = [
        [("B", "k", "old", 0), ("B", "k", "new", 50_000)],  # table stream time 50s
        [("B", "k", "too-late", 10_000)],  # older than 50s - 10s: dropped
        [("A", "k", "a5", 5_000), ("A", "k", "a45", 45_000)],  # a5 is beyond history
    ]
    inner = drive(spark, app_id, topology(versioned=True, left=False, retention_ms=10_000), batches)
    assert inner == ["(a45,old)"]
    left = drive(spark, app_id + "l", topology(versioned=True, left=True, retention_ms=10_000), batches)
    assert left == ["(a5,None)", "(a45,old)"]


def test_grace_period_buffers_stream_records(spark: Any, app_id: str) -> None:
    batches = [
        [("B", "k", "b0", 0), ("A", "k", "a10", 10)],  # within grace: buffered
        [("B", "k", "b5", 5)],  # a late table update, within grace, is seen
        [("B", "k", "b100", 100)],  # stream time passes 10 + grace: a10 is emitted
        [("A", "k", "a1", 1)],  # already beyond grace: joined at once
    ]
    out = drive(spark, app_id, topology(versioned=True, left=False, retention_ms=1_000, grace_ms=50), batches)
    assert out == ["(a10,b5)", "(a1,b0)"]
