"""source -> map_values -> sink: kspark against the same pipeline written in PySpark.

    ./run bench passthrough [--rows N]

Prints records/s of each variant and kspark's ratio to each baseline, on the same Parquet
files, in one session, best of --repeat warm runs.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

from _common import args, fresh, run_query, timed, workdir, write_events

import kspark
from kspark import StreamsApp, StreamsBuilder, StreamsConfig, Topic


@dataclasses.dataclass
class Event:
    key: str
    value: int
    ts: int


def double(e: Event) -> int:
    return e.value * 2


def main() -> None:
    a = args(__doc__ or "")
    base = workdir()
    data = os.path.join(base, "in")
    write_events(data, a.rows, a.keys, a.files)
    spark = kspark.connect(a.remote)
    spark.conf.set("spark.sql.shuffle.partitions", "4")
    from pyspark.sql import functions as F

    def native() -> None:
        df = spark.readStream.schema("key string, value long, ts long").parquet(data)
        run_query(
            df.select("key", (F.col("value") * 2).alias("value"), "ts"),
            os.path.join(base, "n-out"),
            os.path.join(base, "n-chk"),
        )

    def python_udf() -> None:
        # what a good Spark user writes for a Python function: one vectorized Arrow pass
        def fn(batches: Any) -> Any:
            import pyarrow.compute as pc

            for b in batches:
                yield b.set_column(1, "value", pc.multiply(b.column(1), 2))

        df = spark.readStream.schema("key string, value long, ts long").parquet(data)
        run_query(
            df.mapInArrow(fn, "key string, value long, ts long"),
            os.path.join(base, "p-out"),
            os.path.join(base, "p-chk"),
        )

    def ks() -> None:
        b = StreamsBuilder()
        b.stream(
            Topic.parquet("events", data, layout="value", key_field="key", timestamp_field="ts"),
            key_type=str,
            value_type=Event,
        ).map_values(double).to(Topic.parquet("out", fresh(os.path.join(base, "k-out"))))
        cfg = StreamsConfig(
            application_id="bench-passthrough",
            checkpoint_dir=fresh(os.path.join(base, "k-chk")),
            num_partitions=4,
        )
        StreamsApp(b.build(), cfg, session=spark).run_until_caught_up()

    results = {}
    for name, fn in (("spark-native", native), ("spark-mapInArrow", python_udf), ("kspark", ks)):
        results[name] = a.rows / timed(fn, a.repeat)
        print(f"{name:18s} {results[name]:>12,.0f} records/s", flush=True)
    print(f"ratio kspark / spark-native      {results['kspark'] / results['spark-native']:.3f}")
    print(f"ratio kspark / spark-mapInArrow  {results['kspark'] / results['spark-mapInArrow']:.3f}")


if __name__ == "__main__":
    main()
