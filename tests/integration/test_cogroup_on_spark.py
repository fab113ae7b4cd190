"""A cogrouped aggregation (KIP-150) on Spark: two streams of different value types into
one table per key and one per window, its stores answering queries, and a restart from
the checkpoint that goes on from the state it left."""

from __future__ import annotations

import glob
import json
import os
from datetime import timedelta
from typing import Any

from kspark import Materialized, StreamsApp, StreamsBuilder, StreamsConfig, TimeWindows, Topic
from kspark.plan.topology import Topology


def _write(base: str, topic: str, name: str, rows: list[tuple[Any, Any, int]]) -> None:
    folder = os.path.join(base, topic)
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(base, f".{topic}-{name}")
    with open(tmp, "w") as f:
        for k, v, ts in rows:
            f.write(json.dumps({"key": k, "value": v, "timestamp": ts}) + "\n")
    # a rename makes the file appear whole to Spark's file listing
    os.replace(tmp, os.path.join(folder, name))


def _read(folder: str) -> list[dict[str, Any]]:
    rows = []
    for f in sorted(glob.glob(f"{folder}/**/*.json", recursive=True)):
        with open(f) as fh:
            rows.extend(json.loads(line) for line in fh if line.strip())
    return rows


def _topology(base: str) -> Topology:
    b = StreamsBuilder()
    views = b.stream(Topic.jsonl("views", f"{base}/views"), key_type=str, value_type=int)
    clicks = b.stream(Topic.jsonl("clicks", f"{base}/clicks"), key_type=str, value_type=str)
    cogrouped = (
        views.group_by_key()
        .cogroup(lambda user, seconds, total: total + seconds)
        .cogroup(clicks.group_by_key(), lambda user, page, total: total + 100)
    )
    cogrouped.aggregate(
        lambda: 0, materialized=Materialized.as_("stats"), value_type=int
    ).to_stream().to(Topic.jsonl("out", f"{base}/out"))
    cogrouped.windowed_by(TimeWindows.of_size_with_no_grace(timedelta(seconds=10))).aggregate(
        lambda: 0, materialized=Materialized.as_("per-10s"), value_type=int
    ).to_stream(lambda wk, total: wk.key, key_type=str).to(Topic.jsonl("wout", f"{base}/wout"))
    return b.build()


def test_two_streams_into_one_table_and_a_restart_from_the_checkpoint(
    spark: Any, app_id: str, tmp_path: Any
) -> None:
    base = str(tmp_path)
    cfg = StreamsConfig(
        application_id=app_id, checkpoint_dir=os.path.join(base, "chk"), num_partitions=2
    )
    _write(base, "views", "1.jsonl", [("a", 1, 1_000), ("b", 2, 2_000)])
    _write(base, "clicks", "1.jsonl", [("a", "/x", 1_500), (None, "/lost", 1_600)])
    StreamsApp(_topology(base), cfg, session=spark).run_until_caught_up()
    assert {(r["key"], r["value"]) for r in _read(f"{base}/out")} == {("a", 101), ("b", 2)}

    # a new app on the same checkpoint: the aggregates go on from where they were
    _write(base, "views", "2.jsonl", [("a", 3, 12_000)])
    _write(base, "clicks", "2.jsonl", [("b", "/y", 13_000)])
    app = StreamsApp(_topology(base), cfg, session=spark)
    app.run_until_caught_up()
    latest = {r["key"]: r["value"] for r in _read(f"{base}/out")}
    assert latest == {"a": 104, "b": 102}
    stats = app.store("stats")
    assert [stats.get(k) for k in ("a", "b", "zz")] == [104, 102, None]
    windows = app.store("per-10s")
    # no grace: [0, 10s) closed at stream time 12s or 13s (per task) and left the store
    assert windows.fetch("a", 0, 20_000) == [(10_000, 3)]
    assert windows.fetch("b", 10_000, 20_000) == [(10_000, 100)]
    assert sorted((r["key"], r["value"]) for r in _read(f"{base}/wout")) == [
        ("a", 3),
        ("a", 101),
        ("b", 2),
        ("b", 100),
    ]
