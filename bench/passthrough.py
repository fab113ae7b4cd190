"""source -> map_values -> sink: kspark against the same pipeline written in PySpark.

    ./run bench passthrough [--rows N]

Prints records/s of each variant and kspark's ratio to each baseline, on the same Parquet
files, in one session, best of --repeat warm runs.
"""

from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import _common as common

from kspark import StreamsBuilder, Topic


def double(e: common.Event) -> int:
    return e.value * 2


def main() -> None:
    a = common.args(__doc__ or "")
    spark, base, data = common.setup(a)
    from pyspark.sql import functions as F

    def native() -> None:
        common.run_query(
            common.read_events(spark, data).select(
                "key", (F.col("value") * 2).alias("value"), "ts"
            ),
            os.path.join(base, "n-out"),
            os.path.join(base, "n-chk"),
        )

    def python_udf() -> None:
        # what a good Spark user writes for a Python function: one vectorized Arrow pass
        def fn(batches: Any) -> Any:
            import pyarrow.compute as pc

            for b in batches:
                yield b.set_column(1, "value", pc.multiply(b.column(1), 2))

        common.run_query(
            common.read_events(spark, data).mapInArrow(fn, common.SCHEMA),
            os.path.join(base, "p-out"),
            os.path.join(base, "p-chk"),
        )

    def ks() -> None:
        b = StreamsBuilder()
        b.stream(
            common.parquet_topic("events", data), key_type=str, value_type=common.Event
        ).map_values(double).to(Topic.parquet("out", common.fresh(os.path.join(base, "k-out"))))
        common.run_app(b.build(), spark, "passthrough", base)

    results = {}
    for name, fn in (("spark-native", native), ("spark-mapInArrow", python_udf), ("kspark", ks)):
        results[name] = a.rows / common.timed(fn, a.repeat)
        print(f"{name:18s} {results[name]:>12,.0f} records/s", flush=True)
    print(f"ratio kspark / spark-native      {results['kspark'] / results['spark-native']:.3f}")
    print(f"ratio kspark / spark-mapInArrow  {results['kspark'] / results['spark-mapInArrow']:.3f}")


if __name__ == "__main__":
    main()
