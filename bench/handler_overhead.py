"""The cost of per-record exception handling: the same map_values with the default handler
(no failures), with LogAndContinue at a 1% failure rate, and in plain PySpark (mapInArrow,
no handling).

    ./run bench handler_overhead [--rows N]
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
from kspark.errors import LogAndContinueProcessingExceptionHandler


@dataclasses.dataclass
class Event:
    key: str
    value: int
    ts: int


def scale(e: Event) -> int:
    return e.value * 2


def scale_or_fail(e: Event) -> int:
    if e.value % 100 == 0:  # 1% of the values
        raise ValueError(f"bad value {e.value}")
    return e.value * 2


def main() -> None:
    a = args(__doc__ or "")
    base = workdir()
    data = os.path.join(base, "in")
    write_events(data, a.rows, a.keys, a.files)
    spark = kspark.connect(a.remote)
    spark.conf.set("spark.sql.shuffle.partitions", "4")
    logging_off = {"spark.sql.execution.pyspark.udf.faulthandler.enabled": "false"}

    def plain() -> None:
        def fn(batches: Any) -> Any:
            import pyarrow as pa

            for b in batches:
                rows = b.to_pylist()
                out = [{"key": r["key"], "value": r["value"] * 2, "ts": r["ts"]} for r in rows]
                yield pa.RecordBatch.from_pylist(out, schema=b.schema)

        df = spark.readStream.schema("key string, value long, ts long").parquet(data)
        run_query(
            df.mapInArrow(fn, "key string, value long, ts long"),
            os.path.join(base, "p-out"),
            os.path.join(base, "p-chk"),
        )

    def ks(fn: Any, handler: Any) -> None:
        b = StreamsBuilder()
        b.stream(
            Topic.parquet("events", data, layout="value", key_field="key", timestamp_field="ts"),
            key_type=str,
            value_type=Event,
        ).map_values(fn).to(Topic.parquet("out", fresh(os.path.join(base, "k-out"))))
        cfg = StreamsConfig(
            application_id="bench-handler",
            checkpoint_dir=fresh(os.path.join(base, "k-chk")),
            num_partitions=4,
            processing_exception_handler=handler,
            spark_conf=logging_off,
        )
        StreamsApp(b.build(), cfg, session=spark).run_until_caught_up()

    plain_rate = a.rows / timed(plain, a.repeat)
    default_rate = a.rows / timed(lambda: ks(scale, None), a.repeat)
    cont_rate = a.rows / timed(
        lambda: ks(scale_or_fail, LogAndContinueProcessingExceptionHandler), a.repeat
    )
    print(f"plain PySpark (row loop, no handling) {plain_rate:>10,.0f} rec/s")
    print(
        f"kspark, default handler              {default_rate:>10,.0f} rec/s  ratio {default_rate / plain_rate:.3f}"
    )
    print(
        f"kspark, LogAndContinue at 1% failing {cont_rate:>10,.0f} rec/s  ratio {cont_rate / plain_rate:.3f}"
    )


if __name__ == "__main__":
    main()
