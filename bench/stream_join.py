"""Windowed stream-stream join: kspark's window-join operator against Spark's own.

    ./run bench stream_join [--rows 200000 --keys 20000]

Two streams of ``--rows`` records each (the same keys, timestamps rising with up to 5 s of
disorder) are joined within 10 s of each other, inner and left, in the same session, best
of --repeat warm runs:

- Spark: ``withWatermark`` (5 s) on both streams and a time-range join condition
  (Spark's stream-stream join; its semantics differ: one query-wide watermark, moved
  between micro-batches, closes the windows);
- kspark: ``join`` / ``left_join`` with ``JoinWindows.of_time_difference_and_grace(10 s,
  5 s)``, per-task stream time (Kafka Streams' semantics).

One micro-batch reads everything (``availableNow``), so both emit the left join's unmatched
rows only as far as the end of the input allows: they are not compared row for row.
"""

from __future__ import annotations

import os
import sys
from datetime import timedelta
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import _common as common

from kspark import JoinWindows, StreamsBuilder, Topic


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

    def spark_join(how: str) -> None:
        lt = (
            common.read_events(spark, left)
            .select("key", "value", F.timestamp_millis("ts").alias("lts"))
            .withWatermark("lts", "5 seconds")
        )
        rt = (
            common.read_events(spark, right)
            .select(
                F.col("key").alias("rkey"),
                F.col("value").alias("rvalue"),
                F.timestamp_millis("ts").alias("rts"),
            )
            .withWatermark("rts", "5 seconds")
        )
        cond = (
            (lt["key"] == rt["rkey"])
            & (rt["rts"] >= lt["lts"] - F.expr("INTERVAL 10 SECONDS"))
            & (rt["rts"] <= lt["lts"] + F.expr("INTERVAL 10 SECONDS"))
        )
        out = lt.join(rt, cond, "inner" if how == "inner" else "left_outer").select(
            "key",
            F.greatest("lts", F.coalesce("rts", "lts")).alias("ts"),
            (F.col("value") - F.coalesce(F.col("rvalue"), F.lit(0))).alias("v"),
        )
        common.run_query(
            out, os.path.join(base, f"s-{how}-out"), os.path.join(base, f"s-{how}-chk")
        )

    def ks_join(how: str) -> None:
        b = StreamsBuilder()
        ls = b.stream(common.parquet_topic("left", left), key_type=str, value_type=common.Event)
        rs = b.stream(common.parquet_topic("right", right), key_type=str, value_type=common.Event)
        w = JoinWindows.of_time_difference_and_grace(timedelta(seconds=10), timedelta(seconds=5))
        joined = ls.join(rs, pair, w) if how == "inner" else ls.left_join(rs, pair, w)
        joined.to(Topic.parquet("out", common.fresh(os.path.join(base, f"k-{how}-out"))))
        common.run_app(b.build(), spark, f"ssj-{how}", base)

    def count(path: str) -> int:
        n: Any = spark.read.parquet(path).count()
        return int(n)

    print(f"-- {a.rows:,} records per stream, {a.keys:,} keys, window 10 s", flush=True)
    for how in ("inner", "left"):
        s = 2 * a.rows / common.timed(lambda how=how: spark_join(how), a.repeat)
        k = 2 * a.rows / common.timed(lambda how=how: ks_join(how), a.repeat)
        sn = count(os.path.join(base, f"s-{how}-out"))
        kn = count(os.path.join(base, f"k-{how}-out"))
        print(
            f"{how:6s} spark {s:>10,.0f} rec/s ({sn:,} rows)   kspark {k:>10,.0f} rec/s "
            f"({kn:,} rows)   ratio {k / s:.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
