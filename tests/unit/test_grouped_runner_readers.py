"""Readers of the stateful operators' files (:mod:`kspark_server.taskreads`):
they open only the files a committed version names, find which store an operator's
versions name, give a replica the changes since the version it holds, and say so when a
named file is gone; a reader that lags behind the app reads again at the newer committed
version; with several operators in one ``applyInPandasWithState`` a store is read from
its own operator's tasks."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from kspark import Materialized, StreamsApp, StreamsBuilder, StreamsConfig
from kspark.errors import StoreError
from kspark.runtime.stores.files import READ_ATTEMPTS, read_committed
from kspark_server import placement, stateenc, taskfiles, taskreads
from kspark_server.taskfiles import StaleVersion, TaskFiles

KEY = placement.task_keys(2)[1]
TASK = placement.task_of(KEY)


def _frame(n: int) -> bytes:
    return stateenc.encode_frame({"stream_time": n}, [])


def _commit(root: str, store: str, committed: Any, *, base: bool, change: int | None) -> Any:
    """One batch of task ``TASK`` on ``committed``: a new base or a change; the version
    that names its files."""
    f = TaskFiles(root, store, TASK, committed)
    batches = 0 if committed is None else int(committed[1])
    if base:
        f.log.clear()
        f.base.updateValue((0,), (_frame(batches + 1),))
        f.base.updateValue((1,), (_frame(-1),))
    if change is not None:
        f.log.appendValue((_frame(change),))
    f.version.update(("inc", batches + 1, 10, 5, len(f.log_ids), f.n_chunks))
    return f.committed()


def _batch(root: str, store: str, committed: Any, *, base: bool, change: int | None) -> Any:
    """:func:`_commit`, after collecting the files the committed version no longer needs,
    as the runner's task does when the version's base is new."""
    f = TaskFiles(root, store, TASK, committed)
    if f.just_compacted():
        f.collect()
    return _commit(root, store, committed, base=base, change=change)


def _tasks(*committed: Any) -> pd.DataFrame:
    return pd.DataFrame(
        [{"ks_task": KEY, **dict(zip(taskreads.FIELDS, c, strict=True))} for c in committed]
    )


def _read(root: str, store: str, committed: Any) -> list[tuple[int, bool, list[int]]]:
    out = []
    for frame in taskreads.committed_chunks(root, store)(iter([_tasks(committed)])):
        for blob, first, log in frame.itertuples(index=False):
            n = stateenc.decode_frame(blob)[0]["stream_time"]
            out.append((n, bool(first), [stateenc.decode_frame(c)[0]["stream_time"] for c in log]))
    return out


def test_only_the_committed_versions_files_are_read(tmp_path: Path) -> None:
    root = str(tmp_path)
    v1 = _commit(root, "s", None, base=True, change=None)
    v2 = _commit(root, "s", v1, base=False, change=20)
    # a failed attempt of the next batch, and a batch after it, write under their own names
    _commit(root, "s", v2, base=False, change=99)
    v3 = _commit(root, "s", v2, base=False, change=30)
    _commit(root, "s", v3, base=True, change=None)
    assert _read(root, "s", v2) == [(1, True, [20]), (-1, False, [20])]
    assert _read(root, "s", v3) == [(1, True, [20, 30]), (-1, False, [20, 30])]
    assert not os.path.exists(os.path.join(root, "other")), "a reader makes no folder"


def test_a_task_without_files_gives_no_rows(tmp_path: Path) -> None:
    f = TaskFiles(str(tmp_path), "s", TASK, None)
    f.version.update(("inc", 1, 0, 0, 0, 0))
    assert _read(str(tmp_path), "s", f.committed()) == []


def test_owners_name_the_store_whose_folder_holds_the_files(tmp_path: Path) -> None:
    root = str(tmp_path)
    a = _commit(root, "a", None, base=True, change=None)
    b = _commit(root, "b", None, base=False, change=3)
    empty = TaskFiles(root, "c", TASK, None)
    empty.version.update(("inc", 1, 0, 0, 0, 0))
    frame = _tasks(a, b, empty.committed()).assign(op=[0, 1, 2])
    found = pd.concat(list(taskreads.owners(root, ["a", "b", "c"])(iter([frame]))))
    assert sorted(found.itertuples(index=False, name=None)) == [(0, "a"), (1, "b")]
    folder = os.path.join(root, "a", f"task-{TASK}")
    os.remove(os.path.join(folder, sorted(os.listdir(folder))[0]))
    one = pd.concat(list(taskreads.owners(root, ["a", "b"])(iter([_tasks(a).assign(op=5)]))))
    assert one.values.tolist() == [[5, "a"]], "one named file is enough to tell"
    for name in os.listdir(folder):
        os.remove(os.path.join(folder, name))
    lost = pd.concat(list(taskreads.owners(root, ["a", "b"])(iter([_tasks(a).assign(op=5)]))))
    assert lost.values.tolist() == [[5, None]]


def _changes(root: str, held: dict[int, str], committed: Any) -> list[tuple[Any, ...]]:
    """The change feed's rows for ``committed``: (reset, part, number, value); ``held``
    takes the version they bring the reader to."""
    out = []
    for frame in taskreads.changes_since(root, "s", held)(iter([_tasks(committed)])):
        for task, reset, part, number, blob, now in frame.itertuples(index=False):
            assert task == TASK
            held[task] = now
            value = None if blob is None else stateenc.decode_frame(blob)[0]["stream_time"]
            out.append((bool(reset), int(part), int(number), value))
    return out


def test_the_change_feed_gives_only_what_the_reader_does_not_hold(tmp_path: Path) -> None:
    root = str(tmp_path)
    held: dict[int, str] = {}
    v1 = _commit(root, "s", None, base=True, change=None)
    assert _changes(root, held, v1) == [(True, -1, 0, None), (True, 0, 0, 1), (True, 0, 1, -1)]
    assert _changes(root, held, v1) == []  # nothing new
    v2 = _commit(root, "s", v1, base=False, change=20)
    _commit(root, "s", v2, base=False, change=99)  # a failed attempt's change
    v3 = _commit(root, "s", v2, base=False, change=30)
    assert _changes(root, held, v3) == [(False, -1, 0, None), (False, 1, 0, 20), (False, 1, 1, 30)]
    v4 = _commit(root, "s", v3, base=False, change=40)
    assert _changes(root, held, v4) == [(False, -1, 0, None), (False, 1, 2, 40)]
    # a new base: the task comes whole
    v5 = _commit(root, "s", v4, base=True, change=None)
    assert _changes(root, held, v5) == [(True, -1, 0, None), (True, 0, 0, 5), (True, 0, 1, -1)]
    # a reader that holds an older version of another history (a base it never saw)
    assert _changes(root, {TASK: "0-x-1|"}, v3)[:2] == [(True, -1, 0, None), (True, 0, 0, 1)]


def test_a_named_file_that_is_gone_is_an_error(tmp_path: Path) -> None:
    root = str(tmp_path)
    v1 = _commit(root, "s", None, base=False, change=7)
    folder = os.path.join(root, "s", f"task-{TASK}")
    for name in os.listdir(folder):
        os.remove(os.path.join(folder, name))
    with pytest.raises(stateenc.StateFormatError, match="missing from the checkpoint"):
        _read(root, "s", v1)


class App:
    """A running app's commits of task ``TASK`` of store ``s`` (the last is the committed
    version a reader reads), and a reader that the app overtakes between reading the
    version and opening its files."""

    def __init__(self, root: str) -> None:
        self.root = root
        self.versions = [_batch(root, "s", None, base=True, change=None)]
        self.versions.append(_batch(root, "s", self.versions[-1], base=False, change=20))
        self.reads = 0

    def two_batches(self) -> None:
        """A new base, then a batch on it, which collects the files the base replaced."""
        self.versions.append(_batch(self.root, "s", self.versions[-1], base=True, change=None))
        self.versions.append(_batch(self.root, "s", self.versions[-1], base=False, change=40))

    def reader(self, lagging: int) -> Any:
        """A read of the committed version whose first ``lagging`` attempts the app
        overtakes by two batches."""

        def read() -> list[tuple[int, bool, list[int]]]:
            self.reads += 1
            version = self.versions[-1]
            if self.reads <= lagging:
                self.two_batches()
            return _read(self.root, "s", version)

        return read

    def hold(self, log: list[bool]) -> Any:
        def hold(on: bool) -> None:
            log.append(on)
            taskfiles.hold(os.path.join(self.root, "s"), on, "reader")

        return hold


def test_a_reader_that_the_app_overtakes_finds_the_version_moved_on(tmp_path: Path) -> None:
    app = App(str(tmp_path))
    version = app.versions[-1]
    app.two_batches()
    with pytest.raises(StaleVersion, match="KSPARK_STATE_VERSION_COLLECTED"):
        _read(app.root, "s", version)
    with pytest.raises(StaleVersion):
        list(taskreads.changes_since(app.root, "s", {})(iter([_tasks(version)])))
    with pytest.raises(StaleVersion):
        list(taskreads.owners(app.root, ["s"])(iter([_tasks(version).assign(op=0)])))
    # the newer version reads whole
    assert _read(app.root, "s", app.versions[-1]) == [(3, True, [40]), (-1, False, [40])]


def test_a_lagging_reader_reads_again_at_the_newer_version(tmp_path: Path) -> None:
    app = App(str(tmp_path))
    holds: list[bool] = []
    got = read_committed("s", app.reader(lagging=1), app.hold(holds))
    assert got == [(3, True, [40]), (-1, False, [40])], "the newer version, whole"
    assert (app.reads, holds) == (2, []), "one retry, no hold"


def test_a_reader_that_keeps_lagging_reads_under_a_hold_of_its_own(tmp_path: Path) -> None:
    app = App(str(tmp_path))
    holds: list[bool] = []
    got = read_committed("s", app.reader(lagging=READ_ATTEMPTS), app.hold(holds))
    assert app.reads == READ_ATTEMPTS and holds == [True, False]
    # the version read under the hold, whole, though the app ran two batches meanwhile
    assert got == _read(app.root, "s", app.versions[-3])
    assert got == [(2 * READ_ATTEMPTS - 1, True, [40]), (-1, False, [40])]
    # the hold ended: the next new base's next batch collects what it left
    app.two_batches()
    folder = os.path.join(app.root, "s", f"task-{TASK}")
    named = TaskFiles(app.root, "s", TASK, app.versions[-1]).named()
    assert sorted(os.listdir(folder)) == sorted(named)


def test_a_reader_hold_ends_only_its_own(tmp_path: Path) -> None:
    folder = os.path.join(str(tmp_path), "s")
    taskfiles.hold(folder)
    taskfiles.hold(folder, True, "reader")
    taskfiles.hold(folder, False, "reader")
    assert taskfiles._held(folder)
    taskfiles.hold(folder, False)
    assert not taskfiles._held(folder)


def test_files_gone_under_a_hold_are_an_error_naming_the_store(tmp_path: Path) -> None:
    app = App(str(tmp_path))

    def read() -> Any:
        version = app.versions[-1]
        folder = os.path.join(app.root, "s", f"task-{TASK}")
        for name in TaskFiles(app.root, "s", TASK, version).named():
            os.remove(os.path.join(folder, name))  # not the app: something else
        app.two_batches()
        return _read(app.root, "s", version)

    with pytest.raises(StoreError, match="store s: files that its committed version names"):
        read_committed("s", read, app.hold([]))
    with pytest.raises(stateenc.StateFormatError, match="disk full"):
        read_committed("s", lambda: _raise(stateenc.StateFormatError("disk full")), app.hold([]))


def _raise(error: Exception) -> Any:
    raise error


def _app(tmp: Path) -> StreamsApp:
    b = StreamsBuilder()
    counts = b.stream("in", key_type=str, value_type=int).group_by_key()
    counts.count(materialized=Materialized.as_("counts")).to_stream().to("out")
    config = StreamsConfig(application_id="grouped-readers", data_dir=str(tmp))
    return StreamsApp(b.build(), config)


def test_two_stateful_operators_share_one_grouped_operator(tmp_path: Path) -> None:
    """Spark runs one applyInPandasWithState per streaming query: two operators are
    lowered into one, their outputs through internal topics. Lowered without the cut
    (each output read straight), the plan would hold the operator twice: kspark refuses
    it at compile time, with the fix."""
    from kspark.bindings import bind_topology
    from kspark.compiler import compile_topology, subtopologies
    from kspark.compiler.lowering.build import build_dataframe, grouped_stages
    from kspark.errors import CompilationError

    config = StreamsConfig(application_id="two", data_dir=str(tmp_path))
    b = StreamsBuilder()
    s = b.stream("in", key_type=str, value_type=int)
    s.group_by_key().count(Materialized.as_("counts")).to_stream().to("counts")
    s.group_by_key().reduce(
        lambda a, c: a + c, materialized=Materialized.as_("sums")
    ).to_stream().to("sums")
    topology = bind_topology(b.build(), config)
    plain = compile_topology(topology, config)
    with pytest.raises(CompilationError, match="internal topic alone") as e:
        build_dataframe(plain, None, checkpoint=str(tmp_path))  # type: ignore[arg-type]
    assert "StreamsApp" in str(e.value)
    names = {g.spec.processor for g in grouped_stages(plain)}
    assert len(names) == 2
    cut = compile_topology(subtopologies.cut(topology, names, str(tmp_path), "two"), config)
    # lowered as one: the lowering goes on to ask Spark (here: no session)
    with pytest.raises(AttributeError):
        build_dataframe(cut, None, checkpoint=str(tmp_path))  # type: ignore[arg-type]


def test_each_store_of_several_grouped_operators_is_read_from_its_operators_tasks(
    tmp_path: Path,
) -> None:
    """Several operators share one applyInPandasWithState, each under its own task keys
    (its place among the grouped stages): a store's readers read the group states of its
    operator's keys alone, and a store no grouped operator keeps is refused by name."""
    from kspark.compiler.lowering.build import grouped_stages
    from kspark.runtime.stores.files import store_keys

    b = StreamsBuilder()
    s = b.stream("in", key_type=str, value_type=int)
    s.group_by_key().count(materialized=Materialized.as_("counts")).to_stream().to("counts")
    s.group_by_key().reduce(
        lambda a, c: a + c, materialized=Materialized.as_("sums")
    ).to_stream().to("sums")
    config = StreamsConfig(
        application_id="two",
        num_partitions=3,
        checkpoint_dir=str(tmp_path / "cp"),
        data_dir=str(tmp_path),
    )
    app = StreamsApp(b.build(), config, session=object())
    output = app.compiled()
    order = [g.spec.store for g in grouped_stages(output)]
    assert sorted(order) == ["counts", "sums"]
    keys = {name: store_keys(output, name) for name in order}
    assert keys == {name: placement.task_keys(3, i) for i, name in enumerate(order)}
    assert not set(keys["counts"] or ()) & set(keys["sums"] or ())
    for found in keys.values():
        assert [placement.task_of(k) for k in found or ()] == [0, 1, 2]
    with pytest.raises(StoreError, match=r"no stateful operator .* keeps it"):
        store_keys(output, "nothing")


def test_a_store_of_the_one_grouped_operator_is_read_from_every_task(tmp_path: Path) -> None:
    """With one grouped operator every group state of the query is its store's."""
    from kspark.runtime.stores.files import store_keys

    app = _app(tmp_path)
    stores = [s.spec.store for s in app.compiled().stages() if hasattr(s, "spec")]
    assert stores and all(store_keys(app.compiled(), name) is None for name in stores)
