"""A task's durable state: a chunked base plus a log of per-batch changes (state format 6).

A stateful operator's task keeps its state in kspark's files
(:mod:`kspark_server.taskfiles`):

- the *base*: the whole state as of some batch, as a sequence of *chunks* numbered 0, 1,
  ..., each a frame of at most about :data:`BASE_CHUNK_BYTES` (or the spec's
  ``state.base_chunk_bytes``) holding a subset of the keys (:func:`encode_chunks`);
- the *log*: one *change* per later batch: the batch's scalar fields (stream time, grace
  buffer) and the new entry of every key the batch changed (nil: the key was removed);
- the *version* (in Spark's group state): the incarnation and batches (see
  :mod:`kspark_server.localstore`), the sizes that decide when to write a new base, and
  the number of chunks of the base.

A chunk and a change are frames of :mod:`kspark_server.stateenc` (MessagePack, no pickle).
Chunks hold disjoint sets of keys, so they can be read in any order and one at a time:
no reader needs the whole base in one value. Chunk 0 carries the task's scalar fields;
the others carry them without the grace buffer (so a buffered record is in one chunk
only).

The operator works on the executor-local copy (:mod:`kspark_server.localstore`) and reads
the base and log only to rebuild it, chunk by chunk. A batch appends its change, which
holds only the keys it changed, until the log has grown past half the base (or
:data:`MAX_LOG` changes, or :data:`MAX_LOG_BYTES`); then it writes a new base and clears
the log, so the log's replay costs at most half the state, and writing bases costs at most
twice the changes.

An *entry* is the list of a key's values in each of the state's per-key maps
(:func:`maps`): ``[timestamp, hash]`` for deduplication, ``[value, hash]`` for a
latest-value table, ``[[timestamps, values], hash]`` for a versioned table,
``[buffers, hash]`` for a stream-stream join (:mod:`kspark_server.operators.window_join`), where
``hash`` is the Spark hash of the key's partitioning column (for rescaling).

Every reader of the whole state uses :func:`materialize` (the replicas, the rescale job)
or :func:`share` (the interactive-query readers, which take one chunk at a time).

Examples
--------
>>> from kspark_server import stateenc
>>> st = empty("dedup", False)
>>> st["seen"].update(a=5, b=6); st["hash"].update(a=11, b=12); st["stream_time"] = 6
>>> base = encode_chunks(scalars("dedup", False, st), change_pairs("dedup", False, st, ["a", "b"]), 1)
>>> len(base)  # a tiny chunk size: one key per chunk
2
>>> st["seen"]["c"] = 7; st["hash"]["c"] = 13; del st["seen"]["a"]; del st["hash"]["a"]
>>> st["stream_time"] = 7
>>> change = stateenc.encode_frame(scalars("dedup", False, st), change_pairs("dedup", False, st, ["a", "c"]))
>>> materialize("dedup", False, base, [change]) == st
True
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Any

from kspark_server import stateenc
from kspark_server.spec import BASE_CHUNK_BYTES

#: The layout of the task state these functions read and write, recorded in the app's
#: generations (``kspark.runtime.checkpoints``). An app refuses a checkpoint of another
#: format; a rescale to the same number of partitions is where a later format's
#: migration of this one goes.
STATE_FORMAT = stateenc.FORMAT
#: The kind of a windowed stream-stream join (:mod:`kspark_server.operators.window_join`): an entry
#: holds both streams' buffered records of one key.
WINDOW_JOIN = "windowjoin"
#: The kind of a user processor (:mod:`kspark_server.operators.processor`): an entry holds one
#: store key's ``[key, value]``, keyed by ``(store name, key)``; the scalars hold the
#: stream time, the punctuation schedule and the versioned and window stores' times.
PROCESSOR = "processor"
#: The kind of a time-limited suppression (:mod:`kspark_server.operators.suppress`): an
#: entry holds one key's buffered update; the scalars hold the stream time and the
#: buffer's size in bytes (None: to be counted again, after a rescale).
SUPPRESS = "suppress"
#: A task writes a new base once its log holds this many changes, however small.
MAX_LOG = 512
#: ... or once the log's bytes pass this fraction of the base's.
LOG_FRACTION = 0.5
#: ... or once the log's bytes pass this, however large the base: a reader loads a task's
#: log whole.
MAX_LOG_BYTES = 256 << 20
#: Bases smaller than this are rewritten rather than logged against (cheap either way).
MIN_BASE_BYTES = 4096
#: A base as stored: its chunks, chunk 0 first.
Base = Sequence[bytes]


def encode_chunks(
    sc: dict[str, Any], pairs: Iterable[tuple[bytes, bytes]], limit: int = BASE_CHUNK_BYTES
) -> list[bytes]:
    """A base as chunks of at most about ``limit`` bytes.

    Chunk 0 carries the scalars ``sc``; the others carry them without the grace buffer.
    A base always has a chunk 0, even with no pairs.

    >>> from kspark_server import stateenc
    >>> pairs = [(stateenc.pack(k), stateenc.pack([1, 2])) for k in "abc"]
    >>> len(encode_chunks({"stream_time": 1}, pairs, 10)), len(encode_chunks({}, [], 10))
    (2, 1)
    """
    return list(iter_chunks(sc, pairs, limit))


def iter_chunks(
    sc: dict[str, Any], pairs: Iterable[tuple[bytes, bytes]], limit: int = BASE_CHUNK_BYTES
) -> Iterator[bytes]:
    """:func:`encode_chunks`, one chunk at a time (the operator writes each as it comes)."""
    bound = limit
    rest = {k: v for k, v in sc.items() if k != "buffer"}
    batch: list[tuple[bytes, bytes | None]] = []
    size, n = 0, 0
    for k, e in pairs:
        batch.append((k, e))
        size += len(k) + len(e) + 2
        if size >= bound:
            yield stateenc.encode_frame(sc if n == 0 else rest, batch)
            batch, size, n = [], 0, n + 1
    if batch or n == 0:
        yield stateenc.encode_frame(sc if n == 0 else rest, batch)


def empty(kind: str, versioned: bool) -> dict[str, Any]:
    """An empty task state of an operator kind."""
    if kind == "dedup":
        return {"format": STATE_FORMAT, "stream_time": None, "seen": {}, "hash": {}}
    if kind == WINDOW_JOIN:
        return {"format": STATE_FORMAT, "stream_time": None, "bufs": {}, "hash": {}}
    if kind == PROCESSOR:
        return {
            "format": STATE_FORMAT,
            "stream_time": None,
            "punct": {},
            "observed": {},
            "entries": {},
            "hash": {},
        }
    table: Any = {"time": None, "data": {}} if versioned else {}
    st = {"format": STATE_FORMAT, "stream_time": None, "table": table, "buffer": [], "hash": {}}
    if kind == SUPPRESS:
        st["bytes"] = 0
    return st


def maps(kind: str, versioned: bool, st: dict[str, Any]) -> list[dict[Any, Any]]:
    """The per-key maps of a task state, all keyed alike."""
    if kind == "dedup":
        return [st["seen"], st["hash"]]
    if kind == WINDOW_JOIN:
        return [st["bufs"], st["hash"]]
    if kind == PROCESSOR:
        return [st["entries"], st["hash"]]
    table = st["table"]["data"] if versioned else st["table"]
    return [table, st["hash"]]


def scalars(kind: str, versioned: bool, st: dict[str, Any]) -> dict[str, Any]:
    """The fields of a task state outside its per-key maps (written whole in each change)."""
    out = {"stream_time": st.get("stream_time")}
    if kind == PROCESSOR:
        out["punct"] = st.get("punct") or {}
        out["observed"] = st.get("observed") or {}
        return out
    if kind == SUPPRESS:
        out["bytes"] = st.get("bytes")
    if kind not in ("dedup", WINDOW_JOIN):
        out["buffer"] = st.get("buffer") or []
        if versioned:
            out["table_time"] = st["table"]["time"]
    return out


def set_scalars(kind: str, versioned: bool, st: dict[str, Any], s: dict[str, Any]) -> None:
    """Put scalar fields (from :func:`scalars`) into ``st``."""
    st["stream_time"] = s.get("stream_time")
    if kind == PROCESSOR:
        st["punct"] = dict(s.get("punct") or {})
        st["observed"] = dict(s.get("observed") or {})
        return
    if kind == SUPPRESS:
        st["bytes"] = s.get("bytes")
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


def apply_frame(
    kind: str, versioned: bool, st: dict[str, Any], frame: bytes, *, with_scalars: bool = True
) -> None:
    """Apply a chunk or change (a frame of :mod:`kspark_server.stateenc`) to ``st``; its
    scalars too, unless not ``with_scalars`` (a base chunk after the first)."""
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
    if with_scalars:
        set_scalars(kind, versioned, st, s)


def merge_pairs(base: Base, log: Iterable[bytes]) -> tuple[dict[str, Any], dict[bytes, bytes]]:
    """The scalars and encoded pairs of a base (its chunks) with its log applied, without
    decoding the entries (the operator's log check uses it)."""
    out: dict[bytes, bytes] = {}
    s: dict[str, Any] = {}
    for i, frame in enumerate(base):
        sc, pairs = stateenc.decode_frame(frame)
        if i == 0:
            s = sc
        out.update((kb, eb) for kb, eb in pairs if eb is not None)
    for frame in log:
        s, pairs = stateenc.decode_frame(frame)
        for kb, eb in pairs:
            if eb is None:
                out.pop(kb, None)
            else:
                out[kb] = eb
    return s, out


def merge_log(log: Iterable[bytes]) -> tuple[dict[str, Any] | None, dict[bytes, bytes | None]]:
    """The last scalars of a log (None: empty) and each key's last change in it (None: the
    key was removed)."""
    s: dict[str, Any] | None = None
    out: dict[bytes, bytes | None] = {}
    for frame in log:
        s, pairs = stateenc.decode_frame(frame)
        out.update(pairs)
    return s, out


def share(
    chunk: bytes, first: bool, log: Sequence[bytes]
) -> tuple[dict[str, Any], dict[bytes, bytes]]:
    """One chunk's share of its task's state, its log applied: the chunk's keys that the
    log leaves alone, and, for chunk 0 (``first``), every key the log sets. The shares of a
    task's chunks are disjoint and make up its state, so a reader can take the chunks as
    separate rows. Scalars are the task's latest; the grace buffer only in chunk 0's share.

    >>> from kspark_server import stateenc
    >>> p = lambda k, e: (stateenc.pack(k), None if e is None else stateenc.pack(e))
    >>> c0 = stateenc.encode_frame({"stream_time": 1, "buffer": [1]}, [p("a", 1), p("b", 1)])
    >>> c1 = stateenc.encode_frame({"stream_time": 1}, [p("c", 1), p("d", 1)])
    >>> log = [stateenc.encode_frame({"stream_time": 2, "buffer": [2]}, [p("c", 2), p("a", None), p("e", 2)])]
    >>> [(s, sorted(stateenc.unpack(k) for k in pairs)) for s, pairs in
    ...  (share(c0, True, log), share(c1, False, log))]
    [({'stream_time': 2, 'buffer': [2]}, ['b', 'c', 'e']), ({'stream_time': 2}, ['d'])]
    """
    s, pairs = stateenc.decode_frame(chunk)
    out = {kb: eb for kb, eb in pairs if eb is not None}
    ls, logged = merge_log(log)
    if ls is not None:
        s = ls
    for kb in logged:
        out.pop(kb, None)
    if first:
        out.update((kb, eb) for kb, eb in logged.items() if eb is not None)
    else:
        s = {k: v for k, v in s.items() if k != "buffer"}
    return s, out


def from_pairs(
    kind: str, versioned: bool, sc: dict[str, Any], pairs: dict[bytes, bytes]
) -> dict[str, Any]:
    """A task state (or a share of one) from its scalars and encoded pairs."""
    st = empty(kind, versioned)
    set_scalars(kind, versioned, st, sc)
    ms = maps(kind, versioned, st)
    unpack = stateenc.unpack
    for kb, eb in pairs.items():
        k = unpack(kb)
        for m, v in zip(ms, unpack(eb), strict=True):
            if v is not None:
                m[k] = v
    return st


def materialize(kind: str, versioned: bool, base: Base, log: Iterable[bytes]) -> dict[str, Any]:
    """A task's whole state: its base (its chunks, chunk 0 first) with its log applied,
    oldest change first."""
    st = empty(kind, versioned)
    for i, frame in enumerate(base):
        apply_frame(kind, versioned, st, frame, with_scalars=i == 0)
    for frame in log:
        apply_frame(kind, versioned, st, frame)
    return st


def base_chunks(
    kind: str, versioned: bool, st: dict[str, Any], limit: int = BASE_CHUNK_BYTES
) -> list[bytes]:
    """A whole task state as base chunks (a rescale's new task states)."""
    return encode_chunks(
        scalars(kind, versioned, st),
        [
            (k, e)
            for k, e in change_pairs(kind, versioned, st, list(maps(kind, versioned, st)[0]))
            if e is not None
        ],
        limit,
    )


def encode_base(kind: str, versioned: bool, st: dict[str, Any]) -> bytes:
    """A whole task state as one frame (a base of one chunk, whatever its size)."""
    (frame,) = base_chunks(kind, versioned, st, limit=1 << 62)
    return frame


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
    >>> should_compact(10 << 30, MAX_LOG_BYTES + 1, 3)  # a huge base: the log stays bounded
    True
    """
    return (
        base_bytes < min_base
        or log_len > MAX_LOG
        or log_bytes > LOG_FRACTION * base_bytes
        or log_bytes > MAX_LOG_BYTES
    )
