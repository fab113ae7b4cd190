"""Temporal (as-of) stream-table join: kspark's versioned-table join against Spark.

    ./run bench temporal_join [--rows 1000000 --table-keys 10000,100000]

Each table has 50 versions per key. By default it runs the two documented cases, 10,000
and 100,000 table keys, and prints both.

Spark has no streaming as-of join, so kspark is compared with three Spark-native
pipelines over the same Parquet files, in the same session, best of --repeat warm runs:

- passthrough: the stream read and written, no join (the limit);
- latest: a stream-static join against the latest rate per key (fast, wrong semantics);
- range: a stream-static range join against the whole history, ``valid_to = lead(ts)``,
  which gives as-of answers but only when the history is known before the stream starts.

kspark reads the rates as a stream into a versioned table, as Kafka Streams would.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from datetime import timedelta
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import _common as common

from kspark import Materialized, StreamsBuilder, Topic


@dataclasses.dataclass
class Rate:
    key: str
    rate: float
    ts: int


def write_rates(path: str, keys: int, versions: int, span_ms: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = np.random.default_rng(7)
    os.makedirs(path, exist_ok=True)
    n = keys * versions
    key_ids = np.repeat(np.arange(keys), versions)
    # the first version at time 0, where the payments start: each payment finds a rate
    # (a negative timestamp is invalid, and fails the app by default)
    ts = np.tile(np.linspace(0, span_ms, versions).astype("int64"), keys)
    # in time order, as a changelog is: a task takes its partitions' records by their
    # head timestamps, so a topic sorted by key would put one key's versions before the
    # payments and every other key's after them (and the payments would find no rate)
    by_time = np.lexsort((key_ids, ts))
    key_ids, ts = key_ids[by_time], ts[by_time]
    table = pa.table(
        {
            "key": pa.array([f"k{k:07d}" for k in key_ids]),
            "rate": pa.array(rng.random(n) + 0.5),
            "ts": pa.array(ts),
        }
    )
    pq.write_table(table, os.path.join(path, "rates.parquet"))


def convert(p: common.Event, r: Rate | None) -> float:
    return p.value * (r.rate if r is not None else 0.0)


def main() -> None:
    a = common.args(__doc__ or "", extra=[("--table-keys", "10000,100000")])
    spark = common.session(a)
    for keys in [int(k) for k in a.table_keys.split(",")]:
        print(f"-- {keys:,} table keys x 50 versions, {a.rows:,} stream records", flush=True)
        run(spark, a, keys)


def run(spark: Any, a: Any, keys: int) -> None:
    base = common.workdir()
    data, rates = os.path.join(base, "payments"), os.path.join(base, "rates")
    common.write_events(data, a.rows, keys, a.files)
    write_rates(rates, keys, versions=50, span_ms=a.rows * 10)
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    def passthrough() -> None:
        pay = common.read_events(spark, data)
        common.run_query(pay, os.path.join(base, "p-out"), os.path.join(base, "p-chk"))

    def latest() -> None:
        w = Window.partitionBy("key").orderBy(F.col("ts").desc())
        last = spark.read.parquet(rates).withColumn("n", F.row_number().over(w)).filter("n = 1")
        last = last.select(F.col("key").alias("rkey"), "rate")
        pay = common.read_events(spark, data)
        out = pay.join(last, pay["key"] == last["rkey"], "left").select(
            "key", "ts", (F.col("value") * F.coalesce(F.col("rate"), F.lit(0.0))).alias("converted")
        )
        common.run_query(out, os.path.join(base, "l-out"), os.path.join(base, "l-chk"))

    def native() -> None:
        hist = spark.read.parquet(rates).withColumn(
            "valid_to", F.lead("ts").over(Window.partitionBy("key").orderBy("ts"))
        )
        hist = hist.select(
            F.col("key").alias("rkey"), "rate", F.col("ts").alias("valid_from"), "valid_to"
        )
        pay = common.read_events(spark, data)
        cond = (
            (pay["key"] == hist["rkey"])
            & (hist["valid_from"] <= pay["ts"])
            & (hist["valid_to"].isNull() | (pay["ts"] < hist["valid_to"]))
        )
        out = pay.join(hist, cond, "left").select(
            "key", "ts", (F.col("value") * F.coalesce(F.col("rate"), F.lit(0.0))).alias("converted")
        )
        common.run_query(out, os.path.join(base, "n-out"), os.path.join(base, "n-chk"))

    def ks() -> None:
        b = StreamsBuilder()
        table = b.table(
            common.parquet_topic("rates", rates),
            key_type=str,
            value_type=Rate,
            materialized=Materialized.as_versioned("rates", timedelta(days=365)),
        )
        b.stream(
            common.parquet_topic("payments", data), key_type=str, value_type=common.Event
        ).left_join(table, convert, value_type=float).to(
            Topic.parquet("out", common.fresh(os.path.join(base, "k-out")))
        )
        common.run_app(b.build(), spark, "asof", base)

    rates_of = {}
    spark_runs = (
        ("spark passthrough (no join)", passthrough),
        ("spark stream-static join, latest rate", latest),
        ("spark stream-static range join", native),
    )
    for name, fn in spark_runs:
        rates_of[name] = a.rows / common.timed(fn, a.repeat)
        print(f"{name:40s} {rates_of[name]:>10,.0f} rec/s", flush=True)
    k = a.rows / common.timed(ks, a.repeat)
    print(f"{'kspark left_join':40s} {k:>10,.0f} rec/s", flush=True)
    for name, _ in spark_runs:
        print(f"  ratio kspark / {name:29s} {k / rates_of[name]:.3f}")


if __name__ == "__main__":
    main()
