"""The Processor API: custom processors with state stores, punctuators and record metadata.

Subclass :class:`Processor` (or :class:`FixedKeyProcessor`, which keeps each record's
key) and run it with ``KStream.process`` (``KStream.process_values``); see
docs/processor-api.md.

Examples
--------
>>> from kspark import StreamsBuilder
>>> from kspark.processor import Processor, ProcessorContext, Record
>>> class Doubler(Processor[str, int, str, int]):
...     def init(self, context: ProcessorContext[str, int]) -> None:
...         self.context = context
...     def process(self, record: Record[str, int]) -> None:
...         self.context.forward(record.with_value(record.value * 2))
>>> b = StreamsBuilder()
>>> doubled = b.stream("numbers", key_type=str, value_type=int).process(Doubler)
>>> doubled.node.key_type.display(), doubled.node.value_type.display()
('str', 'int')
"""

from __future__ import annotations

from kspark_server.papi import (
    Cancellable,
    FixedKeyProcessor,
    FixedKeyProcessorContext,
    FixedKeyRecord,
    Processor,
    ProcessorContext,
    PunctuationType,
    Punctuator,
    Record,
    RecordMetadata,
    StateStoreError,
)

__all__ = [
    "Cancellable",
    "FixedKeyProcessor",
    "FixedKeyProcessorContext",
    "FixedKeyRecord",
    "Processor",
    "ProcessorContext",
    "PunctuationType",
    "Punctuator",
    "Record",
    "RecordMetadata",
    "StateStoreError",
]
