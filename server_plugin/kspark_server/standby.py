"""Standby replicas: warm copies of tasks' local stores on other executors (Kafka
Streams' standby tasks).

A standby copy is a local store (:mod:`kspark_server.localstore`) at the very path the
task's own store would have on that executor's disk, marked as a standby in its meta
database (key :data:`STANDBY_KEY`). It is built and caught up from the committed durable
files (:mod:`kspark_server.taskfiles`) by a small job the client runs after committed
batches (:mod:`kspark.runtime.standbys`), off the batches' path: each of that job's tasks
keeps the copies its executor's disk is given (:func:`place`; for an app of several
operators in one ``applyInPandasWithState``, every operator's stores:
:func:`place_stores`). When Spark runs the task on that executor (after another executor
is lost: docs/design/task-placement.md), the task opens the copy as its local store,
version-checked like any other (at the committed version: used; behind: caught up;
anything else: rebuilt), and :func:`promote` clears the mark: from then on the copy is
the task's own, and no standby job touches it again.

A standby job writes only to stores that are marked standby, and only committed
versions: a new copy is built in a folder of its own and moved into place only if the
task's store does not exist (a rename does not replace a store that holds files); an
existing copy catches up in one write transaction that first checks, under LMDB's write
lock, that it is still marked and behind. So a copy never races the task's own writes.

Examples
--------
>>> place(["a", "b"], {0: "a"}, [0], 1)
{'b': {0}}
>>> place(["a"], {0: "a"}, [0], 1)  # nowhere else to keep it
{}
"""

from __future__ import annotations

import hashlib
import os
import shutil
import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import lmdb
import pandas as pd

from kspark_server import localstore, placement, stateenc
from kspark_server.executor import disk_of, executor_id

# the marker and promotion live with the store, which every operator opens
from kspark_server.localstore import STANDBY_KEY, is_standby, promote
from kspark_server.taskfiles import GROUP_STATE_DDL, TaskFiles

__all__ = [
    "REPORT_SCHEMA",
    "STANDBY_KEY",
    "committed_by_store",
    "committed_by_task",
    "is_standby",
    "keep",
    "place",
    "place_stores",
    "promote",
    "update_copy",
]

#: One row per task's store a standby job's task found or kept on its disk: ``kind`` is
#: ``active`` (the task's own store), ``standby`` (a copy, ``entries`` written to it this
#: round) or ``dropped`` (a copy no longer placed here, deleted).
REPORT_SCHEMA = (
    "disk string, executor string, store string, task int, kind string, batches long, entries long"
)
_REPORT_FIELDS = tuple(part.split()[0] for part in REPORT_SCHEMA.split(","))

_FIELDS = tuple(part.split()[0] for part in GROUP_STATE_DDL.split(","))


def _rank(disk: str, task: int) -> bytes:
    return hashlib.blake2b(f"{disk}\0{task}".encode(), digest_size=8).digest()


def place(
    disks: Iterable[str], active: Mapping[int, str], tasks: Iterable[int], replicas: int
) -> dict[str, set[int]]:
    """Which tasks each disk keeps standby copies of: for each task, ``replicas`` disks
    other than the one its store is active on (``active``), chosen by rendezvous hashing,
    so that a disk that comes or goes moves only the copies it held or takes.

    Examples
    --------
    >>> out = place(["a", "b", "c"], {0: "a"}, [0], 2)
    >>> out == {"b": {0}, "c": {0}}
    True
    """
    known = sorted(set(disks))
    out: dict[str, set[int]] = {}
    for t in tasks:
        candidates = sorted((d for d in known if d != active.get(t)), key=lambda d: _rank(d, t))
        for d in candidates[:replicas]:
            out.setdefault(d, set()).add(t)
    return out


def _catch_up_copy(
    store: localstore.TaskStore,
    files: TaskFiles,
    target: tuple[str, int],
    base_at: int,
    index_of: Callable[[bytes, bytes], bytes] | None,
) -> int | None:
    """Catch a marked copy up to ``target`` from the committed changes, in one write
    transaction that checks first (under the write lock) that it is still a copy of the
    same incarnation, behind ``target`` and not behind the base. The entries written; None
    when the copy cannot be caught up (older than the base); 0 when there was nothing to
    do or it is no longer a copy."""
    log = [blob for (blob,) in files.log.get()]

    def work(txn: lmdb.Transaction) -> int | None:
        if txn.get(STANDBY_KEY, db=store.meta) is None:
            return 0  # promoted: the task's own now
        raw = txn.get(b"v", db=store.meta)
        have = None if raw is None else tuple(stateenc.unpack(raw))
        if have is not None and str(have[0]) == target[0] and int(have[1]) >= target[1]:
            return 0
        if have is None or str(have[0]) != target[0] or int(have[1]) < base_at:
            return None
        changes: dict[bytes, bytes | None] = {}
        last: Any = None
        for frame in log[int(have[1]) - base_at :]:
            last, pairs = stateenc.decode_frame(frame)
            changes.update(pairs)
        localstore._Keys(store, txn).apply_changes(changes, index_of)
        if last is not None:
            txn.put(b"s", stateenc.pack(last), db=store.meta)
        txn.put(b"v", stateenc.pack(list(target)), db=store.meta)
        return len(changes)

    return store._write(work)


def update_copy(
    root: str,
    store: str,
    task: int,
    committed: tuple[Any, ...],
    *,
    state_root: str,
    application_id: str = "",
    index_of: Callable[[bytes, bytes], bytes] | None = None,
) -> tuple[str, int]:
    """Keep a standby copy of ``task`` of ``store`` under ``root`` at the ``committed``
    version (the task's group state, :data:`kspark_server.taskfiles.GROUP_STATE_DDL`).
    Returns (``"active"``: the task's own store is here, left alone; ``"standby"``), and
    the entries written.

    Examples
    --------
    >>> import tempfile
    >>> ckpt, local = tempfile.mkdtemp(), tempfile.mkdtemp()
    >>> f = TaskFiles(ckpt, "seen", 0, None)
    >>> f.base.updateValue((0,), (stateenc.encode_frame({"t": 1}, [(b"a", b"1")]),))
    >>> f.version.update(("inc", 1, 10, 0, 0, 1))
    >>> update_copy(local, "seen", 0, f.committed(), state_root=ckpt)
    ('standby', 1)
    >>> update_copy(local, "seen", 0, f.committed(), state_root=ckpt)
    ('standby', 0)
    >>> s = localstore.TaskStore.open(local, "seen", "inc", 0)
    >>> promote(s), s.version, s.get_many([b"a"]), promote(s)
    (True, ('inc', 1), [b'1'], False)
    >>> update_copy(local, "seen", 0, f.committed(), state_root=ckpt)
    ('active', 0)
    """
    files = TaskFiles(state_root, store, task, committed, create=False)
    inc, batches = str(committed[0]), int(committed[1])
    log_len = int(committed[4] or 0)
    base_at = batches - log_len
    path = localstore.task_path(root, store, inc, task, application_id=application_id)
    if os.path.isfile(os.path.join(path, "data.mdb")):
        copy = localstore.TaskStore.open(root, store, inc, task, application_id=application_id)
        if not is_standby(copy):
            return "active", 0
        written = _catch_up_copy(copy, files, (inc, batches), base_at, index_of)
        if written is not None:
            return "standby", written
        # older than the durable base: build it anew (below)
        copy.destroy()
    tmp = f"{path}.standby-{uuid.uuid4().hex[:8]}"
    fresh = localstore.TaskStore(tmp)
    try:
        written = fresh.rebuild(
            files.chunks(), [b for (b,) in files.log.get()], (inc, batches), index_of
        )
        fresh._write(lambda txn: txn.put(STANDBY_KEY, b"1", db=fresh.meta))
        fresh.env.close()
        try:
            # a task that opened its store meanwhile made the folder: it keeps its own
            os.rename(tmp, path)
        except OSError:
            return "active", 0
        return "standby", written
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def place_stores(
    disks: Iterable[str],
    active: Mapping[tuple[str, int], str],
    committed: Mapping[str, Iterable[int]],
    replicas: int,
) -> dict[str, set[tuple[str, int]]]:
    """:func:`place` for the stores of an app whose stateful operators run together in one
    ``applyInPandasWithState`` (docs/design/sub-topologies.md): which ``(store, task)``
    copies each disk keeps, given each store's tasks with state (``committed``) and the
    disk each ``(store, task)``'s own store was found on (``active``).

    Task ``t`` of every operator runs in the same Spark task (its task keys share a
    partition, :func:`kspark_server.placement.task_keys`), so an executor that Spark gives
    task ``t`` opens every operator's store of task ``t``: the copies of all of them go
    to the same disks. A store whose own disk for ``t`` is not known (it was on a lost
    executor's) keeps, besides those, its copy on the disk another store of task ``t``
    is on now: the executor there promotes it when its task next has records for it.

    Examples
    --------
    >>> out = place_stores(["a", "b"], {("seen", 0): "a"}, {"seen": [0], "counts": [0]}, 1)
    >>> out == {"a": {("counts", 0)}, "b": {("seen", 0), ("counts", 0)}}
    True
    """
    known = sorted(set(disks))
    by_task: dict[int, str] = {}
    for (_, t), d in sorted(active.items()):
        by_task.setdefault(t, d)
    out: dict[str, set[tuple[str, int]]] = {}
    for store, tasks in sorted(committed.items()):
        tasks = list(tasks)
        runs = {t: by_task[t] for t in tasks if t in by_task}
        for disk, ts in place(known, runs, tasks, replicas).items():
            out.setdefault(disk, set()).update((store, t) for t in ts)
        for t, disk in runs.items():
            if (store, t) not in active and disk in known:
                out.setdefault(disk, set()).add((store, t))
    return out


def keep(
    stores: Sequence[tuple[Any, Mapping[int, tuple[Any, ...]]]],
    state_root: str,
    placed: Mapping[str, set[tuple[str, int]]] | None,
) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """The function a standby job's tasks run (``mapInPandas`` over any rows): for each
    stateful operator's spec and its tasks' committed versions (``stores``: every operator
    of the app, each with its own tasks), keep the standby copies that this task's disk
    is given in ``placed`` (``(store, task)`` per disk; None, or a disk it does not name:
    a disk the client has not seen yet, which keeps a copy of every task whose own store
    is not here), drop the copies it is no longer given, and report each store it found
    (:data:`REPORT_SCHEMA`)."""
    from kspark_server.operators.registry import time_index_of

    def one(
        spec: Any, committed: Mapping[int, tuple[Any, ...]]
    ) -> list[tuple[str, str, str, int, str, int, int]]:
        root = spec.state.local_dir or localstore.root_dir()
        disk, me = disk_of(root), executor_id()
        app, store = spec.state.application_id, spec.store
        if placed is None or disk not in placed:
            mine = set(committed)
        else:
            mine = {t for s, t in placed[disk] if s == store}
        index_of = time_index_of(spec) if mine else None
        rows: list[tuple[str, str, str, int, str, int, int]] = []
        for task in sorted(committed):
            c = committed[task]
            path = localstore.task_path(root, store, str(c[0]), task, application_id=app)
            here = os.path.isfile(os.path.join(path, "data.mdb"))
            if task not in mine and not here:
                continue
            if task not in mine:
                s = localstore.TaskStore.open(root, store, str(c[0]), task, application_id=app)
                if is_standby(s):
                    s.destroy()
                    rows.append((disk, me, store, task, "dropped", 0, 0))
                else:
                    rows.append((disk, me, store, task, "active", int(c[1]), 0))
                continue
            kind, written = update_copy(
                root,
                store,
                task,
                c,
                state_root=state_root,
                application_id=app,
                index_of=index_of,
            )
            rows.append((disk, me, store, task, kind, int(c[1]), written))
        return rows

    def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for _ in frames:
            pass
        rows = [row for spec, committed in stores for row in one(spec, committed)]
        yield pd.DataFrame(rows, columns=list(_REPORT_FIELDS))

    return run


def committed_by_task(rows: Iterable[Mapping[str, Any]]) -> dict[int, tuple[Any, ...]]:
    """Group-state rows (``ks_task`` and the fields) by task number, for :func:`keep`."""
    out: dict[int, tuple[Any, ...]] = {}
    for r in rows:
        if r.get("incarnation") is None:
            continue
        out[placement.task_of(int(r["ks_task"]))] = tuple(r[f] for f in _FIELDS)
    return out


def committed_by_store(
    rows: Iterable[Mapping[str, Any]], keys: Mapping[str, Iterable[int] | None]
) -> dict[str, dict[int, tuple[Any, ...]]]:
    """Group-state rows of the app's ``applyInPandasWithState`` by store and task number:
    store ``s``'s are the rows of its operator's task keys (``keys[s]``,
    :func:`kspark_server.placement.task_keys`; None: every row, the one operator of an
    app with one). Stores with no committed task are left out.

    Examples
    --------
    >>> a, b = placement.task_keys(2), placement.task_keys(2, 1)
    >>> row = dict.fromkeys(_FIELDS, 0)
    >>> rows = [row | {"ks_task": k, "incarnation": f"i{k}"} for k in (*a, b[1])]
    >>> got = committed_by_store(rows, {"seen": a, "counts": b})
    >>> sorted(got["seen"]), sorted(got["counts"]), got["counts"][1][0] == f"i{b[1]}"
    ([0, 1], [1], True)
    """
    listed = list(rows)
    out: dict[str, dict[int, tuple[Any, ...]]] = {}
    for store, ks in keys.items():
        wanted = None if ks is None else {int(k) for k in ks}
        mine = committed_by_task(r for r in listed if wanted is None or int(r["ks_task"]) in wanted)
        if mine:
            out[store] = mine
    return out
