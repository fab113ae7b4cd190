"""Aggregations: count, reduce and aggregate per key and per time window, suppression,
against small reference models with random micro-batch splits; stores and restarts."""

from __future__ import annotations

import itertools
import os
import tempfile
import uuid
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kspark import (
    Materialized,
    Named,
    StreamsApp,
    StreamsBuilder,
    StreamsConfig,
    Suppressed,
    TimeWindows,
    Topic,
    Window,
    Windowed,
)
from kspark.testing import TopologyTestDriver
from kspark_server.windows import windows_for

pytestmark = pytest.mark.spark

Rec = tuple[str | None, int | None, int]  # key, value, timestamp


def agg_topology(op: str, windows: TimeWindows | None = None, suppress: bool = False) -> Any:
    b = StreamsBuilder()
    s = b.stream("in", key_type=str, value_type=int)
    g: Any = s.group_by_key()
    if windows is not None:
        g = g.windowed_by(windows)
    mat = Materialized.as_("agg-store")
    if op == "count":
        t = g.count(Named.as_("agg"), mat)
    elif op == "reduce":
        t = g.reduce(lambda a, v: a + v, Named.as_("agg"), mat)
    else:
        t = g.aggregate(
            lambda: 100, lambda k, v, a: a + v * 2, Named.as_("agg"), mat, value_type=int
        )
    if suppress:
        t = t.suppress(Suppressed.until_window_closes())
    t.to_stream().to("out")
    return b.build()


def run(
    spark: Any | None, topo: Any, batches: list[list[Rec]], partitions: int = 1
) -> tuple[list[list[tuple[Any, Any, int | None]]], Any]:
    """Each batch's output records (key, value, timestamp), and the metrics: on Spark, or
    in this process without a session (``tests/integration/test_driver_engines.py`` shows
    that both engines give the same answers, so the model tests run in-process, where an
    example costs milliseconds)."""
    cfg = StreamsConfig(application_id=f"agg-{uuid.uuid4().hex[:8]}", num_partitions=partitions)
    outs: list[list[tuple[Any, Any, int | None]]] = []
    engine = "spark" if spark is not None else "local"
    with TopologyTestDriver(topo, cfg, session=spark, engine=engine) as d:
        src = d.create_input_topic("in", key_type=str, value_type=int)
        sink = d.create_output_topic("out")
        for batch in batches:
            for k, v, ts in batch:
                src.pipe_input(k, v, timestamp=ts)
            d.process()
            outs.append([(r.key, r.value, r.timestamp) for r in sink.read_records()])
        metrics = d.metrics()
    return outs, metrics


def _fold(op: str) -> Callable[[Any, int | None], Any]:
    if op == "count":
        return lambda a, v: (a or 0) + 1
    if op == "reduce":
        return lambda a, v: v if a is None else a + v
    return lambda a, v: (100 if a is None else a) + (v or 0) * 2


def model(
    op: str, batches: list[list[Rec]], windows: tuple[int, int, int] | None = None
) -> tuple[list[list[tuple[Any, Any, int]]], int]:
    """Kafka Streams with a commit per batch: each batch emits the latest value of each key
    (window) it changed, in the order of their last update; and the records dropped."""
    fold = _fold(op)
    state: dict[Any, tuple[Any, int]] = {}
    stream_time: int | None = None
    dropped = 0
    out = []
    for batch in batches:
        last: dict[Any, int] = {}
        for i, (k, v, ts) in enumerate(batch):
            stream_time = ts if stream_time is None else max(stream_time, ts)
            if k is None or (v is None and windows is None):
                dropped += 1
                continue
            if windows is None:
                targets: list[Any] = [k]
            else:
                size, advance, grace = windows
                targets = []
                for start in windows_for(ts, size, advance):
                    if start + size <= stream_time - grace:
                        dropped += 1
                    else:
                        targets.append((k, start))
            for t in targets:
                agg, newest = state.get(t, (None, ts))
                state[t] = (fold(agg, v), max(newest, ts))
                last[t] = i
        emitted = []
        for t, _ in sorted(last.items(), key=lambda kv: kv[1]):
            key = t if windows is None else Windowed(t[0], Window(t[1], t[1] + windows[0]))
            emitted.append((key, state[t][0], state[t][1]))
        out.append(emitted)
    return out, dropped


def split(records: list[Rec], cuts: list[int]) -> list[list[Rec]]:
    bounds = [0, *sorted(c for c in cuts if c < len(records)), len(records)]
    return [records[a:b] for a, b in itertools.pairwise(bounds) if b > a]


def dropped_total(metrics: Any) -> int:
    return sum(metrics.dropped_records_total.values())


RECORDS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c", None]),
        st.one_of(st.none(), st.integers(-5, 5)),
        st.integers(0, 40),
    ),
    min_size=1,
    max_size=16,
)


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    records=RECORDS,
    op=st.sampled_from(["count", "reduce", "aggregate"]),
    cuts=st.lists(st.integers(1, 15), max_size=2, unique=True),
)
def test_per_key_against_the_model(records: list[Rec], op: str, cuts: list[int]) -> None:
    batches = split(records, cuts)
    got, metrics = run(None, agg_topology(op), batches)
    want, dropped = model(op, batches)
    assert got == want
    assert dropped_total(metrics) == dropped


def test_counts_only_rise_and_the_last_update_is_the_model_whatever_the_split() -> None:
    records: list[Rec] = [(k, 1, ts) for ts, k in enumerate("abacbbacabcc")]
    whole, _ = run(None, agg_topology("count"), [records], partitions=2)
    cut, _ = run(None, agg_topology("count"), split(records, [3, 7]), partitions=2)
    for outs in (whole, cut):
        flat = [r for batch in outs for r in batch]
        latest: dict[Any, int] = {}
        for k, v, _ in flat:
            assert v > latest.get(k, 0)  # counts only rise
            latest[k] = v
        assert latest == {"a": 4, "b": 4, "c": 4}


@settings(max_examples=40, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    records=RECORDS,
    op=st.sampled_from(["count", "reduce"]),
    size=st.sampled_from([5, 10]),
    hop=st.booleans(),
    grace=st.sampled_from([0, 3]),
    cuts=st.lists(st.integers(1, 15), max_size=2, unique=True),
)
def test_time_windows_against_the_model(
    records: list[Rec], op: str, size: int, hop: bool, grace: int, cuts: list[int]
) -> None:
    if op == "reduce":  # the reducer adds: give it numbers (a None is its own case)
        records = [(k, 1 if v is None else v, ts) for k, v, ts in records]
    advance = size // 2 if hop else size
    w = TimeWindows.of_size_and_grace(
        timedelta(milliseconds=size), timedelta(milliseconds=grace)
    ).advance_by(timedelta(milliseconds=advance))
    batches = split(records, cuts)
    got, metrics = run(None, agg_topology(op, w), batches)
    want, dropped = model(op, batches, (size, advance, grace))
    assert got == want
    assert dropped_total(metrics) == dropped


def test_late_records_are_dropped_and_counted(spark: Any) -> None:
    w = TimeWindows.of_size_and_grace(timedelta(milliseconds=10), timedelta(milliseconds=5))
    batches: list[list[Rec]] = [
        [("a", 1, 1), ("a", 1, 12)],
        [("a", 1, 14), ("a", 1, 9)],  # stream time 14: window [0, 10) open until 15
        [("a", 1, 15), ("a", 1, 2)],  # stream time 15: [0, 10) has closed, 2 is late
    ]
    got, metrics = run(spark, agg_topology("count", w), batches)
    win = lambda s: Windowed("a", Window(s, s + 10))  # noqa: E731
    assert [[(k, v) for k, v, _ in b] for b in got] == [
        [(win(0), 1), (win(10), 1)],
        [(win(10), 2), (win(0), 2)],
        [(win(10), 3)],
    ]
    assert dropped_total(metrics) == 1


@pytest.mark.parametrize("op", ["count", "aggregate"])
def test_windows_after_a_re_key_take_the_source_partitions_in_timestamp_order(
    spark: Any, op: str
) -> None:
    """The demo's case: two source partitions, each in time order, re-keyed to one key in
    one micro-batch. The task merges the partitions by head timestamp (Kafka Streams'
    timestamp synchronization), so with no grace no record is late; one partition after
    the other would drop most of the second's records as late. (``count`` runs batch-wise
    in numpy, ``aggregate`` record by record.)"""
    b = StreamsBuilder()
    g = (
        b.stream("in", key_type=str, value_type=int)
        .select_key(lambda k, v: "all", key_type=str)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(timedelta(minutes=1)))
    )
    t = g.count() if op == "count" else g.aggregate(lambda: 0, lambda k, v, a: a + v)
    t.to_stream().to("out")
    cfg = StreamsConfig(application_id=f"agg-{uuid.uuid4().hex[:8]}", num_partitions=2)
    with TopologyTestDriver(b.build(), cfg, session=spark) as d:
        src = d.create_input_topic("in", key_type=str, value_type=int)
        sink = d.create_output_topic("out")
        for partition, key in enumerate("ab"):
            for ts in range(partition * 5_000, 180_000, 10_000):
                src.pipe_input(key, 1, timestamp=ts, partition=partition)
        d.process()
        got = [(r.key, r.value, r.timestamp) for r in sink.read_records()]
        metrics = d.metrics()
    assert got == [
        (Windowed("all", Window(s, s + 60_000)), 12, s + 55_000) for s in (0, 60_000, 120_000)
    ]
    assert dropped_total(metrics) == 0


@settings(max_examples=30, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(records=RECORDS, cuts=st.lists(st.integers(1, 15), max_size=2, unique=True))
def test_suppress_emits_each_closed_window_once_with_its_final_value(
    records: list[Rec], cuts: list[int]
) -> None:
    size, grace = 10, 2
    w = TimeWindows.of_size_and_grace(timedelta(milliseconds=size), timedelta(milliseconds=grace))
    batches = split(records, cuts)
    got, _ = run(None, agg_topology("count", w, suppress=True), batches)
    updates, _ = model("count", batches, (size, size, grace))
    final: dict[Any, Any] = {}
    for b in updates:
        for k, v, _ in b:
            final[k] = v
    stream_time = None
    closed: list[Any] = []
    for i, batch in enumerate(batches):
        stream_time = max([stream_time or 0, *(ts for _, _, ts in batch)])
        # the windows that have closed by the end of this batch, not emitted before
        now = [k for k in final if k.window.end + grace <= stream_time and k not in closed]
        emitted = [(k, v) for k, v, _ in got[i]]
        assert sorted(emitted, key=repr) == sorted(((k, final[k]) for k in now), key=repr)
        closed.extend(now)


def test_store_answers_get_and_fetch_and_the_app_restarts_from_its_checkpoint(
    spark: Any, app_id: str
) -> None:
    with tempfile.TemporaryDirectory() as base:

        def topology() -> Any:
            b = StreamsBuilder()
            s = b.stream(Topic.jsonl("in", os.path.join(base, "in")), key_type=str, value_type=int)
            s.group_by_key().count(materialized=Materialized.as_("counts")).to_stream().to(
                Topic.jsonl("out", os.path.join(base, "out"))
            )
            w = TimeWindows.of_size_with_no_grace(timedelta(seconds=10))
            s.group_by_key().windowed_by(w).reduce(
                lambda a, v: a + v, materialized=Materialized.as_("sums")
            ).to_stream(lambda wk, v: wk.key, key_type=str).to(
                Topic.jsonl("sums-out", os.path.join(base, "sums-out"))
            )
            return b.build()

        def write(name: str, rows: list[tuple[str, int, int]]) -> None:
            folder = os.path.join(base, "in")
            os.makedirs(folder, exist_ok=True)
            with open(os.path.join(base, f".{name}"), "w") as f:
                for k, v, ts in rows:
                    f.write(f'{{"key": "{k}", "value": {v}, "timestamp": {ts}}}\n')
            os.replace(os.path.join(base, f".{name}"), os.path.join(folder, name))

        cfg = StreamsConfig(
            application_id=app_id, checkpoint_dir=os.path.join(base, "chk"), num_partitions=1
        )
        write("1.jsonl", [("a", 1, 1_000), ("b", 2, 2_000), ("a", 3, 12_000)])
        StreamsApp(topology(), cfg, session=spark).run_until_caught_up()
        write("2.jsonl", [("a", 5, 13_000), ("c", 1, 14_000)])
        app = StreamsApp(topology(), cfg, session=spark)
        app.run_until_caught_up()
        counts = app.store("counts")
        assert [counts.get(k) for k in ("a", "b", "c", "zz")] == [3, 1, 1, None]
        sums = app.store("sums")
        # no grace: window [0, 10s) closed at stream time 12s (of the one task) and left
        # the store
        assert sums.fetch("a", 0, 20_000) == [(10_000, 8)]
        assert sums.fetch("b", 0, 20_000) == []
        assert sums.fetch("c", 10_000, 10_000) == [(10_000, 1)]
        assert sums.fetch("c", 0, 9_999) == []
        # a replica answers the same from memory
        replica = app.replica("sums")
        assert replica.fetch("a", 0, 20_000) == [(10_000, 8)]
        assert app.replica("counts").get("a") == 3


@pytest.mark.cluster
def test_rescale_carries_counts_and_windows_over(spark: Any, app_id: str) -> None:
    """2 -> 3 partitions between micro-batches: the same output as without a rescale (the
    two counts are two sub-topologies)."""
    w = TimeWindows.of_size_and_grace(timedelta(milliseconds=10), timedelta(milliseconds=100))
    batches: list[list[Rec]] = [
        [(k, 1, ts) for ts, k in enumerate("abcdefab")],
        [(k, 1, 8 + ts) for ts, k in enumerate("aabbcgh")],
    ]

    def outputs(rescale: bool) -> list[Any]:
        b = StreamsBuilder()
        s = b.stream("in", key_type=str, value_type=int)
        s.group_by_key().count().to_stream().to("out")
        s.group_by_key().windowed_by(w).count().to_stream().to("wout")
        cfg = StreamsConfig(application_id=f"{app_id}-{rescale}", num_partitions=2)
        got = []
        with TopologyTestDriver(b.build(), cfg, session=spark) as d:
            src = d.create_input_topic("in", key_type=str, value_type=int)
            out, wout = d.create_output_topic("out"), d.create_output_topic("wout")
            for i, batch in enumerate(batches):
                if rescale and i == 1:
                    d.rescale(3)
                for k, v, ts in batch:
                    src.pipe_input(k, v, timestamp=ts)
                d.process()
                got.append(sorted(out.read_key_values(), key=repr))
                got.append(sorted(wout.read_key_values(), key=repr))
        return got

    assert outputs(True) == outputs(False)


def test_a_failing_aggregator_goes_to_the_processing_handler(spark: Any, app_id: str) -> None:
    from kspark.errors import LogAndContinueProcessingExceptionHandler

    b = StreamsBuilder()
    b.stream("in", key_type=str, value_type=int).group_by_key().aggregate(
        lambda: 0, lambda k, v, total: total + 10 // v, Named.as_("div"), value_type=int
    ).to_stream().to("out")
    cfg = StreamsConfig(
        application_id=app_id,
        num_partitions=1,
        processing_exception_handler=LogAndContinueProcessingExceptionHandler,
    )
    with TopologyTestDriver(b.build(), cfg, session=spark) as d:
        src = d.create_input_topic("in", key_type=str, value_type=int)
        out = d.create_output_topic("out")
        for v in (5, 0, 2):  # 10 // 0 raises: the record is skipped, the aggregate kept
            src.pipe_input("a", v, timestamp=1)
        d.process()
        assert out.read_key_values() == [("a", 7)]
        assert d.metrics().dropped_records_total == {("div", "0_0"): 1}


def test_session_windows_merge_and_retract_and_the_store_fetches_sessions(
    spark: Any, app_id: str
) -> None:
    from kspark import SessionWindows

    b = StreamsBuilder()
    w = SessionWindows.of_inactivity_gap_and_grace(
        timedelta(milliseconds=10), timedelta(milliseconds=20)
    )
    b.stream("in", key_type=str, value_type=int).group_by_key().windowed_by(w).count(
        materialized=Materialized.as_("sessions")
    ).to_stream().to("out")
    cfg = StreamsConfig(application_id=app_id, num_partitions=1)
    win = lambda s, e: Windowed("a", Window(s, e))  # noqa: E731
    with TopologyTestDriver(b.build(), cfg, session=spark) as d:
        src = d.create_input_topic("in", key_type=str, value_type=int)
        out = d.create_output_topic("out")
        src.pipe_input("a", 1, timestamp=0)
        src.pipe_input("a", 1, timestamp=20)
        d.process()
        assert out.read_key_values() == [(win(0, 0), 1), (win(20, 20), 1)]
        src.pipe_input("a", 1, timestamp=10)  # within the gap of both: they merge
        d.process()
        assert out.read_key_values() == [(win(0, 0), None), (win(20, 20), None), (win(0, 20), 3)]
        assert d.store("sessions").fetch("a") == [(0, 20, 3)]


def test_a_session_store_keeps_closed_sessions_for_its_retention_across_a_restart(
    spark: Any, app_id: str
) -> None:
    from kspark import SessionWindows

    b = StreamsBuilder()
    w = SessionWindows.of_inactivity_gap_with_no_grace(timedelta(milliseconds=10))
    b.stream("in", key_type=str, value_type=int).group_by_key().windowed_by(w).count(
        materialized=Materialized.as_("visits").with_retention(timedelta(milliseconds=100))
    ).to_stream(lambda wk, n: wk.key, key_type=str).to("out")
    cfg = StreamsConfig(application_id=app_id, num_partitions=1)
    with TopologyTestDriver(b.build(), cfg, session=spark) as d:
        src = d.create_input_topic("in", key_type=str, value_type=int)
        src.pipe_records([("a", 1, 0), ("a", 1, 5), ("b", 1, 5)])
        d.process()
        d.app = StreamsApp(d.topology, d.config, session=spark)  # a restart: the checkpoint
        src.pipe_records([("a", 1, 50), ("c", 1, 105)])
        d.process()
        visits = d.get_session_store("visits")
        # at stream time 105, [0, 5] ended exactly 100 ms before: gone; [50, 50] kept,
        # though it closed at 60
        assert visits.fetch("a") == [(50, 50, 1)]
        assert visits.fetch("b") == []
        assert visits.find_sessions("a", 0, 200) == [(50, 50, 1)]
        assert visits.fetch_session("a", 50, 50) == 1
        assert visits.fetch_session("c", 105, 105) == 1
