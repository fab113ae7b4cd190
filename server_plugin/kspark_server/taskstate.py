"""A task's state as a base plus a log of per-batch changes (state format 4).

A stateful operator keeps each task's state as a Python dict (see :mod:`kspark_server.tasks`).
Writing the whole dict back after every micro-batch made every batch cost the task's
whole state in Spark's state store: RocksDB's changelog checkpoint of a batch held the
full state, and a restore replayed the full state once per batch since the last snapshot.

So the state lives in two state variables of the task:

- ``<store>``: a value state, the pickled *base* (the dict as of some batch);
- ``<store>__log``: a list state, one pickled *change* per later batch: the batch's
  scalar fields (stream time, grace buffer) and, for every key the batch touched, the
  key's new entry in each of the state's per-key maps (None: removed from that map).

A batch appends its change, which holds only the keys it touched, unless the log has grown
past half the base (or :data:`MAX_LOG` changes). Then it writes a new base and clears the
log. Each write of the whole state is paid for by at least half as many bytes of
changes, and reading a task's state costs at most 1.5 times its size.

The per-key maps of each operator kind are listed by :func:`maps`. Every reader of the
state uses :func:`materialize`: the operator itself, the interactive-query readers and
the rescale job.

Examples
--------
>>> import pickle
>>> base = {"format": 4, "stream_time": 5, "seen": {"a": 5}, "hash": {"a": 11}}
>>> st = pickle.loads(pickle.dumps(base))
>>> st["seen"]["b"] = 7; st["hash"]["b"] = 12; del st["seen"]["a"]; del st["hash"]["a"]
>>> st["stream_time"] = 7
>>> change = encode_change("dedup", False, st, {"a", "b"})
>>> materialize("dedup", False, pickle.dumps(base), [change]) == st
True
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Set
from typing import Any

#: Suffix of the list-state variable that holds a store's log of changes.
LOG_SUFFIX = "__log"
#: A task writes a new base once its log holds this many changes, however small.
MAX_LOG = 512
#: ... or once the log's bytes pass this fraction of the base's.
LOG_FRACTION = 0.5
#: Bases smaller than this are rewritten rather than logged against (cheap either way).
MIN_BASE_BYTES = 4096

_HIGHEST = pickle.HIGHEST_PROTOCOL


def log_name(store: str) -> str:
    """The list-state variable of ``store``'s log.

    >>> log_name("rates")
    'rates__log'
    """
    return store + LOG_SUFFIX


def maps(kind: str, versioned: bool, st: dict[str, Any]) -> list[dict[Any, Any]]:
    """The per-key maps of a task state, all keyed alike."""
    if kind == "dedup":
        return [st["seen"], st["hash"]]
    table = st["table"]["data"] if versioned else st["table"]
    return [table, st["hash"]]


def scalars(kind: str, versioned: bool, st: dict[str, Any]) -> dict[str, Any]:
    """The fields of a task state outside its per-key maps (written whole in each change)."""
    out = {"stream_time": st.get("stream_time")}
    if kind != "dedup":
        out["buffer"] = st.get("buffer") or []
        if versioned:
            out["table_time"] = st["table"]["time"]
    return out


def encode_change(kind: str, versioned: bool, st: dict[str, Any], touched: Set[Any]) -> bytes:
    """One batch's change: the scalar fields and each touched key's entries."""
    ms = maps(kind, versioned, st)
    keys = {k: tuple(m.get(k) for m in ms) for k in touched}
    return pickle.dumps({"scalars": scalars(kind, versioned, st), "keys": keys}, protocol=_HIGHEST)


def apply_change(kind: str, versioned: bool, st: dict[str, Any], change: bytes) -> None:
    """Apply one change (from :func:`encode_change`) to ``st`` in place."""
    c = pickle.loads(change)
    ms = maps(kind, versioned, st)
    for k, entries in c["keys"].items():
        for m, v in zip(ms, entries, strict=True):
            if v is None:
                m.pop(k, None)
            else:
                m[k] = v
    s = c["scalars"]
    st["stream_time"] = s["stream_time"]
    if kind != "dedup":
        st["buffer"] = s["buffer"]
        if versioned:
            st["table"]["time"] = s["table_time"]


def materialize(kind: str, versioned: bool, base: bytes, log: Iterable[bytes]) -> dict[str, Any]:
    """A task's state: its base with its log applied, oldest change first."""
    st: dict[str, Any] = pickle.loads(base)
    st.setdefault("hash", {})
    for change in log:
        apply_change(kind, versioned, st, change)
    return st


def should_compact(
    base_bytes: int, log_bytes: int, log_len: int, min_base: int = MIN_BASE_BYTES
) -> bool:
    """Whether a batch writes a new base instead of appending its change.

    ``log_bytes`` and ``log_len`` include the batch's own change.

    >>> should_compact(1_000_000, 10_000, 3)
    False
    >>> should_compact(1_000_000, 600_000, 3)
    True
    >>> should_compact(100, 10, 1)
    True
    """
    return base_bytes < min_base or log_len > MAX_LOG or log_bytes > LOG_FRACTION * base_bytes
