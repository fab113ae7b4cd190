"""The test driver, in process against Spark: a 10-step test of one topology.

    ./run bench driver_steps [--steps 10 --records 100 --topology dsl|processor --remote sc://...]

The ``dsl`` topology deduplicates orders by key and value, joins them with a versioned
table as of their time, and counts them per key in 5-second windows; the ``processor`` one
counts the orders per key in a Processor API processor's store, with a stream-time
punctuator. Each step pipes ``--records`` orders (and a rate update per ten orders), runs
one micro-batch and reads the output, as a topology test does. Both engines get the same records; the bench checks that they give
the same output, then prints each engine's time for the whole test (the driver's start
included, the Spark server's start not: a test suite starts it once), and the ratio.
"""

from __future__ import annotations

import argparse
import time
from datetime import timedelta
from typing import Any

import kspark
from kspark import Materialized, Named, StreamsBuilder, StreamsConfig, TimeWindows, Topology
from kspark.processor import Processor, ProcessorContext, PunctuationType, Record
from kspark.state import KeyValueStore, Stores
from kspark.testing import TopologyTestDriver


class OrderCount(Processor[str, int, str, int]):
    """Each key's orders counted in a store and forwarded; every 10 s of stream time, the
    number of keys."""

    def init(self, context: ProcessorContext[str, int]) -> None:
        self.context = context
        self.counts: KeyValueStore[str, int] = context.get_state_store("order-counts")
        context.schedule(timedelta(seconds=10), PunctuationType.STREAM_TIME, self.tick)

    def process(self, record: Record[str, int]) -> None:
        n = (self.counts.get(record.key) or 0) + 1
        self.counts.put(record.key, n)
        self.context.forward(record.with_value(n))

    def tick(self, timestamp: int) -> None:
        self.context.forward(Record("keys", sum(1 for _ in self.counts.all()), timestamp))


def processor_topology() -> Topology:
    b = StreamsBuilder()
    b.table("rates", key_type=str, value_type=int)
    b.add_state_store(
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store("order-counts"), key_type=str, value_type=int
        )
    )
    b.stream("orders", key_type=str, value_type=int).process(OrderCount, "order-counts").to(
        "counts-out"
    )
    return b.build()


def topology() -> Topology:
    b = StreamsBuilder()
    rates = b.table(
        "rates",
        key_type=str,
        value_type=int,
        materialized=Materialized.as_versioned("rates", timedelta(minutes=10)),
    )
    (
        b.stream("orders", key_type=str, value_type=int)
        .deduplicate_by_key_value(lambda k, v: v, timedelta(seconds=30))
        .left_join(rates, lambda v, r: v * (r if r is not None else 1), value_type=int)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_and_grace(timedelta(seconds=5), timedelta(seconds=1)))
        .count(Named.as_("per-window"), Materialized.as_("counts"))
        .to_stream()
        .map(lambda w, n: (f"{w.key}@{w.window.start}", n), key_type=str, value_type=int)
        .to("counts-out")
    )
    return b.build()


TOPOLOGIES = {"dsl": topology, "processor": processor_topology}


def run_test(
    engine: str, steps: int, records: int, session: Any, which: str = "dsl"
) -> tuple[float, list[Any]]:
    """The test's time (s) on ``engine``, and what it read."""
    started = time.perf_counter()
    config = StreamsConfig(application_id=f"bench-{engine}", num_partitions=4)
    seen: list[Any] = []
    made = TOPOLOGIES[which]()
    with TopologyTestDriver(made, config, session=session, engine=engine) as d:  # type: ignore[arg-type]
        rates = d.create_input_topic("rates")
        orders = d.create_input_topic("orders")
        out = d.create_output_topic("counts-out")
        for step in range(steps):
            base = step * 1000
            for i in range(records):
                key = f"c{i % 20}"
                if i % 10 == 0:
                    rates.pipe_input(key, step + i % 7, timestamp=base + i)
                orders.pipe_input(key, (i * 7 + step) % 50, timestamp=base + i * 10)
            d.process()
            seen.append(out.read_key_values())
    return time.perf_counter() - started, seen


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--steps", type=int, default=10)
    p.add_argument("--records", type=int, default=100)
    p.add_argument("--topology", choices=sorted(TOPOLOGIES), default="dsl")
    p.add_argument("--remote", default=None, help="sc://host:port (default: embedded server)")
    a = p.parse_args()
    # imports (pandas, pyarrow), the server's start and its first query are a test
    # suite's once, not each test's: one warm-up test of one record on each engine
    started = time.perf_counter()
    run_test("local", 1, 1, None, a.topology)
    warm_local = time.perf_counter() - started
    local_s, local_seen = run_test("local", a.steps, a.records, None, a.topology)
    spark = kspark.connect(a.remote)
    run_test("spark", 1, 1, spark, a.topology)
    spark_s, spark_seen = run_test("spark", a.steps, a.records, spark, a.topology)
    if local_seen != spark_seen:
        raise SystemExit("the engines disagree: the bench's topology found a difference")
    what = {
        "dsl": "dedup -> versioned join -> windowed count",
        "processor": "a processor with a store and a punctuator",
    }[a.topology]
    print(f"{a.steps} steps x {a.records} records: {what}")
    print(
        f"in process (engine='local'): {local_s:8.3f} s  (first test of the process: +{warm_local:.2f} s)"
    )
    print(f"on Spark   (engine='spark'): {spark_s:8.3f} s")
    print(f"ratio: {spark_s / local_s:.0f}x")
    spark.stop()


if __name__ == "__main__":
    main()
