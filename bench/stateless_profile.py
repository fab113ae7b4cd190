"""Where a stateless app's time goes, stage by stage, against Spark SQL.

    PYTHONPATH=sdk:server_plugin python bench/stateless_profile.py [--rows N] [--repeat R]
        [--variants native,native10,none,map,map10,map:nosize]  [--explain 1]
    JFR=1 ...   also records a Java Flight Recording of each variant's last run in the temp folder

Starts its own embedded server with Spark's UI (port 4077) and reads, for each run, the
new stages' task metrics (executor run and CPU time) and the last run's SQL metrics
(per operator: codegen stages, the Python pass's times and bytes) from Spark's REST API,
and the server's JVM and Python CPU time. Variants: ``native`` (Spark SQL into a Parquet
sink), ``none`` (a kspark app ``source -> to``), ``map`` (``source -> map_values -> to``,
the ``passthrough`` bench), ``native10``/``map10`` (one file per micro-batch: ten
batches); ``:nosize`` sets ``spark.sql.execution.arrow.maxBytesPerBatch`` to its maximum,
which turns off Spark's per-row size check of Arrow batches (docs/design/stateless-chain.md).
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
import _common as common
from _sparkui import SparkUI

import kspark
from kspark import StreamsBuilder, Topic
from kspark.runtime.metrics import progress_as_dict
from kspark.runtime.server import EmbeddedServer

UI = SparkUI(4077)


def cpu_by_kind(root: int) -> dict[str, float]:
    import psutil

    out: dict[str, float] = {"jvm": 0.0, "python": 0.0}
    try:
        procs = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
    except psutil.Error:
        return out
    for p in procs:
        try:
            t = p.cpu_times()
            kind = "jvm" if "java" in p.name() else "python"
            out[kind] += t.user + t.system
        except psutil.Error:
            pass
    return out


def double(e: common.Event) -> int:
    return e.value * 2


def summarize(
    name: str, wall: float, progresses: list[dict[str, Any]], before: dict, after: dict
) -> None:
    dur: dict[str, int] = {}
    nb = 0
    for p in progresses:
        if not p.get("numInputRows"):
            continue
        nb += 1
        for k, v in p["durationMs"].items():
            dur[k] = dur.get(k, 0) + v
    new = [s for k, s in after.items() if k not in before]
    run = sum(s["executorRunTime"] for s in new)
    cpu = sum(s["executorCpuTime"] for s in new) / 1e6
    nt = sum(s["numTasks"] for s in new)
    print(f"== {name}: wall {wall:.2f}s, batches with rows {nb}, progress durations {dur}")
    print(f"   stages {len(new)} tasks {nt} executorRunTime {run} ms cpu {cpu:.0f} ms")
    for s in sorted(new, key=lambda s: s["stageId"]):
        print(
            f"     stage {s['stageId']} tasks {s['numTasks']} run {s['executorRunTime']} cpu {s['executorCpuTime'] / 1e6:.0f}"
            f" in {s.get('inputRecords')} out {s.get('outputRecords')} shufW {s.get('shuffleWriteBytes')}"
            f" sub {s.get('submissionTime', '')[11:23]} done {s.get('completionTime', '')[11:23]} {s['name'][:60]}"
        )


def main() -> None:
    a = common.args(
        "probe", extra=[("--variants", "native,native10,none,map,map10"), ("--explain", "")]
    )
    home = tempfile.mkdtemp(prefix="sl-home-")
    srv = EmbeddedServer(
        conf={"spark.ui.enabled": "true", "spark.ui.port": "4077"}, home=home
    ).start()
    try:
        spark = kspark.connect(srv.url)
        spark.conf.set("spark.sql.shuffle.partitions", "4")
        base = common.workdir()
        data = os.path.join(base, "in")
        common.write_events(data, a.rows, a.keys, a.files)
        from pyspark.sql import functions as F

        def native(maxf: int | None) -> list[dict[str, Any]]:
            opts = {"maxFilesPerTrigger": maxf} if maxf else {}
            q = (
                common.read_events(spark, data, **opts)
                .select("key", (F.col("value") * 2).alias("value"), "ts")
                .writeStream.format("parquet")
                .option("path", common.fresh(os.path.join(base, "n-out")))
                .option("checkpointLocation", common.fresh(os.path.join(base, "n-chk")))
                .trigger(availableNow=True)
                .start()
            )
            q.awaitTermination()
            return [progress_as_dict(p) for p in q.recentProgress]

        def ks(step: str, maxf: int | None) -> list[dict[str, Any]]:
            b = StreamsBuilder()
            s = b.stream(
                common.parquet_topic("events", data), key_type=str, value_type=common.Event
            )
            if step == "map":
                s = s.map_values(double)  # type: ignore[assignment]
            s.to(Topic.parquet("out", common.fresh(os.path.join(base, f"k-out-{step}"))))
            extra = {"max_files_per_trigger": maxf} if maxf else {}
            app = common.run_app(b.build(), spark, f"probe-{step}", base, progress=False, **extra)
            if a.explain:
                app.query.explain(True)
            return app.progress()

        variants = {
            "native": lambda: native(None),
            "native10": lambda: native(1),
            "none": lambda: ks("none", None),
            "map": lambda: ks("map", None),
            "map10": lambda: ks("map", 1),
        }
        for rep in range(a.repeat):
            for name in a.variants.split(","):
                before = UI.stages()
                sb = UI.sql_ids()
                c0 = cpu_by_kind(srv.pid)
                t0 = time.perf_counter()
                vname, _, knock = name.partition(":")
                spark.conf.set(
                    "spark.sql.execution.arrow.maxBytesPerBatch",
                    "2147483647" if "nosize" in knock else "67108864b",
                )
                jfr = os.environ.get("JFR") and rep == a.repeat - 1
                if jfr:
                    import subprocess

                    subprocess.run(
                        [
                            "jcmd",
                            str(srv.pid),
                            "JFR.start",
                            "name=sl",
                            "settings=profile",
                            f"filename={os.path.join(tempfile.gettempdir(), name.replace(':', '_'))}.jfr",
                        ],
                        check=True,
                        capture_output=True,
                    )
                prog = variants[vname]()
                if jfr:
                    subprocess.run(
                        ["jcmd", str(srv.pid), "JFR.stop", "name=sl"],
                        check=True,
                        capture_output=True,
                    )
                wall = time.perf_counter() - t0
                c1 = cpu_by_kind(srv.pid)
                print(
                    f"   CPU jvm {c1['jvm'] - c0['jvm']:.2f}s python {c1['python'] - c0['python']:.2f}s (dead workers missed)"
                )
                time.sleep(1.0)  # let the UI's listener catch up
                summarize(f"{name} (run {rep})", wall, prog, before, UI.stages())
                if rep == a.repeat - 1:
                    UI.sql_dump(sb)
    finally:
        srv.stop()


if __name__ == "__main__":
    main()
