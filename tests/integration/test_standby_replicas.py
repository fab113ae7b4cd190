"""Standby replicas on ``local-cluster``: an app with one standby per task runs on two
executors, each with its own local disk (``{executor}`` in ``state_dir``); once every
task has a warm copy on the other executor, one executor's JVM is killed. Spark runs its
tasks on the survivor, which promotes the copies instead of rebuilding, and every record's
result is written exactly once (the output is a clean run's)."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest
from support.jsonlfiles import jsonl_values, write_jsonl

from kspark import Materialized, StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.runtime import restore, standbys
from kspark.testing import TopologyTestDriver

pytestmark = [pytest.mark.spark, pytest.mark.cluster]

#: keys that repeat within and across batches; every batch reaches every task
RECORDS = [(f"k{(i * 7) % 23}", f"v{i}", 1000 * ((i * 13) % 31)) for i in range(120)]
SPLIT = [RECORDS[:40], RECORDS[40:80], RECORDS[80:]]


def topology(src: Any, out: Any) -> Any:
    b = StreamsBuilder()
    b.stream(src, key_type=str, value_type=str).deduplicate_by_key(timedelta(seconds=8)).to(out)
    return b.build()


def clean_run(app_id: str) -> list[str]:
    cfg = StreamsConfig(application_id=app_id, num_partitions=4)
    topo = topology(Topic.jsonl("in", "/unused"), Topic.jsonl("out", "/unused"))
    with TopologyTestDriver(topo, cfg, engine="local") as d:
        src = d.create_input_topic("in", key_type=str, value_type=str)
        sink = d.create_output_topic("out", key_type=str, value_type=str)
        for k, v, ts in RECORDS:
            src.pipe_input(k, v, timestamp=ts)
        d.process()
        return sorted(sink.read_values())


def wait_for(what: str, check: Callable[[], bool], query: Any, timeout: float = 180) -> None:
    end = time.monotonic() + timeout
    while not check():
        if not query.isActive:
            raise AssertionError(f"the query stopped while waiting for {what}: {query.exception()}")
        if time.monotonic() > end:
            raise AssertionError(f"no {what} within {timeout} s")
        time.sleep(0.2)


def rows_read(query: Any) -> int:
    from kspark.runtime.metrics import input_rows, progress_as_dict

    return sum(input_rows(progress_as_dict(p)) for p in query.recentProgress)


def test_a_killed_executors_tasks_promote_their_standby_copies(
    spark: Any, spark_server: Any, app_id: str, tmp_path: Any
) -> None:
    if not os.environ.get("KSPARK_MASTER", "").startswith("local-cluster") or spark_server is None:
        pytest.skip("needs executors in JVMs of their own: KSPARK_MASTER=local-cluster[2,1,1024]")
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    cfg = StreamsConfig(
        application_id=app_id,
        checkpoint_dir=str(tmp_path / "chk"),
        num_partitions=4,
        state_dir=str(tmp_path / "local" / "{executor}"),
        num_standby_replicas=1,
    )
    promoted: list[restore.StandbyPromotion] = []

    class Listener(restore.StateRestoreListener):
        def on_standby_promoted(self, store: str, promotion: restore.StandbyPromotion) -> None:
            promoted.append(promotion)

    app = StreamsApp(topology(Topic.jsonl("in", src), Topic.jsonl("out", out)), cfg, session=spark)
    app.restore_listener = Listener()
    write_jsonl(src, "0.jsonl", SPLIT[0])
    app.start()
    query = app.query
    try:
        wait_for("first batch", lambda: rows_read(query) >= len(SPLIT[0]), query)
        keeper = standbys.keeper(app)
        assert keeper is not None
        wait_for("a warm copy of every task", keeper.covered, query)
        assert len(keeper.active) == 4 and len(set(keeper.active.values())) == 2
        # the executor that runs task 0 (its disk is <state_dir>/executor-<id>)
        victim = keeper.disk_of_task(0).rsplit("executor-", 1)[1]
        pids = spark_server.executor_pids()
        os.kill(pids[victim], signal.SIGKILL)
        write_jsonl(src, "1.jsonl", SPLIT[1])
        wait_for("the batch after the kill", lambda: rows_read(query) >= 80, query)
        write_jsonl(src, "2.jsonl", SPLIT[2])
        wait_for("the last batch", lambda: rows_read(query) >= len(RECORDS), query)
    finally:
        app.stop()
    assert promoted, "the lost executor's tasks promoted their copies"
    assert sum(p.tasks for p in promoted) >= 1
    assert jsonl_values(out) == clean_run(app_id + "-ref")


def two_operators(src: Any, out: Any) -> Any:
    """A dedup whose records a count counts: two stateful operators, which the grouped
    runner runs in one ``applyInPandasWithState`` (the count reads the dedup's output
    through an internal topic); each result is ``key=count``."""
    b = StreamsBuilder()
    deduped = b.stream(src, key_type=str, value_type=str).deduplicate_by_key(timedelta(seconds=8))
    deduped.group_by_key().count(materialized=Materialized.as_("counts")).to_stream().map(
        lambda k, c: (k, f"{k}={c}"), key_type=str, value_type=str
    ).to(out)
    return b.build()


def clean_counts(records: list[tuple[str, str, int]]) -> list[str]:
    cfg = StreamsConfig(application_id="two-ref", num_partitions=4)
    topo = two_operators(Topic.jsonl("in", "/unused"), Topic.jsonl("out", "/unused"))
    with TopologyTestDriver(topo, cfg, engine="local") as d:
        src = d.create_input_topic("in", key_type=str, value_type=str)
        sink = d.create_output_topic("out", key_type=str, value_type=str)
        for k, v, ts in records:
            src.pipe_input(k, v, timestamp=ts)
        d.process()
        return sorted(sink.read_values())


def final_counts(values: list[str]) -> dict[str, int]:
    """Each key's last count of ``key=count`` results (a count's results per key only
    grow, whichever of them a micro-batch emits)."""
    out: dict[str, int] = {}
    for v in values:
        k, c = v.rsplit("=", 1)
        out[k] = max(out.get(k, 0), int(c))
    return out


def test_every_operators_standby_copies_are_promoted_after_an_executor_kill(
    spark: Any, spark_server: Any, app_id: str, tmp_path: Any
) -> None:
    """Two stateful operators under the grouped runner with one standby: each round keeps
    copies of both operators' stores (each from its own task keys); once every task of
    both has a copy on the other executor, the executor of task 0 is killed, and the
    survivor promotes the copies of both stores. Every count is written exactly once."""
    if not os.environ.get("KSPARK_MASTER", "").startswith("local-cluster") or spark_server is None:
        pytest.skip("needs executors in JVMs of their own: KSPARK_MASTER=local-cluster[2,1,1024]")
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    cfg = StreamsConfig(
        application_id=app_id,
        checkpoint_dir=str(tmp_path / "chk"),
        num_partitions=4,
        state_dir=str(tmp_path / "local" / "{executor}"),
        num_standby_replicas=1,
    )
    promoted: list[restore.StandbyPromotion] = []

    class Listener(restore.StateRestoreListener):
        def on_standby_promoted(self, store: str, promotion: restore.StandbyPromotion) -> None:
            promoted.append(promotion)

    topo = two_operators(Topic.jsonl("in", src), Topic.jsonl("out", out))
    app = StreamsApp(topo, cfg, session=spark)
    app.restore_listener = Listener()
    want = [final_counts(clean_counts(RECORDS[: 40 * (i + 1)])) for i in range(3)]

    def written(i: int) -> Callable[[], bool]:
        def check() -> bool:
            got = final_counts(jsonl_values(out))
            return all(got.get(k, 0) >= c for k, c in want[i].items())

        return check

    write_jsonl(src, "0.jsonl", SPLIT[0])
    app.start()
    query = app.query
    try:
        wait_for("the first file's counts", written(0), query)
        keeper = standbys.keeper(app)
        assert keeper is not None
        stores = set(keeper.specs)
        assert len(stores) == 2 and "counts" in stores

        def both_covered() -> bool:
            return {s for s, _ in keeper.active} == stores and keeper.covered()

        wait_for("a warm copy of every task of both operators", both_covered, query)
        assert len(keeper.active) == 8 and len(set(keeper.active.values())) == 2
        victim = keeper.disk_of_task(0).rsplit("executor-", 1)[1]
        lost = {u for u, d in keeper.active.items() if d == keeper.disk_of_task(0)}
        os.kill(spark_server.executor_pids()[victim], signal.SIGKILL)
        write_jsonl(src, "1.jsonl", SPLIT[1])
        wait_for("the second file's counts", written(1), query)
        write_jsonl(src, "2.jsonl", SPLIT[2])
        wait_for("the last counts", written(2), query)
    finally:
        app.stop()
    # each count once (a key's counts only grow), none of a record counted twice
    values = jsonl_values(out)
    assert len(values) == len(set(values))
    assert final_counts(values) == want[2]
    # the lost executor's tasks of both operators promoted their copies
    by_store: dict[str, int] = {}
    for p in promoted:
        by_store[p.store] = by_store.get(p.store, 0) + p.tasks
    assert set(by_store) == stores, (by_store, lost)
    assert all(by_store[s] >= 1 for s in stores)
