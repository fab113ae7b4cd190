"""Restore: restart-to-first-output of a deduplication app, by state size and by the number
of micro-batches since the state's last snapshot.

    ./run bench restore [--sizes 10000,100000,1000000] [--small 1000] [--since 1,50]
                        [--idle SECONDS] [--conf KEY=VALUE]

For each state size N it loads N distinct keys in one micro-batch, with a snapshot taken
at that commit, and waits until the state store's maintenance has uploaded the snapshot.
Then, for each count B of ``--since``, it runs small micro-batches (``--small`` new keys
each) until B changelog files follow the snapshot, and restarts the app with one more small
file. It reports the wall time of that restart (query start, state load, the batch,
output committed) and what the state store says it did: the load time and the changelog
files it replayed.

kspark's app keeps its executor-local stores in a ``state_dir`` of its own, which outlives
each run, so a restart finds them at the committed version; the bench prints each restart's
restore report (local stores reused, caught up or rebuilt, and the entries that took).

``--idle`` waits before each restart: after a minute, Spark has closed the last run's idle
Python workers and the restart's batch starts new ones, as a restart some time later
does. ``--conf spark.python.daemon.module=pyspark.daemon`` runs the server with pyspark's
own Python daemon instead of kspark's, to compare.

The baseline is a Spark user's own state on the same keys: ``dropDuplicatesWithinWatermark``
on the RocksDB store, with the same snapshot and changelog settings, in the same session.

The script reads only query progress, so it also runs against other kspark versions, to
compare them (numbers: docs/performance.md). It starts its own server: do not run it
next to another Spark JVM.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import glob
import os
import sys
import time
from datetime import timedelta
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
from _common import workdir

from kspark import Deduplicated, StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.runtime.server import EmbeddedServer

PARTITIONS = 4
#: Event time of the load; every later file is 10 s later than the one before, so all keys
#: stay within the 7-day dedup interval (and Spark's watermark) and stay in the state.
T0 = 1_700_000_000_000
SS = "spark.sql.streaming.stateStore."


@dataclasses.dataclass
class Event:
    key: str
    value: int
    ts: int


def write(path: str, name: str, first_key: int, n: int, ts: int) -> None:
    os.makedirs(path, exist_ok=True)
    keys = np.arange(first_key, first_key + n)
    table = pa.table(
        {
            "key": pa.array([f"k{k:08d}" for k in keys]),
            "value": pa.array(keys.astype("int64")),
            "ts": pa.array(np.full(n, ts, dtype="int64") + keys % 1000),
        }
    )
    tmp = os.path.join(path, f".{name}")
    pq.write_table(table, tmp)
    os.replace(tmp, os.path.join(path, name))


def topology(inp: str, out: str) -> Any:
    b = StreamsBuilder()
    (
        b.stream(
            Topic.parquet("events", inp, layout="value", key_field="key", timestamp_field="ts"),
            key_type=str,
            value_type=Event,
        )
        .deduplicate_by_key(timedelta(days=7), Deduplicated.as_("dedup"))
        .to(Topic.parquet("out", out))
    )
    return b.build()


def state_conf(min_deltas: int) -> tuple[tuple[str, str], ...]:
    return ((SS + "minDeltasForSnapshot", str(min_deltas)),)


def wait_snapshots(checkpoint: str, timeout: float = 120.0) -> None:
    """Until every state partition of ``checkpoint`` has an uploaded snapshot (a .zip)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        parts = glob.glob(os.path.join(checkpoint, "state", "*", "[0-9]*"))
        if parts and all(glob.glob(os.path.join(p, "*.zip")) for p in parts):
            return
        time.sleep(0.2)
    raise RuntimeError(f"no snapshot uploaded under {checkpoint} within {timeout}s")


def restore_metrics(progress: list[dict[str, Any]]) -> dict[str, float]:
    """The first state-store batch of a run: load ms, changelog files replayed, batch ms."""
    for p in progress:
        ops = p.get("stateOperators") or []
        if not ops:
            continue
        m: dict[str, float] = {"load_ms": 0.0, "replay_ms": 0.0, "files": 0.0, "bytes": 0.0}
        for op in ops:
            cm = op.get("customMetrics") or {}
            m["load_ms"] += float(cm.get("rocksdbLoadLatencyMs") or 0)
            m["replay_ms"] += float(cm.get("rocksdbReplayChangeLogLatencyMs") or 0)
            m["files"] += float(cm.get("rocksdbNumReplayChangelogFiles") or 0)
            m["bytes"] += float(cm.get("rocksdbBytesCopied") or 0)
        m["batch_ms"] = float((p.get("durationMs") or {}).get("triggerExecution") or 0)
        return m
    return {}


def as_dicts(progress: list[Any]) -> list[dict[str, Any]]:
    from kspark.runtime.metrics import progress_as_dict

    return [progress_as_dict(p) for p in progress]


class KsparkCase:
    name = "kspark"

    def __init__(self, spark: Any, base: str) -> None:
        self.spark, self.inp = spark, f"{base}/ks-in"
        self.topo = topology(self.inp, f"{base}/ks-out")
        self.chk = f"{base}/ks-chk"
        self.state_dir = f"{self.chk}/query/state"
        #: the executor-local stores, kept across the app's restarts
        self.local_dir = f"{base}/ks-local"

    def cfg(self, min_deltas: int) -> StreamsConfig:
        return StreamsConfig(
            application_id="restore",
            checkpoint_dir=self.chk,
            num_partitions=PARTITIONS,
            max_files_per_trigger=1,
            spark_conf=state_conf(min_deltas),
            state_dir=self.local_dir,
        )

    def load(self) -> None:
        app = StreamsApp(self.topo, self.cfg(1), session=self.spark).start()
        try:
            wait_batches(app._query, 1)
            wait_snapshots(app.checkpoint_location)
        finally:
            app.stop()

    def run(self) -> list[dict[str, Any]]:
        app = StreamsApp(self.topo, self.cfg(10_000), session=self.spark)
        app.run_until_caught_up(progress=False)
        for r in app.restores():
            print(
                f"         local stores of {r.store}: {r.reused_tasks} reused, "
                f"{r.caught_up_tasks} caught up ({r.entries_caught_up:,} entries), "
                f"{r.rebuilt_tasks} rebuilt ({r.entries_rebuilt:,} entries)",
                flush=True,
            )
        return app.progress()


class SparkCase:
    name = "spark"

    def __init__(self, spark: Any, base: str) -> None:
        self.spark, self.inp, self.base = spark, f"{base}/sp-in", base
        self.state_dir = f"{base}/sp-chk/state"

    def query(self, min_deltas: int, once: bool) -> Any:
        from pyspark.sql import functions as F

        self.spark.conf.set(
            SS + "providerClass",
            "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider",
        )
        self.spark.conf.set(SS + "rocksdb.changelogCheckpointing.enabled", "true")
        self.spark.conf.set(SS + "minDeltasForSnapshot", str(min_deltas))
        self.spark.conf.set("spark.sql.shuffle.partitions", str(PARTITIONS))
        df = (
            self.spark.readStream.schema("key string, value long, ts long")
            .option("maxFilesPerTrigger", 1)
            .parquet(self.inp)
            .withColumn("t", F.timestamp_millis("ts"))
            .withWatermark("t", "7 days")
            .dropDuplicatesWithinWatermark(["key"])
        )
        w = (
            df.writeStream.format("parquet")
            .option("path", f"{self.base}/sp-out")
            .option("checkpointLocation", f"{self.base}/sp-chk")
        )
        return (w.trigger(availableNow=True) if once else w).start()

    def load(self) -> None:
        q = self.query(1, once=False)
        try:
            wait_batches(q, 1)
            wait_snapshots(f"{self.base}/sp-chk")
        finally:
            q.stop()

    def run(self) -> list[dict[str, Any]]:
        q = self.query(10_000, once=True)
        q.awaitTermination()
        return as_dicts(q.recentProgress)


def changelog_bytes(state_dir: str) -> int:
    return sum(
        os.path.getsize(f) for f in glob.glob(os.path.join(state_dir, "*", "*", "*.changelog"))
    )


def small_batches(progress: list[dict[str, Any]]) -> list[float]:
    """Durations (s) of the batches that read input."""
    from kspark.runtime.metrics import input_rows

    return [
        float(p["durationMs"]["triggerExecution"]) / 1000 for p in progress if input_rows(p) > 0
    ]


def wait_batches(query: Any, n: int) -> None:
    """Until ``query`` has committed ``n`` batches that read input."""
    from kspark.runtime.metrics import input_rows

    t0 = time.monotonic()
    while True:
        progress = as_dicts(query.recentProgress)
        done = [p for p in progress if input_rows(p) > 0]
        if len(done) >= n:
            return
        if time.monotonic() - t0 > 120:
            raise RuntimeError(f"no input batch in 120s; progress: {progress[-2:]}")
        if not query.isActive:
            raise RuntimeError(f"the query stopped: {query.exception()}")
        time.sleep(0.1)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--sizes", default="10000,100000,1000000")
    p.add_argument("--small", type=int, default=1000, help="new keys per small micro-batch")
    p.add_argument("--since", default="1,50", help="micro-batches since the snapshot")
    p.add_argument("--cases", default="kspark,spark", help="which of kspark,spark to run")
    p.add_argument(
        "--idle",
        type=float,
        default=0.0,
        help="seconds to wait before each restart; over 60, Spark has closed the idle "
        "Python workers and the restart's batch starts new ones, as a later restart does",
    )
    p.add_argument(
        "--conf",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="a server setting over the bench's (repeatable)",
    )
    a = p.parse_args()
    sizes = [int(s) for s in a.sizes.split(",")]
    since = sorted(int(s) for s in a.since.split(","))
    server = EmbeddedServer(
        conf={
            "spark.sql.shuffle.partitions": str(PARTITIONS),
            SS + "maintenanceInterval": "1s",
            **dict(c.split("=", 1) for c in a.conf),
        }
    ).start()
    rows: list[tuple[str, int, int, float, dict[str, float]]] = []
    try:
        spark = server.session()
        for n in sizes:
            base = workdir()
            cases = [
                c
                for c in (KsparkCase(spark, base), SparkCase(spark, base))
                if c.name in a.cases.split(",")
            ]
            for case in cases:
                write(case.inp, "0000-load.parquet", 0, n, T0)
                t0 = time.perf_counter()
                case.load()
                print(
                    f"{case.name}: {n:,} keys loaded and snapshotted in {time.perf_counter() - t0:.1f}s",
                    flush=True,
                )
                done, nxt = 0, n
                for b in since:
                    # b - done small batches: then the restart's batch replays b changelogs
                    for i in range(done, b):
                        write(
                            case.inp,
                            f"{1 + i:04d}-small.parquet",
                            nxt,
                            a.small,
                            T0 + 10_000 * (1 + i),
                        )
                        nxt += a.small
                    if b > done:
                        before = changelog_bytes(case.state_dir)
                        times = small_batches(case.run())
                        per = (changelog_bytes(case.state_dir) - before) / max(1, len(times))
                        print(
                            f"{case.name:6} {n:>9,} keys: {len(times)} small batches, "
                            f"{sum(times) / max(1, len(times)):.2f}s each, "
                            f"{per / 1024:,.0f} KiB of changelog each",
                            flush=True,
                        )
                    done = b
                    write(
                        case.inp,
                        f"{1 + done:04d}-restart.parquet",
                        nxt,
                        a.small,
                        T0 + 10_000 * (1 + done),
                    )
                    nxt += a.small
                    done += 1
                    if a.idle:
                        time.sleep(a.idle)  # a restart a while after the last run
                    t0 = time.perf_counter()
                    progress = case.run()
                    wall = time.perf_counter() - t0
                    m = restore_metrics(progress)
                    rows.append((case.name, n, b, wall, m))
                    print(
                        f"{case.name:6} {n:>9,} keys, {b:>2} since snapshot: restart to output {wall:5.2f}s  "
                        f"(state load {m.get('load_ms', 0) / 1000:.2f}s, "
                        f"{m.get('files', 0):.0f} changelog files replayed in {m.get('replay_ms', 0) / 1000:.2f}s, "
                        f"batch {m.get('batch_ms', 0) / 1000:.2f}s)",
                        flush=True,
                    )
    finally:
        # release the session while the server is up: a client whose server is gone
        # retries the release at exit, with backoff, for minutes
        with contextlib.suppress(Exception):
            spark.stop()
        server.stop()
    print(
        "\n| keys | batches since snapshot | kspark restart (load / replayed files) | Spark restart (load / replayed files) | ratio |"
    )
    print("| ---: | ---: | --- | --- | ---: |")
    by = {(c, n, b): (w, m) for c, n, b, w, m in rows}
    if {c for c, *_ in rows} != {"kspark", "spark"}:
        return
    for n in sizes:
        for b in since:
            kw, km = by[("kspark", n, b)]
            sw, sm = by[("spark", n, b)]
            print(
                f"| {n:,} | {b} | {kw:.2f}s ({km.get('load_ms', 0) / 1000:.2f}s / {km.get('files', 0):.0f}) "
                f"| {sw:.2f}s ({sm.get('load_ms', 0) / 1000:.2f}s / {sm.get('files', 0):.0f}) | {kw / sw:.2f} |"
            )


if __name__ == "__main__":
    main()
