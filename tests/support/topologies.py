"""Topologies that several test files run: one definition, so their answers compare."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from kspark import Materialized, StreamsBuilder
from kspark.processor import Processor, ProcessorContext, Record
from kspark.state import KeyValueStore


def as_of_join() -> Any:
    """One stateful operator with two inputs: stream ``in`` left-joined, as of each
    record's time, to the versioned table ``table`` (store ``rates``, 20 s of history);
    ``value * 100 + rate`` (-1 for no rate) to ``out``."""
    b = StreamsBuilder()
    rates = b.table(
        "table",
        key_type=str,
        value_type=int,
        materialized=Materialized.as_versioned("rates", timedelta(seconds=20)),
    )
    b.stream("in", key_type=str, value_type=int).left_join(
        rates, lambda v, r: v * 100 + (r if r is not None else -1), value_type=int
    ).to("out")
    return b.build()


class Summing(Processor[str, int, str, int]):
    """Sums each key's values in the store ``psums`` and forwards the running sum."""

    def init(self, context: ProcessorContext[str, int]) -> None:
        self.context = context
        self.sums: KeyValueStore[str, int] = context.get_state_store("psums")

    def process(self, record: Record[str, int]) -> None:
        total = (self.sums.get(record.key) or 0) + record.value
        self.sums.put(record.key, total)
        self.context.forward(record.with_value(total))
