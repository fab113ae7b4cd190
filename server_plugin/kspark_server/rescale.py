"""Re-splitting stateful operators' task states from N to M tasks (``kspark rescale``).

A task's state (see :mod:`kspark_server.operators`) is stored as a base of chunks and a log of
changes (:mod:`kspark_server.taskstate`); the split reads both, one chunk's share of a task
at a time, and writes the current state format: a rescale, even to the same number of
partitions, is where a checkpoint of another format migrates (a later format's reader of
this one goes in :func:`split_states`). Every base it writes is in chunks of the app's
``state_base_chunk_bytes``, so no value it writes passes the chunk size by more than one
entry. This job runs on the app's own server. Every entry in it
keeps the Spark hash of its partitioning column, so the entry's task under M tasks is
``pmod(hash, M)``, the same rule the app's plan applies to new records. Rescaling is
two pure functions, run as Spark jobs over the state reader's rows:

- :func:`split_states` cuts each old task's state into parts, one per new task;
- :func:`merge_states` merges the parts of one new task into its state.

A new task's stream time is the largest stream time of the old tasks it takes entries
from. The entry counts of both sides are returned, so the caller can check that nothing
was lost or duplicated before it switches the app over.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterator
from typing import Any

import pandas as pd

from kspark_server import placement, queries, stateenc, taskstate
from kspark_server.spec import BASE_CHUNK_BYTES

#: Column layout of :func:`split_states`' output: per part chunk its new task, the chunk,
#: its entries and checksum; per share of an old task (``ks_task`` -1 for a task's first
#: chunk, :data:`OLD_SHARE` for the others) its entries and checksum.
PARTS_SCHEMA = (
    "ks_task int, part binary, entries long, old_entries long, checksum long, old_checksum long"
)
#: ``ks_task`` of an old task's share after its first (counted in entries, not in tasks).
OLD_SHARE = -2
#: Column layout of :func:`merge_states`' output (the new app's initial state): the task
#: key (:mod:`kspark_server.placement`), one chunk of its base and the chunk's number, and
#: the chunk's entries and checksum (they add up to the task's).
STATES_SCHEMA = "ks_task int, chunk int, blob binary, entries long, checksum long"
#: Column layout of :func:`check_states`' output: a written task state read back.
CHECK_SCHEMA = "ks_task int, entries long, checksum long"


def checksum(kind: str, versioned: bool, st: dict[str, Any]) -> int:
    """A checksum of a task state's entries (each key's encoded entry and hash, and the
    buffered stream records), independent of their order and of the task they are in: the
    old tasks' checksums add up to the new tasks' when a re-split kept every entry as it
    was. Stream times are left out: a new task takes the largest of its old tasks'.

    >>> st = taskstate.empty("dedup", False)
    >>> st["seen"].update(a=5, b=7); st["hash"].update(a=1, b=2)
    >>> parts = split("dedup", False, st, 2)
    >>> sum(checksum("dedup", False, p) for p in parts.values()) == checksum("dedup", False, st)
    True
    """
    keys = list(taskstate.maps(kind, versioned, st)[0])
    total = 0
    for kb, eb in taskstate.change_pairs(kind, versioned, st, keys):
        total += zlib.crc32(eb or b"", zlib.crc32(kb))
    for record in st.get("buffer") or []:
        total += zlib.crc32(stateenc.pack(sorted(record.items())))
    return total


class UnhashedState(ValueError):
    """A state entry without its key's hash, which every entry keeps: the state cannot be
    re-split (an operator failed to record the hash)."""


def entries(kind: str, versioned: bool, st: dict[str, Any]) -> int:
    """The number of entries of one task state: ids seen (dedup), or keys with versions
    plus buffered stream records (join)."""
    if kind == "dedup":
        return len(st["seen"])
    if kind == taskstate.WINDOW_JOIN:
        return len(st["bufs"])
    if kind == taskstate.PROCESSOR:
        return len(st["entries"])
    table = st["table"]["data"] if versioned else st["table"]
    return len(table) + len(st.get("buffer") or [])


def _task_of(hashes: dict[Any, int], key: Any, m: int) -> int:
    h = hashes.get(key)
    if h is None:
        raise UnhashedState(f"the state entry of key {key!r} has no key hash")
    return int(h) % m  # Python's % is Spark's pmod for m > 0


def split(kind: str, versioned: bool, st: dict[str, Any], m: int) -> dict[int, dict[str, Any]]:
    """One old task state as parts keyed by new task."""
    hashes: dict[Any, int] = st.get("hash") or {}
    if kind == taskstate.WINDOW_JOIN:
        # a stream-stream join: each key's buffers move whole, the stream time with them
        joins: dict[int, dict[str, Any]] = {}
        for hk, entry in st["bufs"].items():
            task = _task_of(hashes, hk, m)
            p = joins.setdefault(task, {**taskstate.empty(kind, False), "stream_time": None})
            p["stream_time"] = st.get("stream_time")
            p["bufs"][hk] = entry
            p["hash"][hk] = hashes[hk]
        return joins
    if kind == taskstate.PROCESSOR:
        # a processor's store entries move by the hash of the record that first wrote
        # them; each new task keeps the punctuation schedule and the stores' times
        procs: dict[int, dict[str, Any]] = {}
        for sk, entry in st["entries"].items():
            task = _task_of(hashes, sk, m)
            q = procs.get(task)
            if q is None:
                q = procs[task] = taskstate.empty(kind, False)
                taskstate.set_scalars(kind, False, q, taskstate.scalars(kind, False, st))
            q["entries"][sk] = entry
            q["hash"][sk] = hashes[sk]
        return procs
    parts: dict[int, dict[str, Any]] = {}

    def part(task: int) -> dict[str, Any]:
        p = parts.get(task)
        if p is None:
            p = {k: v for k, v in st.items() if k not in ("seen", "table", "buffer", "hash")}
            p["hash"] = {}
            if kind == "dedup":
                p["seen"] = {}
            else:
                p["table"] = {"time": st["table"]["time"], "data": {}} if versioned else {}
                p["buffer"] = []
            parts[task] = p
        return p

    if kind == "dedup":
        for ident, ts in st["seen"].items():
            p = part(_task_of(hashes, ident, m))
            p["seen"][ident] = ts
            p["hash"][ident] = hashes[ident]
        return parts
    table = st["table"]["data"] if versioned else st["table"]
    for hk, value in table.items():
        p = part(_task_of(hashes, hk, m))
        (p["table"]["data"] if versioned else p["table"])[hk] = value
        p["hash"][hk] = hashes[hk]
    for record in st.get("buffer") or []:
        h = record.get("ks_hash")
        if h is None:
            raise UnhashedState("a buffered stream record has no key hash")
        part(int(h) % m)["buffer"].append(record)
    return parts


def _max(a: Any, b: Any) -> Any:
    if a is None:
        return b
    if b is None:
        return a
    return max(a, b)


def merge(kind: str, versioned: bool, parts: list[dict[str, Any]]) -> dict[str, Any]:
    """The parts of one new task as its state."""
    if kind == taskstate.WINDOW_JOIN:
        joined = taskstate.empty(kind, False)
        for p in parts:
            joined["stream_time"] = _max(joined["stream_time"], p.get("stream_time"))
            joined["bufs"].update(p["bufs"])
            joined["hash"].update(p["hash"])
        return joined
    if kind == taskstate.PROCESSOR:
        merged = taskstate.empty(kind, False)
        for p in parts:
            merged["stream_time"] = _max(merged["stream_time"], p.get("stream_time"))
            for name, t in (p.get("observed") or {}).items():
                merged["observed"][name] = _max(merged["observed"].get(name), t)
            for i, sched in (p.get("punct") or {}).items():
                merged["punct"].setdefault(i, sched)
            merged["entries"].update(p["entries"])
            merged["hash"].update(p["hash"])
        return merged
    out: dict[str, Any] = {
        k: v for k, v in parts[0].items() if k not in ("seen", "table", "buffer", "hash")
    }
    out["hash"] = {}
    out["stream_time"] = None
    if kind == "dedup":
        out["seen"] = {}
    else:
        out["table"] = {"time": None, "data": {}} if versioned else {}
        out["buffer"] = []
    for p in parts:
        out["stream_time"] = _max(out["stream_time"], p.get("stream_time"))
        out["hash"].update(p["hash"])
        if kind == "dedup":
            out["seen"].update(p["seen"])
            continue
        if versioned:
            out["table"]["time"] = _max(out["table"]["time"], p["table"]["time"])
            out["table"]["data"].update(p["table"]["data"])
        else:
            out["table"].update(p["table"])
        out["buffer"].extend(p["buffer"])
    if kind == taskstate.SUPPRESS:
        out["bytes"] = None  # the operator counts its new share's bytes again
    if kind != "dedup":
        out["buffer"].sort(key=lambda r: (int(r["timestamp"]), r["ks_seq"], r["ks_sub"]))
    return out


def split_states(
    kind: str, versioned: bool, m: int, chunk_bytes: int = BASE_CHUNK_BYTES
) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """The ``mapInPandas`` function over the state reader's rows (``blob``, ``first``,
    ``log``: see :mod:`kspark_server.queries`), one old task's chunk at a time; each part
    in chunks of about ``chunk_bytes``."""

    def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for blob, first, log in queries.chunks(frames):
            st = taskstate.from_pairs(kind, versioned, *taskstate.share(blob, first, log))
            rows: list[tuple[int, bytes | None, int, int, int, int]] = [
                (
                    -1 if first else OLD_SHARE,
                    None,
                    0,
                    entries(kind, versioned, st),
                    0,
                    checksum(kind, versioned, st),
                )
            ]
            for task, p in split(kind, versioned, st, m).items():
                # a part in chunks (with the task's entries and checksum on its first)
                for i, chunk in enumerate(taskstate.base_chunks(kind, versioned, p, chunk_bytes)):
                    rows.append(
                        (
                            task,
                            chunk,
                            entries(kind, versioned, p) if i == 0 else 0,
                            0,
                            checksum(kind, versioned, p) if i == 0 else 0,
                            0,
                        )
                    )
            # one frame per chunk read: no more than a chunk's share of a task at a time
            yield pd.DataFrame(
                rows,
                columns=["ks_task", "part", "entries", "old_entries", "checksum", "old_checksum"],
            )

    return run


def merge_states(
    kind: str, versioned: bool, m: int, chunk_bytes: int = BASE_CHUNK_BYTES
) -> Callable[[pd.DataFrame], pd.DataFrame]:
    """The ``applyInPandas`` function of one new task's parts (of ``m`` new tasks): its
    base in chunks of about ``chunk_bytes``."""

    def run(frame: pd.DataFrame) -> pd.DataFrame:
        task = int(frame["ks_task"].iat[0])
        parts = [taskstate.materialize(kind, versioned, [b], []) for b in frame["part"].tolist()]
        st = merge(kind, versioned, parts)
        blobs = taskstate.base_chunks(kind, versioned, st, chunk_bytes)
        counted = [taskstate.materialize(kind, versioned, [b], []) for b in blobs]
        return pd.DataFrame(
            {
                "ks_task": [placement.task_keys(m)[task]] * len(blobs),
                "chunk": list(range(len(blobs))),
                "blob": blobs,
                "entries": [entries(kind, versioned, c) for c in counted],
                "checksum": [checksum(kind, versioned, c) for c in counted],
            }
        )

    return run


def check_states(
    kind: str, versioned: bool
) -> Callable[[Iterator[pd.DataFrame]], Iterator[pd.DataFrame]]:
    """The ``mapInPandas`` function that reads written task states back (``ks_task``,
    ``blob``: one row per chunk) and gives each chunk's entries and checksum, to verify the
    rewrite (a task's are the sums over its chunks)."""

    def run(frames: Iterator[pd.DataFrame]) -> Iterator[pd.DataFrame]:
        for frame in frames:
            rows = []
            for task, blob in zip(frame["ks_task"].tolist(), frame["blob"].tolist(), strict=True):
                st = taskstate.materialize(kind, versioned, [blob], [])
                rows.append(
                    (int(task), entries(kind, versioned, st), checksum(kind, versioned, st))
                )
            yield pd.DataFrame(rows, columns=["ks_task", "entries", "checksum"])

    return run
