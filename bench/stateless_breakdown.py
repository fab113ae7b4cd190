"""Where the time of ``passthrough`` goes: kspark's stateless path taken apart, each part
against Spark SQL on the same Parquet files, in one session, best of --repeat runs.

    ./run bench stateless_breakdown [--rows N]

Variants (records/s, and the ratio to ``spark-native``):

- ``spark-native``: ``select(key, value * 2, ts)`` into a Parquet sink (the baseline);
- ``spark-native-envelope``: the same, written in kspark's output shape (the value as a
  struct, headers, partition, sorted by source position) through ``foreachBatch``;
- ``kspark-none``: a kspark app ``source -> to``: the envelope, the sink, no Python;
- ``kspark-map``: ``source -> map_values(fn) -> to`` (the ``passthrough`` bench);
- ``kspark-filter-expr``: ``source -> filter_expr("value >= 0") -> to``, in the JVM;
- ``kspark-map-query``: the same query as ``kspark-map`` started by hand, without
  ``StreamsApp`` around it (its difference is the app's own start and stop);
- ``kspark-1-record``: the app of ``kspark-map`` on one record: the fixed cost of a run.

Each line also gives the micro-batch's own time (Spark's ``triggerExecution``, summed over
the batches with records): the wall time without the query's start and stop, which a
long-running app pays once.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import _common as common

import kspark
from kspark import StreamsBuilder, StreamsConfig, Topic


def double(e: common.Event) -> int:
    return e.value * 2


def main() -> None:
    a = common.args(__doc__ or "")
    spark, base, data = common.setup(a)
    one = os.path.join(base, "one")
    common.write_events(one, 1, 1, 1)
    from pyspark.sql import functions as F

    from kspark.compiler.compiler import compile_topology
    from kspark.compiler.lowering import build_dataframe, writer_function
    from kspark.runtime.metrics import progress_as_dict

    batch_ms: dict[str, float] = {}

    def note(name: str, progresses: Any) -> None:
        ms = sum(
            p["durationMs"].get("triggerExecution", 0)
            for p in map(progress_as_dict, progresses)
            if p.get("numInputRows")
        )
        batch_ms[name] = min(batch_ms.get(name, float("inf")), ms)

    def native() -> None:
        df = common.read_events(spark, data)
        q = (
            df.select("key", (F.col("value") * 2).alias("value"), "ts")
            .writeStream.format("parquet")
            .option("path", common.fresh(os.path.join(base, "n-out")))
            .option("checkpointLocation", common.fresh(os.path.join(base, "n-chk")))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        note("spark-native", q.recentProgress)

    def native_envelope() -> None:
        out = os.path.join(base, "ne-out")

        def write(df: Any, batch_id: int) -> None:
            (
                df.sortWithinPartitions("ks_seq")
                .drop("ks_seq")
                .write.mode("overwrite")
                .parquet(f"{out}/batch_id={batch_id}")
            )

        df = common.read_events(spark, data)
        q = (
            df.select(
                F.col("key"),
                F.struct("key", (F.col("value") * 2).alias("value"), "ts").alias("value"),
                F.col("ts").alias("timestamp"),
                F.array().cast("array<struct<key:string,value:binary>>").alias("headers"),
                F.expr("pmod(hash(key), 4)").cast("int").alias("partition"),
                F.col("_metadata.row_index").alias("ks_seq"),
            )
            .writeStream.option("checkpointLocation", common.fresh(os.path.join(base, "ne-chk")))
            .foreachBatch(write)
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        note("spark-native-envelope", q.recentProgress)

    def topology(path: str, step: str) -> Any:
        b = StreamsBuilder()
        s = b.stream(common.parquet_topic("events", path), key_type=str, value_type=common.Event)
        if step == "map":
            s = s.map_values(double)  # type: ignore[assignment]
        elif step == "filter_expr":
            s = s.filter_expr("value >= 0")
        s.to(Topic.parquet("out", common.fresh(os.path.join(base, f"k-out-{step}"))))
        return b.build()

    def app(step: str, path: str = data) -> None:
        a = common.run_app(topology(path, step), spark, f"breakdown-{step}", base, progress=False)
        if path == data:
            note(f"kspark-{step.replace('_', '-')}", a.progress())

    def query_only() -> None:
        cfg = StreamsConfig(
            application_id="bench-breakdown-query",
            checkpoint_dir=common.fresh(os.path.join(base, "k-chk-breakdown-query")),
            num_partitions=common.PARTITIONS,
        )
        output = compile_topology(topology(data, "map"), cfg)
        q = (
            build_dataframe(output, spark)
            .writeStream.option("checkpointLocation", os.path.join(cfg.checkpoint_dir, "q"))
            .foreachBatch(writer_function(output, spark))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        note("kspark-map-query", q.recentProgress)

    variants = {
        "spark-native": native,
        "spark-native-envelope": native_envelope,
        "kspark-none": lambda: app("none"),
        "kspark-map": lambda: app("map"),
        "kspark-filter-expr": lambda: app("filter_expr"),
        "kspark-map-query": query_only,
    }
    if not hasattr(kspark.dsl.streams.KStream, "filter_expr"):
        del variants["kspark-filter-expr"]
    results = {}
    for name, fn in variants.items():
        results[name] = a.rows / common.timed(fn, a.repeat)
        ratio = results[name] / results["spark-native"]
        line = f"{name:24s} {results[name]:>12,.0f} records/s  x native {ratio:.3f}"
        batch, native_batch = batch_ms.get(name, 0.0), batch_ms.get("spark-native", 0.0)
        if batch > 0 and native_batch > 0:  # a query's progress is not always kept
            line += f"   batch {batch / 1000:6.2f}s  x native {native_batch / batch:.3f}"
        print(line, flush=True)
    t0 = time.perf_counter()
    app("map", one)
    best = time.perf_counter() - t0
    t0 = time.perf_counter()
    app("map", one)
    best = min(best, time.perf_counter() - t0)
    print(f"{'kspark-1-record':24s} {best:>12.2f} s per run")


if __name__ == "__main__":
    main()
