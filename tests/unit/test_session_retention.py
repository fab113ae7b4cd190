"""Session stores as Kafka Streams' ``SessionStore``: ``Materialized.with_retention`` keeps
closed sessions queryable (``fetch``, ``find_sessions``, ``fetch_session``) until stream
time passes their end plus the retention, run in process by the test driver; against the
reference model (tests/support/sessionmodel.py) on random micro-batch splits and
restarts."""

from __future__ import annotations

import itertools
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.sessionmodel import session_model

from kspark import Materialized, SessionWindows, StreamsApp, StreamsBuilder, StreamsConfig
from kspark.errors import InvalidTopologyError, StoreError
from kspark.plan.topology import Topology
from kspark.testing import TopologyTestDriver

MS = timedelta(milliseconds=1)
CONFIG = StreamsConfig(application_id="sessions", num_partitions=1)
MIB = 1 << 20


def sessions(
    retention: int | None, *, gap: int = 10, grace: int = 0, key_type: Any = str
) -> Topology:
    b = StreamsBuilder()
    m = Materialized.as_("sessions")
    if retention is not None:
        m = m.with_retention(retention * MS)
    (
        b.stream("in", key_type=key_type, value_type=int)
        .group_by_key()
        .windowed_by(SessionWindows.of_inactivity_gap_and_grace(gap * MS, grace * MS))
        .count(materialized=m)
        .to_stream()
        .to("out")
    )
    return b.build()


def emitted(out: Any) -> list[tuple[Any, int, int, Any]]:
    return [(r.key.key, r.key.window.start, r.key.window.end, r.value) for r in out.read_records()]


def test_closed_sessions_stay_in_the_store_for_its_retention() -> None:
    with TopologyTestDriver(sessions(50), CONFIG, engine="local") as d:
        src, out = d.create_input_topic("in"), d.create_output_topic("out")
        for t in (0, 5, 30):
            src.pipe_input("k", 1, timestamp=t)
            d.process()
        store = d.get_session_store("sessions")
        # [0, 5] closed at stream time 15 (gap 10, no grace): kept, but takes no record
        assert store.fetch("k") == [(0, 5, 2), (30, 30, 1)]
        assert store.backward_fetch("k") == [(30, 30, 1), (0, 5, 2)]
        assert store.find_sessions("k", 5, 29) == [(0, 5, 2)]
        assert store.find_sessions("k", 6, 30) == [(30, 30, 1)]
        assert store.find_sessions("k", 0, 100) == [(0, 5, 2), (30, 30, 1)]
        assert store.backward_find_sessions("k", 0, 100) == [(30, 30, 1), (0, 5, 2)]
        assert store.find_sessions("k", 6, 29) == []
        assert store.fetch_session("k", 0, 5) == 2
        assert store.fetch_session("k", 0, 4) is None
        assert store.fetch("nobody") == []
        src.pipe_input("k", 1, timestamp=8)  # late: its session would end before 30
        assert emitted(out) == [("k", 0, 0, 1), ("k", 0, 0, None), ("k", 0, 5, 2), ("k", 30, 30, 1)]
        assert d.get_session_store("sessions").fetch("k") == [(0, 5, 2), (30, 30, 1)]
        assert d.metrics().dropped_records_total == {("KSTREAM-AGGREGATE-0000000001", "0_0"): 1}
        # another key moves stream time: [0, 5] stays while its end is after stream time
        # minus the retention (Kafka Streams' session store), whatever key it belongs to
        fetch = lambda k: d.get_session_store("sessions").fetch(k)  # noqa: E731
        src.pipe_input("other", 1, timestamp=54)
        assert fetch("k") == [(0, 5, 2), (30, 30, 1)]
        src.pipe_input("other", 1, timestamp=55)
        assert fetch("k") == [(30, 30, 1)]
        assert d.get_session_store("sessions").fetch_session("k", 0, 5) is None
        src.pipe_input("other", 1, timestamp=79)
        assert fetch("k") == [(30, 30, 1)]
        src.pipe_input("other", 1, timestamp=80)
        assert fetch("k") == []
        assert fetch("other") == [(54, 55, 2), (79, 80, 2)]


def test_a_record_between_a_closed_and_an_open_session_merges_with_the_open_one_only() -> None:
    """Kafka Streams' processor searches its store, so with a longer retention it would
    merge the closed session too ([0, 20] -> 3); kspark's results do not depend on the
    retention: the record merges with the sessions that can still take records."""
    got = []
    for retention in (None, 100):
        with TopologyTestDriver(sessions(retention), CONFIG, engine="local") as d:
            src, out = d.create_input_topic("in"), d.create_output_topic("out")
            for t in (0, 20, 10):
                src.pipe_input("k", 1, timestamp=t)
                d.process()
            got.append((emitted(out), d.get_session_store("sessions").fetch("k")))
    changes = [("k", 0, 0, 1), ("k", 20, 20, 1), ("k", 20, 20, None), ("k", 10, 20, 2)]
    assert got == [(changes, [(10, 20, 2)]), (changes, [(0, 0, 1), (10, 20, 2)])]


def test_without_a_retention_a_closed_session_leaves_the_store_whichever_key_moves_time() -> None:
    with TopologyTestDriver(sessions(None, grace=10), CONFIG, engine="local") as d:
        src = d.create_input_topic("in")
        for k, t in (("k", 0), ("k", 15), ("other", 30), ("other", 31)):
            src.pipe_input(k, 1, timestamp=t)
            d.process()
        # at 31, [0, 0] can take no record (it ended more than gap plus grace ago)
        assert d.get_session_store("sessions").fetch("k") == [(15, 15, 1)]


def test_the_retention_survives_a_restart_and_a_new_app() -> None:
    with TopologyTestDriver(sessions(60), CONFIG, engine="local") as d:
        src = d.create_input_topic("in")
        src.pipe_records([("j", 1, 0), ("k", 1, 0), ("k", 1, 4)])
        d.process()
        assert d._local is not None
        d._local.restart()  # new executors: the local stores rebuild from the durable state
        src.pipe_records([("k", 1, 40)])
        d.process()
        d.app = StreamsApp(d.topology, d.config)
        store = d.get_session_store("sessions")
        assert store.fetch("k") == [(0, 4, 2), (40, 40, 1)]
        assert store.fetch("j") == [(0, 0, 1)]
        d._local.restart()
        src.pipe_records([("x", 1, 63)])  # [0, 0] ended 63 ms before: gone; [0, 4] stays
        d.process()
        store = d.get_session_store("sessions")
        assert store.fetch("j") == []
        assert store.fetch("k") == [(0, 4, 2), (40, 40, 1)]


def test_awkward_keys_keep_their_sessions() -> None:
    str_keys = ["", "ключ-ü-€-😀", "m" * MIB]
    bytes_keys = [b"", b"\xff\xfe\x80\xc3(", b"\x00\xff" * (MIB // 2)]
    for key_type, keys in ((str, str_keys), (bytes, bytes_keys)):
        with TopologyTestDriver(
            sessions(100, grace=5, key_type=key_type), CONFIG, engine="local"
        ) as d:
            src = d.create_input_topic("in")
            for k in keys:
                src.pipe_records([(k, 1, 0), (k, 1, 3), (None, 1, 3)])
            src.pipe_input(keys[0], 1, timestamp=50)  # closes every [0, 3]
            d.process()
            store = d.get_session_store("sessions")
            for k in keys:
                assert store.fetch(k)[0] == (0, 3, 2), k[:8]
                assert store.fetch_session(k, 0, 3) == 2
            assert store.fetch(keys[1] + keys[1][:1]) == []
            dropped = d.metrics().dropped_records_total
            assert dropped == {("KSTREAM-AGGREGATE-0000000001", "0_0"): 3}  # the null keys
            with pytest.raises(StoreError, match="None key"):
                store.fetch(None)


def test_find_sessions_takes_those_that_overlap_the_range_of_exactly_the_key() -> None:
    """Kafka Streams' session store scenarios (finding sessions in a range, exact keys
    that prefix one another, string or binary, an exact session or none)."""
    spans = [(10, 10), (500, 1000), (1500, 2000), (2500, 3000)]
    times = sorted({t for s, e in spans for t in range(s, e + 1, 100)})
    for key_type, keys in ((str, ["a", "aa", "aaa"]), (bytes, [b"\x00", b"\x00" * 2, b"\x00" * 3])):
        topology = sessions(None, gap=100, grace=5_000, key_type=key_type)
        with TopologyTestDriver(topology, CONFIG, engine="local") as d:
            src = d.create_input_topic("in")
            for j, k in enumerate(keys):
                src.pipe_records([(k, 1, t) for t in times if t >= 500 * j])
            d.process()
            store = d.get_session_store("sessions")
            a, aa, _ = keys
            assert store.find_sessions(a, 0, 1000) == [(10, 10, 1), (500, 1000, 6)]
            assert store.find_sessions(a, 400, 600) == [(500, 1000, 6)]
            assert store.find_sessions(a, 3001, 10_000) == []
            assert store.fetch(aa) == [(500, 1000, 6), (1500, 2000, 6), (2500, 3000, 6)]
            assert store.find_sessions(aa, 0, 1000) == [(500, 1000, 6)]
            assert store.fetch_session(aa, 500, 1000) == 6
            assert store.fetch_session(aa, 10, 10) is None
            assert store.fetch_session("any key" if key_type is str else b"?", 0, 5) is None


def test_a_retention_shorter_than_gap_plus_grace_is_refused() -> None:
    with pytest.raises(InvalidTopologyError, match=r"'sessions'.*at least 15 ms.*gap plus grace"):
        sessions(14, gap=10, grace=5)
    sessions(15, gap=10, grace=5)
    b = StreamsBuilder()
    a = b.stream("a", key_type=str, value_type=int).group_by_key()
    c = b.stream("c", key_type=str, value_type=int).group_by_key()
    cogrouped = (
        a.cogroup(lambda k, v, agg: agg + v)
        .cogroup(c, lambda k, v, agg: agg + 10 * v)
        .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(10 * MS))
    )
    with pytest.raises(InvalidTopologyError, match="at least 10 ms"):
        cogrouped.aggregate(
            lambda: 0,
            lambda k, x, y: x + y,
            materialized=Materialized.as_("both").with_retention(9 * MS),
        )


def test_cogrouped_sessions_stay_for_the_retention() -> None:
    b = StreamsBuilder()
    a = b.stream("a", key_type=str, value_type=int).group_by_key()
    c = b.stream("c", key_type=str, value_type=int).group_by_key()
    (
        a.cogroup(lambda k, v, agg: agg + v)
        .cogroup(c, lambda k, v, agg: agg + 10 * v)
        .windowed_by(SessionWindows.of_inactivity_gap_with_no_grace(10 * MS))
        .aggregate(
            lambda: 0,
            lambda k, x, y: x + y,
            materialized=Materialized.as_("both").with_retention(100 * MS),
            value_type=int,
        )
        .to_stream()
        .to("out")
    )
    with TopologyTestDriver(b.build(), CONFIG, engine="local") as d:
        d.create_input_topic("a").pipe_records([("k", 1, 0), ("k", 2, 50)])
        d.create_input_topic("c").pipe_records([("k", 3, 5)])
        d.process()
        store = d.get_session_store("both")
        assert store.fetch("k") == [(0, 5, 31), (50, 50, 2)]
        d.create_input_topic("a").pipe_records([("z", 1, 105)])
        d.process()
        assert d.get_session_store("both").fetch("k") == [(50, 50, 2)]


@settings(max_examples=20, deadline=None, derandomize=True)
@given(
    records=st.lists(
        st.tuples(st.sampled_from(["a", "b", None]), st.integers(0, 3), st.integers(0, 80)),
        min_size=1,
        max_size=14,
    ),
    cuts=st.lists(st.integers(1, 13), max_size=3, unique=True),
    restarts=st.lists(st.integers(1, 3), max_size=2),
    retention=st.sampled_from([0, 20, 45]),
    grace=st.sampled_from([0, 6]),
)
def test_the_store_and_the_changes_are_the_models_whatever_the_split(
    records: list[tuple[Any, int, int]],
    cuts: list[int],
    restarts: list[int],
    retention: int,
    grace: int,
) -> None:
    gap = 8
    retention = retention and max(retention, gap + grace)
    bounds = [0, *sorted(c for c in cuts if c < len(records)), len(records)]
    batches = [records[x:y] for x, y in itertools.pairwise(bounds) if y > x]
    want, _, want_stores = session_model("count", batches, gap, grace, retention)
    topology = sessions(retention or None, gap=gap, grace=grace)
    with TopologyTestDriver(topology, CONFIG, engine="local") as d:
        src, out = d.create_input_topic("in"), d.create_output_topic("out")
        for i, batch in enumerate(batches):
            if i in restarts and d._local is not None:
                d._local.restart()
            src.pipe_records(batch)
            d.process()
            got = [
                (r.key.key, r.key.window.start, r.key.window.end, r.value, r.timestamp)
                for r in out.read_records()
            ]
            assert got == [
                (
                    w["key"]["key"],
                    w["key"]["window"]["start"],
                    w["key"]["window"]["end"],
                    w["value"],
                    w["timestamp"],
                )
                for w in want[i] or []
            ]
            store = d.get_session_store("sessions")
            assert {k: store.fetch(k) for k in ("a", "b") if store.fetch(k)} == want_stores[i]
