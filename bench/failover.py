"""Fail-over: the Spark Connect server is killed (SIGKILL) under a running app with a
versioned table, restarted, and the app resumed from its checkpoint.

    ./run bench failover [--keys 100000]

Measures, for kspark and for a Spark-native stateful query over the same keys
(``dropDuplicatesWithinWatermark`` on RocksDB), the time from the kill to the first
committed micro-batch after the restart, split into the server restart and the query's
resume (restore plus one batch). kspark's app keeps its executor-local stores in a
``state_dir`` that outlives the server, so the resumed tasks find them at the committed
version; the bench prints the resume's restore report. It also measures what kspark adds for reads: a
:class:`kspark.runtime.stores.StoreReplica` keeps answering as-of queries from memory
during the outage; it prints their latency and the replica's refresh time.

With ``--executor-kill``, it measures an executor's loss instead, on
``local-cluster[2,1,1024]`` (two executors in JVMs of their own, each with its own local
disk, ``{executor}`` in ``state_dir``): a dedup app with ``num_standby_replicas=1`` and
Spark's ``dropDuplicatesWithinWatermark`` each hold ``--keys`` keys; once the app's standby copies
are warm, the executor that runs its task 0 is killed (SIGKILL) and new records arrive.
Measured: the time from the kill to the first committed batch that read them, and the
standby promotions it reported. ``--standbys 0`` measures the app without copies.

    ./run bench failover --executor-kill --keys 100000

This bench starts and kills its own server: do not run it next to another Spark JVM.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from datetime import timedelta
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

from _common import args, workdir

from kspark import Materialized, StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.runtime.server import EmbeddedServer


@dataclasses.dataclass
class Rate:
    key: str
    rate: float
    ts: int


@dataclasses.dataclass
class Payment:
    key: str
    value: int
    ts: int


def write_rates(path: str, keys: int, part: int, ts: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    os.makedirs(path, exist_ok=True)
    rng = np.random.default_rng(part)
    pq.write_table(
        pa.table(
            {
                "key": pa.array([f"k{k:07d}" for k in range(keys)]),
                "rate": pa.array(rng.random(keys) + 0.5),
                "ts": pa.array(np.full(keys, ts, dtype="int64")),
            }
        ),
        os.path.join(path, f"rates-{part:03d}.parquet"),
    )


def topology(base: str) -> Any:
    b = StreamsBuilder()
    rates = b.table(
        Topic.parquet(
            "rates", f"{base}/rates", layout="value", key_field="key", timestamp_field="ts"
        ),
        key_type=str,
        value_type=Rate,
        materialized=Materialized.as_versioned("rates", timedelta(days=30)),
    )
    b.stream(
        Topic.parquet(
            "payments", f"{base}/payments", layout="value", key_field="key", timestamp_field="ts"
        ),
        key_type=str,
        value_type=Payment,
    ).left_join(rates, lambda p, r: p.value * (r.rate if r else 0.0), value_type=float).to(
        Topic.parquet("out", f"{base}/out")
    )
    return b.build()


def wait_first_batch(query: Any, after: int) -> int:
    """Wait for a batch after ``after`` that read input (idle triggers report progress
    too); return its id."""
    from kspark.runtime.metrics import input_rows, progress_as_dict

    while True:
        for raw in query.recentProgress:
            p = progress_as_dict(raw)
            if int(p["batchId"]) > after and input_rows(p) > 0:
                return int(p["batchId"])
        if not query.isActive:
            raise RuntimeError(f"the query stopped: {query.exception()}")
        time.sleep(0.05)


def kill_and_resume(server: EmbeddedServer, start: Any, first_batch: int) -> tuple[float, float]:
    """Kill the server, restart it, call ``start(session)`` and wait for its first new
    batch; (server restart seconds, resume seconds)."""
    t0 = time.perf_counter()
    server.kill()
    print("killed; restarting the server", flush=True)
    server.start(same_port=True)
    t1 = time.perf_counter()
    print(f"server up in {t1 - t0:.1f}s; resuming", flush=True)
    query = start(server.session())
    wait_first_batch(query, first_batch)
    t2 = time.perf_counter()
    query.stop()
    return t1 - t0, t2 - t1


def main() -> None:
    if "--executor-kill" in sys.argv:
        sys.argv.remove("--executor-kill")
        from _executor_kill import executor_kill

        executor_kill(args(__doc__ or "", rows=10_000, extra=[("--standbys", "1")]))
        return
    a = args(__doc__ or "", rows=100_000)
    keys = a.keys
    base = workdir()
    server = EmbeddedServer(conf={"spark.sql.shuffle.partitions": "4"}).start()
    try:
        spark = server.session()
        write_rates(f"{base}/rates", keys, 0, 0)
        from _common import write_events

        write_events(f"{base}/payments", a.rows, keys, 2)
        cfg = StreamsConfig(
            application_id="failover",
            checkpoint_dir=f"{base}/chk",
            num_partitions=4,
            state_dir=f"{base}/local-state",
        )
        topo = topology(base)
        StreamsApp(topo, cfg, session=spark).run_until_caught_up(progress=False)

        t0 = time.perf_counter()
        replica = StreamsApp(topo, cfg, session=spark).replica("rates")
        load = time.perf_counter() - t0

        # new data, then a crash while the app runs continuously
        write_rates(f"{base}/rates", keys, 1, 10**9)
        app = StreamsApp(topo, cfg, session=spark)
        query = app.start().query
        last = wait_first_batch(query, 0)
        print(f"app running, batch {last} done", flush=True)
        write_rates(f"{base}/rates", keys, 2, 2 * 10**9)  # pending work at the crash

        resumed: list[StreamsApp] = []

        def start_ks(session: Any) -> Any:
            resumed.append(StreamsApp(topo, cfg, session=session).start())
            return resumed[-1].query

        # the replica answers while the server is down
        restart, resume = kill_and_resume(server, start_ks, last)
        reports = resumed[-1].restores()
        t0 = time.perf_counter()
        n = 10_000
        for i in range(n):
            replica.get(f"k{i % keys:07d}", as_of=5)
        read_us = (time.perf_counter() - t0) / n * 1e6
        spark = server.session()
        replica.use_session(spark)  # the replica's session died with the server
        t0 = time.perf_counter()
        changed = replica.refresh()
        refresh = time.perf_counter() - t0

        # Spark-native: the same number of keys in dropDuplicatesWithinWatermark state
        from pyspark.sql import functions as F

        def native(session: Any) -> Any:
            df = (
                session.readStream.schema("key string, rate double, ts long")
                .parquet(f"{base}/rates")
                .withColumn("t", F.timestamp_millis(F.col("ts") % 10**6))
                .withWatermark("t", "30 days")
                .dropDuplicatesWithinWatermark(["key", "ts"])
            )
            return (
                df.writeStream.format("parquet")
                .option("path", f"{base}/n-out")
                .option("checkpointLocation", f"{base}/n-chk")
                .start()
            )

        q = native(spark)
        nlast = wait_first_batch(q, -1)
        write_rates(f"{base}/rates", keys, 3, 3 * 10**9)
        n_restart, n_resume = kill_and_resume(server, native, nlast)
    finally:
        server.stop()
    print(f"state: {keys:,} keys")
    print(
        f"kspark  kill -> first batch {restart + resume:6.1f}s  (server {restart:.1f}s + resume {resume:.1f}s)"
    )
    print(
        f"spark   kill -> first batch {n_restart + n_resume:6.1f}s  (server {n_restart:.1f}s + resume {n_resume:.1f}s)"
    )
    print(f"ratio kspark / spark resume   {resume / n_resume:.2f}")
    print(
        f"ratio kspark / spark kill -> first batch   {(restart + resume) / (n_restart + n_resume):.2f}"
    )
    for r in reports:
        print(
            f"local stores of {r.store}: {r.reused_tasks} reused, {r.caught_up_tasks} caught up "
            f"({r.entries_caught_up:,} entries), {r.rebuilt_tasks} rebuilt "
            f"({r.entries_rebuilt:,} entries)"
        )
    print(
        f"replica: full load {load:.1f}s, refresh after the outage {refresh:.1f}s ({changed} task states), "
        f"reads during the outage {read_us:.1f} us each"
    )


if __name__ == "__main__":
    main()
