"""Records that operators drop by their rules are never silent: each is counted in
``dropped-records-total`` for its processor with a reason, and, with
``StreamsConfig(dead_letter_dropped_records=True)``, written to the dead-letter queue."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest

from kspark import (
    JoinWindows,
    Materialized,
    Named,
    SessionWindows,
    StreamsBuilder,
    StreamsConfig,
    TimeWindows,
    Topic,
)
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark

JOIN = "KSTREAM-JOIN-0000000002"


def _topology() -> Any:
    b = StreamsBuilder()
    table = b.table(
        Topic.jsonl("B", "/unused"),
        key_type=str,
        value_type=str,
        materialized=Materialized.as_versioned("b-store", timedelta(seconds=10)),
    )
    b.stream(Topic.jsonl("A", "/unused"), key_type=str, value_type=str).join(
        table, lambda a, bv: f"({a},{bv})", value_type=str
    ).to(Topic.jsonl("out", "/unused"))
    return b.build()


BATCHES: list[list[tuple[str, str | None, str | None, int]]] = [
    [("B", "k", "old", 0), ("B", "k", "new", 50_000), ("B", None, "no-key", 50_001)],
    [("B", "k", "too-late", 10_000)],  # older than 50s - 10s: an expired put
    [
        ("A", "k", "a5", 5_000),  # older than the table's history: cannot be looked up
        ("A", None, "a-no-key", 45_001),
        ("A", "k", None, 45_002),
        ("A", "k", "a45", 45_000),
    ],
]

REASONS = {
    (JOIN, "null-key"): 2,
    (JOIN, "expired-put"): 1,
    (JOIN, "expired-stream-record"): 1,
    (JOIN, "null-value"): 1,
}


def _run(spark: Any, cfg: StreamsConfig) -> tuple[list[str], Any, list[Any]]:
    with TopologyTestDriver(_topology(), cfg, session=spark) as d:
        a = d.create_input_topic("A", key_type=str, value_type=str)
        bt = d.create_input_topic("B", key_type=str, value_type=str)
        for batch in BATCHES:
            for side, k, v, ts in batch:
                (a if side == "A" else bt).pipe_input(k, v, timestamp=ts)
            d.process()
        out = d.create_output_topic("out", key_type=str, value_type=str).read_values()
        dead = d.dead_letter_topic().read_raw() if cfg.dead_letter_queue_topic else []
        return out, d.metrics(), dead


def test_operator_drops_are_counted_with_their_reason(spark: Any, app_id: str) -> None:
    out, m, _ = _run(spark, StreamsConfig(application_id=app_id, num_partitions=2))
    assert out == ["(a45,old)"]
    assert m.dropped_by_reason() == REASONS
    assert m.by_name()["dropped-records-total"] == 5
    assert m.by_name()["expired-puts-total"] == 1


def test_operator_drops_go_to_the_dead_letter_queue_when_asked(spark: Any, app_id: str) -> None:
    cfg = StreamsConfig(
        application_id=app_id,
        num_partitions=2,
        dead_letter_queue_topic=Topic.jsonl("dlq", "/unused"),
        dead_letter_dropped_records=True,
    )
    _, m, dead = _run(spark, cfg)
    assert m.dropped_by_reason() == REASONS
    assert m.dead_letter_records == 5
    got = sorted(
        (r["processor_node_id"], r["timestamp"], json.loads(r["value"] or "null")) for r in dead
    )
    assert got == [
        (JOIN, 5_000, "a5"),
        (JOIN, 10_000, "too-late"),
        (JOIN, 45_001, "a-no-key"),
        (JOIN, 45_002, None),
        (JOIN, 50_001, "no-key"),
    ]
    assert {r["exception_class"] for r in dead} == {"kspark_server.handling.DroppedRecord"}
    assert any("history retention" in r["exception_message"] for r in dead)


def _windowed_topology() -> Any:
    """A tumbling count (the vectorized path), a hopping reduce, a session count and a
    stream-stream join, all over A (the join with B)."""
    b = StreamsBuilder()
    a = b.stream(Topic.jsonl("A", "/unused"), key_type=str, value_type=str)
    bs = b.stream(Topic.jsonl("B", "/unused"), key_type=str, value_type=str)
    ten, five = timedelta(seconds=10), timedelta(seconds=5)
    grouped = a.group_by_key()
    grouped.windowed_by(TimeWindows.of_size_with_no_grace(ten)).count(
        Named.as_("count")
    ).to_stream().to(Topic.jsonl("counts", "/unused"))
    grouped.windowed_by(TimeWindows.of_size_with_no_grace(ten).advance_by(five)).reduce(
        lambda x, y: x + y, Named.as_("reduce")
    ).to_stream().to(Topic.jsonl("reduced", "/unused"))
    grouped.windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(timedelta(seconds=1))).count(
        Named.as_("session")
    ).to_stream().to(Topic.jsonl("sessions", "/unused"))
    a.join(
        bs,
        lambda x, y: f"{x}+{y}",
        JoinWindows.of_time_difference_with_no_grace(timedelta(seconds=1)),
        Named.as_("join"),
        value_type=str,
    ).to(Topic.jsonl("joined", "/unused"))
    return b.build()


def test_late_window_records_go_to_the_dead_letter_queue(spark: Any, app_id: str) -> None:
    cfg = StreamsConfig(
        application_id=app_id,
        num_partitions=2,
        dead_letter_queue_topic=Topic.jsonl("dlq", "/unused"),
        dead_letter_dropped_records=True,
    )
    batches = [
        [("A", "k", "a", 20_000), ("B", "k", "b", 20_000)],
        # stream time is 20s: their windows ([0, 10s), [5s, 15s), the session and the join
        # window of 5s +- 1s) have all closed
        [("A", "k", "late-a", 5_000), ("B", "k", "late-b", 5_000)],
    ]
    with TopologyTestDriver(_windowed_topology(), cfg, session=spark) as d:
        ins = {t: d.create_input_topic(t, key_type=str, value_type=str) for t in ("A", "B")}
        for batch in batches:
            for topic, k, v, ts in batch:
                ins[topic].pipe_input(k, v, timestamp=ts)
            d.process()
        m = d.metrics()
        dead = d.dead_letter_topic().read_raw()
    # the hopping reduce drops late-a from two windows: counted twice, dead-lettered once
    assert m.dropped_by_reason() == {
        ("count", "late-record"): 1,
        ("reduce", "late-record"): 2,
        ("session", "late-record"): 1,
        ("join", "late-record"): 2,
    }
    got = sorted(
        (r["processor_node_id"], r["timestamp"], json.loads(r["value"] or "null")) for r in dead
    )
    assert got == [
        ("count", 5_000, "late-a"),
        ("join", 5_000, "late-a"),
        ("join", 5_000, "late-b"),
        ("reduce", 5_000, "late-a"),
        ("session", 5_000, "late-a"),
    ]
    assert all("window had closed" in r["exception_message"] for r in dead)
