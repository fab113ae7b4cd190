"""Replicas: a client-side copy of one table store, kept current from the checkpoint."""

from __future__ import annotations

from typing import Any

from kspark._typing import StatefulRunner
from kspark.compiler import stages as st
from kspark.errors import StoreError
from kspark.runtime.stores.sources import _MemorySource
from kspark.runtime.stores.statestore import (
    _base_change,
    _base_rows,
    _operator_id,
    _state_reader,
    _task_logs,
)
from kspark.runtime.stores.tables import _table_spec, _view


class StoreReplica:
    """A client-side copy of one store, kept current from the checkpoint's change feed.

    Kafka Streams keeps standby replicas of a task's stores warm on other instances, so
    that interactive queries and fail-over do not wait for a restore. Spark has no such
    thing; this is the part of it that serves reads: the replica loads the store once with
    Spark's state reader, then :meth:`refresh` applies only what changed since (the state
    reader's change feed over the changelog checkpoints). Reads are answered from memory,
    also while the app or its server is down, as of the last refresh
    (:attr:`as_of_batch`).

    Under ``stateful_runner="apply_in_pandas"`` the change feed is kspark's own files
    (:mod:`kspark_server.taskfiles`): a refresh reads each task's committed version and
    fetches only the changes of the tasks whose version moved (their whole state when
    they wrote a new base).

    Obtained from :meth:`kspark.StreamsApp.replica`.
    """

    def __init__(
        self,
        spark: Any,
        checkpoint: str,
        output: st.Output,
        name: str,
        runner: StatefulRunner = "transform_with_state",
    ) -> None:
        self.name = name
        self._spark = spark
        self._checkpoint = checkpoint
        self._output = output
        self._runner = runner
        self._spec = _table_spec(output, name, "have replicas")
        #: under the grouped runner: each task's version as held (taskreads.held_version)
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
        if self._runner == "apply_in_pandas":
            # a later batch when the app collected the files of ``last``'s versions
            last, dirty = self._apply_file_changes(last)
        else:
            dirty = self._apply_feed(last)
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
        """Apply the grouped runner's file changes up to batch ``last`` (or the later one
        read, :func:`kspark.runtime.stores.files.changes`); that batch and the tasks
        changed."""
        from kspark.runtime.stores import files

        last, rows = files.changes(
            self._spark, self._checkpoint, self._output, self.name, self._held, last
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

    def _apply_feed(self, last: int) -> set[int]:
        """Apply Spark's state change feed up to batch ``last``; the tasks changed."""
        op = _operator_id(self._spark, self._checkpoint, self.name)
        reader = _state_reader(self._spark, op, self.name)
        dirty: set[int] = set()
        if self.as_of_batch is None:
            rows = _base_rows(self._spark, self._checkpoint, op, self.name)
            for r in rows.select("key", "chunk", "blob").collect():
                if r["blob"] is not None:
                    self._bases.setdefault(int(r["key"][0]), {})[int(r["chunk"])] = r["blob"]
            self._logs = _task_logs(self._spark, self._checkpoint, op, self.name)
            dirty = set(self._bases)
        else:
            # (batch, rank, task, chunk, bytes): within a batch a base's chunks come
            # first (each chunk number changes at most once a batch), then the log's
            # clearing, then its append (the order the operator writes them in)
            events: list[tuple[int, int, int, int, bytes | None]] = []
            feed = self._feed(reader, last)
            for r in feed.select(
                "batch_id",
                "change_type",
                "key",
                "user_map_key",
                "user_map_value",
            ).collect():
                task, number, blob = _base_change(r)
                events.append((int(r["batch_id"]), 0, task, number, blob))
            for r in self._log_feed(op, last):
                append = r["change_type"] == "append" and r["list_element"] is not None
                events.append(
                    (
                        int(r["batch_id"]),
                        2 if append else 1,
                        int(r["key"][0]),
                        0,
                        r["list_element"][0] if append else None,
                    )
                )
            events.sort(key=lambda e: e[:4])
            for _, rank, task, number, blob in events:
                dirty.add(task)
                if rank == 0:
                    if blob is None:
                        self._bases.get(task, {}).pop(number, None)
                    else:
                        self._bases.setdefault(task, {})[number] = blob
                elif rank == 1:
                    self._logs.pop(task, None)
                elif blob is not None:
                    self._logs.setdefault(task, []).append(blob)
        return dirty

    def _feed(self, reader: Any, last: int) -> Any:
        assert self.as_of_batch is not None
        return (
            reader.option("readChangeFeed", "true")
            .option("changeStartBatchId", self.as_of_batch + 1)
            .option("changeEndBatchId", last)
            .load(self._checkpoint)
        )

    def _log_feed(self, op: int, last: int) -> list[Any]:
        from kspark_server import statevars

        reader = _state_reader(self._spark, op, statevars.log_name(self.name))
        return list(
            self._feed(reader, last)
            .select("batch_id", "change_type", "key", "list_element")
            .collect()
        )

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
