"""Windowed stream-stream joins on a real server: inner, left and outer joins inside and
outside the window, grace, late records, a property test against the reference model over
random micro-batch splits, and a restart from the checkpoint."""

from __future__ import annotations

import itertools
import uuid
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.joinmodel import Rec, processing_order, stream_join_reference

from kspark import JoinWindows, StreamJoined, StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.plan.topology import Topology
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark


def joiner(left: str | None, right: str | None) -> str:
    return f"{left}+{right}"


def topology(mode: str, before: int, after: int, grace: int) -> Topology:
    b = StreamsBuilder()
    left = b.stream(Topic.jsonl("L", "/unused"), key_type=str, value_type=str)
    right = b.stream(Topic.jsonl("R", "/unused"), key_type=str, value_type=str)
    windows = (
        JoinWindows.of_time_difference_and_grace(
            timedelta(milliseconds=max(before, after)), timedelta(milliseconds=grace)
        )
        .before(timedelta(milliseconds=before))
        .after(timedelta(milliseconds=after))
    )
    named = StreamJoined.as_("join-store").with_name("join")
    if mode == "inner":
        joined = left.join(right, joiner, windows, named, value_type=str)
    elif mode == "left":
        joined = left.left_join(right, joiner, windows, named, value_type=str)
    else:
        joined = left.outer_join(right, joiner, windows, named, value_type=str)
    joined.to(Topic.jsonl("out", "/unused"))
    return b.build()


Out = tuple[str | None, str, int]


def drive(
    spark: Any,
    app_id: str,
    topo: Topology,
    batches: list[list[Rec]],
    partitions: int = 1,
    restart_before: int | None = None,
) -> tuple[list[Out], dict[str, int]]:
    cfg = StreamsConfig(application_id=app_id, num_partitions=partitions)
    with TopologyTestDriver(
        topo, cfg, session=spark, engine="spark" if spark is not None else "local"
    ) as d:
        topics = (
            d.create_input_topic("L", key_type=str, value_type=str),
            d.create_input_topic("R", key_type=str, value_type=str),
        )
        out = d.create_output_topic("out", key_type=str, value_type=str)
        for i, batch in enumerate(batches):
            if i == restart_before:
                # a new app on the same checkpoint: the join's buffers come back from it
                d.app.stop()
                d.app = StreamsApp(d.topology, d.config, session=spark)
            for side, k, v, ts in batch:
                topics[side].pipe_input(k, v, timestamp=ts)
            d.process()
        got = [(r.key, r.value, r.timestamp or 0) for r in out.read_records()]
        return got, d.metrics().by_name()


@pytest.mark.cluster
@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        ("inner", [("a", "l1+r1", 12)]),
        ("left", [("a", "l1+r1", 12), ("a", "l2+None", 18), ("b", "l3+None", 20)]),
        (
            "outer",
            [
                ("a", "l1+r1", 12),
                ("a", "l2+None", 18),
                ("b", "l3+None", 20),
                ("b", "None+r3", 40),
                ("c", "None+r2", 21),
            ],
        ),
    ],
)
def test_inner_left_and_outer_join_inside_and_outside_the_window(
    spark: Any, app_id: str, mode: str, expected: list[Out]
) -> None:
    # a left record at t joins right records from t - 5 to t + 6
    batches: list[list[Rec]] = [
        [(0, "a", "l1", 10), (1, "a", "r1", 12)],  # 2 ms after: joined
        [(0, "a", "l2", 18), (0, "b", "l3", 20)],  # r1 is 6 ms before l2: outside
        [(1, "c", "r2", 21), (1, "b", "r3", 40)],  # r3 is 20 ms after l3: outside
        [(0, "z", "l4", 100)],  # stream time 100 closes every window above, not l4's
    ]
    # one task: stream time is per task, and "z" must move the stream time of every key
    got, metrics = drive(spark, app_id, topology(mode, 5, 6, 0), batches, partitions=1)
    assert sorted(got) == sorted(expected)
    assert metrics["dropped-records-total"] == 0


def test_grace_admits_out_of_order_records_and_drops_late_ones(spark: Any, app_id: str) -> None:
    batches: list[list[Rec]] = [
        [(0, "k", "l1", 100)],
        [(1, "x", "r0", 120)],  # stream time 120: l1's window (105) is closed, grace is 20
        [(1, "k", "r1", 103)],  # out of order, within grace: joins l1
        [(1, "x", "r2", 200)],  # stream time 200
        [(1, "k", "r3", 104)],  # late: its window closed at 104 + 5 + 20
    ]
    got, metrics = drive(spark, app_id, topology("left", 5, 5, 20), batches)
    assert got == [("k", "l1+r1", 103)]
    assert metrics["dropped-records-total"] == 1
    assert metrics["late-records-dropped-total"] == 1


def test_outer_results_survive_a_restart(spark: Any, app_id: str) -> None:
    batches: list[list[Rec]] = [
        [(0, "k", "l1", 100), (1, "j", "r1", 101)],
        [(0, "k", "l2", 500)],  # after the restart: l1 and r1 close now
    ]
    got, _ = drive(spark, app_id, topology("outer", 5, 5, 0), batches, restart_before=1)
    assert sorted(got) == [("j", "None+r1", 101), ("k", "l1+None", 100)]


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    data=st.lists(
        st.tuples(
            st.integers(0, 1),
            st.sampled_from(["a", "b", None]),
            st.sampled_from(["x", "y"]),
            st.integers(0, 40),
        ),
        min_size=1,
        max_size=16,
    ),
    mode=st.sampled_from(["inner", "left", "outer"]),
    window=st.integers(0, 8),
    grace=st.integers(0, 6),
    cuts=st.lists(st.integers(1, 15), max_size=2, unique=True),
)
def test_property_against_the_reference_model(
    data: list[Rec], mode: str, window: int, grace: int, cuts: list[int]
) -> None:
    """In this process (the engines agree: tests/integration/test_driver_engines.py)."""
    numbered = list(enumerate(data))
    bounds = [0, *sorted(c for c in cuts if c < len(data)), len(data)]
    split = [numbered[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    got, metrics = drive(
        None,
        f"prop-{uuid.uuid4().hex[:8]}",
        topology(mode, window, window, grace),
        [[r for _, r in batch] for batch in split],
    )
    seen = [r for batch in split for r in processing_order(batch)]
    want, late = stream_join_reference(seen, mode, window, window, grace, joiner)
    # the sink writes a batch's records in position order, not in emission order (an
    # outer join's null keys sort by their text)
    assert sorted(got, key=repr) == sorted(want, key=repr)
    nulls = sum(
        1
        for side, k, _, _ in data
        if k is None and not ((side == 0 and mode != "inner") or mode == "outer")
    )
    assert metrics["dropped-records-total"] == late + nulls


def test_rescale_keeps_the_buffered_records(spark: Any, app_id: str) -> None:
    """Buffered records move with their keys to the new partitions: the unmatched ones
    are still emitted at window close, and the others still join."""
    cfg = StreamsConfig(application_id=app_id, num_partitions=2)
    with TopologyTestDriver(topology("outer", 5, 5, 0), cfg, session=spark) as d:
        left = d.create_input_topic("L", key_type=str, value_type=str)
        right = d.create_input_topic("R", key_type=str, value_type=str)
        out = d.create_output_topic("out", key_type=str, value_type=str)
        for i, k in enumerate(["a", "b", "c", "d", "e"]):
            left.pipe_input(k, f"l-{k}", timestamp=100 + i)
        d.process()
        d.rescale(3)
        right.pipe_input("a", "r-a", timestamp=104)  # joins l-a (100) in the new task
        for k in ["a", "b", "c", "d", "e"]:  # every task's stream time to 1000
            right.pipe_input(k, "late-enough", timestamp=1000)
        d.process()
        got = sorted((r.key, r.value, r.timestamp) for r in out.read_records())
    assert got == [
        ("a", "l-a+r-a", 104),
        ("b", "l-b+None", 101),
        ("c", "l-c+None", 102),
        ("d", "l-d+None", 103),
        ("e", "l-e+None", 104),
    ]
