"""Which sinks the ``foreachBatch`` writer leaves in the order they arrive (a stateful
operator's emission order) and which it sorts by source position, compiled with no
Spark (``SinkSpec.emitted_order``; the order itself: tests/integration/test_sink_order.py)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kspark import StreamsBuilder, StreamsConfig
from kspark.bindings import bind_topology
from kspark.compiler.compiler import compile_topology


def emitted(b: StreamsBuilder) -> list[bool]:
    cfg = StreamsConfig(application_id="order", data_dir="/data")
    out = compile_topology(bind_topology(b.build(), cfg), cfg)
    return [s.emitted_order for s in out.writer_spec.sinks]


def dedup(b: StreamsBuilder, topic: str = "in") -> Any:
    return b.stream(topic, key_type=str, value_type=int).deduplicate_by_key(timedelta(hours=1))


def test_deduplications_output_keeps_its_order() -> None:
    b = StreamsBuilder()
    dedup(b).to("out")
    assert emitted(b) == [True]


def test_per_record_steps_after_deduplication_keep_its_order() -> None:
    b = StreamsBuilder()
    d = dedup(b).map_values(lambda v: v + 1, value_type=int).filter(lambda k, v: v > 0)
    d.flat_map_values(lambda v: [v, -v], value_type=int).filter_expr("value != 3").to("out")
    assert emitted(b) == [True]


def test_records_in_read_order_and_other_operators_outputs_are_sorted() -> None:
    b = StreamsBuilder()
    s = b.stream("in", key_type=str, value_type=int)
    s.map_values(lambda v: v * 2, value_type=int).to("out")
    # a merge of the operator's output with records as read: sorted, as those are
    dedup(b, "in2").merge(b.stream("other", key_type=str, value_type=int)).to("merged")
    # an operator that places its outputs by positions of its own
    b.stream("in3", key_type=str, value_type=int).group_by_key().count().to_stream().to("n")
    assert emitted(b) == [False, False, False]
