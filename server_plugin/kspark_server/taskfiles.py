"""A task's durable state in kspark's own files.

A stateful operator runs with ``applyInPandasWithState`` (docs/design/grouped-runner.md).
Spark's group state holds only the task's committed *version*; the state itself is a base and a log of
changes (:mod:`kspark_server.taskstate`), kept in files under the checkpoint::

    <checkpoint>/kspark-state/<store>/task-<t>/
        base-<n>-<id>-<c>.kssf   chunk c of the base written at the task's batch n
        chg-<n>-<id>.kssf        the change of the task's batch n

``n`` is the task's batch count (zero-padded to 12 digits), ``id`` a random name fresh
for every attempt, ``c`` the chunk number (5 digits). Each file holds one frame of
:mod:`kspark_server.stateenc` (MessagePack framed by ``KSSF`` with the state format: no
pickle).

The version (:data:`GROUP_STATE_DDL`) names the files that make up the committed state:
the base's batch and id and its number of chunks, and the ids of the changes after it.
A batch writes its files under fresh names, fsynced, before it returns its new version
to Spark, which commits it with the micro-batch. So

- a file that no committed version names is never read: an attempt that failed, or that
  Spark repeats, wrote files under its own names and left every named file as it was;
- files above the committed version are ignored, whatever they hold;
- once a batch runs on version ``v`` (Spark runs a micro-batch only after the last one
  committed), the files of batches up to ``v`` that ``v`` does not name can go: they
  belong to older versions or to failed attempts. :meth:`TaskFiles.collect` deletes
  them after a new base is committed;
- except when batch ``v`` itself ran twice: Spark's state store keeps the first commit of
  a version, so a restart may load the other attempt's version ``v``, and collection
  waits for a later version.

A reader (an interactive query, a replica, a standby) reads a committed version and then
opens the files it names, while the app goes on: once the task has written a new base and
run one more batch, the files of the version read are gone. Such a reader gets
:class:`StaleVersion` (the app moved on, not a loss) and reads again at the newer
committed version, under a hold of its own (:func:`hold`) if it lags again.

Examples
--------
>>> import tempfile
>>> from kspark_server import stateenc
>>> root = tempfile.mkdtemp()
>>> f = TaskFiles(root, "seen", 0, None)
>>> f.version.exists()
False
>>> f.base.updateValue((0,), (stateenc.encode_frame({"stream_time": 1}, []),))
>>> f.version.update(("inc", 1, 10, 0, 0, 1))
>>> committed = f.committed()
>>> g = TaskFiles(root, "seen", 0, committed)  # the next batch, on the committed version
>>> g.version.get()[:2], [stateenc.decode_frame(c)[0] for c in g.chunks()]
(('inc', 1), [{'stream_time': 1}])
>>> g.log.appendValue((stateenc.encode_frame({"stream_time": 2}, []),))
>>> g.version.update(("inc", 2, 10, 20, 1, 1))
>>> h = TaskFiles(root, "seen", 0, g.committed())
>>> len(list(h.log.get())), TaskFiles(root, "seen", 0, committed).log.exists()  # v1: none
(1, False)
"""

from __future__ import annotations

import contextlib
import os
import time
import uuid
from collections.abc import Iterator
from typing import Any

from kspark_server import stateenc

__all__ = [
    "DIR_NAME",
    "GROUP_STATE_DDL",
    "HOLD",
    "HOLD_SECONDS",
    "STALE",
    "StaleVersion",
    "TaskFiles",
    "hold",
    "is_stale",
    "state_root",
]

#: The folder under the query's checkpoint that holds the operators' files.
DIR_NAME = "kspark-state"

#: Spark's group state of a task under ``applyInPandasWithState``: the version (the
#: incarnation, the batches since it began, the sizes that decide when a new base is
#: written, and the number of base chunks) and the names of the files that hold it
#: (``log_ids``: the changes' ids, oldest first, separated by commas; pyspark cannot read
#: an array in a group state's schema).
GROUP_STATE_DDL = (
    "incarnation string, batches long, base_bytes long, log_bytes long, log_len int, "
    "base_chunks int, base_at long, base_id string, log_ids string"
)

_SUFFIX = ".kssf"

#: A file in a store's folder that holds off :meth:`TaskFiles.collect` while it is fresh:
#: a warm rescale reads the old tasks' committed files while they go on
#: (:mod:`kspark_server.regroup`), a reader that lagged reads them once more. Each holder
#: has its own file (``.collect-hold`` and a suffix), so one ending its hold leaves the
#: others'. Files that collection skips go with a later one.
HOLD = ".collect-hold"
#: How long a hold lasts after its last renewal (a rescale killed part way stops renewing).
HOLD_SECONDS = 600.0

#: The mark of :class:`StaleVersion`'s message, which is all of it that reaches the
#: client through Spark (:func:`is_stale`).
STALE = "KSPARK_STATE_VERSION_COLLECTED"


class StaleVersion(stateenc.StateFormatError):
    """A reader's committed version names a file that a later batch collected: the app
    moved on since the version was read. Read the newer committed version."""


def is_stale(error: BaseException) -> bool:
    """Whether ``error`` (raised here, or Spark's report of a job that raised it) is a
    :class:`StaleVersion`."""
    return isinstance(error, StaleVersion) or STALE in str(error)


def hold(store_folder: str, on: bool = True, holder: str = "") -> None:
    """Renew (or, ``on`` False, end) ``holder``'s hold on collecting ``store_folder``'s
    files."""
    path = os.path.join(store_folder, f"{HOLD}-{holder}" if holder else HOLD)
    if not on:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)
        return
    os.makedirs(store_folder, exist_ok=True)
    with open(path, "w"):
        pass
    os.utime(path)


def _held(store_folder: str) -> bool:
    try:
        names = [n for n in os.listdir(store_folder) if n.startswith(HOLD)]
    except FileNotFoundError:
        return False
    now = time.time()
    for name in names:
        try:
            if now - os.stat(os.path.join(store_folder, name)).st_mtime < HOLD_SECONDS:
                return True
        except FileNotFoundError:
            continue
    return False


def state_root(checkpoint: str) -> str:
    """The operators' files of a query whose checkpoint is ``checkpoint`` (a local path,
    or a ``file:`` URI)."""
    if checkpoint.startswith("file:"):
        checkpoint = checkpoint[len("file:") :]
        while checkpoint.startswith("//"):
            checkpoint = checkpoint[1:]
    return os.path.join(checkpoint, DIR_NAME)


def _fresh() -> str:
    return uuid.uuid4().hex[:16]


def _write(path: str, data: bytes) -> None:
    """Write a new file and make it durable (the name is fresh: nothing is overwritten)."""
    with open(path, "xb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _batch_of(name: str) -> int | None:
    """The task's batch that file ``name`` belongs to (None: not a state file)."""
    if not name.endswith(_SUFFIX):
        return None
    try:
        return int(name.split("-")[1])
    except (IndexError, ValueError):
        return None


class _Base:
    """The base's chunks, by number."""

    def __init__(self, files: TaskFiles) -> None:
        self.files = files

    def getValue(self, key: tuple[int]) -> tuple[bytes] | None:
        f = self.files
        if key[0] >= f.n_chunks:
            return None
        return (f.read(f.base_path(key[0]), f"chunk {key[0]} of {f.where}'s base"),)

    def containsKey(self, key: tuple[int]) -> bool:
        return key[0] < self.files.n_chunks

    def updateValue(self, key: tuple[int], value: tuple[bytes]) -> None:
        f = self.files
        if f.new_base_id is None:
            # a new base: its own name, so the committed one stays readable
            f.new_base_id, f.n_chunks = _fresh(), 0
        if key[0] != f.n_chunks:
            raise ValueError(f"{f.where}: base chunk {key[0]} written out of order")
        f.write(f.base_path(key[0]), value[0])
        f.n_chunks += 1

    def removeKey(self, key: tuple[int]) -> None:
        # chunks of the old base stay until no committed version names them
        pass


class _Log:
    """The changes since the base, one per batch, oldest first."""

    def __init__(self, files: TaskFiles) -> None:
        self.files = files

    def exists(self) -> bool:
        return bool(self.files.log_ids)

    def get(self) -> Iterator[tuple[bytes]]:
        f = self.files
        for n, ident in f.log_ids:
            yield (f.read(f.change_path(n, ident), f"the change of batch {n} of {f.where}"),)

    def appendValue(self, value: tuple[bytes]) -> None:
        f = self.files
        n = f.batch_of_write()
        ident = _fresh()
        f.write(f.change_path(n, ident), value[0])
        f.log_ids.append((n, ident))

    def clear(self) -> None:
        self.files.log_ids = []


class _Version:
    """The version: incarnation, batches, base bytes, log bytes, log length, base
    chunks."""

    def __init__(self, files: TaskFiles) -> None:
        self.files = files

    def exists(self) -> bool:
        return self.files.version_tuple is not None

    def get(self) -> tuple[Any, ...] | None:
        return self.files.version_tuple

    def update(self, value: tuple[Any, ...]) -> None:
        self.files.version_tuple = tuple(value)


class TaskFiles:
    """One task's files of one store, seen at a committed version (``committed``: the
    group state's value, None for a new task), and the new version a batch builds.

    :attr:`base`, :attr:`log` and :attr:`version` are what an operator reads and writes
    (:meth:`kspark_server.operators.base.TaskProcessor.attach`); :meth:`committed` is the
    group state to commit. A reader passes
    ``create=False``: it makes no folder, and a named file that a later batch collected is
    a :class:`StaleVersion` to it (a batch runs on the last committed version, which no
    collection touches).
    """

    def __init__(
        self, root: str, store: str, task: int, committed: Any, *, create: bool = True
    ) -> None:
        self.folder = os.path.join(root, store, f"task-{task}")
        self.where = f"task {task} of store {store}"
        self.base = _Base(self)
        self.log = _Log(self)
        self.version = _Version(self)
        self.new_base_id: str | None = None
        if committed is None:
            self.version_tuple: tuple[Any, ...] | None = None
            self.base_at, self.base_id, self.n_chunks = 0, "", 0
            self.log_ids: list[tuple[int, str]] = []
        else:
            c = tuple(committed)
            self.version_tuple = tuple(c[:6])
            self.base_at, self.base_id, self.n_chunks = int(c[6]), str(c[7]), int(c[5] or 0)
            batches = int(c[1])
            ids = [x for x in str(c[8] or "").split(",") if x]
            # the changes are those of the batches after the base, one per batch
            self.log_ids = [(batches - len(ids) + 1 + i, str(x)) for i, x in enumerate(ids)]
        self.reader = not create
        if create:
            os.makedirs(self.folder, exist_ok=True)
        #: the committed names, for :meth:`collect`
        self._named = self._names()
        #: the folder's file names, listed once when first needed (:meth:`listing`)
        self._listing: set[str] | None = None
        self._committed_batches = 0 if committed is None else int(tuple(committed)[1])

    def batch_of_write(self) -> int:
        """The task's batch number that this batch's files carry."""
        return self._committed_batches + 1

    def base_path(self, chunk: int) -> str:
        if self.new_base_id is not None:
            at, ident = self.batch_of_write(), self.new_base_id
        else:
            at, ident = self.base_at, self.base_id
        return os.path.join(self.folder, f"base-{at:012d}-{ident}-{chunk:05d}{_SUFFIX}")

    def change_path(self, n: int, ident: str) -> str:
        return os.path.join(self.folder, f"chg-{n:012d}-{ident}{_SUFFIX}")

    def write(self, path: str, data: bytes) -> None:
        """Write the new file ``path`` of this batch, durably, and count it in the
        folder's listing."""
        _write(path, data)
        if self._listing is not None:
            self._listing.add(os.path.basename(path))

    def listing(self) -> set[str]:
        """The names in the task's folder, listed on first use and kept up to date with
        what this TaskFiles writes and deletes: a batch lists its task's folder once
        (for :meth:`collect` and the local store's :meth:`ran_twice`), however many
        questions it asks of it. Other attempts' files written since are not seen;
        :meth:`moved_on`, which asks about them, lists anew."""
        if self._listing is None:
            try:
                self._listing = set(os.listdir(self.folder))
            except FileNotFoundError:
                self._listing = set()
        return self._listing

    def read(self, path: str, what: str) -> bytes:
        """The bytes of named file ``path`` (``what`` it holds, for the error)."""
        try:
            with open(path, "rb") as f:
                return f.read()
        except FileNotFoundError:
            if self.reader and self.moved_on():
                raise self.stale(f"{what} ({path})") from None
            raise stateenc.StateFormatError(
                f"{what} is missing from the checkpoint ({path}): the checkpoint's state "
                "files were removed or the checkpoint was copied without its kspark-state "
                "folder"
            ) from None

    def stale(self, what: str) -> StaleVersion:
        """The error of a reader whose version's ``what`` a later batch collected."""
        return StaleVersion(
            f"[{STALE}] {what} was collected: the app committed a newer version of "
            f"{self.where} since the one of its batch {self._committed_batches} was read"
        )

    def named(self) -> set[str]:
        """The names of the files the version names."""
        return set(self._named)

    def moved_on(self) -> bool:
        """Whether the folder holds a file of a batch after the version's: a later batch
        ran (or one failed after writing files). It lists the folder anew: the question
        is about files written since it was last listed."""
        self._listing = None
        return any((_batch_of(n) or 0) > self._committed_batches for n in self.listing())

    def chunks(self) -> Iterator[bytes]:
        for i in range(self.n_chunks):
            got = self.base.getValue((i,))
            assert got is not None
            yield got[0]

    def _names(self) -> set[str]:
        names = {os.path.basename(self.base_path(c)) for c in range(self.n_chunks)}
        names.update(os.path.basename(self.change_path(n, i)) for n, i in self.log_ids)
        return names

    def committed(self) -> tuple[Any, ...]:
        """The group state that names this batch's version (after :meth:`version`'s
        update)."""
        v = self.version_tuple
        if v is None:
            raise ValueError(f"{self.where}: no version to commit")
        if self.new_base_id is not None:
            base_at, base_id = self.batch_of_write(), self.new_base_id
        else:
            base_at, base_id = self.base_at, self.base_id
        return (*v[:5], self.n_chunks, base_at, base_id, ",".join(i for _, i in self.log_ids))

    def collect(self) -> int:
        """Delete the files of batches up to the committed version that it does not name
        (older versions' files, failed attempts'); the number deleted. None while a
        rescale holds the store's files (:data:`HOLD`)."""
        gone = 0
        if _held(os.path.dirname(self.folder)):
            return gone
        if self.ran_twice(self._committed_batches):
            # Spark's state store keeps the FIRST commit of a version and drops a repeat's,
            # while the run that repeated the batch goes on with its own: a restart before
            # the next micro-batch commits loads the other attempt's version, which names
            # files this one does not. Keep everything; a later collection deletes them.
            return gone
        listing = self.listing()
        for name in sorted(listing):
            n = _batch_of(name)
            if n is None or name in self._named:
                continue
            if n <= self._committed_batches:
                with contextlib.suppress(FileNotFoundError):
                    os.remove(os.path.join(self.folder, name))
                    gone += 1
                listing.discard(name)
        return gone

    def ran_twice(self, batch: int) -> bool:
        """Whether the task's ``batch`` (at most the committed one) ran more than once: the
        folder holds a file of that batch that the committed version does not name, so
        another attempt's state of that batch may exist (in Spark's state store, in a
        local store)."""
        return any(_batch_of(n) == batch and n not in self._named for n in self.listing())

    def just_compacted(self) -> bool:
        """Whether the committed version's base was written by its last batch: the time
        to collect the files the base replaced."""
        return self.version_tuple is not None and self.base_at == self._committed_batches
