"""group_by_key().count() and a windowed count against the same aggregations written
directly in PySpark.

    ./run bench aggregate [--rows 1000000 --keys 100000]

Same Parquet files, same session, one run. Two runs each: one micro-batch, and 10
micro-batches of a tenth (maxFilesPerTrigger=1 over 10 files). Spark's side is what a good
Spark user writes: ``groupBy("key").count()`` and, windowed,
``withWatermark(t, grace).groupBy(window(t, size), "key").count()``, both in update mode
through ``foreachBatch`` into Parquet (kspark's own sink is a ``foreachBatch`` too). Both
emit per micro-batch the latest count of each key (window) that changed. The windowed
semantics differ at the edges: Spark drops late records by a query-wide watermark that
moves between micro-batches, kspark by each task's stream time, record by record.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import _common as common

from kspark import StreamsBuilder, TimeWindows, Topic

WINDOW_S = 60
GRACE_S = 10


def main() -> None:
    a = common.args(__doc__ or "")
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

        def native_windowed() -> None:
            df = read().withColumn("t", F.timestamp_millis("ts"))
            df = (
                df.withWatermark("t", f"{GRACE_S} seconds")
                .groupBy(F.window("t", f"{WINDOW_S} seconds"), "key")
                .count()
            )
            native_query(df, "windowed")

        def ks(windowed: bool, batches: int = batches) -> None:
            b = StreamsBuilder()
            grouped = b.stream(
                common.parquet_topic("events", data), key_type=str, value_type=common.Event
            ).group_by_key()
            name = "windowed" if windowed else "count"
            sink = Topic.parquet("out", common.fresh(os.path.join(base, f"k-out-{name}")))
            if windowed:
                w = TimeWindows.of_size_and_grace(
                    timedelta(seconds=WINDOW_S), timedelta(seconds=GRACE_S)
                )
                grouped.windowed_by(w).count().to_stream().to(sink)
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

        for label, native, mine in (
            ("count", native_count, lambda: ks(False)),
            ("windowed count", native_windowed, lambda: ks(True)),
        ):
            n_rate = a.rows / common.timed(native, a.repeat)
            k_rate = a.rows / common.timed(mine, a.repeat)
            print(
                f"{label:>14}, {batches:>2} batch(es): spark-native {n_rate:>10,.0f} rec/s  "
                f"kspark {k_rate:>10,.0f} rec/s  ratio {k_rate / n_rate:.3f}",
                flush=True,
            )


if __name__ == "__main__":
    main()
