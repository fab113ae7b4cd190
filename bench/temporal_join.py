"""Temporal (as-of) stream-table join: kspark's versioned-table join against the best
Spark-native equivalent.

    ./run bench temporal_join [--rows 1000000 --keys 100]

Spark has no streaming as-of join. What a good Spark user writes instead, when the whole
rate history is known up front, is a stream-static range join: the history as a static
DataFrame with ``valid_to = lead(valid_from)`` per key, joined on key and
``valid_from <= ts < valid_to``. kspark reads the rates as a stream (a versioned table, as
Kafka Streams would), so it also handles rates that arrive while the app runs, which the
baseline cannot. Same Parquet files, same session, best of --repeat warm runs.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from datetime import timedelta

sys.path.insert(0, os.path.dirname(__file__))

from _common import args, fresh, run_query, timed, workdir, write_events

import kspark
from kspark import Materialized, StreamsApp, StreamsBuilder, StreamsConfig, Topic


@dataclasses.dataclass
class Payment:
    key: str
    value: int
    ts: int


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
    ts = np.tile(np.linspace(-1000, span_ms, versions).astype("int64"), keys)
    table = pa.table(
        {
            "key": pa.array([f"k{k:07d}" for k in key_ids]),
            "rate": pa.array(rng.random(n) + 0.5),
            "ts": pa.array(ts),
        }
    )
    pq.write_table(table, os.path.join(path, "rates.parquet"))


def convert(p: Payment, r: Rate | None) -> float:
    return p.value * (r.rate if r is not None else 0.0)


def main() -> None:
    a = args(__doc__ or "")
    base = workdir()
    data, rates = os.path.join(base, "payments"), os.path.join(base, "rates")
    keys = min(a.keys, 1000)
    write_events(data, a.rows, keys, a.files)
    write_rates(rates, keys, versions=50, span_ms=a.rows * 10)
    spark = kspark.connect(a.remote)
    spark.conf.set("spark.sql.shuffle.partitions", "4")
    from pyspark.sql import Window
    from pyspark.sql import functions as F

    def native() -> None:
        hist = spark.read.parquet(rates).withColumn(
            "valid_to", F.lead("ts").over(Window.partitionBy("key").orderBy("ts"))
        )
        hist = hist.select(F.col("key").alias("rkey"), "rate", F.col("ts").alias("valid_from"), "valid_to")
        pay = spark.readStream.schema("key string, value long, ts long").parquet(data)
        cond = (
            (pay["key"] == hist["rkey"])
            & (hist["valid_from"] <= pay["ts"])
            & (hist["valid_to"].isNull() | (pay["ts"] < hist["valid_to"]))
        )
        out = pay.join(hist, cond, "left").select(
            "key", "ts", (F.col("value") * F.coalesce(F.col("rate"), F.lit(0.0))).alias("converted")
        )
        run_query(out, os.path.join(base, "n-out"), os.path.join(base, "n-chk"))

    def ks() -> None:
        b = StreamsBuilder()
        table = b.table(
            Topic.parquet("rates", rates, layout="value", key_field="key", timestamp_field="ts"),
            key_type=str, value_type=Rate,
            materialized=Materialized.as_versioned("rates", timedelta(days=365)),
        )
        b.stream(
            Topic.parquet("payments", data, layout="value", key_field="key", timestamp_field="ts"),
            key_type=str, value_type=Payment,
        ).left_join(table, convert, value_type=float).to(Topic.parquet("out", fresh(os.path.join(base, "k-out"))))
        cfg = StreamsConfig(application_id="bench-asof", checkpoint_dir=fresh(os.path.join(base, "k-chk")), num_partitions=4)
        StreamsApp(b.build(), cfg, session=spark).run_until_caught_up()

    n_rate = a.rows / timed(native, a.repeat)
    print(f"spark-native stream-static range join {n_rate:>10,.0f} rec/s", flush=True)
    k_rate = a.rows / timed(ks, a.repeat)
    print(f"kspark versioned-table left_join      {k_rate:>10,.0f} rec/s", flush=True)
    print(f"ratio kspark / spark-native           {k_rate / n_rate:.3f}")


if __name__ == "__main__":
    main()
