"""An example of the Processor API: a page's view count when it reaches 100 views (with a
``hot`` header), and every page's count each minute of stream time.

    kspark run examples.hot_pages:topology --config examples/hot_pages.toml

``examples/hot_pages.toml`` binds the names through ``data_dir``: JSON lines in
``./data/views`` (``{"key": "<page>", "value": {"user": "...", "page": "..."}, "timestamp":
...}``), written to ``./data/page-counts``.
"""

from __future__ import annotations

import dataclasses
from datetime import timedelta

from kspark import StreamsBuilder, Topology
from kspark.processor import Processor, ProcessorContext, PunctuationType, Record
from kspark.state import KeyValueStore, Stores


@dataclasses.dataclass
class View:
    user: str
    page: str


class CountAndFlag(Processor[str, View, str, int]):
    """Counts each page's views in the ``view-counts`` store; forwards a page's count when
    it reaches 100 and, each minute of stream time, every page's count."""

    def init(self, context: ProcessorContext[str, int]) -> None:
        self.context = context
        self.counts: KeyValueStore[str, int] = context.get_state_store("view-counts")
        context.schedule(timedelta(minutes=1), PunctuationType.STREAM_TIME, self.flush)

    def process(self, record: Record[str, View]) -> None:
        n = (self.counts.get(record.key) or 0) + 1
        self.counts.put(record.key, n)
        if n == 100:
            self.context.forward(record.with_value(n).with_headers({"hot": b"1"}))

    def flush(self, timestamp: int) -> None:
        with self.counts.all() as it:
            for page, n in it:
                self.context.forward(Record(page, n, timestamp))


def topology() -> Topology:
    b = StreamsBuilder()
    b.add_state_store(
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store("view-counts"), key_type=str, value_type=int
        )
    )
    views = b.stream("views", key_type=str, value_type=View)
    views.process(CountAndFlag, "view-counts").to("page-counts")
    return b.build()
