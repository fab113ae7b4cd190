"""One way of counting: kspark.runtime.metrics, read by the app, its run report, the
progress display, `kspark status` and the restore report."""

from __future__ import annotations

from typing import Any

from kspark.runtime.display import ProgressTotals
from kspark.runtime.metrics import Batches, BatchFigures, Metrics


def progress(batch_id: int, rows: int, side: list[dict[str, Any]], *, ran: bool = True) -> Any:
    duration = {"addBatch": 5, "triggerExecution": 9} if ran else {"triggerExecution": 2}
    return {
        "runId": "r",
        "batchId": batch_id,
        "timestamp": f"2025-01-01T00:00:{batch_id:02d}.000Z",
        "numInputRows": rows,
        "durationMs": duration,
        "observedMetrics": {"kspark": {"records": rows, "side": side}},
    }


def entries(store: str, task: str, count: int, chunk: str = "c") -> dict[str, Any]:
    return {
        "kind": "store_entries",
        "processor": store,
        "task": task,
        "count": count,
        "chunk": chunk,
    }


def test_an_idle_trigger_neither_replaces_a_batch_nor_counts_as_one() -> None:
    batches = Batches()
    batches.add(progress(0, 10, []))
    batches.add(progress(0, 0, [], ran=False))  # idle, under the id of the batch that ran
    batches.add(progress(1, 0, [], ran=False))  # idle only
    m = Metrics.of(batches.figures())
    totals = ProgressTotals(clock=lambda: 1.0)
    for p in batches.progress():
        totals.add(p)
    assert (m.batches, m.input_records) == (1, 10)
    assert (totals.batches, totals.records_in) == (1, 10)


def test_store_entries_count_once_per_store_and_task_and_keep_the_latest_batch() -> None:
    batches = Batches()
    # two copies of one store (shared by two sinks' plans) report task 0_0 twice
    batches.add(progress(0, 3, [entries("s", "0_0", 5, "a"), entries("s", "0_0", 5, "b")]))
    batches.add(progress(1, 1, [entries("s", "0_1", 2)]))  # task 0_0 did not run
    batches.add(progress(2, 1, [entries("s", "0_0", 7)]))
    assert Metrics.of(batches.figures()).store_entries == {("s", "0_0"): 7, ("s", "0_1"): 2}


def test_loaded_entries_count_the_same_way_as_store_entries() -> None:
    side = [
        {"kind": "loaded_entries", "processor": "s", "task": "0_0", "count": 4, "chunk": "a"},
        {"kind": "loaded_entries", "processor": "s", "task": "0_0", "count": 4, "chunk": "b"},
        {"kind": "dropped", "processor": "p", "task": "0_0", "count": 1, "chunk": "a"},
        {"kind": "dropped", "processor": "p", "task": "0_0", "count": 2, "chunk": "b"},
    ]
    figures = BatchFigures.of(progress(0, 1, side))
    assert figures.by_key("loaded_entries") == {("s", "0_0"): 4}
    assert figures.by_key("dropped") == {("p", "0_0"): 3}  # counters add up


def test_metrics_answer_kafka_streams_metric_names() -> None:
    batches = Batches()
    side = [
        {"kind": "dropped", "processor": "p", "task": "0_0", "count": 2},
        {"kind": "dlq", "processor": "p", "task": "0_1", "count": 1},
        {"kind": "duplicates", "processor": "d", "task": "0_0", "count": 3},
        entries("s", "0_0", 4),
        entries("s", "0_1", 6),
    ]
    batches.add(progress(0, 10, side))
    batches.add(progress(1, 5, []))
    names = Metrics.of(batches.figures()).by_name()
    assert names == {
        "commit-total": 2,
        "process-total": 15,
        "records-consumed-total": 15,
        "records-produced-total": 15,
        "dropped-records-total": 3,
        "estimate-num-keys": 10,
        "duplicates-dropped-total": 3,
        "expired-puts-total": 0,
        "late-records-dropped-total": 0,
        "dead-letter-records-total": 1,
    }
