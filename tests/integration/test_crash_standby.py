"""The server killed between two micro-batches of an app with standby replicas, on
``local-cluster``: the local stores and standby copies on the executors' disks outlive
it, and the restarted app finds them. Every record's result is written exactly once, and
a copy is never trusted at a version it is not at: the copies here are one batch behind
(no standby round ran after the last committed batch), so each one that a task opens is
promoted and caught up from the durable log (or rebuilt), never used as it is.

The server restarts with one executor, so that every task runs on it: the tasks whose own
stores are on its disk reuse them, and the others find their standby copies there. It
kills the server, so it runs last, with the crash tests (tests/conftest.py).
"""

from __future__ import annotations

import os
from typing import Any

import pytest
from support.jsonlfiles import jsonl_values, write_jsonl
from test_standby_replicas import RECORDS, SPLIT, clean_run, rows_read, topology, wait_for

from kspark import StreamsApp, StreamsConfig, Topic
from kspark.runtime import standbys
from kspark.runtime.metrics import BatchFigures, progress_as_dict
from kspark_server.envelope import SideKind

pytestmark = [pytest.mark.spark, pytest.mark.cluster]


def tasks_of(p: dict[str, Any], kind: str) -> set[int]:
    """The tasks whose side rows of ``kind`` the batch of progress ``p`` has."""
    return {int(t.rsplit("_", 1)[1]) for _, t in BatchFigures.of(p).by_key(kind)}


def test_server_killed_between_batches_with_standbys_each_result_once(
    spark_server: Any, app_id: str, tmp_path: Any
) -> None:
    master = os.environ.get("KSPARK_MASTER", "")
    if not master.startswith("local-cluster") or spark_server is None:
        pytest.skip("needs executors in JVMs of their own: KSPARK_MASTER=local-cluster[2,1,1024]")
    src, out = str(tmp_path / "in"), str(tmp_path / "out")
    cfg = StreamsConfig(
        application_id=app_id,
        checkpoint_dir=str(tmp_path / "chk"),
        num_partitions=4,
        state_dir=str(tmp_path / "local" / "{executor}"),
        num_standby_replicas=1,
        state_check_log=True,  # each batch checks its durable files against its store
    )
    topo = topology(Topic.jsonl("in", src), Topic.jsonl("out", out))
    # a server of its own: its executors are numbered from 0 again, as after the restart
    spark_server.kill()
    spark_server.start(same_port=True)
    write_jsonl(src, "0.jsonl", SPLIT[0])
    app = StreamsApp(topo, cfg, session=spark_server.session())
    app.start()
    query = app.query
    wait_for("first batch", lambda: rows_read(query) >= len(SPLIT[0]), query)
    keeper = standbys.keeper(app)
    assert keeper is not None
    wait_for("a warm copy of every task", keeper.covered, query)
    active = {t: d for (_, t), d in keeper.active.items()}
    assert len(active) == 4 and len(set(active.values())) == 2
    standbys.stop(app)  # no round after the next batch: the copies stay one behind
    write_jsonl(src, "1.jsonl", SPLIT[1])
    wait_for("the second batch", lambda: rows_read(query) >= 80, query)
    spark_server.kill()  # between two batches: the second is committed
    spark_server.master = "local-cluster[1,1,1024]"
    try:
        spark_server.start(same_port=True)
        write_jsonl(src, "2.jsonl", SPLIT[2])
        resumed = StreamsApp(topo, cfg, session=spark_server.session())
        resumed.run_until_caught_up()
        first = progress_as_dict(resumed.query.recentProgress[0])
        read = rows_read(resumed.query)
        [report] = resumed.restores()
    finally:
        spark_server.kill()
        spark_server.master = master
        spark_server.start(same_port=True)
    assert jsonl_values(out) == clean_run(app_id + "-ref")
    assert read == len(RECORDS) - 80  # the committed batches were not read again
    # every task ran on the one executor; those whose own store was on the other disk
    # promoted their copies there, which were a batch behind: caught up from the durable
    # log, or rebuilt when the task had written a new base since, never used as they were
    promoted = tasks_of(first, SideKind.LOCAL_PROMOTED)
    behind = tasks_of(first, SideKind.LOCAL_CAUGHT_UP) | tasks_of(first, SideKind.LOCAL_REBUILT)
    reused = tasks_of(first, SideKind.LOCAL_REUSED)
    assert promoted in [
        {t for t, d in active.items() if d == disk} for disk in set(active.values())
    ]
    assert promoted <= behind and not promoted & reused, (promoted, behind, reused)
    assert promoted and report.tasks == 4 and report.promoted_tasks == len(promoted)
    assert report.caught_up_tasks + report.rebuilt_tasks == len(promoted)
    assert report.reused_tasks == 4 - len(promoted)
