"""Foreign-key table-table join: kspark's three-stage operator against the nearest Spark
pipeline.

    ./run bench fk_join [--rows 200000 --keys 20000 --fkeys 2000]

A left table's changelog of ``--rows`` updates over ``--keys`` keys, each value naming a
key of a right table of ``--fkeys`` keys (its foreign key: ``value % fkeys``), and the
right table's changelog of ``--rows`` updates, joined on the foreign key, inner and left,
in the same session, best of --repeat warm runs:

- Spark, ``foreachBatch`` merge: each micro-batch's latest value per key of both tables
  (``max_by``), the left one's foreign key computed, joined with the right and written,
  as a Spark user keeps an enriched snapshot (it emits each left key's last row of a
  batch, not every change, and no retraction when a foreign key moves);
- kspark: ``KTable.join(other, foreign_key_extractor, joiner)`` / ``left_join`` with
  KIP-213's semantics (every change of either table emits the affected rows, a moved
  foreign key retracts the old row, results never out of order per key).

The rates count both changelogs' updates per second; the ratio is kspark's over Spark's.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(__file__))

import _common as common

from kspark import StreamsBuilder, Topic


def main() -> None:
    a = common.args(__doc__ or "", rows=200_000, extra=[("--fkeys", "2000")])
    fkeys = int(a.fkeys)
    spark = common.session(a)
    base = common.workdir()
    left, right = os.path.join(base, "left"), os.path.join(base, "right")
    common.write_events(left, a.rows, a.keys, a.files, seed=1)
    common.write_events(right, a.rows, fkeys, a.files, seed=2)
    from pyspark.sql import functions as F

    def foreign_key(e: common.Event) -> str:
        return f"k{e.value % fkeys:07d}"

    def joined_value(e: common.Event, c: common.Event | None) -> int:
        return e.value - (c.value if c is not None else 0)

    def spark_merge(how: str) -> None:
        common.merge_join(
            spark,
            left,
            right,
            base,
            how,
            lambda value: F.format_string("k%07d", value % F.lit(fkeys)),
        )

    def ks_join(how: str) -> None:
        b = StreamsBuilder()
        lt = b.table(common.parquet_topic("left", left), key_type=str, value_type=common.Event)
        rt = b.table(common.parquet_topic("right", right), key_type=str, value_type=common.Event)
        joined = (
            lt.join(rt, foreign_key, joined_value, value_type=int)
            if how == "inner"
            else lt.left_join(rt, foreign_key, joined_value, value_type=int)
        )
        joined.to_stream().to(
            Topic.parquet("out", common.fresh(os.path.join(base, f"k-{how}-out")))
        )
        common.run_app(b.build(), spark, f"fkj-{how}", base)

    def count(path: str) -> int:
        return common.count_rows(spark, path)

    print(f"-- {a.rows:,} updates per table, {a.keys:,} left keys, {fkeys:,} right keys")
    for how in ("inner", "left"):
        m = 2 * a.rows / common.timed(lambda how=how: spark_merge(how), a.repeat)
        k = 2 * a.rows / common.timed(lambda how=how: ks_join(how), a.repeat)
        mn = count(os.path.join(base, f"m-{how}-out"))
        kn = count(os.path.join(base, f"k-{how}-out"))
        print(
            f"{how:6s} spark merge {m:>9,.0f} rec/s ({mn:,} rows)   "
            f"kspark {k:>9,.0f} rec/s ({kn:,} rows)   ratio {k / m:.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
