"""The Processor API on the session server: Kafka Streams' processor scenarios
(forwarding, state across batches and restarts, punctuation, record metadata, missing
stores, exceptions through the handler) re-expressed with kspark's test driver."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from kspark import StreamsBuilder, StreamsConfig, Topic
from kspark.processor import (
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
)
from kspark.state import KeyValueStore, Stores
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark


class RunningCount(Processor[str, str, str, int]):
    """Counts each key's records in a store and forwards the count; a stream-time
    punctuator forwards ("tick", stream time) each 10 s of stream time."""

    def init(self, context: ProcessorContext[str, int]) -> None:
        self.context = context
        self.counts: KeyValueStore[str, int] = context.get_state_store("counts")
        context.schedule(timedelta(seconds=10), PunctuationType.STREAM_TIME, self.tick)

    def process(self, record: Record[str, str]) -> None:
        n = (self.counts.get(record.key) or 0) + 1
        self.counts.put(record.key, n)
        self.context.forward(record.with_value(n))

    def tick(self, timestamp: int) -> None:
        self.context.forward(Record("tick", timestamp, timestamp))


def counting_topology() -> Any:
    b = StreamsBuilder()
    b.add_state_store(
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store("counts"), key_type=str, value_type=int
        )
    )
    b.stream(Topic.jsonl("in", "/unused"), key_type=str, value_type=str).process(
        RunningCount, "counts"
    ).to(Topic.jsonl("out", "/unused"))
    return b.build()


def test_forwarding_state_and_stream_time_punctuation(spark: Any, app_id: str) -> None:
    cfg = StreamsConfig(application_id=app_id, num_partitions=1)
    with TopologyTestDriver(counting_topology(), cfg, session=spark) as d:
        src = d.create_input_topic("in", key_type=str, value_type=str)
        out = d.create_output_topic("out", key_type=str, value_type=int)
        src.pipe_input("a", "x", timestamp=1_000)
        src.pipe_input("b", "x", timestamp=2_000)
        d.process()
        # the punctuator is due at time 0: it fires after the first record, and is then
        # due at 10 000 (its due time plus the interval)
        assert out.read_key_values() == [("a", 1), ("tick", 1_000), ("b", 1)]
        src.pipe_input("a", "x", timestamp=9_999)  # not yet due
        src.pipe_input("a", "x", timestamp=10_000)  # due: next due at 20 000
        src.pipe_input("a", "x", timestamp=52_000)  # three intervals passed: fires once
        src.pipe_input("b", "x", timestamp=61_999)  # next due at 62 000, not 60 000
        src.pipe_input("b", "x", timestamp=3_000)  # late: stream time stays
        src.pipe_input("b", "x", timestamp=62_000)
        d.process()
        assert out.read_key_values() == [
            ("a", 2),
            ("a", 3),
            ("tick", 10_000),
            ("a", 4),
            ("tick", 52_000),
            ("b", 2),
            ("b", 3),
            ("b", 4),
            ("tick", 62_000),
        ]
        # the store is the task's state: restored in the next batch
        src.pipe_input("a", "x", timestamp=62_001)
        d.process()
        assert out.read_key_values() == [("a", 5)]
