"""Stream-global-table joins on a real server: Kafka Streams' inner and left join
scenarios (KStreamGlobalKTableJoinTest, KStreamGlobalKTableLeftJoinTest) in one topology
of both joins, with a key selector that reads the value, null selector keys, null stream
keys and values, keys that are empty, non-ASCII or long, a table that a stream record
does not wait for, the store, and a restart from the checkpoint."""

from __future__ import annotations

from typing import Any

import pytest

from kspark import Materialized, StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.plan.topology import Topology
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark

LONG = "k" * 300 + "é"
#: (topic, key, value, timestamp): "T" the global table, "S" the stream
Rec = tuple[str, str | None, str | None, int]


def table_key(key: str | None, value: str) -> str | None:
    # as Kafka's tests: the value is comma separated, and its second part (if any) is the
    # table key
    parts = value.split(",", 1)
    return parts[1] if len(parts) > 1 else None


def topology() -> Topology:
    b = StreamsBuilder()
    rates = b.global_table(
        Topic.jsonl("T", "/unused"),
        key_type=str,
        value_type=str,
        materialized=Materialized.as_("rates"),
    )
    stream = b.stream(Topic.jsonl("S", "/unused"), key_type=str, value_type=str)
    stream.join(rates, table_key, lambda v, t: f"{v}+{t}", "inner", value_type=str).to(
        Topic.jsonl("inner", "/unused")
    )
    # the joiner with the key: the stream record's own key, not the table key
    stream.left_join(rates, table_key, lambda k, v, t: f"{k}:{v}+{t}", "left", value_type=str).to(
        Topic.jsonl("left", "/unused")
    )
    return b.build()


BATCHES: list[list[Rec]] = [
    [
        ("T", "FKey1", "Y1", 0),
        ("T", "", "E", 1),
        ("T", "ü€", "U", 2),
        ("T", LONG, "L", 3),
        ("S", "s1", "X1,FKey1", 10),
        ("S", "s2", "X2,FKey2", 11),  # no table value
        ("S", "s3", "X3", 12),  # no table key: dropped by both joins
        ("S", "", "X4,", 13),  # the empty key, on both sides
        ("S", None, "X5,ü€", 14),  # a null stream key joins by its table key
        ("S", None, "X6", 15),  # no key at all: only the left join keeps it
        ("S", "s7", None, 16),  # a null value: dropped by both
        ("S", "s8", "X8,FKey8", 17),  # before its table value: the join does not wait
        ("T", "FKey8", "Y8", 20),
    ],
    [  # after a restart from the checkpoint
        ("T", "FKey1", None, 30),  # a tombstone deletes
        ("T", "FKey2", "Y2", 31),
        ("S", "s1", "X1b,FKey1", 40),
        ("S", "s2", "X2b,FKey2", 41),
        ("S", "s8", "X8b,FKey8", 42),
        ("S", "ü", "X9," + LONG, 43),
    ],
]


def test_inner_and_left_joins_against_a_global_table(spark: Any, app_id: str) -> None:
    cfg = StreamsConfig(application_id=app_id, num_partitions=2)
    with TopologyTestDriver(topology(), cfg, session=spark) as d:
        topics = {t: d.create_input_topic(t, key_type=str, value_type=str) for t in "TS"}
        for i, batch in enumerate(BATCHES):
            if i:
                # the first batch's drops (all of them), then a new app on the same
                # checkpoint: the table comes back from it
                dropped = d.metrics().dropped_by_reason()
                d.app.stop()
                d.app = StreamsApp(d.topology, d.config, session=spark)
            for topic, k, v, ts in batch:
                topics[topic].pipe_input(k, v, timestamp=ts)
            d.process()
        inner = d.create_output_topic("inner", key_type=str, value_type=str).read_records()
        left = d.create_output_topic("left", key_type=str, value_type=str).read_records()
        store = d.store("rates")
        stored = {k: store.get(k) for k in ("FKey1", "FKey2", "FKey8", "", "ü€", LONG)}

    # each output keeps the stream record's key and timestamp
    assert sorted(("~" if r.key is None else r.key, r.value, r.timestamp) for r in inner) == sorted(
        [
            ("s1", "X1,FKey1+Y1", 10),
            ("", "X4,+E", 13),
            ("~", "X5,ü€+U", 14),
            ("s2", "X2b,FKey2+Y2", 41),
            ("s8", "X8b,FKey8+Y8", 42),
            ("ü", f"X9,{LONG}+L", 43),
        ]
    )
    assert sorted(("~" if r.key is None else r.key, r.value, r.timestamp) for r in left) == sorted(
        [
            ("s1", "s1:X1,FKey1+Y1", 10),
            ("s2", "s2:X2,FKey2+None", 11),
            ("", ":X4,+E", 13),
            ("~", "None:X5,ü€+U", 14),
            ("~", "None:X6+None", 15),
            ("s8", "s8:X8,FKey8+None", 17),
            ("s1", "s1:X1b,FKey1+None", 40),
            ("s2", "s2:X2b,FKey2+Y2", 41),
            ("s8", "s8:X8b,FKey8+Y8", 42),
            ("ü", f"ü:X9,{LONG}+L", 43),
        ]
    )
    assert [r.key for r in left if r.value.startswith("None:")] == [None, None]
    assert stored == {
        "FKey1": None,
        "FKey2": "Y2",
        "FKey8": "Y8",
        "": "E",
        "ü€": "U",
        LONG: "L",
    }
    assert dropped[("inner", "null-join-key")] == 2  # s3, and the record with no key
    assert dropped[("left", "null-join-key")] == 1  # s3
    assert dropped[("inner", "null-value")] == dropped[("left", "null-value")] == 1
