"""Runs the demo on the embedded server (or a remote one) and prints a summary."""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from typing import Any, TextIO

from kspark.demo.app import build_topology, demo_config, generate
from kspark.runtime.app import StreamsApp
from kspark.runtime.server import connect


def run_demo(
    *,
    data_dir: str | None = None,
    payments: int = 2000,
    remote: str | None = None,
    out: TextIO | None = None,
    keep: bool = False,
) -> dict[str, Any]:
    """Generate data, run the demo app in two runs (restarting from the checkpoint in
    between) and print what it did. Returns the numbers it printed."""
    import sys

    w = out or sys.stdout
    own_dir = data_dir is None
    data_dir = data_dir or tempfile.mkdtemp(prefix="kspark-demo-")
    t0 = time.perf_counter()
    w.write(f"kspark demo: data in {data_dir}\n")
    w.write("starting Spark Connect server ..." if remote is None else f"connecting to {remote} ...")
    w.flush()
    spark = connect(remote)
    w.write(f" ready ({time.perf_counter() - t0:.1f}s)\n\n")
    topology = build_topology(data_dir)
    w.write(topology.describe() + "\n\n")
    generated = []
    reports = []
    for part in range(2):
        generated.append(generate(data_dir, payments, part=part))
        app = StreamsApp(topology, demo_config(data_dir), session=spark)
        report = app.run_until_caught_up()
        reports.append((report, app.metrics()))
        w.write(f"run {part + 1}: {report.summary()}\n")
    converted = (
        spark.read.parquet(os.path.join(data_dir, "out", "converted")).select("value.*").toPandas()
    )
    dlq_path = os.path.join(data_dir, "out", "dlq")
    dead = spark.read.parquet(dlq_path).toPandas() if os.path.isdir(dlq_path) else None
    total_payments = sum(g["payments"] for g in generated)
    duplicates_sent = sum(g["duplicates"] for g in generated)
    malformed_sent = sum(g["malformed"] for g in generated)
    dup_dropped = sum(sum(m.duplicates_dropped.values()) for _, m in reports)
    latest = {}
    for g in generated:
        for r in g["rates"]:
            latest[r.currency] = r.rate
    wrong = converted[converted["rate"].notna()].copy()
    wrong["latest_eur"] = wrong.apply(lambda r: round(r["amount"] * latest[r["currency"]], 2), axis=1)
    wrong["error"] = (wrong["latest_eur"] - wrong["amount_eur"]).abs()
    off = wrong[wrong["error"] > 0.005 * wrong["amount_eur"].abs()]
    summary = {
        "payments_generated": total_payments,
        "duplicates_sent": duplicates_sent,
        "duplicates_dropped": dup_dropped,
        "malformed_sent": malformed_sent,
        "dead_letters": 0 if dead is None else len(dead),
        "converted": len(converted),
        "distinct_converted": int(converted["payment_id"].nunique()),
        "latest_rate_wrong": len(off),
        "latest_rate_error_eur": round(float(off["error"].sum()), 2),
    }
    w.write(
        "\nSummary\n"
        f"  payments generated ........ {total_payments:,} (+{duplicates_sent} retransmitted duplicates,"
        f" {malformed_sent} malformed lines)\n"
        f"  duplicates removed ........ {dup_dropped:,}\n"
        f"  dead-letter records ....... {summary['dead_letters']:,}\n"
        f"  converted payments ........ {len(converted):,} ({summary['distinct_converted']:,} distinct ids)\n"
        f"  converted with latest rate  {len(off):,} would be off by more than 0.5% "
        f"(EUR {summary['latest_rate_error_eur']:,.2f} in total)\n"
    )
    sample = converted.sort_values("payment_id").head(5)
    w.write("\nSample (rate as of the payment's time):\n")
    for _, r in sample.iterrows():
        w.write(
            f"  {r['payment_id']} {r['amount']:>9.2f} {r['currency']} x {r['rate']:.6f} "
            f"= {r['amount_eur']:>9.2f} EUR (latest rate would say {r['amount'] * latest[r['currency']]:.2f})\n"
        )
    if dead is not None and len(dead):
        w.write("\nDead-letter queue:\n")
        for _, r in dead.head(3).iterrows():
            w.write(f"  offset {r['offset']}: {str(r['value'])[:60]!r} ({r['exception_class']})\n")
    w.write(f"\ndone in {time.perf_counter() - t0:.1f}s\n")
    w.flush()
    if own_dir and not keep:
        shutil.rmtree(data_dir, ignore_errors=True)
    return summary
