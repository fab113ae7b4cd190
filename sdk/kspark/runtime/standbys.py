"""Standby replicas on the client: the thread that keeps the copies warm
(``StreamsConfig(num_standby_replicas=N)``, :mod:`kspark_server.standby`).

While an app with standbys runs, a thread of the client waits for each committed
micro-batch and then runs one small Spark job, off the batches' path: it reads the
tasks' committed group states (the versions that name their files,
:mod:`kspark.runtime.stores.files`), and its tasks, on whichever executors Spark gives
them, keep the standby copies their disks are given. Spark chooses where a job's tasks
run, not kspark, so the job has a few tasks per known disk, and each reports what its
disk holds; the next round places copies with what the last ones saw
(:func:`kspark_server.standby.place`). A disk not seen for :data:`FORGET_AFTER` rounds
(its executor was lost) gets no more copies. A round starts only when the last one has
ended and a new batch has committed since it started: a slow round skips batches, never
queues them.

A standby is never needed for correctness: a round that fails is logged and the next one
tries again, and a task that finds no copy rebuilds as without standbys.
"""

from __future__ import annotations

import logging
import threading
import weakref
from collections.abc import Iterable, Mapping
from typing import Any

from kspark.compiler import stages as st
from kspark.compiler.bundle import shipped
from kspark.compiler.lowering import flat_schema
from kspark.runtime.stores.files import Seeds

__all__ = ["FORGET_AFTER", "StandbyKeeper", "keeper", "start", "stop"]

_log = logging.getLogger("kspark.standby")

#: Rounds after which a disk that no task of the job reached is forgotten.
FORGET_AFTER = 3

_KEEPERS: weakref.WeakKeyDictionary[Any, StandbyKeeper] = weakref.WeakKeyDictionary()


class StandbyKeeper:
    """Keeps the standby copies of one run of an app (see the module)."""

    def __init__(
        self,
        session: Any,
        query: Any,
        output: st.Output,
        replicas: int,
        checkpoint: str,
        seeds: Seeds | None = None,
    ) -> None:
        from kspark.compiler.lowering.build import grouped_stages
        from kspark.runtime.stores import files

        specs = {s.spec.store: s.spec for s in grouped_stages(output)}
        self.session, self.query, self.replicas = session, query, replicas
        self.checkpoint = checkpoint
        #: store -> its operator's spec, and its operator's task keys (None: the app's
        #: one operator, every task key)
        self.specs = specs
        self.keys = {store: files.store_keys(output, store) for store in specs}
        #: the group states of a rescaled generation's tasks that have committed none of
        #: their own yet, by task key: their copies are kept from them
        self.seeds: dict[int, tuple[Any, ...]] = {}
        for store in specs:
            self.seeds.update(files.seed_keys(output, store, seeds))
        #: rounds run, and the last round's error ("" if it succeeded)
        self.rounds = 0
        self.error = ""
        #: disk -> rounds since a task of the job last reported it
        self.disks: dict[str, int] = {}
        #: (store, task) -> the disk the task's own store is on
        self.active: dict[tuple[str, int], str] = {}
        #: (disk, store, task) of the copies the last round kept
        self.copies: set[tuple[str, str, int]] = set()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="kspark-standby", daemon=True)

    def covered(self) -> bool:
        """Whether, as of the last round, every task's store with state has a copy on a
        disk other than that store's own.

        Examples
        --------
        >>> k = StandbyKeeper.__new__(StandbyKeeper)
        >>> k.active = {("seen", 0): "a", ("counts", 0): "a"}
        >>> k.copies = {("b", "seen", 0)}
        >>> k.covered()
        False
        >>> k.copies.add(("b", "counts", 0))
        >>> k.covered()
        True
        """
        return bool(self.active) and all(
            any((s, t) == unit and d != disk for d, s, t in self.copies)
            for unit, disk in self.active.items()
        )

    def disk_of_task(self, task: int) -> str:
        """The disk task ``task``'s own stores were found on (every operator's task
        ``task`` runs in one Spark task)."""
        return next(d for (_, t), d in sorted(self.active.items()) if t == task)

    def _committed_batch(self) -> int:
        p = self.query.lastProgress
        if p is None:
            return -1
        return int(p["batchId"]) if isinstance(p, Mapping) else int(p.batchId)

    def _loop(self) -> None:
        done = -1
        while not self._stop.is_set():
            try:
                if not self.query.isActive:
                    return
                batch = self._committed_batch()
            except Exception:
                return
            if batch <= done:
                self._stop.wait(0.2)
                continue
            try:
                self.round()
                self.error = ""
            except Exception as exc:
                self.error = f"{type(exc).__name__}: {exc}"
                _log.warning("standby round after batch %s failed: %s", batch, self.error)
            done = batch

    def round(self) -> None:
        """One round: keep every operator's copies at the committed versions."""
        from kspark.runtime.stores import files
        from kspark_server import standby
        from kspark_server.taskfiles import state_root

        spark = self.session
        ops = files._operators(spark, self.checkpoint)
        if not ops or not self.specs:
            return
        # the app's operators run in one applyInPandasWithState (several: one per
        # sub-topology, each with its own task keys)
        rows = files.group_states(spark, self.checkpoint, ops[0], seeds=self.seeds).collect()
        committed = standby.committed_by_store((r.asDict() for r in rows), self.keys)
        if not committed:
            return
        placed = (
            standby.place_stores(self.disks, self.active, committed, self.replicas)
            if self.disks
            else None
        )
        n = max(2, 2 * len(self.disks))
        stores = [(self.specs[s], c) for s, c in sorted(committed.items())]
        fn = standby.keep(stores, state_root(self.checkpoint), placed)
        found = (
            spark.range(0, n, 1, n)
            .mapInPandas(shipped(fn), flat_schema(standby.REPORT_SCHEMA))
            .collect()
        )
        self.learn([r.asDict() for r in found])
        self.rounds += 1

    def learn(self, reports: Iterable[Mapping[str, Any]]) -> None:
        """Update what is known of the disks from a round's reports
        (:data:`kspark_server.standby.REPORT_SCHEMA`).

        Examples
        --------
        >>> k = StandbyKeeper.__new__(StandbyKeeper)
        >>> k.disks, k.active, k.copies = {"gone": 3}, {}, set()
        >>> k.learn([
        ...     {"disk": "a", "store": "s", "task": 0, "kind": "active", "batches": 5},
        ...     {"disk": "b", "store": "s", "task": 0, "kind": "standby", "batches": 5},
        ... ])
        >>> sorted(k.disks), k.active, sorted(k.copies)
        (['a', 'b'], {('s', 0): 'a'}, [('b', 's', 0)])
        """
        seen = {str(r["disk"]) for r in reports}
        self.disks = {d: 0 for d in seen} | {
            d: n + 1 for d, n in self.disks.items() if d not in seen and n + 1 < FORGET_AFTER
        }
        best: dict[tuple[str, int], tuple[int, str]] = {}
        copies: set[tuple[str, str, int]] = set()
        for r in reports:
            store, task, disk = str(r["store"]), int(r["task"]), str(r["disk"])
            if r["kind"] == "active":
                mark = (int(r["batches"]), disk)
                if (store, task) not in best or mark > best[(store, task)]:
                    best[(store, task)] = mark
            elif r["kind"] == "standby":
                copies.add((disk, store, task))
        # a task's store that was on a disk that no longer answers: not known now
        self.active = {u: d for u, (_, d) in best.items()} | {
            u: d for u, d in self.active.items() if u not in best and d in self.disks
        }
        self.copies = copies

    def begin(self) -> None:
        self._thread.start()

    def end(self, timeout: float = 60.0) -> None:
        self._stop.set()
        if self._thread.is_alive() and threading.current_thread() is not self._thread:
            self._thread.join(timeout)


def start(app: Any, output: st.Output, checkpoint: str) -> StandbyKeeper | None:
    """Start keeping ``app``'s standby copies for the run just started (nothing if it has
    no standbys or no state)."""
    stop(app)
    replicas = app.config.num_standby_replicas
    if not replicas or not any(isinstance(s, st.Stateful) for s in output.stages()):
        return None
    k = StandbyKeeper(app.session, app.query, output, replicas, checkpoint, app.generation.seeds)
    _KEEPERS[app] = k
    k.begin()
    return k


def stop(app: Any) -> None:
    """Stop keeping ``app``'s copies (its query stops)."""
    k = _KEEPERS.pop(app, None)
    if k is not None:
        k.end()


def keeper(app: Any) -> StandbyKeeper | None:
    """The keeper of ``app``'s current run, if it has standbys.

    Examples
    --------
    >>> keeper(object()) is None
    True
    """
    try:
        return _KEEPERS.get(app)
    except TypeError:
        return None
