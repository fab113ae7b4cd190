"""Where the temporal join's time goes, stage by stage, against the passthrough.

    PYTHONPATH=sdk:server_plugin python bench/temporal_join_profile.py [--rows 500000]
        [--table-keys 10000] [--repeat 2] [--explain 1]

Starts its own embedded server with Spark's UI (port 4078), runs ``temporal_join``'s
passthrough and kspark's versioned-table join, and prints for each run the new stages'
task metrics from Spark's REST API (executor run and CPU time, shuffle bytes and
records, Python and GC time), the last run's SQL metrics per operator, and with
``--explain`` the kspark query's physical plan.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
import _common as common
import temporal_join as tj
from _sparkui import SparkUI

import kspark
from kspark import Materialized, StreamsBuilder, Topic
from kspark.runtime.server import EmbeddedServer

UI = SparkUI(4078)


def summarize(name: str, wall: float, before: dict[Any, Any], after: dict[Any, Any]) -> None:
    new = [s for k, s in after.items() if k not in before]
    print(f"== {name}: wall {wall:.2f}s, stages {len(new)}")
    keys = (
        "executorRunTime",
        "executorCpuTime",
        "jvmGcTime",
        "executorDeserializeTime",
        "resultSerializationTime",
        "inputRecords",
        "shuffleReadRecords",
        "shuffleReadBytes",
        "shuffleWriteRecords",
        "shuffleWriteBytes",
        "shuffleWriteTime",
        "shuffleFetchWaitTime",
        "outputRecords",
        "peakExecutionMemory",
    )
    for s in sorted(new, key=lambda s: s["stageId"]):
        m = {k: s.get(k) for k in keys}
        m["executorCpuTime"] = round((s.get("executorCpuTime") or 0) / 1e6)
        m["shuffleWriteTime"] = round((s.get("shuffleWriteTime") or 0) / 1e6)
        span = ""
        if s.get("submissionTime") and s.get("completionTime"):
            span = f"{s['submissionTime'][11:23]}-{s['completionTime'][11:23]}"
        print(f"   stage {s['stageId']} tasks {s['numTasks']} {span} {s['name'][:70]}")
        print(f"      {m}")


def main() -> None:
    a = common.args(__doc__ or "", extra=[("--table-keys", "10000"), ("--explain", "")])
    a.rows = a.rows if a.rows != 1_000_000 else 500_000
    home = tempfile.mkdtemp(prefix="tj-home-")
    srv = EmbeddedServer(
        conf={"spark.ui.enabled": "true", "spark.ui.port": "4078"}, home=home
    ).start()
    try:
        spark = kspark.connect(srv.url)
        spark.conf.set("spark.sql.shuffle.partitions", str(common.PARTITIONS))
        keys = int(a.table_keys)
        base = common.workdir()
        data, rates = os.path.join(base, "payments"), os.path.join(base, "rates")
        common.write_events(data, a.rows, keys, a.files)
        tj.write_rates(rates, keys, versions=50, span_ms=a.rows * 10)

        def passthrough() -> None:
            pay = common.read_events(spark, data)
            common.run_query(pay, os.path.join(base, "p-out"), os.path.join(base, "p-chk"))

        def ks() -> None:
            b = StreamsBuilder()
            table = b.table(
                common.parquet_topic("rates", rates),
                key_type=str,
                value_type=tj.Rate,
                materialized=Materialized.as_versioned("rates", tj.timedelta(days=365)),
            )
            b.stream(
                common.parquet_topic("payments", data), key_type=str, value_type=common.Event
            ).left_join(table, tj.convert, value_type=float).to(
                Topic.parquet("out", common.fresh(os.path.join(base, "k-out")))
            )
            app = common.run_app(b.build(), spark, "asof", base, progress=False)
            if a.explain:
                app.query.explain(True)

        for rep in range(a.repeat):
            for name, fn in (("passthrough", passthrough), ("kspark", ks)):
                before, sb = UI.stages(), UI.sql_ids()
                t0 = time.perf_counter()
                fn()
                wall = time.perf_counter() - t0
                time.sleep(1.0)  # the UI's listener catches up (not a timing)
                summarize(f"{name} (run {rep})", wall, before, UI.stages())
                if rep == a.repeat - 1:
                    UI.sql_dump(sb, plan=bool(os.environ.get("PLAN")))
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
