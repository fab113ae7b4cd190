"""Checked by mypy --strict: the Processor API's types.

A ``Processor[KIn, VIn, KOut, VOut]`` gets records of ``KIn``, ``VIn`` and a context that
forwards only ``KOut``, ``VOut``; ``process`` types the stream after it from them.
``# type: ignore[code]`` lines must stay errors."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any, assert_type

from kspark import KStream, StreamsBuilder
from kspark.processor import (
    Cancellable,
    FixedKeyProcessor,
    FixedKeyProcessorContext,
    FixedKeyRecord,
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
    RecordMetadata,
)
from kspark.state import KeyValueStore, StoreBuilder, Stores, VersionedKeyValueStore, WindowStore


@dataclasses.dataclass
class Click:
    page: str


class CountAndFlag(Processor[str, Click, str, int]):
    def init(self, context: ProcessorContext[str, int]) -> None:
        self.context = context
        self.counts: KeyValueStore[str, int] = context.get_state_store("click-counts")
        self.ticker: Cancellable = context.schedule(
            timedelta(minutes=1), PunctuationType.STREAM_TIME, self.flush
        )

    def process(self, record: Record[str, Click]) -> None:
        assert_type(record.value, Click)
        n = (self.counts.get(record.key) or 0) + 1
        self.counts.put(record.key, n)
        meta = self.context.record_metadata()
        assert_type(meta, RecordMetadata | None)
        if n == 100:
            self.context.forward(record.with_value(n))

    def flush(self, timestamp: int) -> None:
        with self.counts.all() as it:
            for key, n in it:
                assert_type(key, str)
                assert_type(n, int)
                self.context.forward(Record(key, n, timestamp))


class WrongValue(Processor[str, Click, str, int]):
    def init(self, context: ProcessorContext[str, int]) -> None:
        self.context = context

    def process(self, record: Record[str, Click]) -> None:
        self.context.forward(record)  # type: ignore[arg-type]
        self.context.forward(record.with_value("many"))  # type: ignore[arg-type]


class Tagger(FixedKeyProcessor[str, Click, str]):
    def init(self, context: FixedKeyProcessorContext[str, str]) -> None:
        self.context = context

    def process(self, record: FixedKeyRecord[str, Click]) -> None:
        self.context.forward(record.with_value(record.value.page))
        record.with_key("other")  # type: ignore[attr-defined]


b = StreamsBuilder()
counts: StoreBuilder[KeyValueStore[Any, Any]] = Stores.key_value_store_builder(
    Stores.persistent_key_value_store("click-counts"), key_type=str, value_type=int
)
b.add_state_store(counts)
versions: StoreBuilder[VersionedKeyValueStore[Any, Any]] = Stores.versioned_key_value_store_builder(
    Stores.persistent_versioned_key_value_store("v", timedelta(hours=1))
)
windows: StoreBuilder[WindowStore[Any, Any]] = Stores.window_store_builder(
    Stores.persistent_window_store("w", timedelta(hours=1), timedelta(minutes=5), False)
).with_logging_disabled()

clicks = b.stream("clicks", key_type=str, value_type=Click)
hot = clicks.process(CountAndFlag, "click-counts")
assert_type(hot, KStream[str, int])
hot.to("hot")
pages = clicks.process_values(Tagger)
assert_type(pages, KStream[str, str])
by_lambda = clicks.process(lambda: CountAndFlag(), "click-counts", named="again")
assert_type(by_lambda, KStream[str, int])

numbers = b.stream("numbers", key_type=str, value_type=int)
numbers.process(CountAndFlag)  # type: ignore[arg-type]
numbers.process_values(Tagger)  # type: ignore[arg-type]


class LoadRates(Processor[str, float, Any, Any]):
    """A global store's state-update processor."""

    def init(self, context: ProcessorContext[Any, Any]) -> None:
        self.rates: KeyValueStore[str, float] = context.get_state_store("rates")

    def process(self, record: Record[str, float]) -> None:
        self.rates.put(record.key, record.value)


rates: StoreBuilder[KeyValueStore[Any, Any]] = Stores.key_value_store_builder(
    Stores.persistent_key_value_store("rates"), key_type=str, value_type=float
)
assert_type(b.add_global_store(rates, "rates", state_update_supplier=LoadRates), StreamsBuilder)
b.add_global_store(rates, "rates", state_update_supplier=lambda: LoadRates(), named="rates-in")
b.add_global_store(rates, "rates", state_update_supplier=LoadRates())  # type: ignore[arg-type]
