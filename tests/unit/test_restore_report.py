"""Restore reports from a run's first micro-batch progress, without Spark."""

from __future__ import annotations

import json
from typing import Any

from kspark.compiler.lowering import SIDE_METRICS
from kspark.runtime.restore import RestoreReport, RestoreTracker, StateRestoreListener


class Query:
    runId = "run-1"


def progress(batch: int, loaded_from_dfs: int, side: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "runId": "run-1",
        "batchId": batch,
        "durationMs": {"triggerExecution": 2500},
        "stateOperators": [
            {
                "numRowsTotal": 4,
                "memoryUsedBytes": 1000,
                "customMetrics": {
                    "rocksdbNumLoadedFromDfs": loaded_from_dfs,
                    "rocksdbLoadLatencyMs": 300,
                    "rocksdbReplayChangeLogLatencyMs": 100,
                    "rocksdbNumReplayChangelogFiles": 8,
                    "rocksdbBytesCopied": 12345,
                },
            }
        ],
        "observedMetrics": {SIDE_METRICS: {"side": side, "records": 0}},
    }


def output_with_store(name: str) -> Any:
    """A compiled app with one dedup store called ``name`` (plan only, no Spark)."""
    from datetime import timedelta

    from kspark import Deduplicated, StreamsBuilder, StreamsConfig, Topic
    from kspark.compiler import compile_topology

    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=str).deduplicate_by_key(
        timedelta(minutes=1), Deduplicated.as_("dedup").with_store_name(name)
    ).to(Topic.jsonl("out", "/tmp/out"))
    return compile_topology(b.build(), StreamsConfig(application_id="a"))


class Recorder(StateRestoreListener):
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def on_restore_start(self, store: str, checkpoint: str, batch_id: int) -> None:
        self.calls.append(("start", store, checkpoint, batch_id))

    def on_restore_end(self, store: str, total_restored: int, report: RestoreReport) -> None:
        self.calls.append(("end", store, total_restored))


def side(task: str, count: int) -> dict[str, Any]:
    return {
        "kind": "loaded_entries",
        "processor": "seen",
        "task": task,
        "count": count,
        "chunk": task,
    }


def test_a_restarted_run_reports_its_first_batch() -> None:
    t = RestoreTracker()
    t.begin(Query(), output_with_store("seen"), "/chk/query", restoring=True)
    rec = Recorder()
    assert not t.observe({}, rec)  # no progress yet: still restoring
    p = progress(7, 4, [side("0_0", 10), side("0_1", 5), side("0_1", 5)])
    assert t.observe({("run-1", 7): p}, rec)
    (r,) = t.reports()
    assert (r.store, r.rows, r.tasks, r.partitions, r.changelog_files, r.bytes) == (
        "seen",
        15,
        2,
        4,
        8,
        12345,
    )
    assert (r.seconds, r.changelog_seconds, r.snapshot_seconds, r.batch_seconds) == (
        0.3,
        0.1,
        0.2,
        2.5,
    )
    assert rec.calls == [("start", "seen", "/chk/query", 7), ("end", "seen", 15)]
    t.observe({("run-1", 7): p, ("run-1", 8): progress(8, 0, [])}, rec)
    assert len(rec.calls) == 2  # told once per run


def test_a_fresh_run_reports_nothing() -> None:
    t = RestoreTracker()
    t.begin(Query(), output_with_store("seen"), "/chk/query", restoring=False)
    rec = Recorder()
    assert t.observe({("run-1", 0): progress(0, 0, [side("0_0", 0)])}, rec)
    assert t.reports() == [] and rec.calls == []


def test_progress_of_other_runs_is_ignored() -> None:
    t = RestoreTracker()
    t.begin(Query(), output_with_store("seen"), "/chk/query", restoring=True)
    other = dict(progress(3, 4, []), runId="run-0")
    assert not t.observe({("run-0", 3): other}, None)
    assert json.dumps(t.reports()) == "[]"


def local(kind: str, task: str, count: int) -> dict[str, Any]:
    return {"kind": kind, "processor": "seen", "task": task, "count": count, "chunk": task}


def test_a_rescaled_generation_reports_the_first_batch_whose_tasks_loaded_state() -> None:
    """A run of a rescaled generation starts from kspark's files: Spark loads nothing from
    its new checkpoint, and its first batch may run no task of the operator (the files
    earlier generations consumed are left out). The restore is the first batch whose tasks
    loaded their state."""
    t = RestoreTracker()
    t.begin(Query(), output_with_store("seen"), "/chk/query-g1", restoring=True)
    rec = Recorder()
    empty = progress(0, 0, [])
    assert t.observe({("run-1", 0): empty}, rec)  # running: no longer restoring
    assert t.reports() == [] and rec.calls == []
    loaded = progress(
        1,
        0,
        [
            side("0_0", 7),
            side("0_2", 5),
            local("local_reused", "0_0", 0),
            local("local_rebuilt", "0_2", 5),
        ],
    )
    t.observe({("run-1", 0): empty, ("run-1", 1): loaded}, rec)
    (r,) = t.reports()
    assert (r.store, r.batch_id, r.rows, r.tasks, r.partitions) == ("seen", 1, 12, 2, 0)
    assert (r.reused_tasks, r.rebuilt_tasks, r.entries_rebuilt) == (1, 1, 5)
    assert rec.calls == [("start", "seen", "/chk/query-g1", 1), ("end", "seen", 12)]
    later = progress(2, 0, [side("0_1", 3)])
    t.observe({("run-1", 0): empty, ("run-1", 1): loaded, ("run-1", 2): later}, rec)
    assert len(rec.calls) == 2 and t.reports() == [r]  # the run's restore, once


def test_one_grouped_operator_reports_each_of_its_stores() -> None:
    """Every store of an app runs in one Spark
    operator: each store gets its own report, from its own tasks' figures."""
    from kspark.runtime.restore import _reports

    counts = [dict(side(t, n), processor="counts") for t, n in (("1_0", 3), ("1_1", 4))]
    p = progress(7, 2, [side("0_0", 10), *counts])
    reports = {r.store: r for r in _reports(p, ["seen", "counts"])}
    assert sorted(reports) == ["counts", "seen"]
    assert (reports["seen"].rows, reports["seen"].tasks) == (10, 1)
    assert (reports["counts"].rows, reports["counts"].tasks) == (7, 2)
    assert reports["seen"].partitions == reports["counts"].partitions == 2
