"""Dynamic keys and values (no declared type) through an app's internal topics on Spark: each operator's output crosses its topic
as the JSON text it travels as between stages, and the next operator reads back the same
Python values, of the same types, across micro-batches and restarts of the query
(docs/design/sub-topologies.md)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from support.dynamicvalues import SHAPES, same

from kspark import StreamsBuilder, StreamsConfig
from kspark.plan.topology import Topology
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark

HOUR = timedelta(hours=1)


def dynamic_chains() -> Topology:
    """Two chains of two deduplications, each one's output read by the next through an
    internal topic: dynamic keys and values of every shape (the first's values are the
    second's keys), and declared bytes values under dynamic keys."""
    b = StreamsBuilder()
    firsts = b.stream("in").deduplicate_by_key(HOUR)  # nothing declares a type
    firsts.map(lambda k, v: (v, [k, v])).deduplicate_by_key(HOUR).to("out")
    blobs = b.stream("blobs", value_type=bytes).deduplicate_by_key(HOUR)
    blobs.deduplicate_by_key(HOUR).to("blobs-out")
    return b.build()


BLOBS: list[tuple[Any, bytes | None]] = [
    ({"id": 1}, b""),
    ([2, "two"], bytes(range(256)) * 4096),  # 1 MiB
    ("three", b"\xff\xfe\x80\x00"),  # not UTF-8
    (None, b"\xc3\x28"),
    (4, None),
]


def test_dynamic_records_of_every_shape_cross_internal_topics(spark: Any, app_id: str) -> None:
    cfg = StreamsConfig(application_id=app_id, num_partitions=2)
    half = len(SHAPES) // 2
    with TopologyTestDriver(dynamic_chains(), cfg, session=spark) as d:
        events = d.create_input_topic("in")
        blobs = d.create_input_topic("blobs", value_type=bytes)
        for n, value in enumerate(SHAPES[:half]):
            events.pipe_input(n, value, timestamp=n)
        for key, blob in BLOBS[:2]:
            blobs.pipe_input(key, blob, timestamp=0)
        d.process()  # each process() runs the query again from its checkpoint
        for n, value in enumerate(SHAPES[half:], start=half):
            events.pipe_input(n, value, timestamp=n)
        # duplicates of records before the restart: of a key at the first operator, and
        # at the second of a value (now its key) whose dict has another order
        events.pipe_input(0, "a duplicate of key 0", timestamp=100)
        events.pipe_input(
            100, {"é": {"": False}, "a": [1, {"c": [2.5, "d"], "b": None}]}, timestamp=101
        )
        for key, blob in BLOBS[2:]:
            blobs.pipe_input(key, blob, timestamp=0)
        blobs.pipe_input({"id": 1}, b"a duplicate", timestamp=1)
        d.process()
        out = sorted(d.create_output_topic("out").read_key_values(), key=lambda kv: kv[1][0])
        got_blobs = d.create_output_topic("blobs-out", value_type=bytes).read_key_values()
        metrics = d.metrics().by_name()
    # the records of the app's own topics, as the in-process engine counts them: not
    # those that crossed its internal topics too
    assert metrics["records-consumed-total"] == len(SHAPES) + 2 + len(BLOBS) + 1
    assert metrics["records-produced-total"] == len(SHAPES) + len(BLOBS)
    assert metrics["duplicates-dropped-total"] == 3

    want = [(v, [n, v]) for n, v in enumerate(SHAPES)]
    assert len(out) == len(want)
    for (wk, wv), (gk, gv) in zip(want, out, strict=True):
        assert same(wk, gk) and same(wv, gv), (str(wk)[:80], str(gk)[:80], str(gv)[:80])
    assert sorted(got_blobs, key=repr) == sorted(BLOBS, key=repr)
    for key, blob in got_blobs:
        assert same(key, next(k for k, v in BLOBS if v == blob))
