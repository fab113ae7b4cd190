"""Same-key table-table joins on a real server: Kafka Streams' inner, left and outer join
scenarios, null keys, the joined table's store, a restart from the checkpoint, and a
property test against the reference model over random micro-batch splits."""

from __future__ import annotations

import itertools
import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.joinmodel import processing_order
from support.tablejoinmodel import Out, Upd, table_join_reference

from kspark import Materialized, StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.plan.topology import Topology
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark


def joiner(left: str | None, right: str | None) -> str:
    return f"{left}+{right}"


def topology(mode: str) -> Topology:
    b = StreamsBuilder()
    left = b.table(Topic.jsonl("L", "/unused"), key_type=str, value_type=str)
    right = b.table(Topic.jsonl("R", "/unused"), key_type=str, value_type=str)
    join = {"inner": left.join, "left": left.left_join, "outer": left.outer_join}[mode]
    joined = join(right, joiner, "joined", Materialized.as_("joined"), value_type=str)
    joined.to_stream().to(Topic.jsonl("out", "/unused"))
    return b.build()


def drive(
    spark: Any | None,
    app_id: str,
    topo: Topology,
    batches: list[list[Upd]],
    partitions: int = 2,
    restart_before: int | None = None,
) -> tuple[list[Out], dict[str, str | None], dict[str, int]]:
    cfg = StreamsConfig(application_id=app_id, num_partitions=partitions)
    engine = "spark" if spark is not None else "local"
    with TopologyTestDriver(topo, cfg, session=spark, engine=engine) as d:
        topics = (
            d.create_input_topic("L", key_type=str, value_type=str),
            d.create_input_topic("R", key_type=str, value_type=str),
        )
        out = d.create_output_topic("out", key_type=str, value_type=str)
        for i, batch in enumerate(batches):
            if i == restart_before:
                # a new app on the same checkpoint: both tables come back from it
                d.app.stop()
                d.app = StreamsApp(d.topology, d.config, session=spark)
            for side, k, v, ts in batch:
                topics[side].pipe_input(k, v, timestamp=ts)
            d.process()
        got = [(r.key, r.value, r.timestamp or 0) for r in out.read_records()]
        store = d.store("joined")
        keys = sorted({k for batch in batches for _, k, _, _ in batch if k is not None})
        return got, {k: store.get(k) for k in keys}, d.metrics().by_name()


def by_key(records: list[Out]) -> dict[str, list[Out]]:
    """Each key's records in order: a changelog's order per key is its meaning (across
    keys and tasks the sink keeps no order)."""
    out: dict[str, list[Out]] = {}
    for r in records:
        out.setdefault(r[0], []).append(r)
    return out


# Kafka Streams' scenario of its table-table join tests, one step per micro-batch: keys
# 0..3, the left table's values X..., the right's Y..., at the timestamps given
SCENARIO: list[list[Upd]] = [
    [(0, "0", "X0", 5), (0, "1", "X1", 6), (0, None, "SomeVal", 42)],
    [(1, "0", "Y0", 0), (1, "1", "Y1", 10), (1, None, "AnotherVal", 73)],
    [(0, k, f"XX{k}", 7) for k in "0123"],
    [(1, k, f"YY{k}", int(k) * 5) for k in "0123"],
    [(0, k, f"XXX{k}", 6) for k in "0123"],
    [(1, "0", None, 5), (1, "1", None, 7)],
    [(0, k, f"XXXX{k}", 13) for k in "0123"],
    [(0, "0", None, 0), (0, "1", None, 42), (0, "2", None, 5), (0, "3", None, 20)],
]

EXPECTED = {
    "inner": [
        ("0", "X0+Y0", 5),
        ("1", "X1+Y1", 10),
        ("0", "XX0+Y0", 7),
        ("1", "XX1+Y1", 10),
        ("0", "XX0+YY0", 7),
        ("1", "XX1+YY1", 7),
        ("2", "XX2+YY2", 10),
        ("3", "XX3+YY3", 15),
        ("0", "XXX0+YY0", 6),
        ("1", "XXX1+YY1", 6),
        ("2", "XXX2+YY2", 10),
        ("3", "XXX3+YY3", 15),
        ("0", None, 6),
        ("1", None, 7),
        ("2", "XXXX2+YY2", 13),
        ("3", "XXXX3+YY3", 15),
        ("2", None, 10),
        ("3", None, 20),
    ],
    "left": [
        ("0", "X0+None", 5),
        ("1", "X1+None", 6),
        ("0", "X0+Y0", 5),
        ("1", "X1+Y1", 10),
        ("0", "XX0+Y0", 7),
        ("1", "XX1+Y1", 10),
        ("2", "XX2+None", 7),
        ("3", "XX3+None", 7),
        ("0", "XX0+YY0", 7),
        ("1", "XX1+YY1", 7),
        ("2", "XX2+YY2", 10),
        ("3", "XX3+YY3", 15),
        ("0", "XXX0+YY0", 6),
        ("1", "XXX1+YY1", 6),
        ("2", "XXX2+YY2", 10),
        ("3", "XXX3+YY3", 15),
        ("0", "XXX0+None", 6),
        ("1", "XXX1+None", 7),
        ("0", "XXXX0+None", 13),
        ("1", "XXXX1+None", 13),
        ("2", "XXXX2+YY2", 13),
        ("3", "XXXX3+YY3", 15),
        ("0", None, 0),
        ("1", None, 42),
        ("2", None, 10),
        ("3", None, 20),
    ],
    "outer": [
        ("0", "X0+None", 5),
        ("1", "X1+None", 6),
        ("0", "X0+Y0", 5),
        ("1", "X1+Y1", 10),
        ("0", "XX0+Y0", 7),
        ("1", "XX1+Y1", 10),
        ("2", "XX2+None", 7),
        ("3", "XX3+None", 7),
        ("0", "XX0+YY0", 7),
        ("1", "XX1+YY1", 7),
        ("2", "XX2+YY2", 10),
        ("3", "XX3+YY3", 15),
        ("0", "XXX0+YY0", 6),
        ("1", "XXX1+YY1", 6),
        ("2", "XXX2+YY2", 10),
        ("3", "XXX3+YY3", 15),
        ("0", "XXX0+None", 6),
        ("1", "XXX1+None", 7),
        ("0", "XXXX0+None", 13),
        ("1", "XXXX1+None", 13),
        ("2", "XXXX2+YY2", 13),
        ("3", "XXXX3+YY3", 15),
        ("0", None, 0),
        ("1", None, 42),
        ("2", "None+YY2", 10),
        ("3", "None+YY3", 20),
    ],
}


@pytest.mark.parametrize("mode", ["inner", "left", "outer"])
def test_kafka_streams_scenario(app_id: str, mode: str) -> None:
    """In this process (the engines agree: tests/integration/test_driver_engines.py)."""
    got, store, metrics = drive(None, app_id, topology(mode), SCENARIO)
    assert by_key(got) == by_key(EXPECTED[mode])
    # the same answer as the reference model's, which the property test checks further
    want, final, dropped = table_join_reference(
        [u for batch in SCENARIO for u in batch], mode, joiner
    )
    assert by_key(want) == by_key(EXPECTED[mode])
    # the joined table's store answers the last joined row of each key
    assert {k: v for k, v in store.items() if v is not None} == final
    # the two updates with a null key are dropped and counted
    assert metrics["dropped-records-total"] == dropped == 2


def test_the_joined_table_survives_a_restart(spark: Any, app_id: str) -> None:
    batches: list[list[Upd]] = [
        [(0, "a", "l1", 1), (1, "b", "r1", 2)],
        [(1, "a", "r2", 3), (0, "b", "l2", 4), (1, "b", None, 5)],
    ]
    got, store, _ = drive(spark, app_id, topology("outer"), batches, restart_before=1)
    assert by_key(got) == {
        "a": [("a", "l1+None", 1), ("a", "l1+r2", 3)],
        "b": [("b", "None+r1", 2), ("b", "l2+r1", 4), ("b", "l2+None", 5)],
    }
    assert store == {"a": "l1+r2", "b": "l2+None"}


def test_the_joined_table_joins_again(spark: Any, app_id: str) -> None:
    """The result is a table like any other: joined with a third table, and filtered."""
    b = StreamsBuilder()
    t1 = b.table(Topic.jsonl("L", "/unused"), key_type=str, value_type=str)
    t2 = b.table(Topic.jsonl("R", "/unused"), key_type=str, value_type=str)
    t3 = b.table(Topic.jsonl("T", "/unused"), key_type=str, value_type=str)
    both = t1.join(t2, joiner, value_type=str)
    both.left_join(t3, joiner, materialized=Materialized.as_("joined"), value_type=str).filter(
        lambda k, v: not v.startswith("skip")
    ).to_stream().to(Topic.jsonl("out", "/unused"))
    cfg = StreamsConfig(application_id=app_id, num_partitions=2)
    with TopologyTestDriver(b.build(), cfg, session=spark) as d:
        ins = [d.create_input_topic(t, key_type=str, value_type=str) for t in "LRT"]
        ins[0].pipe_input("k", "a", timestamp=1)
        ins[1].pipe_input("k", "b", timestamp=2)
        ins[0].pipe_input("j", "skip", timestamp=4)
        ins[1].pipe_input("j", "x", timestamp=5)
        d.process()
        # the third table's row comes after the first join's result: with two stateful
        # operators that result reaches the second join a micro-batch later, through an
        # internal topic
        ins[2].pipe_input("k", "c", timestamp=6)
        d.process()
        got = d.create_output_topic("out", key_type=str, value_type=str).read_records()
        assert [(r.key, r.value) for r in got if r.key == "k"] == [
            ("k", "a+b+None"),
            ("k", "a+b+c"),
        ]
        assert [(r.key, r.value) for r in got if r.key == "j"] == [("j", None)]
        assert d.store("joined").get("k") == "a+b+c"


@settings(max_examples=5, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    data=st.lists(
        st.tuples(
            st.integers(0, 1),
            st.sampled_from(["a", "b", None]),
            st.sampled_from(["x", "y", None]),
            st.integers(0, 40),
        ),
        min_size=1,
        max_size=16,
    ),
    mode=st.sampled_from(["inner", "left", "outer"]),
    cuts=st.lists(st.integers(1, 15), max_size=3, unique=True),
    restart=st.booleans(),
)
def test_property_against_the_reference_model(
    spark: Any, data: list[Upd], mode: str, cuts: list[int], restart: bool
) -> None:
    numbered = list(enumerate(data))
    bounds = [0, *sorted(c for c in cuts if c < len(data)), len(data)]
    split = [numbered[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    got, store, metrics = drive(
        spark,
        f"prop-{uuid.uuid4().hex[:8]}",
        topology(mode),
        [[r for _, r in batch] for batch in split],
        partitions=1,
        restart_before=1 if restart and len(split) > 1 else None,
    )
    seen = [r for batch in split for _, r in processing_order(batch)]
    want, final, dropped = table_join_reference(seen, mode, joiner)
    assert by_key(got) == by_key(want)
    assert {k: v for k, v in store.items() if v is not None} == final
    assert metrics["dropped-records-total"] == dropped


def test_rescale_moves_both_tables_with_their_keys(spark: Any, app_id: str) -> None:
    """After a rescale each key's two sides are in its new task: updates of either side
    still find the other."""
    cfg = StreamsConfig(application_id=app_id, num_partitions=2)
    with TopologyTestDriver(topology("inner"), cfg, session=spark) as d:
        left = d.create_input_topic("L", key_type=str, value_type=str)
        right = d.create_input_topic("R", key_type=str, value_type=str)
        out = d.create_output_topic("out", key_type=str, value_type=str)
        for i, k in enumerate("abcde"):
            left.pipe_input(k, f"l-{k}", timestamp=i)
        right.pipe_input("a", "r-a", timestamp=10)
        d.process()
        d.rescale(3)
        for k in "abcde":
            right.pipe_input(k, f"r2-{k}", timestamp=20)
        left.pipe_input("a", None, timestamp=30)
        d.process()
        got = [(r.key, r.value) for r in out.read_records()]
        store = d.store("joined")
        assert store.get("a") is None and store.get("c") == "l-c+r2-c"
    assert by_key(got)["a"] == [("a", "l-a+r-a"), ("a", "l-a+r2-a"), ("a", None)]
    assert sorted(got[k] for k in range(len(got)) if got[k][0] != "a") == [
        (k, f"l-{k}+r2-{k}") for k in "bcde"
    ]
