"""Cogrouped aggregations (KIP-150) in process, through the compiler and the in-process
engine: Kafka Streams' scenarios (KStreamCogroupTest, CogroupedKStreamImplTest,
re-expressed), the plan (names, sub-topologies, errors), a property test against the
reference model over random micro-batch splits and restarts, and a corpus of awkward keys
and timestamps."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.cogroupmodel import CogroupModel, Record

from kspark import (
    Grouped,
    Materialized,
    Named,
    SessionWindows,
    StreamsBuilder,
    StreamsConfig,
    Suppressed,
    TimeWindows,
    Topic,
)
from kspark.compiler import stages
from kspark.compiler.compiler import compile_topology
from kspark.errors import InvalidArgumentError, InvalidTopologyError
from kspark.plan.topology import Topology
from kspark.testing import TopologyTestDriver
from kspark_server import placement
from kspark_server.spec import SPEC_VERSION, AggregateSpec

PARTITIONS = 3


def _config() -> StreamsConfig:
    return StreamsConfig(application_id="cogroup", num_partitions=PARTITIONS)


def _task_of(spark_type: str) -> Callable[[Any], int]:
    hasher = placement.spark_hasher(spark_type)
    return lambda key: placement.pmod(hasher(key, 42), PARTITIONS)


def remove(k: str, v: str, agg: str) -> str:
    return f"{agg}-{v}"


def add(k: str, v: str, agg: str) -> str:
    return f"{agg}+{v}"


def _two_inputs(
    first: Callable[..., Any],
    second: Callable[..., Any],
    initializer: Callable[[], Any],
    value_types: tuple[type, type] = (str, str),
    value_type: type = str,
) -> Topology:
    b = StreamsBuilder()
    one = b.stream("one", key_type=str, value_type=value_types[0]).group_by_key()
    two = b.stream("two", key_type=str, value_type=value_types[1]).group_by_key()
    table = (
        one.cogroup(first)
        .cogroup(two, second)
        .aggregate(initializer, materialized=Materialized.as_("store1"), value_type=value_type)
    )
    table.to_stream().to("out")
    return b.build()


def _record_by_record(
    topology: Topology, records: Sequence[tuple[str, Any, Any, int]]
) -> list[tuple[Any, Any, int]]:
    """Each record its own micro-batch: the output as Kafka Streams gives it without a
    record cache."""
    with TopologyTestDriver(topology, _config(), engine="local") as d:
        inputs = {name: d.create_input_topic(name) for name in ("one", "two")}
        out = d.create_output_topic("out")
        for topic, k, v, ts in records:
            inputs[topic].pipe_input(k, v, timestamp=ts)
            d.process()
        return [(r.key, r.value, r.timestamp) for r in out.read_records()]


# -- Kafka Streams' scenarios --------------------------------------------------------------


def test_two_streams_with_shared_keys_and_different_value_types() -> None:
    """A string-valued and an int-valued stream summed into one int per key; each output
    carries the largest timestamp of the records aggregated."""
    topology = _two_inputs(
        lambda k, v, agg: agg + int(v),
        lambda k, v, agg: agg + v,
        lambda: 0,
        value_types=(str, int),
        value_type=int,
    )
    records = [
        *(("one", k, "1", ts) for k, ts in [("k1", 0), ("k2", 1), ("k1", 10), ("k2", 100)]),
        *(
            ("two", k, v, ts)
            for k, v, ts in [
                ("k2", 2, 100),
                ("k2", 2, 200),
                ("k1", 2, 1),
                ("k2", 2, 500),
                ("k1", 2, 500),
                ("k2", 3, 500),
                ("k3", 2, 500),
                ("k2", 2, 100),
            ]
        ),
    ]
    assert _record_by_record(topology, records) == [
        ("k1", 1, 0),
        ("k2", 1, 1),
        ("k1", 2, 10),
        ("k2", 2, 100),
        ("k2", 4, 100),
        ("k2", 6, 200),
        ("k1", 4, 10),
        ("k2", 8, 500),
        ("k1", 6, 500),
        ("k2", 11, 500),
        ("k3", 2, 500),
        ("k2", 13, 500),
    ]


def test_mixed_aggregators_each_fold_their_own_inputs_records() -> None:
    topology = _two_inputs(remove, add, lambda: "0")
    records = [
        ("one", "k1", "1", 0),
        ("one", "k2", "1", 1),
        ("one", "k1", "1", 10),
        ("one", "k2", "1", 100),
        ("two", "k1", "2", 500),
        ("two", "k2", "2", 500),
        ("two", "k1", "2", 500),
        ("two", "k2", "2", 100),
    ]
    assert _record_by_record(topology, records) == [
        ("k1", "0-1", 0),
        ("k2", "0-1", 1),
        ("k1", "0-1-1", 10),
        ("k2", "0-1-1", 100),
        ("k1", "0-1-1+2", 500),
        ("k2", "0-1-1+2", 500),
        ("k1", "0-1-1+2+2", 500),
        ("k2", "0-1-1+2+2", 500),
    ]


def test_null_keys_and_null_values_are_dropped_and_counted() -> None:
    topology = _two_inputs(add, add, lambda: "")
    with TopologyTestDriver(topology, _config(), engine="local") as d:
        one, two = d.create_input_topic("one"), d.create_input_topic("two")
        out = d.create_output_topic("out")
        one.pipe_input("k1", "A", timestamp=0)
        one.pipe_input("k2", None, timestamp=0)
        two.pipe_input(None, "B", timestamp=0)
        two.pipe_input("k1", "B", timestamp=0)
        d.process()
        assert out.read_key_values() == [("k1", "+A+B")]
        assert d.metrics().dropped_by_reason() == {
            ("COGROUPKSTREAM-MERGE-0000000004", "null-value"): 1,
            ("COGROUPKSTREAM-MERGE-0000000004", "null-key"): 1,
        }
        assert d.get_key_value_store("store1").get("k1") == "+A+B"


def test_one_batch_emits_each_keys_latest_aggregate_once() -> None:
    """The record cache of one micro-batch: records of both inputs, merged by timestamp
    across the inputs' partitions, then each changed key once."""
    topology = _two_inputs(add, remove, lambda: "")
    with TopologyTestDriver(topology, _config(), engine="local") as d:
        one, two = d.create_input_topic("one"), d.create_input_topic("two")
        out = d.create_output_topic("out")
        one.pipe_records([("k", "a", 5), ("k", "b", 20)])
        two.pipe_records([("k", "x", 10), ("k", "y", 30)])
        d.process()
        # by timestamp across the two partitions: a@5, x@10, b@20, y@30
        assert out.read_records()[0].value == "+a-x+b-y"


def test_time_windows_over_two_streams_drop_late_records_by_the_tasks_stream_time() -> None:
    b = StreamsBuilder()
    one = b.stream("one", key_type=str, value_type=str).group_by_key()
    two = b.stream("two", key_type=str, value_type=str).group_by_key()
    (
        one.cogroup(add)
        .cogroup(two, remove)
        .windowed_by(TimeWindows.of_size_and_grace(timedelta(seconds=10), timedelta(seconds=2)))
        .aggregate(lambda: "", materialized=Materialized.as_("windows"))
        .to_stream()
        .map(lambda w, v: (f"{w.key}@{w.window.start}", v), key_type=str, value_type=str)
        .to("out")
    )
    with TopologyTestDriver(b.build(), _config(), engine="local") as d:
        one, two = d.create_input_topic("one"), d.create_input_topic("two")
        out = d.create_output_topic("out")
        one.pipe_input("k", "a", timestamp=1_000)
        d.process()
        two.pipe_input("k", "b", timestamp=9_000)
        d.process()
        one.pipe_input("k", "c", timestamp=13_000)  # closes [0, 10s) at 12s
        d.process()
        two.pipe_input("k", "late", timestamp=5_000)
        d.process()
        assert out.read_key_values() == [("k@0", "+a"), ("k@0", "+a-b"), ("k@10000", "+c")]
        assert d.metrics().by_name()["dropped-records-total"] == 1
        assert d.get_window_store("windows").fetch("k", 0, 20_000) == [(10_000, "+c")]


def test_suppressed_windows_emit_each_final_result_once() -> None:
    b = StreamsBuilder()
    one = b.stream("one", key_type=str, value_type=str).group_by_key()
    two = b.stream("two", key_type=str, value_type=str).group_by_key()
    (
        one.cogroup(add)
        .cogroup(two, remove)
        .windowed_by(TimeWindows.of_size_with_no_grace(timedelta(seconds=10)))
        .aggregate(lambda: "")
        .suppress(Suppressed.until_window_closes())
        .to_stream()
        .map(lambda w, v: (f"{w.key}@{w.window.start}", v), key_type=str, value_type=str)
        .to("out")
    )
    with TopologyTestDriver(b.build(), _config(), engine="local") as d:
        one, two = d.create_input_topic("one"), d.create_input_topic("two")
        out = d.create_output_topic("out")
        one.pipe_input("k", "a", timestamp=1_000)
        two.pipe_input("k", "b", timestamp=2_000)
        d.process()
        assert out.read_key_values() == []
        one.pipe_input("k", "c", timestamp=10_000)
        d.process()
        assert out.read_key_values() == [("k@0", "+a-b")]


def test_session_windows_merge_sessions_that_records_of_either_input_join() -> None:
    b = StreamsBuilder()
    one = b.stream("one", key_type=str, value_type=str).group_by_key()
    two = b.stream("two", key_type=str, value_type=str).group_by_key()
    (
        one.cogroup(add)
        .cogroup(two, remove)
        .windowed_by(
            SessionWindows.of_inactivity_gap_and_grace(timedelta(seconds=5), timedelta(seconds=10))
        )
        .aggregate(lambda: "", lambda k, a, c: a + c, materialized=Materialized.as_("sessions"))
        .to_stream()
        .map(
            lambda w, v: (f"{w.key}@{w.window.start}-{w.window.end}", v),
            key_type=str,
            value_type=str,
        )
        .to("out")
    )
    with TopologyTestDriver(b.build(), _config(), engine="local") as d:
        one, two = d.create_input_topic("one"), d.create_input_topic("two")
        out = d.create_output_topic("out")
        one.pipe_input("k", "a", timestamp=0)
        d.process()
        two.pipe_input("k", "b", timestamp=8_000)
        d.process()
        one.pipe_input("k", "c", timestamp=4_000)  # within the gap of both: one session
        d.process()
        assert out.read_key_values() == [
            ("k@0-0", "+a"),
            ("k@8000-8000", "-b"),
            ("k@0-0", None),
            ("k@8000-8000", None),
            ("k@0-8000", "+a-b+c"),
        ]


# -- the plan --------------------------------------------------------------------------------


def test_named_processors_follow_kafka_streams() -> None:
    b = StreamsBuilder()
    one = b.stream("one", key_type=str, value_type=str).group_by_key()
    two = b.stream("two", key_type=str, value_type=str).group_by_key()
    table = one.cogroup(add).cogroup(two, add).aggregate(lambda: "", Named.as_("stats"))
    assert table.name == "stats-cogroup-merge"
    assert [i.name for i in table.node.inputs] == ["stats-cogroup-agg-0", "stats-cogroup-agg-1"]
    assert table.store_name == "COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000002"


def test_an_input_that_needs_a_repartition_starts_the_aggregations_sub_topology() -> None:
    b = StreamsBuilder()
    one = b.stream("one", key_type=str, value_type=str)
    two = b.stream("two", key_type=str, value_type=str)
    regrouped = one.group_by(lambda k, v: v, Grouped.as_("by-value"))
    table = regrouped.cogroup(add).cogroup(two.group_by_key(), add).aggregate(lambda: "")
    table.to_stream().to("out")
    groups = [[n.name for n in g] for g in b.build().subtopologies()]
    # the re-keyed input is read through its repartition; the other is co-located
    assert groups[0] == ["KSTREAM-SOURCE-0000000000", "KSTREAM-KEY-SELECT-0000000002"]
    assert "KSTREAM-SOURCE-0000000001" in groups[1]
    assert table.name in groups[1]
    assert table.node.inputs[0].repartitions and not table.node.inputs[1].repartitions
    with TopologyTestDriver(b.build(), _config(), engine="local") as d:
        d.create_input_topic("one").pipe_records([("x", "k1", 0), ("y", "k2", 1)])
        d.create_input_topic("two").pipe_records([("k1", "b", 2)])
        d.process()
        # the first input's records, re-keyed by their values, meet the second's by key
        assert sorted(d.create_output_topic("out").read_key_values()) == [
            ("k1", "+k1+b"),
            ("k2", "+k2"),
        ]


def test_one_operator_one_store_one_spec_with_an_aggregator_per_input() -> None:
    topology = _two_inputs(remove, add, lambda: "").with_topics(
        lambda name, topic, role: Topic.parquet(name, f"/unused/{name}")
    )
    output = compile_topology(topology, _config())
    ops = [s for s in output.stages() if isinstance(s, stages.Stateful)]
    assert len(ops) == 1
    spec = ops[0].spec
    assert isinstance(spec, AggregateSpec) and spec.spec_version == SPEC_VERSION
    assert [c.aggregator for c in spec.cogroup] == [remove, add]
    assert isinstance(ops[0].stream, stages.Cogroup) and len(ops[0].stream.parts) == 2
    assert output.stores == {"store1": "COGROUPKSTREAM-MERGE-0000000004"}


def test_inputs_of_different_key_types_are_refused() -> None:
    b = StreamsBuilder()
    one = b.stream("one", key_type=str, value_type=str).group_by_key()
    two = b.stream("two", key_type=int, value_type=str).group_by_key()
    with pytest.raises(InvalidTopologyError, match="one key type"):
        one.cogroup(add).cogroup(two, add)  # type: ignore[arg-type]


def test_a_dynamic_key_takes_the_declared_key_type() -> None:
    b = StreamsBuilder()
    one = b.stream("one", key_type=str, value_type=str).group_by_key()
    two = b.stream("two").group_by_key()
    table = one.cogroup(add).cogroup(two, lambda k, v, agg: agg + str(v)).aggregate(lambda: "")
    table.to_stream().to("out")
    with TopologyTestDriver(b.build(), _config(), engine="local") as d:
        d.create_input_topic("one").pipe_input("k", "a", timestamp=0)
        d.create_input_topic("two").pipe_input("k", 7, timestamp=1)
        d.process()
        assert d.create_output_topic("out").read_key_values() == [("k", "+a7")]


def test_misuse_is_refused() -> None:
    b = StreamsBuilder()
    one = b.stream("one", key_type=str, value_type=str).group_by_key()
    cogrouped = one.cogroup(add)
    with pytest.raises(InvalidArgumentError):
        cogrouped.cogroup(one, add)  # the same grouped stream twice
    with pytest.raises(InvalidArgumentError):
        cogrouped.cogroup(b.stream("x"), add)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        one.cogroup("not a function")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        cogrouped.windowed_by(timedelta(seconds=1))  # type: ignore[call-overload]


# -- against the reference model -------------------------------------------------------------

_KEYS = st.sampled_from(["a", "b", "c", "d", None])
_RECORDS = st.lists(
    st.tuples(
        st.integers(0, 2),
        _KEYS,
        st.one_of(st.none(), st.integers(0, 9)),
        st.integers(0, 40_000),
    ),
    min_size=1,
    max_size=40,
)


def _three_inputs(windows: TimeWindows | None) -> Topology:
    b = StreamsBuilder()
    grouped = [
        b.stream(name, key_type=str, value_type=int).group_by_key() for name in ("x", "y", "z")
    ]
    cogrouped = (
        grouped[0]
        .cogroup(lambda k, v, agg: f"{agg}x{v}")
        .cogroup(grouped[1], lambda k, v, agg: f"{agg}y{v}")
        .cogroup(grouped[2], lambda k, v, agg: f"{agg}z{v}")
    )
    if windows is None:
        table = cogrouped.aggregate(lambda: "", materialized=Materialized.as_("agg"))
        table.to_stream().map(lambda k, v: (k, v), key_type=str, value_type=str).to("out")
    else:
        (
            cogrouped.windowed_by(windows)
            .aggregate(lambda: "", materialized=Materialized.as_("agg"))
            .to_stream()
            .map(lambda w, v: (f"{w.key}@{w.window.start}", v), key_type=str, value_type=str)
            .to("out")
        )
    return b.build()


def _model_aggregators() -> list[Callable[[Any, Any, Any], Any]]:
    return [lambda k, v, agg, c=c: f"{agg}{c}{v}" for c in "xyz"]


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    records=_RECORDS,
    cuts=st.lists(st.integers(1, 39), max_size=4, unique=True),
    restarts=st.lists(st.integers(0, 4), max_size=2),
    windowed=st.sampled_from([None, (10_000, 10_000, 0), (10_000, 5_000, 3_000)]),
)
def test_matches_the_model_over_any_micro_batch_split_and_restart(
    records: list[Record],
    cuts: list[int],
    restarts: list[int],
    windowed: tuple[int, int, int] | None,
) -> None:
    windows = None
    if windowed is not None:
        size, advance, grace = windowed
        windows = TimeWindows.of_size_and_grace(
            timedelta(milliseconds=size), timedelta(milliseconds=grace)
        ).advance_by(timedelta(milliseconds=advance))
    topology = _three_inputs(windows)
    model = CogroupModel(lambda: "", _model_aggregators(), _task_of("string"), windowed)
    bounds = [0, *sorted(c for c in cuts if c < len(records)), len(records)]
    batches = [records[x:y] for x, y in itertools.pairwise(bounds) if y > x]
    with TopologyTestDriver(topology, _config(), engine="local") as d:
        inputs = [d.create_input_topic(name) for name in ("x", "y", "z")]
        out = d.create_output_topic("out")
        for i, batch in enumerate(batches):
            if i in restarts and d._local is not None:
                d._local.restart()  # empty local stores: the state comes back from its log
            for idx, k, v, ts in batch:
                inputs[idx].pipe_input(k, v, timestamp=ts)
            d.process()
            want = model.batch(batch)
            got = [(r.key, r.value, r.timestamp) for r in out.read_records()]
            expected = [
                (key if windowed is None else f"{key[0]}@{key[1]}", agg, ts)
                for key, agg, ts in want
            ]
            # each changed key (or window) once; the sink orders the rows by the source
            # position of their last record, so compare them as sets
            assert sorted(got) == sorted(expected) and len(got) == len({r[0] for r in got})
        dropped = {r: n for (_, r), n in d.metrics().dropped_by_reason().items()}
        assert dropped == model.dropped
        store = d.get_key_value_store("agg") if windowed is None else None
        if store is not None:
            for key, (agg, _) in model.aggs.items():
                assert store.get(key) == agg


@settings(max_examples=15, deadline=None, derandomize=True)
@given(
    records=st.lists(
        st.tuples(st.sampled_from(["a", "b", None]), st.integers(0, 9), st.integers(0, 60_000)),
        min_size=1,
        max_size=30,
    ),
    cuts=st.lists(st.integers(1, 29), max_size=3, unique=True),
    kind=st.sampled_from(["key", "hopping", "session"]),
)
def test_one_cogrouped_stream_is_its_own_aggregation(
    records: list[tuple[str | None, int, int]], cuts: list[int], kind: str
) -> None:
    """A cogroup of one grouped stream gives, batch by batch, what ``aggregate`` of the
    grouped stream gives (sessions included, whose merges the model leaves out)."""

    def topology(cogrouped: bool) -> Topology:
        b = StreamsBuilder()
        g = b.stream("in", key_type=str, value_type=int).group_by_key()

        def agg(k: str, v: int, a: str) -> str:
            return f"{a}{v}"

        def merge(k: str, a: str, c: str) -> str:
            return f"({a}|{c})"

        if kind == "key":
            t: Any = g.cogroup(agg).aggregate(str) if cogrouped else g.aggregate(str, agg)
            t.to_stream().to("out")
            return b.build()
        if kind == "hopping":
            w = TimeWindows.of_size_and_grace(
                timedelta(seconds=10), timedelta(seconds=1)
            ).advance_by(timedelta(seconds=5))
            t = (
                g.cogroup(agg).windowed_by(w).aggregate(str)
                if cogrouped
                else g.windowed_by(w).aggregate(str, agg)
            )
        else:
            s = SessionWindows.of_inactivity_gap_and_grace(
                timedelta(seconds=5), timedelta(seconds=2)
            )
            t = (
                g.cogroup(agg).windowed_by(s).aggregate(str, merge)
                if cogrouped
                else g.windowed_by(s).aggregate(str, agg, merge)
            )
        t.to_stream().map(
            lambda w, v: (f"{w.key}@{w.window.start}-{w.window.end}", v),
            key_type=str,
            value_type=str,
        ).to("out")
        return b.build()

    bounds = [0, *sorted(c for c in cuts if c < len(records)), len(records)]
    batches = [records[x:y] for x, y in itertools.pairwise(bounds) if y > x]

    def run(cogrouped: bool) -> tuple[list[Any], Any]:
        with TopologyTestDriver(topology(cogrouped), _config(), engine="local") as d:
            src, out = d.create_input_topic("in"), d.create_output_topic("out")
            seen = []
            for batch in batches:
                src.pipe_records(batch)
                d.process()
                seen.append(out.read_records())
            return seen, d.metrics().by_name().get("dropped-records-total", 0)

    assert run(True) == run(False)


# -- awkward keys and timestamps --------------------------------------------------------------


def test_a_corpus_of_keys_and_timestamps() -> None:
    """Keys that are empty, 1 MiB long or not UTF-8, a null key (dropped and counted), and
    timestamps at 0 and far in the future, through both inputs."""
    b = StreamsBuilder()
    one = b.stream("one", key_type=bytes, value_type=int).group_by_key()
    two = b.stream("two", key_type=bytes, value_type=str).group_by_key()
    (
        one.cogroup(lambda k, v, n: n + v)
        .cogroup(two, lambda k, v, n: n + len(v))
        .aggregate(lambda: 0, materialized=Materialized.as_("sizes"), value_type=int)
        .to_stream()
        .to("out")
    )
    big = b"k" * (1 << 20)
    far = 2**53
    keys = [b"", big, b"\xff\xfe\x00", None]
    with TopologyTestDriver(b.build(), _config(), engine="local") as d:
        a, c = d.create_input_topic("one"), d.create_input_topic("two")
        out = d.create_output_topic("out")
        for i, k in enumerate(keys):
            a.pipe_input(k, i + 1, timestamp=0)
            c.pipe_input(k, "xyz", timestamp=far)
        d.process()
        got = {r.key: (r.value, r.timestamp) for r in out.read_records()}
        assert got == {b"": (4, far), big: (5, far), b"\xff\xfe\x00": (6, far)}
        assert d.metrics().by_name()["dropped-records-total"] == 2
        store = d.get_key_value_store("sizes")
        assert store.get(big) == 5 and store.get(b"") == 4 and store.get(b"\xff\xfe\x00") == 6


# -- the table of docs/aggregations.md ----------------------------------------------------


@dataclasses.dataclass
class View:
    page: str
    seconds: int


@dataclasses.dataclass
class Click:
    page: str


@dataclasses.dataclass
class Stats:
    views: int = 0
    seconds: int = 0
    clicks: int = 0


def test_the_documented_table_of_what_each_record_emits() -> None:
    b = StreamsBuilder()
    views = b.stream("views", key_type=str, value_type=View)
    clicks = b.stream("clicks", key_type=str, value_type=Click)

    def add_view(user: str, v: View, s: Stats) -> Stats:
        return Stats(s.views + 1, s.seconds + v.seconds, s.clicks)

    def add_click(user: str, c: Click, s: Stats) -> Stats:
        return Stats(s.views, s.seconds, s.clicks + 1)

    (
        views.group_by_key()
        .cogroup(add_view)
        .cogroup(clicks.group_by_key(), add_click)
        .aggregate(Stats, materialized=Materialized.as_("user-stats"))
        .to_stream()
        .to("out")
    )
    with TopologyTestDriver(b.build(), _config(), engine="local") as d:
        v, c = d.create_input_topic("views"), d.create_input_topic("clicks")
        out = d.create_output_topic("out")
        steps: list[tuple[Any, str | None, Any, int]] = [
            (v, "alice", View("/", 30), 10),
            (c, "alice", Click("/"), 12),
            (v, "alice", View("/a", 5), 11),
            (c, None, Click("/"), 13),
            (v, "alice", None, 14),
        ]
        for topic, key, value, ts in steps:
            topic.pipe_input(key, value, timestamp=ts)
            d.process()
        assert [(r.key, r.value, r.timestamp) for r in out.read_records()] == [
            ("alice", Stats(1, 30, 0), 10),
            ("alice", Stats(1, 30, 1), 12),
            ("alice", Stats(2, 35, 1), 12),
        ]
        assert d.metrics().by_name()["dropped-records-total"] == 2
        assert d.get_key_value_store("user-stats").get("alice") == Stats(2, 35, 1)


def test_dead_letters_carry_the_value_of_the_records_own_input() -> None:
    """A late record and a record whose aggregator fails, of the second input, reach the
    dead-letter queue with their own value (not the first input's column, null for
    them)."""
    from kspark.errors import DeadLetterQueueProcessingExceptionHandler

    b = StreamsBuilder()
    one = b.stream("one", key_type=str, value_type=int).group_by_key()
    two = b.stream("two", key_type=str, value_type=str).group_by_key()

    def strict(k: str, v: str, agg: str) -> str:
        if v == "boom":
            raise ValueError("boom")
        return agg + v

    (
        one.cogroup(lambda k, v, agg: agg + str(v))
        .cogroup(two, strict)
        .windowed_by(TimeWindows.of_size_with_no_grace(timedelta(seconds=10)))
        .aggregate(lambda: "")
        .to_stream()
        .map(lambda w, v: (w.key, v), key_type=str, value_type=str)
        .to("out")
    )
    config = StreamsConfig(
        application_id="cogroup-dlq",
        num_partitions=1,
        dead_letter_queue_topic=Topic.parquet("dlq", "/unused/dlq"),
        dead_letter_dropped_records=True,
        processing_exception_handler=DeadLetterQueueProcessingExceptionHandler,
    )
    with TopologyTestDriver(b.build(), config, engine="local") as d:
        one, two = d.create_input_topic("one"), d.create_input_topic("two")
        one.pipe_input("k", 1, timestamp=20_000)
        d.process()
        two.pipe_input("k", "late", timestamp=1_000)
        two.pipe_input("k", "boom", timestamp=21_000)
        d.process()
        dead = d.dead_letter_topic().read_records()
        assert sorted(str(r.value) for r in dead) == ['"boom"', '"late"']


def test_the_corpus_through_time_windows_far_in_the_future() -> None:
    b = StreamsBuilder()
    one = b.stream("one", key_type=bytes, value_type=int).group_by_key()
    two = b.stream("two", key_type=bytes, value_type=str).group_by_key()
    (
        one.cogroup(lambda k, v, n: n + v)
        .cogroup(two, lambda k, v, n: n + len(v))
        .windowed_by(TimeWindows.of_size_and_grace(timedelta(seconds=10), timedelta(days=365_000)))
        .aggregate(lambda: 0, materialized=Materialized.as_("w"), value_type=int)
        .to_stream()
        .map(lambda w, v: (w.key, [w.window.start, v]), key_type=bytes, value_type=list[int])
        .to("out")
    )
    far = 2**62
    start = far - far % 10_000
    keys = [b"", b"k" * (1 << 20), b"\xff\xfe", None]
    with TopologyTestDriver(b.build(), _config(), engine="local") as d:
        a, c = d.create_input_topic("one"), d.create_input_topic("two")
        out = d.create_output_topic("out")
        for k in keys:
            a.pipe_input(k, 1, timestamp=0)
            c.pipe_input(k, "ab", timestamp=far)
        d.process()
        got = sorted((r.key, tuple(r.value), r.timestamp) for r in out.read_records())
        assert got == sorted(
            (k, w, ts) for k in keys[:3] for w, ts in (((0, 1), 0), ((start, 2), far))
        )
        assert d.metrics().dropped_by_reason() == {
            ("COGROUPKSTREAM-MERGE-0000000004", "null-key"): 2
        }
        assert d.get_window_store("w").fetch(b"\xff\xfe", start, start) == [(start, 2)]
