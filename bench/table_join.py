"""Table-table join: kspark's table-join operator against the nearest Spark pipelines.

    ./run bench table_join [--rows 200000 --keys 20000]

Two tables' changelogs of ``--rows`` updates each (the same keys, timestamps rising with
up to 5 s of disorder) are joined on their key, inner and left, in the same session, best
of --repeat warm runs:

- Spark, stream-stream: ``withWatermark`` (5 s) on both changelogs and an equi-join
  within 10 s of each other, as a Spark user joins two changing feeds (its semantics
  differ: it joins updates, not tables, and forgets a key's value once the watermark
  passes);
- Spark, ``foreachBatch`` merge: each micro-batch's latest value per key of both sides
  (``max_by``), joined and written, as a Spark user keeps a joined snapshot (it emits each
  key's last row of a batch, not every change);
- kspark: ``KTable.join`` / ``left_join`` with Kafka Streams' semantics (every change
  of either table emits the key's joined row, tombstones included).

The rates count both changelogs' updates per second; the ratios are kspark's over each.
"""

from __future__ import annotations

import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import _common as common

from kspark import StreamsBuilder, Topic


def pair(a: common.Event, b: common.Event | None) -> int:
    return a.value - (b.value if b is not None else 0)


def main() -> None:
    a = common.args(__doc__ or "", rows=200_000)
    spark = common.session(a)
    base = common.workdir()
    left, right = os.path.join(base, "left"), os.path.join(base, "right")
    common.write_events(left, a.rows, a.keys, a.files, seed=1)
    common.write_events(right, a.rows, a.keys, a.files, seed=2)
    from pyspark.sql import functions as F

    def sides() -> tuple[Any, Any]:
        lt = common.read_events(spark, left).select(
            "key", "value", F.timestamp_millis("ts").alias("lts")
        )
        rt = common.read_events(spark, right).select(
            F.col("key").alias("rkey"),
            F.col("value").alias("rvalue"),
            F.timestamp_millis("ts").alias("rts"),
        )
        return lt, rt

    def spark_stream_join(how: str) -> None:
        lt, rt = sides()
        lt, rt = lt.withWatermark("lts", "5 seconds"), rt.withWatermark("rts", "5 seconds")
        cond = (
            (lt["key"] == rt["rkey"])
            & (rt["rts"] >= lt["lts"] - F.expr("INTERVAL 10 SECONDS"))
            & (rt["rts"] <= lt["lts"] + F.expr("INTERVAL 10 SECONDS"))
        )
        out = lt.join(rt, cond, "inner" if how == "inner" else "left_outer").select(
            "key", (F.col("value") - F.coalesce(F.col("rvalue"), F.lit(0))).alias("v")
        )
        common.run_query(
            out, os.path.join(base, f"s-{how}-out"), os.path.join(base, f"s-{how}-chk")
        )

    def spark_merge(how: str) -> None:
        common.merge_join(spark, left, right, base, how)

    def ks_join(how: str) -> None:
        b = StreamsBuilder()
        lt = b.table(common.parquet_topic("left", left), key_type=str, value_type=common.Event)
        rt = b.table(common.parquet_topic("right", right), key_type=str, value_type=common.Event)
        joined = (
            lt.join(rt, pair, value_type=int)
            if how == "inner"
            else lt.left_join(rt, pair, value_type=int)
        )
        joined.to_stream().to(
            Topic.parquet("out", common.fresh(os.path.join(base, f"k-{how}-out")))
        )
        common.run_app(b.build(), spark, f"ttj-{how}", base)

    def count(path: str) -> int:
        return common.count_rows(spark, path)

    print(f"-- {a.rows:,} updates per table, {a.keys:,} keys", flush=True)
    for how in ("inner", "left"):
        s = 2 * a.rows / common.timed(lambda how=how: spark_stream_join(how), a.repeat)
        m = 2 * a.rows / common.timed(lambda how=how: spark_merge(how), a.repeat)
        k = 2 * a.rows / common.timed(lambda how=how: ks_join(how), a.repeat)
        sn = count(os.path.join(base, f"s-{how}-out"))
        mn = count(os.path.join(base, f"m-{how}-out"))
        kn = count(os.path.join(base, f"k-{how}-out"))
        print(
            f"{how:6s} spark stream-join {s:>9,.0f} rec/s ({sn:,} rows)   "
            f"spark merge {m:>9,.0f} rec/s ({mn:,} rows)   "
            f"kspark {k:>9,.0f} rec/s ({kn:,} rows)   "
            f"ratio vs stream-join {k / s:.3f}, vs merge {k / m:.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
