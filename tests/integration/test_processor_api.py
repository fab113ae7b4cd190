"""The Processor API on the session server: Kafka Streams' processor scenarios
(forwarding, state across batches and restarts, punctuation, record metadata, missing
stores, exceptions through the handler) re-expressed with kspark's test driver."""

from __future__ import annotations

import dataclasses
import itertools
import json
import os
import uuid
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kspark import StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.processor import (
    FixedKeyProcessor,
    FixedKeyProcessorContext,
    FixedKeyRecord,
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
)
from kspark.state import KeyValueStore, Stores, VersionedKeyValueStore, WindowStore
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


def test_forwarding_state_and_stream_time_punctuation(app_id: str) -> None:
    # semantics only: in process (test_driver_engines.py checks that Spark agrees)
    cfg = StreamsConfig(application_id=app_id, num_partitions=1)
    with TopologyTestDriver(counting_topology(), cfg, engine="local") as d:
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


class Stamp(FixedKeyProcessor[str, str, str]):
    """Forwards where each record came from; "boom" raises; a wall-clock punctuator
    forwards what ``record_metadata`` says in a punctuation."""

    def init(self, context: FixedKeyProcessorContext[str, str]) -> None:
        self.context = context
        context.schedule(timedelta(milliseconds=1), PunctuationType.WALL_CLOCK_TIME, self.tick)

    def process(self, record: FixedKeyRecord[str, str]) -> None:
        if record.value == "boom":
            raise ValueError("boom")
        meta = self.context.record_metadata()
        assert meta is not None
        self.context.forward(
            record.with_value(
                f"{record.value}@{meta.topic}/{meta.partition}/{meta.offset}"
                f"/{self.context.task_id}/{self.context.application_id}"
            ).with_headers({"seen": b"1"})
        )

    def tick(self, timestamp: int) -> None:
        assert timestamp <= self.context.current_system_time_ms()
        self.context.forward(
            FixedKeyRecord("tick", f"wall:{self.context.record_metadata()}", timestamp)
        )


def test_record_metadata_wall_clock_and_the_processing_handler(spark: Any, app_id: str) -> None:
    from kspark.errors import LogAndContinueProcessingExceptionHandler

    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", "/unused"), key_type=str, value_type=str).process_values(Stamp).to(
        Topic.jsonl("out", "/unused")
    )
    cfg = StreamsConfig(
        application_id=app_id,
        num_partitions=1,
        processing_exception_handler=LogAndContinueProcessingExceptionHandler,
    )
    with TopologyTestDriver(b.build(), cfg, session=spark) as d:
        src = d.create_input_topic("in", key_type=str, value_type=str)
        out = d.create_output_topic("out", key_type=str, value_type=str)
        src.pipe_input("a", "x", timestamp=5)
        src.pipe_input("b", "boom", timestamp=6)
        src.pipe_input("c", "y", timestamp=7)
        d.process()
        src.pipe_input("a", "z", timestamp=8)
        d.process()
        records = out.read_records()
        got = [(r.key, r.value) for r in records if r.key != "tick"]
        assert got == [
            ("a", f"x@in/0/0/0_0/{app_id}"),
            ("c", f"y@in/0/2/0_0/{app_id}"),
            ("a", f"z@in/0/3/0_0/{app_id}"),
        ]
        assert all(dict(r.headers or ()).get("seen") == b"1" for r in records if r.key != "tick")
        ticks = [r.value for r in records if r.key == "tick"]
        # due 1 ms after the first batch's init, so due by the second batch's end at the
        # latest; at most one a batch; no record metadata in a punctuation
        assert 1 <= len(ticks) <= 2 and set(ticks) == {"wall:None"}
        dropped = d.metrics().dropped_records_total
        assert dropped == {("KSTREAM-PROCESSVALUES-0000000001", "0_0"): 1}


def _write(folder: str, name: str, rows: list[dict[str, Any]]) -> None:
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(folder, f".{name}")
    with open(tmp, "w") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")
    os.replace(tmp, os.path.join(folder, name))


def _read(folder: str) -> list[tuple[str, int]]:
    rows: list[dict[str, Any]] = []
    for root, _, files in os.walk(folder):
        for name in files:
            if name.endswith(".json") or name.endswith(".jsonl"):
                with open(os.path.join(root, name)) as f:
                    rows.extend(json.loads(line) for line in f if line.strip())
    rows.sort(key=lambda r: (r["timestamp"], r["key"], r["value"]))
    return [(r["key"], r["value"]) for r in rows]


def test_stores_and_punctuation_survive_a_restart_and_answer_queries(
    spark: Any, app_id: str, tmp_path: Any
) -> None:
    base = str(tmp_path)

    def topology() -> Any:
        b = StreamsBuilder()
        b.add_state_store(
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store("counts"), key_type=str, value_type=int
            )
        )
        b.stream(Topic.jsonl("in", os.path.join(base, "in")), key_type=str, value_type=str).process(
            RunningCount, "counts"
        ).to(Topic.jsonl("out", os.path.join(base, "out")))
        return b.build()

    cfg = StreamsConfig(
        application_id=app_id, checkpoint_dir=os.path.join(base, "chk"), num_partitions=1
    )
    row = lambda k, ts: {"key": k, "value": "x", "timestamp": ts}  # noqa: E731
    _write(os.path.join(base, "in"), "1.jsonl", [row("a", 1_000), row("b", 2_000)])
    first = StreamsApp(topology(), cfg, session=spark)
    first.run_until_caught_up()
    assert _read(os.path.join(base, "out")) == [("a", 1), ("tick", 1_000), ("b", 1)]

    # a new app on the same checkpoint: counts go on, and the punctuator is due at 10 000
    # as the first run left it (not at 0 again)
    _write(os.path.join(base, "in"), "2.jsonl", [row("a", 3_000), row("b", 10_000)])
    again = StreamsApp(topology(), cfg, session=spark)
    again.run_until_caught_up()
    assert _read(os.path.join(base, "out"))[3:] == [("a", 2), ("b", 2), ("tick", 10_000)]
    counts = again.store("counts")
    assert counts.get("a") == 2 and counts.get("b") == 2 and counts.get("zzz") is None
    assert sorted(counts.all()) == [("a", 2), ("b", 2)]
    assert counts.approximate_num_entries() == 2


def split_reference(records: list[tuple[str, int]]) -> list[tuple[str, int]]:
    """``RunningCount`` by Kafka Streams' rules: a count per key forwarded per record; a
    stream-time punctuation due at 0, then each 10 s after its due time (missed ones
    skipped), fired once after the record that reaches it."""
    counts: dict[str, int] = {}
    out: list[tuple[str, int]] = []
    stream_time: int | None = None
    due = 0
    for key, ts in records:
        counts[key] = counts.get(key, 0) + 1
        out.append((key, counts[key]))
        stream_time = ts if stream_time is None else max(stream_time, ts)
        if stream_time >= due:
            out.append(("tick", stream_time))
            due = due + 10_000 if due + 10_000 > stream_time else stream_time + 10_000
    return out


@settings(max_examples=25, deadline=None, suppress_health_check=list(HealthCheck), derandomize=True)
@given(
    data=st.lists(
        st.tuples(st.sampled_from(["a", "b"]), st.integers(0, 60).map(lambda s: s * 1_000)),
        min_size=2,
        max_size=12,
    ),
    cuts=st.lists(st.integers(1, 11), min_size=1, max_size=2, unique=True),
)
def test_micro_batch_splits_keep_stores_and_stream_time_punctuation(
    data: list[tuple[str, int]], cuts: list[int]
) -> None:
    bounds = [0, *sorted(c for c in cuts if c < len(data)), len(data)]
    batches = [data[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    cfg = StreamsConfig(application_id=f"psplit-{uuid.uuid4().hex[:8]}", num_partitions=1)
    with TopologyTestDriver(counting_topology(), cfg, engine="local") as d:
        src = d.create_input_topic("in", key_type=str, value_type=str)
        out = d.create_output_topic("out", key_type=str, value_type=int)
        for batch in batches:
            for key, ts in batch:
                src.pipe_input(key, "x", timestamp=ts)
            d.process()
        assert out.read_key_values() == split_reference(data)


@dataclasses.dataclass
class Price:
    sku: str
    cents: int


class PriceHistory(FixedKeyProcessor[str, Price, Price]):
    """Keeps each sku's prices in a versioned store and its puts in a window store of
    10 s windows; forwards the price the sku had 10 s before each record, or itself."""

    def init(self, context: FixedKeyProcessorContext[str, Price]) -> None:
        self.context = context
        self.versions: VersionedKeyValueStore[str, Price] = context.get_state_store("prices")
        self.windows: WindowStore[str, int] = context.get_state_store("puts")

    def process(self, record: FixedKeyRecord[str, Price]) -> None:
        self.versions.put(record.key, record.value, record.timestamp)
        start = record.timestamp - record.timestamp % 10_000
        with self.windows.fetch(record.key, start, start) as it:
            seen = sum(n for _, n in it)
        self.windows.put(record.key, seen + 1, start)
        before = self.versions.get(record.key, record.timestamp - 10_000)
        price = before.value if before is not None else record.value
        self.context.forward(record.with_value(Price(price.sku, price.cents * 100 + seen + 1)))


def test_versioned_and_window_stores_with_record_values(spark: Any, app_id: str) -> None:
    b = StreamsBuilder()
    b.add_state_store(
        Stores.versioned_key_value_store_builder(
            Stores.persistent_versioned_key_value_store("prices", timedelta(minutes=1)),
            key_type=str,
            value_type=Price,
        )
    )
    b.add_state_store(
        Stores.window_store_builder(
            Stores.persistent_window_store(
                "puts", timedelta(minutes=1), timedelta(seconds=10), False
            ),
            key_type=str,
            value_type=int,
        )
    )
    b.stream(Topic.jsonl("in", "/unused"), key_type=str, value_type=Price).process_values(
        PriceHistory, "prices", "puts"
    ).to(Topic.jsonl("out", "/unused"))
    cfg = StreamsConfig(application_id=app_id, num_partitions=1)
    with TopologyTestDriver(b.build(), cfg, session=spark) as d:
        src = d.create_input_topic("in", key_type=str, value_type=Price)
        out = d.create_output_topic("out", key_type=str, value_type=Price)
        src.pipe_input("p", Price("p", 1), timestamp=1_000)
        src.pipe_input("p", Price("p", 2), timestamp=5_000)
        d.process()
        src.pipe_input("p", Price("p", 3), timestamp=13_000)
        src.pipe_input("p", Price("p", 4), timestamp=16_000)
        d.process()
        assert out.read_values() == [
            Price("p", 101),  # nothing 10 s before: itself; first put of window 0
            Price("p", 202),  # second put of window 0
            Price("p", 101),  # at 3 000 the price was 1; first put of window 10 000
            Price("p", 202),  # at 6 000 it was 2
        ]
        # both stores answer interactive queries as of the last micro-batch
        prices = d.store("prices")
        latest = prices.get("p")
        assert (latest.value, latest.valid_from, latest.valid_to) == (Price("p", 4), 16_000, None)
        then = prices.get("p", 6_000)
        assert (then.value, then.valid_from, then.valid_to) == (Price("p", 2), 5_000, 13_000)
        assert prices.get("p", 999) is None and prices.get("q") is None
        assert list(prices.all()) == [("p", Price("p", 4))]
        puts = d.store("puts")
        assert puts.fetch("p", 0, 20_000) == [(0, 2), (10_000, 2)]
        assert puts.fetch("p", 5_000, 20_000) == [(10_000, 2)]
        assert puts.fetch_all(0, 0) == [(("p", 0), 2)]


def test_a_rescale_carries_the_stores_over(spark: Any, app_id: str) -> None:
    cfg = StreamsConfig(application_id=app_id, num_partitions=2)
    with TopologyTestDriver(counting_topology(), cfg, session=spark) as d:
        src = d.create_input_topic("in", key_type=str, value_type=str)
        out = d.create_output_topic("out", key_type=str, value_type=int)
        for key in "abcd":
            src.pipe_input(key, "x", timestamp=1_000)
        d.process()
        d.rescale(3)
        for key in "abcd":
            src.pipe_input(key, "x", timestamp=2_000)
        d.process()
        counts = [kv for kv in out.read_key_values() if kv[0] != "tick"]
        assert sorted(counts) == sorted([(k, n) for k in "abcd" for n in (1, 2)])
        assert sorted(d.store("counts").all()) == [(k, 2) for k in "abcd"]


class Priced(Processor[str, str, str, str]):
    """Looks each payment's currency up in the global store ``rates``."""

    def init(self, context: ProcessorContext[str, str]) -> None:
        self.context = context
        self.rates: KeyValueStore[str, float] = context.get_state_store("rates")

    def process(self, record: Record[str, str]) -> None:
        self.context.forward(record.with_value(f"{record.value}:{self.rates.get(record.value)}"))


class RatesInCents(Processor[str, float, None, None]):
    """A state-update processor: stores each rate times 100; a null rate deletes it."""

    def init(self, context: ProcessorContext[None, None]) -> None:
        self.rates: KeyValueStore[str, float] = context.get_state_store("rates")

    def process(self, record: Record[str, float]) -> None:
        if record.value is None:
            self.rates.delete(record.key)
        else:
            self.rates.put(record.key, round(record.value * 100, 6))


@pytest.mark.parametrize("updater", [None, RatesInCents])
def test_a_global_store_feeds_every_task_across_batches_and_a_restart(
    spark: Any, app_id: str, tmp_path: Any, updater: Any
) -> None:
    base = str(tmp_path)

    def topology() -> Any:
        b = StreamsBuilder()
        b.add_global_store(
            Stores.key_value_store_builder(
                Stores.persistent_key_value_store("rates"), key_type=str, value_type=float
            ),
            Topic.jsonl("rates", os.path.join(base, "rates")),
            state_update_supplier=updater,
        )
        b.stream(
            Topic.jsonl("payments", os.path.join(base, "payments")), key_type=str, value_type=str
        ).process(Priced).to(Topic.jsonl("out", os.path.join(base, "out")))
        return b.build()

    cfg = StreamsConfig(
        application_id=app_id, checkpoint_dir=os.path.join(base, "chk"), num_partitions=3
    )
    accounts = [f"acct-{i}" for i in range(9)]  # over the three tasks
    scale = 1 if updater is None else 100

    def rate(k: str, v: float | None, ts: int) -> dict[str, Any]:
        return {"key": k, "value": v, "timestamp": ts}

    def pays(currency: str, ts: int) -> list[dict[str, Any]]:
        return [{"key": a, "value": currency, "timestamp": ts} for a in accounts]

    _write(os.path.join(base, "rates"), "1.jsonl", [rate("EUR", 1.5, 1), rate("GBP", 2.5, 1)])
    _write(os.path.join(base, "payments"), "1.jsonl", pays("EUR", 10) + pays("GBP", 10))
    StreamsApp(topology(), cfg, session=spark).run_until_caught_up()
    first = sorted(set(v for _, v in _read(os.path.join(base, "out"))))
    assert first == [f"EUR:{1.5 * scale}", f"GBP:{2.5 * scale}"]
    assert len(_read(os.path.join(base, "out"))) == 2 * len(accounts)

    # restarted from the checkpoint: the store is as the first run left it, and this
    # run's updates come before its payments
    _write(os.path.join(base, "rates"), "2.jsonl", [rate("GBP", None, 20)])
    _write(os.path.join(base, "payments"), "2.jsonl", pays("EUR", 30) + pays("GBP", 30))
    StreamsApp(topology(), cfg, session=spark).run_until_caught_up()
    later = [v for _, v in _read(os.path.join(base, "out"))[2 * len(accounts) :]]
    assert sorted(set(later)) == ["EUR:" + str(1.5 * scale), "GBP:None"]
    assert len(later) == 2 * len(accounts)
