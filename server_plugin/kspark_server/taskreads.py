"""Reading the stateful operators' committed state from their files, on the server.

The runner keeps each task's state in kspark's files under the checkpoint
(:mod:`kspark_server.taskfiles`) and only the committed version, which names them, in
Spark's group state. The readers (interactive queries, replicas, rescale) read that group
state with Spark's state reader, as of the last committed micro-batch, and run these
functions over it with ``mapInPandas``: only the files a committed version names are
opened, on the executors, which see the checkpoint as the runner's tasks do.

Input rows, one per task: ``ks_task`` (the task key, :mod:`kspark_server.placement`) and
the group state's fields (:data:`kspark_server.taskfiles.GROUP_STATE_DDL`).

Examples
--------
>>> import tempfile
>>> import pandas as pd
>>> from kspark_server import placement, stateenc
>>> from kspark_server.taskfiles import TaskFiles
>>> root = tempfile.mkdtemp()
>>> f = TaskFiles(root, "seen", 0, None)
>>> f.base.updateValue((0,), (stateenc.encode_frame({"stream_time": 1}, []),))
>>> f.version.update(("inc", 1, 10, 0, 0, 1))
>>> row = dict(zip(FIELDS, f.committed(), strict=True))
>>> tasks = pd.DataFrame([{"ks_task": placement.task_keys(1)[0], **row}])
>>> [out] = committed_chunks(root, "seen")(iter([tasks]))
>>> stateenc.decode_frame(out["blob"][0])[0], bool(out["first"][0]), list(out["log"][0])
({'stream_time': 1}, True, [])
>>> [found] = owners(root, ["other", "seen"])(iter([tasks.assign(op=3)]))
>>> found.values.tolist()
[[3, 'seen']]
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd

from kspark_server import placement, taskfiles
from kspark_server.taskfiles import GROUP_STATE_DDL, TaskFiles

__all__ = [
    "CHANGES_SCHEMA",
    "CHUNKS_SCHEMA",
    "FIELDS",
    "OWNERS_SCHEMA",
    "changes_since",
    "committed_chunks",
    "held_version",
    "hold_files",
    "owners",
]

#: The group state's fields, in its order.
FIELDS = tuple(part.split()[0] for part in GROUP_STATE_DDL.split(","))

#: Output of :func:`committed_chunks`: the rows :mod:`kspark_server.queries` and
#: :mod:`kspark_server.rescale` read, one per base chunk of the committed version.
CHUNKS_SCHEMA = "blob binary, first boolean, log array<binary>"

#: Output of :func:`owners`: which store's folder holds an operator's files (``store``
#: null: a task whose named files are in none of them).
OWNERS_SCHEMA = "op int, store string"

#: Output of :func:`changes_since`, per task whose committed version changed: a head row
#: (``part`` -1: ``reset`` whether the task's state is given whole, ``held`` what the
#: reader holds after applying the rows), then with ``reset`` the base's chunks (``part``
#: 0, ``number`` the chunk), then the changes not held yet (``part`` 1, ``number`` the
#: change's place in the version's log).
CHANGES_SCHEMA = "task int, reset boolean, part int, number int, blob binary, held string"

Fn = Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]


def _tasks(frame: pd.DataFrame) -> Iterator[tuple[int, tuple[Any, ...]]]:
    """Each row's task number and committed group state."""
    columns = [frame[c].tolist() for c in ("ks_task", *FIELDS)]
    for key, *committed in zip(*columns, strict=True):
        yield placement.task_of(int(key)), tuple(committed)


def _files(root: str, store: str, task: int, committed: tuple[Any, ...]) -> TaskFiles:
    return TaskFiles(root, store, task, committed, create=False)


def committed_chunks(root: str, store: str) -> Fn:
    """Each task's committed base, one row per chunk, with the task's committed changes
    (the layout Spark's state reader gives of the other runner's state)."""

    def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in frames:
            for task, committed in _tasks(frame):
                files = _files(root, store, task, committed)
                log = [blob for (blob,) in files.log.get()]
                rows = [(chunk, i == 0, log) for i, chunk in enumerate(files.chunks())]
                if rows:
                    # one task at a time: a task's chunks are bounded, a partition's not
                    yield pd.DataFrame(rows, columns=["blob", "first", "log"])

    return run


def owners(root: str, stores: list[str]) -> Fn:
    """Which of ``stores`` holds the files of each row's operator (column ``op``): the
    store whose folder has a file the task's version names (file names carry a fresh
    id, so one store's folder holds them). Tasks that name no file are left out; a
    version whose files a later batch collected is a
    :class:`~kspark_server.taskfiles.StaleVersion`."""

    def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in frames:
            found: set[tuple[int, str | None]] = set()
            ops = frame["op"].tolist()
            for op, (task, committed) in zip(ops, _tasks(frame), strict=True):
                where: str | None = None
                moved: TaskFiles | None = None
                for store in stores:
                    files = _files(root, store, task, committed)
                    named = files.named()
                    if not named:
                        break
                    if any(os.path.exists(os.path.join(files.folder, n)) for n in named):
                        where = store
                        break
                    moved = moved or (files if files.moved_on() else None)
                else:
                    if moved is not None:
                        # the app collected the version's files since it was read
                        raise moved.stale("every file of the version")
                    found.add((int(op), None))
                    continue
                if where is not None:
                    found.add((int(op), where))
            yield pd.DataFrame(sorted(found, key=repr), columns=["op", "store"])

    return run


def held_version(files: TaskFiles) -> str:
    """What a reader that applied ``files``' committed version holds, as
    :func:`changes_since` takes it: the base (its batch, id and chunks, which never change
    under one name) and the ids of the changes after it."""
    ids = ",".join(ident for _, ident in files.log_ids)
    return f"{files.base_at}-{files.base_id}-{files.n_chunks}|{ids}"


def changes_since(root: str, store: str, held: dict[int, str]) -> Fn:
    """The change feed of store ``store``'s files: for each task whose committed version
    is not ``held[task]`` (:func:`held_version`; a task left out holds nothing), the rows
    that bring a reader from the held version to the committed one
    (:data:`CHANGES_SCHEMA`). A task whose base is the held one gives only its new
    changes; otherwise (a new base, a task new to the reader) its whole state."""

    def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in frames:
            for task, committed in _tasks(frame):
                files = _files(root, store, task, committed)
                now = held_version(files)
                was = held.get(task)
                if was == now:
                    continue
                was_base, _, was_ids = (was or "").partition("|")
                old = [x for x in was_ids.split(",") if x]
                ids = [ident for _, ident in files.log_ids]
                reset = was is None or was_base != now.partition("|")[0] or ids[: len(old)] != old
                rows: list[tuple[int, bool, int, int, bytes | None, str]] = [
                    (task, reset, -1, 0, None, now)
                ]
                if reset:
                    rows.extend((task, True, 0, i, c, now) for i, c in enumerate(files.chunks()))
                start = 0 if reset else len(old)
                files.log_ids = files.log_ids[start:]
                rows.extend(
                    (task, reset, 1, start + i, blob, now)
                    for i, (blob,) in enumerate(files.log.get())
                )
                # one task at a time: a task's chunks are bounded, a partition's not
                yield pd.DataFrame(
                    rows, columns=["task", "reset", "part", "number", "blob", "held"]
                )

    return run


def hold_files(root: str, store: str, on: bool, holder: str = "") -> Fn:
    """The ``mapInPandas`` function that renews (or ends) ``holder``'s hold on collecting
    store ``store``'s files under ``root`` (:func:`kspark_server.taskfiles.hold`), on an
    executor, which sees the checkpoint as the runner's tasks do."""

    def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in frames:
            if len(frame):
                taskfiles.hold(os.path.join(root, store), on, holder)
            yield frame

    return run
