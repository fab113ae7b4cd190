"""The cost of per-record exception handling: the same map_values with the default handler
(no failures), with LogAndContinue at a 1% failure rate, and in plain PySpark (mapInArrow,
no handling).

    ./run bench handler_overhead [--rows N]
"""

from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import _common as common

from kspark import StreamsBuilder, Topic
from kspark.errors import LogAndContinueProcessingExceptionHandler


def scale(e: common.Event) -> int:
    return e.value * 2


def scale_or_fail(e: common.Event) -> int:
    if e.value % 100 == 0:  # 1% of the values
        raise ValueError(f"bad value {e.value}")
    return e.value * 2


def main() -> None:
    a = common.args(__doc__ or "")
    spark, base, data = common.setup(a)
    logging_off = {"spark.sql.execution.pyspark.udf.faulthandler.enabled": "false"}

    def plain() -> None:
        def fn(batches: Any) -> Any:
            import pyarrow as pa

            for b in batches:
                rows = b.to_pylist()
                out = [{"key": r["key"], "value": r["value"] * 2, "ts": r["ts"]} for r in rows]
                yield pa.RecordBatch.from_pylist(out, schema=b.schema)

        common.run_query(
            common.read_events(spark, data).mapInArrow(fn, common.SCHEMA),
            os.path.join(base, "p-out"),
            os.path.join(base, "p-chk"),
        )

    def ks(fn: Any, handler: Any) -> None:
        b = StreamsBuilder()
        b.stream(
            common.parquet_topic("events", data), key_type=str, value_type=common.Event
        ).map_values(fn).to(Topic.parquet("out", common.fresh(os.path.join(base, "k-out"))))
        common.run_app(
            b.build(),
            spark,
            "handler",
            base,
            processing_exception_handler=handler,
            spark_conf=logging_off,
        )

    plain_rate = a.rows / common.timed(plain, a.repeat)
    default_rate = a.rows / common.timed(lambda: ks(scale, None), a.repeat)
    cont_rate = a.rows / common.timed(
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
