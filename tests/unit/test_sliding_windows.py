"""Sliding windows (KIP-450) and ``EmitStrategy.on_window_close()`` (KIP-825), run in
process by the test driver's local engine: Kafka Streams' scenarios of
``KStreamSlidingWindowAggregateTest`` in kspark's terms, and the operator against the
reference model (tests/support/slidingmodel.py) on random micro-batch splits."""

from __future__ import annotations

import itertools
import os
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st
from support.slidingmodel import SlidingModel
from support.taskharness import Runner, close_local_stores

from kspark import (
    EmitStrategy,
    Materialized,
    SlidingWindows,
    StreamsBuilder,
    StreamsConfig,
    Suppressed,
    TimeWindows,
)
from kspark.bindings import bind_topology
from kspark.compiler import compile_topology, stages
from kspark.errors import InvalidArgumentError, InvalidTopologyError
from kspark.plan.topology import Topology
from kspark.testing import TopologyTestDriver
from kspark_server import envelope as env
from kspark_server.operators.aggregate import AggregateProcessor
from kspark_server.spec import AggregateSpec, KeyValue, Packed, PrimSpec, SpecError, StateOptions

MS = timedelta(milliseconds=1)
CONFIG = StreamsConfig(application_id="sliding", num_partitions=1)


def sorted_concat(values: list[Any]) -> str:
    return "".join(sorted("".join(values)))


def topology(
    size: int,
    grace: int | None,
    op: str = "aggregate",
    *,
    on_close: bool = False,
    key_type: Any = str,
    store: str = "windows",
) -> Topology:
    b = StreamsBuilder()
    windows = (
        SlidingWindows.of_time_difference_without_a_grace(size * MS)
        if grace is None
        else SlidingWindows.of_time_difference_and_grace(size * MS, grace * MS)
    )
    value_type = int if op == "count" else str
    grouped = b.stream("in", key_type=key_type, value_type=value_type).group_by_key()
    w = grouped.windowed_by(windows)
    if on_close:
        w = w.emit_strategy(EmitStrategy.on_window_close())
    m = Materialized.as_(store)
    if op == "count":
        table: Any = w.count(materialized=m)
    elif op == "reduce":
        # concatenation sorted: the same whatever order the window's records came in
        table = w.reduce(lambda a, v: "".join(sorted(a + v)), materialized=m)
    else:
        table = w.aggregate(
            lambda: "", lambda k, v, a: "".join(sorted(a + v)), value_type=str, materialized=m
        )
    table.to_stream().to("out")
    return b.build()


def run(
    topo: Topology, batches: list[list[tuple[Any, Any, int]]]
) -> tuple[list[dict[tuple[Any, int, int], tuple[Any, int]]], list[list[Any]], float]:
    """Each batch's output as {(key, start, end): (value, timestamp)}, as lists of
    (start, end, value, timestamp), and the dropped records."""
    dicts, lists = [], []
    with TopologyTestDriver(topo, CONFIG, engine="local") as d:
        src, out = d.create_input_topic("in"), d.create_output_topic("out")
        for batch in batches:
            for k, v, t in batch:
                src.pipe_input(k, v, timestamp=t)
            got = out.read_records()
            lists.append(
                [(r.key.window.start, r.key.window.end, r.value, r.timestamp) for r in got]
            )
            dicts.append(
                {
                    (r.key.key, r.key.window.start, r.key.window.end): (r.value, r.timestamp)
                    for r in got
                }
            )
        dropped = d.metrics().by_name().get("dropped-records-total", 0.0)
    return dicts, lists, dropped


def one_by_one(records: list[tuple[Any, Any, int]]) -> list[list[tuple[Any, Any, int]]]:
    return [[r] for r in records]


# -- Kafka Streams' scenarios -----------------------------------------------------------


def by_start(dicts: list[dict[Any, Any]]) -> dict[int, set[tuple[Any, int]]]:
    """Every value each window start was emitted with."""
    out: dict[int, set[tuple[Any, int]]] = {}
    for d in dicts:
        for (_, start, _), v in d.items():
            out.setdefault(start, set()).add(v)
    return out


SMALL = [("k", c, t) for c, t in zip("abcdefg", [10, 10, 14, 15, 20, 22, 30], strict=True)]


def test_each_record_makes_its_window_and_the_one_after_the_record_before() -> None:
    # KStreamSlidingWindowAggregateTest.testAggregateSmallInput: time difference 10,
    # grace 5, one key; a batch per record emits each update, as Kafka without a cache
    dicts, lists, dropped = run(topology(10, 5), one_by_one(SMALL))
    assert by_start(dicts) == {
        0: {("a", 10), ("ab", 10)},
        4: {("abc", 14)},
        5: {("abcd", 15)},
        10: {("abcde", 20)},
        11: {("c", 14), ("cd", 15), ("cde", 20)},
        12: {("cdef", 22)},
        15: {("d", 15), ("de", 20), ("def", 22)},
        16: {("e", 20), ("ef", 22)},
        20: {("efg", 30)},
        21: {("f", 22), ("fg", 30)},
        23: {("g", 30)},
    }
    # c at 14: the right window of the records at 10 first, then c's own window
    assert lists[2] == [(11, 21, "c", 14), (4, 14, "abc", 14)]
    assert dropped == 0


def test_on_window_close_emits_each_window_once_with_its_final_value() -> None:
    # testAggregateSmallInput with the emit-final strategy: a window is emitted once
    # stream time minus grace passes its end
    dicts, _, _ = run(topology(10, 5, on_close=True), one_by_one(SMALL))
    assert by_start(dicts) == {
        0: {("ab", 10)},
        4: {("abc", 14)},
        5: {("abcd", 15)},
        10: {("abcde", 20)},
        11: {("cde", 20)},
        12: {("cdef", 22)},
    }
    assert sum(len(d) for d in dicts) == 6  # each once
    # g at 30 closes the windows ending before 25, in the batch of g
    assert set(dicts[-1]) == {("k", 10, 20), ("k", 11, 21), ("k", 12, 22)}


EARLY = [("k", c, t) for c, t in zip("abcdefg", [0, 5, 6, 3, 13, 10, 70], strict=True)]


def test_records_before_the_time_difference_share_the_window_from_zero() -> None:
    # testEarlyRecordsSmallInput: time difference 50, no grace; a window cannot start
    # before 0, so every record before 50 goes into [0, 50]
    dicts, _, dropped = run(topology(50, 0), one_by_one(EARLY))
    assert by_start(dicts) == {
        0: {("a", 0), ("ab", 5), ("abc", 6), ("abcd", 6), ("abcde", 13), ("abcdef", 13)},
        1: {("b", 5), ("bc", 6), ("bcd", 6), ("bcde", 13), ("bcdef", 13)},
        4: {("bc", 6), ("bce", 13), ("bcef", 13)},
        6: {("c", 6), ("ce", 13), ("cef", 13)},
        7: {("e", 13), ("ef", 13)},
        11: {("e", 13)},
        20: {("g", 70)},
    }
    assert dropped == 0
    dicts, _, _ = run(topology(50, 0, on_close=True), one_by_one(EARLY))
    assert by_start(dicts) == {
        0: {("abcdef", 13)},
        1: {("bcdef", 13)},
        4: {("bcef", 13)},
        6: {("cef", 13)},
        7: {("ef", 13)},
        11: {("e", 13)},
    }


def test_a_late_record_misses_the_closed_windows_and_each_is_counted() -> None:
    # shouldLogAndMeterWhenSkippingExpiredWindowByGrace: time difference 10, grace 90;
    # stream time 200 closes windows that end before 110
    records = [("k", "A", 200)] + [("k", c, 100 + i) for i, c in enumerate("abcdef")]
    records += [("k", "z", 15), ("k", "B", 300), ("k", "C", 400)]
    dicts, _, dropped = run(topology(10, 90), one_by_one(records))
    # each record at 100..105 misses its own window [t - 10, t], which has closed, and
    # z (15 + 10 < 110) is dropped whole: seven, as Kafka Streams counts them; and no
    # window holds the records at 100..105 (each record's right window comes from a
    # window that holds it, and none does)
    assert dropped == 7
    assert [d for d in dicts if d] == [
        {("k", 190, 200): ("A", 200)},
        {("k", 290, 300): ("B", 300)},
        {("k", 390, 400): ("C", 400)},
    ]
    dicts, _, dropped = run(topology(10, 90, on_close=True), one_by_one(records))
    assert dropped == 7
    assert [d for d in dicts if d] == [
        {("k", 190, 200): ("A", 200)},
        {("k", 290, 300): ("B", 300)},
    ]


def test_shuffled_records_give_the_windows_of_their_times() -> None:
    # testAggregateRandomInput: whatever the order (grace 100 takes them all), each window
    # holds the records in its range
    times = [10, 15, 16, 18, 30, 40, 55, 56, 58, 58, 62, 63, 63, 63, 76, 77, 80, 2, 3, 5, 8]
    letters = "ABCDEFGHIJKLMNOPQRSTU"
    import random

    rng = random.Random(7)
    records = [("A", c, t) for c, t in zip(letters, times, strict=True)]
    rng.shuffle(records)
    dicts, _, _ = run(topology(10, 100), one_by_one([*records, ("A", "V", 181)]))
    final: dict[int, Any] = {}
    for d in dicts:
        for (_, start, _), v in d.items():
            final[start] = v
    assert final[0] == ("ARSTU", 10)
    assert final[5] == ("ABTU", 15)
    assert final[53] == ("GHIJKLMN", 63)
    assert final[70] == ("OPQ", 80)
    assert final[171] == ("V", 181)
    assert len(final) == 28


def test_null_keys_and_values_are_dropped_and_counted() -> None:
    _, lists, dropped = run(topology(10, 0), [[(None, "a", 5), ("k", None, 6), ("k", "b", 7)]])
    assert lists == [[(0, 10, "b", 7)]]
    assert dropped == 2


# -- against the model, on random micro-batch splits -------------------------------------


@settings(max_examples=int(os.environ.get("SLIDING_EXAMPLES", "40")), deadline=None)
@given(
    records=st.lists(
        st.tuples(
            st.sampled_from(["a", "b"]),
            st.sampled_from(["p", "q", "r", "s"]),
            st.integers(0, 60),
        ),
        min_size=1,
        max_size=14,
    ),
    cuts=st.lists(st.integers(1, 13), max_size=4),
    size=st.sampled_from([3, 10]),
    grace=st.sampled_from([0, 4, 100]),
    on_close=st.booleans(),
    op=st.sampled_from(["count", "reduce", "aggregate"]),
)
def test_sliding_windows_against_the_model(
    records: list[tuple[str, Any, int]],
    cuts: list[int],
    size: int,
    grace: int,
    on_close: bool,
    op: str,
) -> None:
    if op == "count":
        records = [(k, ord(v), t) for k, v, t in records]
    bounds = sorted({c for c in cuts if c < len(records)})
    batches = [records[i:j] for i, j in zip([0, *bounds], [*bounds, len(records)], strict=True)]
    model = SlidingModel(size, grace, len if op == "count" else sorted_concat, on_close=on_close)
    want = [model.batch(list(b)) for b in batches]
    assume(not model.ambiguous)
    got, _, dropped = run(topology(size, grace, op, on_close=on_close), batches)
    assert got == want
    assert dropped == sum(model.dropped.values())


# -- EmitStrategy on time windows ------------------------------------------------------


def test_on_window_close_over_tumbling_windows_is_the_fused_suppression() -> None:
    def tumbling(on_close: bool) -> Topology:
        b = StreamsBuilder()
        w = (
            b.stream("in", key_type=str, value_type=str)
            .group_by_key()
            .windowed_by(TimeWindows.of_size_and_grace(10 * MS, 2 * MS))
        )
        if on_close:
            w = w.emit_strategy(EmitStrategy.on_window_close())
            w.count().to_stream().to("out")
        else:
            w.count().suppress(Suppressed.until_window_closes()).to_stream().to("out")
        return b.build()

    records = [("k", "a", 1), ("k", "b", 9), ("j", "c", 12), ("k", "d", 11), ("k", "e", 25)]
    batches = [records[:2], records[2:4], records[4:]]
    got, lists, _ = run(tumbling(True), batches)
    _, want_lists, _ = run(tumbling(False), batches)
    assert lists == want_lists
    # a window [start, end) closes once stream time minus grace reaches its end
    assert got == [{}, {("k", 0, 10): (2, 9)}, {("j", 10, 20): (1, 12), ("k", 10, 20): (1, 11)}]


def test_emit_strategy_is_only_for_time_and_sliding_windows() -> None:
    b = StreamsBuilder()
    s = b.stream("in", key_type=str, value_type=str).group_by_key()
    with pytest.raises(InvalidArgumentError):
        s.windowed_by(TimeWindows.of_size_with_no_grace(MS)).emit_strategy("close")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        SlidingWindows.of_time_difference_without_a_grace(timedelta(0))
    with pytest.raises(InvalidArgumentError):
        SlidingWindows.of_time_difference_and_grace(MS, -MS)


# -- the plan, the spec and describe() --------------------------------------------------


def test_describe_names_sliding_windows_and_the_emit_strategy() -> None:
    text = topology(10, 5, on_close=True).describe()
    assert "sliding windows of 10 ms, grace 5 ms; emits on window close" in text


def test_the_spec_carries_sliding_and_suppress() -> None:
    cfg = StreamsConfig(application_id="sliding", num_partitions=1, data_dir="/tmp/sliding")
    out = compile_topology(bind_topology(topology(10, 5, "count", on_close=True), cfg), cfg)
    (spec,) = [s.spec for s in out.stages() if isinstance(s, stages.Stateful)]
    assert isinstance(spec, AggregateSpec)
    assert (spec.sliding, spec.suppress, spec.window_size_ms, spec.grace_ms) == (True, True, 10, 5)
    with pytest.raises(SpecError):
        AggregateSpec(**{**spec.__dict__, "window_size_ms": 0, "window_advance_ms": 0})


def test_suppress_takes_a_sliding_windowed_table() -> None:
    b = StreamsBuilder()
    t = (
        b.stream("in", key_type=str, value_type=str)
        .group_by_key()
        .windowed_by(SlidingWindows.of_time_difference_without_a_grace(10 * MS))
        .count()
    )
    t.suppress(Suppressed.until_window_closes()).to_stream().to("out")
    b.build()
    with pytest.raises(InvalidTopologyError):
        b2 = StreamsBuilder()
        b2.stream("in", key_type=str, value_type=str).group_by_key().count().suppress(
            Suppressed.until_window_closes()
        )


# -- the key corpus and extreme timestamps -----------------------------------------------


@pytest.mark.parametrize(
    "key",
    [b"", b"x" * (1 << 20), b"\xff\xfe\x00bad", b"\xc3\x28"],
    ids=["empty", "1MiB", "non-utf8", "invalid-utf8"],
)
def test_keys_of_the_corpus(key: bytes) -> None:
    records = [(key, "a", 0), (key, "b", 5), (key, "c", 2**62), (key, "d", 2**62 + 3)]
    _, lists, dropped = run(topology(10, 0, key_type=bytes), one_by_one(records))
    assert lists == [
        [(0, 10, "a", 0)],
        [(1, 11, "b", 5), (0, 10, "ab", 5)],
        [(2**62 - 10, 2**62, "c", 2**62)],
        [(2**62 + 1, 2**62 + 11, "d", 2**62 + 3), (2**62 - 7, 2**62 + 3, "cd", 2**62 + 3)],
    ]
    assert dropped == 0


def test_the_store_fetches_a_keys_windows() -> None:
    with TopologyTestDriver(topology(10, 5, "count"), CONFIG, engine="local") as d:
        src = d.create_input_topic("in")
        for t in (10, 15, 20):
            src.pipe_input("k", 1, timestamp=t)
        d.create_output_topic("out").read_records()
        store = d.get_window_store("windows")
        assert store.fetch("k", 0, 100) == [(0, 1), (5, 2), (10, 3), (11, 2), (16, 1)]
        assert store.fetch("k", 6, 11) == [(10, 3), (11, 2)]
        assert store.fetch("nobody", 0, 100) == []


# -- Materialized.with_retention: closed windows stay queryable ------------------------


def tumbling_counts(retention: int | None, on_close: bool = False) -> Topology:
    b = StreamsBuilder()
    w = (
        b.stream("in", key_type=str, value_type=int)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(10 * MS))
    )
    if on_close:
        w = w.emit_strategy(EmitStrategy.on_window_close())
    m = Materialized.as_("counts")
    if retention is not None:
        m = m.with_retention(retention * MS)
    w.count(materialized=m).to_stream().to("out")
    return b.build()


def test_closed_windows_stay_in_the_store_for_its_retention() -> None:
    for on_close in (False, True):
        with TopologyTestDriver(tumbling_counts(50, on_close), CONFIG, engine="local") as d:
            src, out = d.create_input_topic("in"), d.create_output_topic("out")
            emitted = []
            for t in (1, 5, 12, 25, 48):
                src.pipe_input("k", 1, timestamp=t)
                emitted += [(r.key.window.start, r.value) for r in out.read_records()]
            # at stream time 48, windows starting after -2 are kept: all of them
            assert d.get_window_store("counts").fetch("k", 0, 100) == [
                (0, 2),
                (10, 1),
                (20, 1),
                (40, 1),
            ]
            src.pipe_input("k", 1, timestamp=61)
            emitted += [(r.key.window.start, r.value) for r in out.read_records()]
            # at 61, a window stays while its start is after 11
            assert d.get_window_store("counts").fetch("k", 0, 100) == [(20, 1), (40, 1), (60, 1)]
            if on_close:  # each closed window once, never again from the store
                assert emitted == [(0, 2), (10, 1), (20, 1), (40, 1)]
            # a late record is still dropped: its window has closed, whatever the store keeps
            src.pipe_input("k", 1, timestamp=45)
            out.read_records()
            assert d.get_window_store("counts").fetch("k", 40, 40) == [(40, 1)]
    with TopologyTestDriver(tumbling_counts(None), CONFIG, engine="local") as d:
        src = d.create_input_topic("in")
        for t in (1, 5, 12):
            src.pipe_input("k", 1, timestamp=t)
        d.create_output_topic("out").read_records()
        assert d.get_window_store("counts").fetch("k", 0, 100) == [(10, 1)]


def test_sliding_windows_stay_for_the_retention() -> None:
    b = StreamsBuilder()
    (
        b.stream("in", key_type=str, value_type=int)
        .group_by_key()
        .windowed_by(SlidingWindows.of_time_difference_without_a_grace(10 * MS))
        .count(materialized=Materialized.as_("s").with_retention(100 * MS))
        .to_stream()
        .to("out")
    )
    with TopologyTestDriver(b.build(), CONFIG, engine="local") as d:
        src = d.create_input_topic("in")
        for t in (10, 15, 90):
            src.pipe_input("k", 1, timestamp=t)
        d.create_output_topic("out").read_records()
        assert d.get_window_store("s").fetch("k", 0, 100) == [(0, 1), (5, 2), (11, 1), (80, 1)]


def test_a_retention_needs_windows_and_covers_them() -> None:
    b = StreamsBuilder()
    s = b.stream("in", key_type=str, value_type=int).group_by_key()
    with pytest.raises(InvalidTopologyError):
        s.windowed_by(TimeWindows.of_size_and_grace(10 * MS, 5 * MS)).count(
            materialized=Materialized.as_("a").with_retention(14 * MS)
        )
    with pytest.raises(InvalidTopologyError):
        s.windowed_by(SlidingWindows.of_time_difference_and_grace(10 * MS, 5 * MS)).count(
            materialized=Materialized.as_("b").with_retention(24 * MS)
        )
    with pytest.raises(InvalidTopologyError):
        s.count(materialized=Materialized.as_("c").with_retention(24 * MS))
    with pytest.raises(InvalidArgumentError):
        Materialized.as_("d").with_retention(timedelta(0))


# -- restarts: the windows and their time index rebuilt from the durable state ---------


def sliding_spec(size: int, grace: int, on_close: bool) -> AggregateSpec:
    s = PrimSpec(spark="string")
    return AggregateSpec(
        processor="KSTREAM-AGGREGATE",
        store="sliding",
        op="aggregate",
        initializer=lambda: "",
        aggregator=lambda k, v, a: "".join(sorted(a + v)),
        input=KeyValue(key=s, value=s),
        output=KeyValue(key=s, value=s),
        window_size_ms=size,
        window_advance_ms=size,
        grace_ms=grace,
        sliding=True,
        suppress=on_close,
        output_schema=env.envelope_json(
            {
                "type": "struct",
                "fields": [
                    {"name": "key", "type": "string", "nullable": True, "metadata": {}},
                    {
                        "name": "window",
                        "type": {
                            "type": "struct",
                            "fields": [
                                {"name": n, "type": "long", "nullable": True, "metadata": {}}
                                for n in ("start", "end")
                            ],
                        },
                        "nullable": True,
                        "metadata": {},
                    },
                ],
            },
            "string",
        ),
        packed=Packed(),
        state=StateOptions(check_log=True),
    )


@settings(max_examples=25, deadline=None)
@given(
    records=st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.sampled_from("pqrs"), st.integers(0, 60)),
        min_size=1,
        max_size=12,
    ),
    cuts=st.lists(st.integers(1, 11), max_size=3),
    on_close=st.booleans(),
)
def test_a_restart_between_batches_changes_nothing(
    tmp_path_factory: pytest.TempPathFactory,
    records: list[tuple[str, str, int]],
    cuts: list[int],
    on_close: bool,
) -> None:
    bounds = sorted({c for c in cuts if c < len(records)})
    batches = [records[i:j] for i, j in zip([0, *bounds], [*bounds, len(records)], strict=True)]
    outs = []
    with pytest.MonkeyPatch.context() as mp:
        for restart in (False, True):
            tmp = tmp_path_factory.mktemp("sliding")
            spec = sliding_spec(10, 4, on_close)
            r = Runner(lambda spec=spec: AggregateProcessor(spec), tmp, mp)
            got = []
            seq = itertools.count()
            for b in batches:
                got.append(r.run([(next(seq), (0, k, v, t)) for k, v, t in b]))
                if restart:
                    r.restart()
            close_local_stores()
            outs.append(got)
    assert outs[0] == outs[1]
