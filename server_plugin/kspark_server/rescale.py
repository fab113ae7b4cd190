"""Re-splitting stateful operators' task states from N to M tasks (``StreamsApp.rescale``).

A task's state (see :mod:`kspark_server.operators`) is a base of chunks and a log of
changes (:mod:`kspark_server.taskstate`). Every entry keeps the Spark hash of its
partitioning column, so the entry's task under M tasks is ``pmod(hash, M)``, the same rule
the app's plan applies to new records. Rescaling is two pure functions, which
:mod:`kspark_server.regroup` runs over the old tasks' files:

- :func:`split` cuts an old task's state into parts, one per new task;
- :func:`merge` merges the parts of one new task into its state.

A new task's stream time is the largest stream time of the old tasks it takes entries
from. :func:`entries` and :func:`checksum` count both sides, so the caller can check that
nothing was lost or duplicated before it switches the app over.
"""

from __future__ import annotations

import zlib
from typing import Any

from kspark_server import stateenc, taskstate


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
