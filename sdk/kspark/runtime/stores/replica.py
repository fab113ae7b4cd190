"""Replicas: a client-side copy of one table store, kept current from the checkpoint."""

from __future__ import annotations

from typing import Any

from kspark.compiler import stages as st
from kspark.errors import StoreError
from kspark.runtime.stores.files import Seeds
from kspark.runtime.stores.sources import _MemorySource
from kspark.runtime.stores.tables import _table_spec, _view


class StoreReplica:
    """A client-side copy of one store, kept current from the checkpoint's change feed.

    Kafka Streams keeps standby replicas of a task's stores warm on other instances, so
    that interactive queries and fail-over do not wait for a restore. Spark has no such
    thing; this is the part of it that serves reads: the replica loads the store once from
    kspark's files (:mod:`kspark_server.taskfiles`), then :meth:`refresh` reads each
    task's committed version and fetches only the changes of the tasks whose version moved
    (their whole state when they wrote a new base). Reads are answered from memory, also
    while the app or its server is down, as of the last refresh (:attr:`as_of_batch`).

    Obtained from :meth:`kspark.StreamsApp.replica`.
    """

    def __init__(
        self,
        spark: Any,
        checkpoint: str,
        output: st.Output,
        name: str,
        seeds: Seeds | None = None,
    ) -> None:
        self.name = name
        #: the generation's seeds, for its tasks that have committed nothing yet
        self._seeds = seeds
        self._spark = spark
        self._checkpoint = checkpoint
        self._output = output
        self._spec = _table_spec(output, name, "have replicas")
        #: each task's version as held (taskreads.held_version)
        self._held: dict[int, str] = {}
        self._tasks: dict[int, Any] = {}
        # each task's state as stored: its base's chunks (by number) and its log of changes
        self._bases: dict[int, dict[int, bytes]] = {}
        self._logs: dict[int, list[bytes]] = {}
        self._view: Any = None
        #: the last micro-batch whose state the replica holds (None before the first load)
        self.as_of_batch: int | None = None

    def use_session(self, spark: Any) -> None:
        """Refresh through ``spark`` from now on (after the old session's server went
        away: the replica's contents stay)."""
        self._spark = spark

    def refresh(self) -> int:
        """Catch up with the checkpoint; returns how many task states changed."""
        from kspark.runtime.checkpoints import last_committed
        from kspark_server import taskstate

        last = last_committed(self._spark, self._checkpoint)
        if last is None or last == self.as_of_batch:
            return 0
        # a later batch when the app collected the files of ``last``'s versions
        last, dirty = self._apply_file_changes(last)
        kind, versioned = self._spec.kind, self._spec.versioned
        for task in dirty:
            chunks = self._bases.get(task)
            if chunks and 0 in chunks:
                self._tasks[task] = taskstate.materialize(
                    kind, versioned, [chunks[i] for i in sorted(chunks)], self._logs.get(task, ())
                )
            else:
                self._bases.pop(task, None)
                self._logs.pop(task, None)
                self._tasks.pop(task, None)
                # nothing held: the task's next change comes whole
                self._held.pop(task, None)
        changed = len(dirty)
        self.as_of_batch = last
        self._view = _view(self.name, _MemorySource(self._tasks, versioned), self._spec)
        return changed

    def _apply_file_changes(self, last: int) -> tuple[int, set[int]]:
        """Apply the file changes up to batch ``last`` (or the later one
        read, :func:`kspark.runtime.stores.files.changes`); that batch and the tasks
        changed."""
        from kspark.runtime.stores import files

        last, rows = files.changes(
            self._spark, self._checkpoint, self._output, self.name, self._held, last, self._seeds
        )
        dirty: set[int] = set()
        for r in sorted(rows, key=lambda r: (r["task"], r["part"], r["number"])):
            task = int(r["task"])
            if r["part"] == -1:
                dirty.add(task)
                self._held[task] = r["held"]
                if r["reset"]:
                    self._bases[task], self._logs[task] = {}, []
            elif r["part"] == 0:
                self._bases.setdefault(task, {})[int(r["number"])] = r["blob"]
            else:
                self._logs.setdefault(task, []).append(r["blob"])
        return last, dirty

    def _store(self) -> Any:
        if self._view is None:
            self.refresh()
        if self._view is None:
            raise StoreError(f"store {self.name}: the app has not committed a micro-batch yet")
        return self._view

    def get(self, key: Any, as_of: int | None = None) -> Any:
        """As :meth:`ReadOnlyVersionedStore.get`, from the replica."""
        return self._store().get(key, as_of=as_of)

    def versions(self, key: Any, from_ts: int | None = None, to_ts: int | None = None) -> Any:
        return self._store().versions(key, from_ts, to_ts)

    def fetch(self, key: Any, *time_range: int) -> Any:
        """As ``fetch`` of :class:`ReadOnlyWindowStore` (``key,
        time_from, time_to``) or of a session store (``key``), from the replica."""
        return self._store().fetch(key, *time_range)

    def approximate_num_entries(self) -> int:
        return int(self._store().approximate_num_entries())
