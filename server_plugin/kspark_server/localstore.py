"""An executor-local store of one task's state: Kafka Streams' local state store, on LMDB.

kspark's files in the checkpoint hold each task's state durably, as a base and a log of
per-batch changes (:mod:`kspark_server.taskfiles`, :mod:`kspark_server.taskstate`). Reading all of it every micro-batch made a
batch cost the whole state. So, as a Kafka Streams instance keeps each task's state in a
local RocksDB and treats its changelog topic as the durable copy, a task keeps its state
in an LMDB environment on the executor's local disk, and a batch reads from it only the
keys its records touch and writes back only the keys it changed.

The local store is a cache of the durable state and is trusted only when it is at the
durable state's *version*: a pair (incarnation, number of batches applied) kept in the
task's committed group state, which names the files. A store at the committed version is used as it is (a
restarted server finds its stores on disk, as a Kafka Streams instance finds its
``state.dir``); one behind, whose batches the durable log still holds, applies only the
log's missing changes (it is *caught up*); any other (ahead by a batch attempt that was
not committed, of another incarnation, older than the durable base, corrupted) is rebuilt
from the base and log, exactly as Kafka Streams restores a store from its changelog.
Every Python worker process of the executor can open the environment (LMDB is
multi-process), so the store survives Spark's choice of worker process; a write
transaction holds the task's lock.

Layout, under a root (``StreamsConfig(state_dir=...)``, else ``$KSPARK_LOCAL_STATE_DIR``,
else ``<tmp>/kspark-state``): one folder per application, ``<root>/<application id>``,
holding the marker file :data:`APP_MARKER` (clean-up deletes only folders with it), and in
it one environment per (store, incarnation of its durable state, task),
``<store>-<digest>/<incarnation digest>/task-<n>``.

An environment's databases:

- database ``e``: key bytes -> entry bytes (:mod:`kspark_server.stateenc`), for keys of
  at most :data:`SHORT_KEY` bytes;
- database ``l``: the longer keys (LMDB refuses keys over 511 bytes). Such a key is
  stored under a *slot*, its digest (:func:`key_digest`) and a 4-byte number, with the
  record ``len(key)`` (4 bytes, big-endian) + key + entry. The full key decides which
  slot is a key's: keys whose digests collide get the digest's next numbers, so any two
  keys stay apart, however long;
- database ``t``: a time index, ``ts`` (8 bytes, big-endian, offset by 2**63) + key bytes
  -> empty, for operators that expire entries by time (deduplication) or must visit them
  by then (a stream-stream join, :meth:`TaskStore.due`); ``u``: the same for long keys,
  ``ts`` + slot;
- database ``m``: ``v`` -> the version (incarnation, number) as MessagePack, ``s`` -> the
  task's scalar fields (stream time, grace buffer, ...).

Callers see keys only: :func:`time_key` builds an index key from any key, and every method
maps keys to slots itself. An entry or the scalars may hold up to 4 GiB (LMDB's limit on a
value).

Examples
--------
>>> import tempfile
>>> s = TaskStore.open(tempfile.mkdtemp(), "seen", "inc-1", 0, application_id="app")
>>> s.version
>>> s.apply([(b"a", b"1"), (b"b", b"2")], {"stream_time": 5}, ("inc-1", 1))
[]
>>> s.version, s.get_many([b"a", b"c"]), s.count(), s.scalars()
(('inc-1', 1), [b'1', None], 2, {'stream_time': 5})
>>> s.apply([(b"a", None)], {"stream_time": 6}, ("inc-1", 2))
[]
>>> sorted(s.pairs()), s.count()
([(b'b', b'2')], 1)
>>> long = b"k" * 100_000  # far past LMDB's 511-byte keys
>>> s.apply([(long, b"3")], {}, ("inc-1", 3), index=[(None, time_key(7, long))])
[]
>>> s.get_many([long, long[:-1]]), s.due(8) == [long], s.count()
([b'3', None], True, 2)
"""

from __future__ import annotations

import contextlib
import hashlib
import heapq
import os
import shutil
import sys
import tempfile
import types
from collections.abc import Callable, Iterable, Iterator
from typing import Any, TypeVar, cast

import lmdb

from kspark_server import stateenc
from kspark_server.executor import expand_root

#: The address space an environment's map starts with (disk is used only as entries
#: grow). A write that fills the map doubles it: a fixed map of 1 TiB, as LMDB's examples
#: suggest, let a worker process open only about 126 environments (Linux gives a process
#: 128 TiB of address space), fewer than the tasks and stores one executor may run.
MAP_SIZE = 1 << 30
_OFFSET = 1 << 63
_T = TypeVar("_T")
#: The longest key stored as itself: LMDB's 511-byte limit on keys, less the time index's
#: 8 bytes of time. Longer keys are stored under a slot (see the module).
SHORT_KEY = 511 - 8
#: Bytes of a long key's digest in its slot.
DIGEST_BYTES = 16
_NUMBER = 4  # bytes of a slot's number


def key_digest(key: bytes) -> bytes:
    """The digest that places a long key (BLAKE2b, :data:`DIGEST_BYTES` bytes). Keys may
    share one: the full key, kept with the entry, tells them apart."""
    return hashlib.blake2b(key, digest_size=DIGEST_BYTES).digest()


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
    """Where tasks' local stores live on this executor, by default."""
    return os.environ.get("KSPARK_LOCAL_STATE_DIR") or os.path.join(
        tempfile.gettempdir(), "kspark-state"
    )


#: The file that marks an application's folder of local stores as kspark's: clean-up
#: deletes a folder only when it holds this file.
APP_MARKER = ".kspark-local-state"
#: The folder of the stores of operators whose spec names no application.
NO_APP = "_no-application"


def close_under(folder: str) -> None:
    """Close the stores under ``folder`` that this process holds open (before the folder
    is deleted: LMDB must not keep a deleted environment mapped)."""
    envs = _registry()
    for path in [p for p in envs if p.startswith(folder.rstrip(os.sep) + os.sep)]:
        envs[path].close()


class CorruptStoreError(Exception):
    """A local store's files cannot be trusted (truncated, not LMDB, unreadable)."""


def app_dir(root: str, application_id: str) -> str:
    """The folder of ``application_id``'s local stores under ``root``, made and marked as
    kspark's (:data:`APP_MARKER`) if needed."""
    folder = os.path.join(root, application_id or NO_APP)
    marker = os.path.join(folder, APP_MARKER)
    if not os.path.exists(marker):
        os.makedirs(folder, exist_ok=True)
        with open(marker, "w") as f:
            f.write(f"kspark local state of application {application_id or '-'}\n")
    return folder


def store_dir(root: str, application_id: str, store: str) -> str:
    """The folder of ``store``'s environments: the name, made safe for a path, and a
    digest that keeps stores apart whose safe names agree."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in store)[:80]
    digest = hashlib.sha1(store.encode()).hexdigest()[:12]
    return os.path.join(app_dir(root, application_id), f"{safe}-{digest}")


def task_path(
    root: str, store: str, incarnation: str, task: int, *, application_id: str = ""
) -> str:
    """The environment of ``task`` of ``store`` for the durable state's ``incarnation``
    under ``root`` (``{executor}`` in it: this worker's executor,
    :func:`kspark_server.executor.expand_root`)."""
    inc = hashlib.sha1(incarnation.encode()).hexdigest()[:20]
    base = store_dir(expand_root(root), application_id, store)
    return os.path.join(base, inc, f"task-{task}")


def time_key(ts: int, key: bytes) -> bytes:
    """A time-index key: sorts by ``ts`` (signed), then by ``key``. Any key, of any length:
    the store maps a long one to its slot."""
    return (int(ts) + _OFFSET).to_bytes(8, "big") + key


def _b(x: bytes | memoryview | None) -> bytes:
    """What LMDB returns, as the bytes it is: every transaction here is opened without
    ``buffers``."""
    return cast(bytes, x)


def _bound(ts: int) -> bytes:
    return (int(ts) + _OFFSET).to_bytes(8, "big")


class _Keys:
    """Keys of any length in one write or read transaction: short keys as themselves,
    long ones under their slots. The one place that maps keys to what LMDB stores."""

    __slots__ = ("digest", "store", "txn")

    def __init__(self, store: TaskStore, txn: lmdb.Transaction) -> None:
        self.store, self.txn = store, txn
        self.digest: Callable[[bytes], bytes] = store.digest

    def apply_changes(
        self,
        changes: dict[bytes, bytes | None],
        index_of: Callable[[bytes, bytes], bytes] | None,
    ) -> None:
        """Write each key's latest entry (None: delete it), keeping the secondary index
        (``index_of(key, entry)``) in step: the old entry's index row goes first."""
        for k, e in changes.items():
            if index_of is not None:
                old = self.get(k)
                if old is not None:
                    self.index_delete(index_of(k, old))
            if e is None:
                self.delete(k)
            else:
                self.put(k, e)
                if index_of is not None:
                    self.index_put(index_of(k, e))

    def slot(self, key: bytes) -> tuple[bytes | None, bytes]:
        """(the long ``key``'s slot, or None, its record), or (None, a free slot)."""
        d = self.digest(key)
        width = len(d) + _NUMBER
        cur = self.txn.cursor(db=self.store.long)
        last = -1
        if cur.set_range(d):
            for found, value in cur.iternext(keys=True, values=True):
                slot, record = _b(found), _b(value)
                if slot[: len(d)] != d:
                    break
                if len(slot) != width:
                    continue
                n = len(key)
                if int.from_bytes(record[:4], "big") == n and record[4 : 4 + n] == key:
                    return slot, record
                last = max(last, int.from_bytes(slot[len(d) :], "big"))
        return None, d + (last + 1).to_bytes(_NUMBER, "big")

    def get(self, key: bytes) -> bytes | None:
        if len(key) <= SHORT_KEY:
            return cast(bytes | None, self.txn.get(key, db=self.store.entries))
        slot, record = self.slot(key)
        return None if slot is None else bytes(record[4 + len(key) :])

    def put(self, key: bytes, entry: bytes) -> None:
        if len(key) <= SHORT_KEY:
            self.txn.put(key, entry, db=self.store.entries)
            return
        found, free = self.slot(key)
        record = len(key).to_bytes(4, "big") + key + entry
        self.txn.put(free if found is None else found, record, db=self.store.long)

    def delete(self, key: bytes) -> None:
        if len(key) <= SHORT_KEY:
            self.txn.delete(key, db=self.store.entries)
            return
        found, _ = self.slot(key)
        if found is not None:
            self.txn.delete(found, db=self.store.long)

    def _index(self, ikey: bytes) -> tuple[bytes | None, Any]:
        """The index database and stored key of a :func:`time_key` (None: a long key
        without an entry)."""
        if len(ikey) - 8 <= SHORT_KEY:
            return ikey, self.store.index
        found, _ = self.slot(ikey[8:])
        return (None if found is None else ikey[:8] + found), self.store.long_index

    def index_put(self, ikey: bytes) -> None:
        stored, db = self._index(ikey)
        if stored is None:
            raise KeyError(f"a time-index key for a key of {len(ikey) - 8} bytes with no entry")
        self.txn.put(stored, b"", db=db)

    def index_delete(self, ikey: bytes) -> None:
        stored, db = self._index(ikey)
        if stored is not None:
            self.txn.delete(stored, db=db)

    def long_key(self, slot: bytes) -> bytes:
        record = _b(self.txn.get(slot, db=self.store.long))
        return bytes(record[4 : 4 + int.from_bytes(record[:4], "big")])

    def due(self, bound: bytes) -> list[tuple[bytes, bytes]]:
        """(time, key) of the index entries older than ``bound``, oldest first."""
        return self._first(bound, None)

    def oldest(self, limit: int) -> list[tuple[bytes, bytes]]:
        """(time, key) of the first ``limit`` index entries, oldest first."""
        return self._first(None, limit)[:limit]

    def _first(self, bound: bytes | None, limit: int | None) -> list[tuple[bytes, bytes]]:
        """(time, key) of the index entries older than ``bound`` (None: all), at most
        ``limit`` of each index (None: all), oldest first."""
        out: list[tuple[bytes, bytes]] = []
        for db, is_long in ((self.store.index, False), (self.store.long_index, True)):
            cur = self.txn.cursor(db=db)
            got: list[tuple[bytes, bytes]] = []
            if cur.first():
                for found in cur.iternext(keys=True, values=False):
                    k = _b(found)
                    if bound is not None and k[:8] >= bound:
                        break
                    got.append((k[:8], self.long_key(k[8:]) if is_long else k[8:]))
                    if limit is not None and len(got) >= limit:
                        break
            out = list(heapq.merge(out, got, key=lambda p: p[0]))
        return out

    def expire(self, bound: bytes) -> list[bytes]:
        """Remove the entries whose index time is older than ``bound``; their keys."""
        out: list[bytes] = []
        for db, is_long in ((self.store.index, False), (self.store.long_index, True)):
            cur: Any = self.txn.cursor(db=db)
            if not cur.first():
                continue
            while True:
                # a cursor past the last entry has an empty key (LMDB has no empty keys)
                k = cur.key()
                if not k or k[:8] >= bound:
                    break
                if is_long:
                    out.append(self.long_key(k[8:]))
                    self.txn.delete(k[8:], db=self.store.long)
                else:
                    out.append(k[8:])
                    self.txn.delete(k[8:], db=self.store.entries)
                cur.delete()
        return out


class TaskStore:
    """One task's local store: an LMDB environment with its databases."""

    __slots__ = (
        "discarded",
        "entries",
        "env",
        "file",
        "index",
        "long",
        "long_index",
        "meta",
        "path",
        "psize",
    )

    #: how long keys are placed (tests give a tiny one, to make keys collide)
    digest: Callable[[bytes], bytes] = staticmethod(key_digest)

    def __init__(self, path: str) -> None:
        self.path = path
        #: why the store found on disk was deleted instead of used ("": it was not)
        self.discarded = ""
        os.makedirs(path, exist_ok=True)
        try:
            self._open_env()
        except (lmdb.Error, CorruptStoreError) as e:
            # never trusted: the store is a cache, and the durable state rebuilds it
            self.discarded = f"{type(e).__name__}: {e}"
            with contextlib.suppress(Exception):
                self.env.close()
            shutil.rmtree(path, ignore_errors=True)
            os.makedirs(path, exist_ok=True)
            self._open_env()

    def _open_env(self) -> None:
        """Open the environment, checked before any of its pages is read: LMDB checks its
        meta pages on open, and the file must hold every page they name (reading past the
        end of a truncated file would kill the process, not raise)."""
        self.env = lmdb.open(
            self.path,
            map_size=MAP_SIZE,
            max_dbs=6,
            # a cache of the durable state: what a crash loses, a rebuild restores
            sync=False,
            metasync=False,
            readahead=False,
        )
        data = os.path.join(self.path, "data.mdb")
        needed = (int(self.env.info()["last_pgno"]) + 1) * int(self.env.stat()["psize"])
        size = os.path.getsize(data)
        if size < needed:
            raise CorruptStoreError(f"{data} has {size} bytes, its pages need {needed}")
        self.psize = int(self.env.stat()["psize"])
        st = os.stat(data)
        #: the file as this process opened it (an LMDB file only grows): identity, size
        self.file = (st.st_dev, st.st_ino, st.st_size)
        self.entries = self.env.open_db(b"e")
        self.index = self.env.open_db(b"t")
        self.long = self.env.open_db(b"l")
        self.long_index = self.env.open_db(b"u")
        self.meta = self.env.open_db(b"m")
        self._read_version()  # its pages are read, and must read back

    @classmethod
    def open(
        cls, root: str, store: str, incarnation: str, task: int, *, application_id: str = ""
    ) -> TaskStore:
        """The local store of ``task`` of ``store`` of ``application_id`` under ``root``, for
        the durable state's ``incarnation`` (created empty; one found corrupted is deleted
        and created empty, :attr:`discarded` says why).

        Each incarnation has its own environment: two copies of one operator in a query
        (a store that two sinks' plans share) have their own durable states, and would
        otherwise rebuild one store under each other."""
        path = task_path(root, store, incarnation, task, application_id=application_id)
        envs = _registry()
        found = envs.get(path)
        if found is not None and not found._same_file():
            # deleted, replaced or cut short since this process opened it: open it anew,
            # checked, rather than read a mapping whose pages may be gone
            found.close()
            found = None
        if found is None:
            found = envs[path] = cls(path)
        return found

    def _same_file(self) -> bool:
        """Whether the environment's file is still the one this process opened, not
        shorter (a stat: cheap enough for every batch)."""
        try:
            st = os.stat(os.path.join(self.path, "data.mdb"))
        except OSError:
            return False
        dev, ino, size = self.file
        if (st.st_dev, st.st_ino) != (dev, ino) or st.st_size < size:
            return False
        # cut short, but not below what this process saw: the pages the current meta
        # page names must all be in the file (the two meta pages first: reading them from
        # a file that lacks them would kill the process too)
        psize = self.psize
        if st.st_size < 2 * psize:
            return False
        if st.st_size < (int(self.env.info()["last_pgno"]) + 1) * psize:
            return False
        self.file = (dev, ino, st.st_size)
        return True

    def _begin(self, **kw: Any) -> lmdb.Transaction:
        """A transaction; after another process grew the map, this one adopts its size."""
        try:
            return self.env.begin(**kw)
        except lmdb.MapResizedError:
            self.env.set_mapsize(0)
            return self.env.begin(**kw)

    def _write(self, work: Callable[[lmdb.Transaction], _T]) -> _T:
        """``work`` in a write transaction; when the map is full, the transaction is undone,
        the map doubled, and ``work`` run again."""
        while True:
            try:
                with self._begin(write=True) as txn:
                    return work(txn)
            except lmdb.MapFullError:
                self.env.set_mapsize(2 * int(self.env.info()["map_size"]))

    @property
    def version(self) -> tuple[str, int] | None:
        """(incarnation, batches applied) of the state it holds; None when empty."""
        return self._read_version()

    def _read_version(self) -> tuple[str, int] | None:
        with self._begin(db=self.meta) as txn:
            raw = txn.get(b"v")
        if raw is None:
            return None
        try:
            inc, n = stateenc.unpack(raw)
            return str(inc), int(n)
        except Exception as e:
            raise CorruptStoreError(f"{self.path}: its version does not decode ({e})") from e

    def scalars(self) -> dict[str, Any]:
        with self._begin(db=self.meta) as txn:
            raw = txn.get(b"s")
        return {} if raw is None else dict(stateenc.unpack(raw))

    def get_many(self, keys: Iterable[bytes]) -> list[bytes | None]:
        """The entries of ``keys`` (None where absent), in order."""
        with self._begin(db=self.entries, buffers=False) as txn:
            get: Any = txn.get
            mapped = _Keys(self, txn)
            found: list[bytes | None] = [
                get(k) if len(k) <= SHORT_KEY else mapped.get(k) for k in keys
            ]
            return found

    def due(self, before: int) -> list[bytes]:
        """The keys whose time-index time is older than ``before``, oldest first: those
        with something to do by then (a join's records whose windows close, a suppressed
        aggregation's windows that close, so it can emit them before they expire)."""
        with self._begin() as txn:
            return [k for _, k in _Keys(self, txn).due(_bound(before))]

    def oldest(self, limit: int) -> list[tuple[int, bytes]]:
        """(time, key) of the ``limit`` keys with the oldest time-index times, oldest
        first (a bounded buffer evicts them when it is full)."""
        with self._begin() as txn:
            return [
                (int.from_bytes(t, "big") - _OFFSET, k) for t, k in _Keys(self, txn).oldest(limit)
            ]

    def count(self) -> int:
        """The number of keys with an entry."""
        with self._begin() as txn:
            return int(txn.stat(self.entries)["entries"]) + int(txn.stat(self.long)["entries"])

    #: the same as :meth:`due`, the name the aggregation uses
    keys_before = due

    def pairs(self) -> Iterator[tuple[bytes, bytes]]:
        """Every (key, entry): the short keys in key order, then the long ones."""
        with self._begin(db=self.entries) as txn:
            for k, e in txn.cursor().iternext(keys=True, values=True):
                yield _b(k), _b(e)
            for value in txn.cursor(db=self.long).iternext(keys=False, values=True):
                record = _b(value)
                n = int.from_bytes(record[:4], "big")
                yield bytes(record[4 : 4 + n]), bytes(record[4 + n :])

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

        ``index`` holds time-index changes, (old index key, new index key), both from
        :func:`time_key`; with ``expire_before``, keys whose index time is older are then
        removed, and returned.
        """
        pairs, index = list(pairs), list(index)

        def work(txn: lmdb.Transaction) -> list[bytes]:
            keys = _Keys(self, txn)
            put, delete, entries, tindex = txn.put, txn.delete, self.entries, self.index
            longest = SHORT_KEY + 8
            # the old index keys first: a long key's slot is found through its entry
            for old, _ in index:
                if old is None:
                    continue
                if len(old) <= longest:
                    delete(old, db=tindex)
                else:
                    keys.index_delete(old)
            for k, e in pairs:
                if len(k) > SHORT_KEY:
                    if e is None:
                        keys.delete(k)
                    else:
                        keys.put(k, e)
                elif e is None:
                    delete(k, db=entries)
                else:
                    put(k, e, db=entries)
            for _, new in index:
                if new is None:
                    continue
                if len(new) <= longest:
                    put(new, b"", db=tindex)
                else:
                    keys.index_put(new)
            expired = [] if expire_before is None else keys.expire(_bound(expire_before))
            txn.put(b"s", stateenc.pack(scalars), db=self.meta)
            txn.put(b"v", stateenc.pack(list(version)), db=self.meta)
            return expired

        return self._write(work)

    def _drop_all(self, txn: lmdb.Transaction) -> None:
        for db in (self.entries, self.index, self.long, self.long_index, self.meta):
            txn.drop(db, delete=False)

    def _put_all(
        self, txn: lmdb.Transaction, pairs: Iterable[tuple[bytes, bytes]], index: Iterable[bytes]
    ) -> None:
        """Put ``pairs`` and then ``index`` (time-index keys) into a store without them."""
        keys = _Keys(self, txn)
        short: list[tuple[bytes, bytes]] = []
        for k, e in pairs:
            if len(k) <= SHORT_KEY:
                short.append((k, e))
            else:
                keys.put(k, e)
        txn.cursor(db=self.entries).putmulti(short)
        short_index: list[tuple[bytes, bytes]] = []
        for ik in index:
            if len(ik) - 8 <= SHORT_KEY:
                short_index.append((ik, b""))
            else:
                keys.index_put(ik)
        txn.cursor(db=self.index).putmulti(sorted(short_index))

    def reset(
        self,
        pairs: Iterable[tuple[bytes, bytes]],
        scalars: dict[str, Any],
        version: tuple[str, int],
        *,
        index: Iterable[bytes] = (),
    ) -> None:
        """Replace everything with ``pairs`` (a rebuild from the durable state)."""
        pairs, index = list(pairs), list(index)

        def work(txn: lmdb.Transaction) -> None:
            self._drop_all(txn)
            self._put_all(txn, pairs, index)
            txn.put(b"s", stateenc.pack(scalars), db=self.meta)
            txn.put(b"v", stateenc.pack(list(version)), db=self.meta)

        self._write(work)

    def rebuild(
        self,
        chunks: Iterable[bytes],
        log: Iterable[bytes],
        version: tuple[str, int],
        index_of: Callable[[bytes, bytes], bytes] | None = None,
    ) -> int:
        """Replace everything with a durable base (its chunks, read one at a time) and log
        (:mod:`kspark_server.taskstate`): a rebuild that holds one chunk in memory, not the
        whole base. ``index_of(key, entry)`` gives an entry's time-index key. Returns the
        entries written (the base's, then the log's changes).

        The version is written last, in its own transaction: a rebuild cut short leaves a
        store without a version, which the next batch rebuilds again.
        """
        self._write(self._drop_all)
        scalars: dict[str, Any] = {}
        written = 0
        for i, frame in enumerate(chunks):
            sc, pairs = stateenc.decode_frame(frame)
            if i == 0:
                scalars = dict(sc)
            live = [(k, e) for k, e in pairs if e is not None]
            index = [] if index_of is None else [index_of(k, e) for k, e in live]
            self._write(lambda txn: self._put_all(txn, live, index))  # noqa: B023
            written += len(live)
        return written + self.catch_up(log, version, index_of, scalars=scalars)

    def catch_up(
        self,
        log: Iterable[bytes],
        version: tuple[str, int],
        index_of: Callable[[bytes, bytes], bytes] | None = None,
        *,
        scalars: dict[str, Any] | None = None,
    ) -> int:
        """Apply the durable log's changes ``log`` (frames of
        :mod:`kspark_server.taskstate`, oldest first) in one transaction, and set
        ``version``: a store behind the durable state catches up without a rebuild.
        ``scalars``: the task's scalars if the log has no frame. Returns the entries
        written (each key once: later changes of a key replace earlier ones)."""
        last: dict[str, Any] | None = None
        changes: dict[bytes, bytes | None] = {}
        for frame in log:
            last, pairs = stateenc.decode_frame(frame)
            changes.update(pairs)
        if last is None and scalars is None:
            scalars = self.scalars()

        def work(txn: lmdb.Transaction) -> None:
            _Keys(self, txn).apply_changes(changes, index_of)
            txn.put(b"s", stateenc.pack(scalars if last is None else last), db=self.meta)
            txn.put(b"v", stateenc.pack(list(version)), db=self.meta)

        self._write(work)
        return len(changes)

    def close(self) -> None:
        envs = _registry()
        if envs.get(self.path) is self:
            del envs[self.path]
        self.env.close()

    def destroy(self) -> None:
        """Close and delete the environment's files."""
        self.close()
        shutil.rmtree(self.path, ignore_errors=True)


#: The meta-database key that marks a local store as a standby copy.
STANDBY_KEY = b"standby"


def is_standby(store: TaskStore) -> bool:
    """Whether ``store`` is a standby copy (:mod:`kspark_server.standby`, not a task's own store)."""
    with store._begin(db=store.meta) as txn:
        return txn.get(STANDBY_KEY) is not None


def promote(store: TaskStore) -> bool:
    """Make a standby copy the task's own store (its task opened it); True if it was a
    copy. The copy's version is checked by the caller like any local store's."""
    if not is_standby(store):
        return False

    def work(txn: lmdb.Transaction) -> bool:
        return bool(txn.delete(STANDBY_KEY, db=store.meta))

    return store._write(work)
