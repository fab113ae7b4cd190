"""Local stores that survive restarts, on Spark: an app restarted on the same ``state_dir``
uses its tasks' stores as they are (nothing rebuilt), a truncated store is rebuilt from the
checkpoint, the output is a clean run's, and ``clean_up()`` deletes the app's stores (it
is refused while the app runs)."""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

import pytest
from support.jsonlfiles import jsonl_values, write_jsonl
from test_standby_replicas import final_counts

from kspark import Materialized, StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.errors import AppAlreadyRunningError
from kspark.runtime.app import State
from kspark.runtime.metrics import BatchFigures
from kspark.testing import TopologyTestDriver
from kspark_server import localstore
from kspark_server.envelope import SideKind

pytestmark = pytest.mark.spark

#: keys and timestamps that repeat within and across batches, out of order
RECORDS = [(f"k{(i * 7) % 5}", f"v{i}", 1000 * ((i * 13) % 23)) for i in range(36)]
#: each batch has every key, so every task runs in each
SPLIT = [RECORDS[:9], RECORDS[9:18], RECORDS[18:27], RECORDS[27:]]


def topology(src: Any, out: Any) -> Any:
    b = StreamsBuilder()
    b.stream(src, key_type=str, value_type=str).deduplicate_by_key(timedelta(seconds=5)).to(out)
    return b.build()


def clean_run(app_id: str, records: list[tuple[str, str, int]]) -> list[str]:
    """The output of one run over ``records``, on the in-process engine."""
    cfg = StreamsConfig(application_id=app_id, num_partitions=2)
    topo = topology(Topic.jsonl("in", "/unused"), Topic.jsonl("out", "/unused"))
    with TopologyTestDriver(topo, cfg, engine="local") as d:
        src = d.create_input_topic("in", key_type=str, value_type=str)
        sink = d.create_output_topic("out", key_type=str, value_type=str)
        for k, v, ts in records:
            src.pipe_input(k, v, timestamp=ts)
        d.process()
        return sorted(sink.read_values())


@pytest.mark.extended  # three runs of an app: about 35 s on 2 cores
def test_a_restarted_app_reuses_its_stores_and_rebuilds_a_truncated_one(
    spark: Any, app_id: str, tmp_path: Any
) -> None:
    src, out, local = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "local")
    topo = topology(Topic.jsonl("in", src), Topic.jsonl("out", out))
    cfg = StreamsConfig(
        application_id=app_id,
        checkpoint_dir=str(tmp_path / "chk"),
        num_partitions=2,
        state_dir=local,
    )
    refused: list[Exception] = []

    def restart(i: int) -> Any:
        write_jsonl(src, f"{i}.jsonl", SPLIT[i])
        app = StreamsApp(topo, cfg, session=spark)

        def try_clean_up(old: State, new: State) -> None:
            # once, as the first run starts (its query runs for seconds from then on)
            if old is State.CREATED and not refused:
                with pytest.raises(AppAlreadyRunningError) as e:
                    app.clean_up()
                refused.append(e.value)

        if i == 0:
            app.set_state_listener(try_clean_up)
        app.run_until_caught_up(progress=False)
        reports = app.restores()
        return app, (reports[0] if reports else None)

    restart(0)
    stores = [
        os.path.join(d, "data.mdb")
        for d, _, files in os.walk(os.path.join(local, app_id))
        if "data.mdb" in files
    ]
    assert len(stores) == 2, "one local store per task, in the app's folder of state_dir"
    assert os.path.isfile(os.path.join(local, app_id, localstore.APP_MARKER))
    assert refused and "stop it" in str(refused[0]), "clean_up() is refused while it runs"

    _, report = restart(1)
    assert report is not None and report.tasks == 2
    assert (report.reused_tasks, report.rebuilt_tasks, report.entries_rebuilt) == (2, 0, 0)

    os.truncate(stores[0], os.path.getsize(stores[0]) // 2)
    app, report = restart(2)
    assert report is not None and report.tasks == 2
    assert (report.reused_tasks, report.rebuilt_tasks) == (1, 1)
    assert report.entries_rebuilt > 0

    want = clean_run(app_id + "-ref", [r for b in SPLIT[:3] for r in b])
    assert jsonl_values(out) == want
    assert app.clean_up().removed == (os.path.join(local, app_id),)
    assert not os.path.exists(os.path.join(local, app_id))


def dedup_then_count(src: Any, out: Any) -> Any:
    """A dedup whose records a count counts (``key=count``): two stateful operators,
    which the grouped runner runs in one ``applyInPandasWithState``."""
    b = StreamsBuilder()
    deduped = b.stream(src, key_type=str, value_type=str).deduplicate_by_key(timedelta(seconds=5))
    deduped.group_by_key().count(materialized=Materialized.as_("counts")).to_stream().map(
        lambda k, c: (k, f"{k}={c}"), key_type=str, value_type=str
    ).to(out)
    return b.build()


def opened(progress: list[dict[str, Any]], kind: str) -> set[tuple[str, int]]:
    """The (store, task) whose local store the batches opened as ``kind``."""
    return {
        (store, int(task.rsplit("_", 1)[1]))
        for p in progress
        for store, task in BatchFigures.of(p).by_key(kind)
    }


@pytest.mark.extended  # two runs of two rounds each
def test_a_restarted_app_of_two_grouped_operators_reuses_each_operators_stores(
    spark: Any, app_id: str, tmp_path: Any
) -> None:
    """Each operator of an app under the grouped runner keeps its local stores in its own
    store's folder of ``state_dir`` under its own tasks: after a restart every task of
    both operators finds its store at the committed version and uses it as it is."""
    src, out, local = str(tmp_path / "in"), str(tmp_path / "out"), str(tmp_path / "local")
    topo = dedup_then_count(Topic.jsonl("in", src), Topic.jsonl("out", out))
    cfg = StreamsConfig(
        application_id=app_id,
        checkpoint_dir=str(tmp_path / "chk"),
        num_partitions=2,
        state_dir=local,
    )
    write_jsonl(src, "0.jsonl", SPLIT[0])
    StreamsApp(topo, cfg, session=spark).run_until_caught_up(progress=False)
    # each store's folder: its name, then a digest of it
    folders = {
        os.path.relpath(d, os.path.join(local, app_id)).split(os.sep)[0].rsplit("-", 1)[0]
        for d, _, files in os.walk(os.path.join(local, app_id))
        if "data.mdb" in files
    }
    assert len(folders) == 2 and "counts" in folders, folders
    write_jsonl(src, "1.jsonl", SPLIT[1])
    app = StreamsApp(topo, cfg, session=spark)
    app.run_until_caught_up(progress=False)
    progress = app.progress()
    reused = opened(progress, SideKind.LOCAL_REUSED)
    assert {s for s, _ in reused} == folders and {t for _, t in reused} == {0, 1}
    assert not opened(progress, SideKind.LOCAL_REBUILT)
    assert not opened(progress, SideKind.LOCAL_CAUGHT_UP)
    ref = dedup_then_count(Topic.jsonl("in", "/unused"), Topic.jsonl("out", "/unused"))
    ref_cfg = StreamsConfig(application_id="ref", num_partitions=2)
    with TopologyTestDriver(ref, ref_cfg, engine="local") as d:
        pipe = d.create_input_topic("in", key_type=str, value_type=str)
        sink = d.create_output_topic("out", key_type=str, value_type=str)
        for k, v, ts in SPLIT[0] + SPLIT[1]:
            pipe.pipe_input(k, v, timestamp=ts)
        d.process()
        want = sink.read_values()
    # each count once, and each key's last count a clean run's (which of a key's counts a
    # micro-batch emits depends on the batches)
    values = jsonl_values(out)
    assert len(values) == len(set(values))
    assert final_counts(values) == final_counts(want)
