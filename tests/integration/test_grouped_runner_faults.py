"""Faults of the stateful operators on Spark: a task killed between writing
its files and the batch's commit, and a micro-batch that Spark runs twice (its state
committed, its commit log not), each leave the committed state exactly what one clean run
gives, and the output a clean run's; the files of the attempt that did not count are
never read and are deleted by a later batch."""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Iterator
from datetime import timedelta
from typing import Any

import pytest
from support.jsonlfiles import jsonl_values, write_jsonl

from kspark import StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.compiler import stages as st
from kspark.errors import StreamsAppError
from kspark.runtime.stores import files as store_files
from kspark_server import placement, taskreads, taskstate
from kspark_server.taskfiles import TaskFiles, state_root

pytestmark = pytest.mark.spark

#: five files, one micro-batch each: keys that repeat within and across batches (a task
#: writes a new base every other batch, and deletes unnamed files in the batch after one)
FILES = [
    [(f"k{(i * 7 + b) % 6}", f"v{b}-{i}", 1000 * b + 10 * i) for i in range(8)] for b in range(5)
]


def topology(base: str) -> Any:
    b = StreamsBuilder()
    (
        b.stream(Topic.jsonl("in", f"{base}/in"), key_type=str, value_type=str)
        .deduplicate_by_key(timedelta(seconds=5))
        .to(Topic.jsonl("out", f"{base}/out"))
    )
    return b.build()


def app(spark: Any, base: str, app_id: str) -> StreamsApp:
    cfg = StreamsConfig(
        application_id=app_id,
        checkpoint_dir=f"{base}/chk",
        num_partitions=2,
        max_files_per_trigger=1,
        state_dir=f"{base}/local",
    )
    return StreamsApp(topology(base), cfg, session=spark)


def write(base: str, *numbers: int) -> None:
    for n in numbers:
        write_jsonl(f"{base}/in", f"{n}.jsonl", FILES[n])
        # the file source takes the oldest file first
        os.utime(f"{base}/in/{n}.jsonl", (1_700_000_000 + n, 1_700_000_000 + n))


@contextlib.contextmanager
def killing_after_files(task_batch: int) -> Iterator[None]:
    """Apps compiled inside compile their stateful operator with
    ``StateOptions.kill_after_files``: each task kills its worker at its batch
    ``task_batch``, after writing its files and before the batch commits."""
    from kspark.compiler.rules import base

    plain = base.CompilerBase.__init__

    def faulty(self: Any, *args: Any, **kwargs: Any) -> None:
        plain(self, *args, **kwargs)
        self.state_options = dataclasses.replace(self.state_options, kill_after_files=task_batch)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(base.CompilerBase, "__init__", faulty)
        yield


def store_of(a: StreamsApp) -> str:
    (store,) = [s.spec.store for s in a.compiled().stages() if isinstance(s, st.Stateful)]
    return store


def committed(spark: Any, a: StreamsApp) -> dict[int, tuple[Any, ...]]:
    """Each task's committed group state (the version that names its files)."""
    chk = a.checkpoint_location
    op = store_files.operator_of(spark, chk, a.compiled(), store_of(a))
    assert op is not None
    rows = store_files.group_states(spark, chk, op).collect()
    return {
        placement.task_of(int(r["ks_task"])): tuple(r[f] for f in taskreads.FIELDS) for r in rows
    }


def state(spark: Any, a: StreamsApp) -> dict[int, Any]:
    """Each task's committed state, read from the files its version names."""
    root = state_root(a.checkpoint_location)
    out = {}
    for task, version in committed(spark, a).items():
        f = TaskFiles(root, store_of(a), task, version, create=False)
        out[task] = taskstate.materialize(
            "dedup", False, list(f.chunks()), [b for (b,) in f.log.get()]
        )
    return out


def named(
    spark: Any, a: StreamsApp, versions: dict[int, tuple[Any, ...]] | None = None
) -> set[str]:
    """The files that the committed versions (or ``versions``) name."""
    root = state_root(a.checkpoint_location)
    found = set()
    for task, version in (versions or committed(spark, a)).items():
        f = TaskFiles(root, store_of(a), task, version, create=False)
        found |= {os.path.join(f.folder, n) for n in f._named}
    return found


def unnamed(spark: Any, a: StreamsApp) -> set[str]:
    """Files in the store's folders that no committed version names."""
    folders = {os.path.dirname(p) for p in named(spark, a)}
    on_disk = {os.path.join(d, n) for d in folders for n in os.listdir(d)}
    return on_disk - named(spark, a)


def of_batch(paths: set[str], n: int) -> set[str]:
    """The files of ``paths`` written at a task's batch ``n``."""
    return {p for p in paths if int(os.path.basename(p).split("-")[1]) == n}


@pytest.fixture(scope="module")
def clean(spark: Any, tmp_path_factory: pytest.TempPathFactory) -> tuple[list[str], Any]:
    """One clean run over the five files: its output and committed state."""
    base = str(tmp_path_factory.mktemp("clean"))
    write(base, 0, 1, 2, 3, 4)
    a = app(spark, base, "faults-clean")
    a.run_until_caught_up()
    return jsonl_values(f"{base}/out"), state(spark, a)


@pytest.mark.cluster
def test_a_task_killed_after_writing_its_files_leaves_a_clean_runs_state(
    spark: Any, tmp_path: Any, clean: tuple[list[str], Any]
) -> None:
    base = str(tmp_path)
    write(base, 0, 1)
    with killing_after_files(2):
        # batch 0 commits; each task of batch 1 writes its change and dies
        with pytest.raises(StreamsAppError):
            app(spark, base, "faults-kill").run_until_caught_up()
    a = app(spark, base, "faults-kill")
    left = of_batch(unnamed(spark, a), 2)
    assert left, "the killed attempt wrote its files"
    write(base, 2, 3, 4)
    a.run_until_caught_up()  # batch 1 again, then 2, 3 and 4
    assert (jsonl_values(f"{base}/out"), state(spark, a)) == clean
    assert not left & named(spark, a)
    assert not any(os.path.exists(p) for p in left), "a later batch deletes them"


def test_a_batch_run_twice_leaves_a_clean_runs_state(
    spark: Any, tmp_path: Any, clean: tuple[list[str], Any]
) -> None:
    base = str(tmp_path)
    write(base, 0, 1, 2)
    a = app(spark, base, "faults-repeat")
    a.run_until_caught_up()
    # the files batch 2's first run wrote (each task's third batch)
    first = of_batch(named(spark, a), 3)
    assert first
    # the driver died after batch 2's state committed and before its commit log: Spark
    # runs batch 2 again, on the state batch 1 committed
    os.remove(os.path.join(a.checkpoint_location, "commits", "2"))
    write(base, 3, 4)
    a = app(spark, base, "faults-repeat")
    a.run_until_caught_up()
    assert (jsonl_values(f"{base}/out"), state(spark, a)) == clean
    assert not first & named(spark, a)
    assert not any(os.path.exists(p) for p in first), "a later batch deletes them"
