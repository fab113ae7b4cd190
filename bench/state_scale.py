"""State scale: the time of a small micro-batch of a deduplication app, by state size.

    ./run bench state_scale [--sizes 200000,2000000,8000000] [--small 20000] [--batches 6]

For each state size N, one micro-batch loads N distinct keys; then ``--batches`` small
micro-batches of ``--small`` records each follow, half of them new keys and half repeats
of loaded keys, all within a 7-day deduplication interval (so the state only grows). The
table shows the median wall time of the small batches (Spark's ``triggerExecution``) for
kspark's ``deduplicate_by_key`` and for Spark's own ``dropDuplicatesWithinWatermark`` on
the same files in the same session, and how the time grows from the smallest state.

A micro-batch whose cost grows with the state, not with its records, shows here as a
kspark column that grows faster than Spark's.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import statistics
import sys
import time
from datetime import timedelta
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _common import fresh, workdir

import kspark
from kspark import StreamsApp, StreamsBuilder, StreamsConfig, Topic

PARTITIONS = 4
T0 = 1_700_000_000_000
WEEK = timedelta(days=7)


@dataclasses.dataclass
class Event:
    key: str
    value: int
    ts: int


def _write(path: str, index: int, keys: np.ndarray[Any, Any], ts: int) -> None:
    table = pa.table(
        {
            "key": pa.array([f"k{k:09d}" for k in keys.tolist()]),
            "value": pa.array(np.arange(len(keys), dtype="int64")),
            "ts": pa.array(np.full(len(keys), ts, dtype="int64")),
        }
    )
    f = os.path.join(path, f"part-{index:04d}.parquet")
    pq.write_table(table, f)
    # the file source takes files in modification-time order, one per trigger
    os.utime(f, (1_000_000 + index, 1_000_000 + index))


def write_data(path: str, n: int, small: int, batches: int, seed: int = 3) -> None:
    rng = np.random.default_rng(seed)
    os.makedirs(path, exist_ok=True)
    _write(path, 0, np.arange(n), T0)
    nxt = n
    for b in range(1, batches + 1):
        new = np.arange(nxt, nxt + small // 2)
        nxt += small // 2
        old = rng.integers(0, n, small - small // 2)
        keys = np.concatenate([new, old])
        rng.shuffle(keys)
        _write(path, b, keys, T0 + b * 10_000)


def _rows(p: dict[str, Any]) -> int:
    """A progress's input rows (the client's progress has them per source)."""
    return int(p.get("numInputRows") or sum(s.get("numInputRows") or 0 for s in p["sources"]))


def small_batch_ms(query: Any, batches: int) -> float:
    """Median ``triggerExecution`` of the batches after the load."""
    from kspark.runtime.metrics import progress_as_dict

    times = [
        p["durationMs"]["triggerExecution"]
        for p in map(progress_as_dict, query.recentProgress)
        if _rows(p) > 0 and p["batchId"] >= 1
    ]
    if len(times) < batches:
        raise RuntimeError(f"expected {batches} small batches, saw {len(times)}")
    return float(statistics.median(times[-batches:]))


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", default="200000,2000000,8000000")
    p.add_argument("--small", type=int, default=20_000)
    p.add_argument("--batches", type=int, default=6)
    p.add_argument("--remote", default=None)
    a = p.parse_args()
    spark = kspark.connect(a.remote)
    spark.conf.set("spark.sql.shuffle.partitions", str(PARTITIONS))
    spark.conf.set(
        "spark.sql.streaming.stateStore.providerClass",
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
    )
    spark.conf.set("spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled", "true")
    from pyspark.sql import functions as F

    base = workdir()
    rows = []
    for n in [int(s) for s in a.sizes.split(",")]:
        data = fresh(os.path.join(base, f"in-{n}"))
        write_data(data, n, a.small, a.batches)

        t0 = time.perf_counter()
        df = (
            spark.readStream.schema("key string, value long, ts long")
            .option("maxFilesPerTrigger", 1)
            .parquet(data)
            .withColumn("t", F.timestamp_millis("ts"))
            .withWatermark("t", "7 days")
            .dropDuplicatesWithinWatermark(["key"])
            .drop("t")
        )
        q = (
            df.writeStream.format("parquet")
            .option("path", fresh(os.path.join(base, "n-out")))
            .option("checkpointLocation", fresh(os.path.join(base, "n-chk")))
            .trigger(availableNow=True)
            .start()
        )
        q.awaitTermination()
        native_total = time.perf_counter() - t0
        native = small_batch_ms(q, a.batches)

        t0 = time.perf_counter()
        b = StreamsBuilder()
        b.stream(
            Topic.parquet("events", data, layout="value", key_field="key", timestamp_field="ts"),
            key_type=str,
            value_type=Event,
        ).deduplicate_by_key(WEEK).to(Topic.parquet("out", fresh(os.path.join(base, "k-out"))))
        app = StreamsApp(
            b.build(),
            StreamsConfig(
                application_id=f"bench-scale-{n}",
                checkpoint_dir=fresh(os.path.join(base, "k-chk")),
                num_partitions=PARTITIONS,
                max_files_per_trigger=1,
            ),
            session=spark,
        )
        app.run_until_caught_up(progress=False)
        ks_total = time.perf_counter() - t0
        ks = small_batch_ms(app.query, a.batches)
        rows.append((n, native, ks, native_total, ks_total))
        print(
            f"{n:>10,} keys: small batch native {native / 1000:.2f}s "
            f"kspark {ks / 1000:.2f}s (x{ks / native:.2f}); "
            f"whole run native {native_total:.0f}s kspark {ks_total:.0f}s",
            flush=True,
        )

    print()
    print("| keys in state | Spark native | kspark | kspark / native time |")
    print("| ---: | ---: | ---: | ---: |")
    for n, nat, ks, _, _ in rows:
        print(f"| {n:,} | {nat / 1000:.2f}s | {ks / 1000:.2f}s | {ks / nat:.2f} |")
    first, last = rows[0], rows[-1]
    print(
        f"growth from {first[0]:,} to {last[0]:,} keys: "
        f"native x{last[1] / first[1]:.2f}, kspark x{last[2] / first[2]:.2f}"
    )


if __name__ == "__main__":
    main()
