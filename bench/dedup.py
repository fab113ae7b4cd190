"""deduplicate_by_key against Spark's withWatermark(...).dropDuplicatesWithinWatermark.

    ./run bench dedup [--rows 1000000 --keys 100000]

Same Parquet files (about 20% duplicates), same session. Two runs each: one micro-batch,
and 10 micro-batches of a tenth (maxFilesPerTrigger=1 over 10 files). Note the semantics
differ: Spark's built-in drops late records, kspark forwards them (KIP-655).

kspark runs twice per case: with its default writer for an app with state (batch folders through ``foreachBatch``, which a rescale
needs), and with ``file_sink="spark"`` (Spark's own file sink, as the native query uses;
such an app cannot be rescaled).
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta

sys.path.insert(0, os.path.dirname(__file__))

import _common as common

from kspark import StreamsBuilder, Topic


def main() -> None:
    a = common.args(__doc__ or "")
    spark, base, data = common.setup(a, dup_rate=0.2)
    from pyspark.sql import functions as F

    for batches in (1, a.files):
        per_trigger = {} if batches == 1 else {"maxFilesPerTrigger": 1}

        def native(per_trigger: dict[str, int] = per_trigger) -> None:
            df = common.read_events(spark, data, **per_trigger).withColumn(
                "t", F.timestamp_millis("ts")
            )
            df = df.withWatermark("t", "10 seconds").dropDuplicatesWithinWatermark(["key"])
            common.run_query(df.drop("t"), os.path.join(base, "n-out"), os.path.join(base, "n-chk"))

        def ks(batches: int = batches, file_sink: str = "auto") -> None:
            b = StreamsBuilder()
            b.stream(
                common.parquet_topic("events", data), key_type=str, value_type=common.Event
            ).deduplicate_by_key(timedelta(seconds=10)).to(
                Topic.parquet("out", common.fresh(os.path.join(base, "k-out")))
            )
            common.run_app(
                b.build(),
                spark,
                "dedup",
                base,
                max_files_per_trigger=1 if batches > 1 else None,
                file_sink=file_sink,
            )

        n_rate = a.rows / common.timed(native, a.repeat)
        line = f"{batches:>2} batch(es): spark-native {n_rate:>10,.0f} rec/s"
        k_rate = a.rows / common.timed(ks, a.repeat)
        s_rate = a.rows / common.timed(lambda: ks(file_sink="spark"), a.repeat)
        line += (
            f"\n   kspark {k_rate:>10,.0f} rec/s  ratio {k_rate / n_rate:.3f}   "
            f"file_sink='spark' {s_rate:>10,.0f} rec/s  ratio {s_rate / n_rate:.3f}"
        )
        print(line, flush=True)


if __name__ == "__main__":
    main()
