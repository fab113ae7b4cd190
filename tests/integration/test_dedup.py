"""KIP-655 deduplication: the seed's examples, a property test against a reference model,
micro-batch splits and the self-purging store."""

from __future__ import annotations

import dataclasses
import itertools
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kspark import Deduplicated, StreamsBuilder, StreamsConfig, Topic
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark

S = 1000  # ms per second


def dedup_topology(interval_ms: int, mode: str = "by_key") -> Any:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("in", "/unused"), key_type=str, value_type=str)
    if mode == "by_key":
        d = s.deduplicate_by_key(timedelta(milliseconds=interval_ms), Deduplicated.as_("dedup"))
    elif mode == "by_key_value":
        d = s.deduplicate_by_key_value(
            lambda k, v: v.split("-")[0] or None, timedelta(milliseconds=interval_ms)
        )
    else:
        d = s.deduplicate(lambda k, v: v.split("-")[0] or None, timedelta(milliseconds=interval_ms))
    d.to(Topic.jsonl("out", "/unused"))
    return b.build()


def run(
    spark: Any,
    app_id: str,
    topo: Any,
    batches: list[list[tuple[str | None, str, int]]],
    partitions: int = 1,
) -> list[str]:
    cfg = StreamsConfig(application_id=app_id, num_partitions=partitions)
    out: list[str] = []
    with TopologyTestDriver(
        topo, cfg, session=spark, engine="spark" if spark is not None else "local"
    ) as d:
        src = d.create_input_topic("in", key_type=str, value_type=str)
        sink = d.create_output_topic("out", key_type=str, value_type=str)
        for batch in batches:
            for k, v, ts in batch:
                src.pipe_input(k, v, timestamp=ts)
            d.process()
        out = sink.read_values()
    return out


# (interval seconds, [(key, timestamp seconds, forwarded?)]) from the seed's sections
SEED_EXAMPLES = {
    "duplicate-sequence": (10, [("a", 100, True), ("a", 108, False), ("a", 111, True)]),
    "duplicate-sequence-out-of-order": (10, [("a", 100, True), ("a", 92, False), ("a", 89, True)]),
    "boundaries-inclusive": (10, [("a", 5, True), ("a", 15, False), ("a", 16, True)]),
    "boundaries-out-of-order": (10, [("a", 15, True), ("a", 5, False), ("a", 4, True)]),
    "interval-zero": (0, [("a", 5, True), ("a", 5, False), ("a", 6, True)]),
    "late-example-1": (10, [("k", 20, True), ("k", 25, False), ("k", 11, False), ("k", 9, True)]),
    "late-example-2": (10, [("k1", 10, True), ("k2", 20, True), ("k1", 9, False)]),
    "late-example-3": (10, [("k1", 10, True), ("k2", 21, True), ("k1", 9, True)]),
    "none-key-always-forwarded": (10, [(None, 1, True), (None, 1, True)]),
}


@pytest.mark.parametrize("name", sorted(SEED_EXAMPLES))
def test_seed_examples(spark: Any, app_id: str, name: str) -> None:
    interval, events = SEED_EXAMPLES[name]
    records = [(k, f"e{i}", ts * S) for i, (k, ts, _) in enumerate(events)]
    expected = [f"e{i}" for i, (_, _, fwd) in enumerate(events) if fwd]
    assert run(spark, app_id, dedup_topology(interval * S), [records]) == expected


def reference(records: list[tuple[Any, int]], interval: int) -> list[int]:
    """KIP-655 as a literal window store: entries (id, ts) purged when older than
    stream time - interval; a record is a duplicate if a stored entry of its id lies within
    the interval; forwarded records that are not late are stored."""
    store: list[tuple[Any, int]] = []
    stream_time: int | None = None
    forwarded = []
    for i, (ident, ts) in enumerate(records):
        stream_time = ts if stream_time is None else max(stream_time, ts)
        store = [(k, t) for k, t in store if t >= stream_time - interval]
        if ident is None:
            forwarded.append(i)
            continue
        if any(k == ident and abs(t - ts) <= interval for k, t in store):
            continue
        forwarded.append(i)
        if ts >= stream_time - interval:
            store.append((ident, ts))
    return forwarded


@settings(max_examples=50, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    data=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c", None]), st.integers(0, 40)),
        min_size=1,
        max_size=20,
    ),
    interval=st.integers(0, 12),
    cuts=st.lists(st.integers(1, 19), max_size=2, unique=True),
)
def test_property_against_reference_model(
    data: list[tuple[str | None, int]], interval: int, cuts: list[int]
) -> None:
    """In this process (the engines agree: tests/integration/test_driver_engines.py)."""
    records = [(k, f"e{i}", ts) for i, (k, ts) in enumerate(data)]
    bounds = [0, *sorted(c for c in cuts if c < len(records)), len(records)]
    batches = [records[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    import uuid

    got = run(None, f"prop-{uuid.uuid4().hex[:8]}", dedup_topology(interval), batches)
    assert got == [f"e{i}" for i in reference(data, interval)]


def test_by_key_value_and_global_dedup(spark: Any, app_id: str) -> None:
    records = [
        ("k1", "x-1", 1),
        ("k2", "x-2", 2),
        ("k1", "x-3", 3),
        ("k1", "-4", 4),
        ("k1", "-5", 5),
    ]
    # by (key, id): k2's x is not k1's x; a None id is always forwarded
    assert run(spark, app_id, dedup_topology(10, "by_key_value"), [records], partitions=2) == [
        "x-1",
        "x-2",
        "-4",
        "-5",
    ]
    # by id over all partitions: x is seen once whatever the key
    assert run(spark, app_id + "g", dedup_topology(10, "by_id"), [records], partitions=2) == [
        "x-1",
        "-4",
        "-5",
    ]


@pytest.mark.cluster
def test_store_purges_itself_and_counts_duplicates(spark: Any, app_id: str) -> None:
    cfg = StreamsConfig(application_id=app_id, num_partitions=1)
    with TopologyTestDriver(dedup_topology(10 * S), cfg, session=spark) as d:
        src = d.create_input_topic("in", key_type=str, value_type=str)
        for i in range(20):
            src.pipe_input(f"key-{i}", "v", timestamp=i * S)
        src.pipe_input("key-19", "dup", timestamp=19 * S)
        d.process()
        m = d.metrics()
        assert sum(m.duplicates_dropped.values()) == 1
        # stream time 19s, interval 10s: only keys with ts >= 9s remain
        assert sum(m.store_entries.values()) == 11
        src.pipe_input("late-comer", "v", timestamp=1000 * S)
        d.process()
        # keys that never appear again are purged as stream time moves on
        assert sum(d.metrics().store_entries.values()) == 1


@dataclasses.dataclass
class Inner:
    name: str | None
    flag: bool | None


@dataclasses.dataclass
class Payload:
    big: int | None
    ratio: float | None
    count: int | None
    raw: bytes | None
    inner: Inner | None


#: struct values whose fields are at the edges of what crosses the operator's Python worker
#: as flat columns: integers past 2**53 next to nulls, null doubles, null nested structs
#: and null fields in them, empty and non-UTF-8 bytes (NaN: tests/unit/test_structcols.py;
#: the JSON topics here do not carry it)
PAYLOADS = [
    Payload(2**62 + 1, -0.5, -(2**31), b"", Inner("a", True)),
    Payload(None, None, None, None, None),
    Payload(-(2**63), 1e300, 0, b"\xff\x00", Inner(None, None)),
    Payload(2**53 + 1, 0.1, 7, b"x", Inner("", False)),
]


def test_struct_values_leave_the_grouped_runner_exactly(spark: Any, app_id: str) -> None:
    """Deduplicated records with struct values reach the sink as the in-process engine
    gives them."""

    def go(session: Any) -> list[str]:
        b = StreamsBuilder()
        s = b.stream(Topic.jsonl("in", "/unused"), key_type=str, value_type=Payload)
        s.deduplicate_by_key(timedelta(seconds=5)).to(Topic.jsonl("out", "/unused"))
        cfg = StreamsConfig(application_id=app_id, num_partitions=2)
        engine = "spark" if session else "local"
        with TopologyTestDriver(b.build(), cfg, session=session, engine=engine) as d:
            src = d.create_input_topic("in", key_type=str, value_type=Payload)
            sink = d.create_output_topic("out", key_type=str, value_type=Payload)
            for i, p in enumerate(PAYLOADS):
                src.pipe_input(f"k{i}", p, timestamp=i)
                src.pipe_input(f"k{i}", p, timestamp=i + 1)  # a duplicate
            d.process()
            src.pipe_input("k0", PAYLOADS[1], timestamp=60_000)  # past the interval
            d.process()
            return sorted(repr(r) for r in sink.read_records())

    want = go(None)
    assert len(want) == len(PAYLOADS) + 1
    assert go(spark) == want
