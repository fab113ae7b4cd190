"""Rescaling the stateful operators' state on its files: build a new layout, then
keep it current (``StreamsApp.rescale``).

The runner keeps each task's state in kspark's files under the checkpoint
(:mod:`kspark_server.taskfiles`), named by the task's committed version. A new layout of
``m`` tasks is built from them and, while the app keeps
running on the old layout, kept current from the old tasks' change files, as Kafka Streams
warms a *learner task* on its new instance before the task moves (KIP-441):

- :func:`split_files` reads each old task's committed files (one Spark task per old task)
  and cuts its state into parts, one per new task, by ``pmod(hash, m)``
  (:func:`kspark_server.rescale.split`);
- :func:`build_tasks` merges each new task's parts (one Spark partition per new task),
  writes them as the new task's base files under the new checkpoint, fills the new task's
  executor-local store (:mod:`kspark_server.localstore`) at that version, and returns the
  new task's *seed*: the group state that names the files, which the runner uses for a
  task that has no group state yet;
- :func:`catch_up_tasks` brings each new task from the old layout's committed version it
  was built at to a later one: it reads only the old tasks' change files since (an old
  task that wrote a new base in between is re-read whole), keeps the changes of the new
  task's keys, and writes them as one change file of the new task, exactly as a batch of
  the runner would.

Each new task also keeps its *meta* (:func:`pack_meta`): per old task, the old task's
batch it has applied, the scalars of its part (stream time, the grace buffer's records of
the new task's keys) and the number of its keys in the new task. A new task's scalars are
always what :func:`kspark_server.rescale.merge` makes of the parts of the old tasks that
hold keys of it, so the state after any number of catch-ups is the state an offline
rescale of the same committed state gives.

Entries of a key carry the Spark hash of its partitioning column as their last field, so a
put finds its new task; a removal (no entry) goes to the new task that holds the key.
"""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd

from kspark_server import localstore, placement, rescale, stateenc, taskstate
from kspark_server.operators.registry import time_index_of
from kspark_server.spec import StatefulSpec
from kspark_server.taskfiles import TaskFiles
from kspark_server.taskreads import FIELDS, hold_files

__all__ = [
    "BUILT_SCHEMA",
    "MARKER",
    "PARTS_SCHEMA",
    "build_tasks",
    "catch_up_tasks",
    "drop_batches",
    "hold_files",
    "pack_meta",
    "split_files",
    "unpack_meta",
]

#: Output of :func:`split_files`: per part chunk its new task's key (``ks_task``), its old
#: task and the part (one frame); per old task (``ks_task`` -1) its entries and checksum.
PARTS_SCHEMA = "ks_task int, old int, part binary, entries long, checksum long"
#: ``old`` of a row that only names a new task (every new task is built, parts or none).
MARKER = -2
#: Output of :func:`build_tasks` and :func:`catch_up_tasks`: per new task its number,
#: meta (:func:`pack_meta`), entries and checksum; per old task (``ks_task`` -1) its
#: entries and checksum, passed through.
BUILT_SCHEMA = "ks_task int, meta binary, entries long, checksum long"

Fn = Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]


def pack_meta(meta: dict[str, Any]) -> bytes:
    """A new task's meta as MessagePack: ``seed`` (its group state), ``inc`` (its local
    store's incarnation), and per old task ``pos`` (batches applied), ``sc`` (its part's
    scalars) and ``cnt`` (its keys here).

    >>> m = {"seed": [1], "inc": "i", "pos": {0: 3}, "sc": {0: {}}, "cnt": {0: 2}}
    >>> unpack_meta(pack_meta(m)) == m
    True
    """
    return stateenc.pack(
        {
            "seed": list(meta["seed"]),
            "inc": meta["inc"],
            "pos": sorted(meta["pos"].items()),
            "sc": sorted(meta["sc"].items()),
            "cnt": sorted(meta["cnt"].items()),
        }
    )


def unpack_meta(blob: bytes) -> dict[str, Any]:
    d = stateenc.unpack(blob)
    return {
        "seed": list(d["seed"]),
        "inc": str(d["inc"]),
        "pos": {int(o): int(n) for o, n in d["pos"]},
        "sc": {int(o): dict(s) for o, s in d["sc"]},
        "cnt": {int(o): int(n) for o, n in d["cnt"]},
    }


def _old_files(root: str, store: str, task: int, committed: Any) -> TaskFiles:
    return TaskFiles(root, store, task, committed, create=False)


def _map_count(kind: str, versioned: bool, st: dict[str, Any]) -> int:
    return len(taskstate.maps(kind, versioned, st)[0])


def _task_buffer(sc: dict[str, Any], task: int, m: int) -> dict[str, Any]:
    """Scalars with only the grace buffer's records of new task ``task``."""
    if not sc.get("buffer"):
        return dict(sc)
    return {**sc, "buffer": [r for r in sc["buffer"] if int(r["ks_hash"]) % m == task]}


def split_files(root: str, store: str, kind: str, versioned: bool, m: int) -> Fn:
    """The ``mapInPandas`` function over old tasks' group states (``ks_task`` and the
    fields of :data:`kspark_server.taskfiles.GROUP_STATE_DDL`): each old task's committed
    state, one chunk's share at a time, cut into parts by new task (:data:`PARTS_SCHEMA`)."""
    keys = placement.task_keys(m)

    def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in frames:
            columns = [frame[c].tolist() for c in ("ks_task", *FIELDS)]
            for key, *committed in zip(*columns, strict=True):
                old = placement.task_of(int(key))
                files = _old_files(root, store, old, tuple(committed))
                log = [blob for (blob,) in files.log.get()]
                for i, chunk in enumerate(files.chunks()):
                    sc, pairs = taskstate.share(chunk, i == 0, log)
                    st = taskstate.from_pairs(kind, versioned, sc, pairs)
                    rows: list[tuple[int, int, bytes | None, int, int]] = [
                        (
                            -1,
                            old,
                            None,
                            rescale.entries(kind, versioned, st),
                            rescale.checksum(kind, versioned, st),
                        )
                    ]
                    for task, p in rescale.split(kind, versioned, st, m).items():
                        rows.append(
                            (keys[task], old, taskstate.encode_base(kind, versioned, p), 0, 0)
                        )
                    yield pd.DataFrame(
                        rows, columns=["ks_task", "old", "part", "entries", "checksum"]
                    )

    return run


def _local(spec: StatefulSpec, inc: str, task: int) -> localstore.TaskStore:
    root = spec.state.local_dir or localstore.root_dir()
    return localstore.TaskStore.open(
        root, spec.store, inc, task, application_id=spec.state.application_id
    )


def _merged_scalars(
    kind: str, versioned: bool, sc: dict[int, dict[str, Any]], cnt: dict[int, int]
) -> dict[str, Any] | None:
    """A new task's scalars: :func:`kspark_server.rescale.merge` of the parts of the old
    tasks that hold keys (or buffered records) of it; None if none does."""
    parts = []
    for old in sorted(sc):
        s = sc[old]
        if cnt.get(old, 0) > 0 or s.get("buffer"):
            p = taskstate.empty(kind, versioned)
            taskstate.set_scalars(kind, versioned, p, s)
            parts.append(p)
    if not parts:
        return None
    return taskstate.scalars(kind, versioned, rescale.merge(kind, versioned, parts))


def _result(task: int, meta: dict[str, Any], entries: int, checksum: int) -> tuple[Any, ...]:
    return (task, pack_meta(meta), entries, checksum)


def build_tasks(spec: StatefulSpec, new_root: str, m: int, positions: dict[int, int]) -> Fn:
    """The ``mapInPandas`` function over :func:`split_files`' rows, partitioned so that one
    partition holds one new task's parts (and its :data:`MARKER` row, so that a new task
    without parts is built too, empty): the new task's base files under ``new_root``,
    its local store, and its meta (:data:`BUILT_SCHEMA`). ``positions``: each old task's
    batches at the version read. Old tasks' rows pass through."""
    kind, versioned = spec.kind, spec.versioned
    chunk_bytes = spec.state.base_chunk_bytes

    def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        by_task: dict[int, list[tuple[int, bytes]]] = {}
        out: list[tuple[Any, ...]] = []
        for frame in frames:
            for key, old, part, n, c in zip(
                frame["ks_task"].tolist(),
                frame["old"].tolist(),
                frame["part"].tolist(),
                frame["entries"].tolist(),
                frame["checksum"].tolist(),
                strict=True,
            ):
                if int(key) == -1:
                    out.append((-1, None, int(n), int(c)))
                    continue
                mine = by_task.setdefault(placement.task_of(int(key)), [])
                if int(old) != MARKER:
                    mine.append((int(old), part))
        index_of = time_index_of(spec) if by_task else None
        for task, parts in sorted(by_task.items()):
            parts.sort(key=lambda p: p[0])
            states = [(o, taskstate.materialize(kind, versioned, [b], [])) for o, b in parts]
            merged = (
                rescale.merge(kind, versioned, [s for _, s in states])
                if states
                else taskstate.empty(kind, versioned)
            )
            sc: dict[int, dict[str, Any]] = {}
            cnt: dict[int, int] = {}
            for o in sorted({o for o, _ in states}):
                of_old = rescale.merge(kind, versioned, [s for p, s in states if p == o])
                sc[o] = taskstate.scalars(kind, versioned, of_old)
                cnt[o] = _map_count(kind, versioned, of_old)
            chunks = taskstate.base_chunks(kind, versioned, merged, chunk_bytes)
            inc = uuid.uuid4().hex
            files = TaskFiles(new_root, spec.store, task, None)
            for i, chunk in enumerate(chunks):
                files.base.updateValue((i,), (chunk,))
            files.version.update((inc, 0, sum(len(c) for c in chunks), 0, 0, len(chunks)))
            seed = files.committed()
            local = _local(spec, inc, task)
            local.rebuild(
                TaskFiles(new_root, spec.store, task, seed, create=False).chunks(),
                [],
                (inc, 0),
                index_of,
            )
            if local.count() != sum(cnt.values()):
                raise rescale.UnhashedState(
                    f"new task {task} of store {spec.store}: its local store holds "
                    f"{local.count()} keys, its parts {sum(cnt.values())}"
                )
            pos = {o: positions.get(o, 0) for o in positions}
            meta = {"seed": list(seed), "inc": inc, "pos": pos, "sc": sc, "cnt": cnt}
            out.append(
                _result(
                    task,
                    meta,
                    rescale.entries(kind, versioned, merged),
                    rescale.checksum(kind, versioned, merged),
                )
            )
        yield pd.DataFrame(out, columns=["ks_task", "meta", "entries", "checksum"])

    return run


def _old_task_state(
    root: str, store: str, kind: str, versioned: bool, old: int, committed: tuple[Any, ...]
) -> dict[str, Any]:
    files = _old_files(root, store, old, committed)
    return taskstate.materialize(
        kind, versioned, list(files.chunks()), [b for (b,) in files.log.get()]
    )


def catch_up_tasks(
    spec: StatefulSpec,
    old_root: str,
    new_root: str,
    m: int,
    n_old: int,
    olds: dict[int, tuple[Any, ...]],
) -> Fn:
    """The ``mapInPandas`` function over rows (``ks_task``: a new task's key, ``meta``),
    one new task per partition: the new task brought to the old layout's version
    ``olds`` (old task -> its committed group state) with one change file, and its new
    meta (:data:`BUILT_SCHEMA`: entries and checksum 0)."""
    kind, versioned, store = spec.kind, spec.versioned, spec.store
    unpack = stateenc.unpack

    def one(task: int, meta: dict[str, Any], index_of: Any) -> dict[str, Any]:
        seed = tuple(meta["seed"])
        inc = meta["inc"]
        files = TaskFiles(new_root, store, task, seed)
        batches = int(seed[1])
        local = _local(spec, inc, task)
        if local.version != (inc, batches):
            # another executor, or a store cleaned up: from the new task's files
            local.rebuild(files.chunks(), [b for (b,) in files.log.get()], (inc, batches), index_of)
        pending: dict[bytes, bytes | None] = {}

        def present(kbs: list[bytes]) -> list[bool]:
            unknown = [k for k in kbs if k not in pending]
            found = dict(zip(unknown, local.get_many(unknown), strict=True))
            return [
                (pending[k] is not None) if k in pending else (found[k] is not None) for k in kbs
            ]

        pos, sc, cnt = dict(meta["pos"]), dict(meta["sc"]), dict(meta["cnt"])
        for old, committed in sorted(olds.items()):
            at = int(committed[1])
            if at == pos.get(old, 0):
                continue
            of = _old_files(old_root, store, old, committed)
            if of.base_at <= pos.get(old, 0):
                # the changes since the batch applied, oldest first
                for n, ident in of.log_ids:
                    if n <= pos.get(old, 0):
                        continue
                    s, pairs = stateenc.decode_frame(
                        of.read(of.change_path(n, ident), f"change {n} of {of.where}")
                    )
                    kbs = [kb for kb, _ in pairs]
                    here = present(kbs)
                    for (kb, eb), was in zip(pairs, here, strict=True):
                        if eb is None:
                            if was:
                                pending[kb] = None
                                cnt[old] = cnt.get(old, 0) - 1
                        elif int(unpack(eb)[-1]) % m == task:
                            pending[kb] = eb
                            if not was:
                                cnt[old] = cnt.get(old, 0) + 1
                    sc[old] = _task_buffer(s, task, m)
            else:
                # a new base since: the old task's share of this task, whole
                st = _old_task_state(old_root, store, kind, versioned, old, committed)
                part = rescale.split(kind, versioned, st, m).get(task)
                want: dict[bytes, bytes] = {}
                if part is not None:
                    ms = taskstate.maps(kind, versioned, part)
                    want = {
                        k: e
                        for k, e in taskstate.change_pairs(kind, versioned, part, list(ms[0]))
                        if e is not None
                    }
                for kb, eb in local.pairs():
                    if kb not in pending and int(unpack(eb)[-1]) % n_old == old and kb not in want:
                        pending[kb] = None
                pending.update(want)
                cnt[old] = len(want)
                sc[old] = _task_buffer(taskstate.scalars(kind, versioned, st), task, m)
            pos[old] = at
        merged = _merged_scalars(kind, versioned, sc, cnt)
        new_sc = (
            merged
            if merged is not None
            else taskstate.scalars(kind, versioned, taskstate.empty(kind, versioned))
        )
        if pending or new_sc != local.scalars():
            change = stateenc.encode_frame(new_sc, list(pending.items()))
            files.log.appendValue((change,))
            v = files.version.get()
            assert v is not None
            files.version.update(
                (inc, batches + 1, int(v[2]), int(v[3]) + len(change), int(v[4]) + 1, int(v[5]))
            )
            local.catch_up([change], (inc, batches + 1), index_of)
            seed = files.committed()
        if local.count() != sum(c for c in cnt.values()):
            raise rescale.UnhashedState(
                f"new task {task} of store {store}: its local store holds {local.count()} "
                f"keys after catching up, its old tasks' counts {sum(cnt.values())}"
            )
        return {"seed": list(seed), "inc": inc, "pos": pos, "sc": sc, "cnt": cnt}

    def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        index_of: Any = None
        out: list[tuple[Any, ...]] = []
        for frame in frames:
            for key, blob in zip(frame["ks_task"].tolist(), frame["meta"].tolist(), strict=True):
                if index_of is None:
                    index_of = time_index_of(spec) or False
                task = placement.task_of(int(key))
                meta = one(task, unpack_meta(blob), index_of or None)
                out.append(_result(task, meta, 0, 0))
        yield pd.DataFrame(out, columns=["ks_task", "meta", "entries", "checksum"])

    return run


def drop_batches(paths: list[str], first: int) -> Fn:
    """The ``mapInPandas`` function (over one row) that removes the ``batch_id=N`` folders
    with ``N >= first`` from the internal topics' folders ``paths``, on an executor, which
    sees the checkpoint as the runner's tasks do: the output of old-layout batches that
    did not commit, which the new layout's first batch would list before writing those
    batches again (docs/design/sub-topologies.md)."""

    def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        dropped: list[str] = []
        for frame in frames:
            if not len(frame):
                continue
            for path in paths:
                try:
                    names = os.listdir(path)
                except FileNotFoundError:
                    continue
                for name in names:
                    n = name.removeprefix("batch_id=")
                    if n != name and n.isdigit() and int(n) >= first:
                        shutil.rmtree(os.path.join(path, name))
                        dropped.append(os.path.join(path, name))
        yield pd.DataFrame({"dropped": dropped}, dtype=object)

    return run
