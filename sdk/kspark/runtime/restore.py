"""State restore reporting.

What "restore" means on Spark
-----------------------------
Kafka Streams restores a task's stores from their changelog topics before the task
processes records, and tells a ``StateRestoreListener`` as it goes. Spark has no such
phase. When a query restarts from its checkpoint, each task of the first micro-batch opens
its state partition, and the RocksDB provider loads it then: it copies the last snapshot of
the partition from the checkpoint and replays the changelog files written after it. So state
loads lazily, inside the first micro-batch, on the executors, and the client learns about it
only from that batch's progress (``stateOperators[].customMetrics``: ``rocksdbNumLoadedFromDfs``,
``rocksdbLoadLatencyMs``, ``rocksdbNumReplayChangelogFiles``, ...).

kspark therefore reports a restore after the fact: :class:`RestoreTracker` reads the first
executed micro-batch of each run and builds one :class:`RestoreReport` per store. The app is
``State.RESTORING`` from the start of a run until the first progress of that run arrives.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping
from typing import Any

import attrs

from kspark.compiler import stages as st
from kspark.plan import graph
from kspark.runtime.metrics import BatchFigures
from kspark_server.envelope import SideKind

__all__ = [
    "RestoreReport",
    "RestoreTracker",
    "StandbyPromotion",
    "StateRestoreListener",
    "store_order",
]


@attrs.frozen(kw_only=True)
class RestoreReport:
    """What restoring one store took, from the first micro-batch of a restarted run.

    Attributes
    ----------
    store
        The store's name (``Topology.describe()`` lists them).
    rows
        Entries restored, counted by kspark's operator when it loaded each task's state:
        dedup ids, or table keys. Only tasks that received records in the first micro-batch
        run kspark's code, so only they are counted; ``tasks`` says how many did. Each
        (store, task) counts once, as in the ``store_entries`` metric
        (:mod:`kspark.runtime.metrics`).
    tasks
        kspark tasks that counted their entries.
    state_rows
        Spark state-store rows of the operator after the batch (``numRowsTotal``). kspark
        keeps each task's state as one row per store, so this is the number of tasks with
        state, not the number of entries.
    bytes
        Bytes of snapshot files copied from the checkpoint (``rocksdbBytesCopied``).
    memory_bytes
        Memory of the loaded state stores after the batch (``memoryUsedBytes``).
    seconds
        Time to load the state partitions (``rocksdbLoadLatencyMs``), summed over the
        partitions: they load in parallel, up to one per core.
    snapshot_seconds, changelog_seconds
        The parts of ``seconds`` spent loading the snapshot and replaying the changelog.
    changelog_files
        Changelog files replayed: the micro-batches since the last uploaded snapshot, summed
        over the partitions.
    partitions
        State partitions loaded from the checkpoint (``rocksdbNumLoadedFromDfs``).
    batch_id
        The micro-batch that loaded the state: the run's first, or, for a run of a
        rescaled generation (whose state comes from kspark's files, not Spark's
        checkpoint), its first whose tasks loaded their state.
    batch_seconds
        Wall time of that whole micro-batch (``durationMs.triggerExecution``): the restart's
        time to first output, state load and processing included.
    reused_tasks
        Tasks (of those counted in ``tasks``) whose executor-local store was at the
        committed version and was used as it was: nothing rebuilt (``state_dir``,
        docs/deployment.md).
    caught_up_tasks
        Tasks whose local store was behind and applied only the durable log's newer
        changes; ``entries_caught_up`` entries in all.
    rebuilt_tasks
        Tasks whose local store was missing, ahead (a batch that was not committed), of
        another incarnation of the state, older than its durable base, or corrupted, and
        was rebuilt from the checkpoint; ``entries_rebuilt`` entries in all.
    entries_caught_up, entries_rebuilt
        Entries written to local stores to catch them up, or to rebuild them.
    promoted_tasks
        Tasks whose local store was a standby copy (``num_standby_replicas``), promoted;
        they count in ``reused_tasks`` or ``caught_up_tasks`` too.
    """

    store: str
    rows: int
    tasks: int
    state_rows: int
    bytes: int
    memory_bytes: int
    seconds: float
    snapshot_seconds: float
    changelog_seconds: float
    changelog_files: int
    partitions: int
    batch_id: int
    batch_seconds: float
    reused_tasks: int = 0
    caught_up_tasks: int = 0
    rebuilt_tasks: int = 0
    entries_caught_up: int = 0
    entries_rebuilt: int = 0
    promoted_tasks: int = 0


@attrs.frozen(kw_only=True)
class StandbyPromotion:
    """Standby copies that a micro-batch's tasks promoted (``num_standby_replicas``):
    Spark ran the tasks on executors that held warm copies of their stores, after it
    lost the executors they ran on, or at a restart.

    Attributes
    ----------
    store
        The store.
    batch_id
        The micro-batch whose tasks promoted the copies.
    tasks
        Tasks that promoted a copy.
    entries_caught_up
        Entries the copies applied to reach the committed version (0: they were at it).
    """

    store: str
    batch_id: int
    tasks: int
    entries_caught_up: int


class StateRestoreListener:
    """Told about state restores, after Kafka Streams' ``StateRestoreListener``.

    Subclass it and override what you need; set it with
    ``app.restore_listener = MyListener()``. Spark loads state inside the first micro-batch
    of a run and reports it only when that batch ends, so both methods are called then, one
    after the other, for each store that was loaded from the checkpoint. A fresh app (no
    checkpoint) restores nothing and calls neither. There is no ``on_batch_restored``:
    Spark replays a partition's changelog in one go and does not report progress inside it.

    Examples
    --------
    >>> class Printer(StateRestoreListener):
    ...     def on_restore_end(self, store, total_restored, report):
    ...         print(f"{store}: {total_restored} entries in {report.seconds:.2f}s")
    >>> Printer().on_restore_end("seen", 3, None)  # doctest: +SKIP
    seen: 3 entries in 0.40s
    """

    def on_restore_start(self, store: str, checkpoint: str, batch_id: int) -> None:
        """Store ``store`` was loaded from ``checkpoint`` by micro-batch ``batch_id``."""

    def on_restore_end(self, store: str, total_restored: int, report: RestoreReport) -> None:
        """Store ``store`` restored ``total_restored`` entries; ``report`` has the details."""

    def on_standby_promoted(self, store: str, promotion: StandbyPromotion) -> None:
        """Tasks of a micro-batch promoted standby copies of ``store`` instead of
        rebuilding it (Kafka Streams' ``StandbyUpdateListener.onUpdateSuspended`` with
        reason ``PROMOTED``). Called once per batch and store, when the batch's progress
        reaches the client, during any run, not only at its start."""


def store_order(output: st.Output) -> list[str]:
    """The store of each stateful operator, in the order of Spark's ``stateOperators``.

    Spark lists the stateful operators of the physical plan in pre-order (parent first,
    then the children in order), which is also the order it numbers them in. The plan is the
    union of the sinks' stage trees, and a stage that two sinks share appears in both.

    Examples
    --------
    >>> from kspark_server.spec import SinksSpec
    >>> store_order(st.Output(sinks=(), writer_spec=SinksSpec(), stores={}))
    []
    """
    stages = graph.preorder(output.roots(), lambda s: s.inputs)
    return [s.spec.store for s in stages if isinstance(s, st.Stateful)]


def _num(m: Mapping[str, Any], key: str) -> int:
    v = m.get(key)
    return int(v) if isinstance(v, int | float) else 0


class RestoreTracker:
    """Follows one app's runs and builds restore reports from their first micro-batch.

    ``StreamsApp`` calls :meth:`begin` when it starts a query and :meth:`observe` whenever
    it collects progress; :meth:`observe` returns True once the run has made progress, when
    the app leaves ``RESTORING``.
    """

    def __init__(self) -> None:
        self._run_id: str | None = None
        self._stores: list[str] = []
        self._checkpoint = ""
        self._reported = True
        self._reports: list[RestoreReport] = []
        self._promotions: list[StandbyPromotion] = []
        self._looked: set[tuple[str, int]] = set()

    def begin(self, query: Any, output: st.Output, checkpoint: str, *, restoring: bool) -> None:
        """A new run started; ``restoring``: it has state to restore (the app is RESTORING)."""
        self._run_id = str(query.runId)
        self._stores = store_order(output)
        self._checkpoint = checkpoint
        self._reports = []
        self._reported = not (self._stores and restoring)

    def observe(
        self, progress: Mapping[tuple[str, int], Mapping[str, Any]], listener: Any = None
    ) -> bool:
        """Look at the progress collected so far (keyed by ``(runId, batchId)``).

        Returns True if the current run has reported any progress. Builds the reports, and
        calls ``listener``, at the run's first executed micro-batch.
        """
        mine = sorted(
            (p for (run, _), p in progress.items() if run == self._run_id),
            key=lambda p: int(p.get("batchId", -1)),
        )
        if not mine:
            return False
        if not self._reported:
            first = next((p for p in mine if _loaded_state(p)), None)
            if first is not None:
                self._reported = True
                self._reports = _reports(first, self._stores)
                if listener is not None:
                    for r in self._reports:
                        listener.on_restore_start(r.store, self._checkpoint, r.batch_id)
                        listener.on_restore_end(r.store, r.rows, r)
        for p in mine:
            key = (str(self._run_id), int(p.get("batchId", -1)))
            if key in self._looked:
                continue
            self._looked.add(key)
            for promotion in _promotions(p):
                self._promotions.append(promotion)
                if listener is not None and hasattr(listener, "on_standby_promoted"):
                    listener.on_standby_promoted(promotion.store, promotion)
        return True

    def promotions(self) -> list[StandbyPromotion]:
        """The standby promotions of every run so far, oldest first."""
        return list(self._promotions)

    def reports(self) -> list[RestoreReport]:
        """The stores the current (or last) run restored; empty if it restored none yet."""
        return list(self._reports)


def _loaded_state(p: Mapping[str, Any]) -> bool:
    """Whether the batch of progress ``p`` loaded state: Spark loaded state partitions
    from the checkpoint, or kspark's tasks counted the entries they loaded.

    A run of a rescaled generation starts from kspark's files (the new layout's seeds, or
    an initial state), not from Spark's checkpoint, so Spark loads nothing in any of its
    batches; and its first batch may run no task of the operator (the new query's first
    batch can be empty: the files that earlier generations consumed are left out). Its
    restore is the first batch whose tasks loaded their state.

    Examples
    --------
    >>> ops = [{"customMetrics": {"rocksdbNumLoadedFromDfs": 0}}]
    >>> _loaded_state({"stateOperators": ops})
    False
    >>> _loaded_state({"stateOperators": [{"customMetrics": {"rocksdbNumLoadedFromDfs": 2}}]})
    True
    """
    ops = list(p.get("stateOperators") or [])
    if not ops:
        return False
    if any(_num(op.get("customMetrics") or {}, "rocksdbNumLoadedFromDfs") for op in ops):
        return True
    return bool(BatchFigures.of(p).by_key(SideKind.LOADED_ENTRIES))


def _promotions(p: Mapping[str, Any]) -> list[StandbyPromotion]:
    """The standby promotions of one batch's progress, one per store.

    Examples
    --------
    >>> p = {"batchId": 7, "observedMetrics": {"kspark": {"side": [
    ...     {"kind": "local_promoted", "processor": "seen", "task": "0_1", "count": 3}]}}}
    >>> _promotions(p)
    [StandbyPromotion(store='seen', batch_id=7, tasks=1, entries_caught_up=3)]
    """
    got: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for (store, _), count in BatchFigures.of(p).by_key(SideKind.LOCAL_PROMOTED).items():
        got[store][0] += 1
        got[store][1] += count
    batch = int(p.get("batchId", -1))
    return [
        StandbyPromotion(store=s, batch_id=batch, tasks=n, entries_caught_up=e)
        for s, (n, e) in sorted(got.items())
    ]


def _reports(p: Mapping[str, Any], stores: list[str]) -> list[RestoreReport]:
    ops = list(p.get("stateOperators") or [])
    if len(stores) == len(ops):
        pairs = list(zip(stores, ops, strict=True))
    elif len(ops) == 1 and len(set(stores)) > 1:
        # one applyInPandasWithState runs every operator: each store reports its own tasks from kspark's figures,
        # and the Spark operator's figures, which all of them share
        pairs = [(store, ops[0]) for store in dict.fromkeys(stores)]
    else:
        pairs = [(f"operator-{i}", op) for i, op in enumerate(ops)]
    # counted as the store-entries metric is: once per (store, task)
    loaded: dict[str, int] = defaultdict(int)
    tasks: dict[str, int] = defaultdict(int)
    figures = BatchFigures.of(p)
    for (store, _), count in figures.by_key(SideKind.LOADED_ENTRIES).items():
        loaded[store] += count
        tasks[store] += 1
    # per store: how its tasks' local stores were opened ([tasks, entries] by outcome)
    local: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for kind in (
        SideKind.LOCAL_REUSED,
        SideKind.LOCAL_CAUGHT_UP,
        SideKind.LOCAL_REBUILT,
        SideKind.LOCAL_PROMOTED,
    ):
        for (store, _), count in figures.by_key(kind).items():
            local[store][kind][0] += 1
            local[store][kind][1] += count
    batch_id = int(p.get("batchId", -1))
    batch_s = _num(p.get("durationMs") or {}, "triggerExecution") / 1000
    merged: dict[str, RestoreReport] = {}
    for name, op in pairs:
        m = op.get("customMetrics") or {}
        partitions = _num(m, "rocksdbNumLoadedFromDfs")
        if partitions == 0 and name not in tasks:
            continue  # nothing came from the checkpoint nor kspark's files: a fresh store
        r = RestoreReport(
            store=name,
            rows=loaded.get(name, 0),
            tasks=tasks.get(name, 0),
            state_rows=_num(op, "numRowsTotal"),
            bytes=_num(m, "rocksdbBytesCopied"),
            memory_bytes=_num(op, "memoryUsedBytes"),
            seconds=_num(m, "rocksdbLoadLatencyMs") / 1000,
            snapshot_seconds=max(
                0, _num(m, "rocksdbLoadLatencyMs") - _num(m, "rocksdbReplayChangeLogLatencyMs")
            )
            / 1000,
            changelog_seconds=_num(m, "rocksdbReplayChangeLogLatencyMs") / 1000,
            changelog_files=_num(m, "rocksdbNumReplayChangelogFiles"),
            partitions=partitions,
            batch_id=batch_id,
            batch_seconds=batch_s,
            reused_tasks=local[name][SideKind.LOCAL_REUSED][0],
            caught_up_tasks=local[name][SideKind.LOCAL_CAUGHT_UP][0],
            rebuilt_tasks=local[name][SideKind.LOCAL_REBUILT][0],
            entries_caught_up=local[name][SideKind.LOCAL_CAUGHT_UP][1],
            entries_rebuilt=local[name][SideKind.LOCAL_REBUILT][1],
            promoted_tasks=local[name][SideKind.LOCAL_PROMOTED][0],
        )
        old = merged.get(name)
        if old is not None:  # one store shared by two sinks' plans: add them up
            r = attrs.evolve(
                r,
                state_rows=old.state_rows + r.state_rows,
                bytes=old.bytes + r.bytes,
                memory_bytes=old.memory_bytes + r.memory_bytes,
                seconds=old.seconds + r.seconds,
                snapshot_seconds=old.snapshot_seconds + r.snapshot_seconds,
                changelog_seconds=old.changelog_seconds + r.changelog_seconds,
                changelog_files=old.changelog_files + r.changelog_files,
                partitions=old.partitions + r.partitions,
            )
        merged[name] = r
    return list(merged.values())
