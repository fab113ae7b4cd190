"""Sliding windows and the emit-on-close strategy on Spark: the same answers as the
in-process engine (whose model tests are tests/unit/test_sliding_windows.py), across
micro-batches and tasks, and the window store read from the checkpoint."""

from __future__ import annotations

import uuid
from datetime import timedelta
from typing import Any

import pytest

from kspark import EmitStrategy, Materialized, SlidingWindows, StreamsBuilder, StreamsConfig
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark

MS = timedelta(milliseconds=1)

BATCHES = [
    [("a", 1, 10), ("b", 1, 12), ("a", 1, 15)],
    [("a", 1, 20), ("b", 1, 30), ("a", 1, 12)],
    [("a", 1, 60), ("b", 1, 61)],
]


def topology(on_close: bool) -> Any:
    b = StreamsBuilder()
    w = (
        b.stream("in", key_type=str, value_type=int)
        .group_by_key()
        .windowed_by(SlidingWindows.of_time_difference_and_grace(10 * MS, 5 * MS))
    )
    if on_close:
        w = w.emit_strategy(EmitStrategy.on_window_close())
    w.count(materialized=Materialized.as_("sliding")).to_stream().to("out")
    return b.build()


def run(spark: Any | None, on_close: bool) -> tuple[list[Any], list[Any]]:
    cfg = StreamsConfig(application_id=f"sl-{uuid.uuid4().hex[:8]}", num_partitions=2)
    engine = "spark" if spark is not None else "local"
    outs = []
    with TopologyTestDriver(topology(on_close), cfg, session=spark, engine=engine) as d:
        src, sink = d.create_input_topic("in"), d.create_output_topic("out")
        for batch in BATCHES:
            for k, v, t in batch:
                src.pipe_input(k, v, timestamp=t)
            d.process()
            outs.append(
                sorted(
                    (r.key.key, r.key.window.start, r.key.window.end, r.value, r.timestamp)
                    for r in sink.read_records()
                )
            )
        store = d.get_window_store("sliding")
        fetched = [store.fetch(k, 0, 100) for k in ("a", "b")]
    return outs, fetched


def test_sliding_windows_on_spark_match_the_in_process_engine(spark: Any) -> None:
    for on_close in (False, True):
        got = run(spark, on_close)
        assert got == run(None, on_close)
    outs, fetched = run(spark, False)
    # the out-of-order record at 12 joins [5, 15] and makes the window after it,
    # [13, 23]; its own window [2, 12] had closed (12 < 20 - 5)
    assert ("a", 5, 15, 3, 15) in outs[1] and ("a", 13, 23, 2, 20) in outs[1]
    assert not any(w[:3] == ("a", 2, 12) for w in outs[1])
    assert fetched[0][-1] == (50, 1)  # a's window [50, 60]
