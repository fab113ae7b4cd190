"""Aggregations against the same aggregations written directly in PySpark.

    ./run bench aggregate [--rows 1000000 --keys 100000]
                          [--queries count,windowed,sliding,cogroup]

Same Parquet files, same session, one run. Two runs each: one micro-batch, and 10
micro-batches of a tenth (maxFilesPerTrigger=1 over 10 files). Spark's side is what a good
Spark user writes: ``groupBy("key").count()`` and, windowed,
``withWatermark(t, grace).groupBy(window(t, size), "key").count()``, both in update mode
through ``foreachBatch`` into Parquet (kspark's own sink is a ``foreachBatch`` too). Both
emit per micro-batch the latest count of each key (window) that changed. The windowed
semantics differ at the edges: Spark drops late records by a query-wide watermark that
moves between micro-batches, kspark by each task's stream time, record by record.

Two aggregations Spark has no operator for, against what a Spark user would write instead:

- ``sliding``: kspark's sliding windows (KIP-450, a 60 s time difference, 10 s grace)
  against Spark's hopping windows of 60 s every 10 s (``window(t, "60 seconds", "10
  seconds")``), the usual approximation; kspark's windows follow the records, Spark's
  the clock, so the counts differ, and each Spark record lands in six windows.
- ``cogroup``: ``cogroup`` of two grouped streams (the same files read as two topics), one
  sum and one count folded into one aggregate per key, against Spark's union of the two
  streams and one ``groupBy("key").agg(...)``. Rates count the records of both inputs.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import _common as common

from kspark import SlidingWindows, StreamsBuilder, TimeWindows, Topic

WINDOW_S = 60
GRACE_S = 10


QUERIES = ("count", "windowed", "sliding", "cogroup")


def _sum_and_count(key: str, e: common.Event, agg: list[int]) -> list[int]:
    return [agg[0] + e.value, agg[1]]


def _count_in(key: str, e: common.Event, agg: list[int]) -> list[int]:
    return [agg[0], agg[1] + 1]


def main() -> None:
    a = common.args(__doc__ or "", extra=[("--queries", ",".join(QUERIES))])
    queries = [q for q in a.queries.split(",") if q]
    unknown = sorted(set(queries) - set(QUERIES))
    if unknown:
        raise SystemExit(f"unknown --queries {unknown}; choose from {QUERIES}")
    spark, base, data = common.setup(a)
    from pyspark.sql import functions as F

    def native_query(df: Any, name: str) -> None:
        out = common.fresh(os.path.join(base, f"n-out-{name}"))

        def write(batch: Any, batch_id: int) -> None:
            batch.write.mode("overwrite").parquet(f"{out}/batch_id={batch_id}")

        q = (
            df.writeStream.outputMode("update")
            .foreachBatch(write)
            .option("checkpointLocation", common.fresh(os.path.join(base, f"n-chk-{name}")))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()

    for batches in (1, a.files):
        per_trigger = {} if batches == 1 else {"maxFilesPerTrigger": 1}

        def read(per_trigger: dict[str, int] = per_trigger) -> Any:
            return common.read_events(spark, data, **per_trigger)

        def native_count() -> None:
            native_query(read().groupBy("key").count(), "count")

        def native_windowed(slide_s: int | None = None) -> None:
            df = read().withColumn("t", F.timestamp_millis("ts"))
            slide = [] if slide_s is None else [f"{slide_s} seconds"]
            df = (
                df.withWatermark("t", f"{GRACE_S} seconds")
                .groupBy(F.window("t", f"{WINDOW_S} seconds", *slide), "key")
                .count()
            )
            native_query(df, "windowed" if slide_s is None else "hopping")

        def native_cogroup() -> None:
            df = read().unionByName(read())
            df = df.groupBy("key").agg(F.sum("value").alias("total"), F.count("*").alias("n"))
            native_query(df, "cogroup")

        def ks(name: str, batches: int = batches) -> None:
            b = StreamsBuilder()
            grouped = b.stream(
                common.parquet_topic("events", data), key_type=str, value_type=common.Event
            ).group_by_key()
            sink = Topic.parquet("out", common.fresh(os.path.join(base, f"k-out-{name}")))
            size, grace = timedelta(seconds=WINDOW_S), timedelta(seconds=GRACE_S)
            if name == "windowed":
                w = TimeWindows.of_size_and_grace(size, grace)
                grouped.windowed_by(w).count().to_stream().to(sink)
            elif name == "sliding":
                sw = SlidingWindows.of_time_difference_and_grace(size, grace)
                grouped.windowed_by(sw).count().to_stream().to(sink)
            elif name == "cogroup":
                other = b.stream(
                    common.parquet_topic("events-2", data), key_type=str, value_type=common.Event
                ).group_by_key()
                cogrouped = grouped.cogroup(_sum_and_count).cogroup(other, _count_in)
                cogrouped.aggregate(lambda: [0, 0], value_type=list[int]).to_stream().to(sink)
            else:
                grouped.count().to_stream().to(sink)
            common.run_app(
                b.build(),
                spark,
                f"agg-{name}",
                base,
                progress=False,
                max_files_per_trigger=1 if batches > 1 else None,
            )

        variants: dict[str, tuple[str, Any, int]] = {
            "count": ("count", native_count, 1),
            "windowed": ("windowed count", native_windowed, 1),
            "sliding": ("sliding count", lambda: native_windowed(WINDOW_S // 6), 1),
            "cogroup": ("cogroup", native_cogroup, 2),
        }
        for q in queries:
            label, native, inputs = variants[q]
            n_rate = inputs * a.rows / common.timed(native, a.repeat)
            k_rate = inputs * a.rows / common.timed(lambda q=q: ks(q), a.repeat)
            print(
                f"{label:>14}, {batches:>2} batch(es): spark-native {n_rate:>10,.0f} rec/s  "
                f"kspark {k_rate:>10,.0f} rec/s  ratio {k_rate / n_rate:.3f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
