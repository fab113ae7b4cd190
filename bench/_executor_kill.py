"""``./run bench failover --executor-kill``: an executor's loss on ``local-cluster``, kspark
with standby replicas against Spark's own stateful query (see bench/failover.py)."""

from __future__ import annotations

import glob
import os
import signal
import time
from datetime import timedelta
from typing import Any

import _common as common
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from kspark import StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.runtime import restore, standbys
from kspark.runtime.server import EmbeddedServer

MASTER = "local-cluster[2,1,1024]"


def write_file(path: str, name: str, keys: np.ndarray, ts: int) -> None:
    os.makedirs(path, exist_ok=True)
    table = pa.table(
        {
            "key": pa.array([f"k{k:07d}" for k in keys]),
            "value": pa.array(np.arange(len(keys), dtype="int64")),
            "ts": pa.array(np.full(len(keys), ts, dtype="int64")),
        }
    )
    pq.write_table(table, os.path.join(path, f".{name}"))
    os.replace(os.path.join(path, f".{name}"), os.path.join(path, name))


def wait(what: str, check: Any, query: Any, timeout: float = 600) -> None:
    end = time.monotonic() + timeout
    while not check():
        if not query.isActive:
            raise RuntimeError(f"the query stopped waiting for {what}: {query.exception()}")
        if time.monotonic() > end:
            raise RuntimeError(f"no {what} in {timeout} s")
        time.sleep(0.05)


def batch_after(query: Any, after: int) -> int | None:
    """The first batch after ``after`` that read input, if one has committed."""
    from kspark.runtime.metrics import input_rows, progress_as_dict

    for raw in query.recentProgress:
        p = progress_as_dict(raw)
        if int(p["batchId"]) > after and input_rows(p) > 0:
            return int(p["batchId"])
    return None


def kill_and_time(server: EmbeddedServer, query: Any, victim: str, src: str, rows: int) -> float:
    """Kill executor ``victim``, write new records, and time the first batch that reads
    them."""
    last = max(int(p["batchId"]) for p in query.recentProgress)
    rng = np.random.default_rng(7)
    pid = server.executor_pids()[victim]
    t0 = time.perf_counter()
    os.kill(pid, signal.SIGKILL)
    write_file(src, "1.parquet", rng.integers(0, 10**7, rows), 10**9)
    wait("a batch after the kill", lambda: batch_after(query, last) is not None, query)
    return time.perf_counter() - t0


def executor_kill(a: Any) -> None:
    base = common.workdir()
    keys = np.arange(a.keys)
    server = EmbeddedServer(master=MASTER, conf={"spark.sql.shuffle.partitions": "4"}).start()
    promoted: list[restore.StandbyPromotion] = []
    try:
        spark = server.session()
        spark.conf.set("spark.sql.shuffle.partitions", "4")
        from pyspark.sql import functions as F

        # Spark's own: dropDuplicatesWithinWatermark over the same keys
        n_src = f"{base}/n-in"
        write_file(n_src, "0.parquet", keys, 0)
        df = (
            common.read_events(spark, n_src)
            .withColumn("t", F.timestamp_millis("ts"))
            .withWatermark("t", "30 days")
            .dropDuplicatesWithinWatermark(["key"])
            .drop("t")
        )
        q = (
            df.writeStream.format("parquet")
            .option("path", f"{base}/n-out")
            .option("checkpointLocation", f"{base}/n-chk")
            .start()
        )
        wait("Spark's first batch", lambda: batch_after(q, -1) is not None, q)
        victim = min(server.executor_pids(), key=int)
        native = kill_and_time(server, q, victim, n_src, a.rows)
        q.stop()

        # kspark: dedup, with standby copies
        k_src = f"{base}/k-in"
        write_file(k_src, "0.parquet", keys, 0)
        b = StreamsBuilder()
        b.stream(
            common.parquet_topic("events", k_src), key_type=str, value_type=common.Event
        ).deduplicate_by_key(timedelta(days=30)).to(Topic.parquet("out", f"{base}/k-out"))
        cfg = StreamsConfig(
            application_id="executor-failover",
            checkpoint_dir=f"{base}/k-chk",
            num_partitions=4,
            state_dir=f"{base}/local/{{executor}}",
            num_standby_replicas=int(a.standbys),
        )

        class Listener(restore.StateRestoreListener):
            def on_standby_promoted(self, store: str, p: restore.StandbyPromotion) -> None:
                promoted.append(p)

        app = StreamsApp(b.build(), cfg, session=spark)
        app.restore_listener = Listener()
        query = app.start().query
        wait("kspark's first batch", lambda: batch_after(query, -1) is not None, query)
        keeper = standbys.keeper(app)
        t_warm = time.perf_counter()
        if keeper is not None:
            wait("warm copies", keeper.covered, query)
            victim = keeper.disk_of_task(0).rsplit("executor-", 1)[1]
        else:
            [task0] = glob.glob(f"{base}/local/executor-*/executor-failover/*/*/task-0")
            victim = task0.split("/local/executor-", 1)[1].split("/", 1)[0]
        warm = time.perf_counter() - t_warm
        ks = kill_and_time(server, query, victim, k_src, a.rows)
        app.stop()
    finally:
        server.stop()
    print(f"state: {a.keys:,} keys on {MASTER}; {a.rows:,} new records after the kill")
    print(f"spark   executor kill -> first batch with the new records {native:6.1f}s")
    print(
        f"kspark  executor kill -> first batch with the new records {ks:6.1f}s "
        f"({a.standbys} standby; copies warm {warm:.1f}s after the first batch)"
    )
    print(f"ratio kspark / spark   {ks / native:.2f}")
    for p in promoted:
        print(
            f"promoted: {p.tasks} task(s) of {p.store} in batch {p.batch_id}, "
            f"{p.entries_caught_up:,} entries caught up"
        )
    if not promoted:
        print("promoted: none")
