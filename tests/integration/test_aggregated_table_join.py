"""Streams joined with tables that aggregations make (``group_by_key().count()`` and the
like), and the table operators on such tables."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from kspark import Materialized, StreamsBuilder, StreamsConfig
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark

Rec = tuple[str, str, int, int]  # topic, key, value, timestamp


def drive(spark: Any, topo: Any, batches: list[list[Rec]]) -> list[tuple[str, Any]]:
    cfg = StreamsConfig(application_id=f"aj-{uuid.uuid4().hex[:8]}", num_partitions=2)
    with TopologyTestDriver(topo, cfg, session=spark) as d:
        topics = {t for batch in batches for t, *_ in batch}
        ins = {t: d.create_input_topic(t, key_type=str, value_type=int) for t in topics}
        for batch in batches:
            for topic, k, v, ts in batch:
                ins[topic].pipe_input(k, v, timestamp=ts)
            d.process()
        out = d.create_output_topic("out")
        return [(r.key, r.value) for r in out.read_records()]


def join_topology(left: bool, materialized: bool) -> Any:
    b = StreamsBuilder()
    s = b.stream("in", key_type=str, value_type=int)
    other = b.stream("o", key_type=str, value_type=int)
    counts = s.group_by_key().count(
        materialized=Materialized.as_("counts") if materialized else None
    )
    join = other.left_join if left else other.join
    join(counts, lambda v, c: f"{v}:{c}", value_type=str).to("out")
    return b.build()


#: Two streams over three micro-batches; the table counts ``in`` per key. A stream record
#: meant to see a count comes in a later micro-batch than the records counted: with
#: several stateful operators the count's updates
#: reach the join through an internal topic, a micro-batch later
#: (docs/design/sub-topologies.md; :func:`test_a_micro_batch_s_own_counts`).
BATCHES: list[list[Rec]] = [
    [("in", "a", 1, 10), ("in", "a", 1, 20), ("o", "a", 100, 15), ("o", "b", 101, 15)],
    [("o", "a", 102, 30), ("in", "a", 1, 40), ("in", "b", 1, 41)],
    [("o", "a", 103, 50), ("o", "b", 104, 50), ("o", "a", 105, 35)],
]


def test_a_stream_joins_an_aggregated_table_as_of_each_micro_batch(spark: Any) -> None:
    # o:a@15 comes in the micro-batch of the first counts of a: no match (the count's
    # updates reach the join a micro-batch later); o:a@30 sees batch 1's count; o:a@50
    # sees batch 2's update; o:a@35 in batch 3 is out of order and sees the latest count
    got = drive(spark, join_topology(left=False, materialized=True), BATCHES)
    assert got == [("a", "102:2"), ("a", "103:3"), ("b", "104:1"), ("a", "105:3")]


def test_a_stream_left_joins_an_aggregated_table(spark: Any) -> None:
    got = drive(spark, join_topology(left=True, materialized=False), BATCHES)
    assert got == [
        ("a", "100:None"),
        ("b", "101:None"),
        ("a", "102:2"),
        ("a", "103:3"),
        ("b", "104:1"),
        ("a", "105:3"),
    ]


#: The counts' update of ``a`` (timestamp 40) and a click after it (timestamp 50) in one
#: micro-batch.
SAME_BATCH: list[list[Rec]] = [
    [("in", "a", 1, 10), ("in", "a", 1, 20)],
    [("o", "a", 102, 30), ("in", "a", 1, 40), ("o", "a", 103, 50)],
    [("o", "a", 105, 60)],
]


@pytest.mark.extended
def test_a_micro_batch_s_own_counts(spark: Any) -> None:
    # with two stateful operators the count's updates cross an internal topic and reach
    # the join in the next micro-batch, as a table read from a repartition topic does in
    # Kafka Streams: o:a@50 sees the count of the batch before
    got = drive(spark, join_topology(left=False, materialized=True), SAME_BATCH)
    assert got == [("a", v) for v in ["102:2", "103:2", "105:3"]]


def test_an_aggregated_table_filters_maps_and_streams_its_updates(spark: Any) -> None:
    b = StreamsBuilder()
    counts = b.stream("in", key_type=str, value_type=int).group_by_key().count()
    counts.filter(lambda k, n: n % 2 == 0).map_values(
        lambda n: f"#{n}", value_type=str
    ).to_stream().to("out")
    batches: list[list[Rec]] = [
        [("in", "a", 1, 10), ("in", "a", 1, 20), ("in", "b", 1, 20)],
        [("in", "a", 1, 30), ("in", "b", 1, 31)],
    ]
    # an odd count is filtered out: the table says so with a tombstone for its key
    assert drive(spark, b.build(), batches) == [
        ("a", "#2"),
        ("b", None),
        ("a", None),
        ("b", "#2"),
    ]
