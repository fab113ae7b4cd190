"""Restore reporting: an app restarted from its checkpoint is RESTORING until its first
micro-batch completes, and reports, per store, the entries it loaded."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from collections import defaultdict
from datetime import timedelta
from typing import Any

import pytest

from kspark import Deduplicated, Materialized, StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.runtime.app import State
from kspark.runtime.restore import RestoreReport, StateRestoreListener

pytestmark = pytest.mark.spark


@dataclasses.dataclass
class Ev:
    k: str
    n: int
    ts: int


@dataclasses.dataclass
class Rate:
    k: str
    rate: float
    ts: int


def topology(base: str) -> Any:
    """Two stores: dedup ``seen`` feeding a left join with the versioned table ``rates``."""
    b = StreamsBuilder()
    rates = b.table(
        Topic.jsonl(
            "rates",
            os.path.join(base, "rates"),
            layout="value",
            key_field="k",
            timestamp_field="ts",
        ),
        key_type=str,
        value_type=Rate,
        materialized=Materialized.as_versioned("rates", timedelta(hours=1)),
    )
    (
        b.stream(
            Topic.jsonl(
                "events",
                os.path.join(base, "events"),
                layout="value",
                key_field="k",
                timestamp_field="ts",
            ),
            key_type=str,
            value_type=Ev,
        )
        .deduplicate_by_key(timedelta(hours=1), Deduplicated.as_("dedup").with_store_name("seen"))
        .left_join(rates, lambda e, r: e.n * (r.rate if r else -1.0), value_type=float)
        .to(Topic.jsonl("out", os.path.join(base, "out")))
    )
    return b.build()


def write(base: str, topic: str, name: str, rows: list[Any]) -> None:
    folder = os.path.join(base, topic)
    os.makedirs(folder, exist_ok=True)
    tmp = os.path.join(base, f".{name}")
    with open(tmp, "w") as f:
        for r in rows:
            f.write(json.dumps(dataclasses.asdict(r)) + "\n")
    os.replace(tmp, os.path.join(folder, name))


class Recorder(StateRestoreListener):
    def __init__(self) -> None:
        self.calls: list[tuple[str, str, int]] = []
        self.reports: list[RestoreReport] = []

    def on_restore_start(self, store: str, checkpoint: str, batch_id: int) -> None:
        self.calls.append(("start", store, batch_id))

    def on_restore_end(self, store: str, total_restored: int, report: RestoreReport) -> None:
        self.calls.append(("end", store, total_restored))
        self.reports.append(report)


def per_store(entries: dict[tuple[str, str], int]) -> tuple[dict[str, int], dict[str, int]]:
    """Entries and task count per store, from ``Metrics.store_entries``."""
    total: dict[str, int] = defaultdict(int)
    tasks: dict[str, int] = defaultdict(int)
    for (store, _), n in entries.items():
        total[store] += n
        tasks[store] += 1
    return dict(total), dict(tasks)


def test_restart_reports_restoring_then_running_and_the_restored_entries(
    spark: Any, app_id: str
) -> None:
    with tempfile.TemporaryDirectory() as base:
        write(base, "events", "1.jsonl", [Ev(f"k{i}", i, 1000 * i) for i in range(40)])
        write(base, "rates", "1.jsonl", [Rate(f"k{i}", 1 + i / 10, 10 * i) for i in range(10)])
        cfg = StreamsConfig(
            application_id=app_id, checkpoint_dir=os.path.join(base, "chk"), num_partitions=2
        )

        fresh = StreamsApp(topology(base), cfg, session=spark)
        seen_fresh: list[tuple[State, State]] = []
        fresh.set_state_listener(lambda old, new: seen_fresh.append((old, new)))
        fresh.restore_listener = fresh_listener = Recorder()
        first = fresh.run_until_caught_up()
        assert seen_fresh == [(State.CREATED, State.RUNNING), (State.RUNNING, State.NOT_RUNNING)]
        assert fresh.restores() == [] and fresh_listener.calls == []  # nothing to restore
        size, tasks = per_store(fresh.metrics().store_entries)
        assert size == {"seen": 40, "rates": 10}

        # restart: every key again, so every task with state runs in the first batch
        write(base, "events", "2.jsonl", [Ev(f"k{i}", i, 1000 * i + 1) for i in range(40)])
        write(base, "rates", "2.jsonl", [Rate(f"k{i}", 2 + i / 10, 5000 + i) for i in range(10)])
        app = StreamsApp(topology(base), cfg, session=spark)
        seen: list[tuple[State, State]] = []
        app.set_state_listener(lambda old, new: seen.append((old, new)))
        app.restore_listener = listener = Recorder()
        report = app.run_until_caught_up()
        assert report.batches == 1
        assert seen == [
            (State.CREATED, State.RESTORING),
            (State.RESTORING, State.RUNNING),
            (State.RUNNING, State.NOT_RUNNING),
        ]
        restores = {r.store: r for r in app.restores()}
        assert sorted(restores) == ["rates", "seen"]
        for store, r in restores.items():
            assert r.rows == size[store], store  # the restored entries are the state's size
            assert r.tasks == tasks[store]
            assert r.partitions == 2  # both state partitions came from the checkpoint
            # the restart's first batch (an app with internal topics runs more than one)
            assert r.batch_id == first.batches and r.state_rows >= tasks[store]
            assert r.seconds >= 0 and r.batch_seconds > 0
        assert listener.calls == [
            call
            for r in app.restores()
            for call in (("start", r.store, first.batches), ("end", r.store, r.rows))
        ]
        assert listener.reports == app.restores()
