"""Shared helpers of the benchmarks: data, timing, the session and the kspark app."""

from __future__ import annotations

import argparse
import dataclasses
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

import kspark
from kspark import StreamsApp, StreamsConfig, Topic, Topology

#: The Spark schema of :func:`write_events`' files.
SCHEMA = "key string, value long, ts long"

#: Tasks of the kspark apps and shuffle partitions of the Spark queries alike.
PARTITIONS = 4


@dataclasses.dataclass
class Event:
    """A row of :func:`write_events`' files, as kspark reads it."""

    key: str
    value: int
    ts: int


def args(
    description: str, rows: int = 1_000_000, extra: list[tuple[str, str]] | None = None
) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=description)
    for flag, default in extra or []:
        p.add_argument(flag, default=default)
    p.add_argument("--rows", type=int, default=rows)
    p.add_argument("--keys", type=int, default=100_000)
    p.add_argument("--files", type=int, default=10)
    p.add_argument("--repeat", type=int, default=2, help="timed runs per variant (best is kept)")
    p.add_argument("--remote", default=None, help="sc://host:port (default: embedded server)")
    return p.parse_args()


def session(a: argparse.Namespace) -> Any:
    """The Spark Connect session of ``--remote`` (default: the embedded server), with the
    kspark apps' number of partitions as Spark's shuffle partitions."""
    spark = kspark.connect(a.remote)
    spark.conf.set("spark.sql.shuffle.partitions", str(PARTITIONS))
    # experiments: $KSPARK_BENCH_CONF="k=v k2=v2" sets session confs for every variant
    for kv in os.environ.get("KSPARK_BENCH_CONF", "").split():
        k, _, v = kv.partition("=")
        spark.conf.set(k, v)
    return spark


def setup(a: argparse.Namespace, **events: Any) -> tuple[Any, str, str]:
    """The session, a fresh work directory, and in it the folder ``in`` of ``--rows``
    events over ``--keys`` keys in ``--files`` files (``events``: more arguments of
    :func:`write_events`)."""
    base = workdir()
    data = os.path.join(base, "in")
    write_events(data, a.rows, a.keys, a.files, **events)
    return session(a), base, data


def parquet_topic(name: str, path: str) -> Topic:
    """Parquet files as a kspark topic whose values are the rows, keyed by their ``key``
    column and timed by their ``ts`` column (:func:`write_events`' files, for one)."""
    return Topic.parquet(name, path, layout="value", key_field="key", timestamp_field="ts")


def read_events(spark: Any, path: str, **options: Any) -> Any:
    """:func:`write_events`' files as Spark's streaming DataFrame (``options``: the
    reader's, such as ``maxFilesPerTrigger``)."""
    reader = spark.readStream.schema(SCHEMA)
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.parquet(path)


def run_app(
    topology: Topology,
    spark: Any,
    name: str,
    base: str,
    *,
    progress: Any = "auto",
    **config: Any,
) -> StreamsApp:
    """Runs ``topology`` until it has caught up, from a fresh checkpoint under
    ``base``, as app ``bench-<name>`` (``config``: more :class:`StreamsConfig` options)."""
    cfg = StreamsConfig(
        application_id=f"bench-{name}",
        # a new folder for every run: a stopped query's state maintenance may still write
        # into its old one
        checkpoint_dir=tempfile.mkdtemp(prefix=f"k-chk-{name}-", dir=base),
        num_partitions=PARTITIONS,
        **config,
    )
    app = StreamsApp(topology, cfg, session=spark)
    app.run_until_caught_up(progress=progress)
    return app


def workdir() -> str:
    return tempfile.mkdtemp(prefix="kspark-bench-")


def write_events(
    path: str, rows: int, keys: int, files: int, dup_rate: float = 0.0, seed: int = 1
) -> None:
    """Parquet files of (key, value, timestamp): value layout for kspark, plain for Spark."""
    import numpy as np

    rng = np.random.default_rng(seed)
    os.makedirs(path, exist_ok=True)
    per = rows // files
    for f in range(files):
        n = per if f < files - 1 else rows - per * (files - 1)
        base = f * per
        ts = (np.arange(base, base + n) * 10 + rng.integers(0, 5000, n)).astype("int64")
        key_ids = rng.integers(0, keys, n)
        if dup_rate:
            dup = rng.random(n) < dup_rate
            # a duplicate repeats an earlier record's key, a moment later
            src = np.maximum(np.arange(n) - rng.integers(1, 50, n), 0)
            key_ids = np.where(dup, key_ids[src], key_ids)
        table = pa.table(
            {
                "key": pa.array([f"k{k:07d}" for k in key_ids]),
                "value": pa.array(rng.integers(0, 1_000_000, n).astype("int64")),
                "ts": pa.array(ts),
            }
        )
        pq.write_table(table, os.path.join(path, f"part-{f:04d}.parquet"))


def timed(fn: Callable[[], Any], repeat: int) -> float:
    """Best wall time of ``repeat`` runs (the first run also warms the workers)."""
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best


def fresh(path: str) -> str:
    shutil.rmtree(path, ignore_errors=True)
    return path


def run_query(df: Any, out: str, chk: str) -> None:
    q = (
        df.writeStream.format("parquet")
        .option("path", fresh(out))
        .option("checkpointLocation", fresh(chk))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()


def merge_join(
    spark: Any,
    left: str,
    right: str,
    base: str,
    how: str,
    join_column: Callable[[Any], Any] | None = None,
) -> str:
    """Spark's nearest pipeline to a table-table join, as a Spark user keeps a joined
    snapshot: a ``foreachBatch`` that takes each micro-batch's latest value per key of both
    changelogs (``max_by``), joins them (on the left key, or on ``join_column(value)`` of
    the left value for a foreign key) and appends ``left value - right value``. Returns the
    output folder."""
    from pyspark.sql import functions as F

    out_path = fresh(os.path.join(base, f"m-{how}-out"))

    def merge(df: Any, batch_id: int) -> None:
        latest = df.groupBy("key", "side").agg(
            F.max_by("value", "ts").alias("value"), F.max("ts").alias("ts")
        )
        on = F.col("key") if join_column is None else join_column(F.col("value"))
        lt = latest.filter("side = 0").select("key", "value", on.alias("jkey"))
        rt = latest.filter("side = 1").select(
            F.col("key").alias("rkey"), F.col("value").alias("rvalue")
        )
        joined = lt.join(rt, lt["jkey"] == rt["rkey"], "inner" if how == "inner" else "left")
        joined.select(
            "key", (F.col("value") - F.coalesce(F.col("rvalue"), F.lit(0))).alias("v")
        ).write.mode("append").parquet(out_path)

    both = (
        read_events(spark, left)
        .withColumn("side", F.lit(0))
        .unionByName(read_events(spark, right).withColumn("side", F.lit(1)))
    )
    q = (
        both.writeStream.foreachBatch(merge)
        .option("checkpointLocation", fresh(os.path.join(base, f"m-{how}-chk")))
        .trigger(availableNow=True)
        .start()
    )
    q.awaitTermination()
    return out_path


def count_rows(spark: Any, path: str) -> int:
    """The rows a bench wrote to the parquet folder ``path``."""
    n: Any = spark.read.parquet(path).count()
    return int(n)
