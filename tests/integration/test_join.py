"""Stream-table joins: latest-value tables, and versioned tables joined as of the stream
record's time (KIP-889, KIP-914, KIP-923)."""

from __future__ import annotations

import itertools
import uuid
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kspark import Joined, Materialized, StreamsBuilder, StreamsConfig, Topic
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark


def topology(
    versioned: bool,
    left: bool,
    retention_ms: int = 10_000,
    grace_ms: int = 0,
    to_table: bool = False,
) -> Any:
    b = StreamsBuilder()
    mat = (
        Materialized.as_versioned("b-store", timedelta(milliseconds=retention_ms))
        if versioned
        else Materialized.as_("b-store")
    )
    if to_table:  # the table as a stream's changelog, through KStream.to_table
        table = b.stream(Topic.jsonl("B", "/unused"), key_type=str, value_type=str).to_table(mat)
    else:
        table = b.table(Topic.jsonl("B", "/unused"), key_type=str, value_type=str, materialized=mat)
    stream = b.stream(Topic.jsonl("A", "/unused"), key_type=str, value_type=str)
    joined = Joined.with_grace_period(timedelta(milliseconds=grace_ms)) if grace_ms else None
    join = stream.left_join if left else stream.join
    join(table, lambda a, bv: f"({a},{bv})", joined, value_type=str).to(
        Topic.jsonl("out", "/unused")
    )
    return b.build()


def drive(
    spark: Any, app_id: str, topo: Any, batches: list[list[tuple[str, str | None, str | None, int]]]
) -> list[str]:
    cfg = StreamsConfig(application_id=app_id, num_partitions=2)
    with TopologyTestDriver(topo, cfg, session=spark) as d:
        a = d.create_input_topic("A", key_type=str, value_type=str)
        bt = d.create_input_topic("B", key_type=str, value_type=str)
        for batch in batches:
            for side, k, v, ts in batch:
                (a if side == "A" else bt).pipe_input(k, v, timestamp=ts)
            d.process()
        return d.create_output_topic("out", key_type=str, value_type=str).read_values()


SEED = [
    ("B", "k", "b0", 0),
    ("A", "k", "a1", 1),
    ("B", "k", "b3", 3),
    ("A", "k", "a4", 4),
    ("A", "k", "a2", 2),
]


@pytest.mark.parametrize("to_table", [False, True], ids=["table", "stream-to-table"])
def test_seed_motivating_example_joins_as_of_the_stream_time(
    spark: Any, app_id: str, to_table: bool
) -> None:
    # one record per micro-batch, as the seed tells it
    out = drive(
        spark, app_id, topology(versioned=True, left=False, to_table=to_table), [[r] for r in SEED]
    )
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
    left = drive(
        spark, app_id + "l", topology(versioned=True, left=True, retention_ms=10_000), batches
    )
    assert left == ["(a5,None)", "(a45,old)"]


@pytest.mark.cluster
def test_grace_period_buffers_stream_records(spark: Any, app_id: str) -> None:
    batches = [
        [("B", "k", "b0", 0), ("A", "k", "a10", 10)],  # within grace: buffered
        [("B", "k", "b5", 5)],  # a late table update, within grace, is seen
        [("B", "k", "b100", 100)],  # stream time passes 10 + grace: a10 is emitted
        [("A", "k", "a1", 1)],  # already beyond grace: joined at once
    ]
    out = drive(
        spark,
        app_id,
        topology(versioned=True, left=False, retention_ms=1_000, grace_ms=50),
        batches,
    )
    assert out == ["(a10,b5)", "(a1,b0)"]


@pytest.mark.cluster
def test_interactive_queries_read_the_versioned_store_from_the_checkpoint(
    spark: Any, app_id: str
) -> None:
    from kspark.errors import StoreError

    cfg = StreamsConfig(application_id=app_id, num_partitions=2)
    with TopologyTestDriver(
        topology(versioned=True, left=True, retention_ms=100), cfg, session=spark
    ) as d:
        bt = d.create_input_topic("B", key_type=str, value_type=str)
        for k, v, ts in [
            ("k", "v10", 10),
            ("k", "v20", 20),
            ("k", None, 30),
            ("k", "v40", 40),
            ("j", "j5", 5),
        ]:
            bt.pipe_input(k, v, timestamp=ts)
        d.process()
        store = d.store("b-store")
        assert store.get("k") == (("v40", 40))
        assert store.get("k", as_of=15) == ("v10", 10)
        assert store.get("k", as_of=20) == ("v20", 20)
        assert store.get("k", as_of=35) is None  # deleted as of 30
        assert store.get("k", as_of=9) is None  # before the first version
        assert store.get("absent") is None
        assert [tuple(v) for v in store.versions("k", 12, 45)] == [
            ("v10", 10, 20),
            ("v20", 20, 30),
            ("v40", 40, None),
        ]
        assert store.approximate_num_entries() == 2
        # observed stream time 40, retention 100: everything is in retention; move past it
        # (stream time is per task, so advance it with the same key)
        bt.pipe_input("k", "v200", timestamp=200)
        d.process()
        store = d.store("b-store")
        assert store.get("k", as_of=99) is None  # older than stream time - retention
        assert store.get("k", as_of=150) == ("v40", 40)
        assert store.get("k") == ("v200", 200)
        with pytest.raises(StoreError, match="no state store named 'nope'"):
            d.store("nope")


def test_store_replica_refreshes_from_the_change_feed(spark: Any, app_id: str) -> None:
    cfg = StreamsConfig(application_id=app_id, num_partitions=2)
    with TopologyTestDriver(
        topology(versioned=True, left=True, retention_ms=1_000), cfg, session=spark
    ) as d:
        bt = d.create_input_topic("B", key_type=str, value_type=str)
        for k, v, ts in [("k", "v10", 10), ("j", "j5", 5)]:
            bt.pipe_input(k, v, timestamp=ts)
        d.process()
        replica = d.app.replica("b-store")
        first = replica.as_of_batch
        assert replica.get("k") == ("v10", 10) and replica.get("j") == ("j5", 5)
        assert replica.refresh() == 0  # nothing committed since
        bt.pipe_input("k", "v20", timestamp=20)
        bt.pipe_input("n", "n30", timestamp=30)
        d.process()
        assert replica.get("k") == ("v10", 10)  # as of its last refresh
        changed = replica.refresh()
        # only the tasks that received records changed, read from the change feed
        assert 1 <= changed <= 2 and replica.as_of_batch == first + 1
        assert replica.get("k") == ("v20", 20) and replica.get("k", as_of=15) == ("v10", 10)
        assert replica.get("n") == ("n30", 30) and replica.get("j") == ("j5", 5)
        assert (
            replica.approximate_num_entries() == d.store("b-store").approximate_num_entries() == 3
        )


def test_latest_value_store_answers_get_but_not_as_of(spark: Any, app_id: str) -> None:
    from kspark.errors import StoreError

    cfg = StreamsConfig(application_id=app_id, num_partitions=2)
    with TopologyTestDriver(topology(versioned=False, left=True), cfg, session=spark) as d:
        bt = d.create_input_topic("B", key_type=str, value_type=str)
        bt.pipe_input("k", "v1", timestamp=1)
        bt.pipe_input("k", "v2", timestamp=2)
        d.process()
        store = d.store("b-store")
        assert store.get("k") == "v2"
        with pytest.raises(StoreError, match="latest-value"):
            store.get("k", as_of=1)


def _reference_join(
    batches: list[list[tuple[str, str | None, str | None, int]]], retention: int, left: bool
) -> list[str]:
    """What the join must output: records merged per micro-batch as the operator takes them
    (offset order per topic, the smaller head timestamp first across topics, the table's at
    equal timestamps), then looked
    up in a brute-force versioned store."""
    from support.models import VersionedReference

    ref = VersionedReference(retention)
    out: list[str] = []
    seq = 0
    for batch in batches:
        queues: dict[str, list[tuple[int, int, tuple[str, str | None, str | None, int]]]] = {
            "A": [],
            "B": [],
        }
        for r in batch:
            seq += 1
            queues[r[0]].append((r[3], seq, r))
        merged = []
        while queues["A"] or queues["B"]:
            # the smaller head timestamp first; at equal timestamps the table's (B) first
            heads = [(q[0][0], side != "B", q[0][1], side) for side, q in queues.items() if q]
            _, _, _, side = min(heads)
            merged.append(queues[side].pop(0)[2])
        for side, k, v, ts in merged:
            if side == "B":
                if k is not None:
                    ref.put(k, v, ts)
                continue
            if k is None:
                if left:
                    out.append(f"({v},None)")
                continue
            too_old = ref.time is not None and ts < ref.time - retention
            found = None if too_old else ref.get(k, ts)
            if found is not None:
                out.append(f"({v},{found.value})")
            elif left:
                out.append(f"({v},None)")
    return out


_record = st.tuples(
    st.sampled_from(["A", "B"]),
    st.sampled_from(["k", "j", None]),
    st.sampled_from(["x", "y", None]),
    st.integers(0, 40),
)


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    records=st.lists(_record, min_size=1, max_size=12),
    cuts=st.lists(st.integers(1, 11), max_size=2, unique=True),
    retention=st.integers(0, 20),
    left=st.booleans(),
)
def test_versioned_join_matches_the_reference_for_any_batch_split(
    records: list[Any], cuts: list[int], retention: int, left: bool
) -> None:
    """In this process (the engines agree: tests/integration/test_driver_engines.py)."""
    # stream values are never None: a None value in a stream is a record like any other
    records = [(s, k, v if s == "B" else (v or "n"), ts) for s, k, v, ts in records]
    bounds = [0, *sorted(c for c in cuts if c < len(records)), len(records)]
    batches = [records[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    cfg = StreamsConfig(application_id=f"prop-{uuid.uuid4().hex[:8]}", num_partitions=1)
    with TopologyTestDriver(
        topology(versioned=True, left=left, retention_ms=retention), cfg, engine="local"
    ) as d:
        a = d.create_input_topic("A", key_type=str, value_type=str)
        bt = d.create_input_topic("B", key_type=str, value_type=str)
        for batch in batches:
            for side, k, v, ts in batch:
                (a if side == "A" else bt).pipe_input(k, v, timestamp=ts)
            d.process()
        got = d.create_output_topic("out", key_type=str, value_type=str).read_values()
    assert got == _reference_join(batches, retention, left)


@pytest.mark.parametrize("left", [False, True], ids=["inner", "left"])
def test_null_values_and_keys_follow_kafka_streams(spark: Any, app_id: str, left: bool) -> None:
    """A stream record with a null value is dropped and counted, in both joins; a null key
    is dropped and counted by an inner join, and joined with a null table value by a left
    join (KIP-962)."""
    cfg = StreamsConfig(application_id=app_id, num_partitions=2)
    with TopologyTestDriver(topology(versioned=True, left=left), cfg, session=spark) as d:
        a = d.create_input_topic("A", key_type=str, value_type=str)
        bt = d.create_input_topic("B", key_type=str, value_type=str)
        bt.pipe_input("k", "b0", timestamp=0)
        a.pipe_input("k", None, timestamp=1)  # null value: never joined
        a.pipe_input(None, "a2", timestamp=2)  # null key
        a.pipe_input("k", "a3", timestamp=3)
        d.process()
        out = d.create_output_topic("out", key_type=str, value_type=str).read_values()
        dropped = sum(d.metrics().dropped_records_total.values())
    if left:
        assert out == ["(a2,None)", "(a3,b0)"] and dropped == 1
    else:
        assert out == ["(a3,b0)"] and dropped == 2
