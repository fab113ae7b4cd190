"""deduplicate_by_key against Spark's withWatermark(...).dropDuplicatesWithinWatermark.

    ./run bench dedup [--rows 1000000 --keys 100000]

Same Parquet files (about 20% duplicates), same session. Two runs each: one micro-batch,
and 10 micro-batches of a tenth (maxFilesPerTrigger=1 over 10 files). Note the semantics
differ: Spark's built-in drops late records, kspark forwards them (KIP-655).
"""

from __future__ import annotations

import dataclasses
import os
import sys
from datetime import timedelta

sys.path.insert(0, os.path.dirname(__file__))

from _common import args, fresh, run_query, timed, workdir, write_events

import kspark
from kspark import StreamsApp, StreamsBuilder, StreamsConfig, Topic


@dataclasses.dataclass
class Event:
    key: str
    value: int
    ts: int


def main() -> None:
    a = args(__doc__ or "")
    base = workdir()
    data = os.path.join(base, "in")
    write_events(data, a.rows, a.keys, a.files, dup_rate=0.2)
    spark = kspark.connect(a.remote)
    spark.conf.set("spark.sql.shuffle.partitions", "4")
    from pyspark.sql import functions as F

    for batches in (1, a.files):
        per_trigger = {} if batches == 1 else {"maxFilesPerTrigger": 1}

        def native(per_trigger: dict[str, int] = per_trigger) -> None:
            reader = spark.readStream.schema("key string, value long, ts long")
            for k, v in per_trigger.items():
                reader = reader.option(k, v)
            df = reader.parquet(data).withColumn("t", F.timestamp_millis("ts"))
            df = df.withWatermark("t", "10 seconds").dropDuplicatesWithinWatermark(["key"])
            run_query(df.drop("t"), os.path.join(base, "n-out"), os.path.join(base, "n-chk"))

        def ks(batches: int = batches) -> None:
            b = StreamsBuilder()
            b.stream(
                Topic.parquet(
                    "events", data, layout="value", key_field="key", timestamp_field="ts"
                ),
                key_type=str,
                value_type=Event,
            ).deduplicate_by_key(timedelta(seconds=10)).to(
                Topic.parquet("out", fresh(os.path.join(base, "k-out")))
            )
            cfg = StreamsConfig(
                application_id="bench-dedup",
                checkpoint_dir=fresh(os.path.join(base, "k-chk")),
                num_partitions=4,
                max_files_per_trigger=1 if batches > 1 else None,
            )
            StreamsApp(b.build(), cfg, session=spark).run_until_caught_up()

        n_rate = a.rows / timed(native, a.repeat)
        k_rate = a.rows / timed(ks, a.repeat)
        print(
            f"{batches:>2} batch(es): spark-native {n_rate:>10,.0f} rec/s  kspark {k_rate:>10,.0f} rec/s  "
            f"ratio {k_rate / n_rate:.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
