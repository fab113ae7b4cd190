"""An executor-local store of one task's state: Kafka Streams' local state store, on LMDB.

Spark's state store holds each task's state durably, as a base and a log of per-batch
changes (:mod:`kspark_server.taskstate`). Reading all of it every micro-batch made a
batch cost the whole state. So, as a Kafka Streams instance keeps each task's state in a
local RocksDB and treats its changelog topic as the durable copy, a task keeps its state
in an LMDB environment on the executor's local disk, and a batch reads from it only the
keys its records touch and writes back only the keys it changed.

The local store is a cache of the durable state and is trusted only when it is at the
durable state's *version*: a pair (incarnation, number of batches applied) kept in a
value state next to the base. On any mismatch (a new executor, a restart, a failed
batch attempt that wrote ahead, a rescale) the task rebuilds it from the base and log,
exactly as Kafka Streams restores a store from its changelog. Every Python worker
process of the executor can open the environment (LMDB is multi-process), so the store
survives Spark's choice of worker process; a write transaction holds the task's lock.

Layout of an environment, one per (store, incarnation, task), under
``$KSPARK_LOCAL_STATE_DIR`` (default: ``<tmp>/kspark-state``):

- database ``e``: key bytes -> entry bytes (:mod:`kspark_server.stateenc`);
- database ``t``: a time index, ``ts`` (8 bytes, big-endian, offset by 2**63) + key bytes
  -> empty, for operators that expire entries by time (deduplication) or must visit them
  by then (a stream-stream join, :meth:`TaskStore.due`);
- database ``m``: ``v`` -> the version (incarnation, number) as MessagePack, ``s`` -> the
  task's scalar fields (stream time, grace buffer, ...).

Examples
--------
>>> import tempfile
>>> s = TaskStore.open(tempfile.mkdtemp(), "seen", "inc-1", 0)
>>> s.version
>>> s.apply([(b"a", b"1"), (b"b", b"2")], {"stream_time": 5}, ("inc-1", 1))
[]
>>> s.version, s.get_many([b"a", b"c"]), s.count(), s.scalars()
(('inc-1', 1), [b'1', None], 2, {'stream_time': 5})
>>> s.apply([(b"a", None)], {"stream_time": 6}, ("inc-1", 2))
[]
>>> sorted(s.pairs()), s.count()
([(b'b', b'2')], 1)
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sys
import tempfile
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import lmdb

from kspark_server import stateenc

#: LMDB reserves this much address space per environment; disk is used as entries grow.
MAP_SIZE = 1 << 40
_OFFSET = 1 << 63


def _registry() -> dict[str, TaskStore]:
    """The open environments of this worker process, by path: LMDB forbids opening one
    twice in a process. Kept in ``sys.modules``, not in a global of this module: when the
    client ships kspark_server by value (a server without it), this module's globals
    arrive anew with every batch's function."""
    holder = sys.modules.get(_REGISTRY)
    if holder is None:
        holder = sys.modules.setdefault(_REGISTRY, types.ModuleType(_REGISTRY))
    envs: dict[str, TaskStore] | None = getattr(holder, "envs", None)
    if envs is None:
        envs = {}
        holder.envs = envs  # type: ignore[attr-defined]
    return envs


_REGISTRY = "_kspark_localstore_envs"


def root_dir() -> str:
    """Where tasks' local stores live on this executor."""
    return os.environ.get("KSPARK_LOCAL_STATE_DIR") or os.path.join(
        tempfile.gettempdir(), "kspark-state"
    )


def time_key(ts: int, key: bytes) -> bytes:
    """A time-index key: sorts by ``ts`` (signed), then by ``key``."""
    return (int(ts) + _OFFSET).to_bytes(8, "big") + key


class TaskStore:
    """One task's local store: an LMDB environment with its databases."""

    __slots__ = ("entries", "env", "index", "meta", "path")

    def __init__(self, path: str) -> None:
        self.path = path
        os.makedirs(path, exist_ok=True)
        self.env = lmdb.open(
            path,
            map_size=MAP_SIZE,
            max_dbs=4,
            # a cache of the durable state: what a crash loses, a rebuild restores
            sync=False,
            metasync=False,
            readahead=False,
        )
        self.entries = self.env.open_db(b"e")
        self.index = self.env.open_db(b"t")
        self.meta = self.env.open_db(b"m")

    @classmethod
    def open(cls, root: str, store: str, incarnation: str, task: int) -> TaskStore:
        """The local store of ``task`` of ``store`` at ``incarnation`` (created empty)."""
        digest = hashlib.sha1(f"{store}\0{incarnation}".encode()).hexdigest()[:20]
        path = os.path.join(root, digest, f"task-{task}")
        envs = _registry()
        found = envs.get(path)
        if found is None:
            found = envs[path] = cls(path)
        return found

    @property
    def version(self) -> tuple[str, int] | None:
        """(incarnation, batches applied) of the state it holds; None when empty."""
        with self.env.begin(db=self.meta) as txn:
            raw = txn.get(b"v")
        if raw is None:
            return None
        inc, n = stateenc.unpack(raw)
        return str(inc), int(n)

    def scalars(self) -> dict[str, Any]:
        with self.env.begin(db=self.meta) as txn:
            raw = txn.get(b"s")
        return {} if raw is None else dict(stateenc.unpack(raw))

    def get_many(self, keys: Iterable[bytes]) -> list[bytes | None]:
        """The entries of ``keys`` (None where absent), in order."""
        with self.env.begin(db=self.entries, buffers=False) as txn:
            get = txn.get
            return [get(k) for k in keys]

    def due(self, before: int) -> list[bytes]:
        """The keys whose time-index time is older than ``before``, oldest first: those
        with something to do by then (a join's records whose windows close, a suppressed
        aggregation's windows that close, so it can emit them before they expire)."""
        bound = (int(before) + _OFFSET).to_bytes(8, "big")
        out: list[bytes] = []
        with self.env.begin(db=self.index) as txn:
            cur = txn.cursor()
            if cur.first():
                for k in cur.iternext(keys=True, values=False):
                    if k[:8] >= bound:
                        break
                    out.append(k[8:])
        return out

    def count(self) -> int:
        """The number of keys with an entry."""
        with self.env.begin() as txn:
            return int(txn.stat(self.entries)["entries"])

    #: the same as :meth:`due`, the name the aggregation uses
    keys_before = due

    def pairs(self) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, entry), in key order."""
        with self.env.begin(db=self.entries) as txn:
            yield from txn.cursor().iternext(keys=True, values=True)

    def apply(
        self,
        pairs: Iterable[tuple[bytes, bytes | None]],
        scalars: dict[str, Any],
        version: tuple[str, int],
        *,
        index: Iterable[tuple[bytes | None, bytes | None]] = (),
        expire_before: int | None = None,
    ) -> list[bytes]:
        """Write ``pairs`` (entry None: remove the key), the scalars and the new version,
        in one transaction.

        ``index`` holds time-index changes, (old index key, new index key); with
        ``expire_before``, keys whose index time is older are then removed, and returned.
        """
        expired: list[bytes] = []
        with self.env.begin(write=True) as txn:
            for k, e in pairs:
                if e is None:
                    txn.delete(k, db=self.entries)
                else:
                    txn.put(k, e, db=self.entries)
            for old, new in index:
                if old is not None:
                    txn.delete(old, db=self.index)
                if new is not None:
                    txn.put(new, b"", db=self.index)
            if expire_before is not None:
                bound = (int(expire_before) + _OFFSET).to_bytes(8, "big")
                cur = txn.cursor(db=self.index)
                if cur.first():
                    while cur.key()[:8] < bound:
                        k = cur.key()[8:]
                        txn.delete(k, db=self.entries)
                        expired.append(k)
                        if not cur.delete():
                            break
            txn.put(b"s", stateenc.pack(scalars), db=self.meta)
            txn.put(b"v", stateenc.pack(list(version)), db=self.meta)
        return expired

    def reset(
        self,
        pairs: Iterable[tuple[bytes, bytes]],
        scalars: dict[str, Any],
        version: tuple[str, int],
        *,
        index: Iterable[bytes] = (),
    ) -> None:
        """Replace everything with ``pairs`` (a rebuild from the durable state)."""
        with self.env.begin(write=True) as txn:
            for db in (self.entries, self.index, self.meta):
                txn.drop(db, delete=False)
            cur = txn.cursor(db=self.entries)
            cur.putmulti(pairs)
            icur = txn.cursor(db=self.index)
            icur.putmulti((k, b"") for k in index)
            txn.put(b"s", stateenc.pack(scalars), db=self.meta)
            txn.put(b"v", stateenc.pack(list(version)), db=self.meta)

    def rebuild(
        self,
        chunks: Iterable[bytes],
        log: Iterable[bytes],
        version: tuple[str, int],
        index_of: Callable[[bytes, bytes], bytes] | None = None,
    ) -> None:
        """Replace everything with a durable base (its chunks, read one at a time) and log
        (:mod:`kspark_server.taskstate`): a rebuild that holds one chunk in memory, not the
        whole base. ``index_of(key, entry)`` gives an entry's time-index key.

        The version is written last, in its own transaction: a rebuild cut short leaves a
        store without a version, which the next batch rebuilds again.
        """
        with self.env.begin(write=True) as txn:
            for db in (self.entries, self.index, self.meta):
                txn.drop(db, delete=False)
        scalars: dict[str, Any] = {}
        for i, frame in enumerate(chunks):
            sc, pairs = stateenc.decode_frame(frame)
            if i == 0:
                scalars = dict(sc)
            with self.env.begin(write=True) as txn:
                txn.cursor(db=self.entries).putmulti([(k, e) for k, e in pairs if e is not None])
                if index_of is not None:
                    txn.cursor(db=self.index).putmulti(
                        sorted((index_of(k, e), b"") for k, e in pairs if e is not None)
                    )
        last: dict[str, Any] | None = None
        changes: dict[bytes, bytes | None] = {}
        for frame in log:
            last, pairs = stateenc.decode_frame(frame)
            changes.update(pairs)
        with self.env.begin(write=True) as txn:
            for k, e in changes.items():
                if index_of is not None:
                    old = txn.get(k, db=self.entries)
                    if old is not None:
                        txn.delete(index_of(k, old), db=self.index)
                    if e is not None:
                        txn.put(index_of(k, e), b"", db=self.index)
                if e is None:
                    txn.delete(k, db=self.entries)
                else:
                    txn.put(k, e, db=self.entries)
            txn.put(b"s", stateenc.pack(scalars if last is None else last), db=self.meta)
            txn.put(b"v", stateenc.pack(list(version)), db=self.meta)

    def close(self) -> None:
        _registry().pop(self.path, None)
        self.env.close()

    def destroy(self) -> None:
        """Close and delete the environment's files."""
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)
