"""A task's durable state: a base plus a log of per-batch changes (state format 5).

A stateful operator's task keeps its state in three state variables of Spark's state
store:

- ``<store>``: a value state, the *base*: the whole state as of some batch;
- ``<store>__log``: a list state, one *change* per later batch: the batch's scalar fields
  (stream time, grace buffer) and the new entry of every key the batch changed (nil:
  the key was removed);
- ``<store>__version``: a value state, the state's version (see
  :mod:`kspark_server.localstore`) and the sizes that decide when to write a new base.

A base and a change are frames of :mod:`kspark_server.stateenc` (MessagePack, no pickle).
The operator works on the executor-local copy (:mod:`kspark_server.localstore`) and reads
the base and log only to rebuild it. A batch appends its change, which holds only the
keys it changed, until the log has grown past half the base (or :data:`MAX_LOG`
changes); then it writes a new base and clears the log, so the log's replay costs at most
half the state, and writing bases costs at most twice the changes.

An *entry* is the list of a key's values in each of the state's per-key maps
(:func:`maps`): ``[timestamp, hash]`` for deduplication, ``[value, hash]`` for a
latest-value table, ``[[timestamps, values], hash]`` for a versioned table,
``[buffers, hash]`` for a stream-stream join (:mod:`kspark_server.windowjoin`), where
``hash`` is the Spark hash of the key's partitioning column (for rescaling).

Every reader of the whole state uses :func:`materialize`: the interactive-query readers,
the replicas and the rescale job.

Examples
--------
>>> from kspark_server import stateenc
>>> st = empty("dedup", False)
>>> st["seen"]["a"] = 5; st["hash"]["a"] = 11; st["stream_time"] = 5
>>> base = stateenc.encode_frame(scalars("dedup", False, st), change_pairs("dedup", False, st, ["a"]))
>>> st["seen"]["b"] = 7; st["hash"]["b"] = 12; del st["seen"]["a"]; del st["hash"]["a"]
>>> st["stream_time"] = 7
>>> change = stateenc.encode_frame(scalars("dedup", False, st), change_pairs("dedup", False, st, ["a", "b"]))
>>> materialize("dedup", False, base, [change]) == st
True
"""

from __future__ import annotations

import pickle
from collections.abc import Iterable, Sequence
from typing import Any

from kspark_server import stateenc

#: The layout of the task state these functions read and write.
STATE_FORMAT = stateenc.FORMAT
#: The kind of a windowed stream-stream join (:mod:`kspark_server.windowjoin`): an entry
#: holds both streams' buffered records of one key.
WINDOW_JOIN = "windowjoin"
#: Suffix of the list-state variable that holds a store's log of changes.
LOG_SUFFIX = "__log"
#: Suffix of the value-state variable that holds a store's version.
VERSION_SUFFIX = "__version"
#: A task writes a new base once its log holds this many changes, however small.
MAX_LOG = 512
#: ... or once the log's bytes pass this fraction of the base's.
LOG_FRACTION = 0.5
#: Bases smaller than this are rewritten rather than logged against (cheap either way).
MIN_BASE_BYTES = 4096


def log_name(store: str) -> str:
    """The list-state variable of ``store``'s log.

    >>> log_name("rates")
    'rates__log'
    """
    return store + LOG_SUFFIX


def version_name(store: str) -> str:
    """The value-state variable of ``store``'s version.

    >>> version_name("rates")
    'rates__version'
    """
    return store + VERSION_SUFFIX


def empty(kind: str, versioned: bool) -> dict[str, Any]:
    """An empty task state of an operator kind."""
    if kind == "dedup":
        return {"format": STATE_FORMAT, "stream_time": None, "seen": {}, "hash": {}}
    if kind == WINDOW_JOIN:
        return {"format": STATE_FORMAT, "stream_time": None, "bufs": {}, "hash": {}}
    table: Any = {"time": None, "data": {}} if versioned else {}
    return {"format": STATE_FORMAT, "stream_time": None, "table": table, "buffer": [], "hash": {}}


def maps(kind: str, versioned: bool, st: dict[str, Any]) -> list[dict[Any, Any]]:
    """The per-key maps of a task state, all keyed alike."""
    if kind == "dedup":
        return [st["seen"], st["hash"]]
    if kind == WINDOW_JOIN:
        return [st["bufs"], st["hash"]]
    table = st["table"]["data"] if versioned else st["table"]
    return [table, st["hash"]]


def scalars(kind: str, versioned: bool, st: dict[str, Any]) -> dict[str, Any]:
    """The fields of a task state outside its per-key maps (written whole in each change)."""
    out = {"stream_time": st.get("stream_time")}
    if kind not in ("dedup", WINDOW_JOIN):
        out["buffer"] = st.get("buffer") or []
        if versioned:
            out["table_time"] = st["table"]["time"]
    return out


def set_scalars(kind: str, versioned: bool, st: dict[str, Any], s: dict[str, Any]) -> None:
    """Put scalar fields (from :func:`scalars`) into ``st``."""
    st["stream_time"] = s.get("stream_time")
    if kind not in ("dedup", WINDOW_JOIN):
        st["buffer"] = list(s.get("buffer") or [])
        if versioned:
            st["table"]["time"] = s.get("table_time")


def change_pairs(
    kind: str, versioned: bool, st: dict[str, Any], keys: Iterable[Any]
) -> list[tuple[bytes, bytes | None]]:
    """The encoded (key, entry) pairs of ``keys`` as ``st`` has them (None: removed)."""
    ms = maps(kind, versioned, st)
    pack = stateenc.pack
    out: list[tuple[bytes, bytes | None]] = []
    for k in keys:
        entry = [m.get(k) for m in ms]
        out.append((pack(k), None if entry[0] is None else pack(entry)))
    return out


def fill(
    kind: str,
    versioned: bool,
    st: dict[str, Any],
    keys: Sequence[Any],
    entries: Sequence[bytes | None],
) -> None:
    """Put the decoded ``entries`` of ``keys`` (None: absent) into ``st``'s maps."""
    ms = maps(kind, versioned, st)
    unpack = stateenc.unpack
    for k, raw in zip(keys, entries, strict=True):
        if raw is None:
            continue
        for m, v in zip(ms, unpack(raw), strict=True):
            if v is not None:
                m[k] = v


def apply_frame(kind: str, versioned: bool, st: dict[str, Any], frame: bytes) -> None:
    """Apply a base or change (a frame of :mod:`kspark_server.stateenc`) to ``st``."""
    s, pairs = stateenc.decode_frame(frame)
    ms = maps(kind, versioned, st)
    unpack = stateenc.unpack
    for kb, eb in pairs:
        k = unpack(kb)
        if eb is None:
            for m in ms:
                m.pop(k, None)
        else:
            for m, v in zip(ms, unpack(eb), strict=True):
                if v is None:
                    m.pop(k, None)
                else:
                    m[k] = v
    set_scalars(kind, versioned, st, s)


def merge_pairs(
    base: bytes | None, log: Iterable[bytes]
) -> tuple[dict[str, Any], dict[bytes, bytes]]:
    """The scalars and encoded pairs of a base with its log applied, without decoding the
    entries (an executor-local store's rebuild)."""
    out: dict[bytes, bytes] = {}
    s: dict[str, Any] = {}
    for frame in ([] if base is None else [base]) + list(log):
        s, pairs = stateenc.decode_frame(frame)
        for kb, eb in pairs:
            if eb is None:
                out.pop(kb, None)
            else:
                out[kb] = eb
    return s, out


def _materialize_pickled(
    kind: str, versioned: bool, base: bytes, log: Iterable[bytes]
) -> dict[str, Any]:
    """A state of formats 3 and 4 (pickled), read only by the server-side rescale job
    that migrates it: the client never unpickles (see :func:`materialize`)."""
    st: dict[str, Any] = pickle.loads(base)
    st.setdefault("hash", {})
    for change in log:
        c = pickle.loads(change)
        ms = maps(kind, versioned, st)
        for k, entries in c["keys"].items():
            for m, v in zip(ms, entries, strict=True):
                if v is None:
                    m.pop(k, None)
                else:
                    m[k] = v
        sc = c["scalars"]
        st["stream_time"] = sc["stream_time"]
        if kind != "dedup":
            st["buffer"] = sc["buffer"]
            if versioned:
                st["table"]["time"] = sc["table_time"]
    st["format"] = STATE_FORMAT
    return st


def materialize(
    kind: str,
    versioned: bool,
    base: bytes | None,
    log: Iterable[bytes],
    *,
    allow_pickle: bool = False,
) -> dict[str, Any]:
    """A task's whole state: its base with its log applied, oldest change first.

    A pickled state of an older kspark (formats 3 and 4) raises
    :class:`~kspark_server.stateenc.StateFormatError`, unless ``allow_pickle`` (only the
    server-side migration passes it).
    """
    if base is not None and not stateenc.is_frame(base) and allow_pickle:
        return _materialize_pickled(kind, versioned, base, log)
    st = empty(kind, versioned)
    for frame in ([] if base is None else [base]) + list(log):
        apply_frame(kind, versioned, st, frame)
    return st


def encode_base(kind: str, versioned: bool, st: dict[str, Any]) -> bytes:
    """A whole task state as a base frame (a rescale's new task states)."""
    return stateenc.encode_frame(
        scalars(kind, versioned, st),
        change_pairs(kind, versioned, st, list(maps(kind, versioned, st)[0])),
    )


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
