"""Rescaling an app's stateful operators on their own files, stopped or running
(:meth:`kspark.StreamsApp.rescale`).

The runner's state is in kspark's files under the query checkpoint, named by each task's
committed version (:mod:`kspark_server.taskfiles`). Every stateful operator's store goes
through the steps below together (several operators share the query's one
``applyInPandasWithState``, each under task keys of its own). A rescale to ``M`` tasks:

1. **build**: reads the old layout's committed files as of the last committed batch,
   re-splits every entry by ``pmod(hash, M)`` and writes each new task's base files into
   the new checkpoint and its executor-local store, in parallel over the new tasks (one
   Spark partition each); the entries and checksums before and after must agree
   (:mod:`kspark_server.regroup`);
2. **catch up** (running app only): while the app keeps processing on the old layout, each
   round brings the new layout to the old one's newest committed batch from the old tasks'
   change files: a round costs the batches' changes, not the state;
3. **switch**: the app stops (a running one at a batch boundary, after its in-flight batch
   is committed or abandoned), the last batches are caught up, a new checkpoint generation
   is recorded whose tasks start from the new layout's files (each task's *seed*), and a running app starts again on it. Records waiting in internal
   topics stay there for the new layout; a batch folder of a micro-batch that did not
   commit is removed, since the new layout runs that micro-batch again.

So the output of a running app pauses for about one restart plus one catch-up round,
whatever the state's size (docs/performance.md). Nothing is recorded before the switch:
a rescale that fails or is killed earlier leaves the old layout as it was, running if it
ran; a failure after the stop starts the old layout again.
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Protocol

import attrs

from kspark.compiler import stages as st
from kspark.compiler.bundle import shipped
from kspark.compiler.lowering import flat_schema
from kspark.config import MAX_PARTITIONS, StreamsConfig
from kspark.errors import RescaleError
from kspark.plan.topics import TopicSpec
from kspark.plan.topology import Topology
from kspark.runtime import internal, lease, shipping
from kspark.runtime import rescale as rescaling
from kspark.runtime.checkpoints import (
    Generation,
    Progress,
    current_generation,
    last_committed,
    query_progress,
)


class StreamsApp(Protocol):
    """What a rescale reads and drives of :class:`kspark.StreamsApp` (a protocol, so the
    app can call this module without an import circle)."""

    config: StreamsConfig
    topology: Topology
    _runs: list[str]
    _generation: Generation | None
    _internal: tuple[TopicSpec, ...]

    @property
    def session(self) -> Any: ...

    @property
    def query(self) -> Any: ...

    def compiled(self) -> st.Output: ...

    def start(self) -> Any: ...

    def stop(self) -> None: ...

    def _forget_generation(self) -> None: ...


__all__ = ["Layout", "rescale"]

#: At most this many catch-up rounds before the switch, however far behind the last ended
#: (on a busy machine a round can take as long as the batches it follows).
MAX_ROUNDS = 4
#: A round that took less than this (seconds) is close enough behind to switch.
CLOSE_ENOUGH = 3.0

Phase = Callable[[str], None]


def rescale(app: StreamsApp, partitions: int, phase: Phase) -> rescaling.RescaleReport:
    """:meth:`kspark.StreamsApp.rescale` (a running app warm, see the module doc)."""
    running = app.query is not None and app.query.isActive
    _check_partitions(partitions)
    rescaling.refuse_global_stores(app.topology)
    if not running:
        lease.check_not_running(
            app.session, app.config.checkpoint_dir, app.config.application_id, frozenset(app._runs)
        )
    with lease.RescaleLock(app.session, app.config.checkpoint_dir, app.config.application_id):
        return _rescale(app, partitions, phase, running)


def _check_partitions(partitions: int) -> None:
    if type(partitions) is not int or partitions < 1:
        raise RescaleError(f"partitions must be a positive integer, got {partitions!r}")
    if partitions > MAX_PARTITIONS:
        raise RescaleError(f"partitions must be at most {MAX_PARTITIONS}, got {partitions}")


def _adopt(app: StreamsApp, partitions: int) -> None:
    app.config = app.config.with_(num_partitions=partitions)
    app._forget_generation()


@attrs.define
class Layout:
    """A new layout being built: its checkpoint, and per store per new task its meta
    (:func:`kspark_server.regroup.pack_meta`), as of the old layout's committed ``batch``."""

    checkpoint: str
    partitions: int
    batch: int
    metas: dict[str, dict[int, bytes]] = attrs.field(factory=dict)
    entries: dict[str, int] = attrs.field(factory=dict)
    rounds: int = 0


@attrs.frozen
class Store:
    """One stateful operator of the app, as a rescale moves it: its stage and the task
    keys its group states have in the old layout (None: every group state is its own)."""

    stage: st.Stateful
    keys: tuple[int, ...] | None
    #: task -> the seed a task of the current generation starts from until it commits a
    #: group state of its own (a task with no record since the last rescale has none)
    seeds: dict[int, tuple[Any, ...]] = attrs.field(factory=dict, eq=False)

    @property
    def name(self) -> str:
        return self.stage.spec.store


def _stores(app: StreamsApp, gen: Generation | None = None) -> list[Store]:
    """Every stateful operator of the app: several share the query's one
    ``applyInPandasWithState``, each under task keys of its own
    (:func:`kspark.runtime.stores.files.store_keys`)."""
    from kspark.runtime.stores.files import store_keys

    output = app.compiled()
    stages = [s for s in output.stages() if isinstance(s, st.Stateful)]
    seeds = gen.seeds if gen is not None else {}

    def seeds_of(store: str) -> dict[int, tuple[Any, ...]]:
        return {int(t): tuple(v) for t, v in seeds.get(store, {}).items()}

    return [Store(s, store_keys(output, s.spec.store), seeds_of(s.spec.store)) for s in stages]


def _olds(spark: Any, checkpoint: str, op: int | None, batch: int) -> dict[int, tuple[Any, ...]]:
    """Each task key's committed group state as of ``batch``, of operator ``op``: all of
    its stores' (see :class:`_OldStates`)."""
    from kspark_server.taskreads import FIELDS

    if op is None:
        return {}
    df = (
        spark.read.format("statestore")
        .option("operatorId", op)
        .option("batchId", batch)
        .load(checkpoint)
        .select("key.ks_task", "value.groupState.*")
    )
    return {
        int(r["ks_task"]): tuple(r[f] for f in FIELDS)
        for r in df.collect()
        if r["batches"] is not None
    }


class _OldStates:
    """The old layout's committed group states, read once per operator and batch: the
    stores that share one ``applyInPandasWithState`` share its read, and only the last
    batch's reads are kept."""

    def __init__(self, spark: Any, checkpoint: str) -> None:
        self.spark, self.checkpoint = spark, checkpoint
        self.batch: int | None = None
        self.reads: dict[int, dict[int, tuple[Any, ...]]] = {}

    def of(self, store: Store, op: int | None, batch: int) -> dict[int, tuple[Any, ...]]:
        """Each old task's committed group state as of ``batch`` of ``store`` (whose
        operator is ``op``), over its seeds."""
        from kspark_server import placement

        if op is None:
            return dict(store.seeds)
        if batch != self.batch:
            self.batch, self.reads = batch, {}
        if op not in self.reads:
            self.reads[op] = _olds(self.spark, self.checkpoint, op, batch)
        keys = None if store.keys is None else frozenset(store.keys)
        mine = {
            placement.task_of(k): v for k, v in self.reads[op].items() if keys is None or k in keys
        }
        return {**store.seeds, **mine}


def _olds_frame(spark: Any, olds: dict[int, tuple[Any, ...]], n_old: int) -> Any:
    from kspark_server import placement
    from kspark_server.taskfiles import GROUP_STATE_DDL

    keys = placement.task_keys(n_old)
    rows = [(keys[t], *v) for t, v in sorted(olds.items())]
    df = spark.createDataFrame(rows, f"ks_task int, {GROUP_STATE_DDL}")
    return df.repartition(max(1, len(rows)), "ks_task")


def _build(
    spark: Any,
    store: Store,
    old_ckpt: str,
    layout: Layout,
    op: int | None,
    batch: int,
    n_old: int,
    reads: _OldStates,
) -> None:
    """Step 1 (see the module doc): ``store``'s part of ``layout`` as of the old one's
    ``batch``."""
    from pyspark.sql import functions as F

    from kspark_server import placement, regroup
    from kspark_server.taskfiles import state_root

    spec = store.stage.spec
    m = layout.partitions
    olds = reads.of(store, op, batch)
    layout.metas[store.name], layout.entries[store.name] = {}, 0
    if not olds:
        return
    parts = _olds_frame(spark, olds, n_old).mapInPandas(
        shipped(
            regroup.split_files(state_root(old_ckpt), spec.store, spec.kind, spec.versioned, m)
        ),
        flat_schema(regroup.PARTS_SCHEMA),
    )
    positions = {t: int(v[1]) for t, v in olds.items()}
    keys = placement.task_keys(m)
    markers = spark.createDataFrame(
        [(k, regroup.MARKER, None, 0, 0) for k in keys], regroup.PARTS_SCHEMA
    )
    rows = (
        parts.unionByName(markers)
        .repartition(m, F.col("ks_task"))
        .mapInPandas(
            shipped(regroup.build_tasks(spec, state_root(layout.checkpoint), m, positions)),
            flat_schema(regroup.BUILT_SCHEMA),
        )
        .collect()
    )
    before = sum(int(r["entries"]) for r in rows if r["ks_task"] == -1)
    old_sum = sum(int(r["checksum"]) for r in rows if r["ks_task"] == -1)
    news = [r for r in rows if r["ks_task"] != -1]
    after = sum(int(r["entries"]) for r in news)
    new_sum = sum(int(r["checksum"]) for r in news)
    if before != after or old_sum != new_sum:
        raise RescaleError(
            f"store {spec.store} ({spec.processor}): the re-split state has {after:,} entries "
            f"(checksum {new_sum}), the old one {before:,} ({old_sum}); nothing was switched"
        )
    layout.metas[store.name] = {int(r["ks_task"]): bytes(r["meta"]) for r in news}
    layout.entries[store.name] = after


def _catch_up(
    spark: Any,
    store: Store,
    old_ckpt: str,
    op: int | None,
    layout: Layout,
    batch: int,
    n_old: int,
    reads: _OldStates,
) -> None:
    """Step 2: ``store``'s part of ``layout`` brought to the old layout's committed
    ``batch`` (``layout.batch`` is where it is)."""
    from pyspark.sql import functions as F

    from kspark_server import placement, regroup
    from kspark_server.taskfiles import state_root

    if batch == layout.batch:
        return
    m = layout.partitions
    metas = layout.metas.get(store.name)
    if not metas:
        # the old layout had no state of it when the layout was built: build it now
        _build(spark, store, old_ckpt, layout, op, batch, n_old, reads)
        return
    olds = reads.of(store, op, batch)
    keys = placement.task_keys(m)
    rows = [(keys[t], meta) for t, meta in sorted(metas.items())]
    got = (
        spark.createDataFrame(rows, "ks_task int, meta binary")
        .repartition(m, F.col("ks_task"))
        .mapInPandas(
            shipped(
                regroup.catch_up_tasks(
                    store.stage.spec,
                    state_root(old_ckpt),
                    state_root(layout.checkpoint),
                    m,
                    n_old,
                    olds,
                )
            ),
            flat_schema(regroup.BUILT_SCHEMA),
        )
        .collect()
    )
    layout.metas[store.name] = {int(r["ks_task"]): bytes(r["meta"]) for r in got}


def _hold(spark: Any, checkpoint: str, stores: list[Store], on: bool) -> None:
    """Renew (or end) the hold on collecting the old layout's files while it runs, so that
    none a committed version named since the last round goes before a round reads it."""
    from kspark_server import regroup
    from kspark_server.taskfiles import state_root

    for store in stores:
        fn = regroup.hold_files(state_root(checkpoint), store.name, on)
        spark.range(1).mapInPandas(shipped(fn), "id long").collect()


def _seeds(metas: dict[int, bytes]) -> dict[str, list[Any]]:
    """The seeds of the new tasks that hold state (one that holds none starts afresh, as
    after an offline rescale)."""
    from kspark_server import regroup

    out: dict[str, list[Any]] = {}
    for t, blob in sorted(metas.items()):
        meta = regroup.unpack_meta(blob)
        if any(meta["cnt"].values()) or any(s.get("buffer") for s in meta["sc"].values()):
            out[str(t)] = meta["seed"]
    return out


def _reads(app: StreamsApp, gen: Generation, final: int) -> tuple[Progress, Generation]:
    """What the switch reads of the stopped old layout's checkpoint (its progress as of
    its ``final`` committed batch) and of the app's generations (the current one)."""
    spark = app.session
    return (
        query_progress(spark, gen.checkpoint, committed=final),
        current_generation(spark, app.config.checkpoint_dir),
    )


def _switch(
    app: StreamsApp,
    gen: Generation,
    stores: list[Store],
    layout: Layout,
    progress: Progress,
    current: Generation,
) -> Generation:
    """Step 3: record the generation that starts from ``layout``, with the stopped old
    layout's ``progress`` and the app's ``current`` generation (:func:`_reads`)."""
    from kspark_server.taskstate import STATE_FORMAT

    spark = app.session
    if progress.last_committed != layout.batch:
        raise RescaleError(
            f"app {app.config.application_id}: the new layout is at batch {layout.batch}, "
            f"the checkpoint at {progress.last_committed}; nothing was switched"
        )
    output = app.compiled()
    first = gen.batch_offset + layout.batch + 1
    # an internal topic's batch folder from the old layout's batch that did not commit:
    # the new layout's first batch would list it before running that batch again
    internal.drop_batches_from(spark, app._internal, first)
    new = Generation(
        number=gen.number + 1,
        checkpoint=layout.checkpoint,
        num_partitions=layout.partitions,
        batch_offset=first,
        skip_files=tuple(sorted(set(gen.skip_files) | set(progress.files))),
        kafka_offsets=rescaling._kafka_offsets(output, progress.offsets),
        previous=gen.number,
        state_format=STATE_FORMAT,
        seeds={s.name: _seeds(layout.metas.get(s.name, {})) for s in stores},
    )
    rescaling.switch_generation(
        spark, app.config.checkpoint_dir, app.config.application_id, gen, new, current
    )
    return new


def _rescale(
    app: StreamsApp, partitions: int, phase: Phase, running: bool
) -> rescaling.RescaleReport:
    t0 = time.perf_counter()
    spark = app.session
    cfg = app.config
    app_id = cfg.application_id
    gen = current_generation(spark, cfg.checkpoint_dir)
    n_old = gen.num_partitions or cfg.num_partitions
    if partitions == n_old:
        raise RescaleError(f"app {app_id} already has {partitions} partitions; nothing to do")
    output = app.compiled()
    rescaling._refuse_unsupported_sources(output)
    rescaling._refuse_spark_sink_topics(spark, output, app_id)
    batch = last_committed(spark, gen.checkpoint)
    if batch is None:
        raise RescaleError(
            f"app {app_id} has no committed micro-batch in {gen.checkpoint}; there is no "
            "state to rescale: change num_partitions directly"
        )
    stores = _stores(app, gen)
    for s in stores:  # every name checked before anything is written
        rescaling.check_store_name(s.name, s.stage.spec.processor)
    shipping.ship(app.topology)
    new_ckpt = f"{cfg.checkpoint_dir.rstrip('/')}/query-g{gen.number + 1}-{uuid.uuid4().hex[:6]}"
    ops = _Operators(spark, gen.checkpoint, output)
    if running:
        _hold(spark, gen.checkpoint, stores, True)
    try:
        return _run(app, gen, stores, ops, new_ckpt, batch, n_old, partitions, phase, running, t0)
    finally:
        if running:
            _hold(spark, gen.checkpoint, stores, False)


class _Operators:
    """Spark's number of the operator that keeps each store (found once it holds state)."""

    def __init__(self, spark: Any, checkpoint: str, output: st.Output) -> None:
        self.spark, self.checkpoint, self.output = spark, checkpoint, output
        self.found: dict[str, int] = {}

    def of(self, store: Store) -> int | None:
        if store.name not in self.found:
            op = _operator(self.spark, self.checkpoint, self.output, store.stage)
            if op is None:
                return None
            self.found[store.name] = op
        return self.found[store.name]


def _run(
    app: StreamsApp,
    gen: Generation,
    stores: list[Store],
    ops: _Operators,
    new_ckpt: str,
    batch: int,
    n_old: int,
    partitions: int,
    phase: Phase,
    running: bool,
    t0: float,
) -> rescaling.RescaleReport:
    spark, app_id = app.session, app.config.application_id
    if running:  # held from now on: what the versions of this batch name stays
        batch = last_committed(spark, gen.checkpoint) or batch
    phase("building the new layout")
    layout = Layout(checkpoint=new_ckpt, partitions=partitions, batch=batch)
    olds = _OldStates(spark, gen.checkpoint)
    for s in stores:
        _build(spark, s, gen.checkpoint, layout, ops.of(s), batch, n_old, olds)

    def catch_up(newest: int) -> None:
        for s in stores:
            _catch_up(spark, s, gen.checkpoint, ops.of(s), layout, newest, n_old, olds)
        if stores and newest != layout.batch:
            layout.rounds += 1
        layout.batch = newest

    paused_at: float | None = None
    if running:
        for _ in range(MAX_ROUNDS):
            _hold(spark, gen.checkpoint, stores, True)
            newest = last_committed(spark, gen.checkpoint)
            assert newest is not None
            if newest == layout.batch:
                break
            phase(f"catching up to batch {newest}")
            r0 = time.perf_counter()
            catch_up(newest)
            if time.perf_counter() - r0 < CLOSE_ENOUGH:
                break
        phase("switching")
        paused_at = time.perf_counter()
        app.stop()
    try:
        final = last_committed(spark, gen.checkpoint)
        assert final is not None
        # the switch's reads go on while the last batches are caught up: the output
        # waits for the longer of the two, not for both
        with ThreadPoolExecutor(1, thread_name_prefix="kspark-rescale") as pool:
            reads = pool.submit(_reads, app, gen, final)
            catch_up(final)
            progress, current = reads.result()
        new = _switch(app, gen, stores, layout, progress, current)
    except BaseException:
        if running:
            app.start()  # the old layout, as it was
        raise
    _adopt(app, partitions)
    app._generation = new  # as recorded: the start need not read it back
    if running:
        app.start()
    seconds = time.perf_counter() - t0
    report_stores = tuple(
        rescaling.StoreRescale(
            store=s.name,
            processor=s.stage.spec.processor,
            entries_before=layout.entries.get(s.name, 0),
            entries_after=layout.entries.get(s.name, 0),
            tasks_before=n_old,
            tasks_after=len(new.seeds.get(s.name, {})),
        )
        for s in stores
    )
    return rescaling.RescaleReport.of(
        new,
        application_id=app_id,
        from_partitions=n_old,
        stores=report_stores,
        seconds=seconds,
        warm=running,
        rounds=layout.rounds,
        switch_seconds=None if paused_at is None else time.perf_counter() - paused_at,
    )


def _operator(spark: Any, checkpoint: str, output: Any, stage: st.Stateful) -> int | None:
    from kspark.runtime.stores.files import operator_of

    return operator_of(spark, checkpoint, output, stage.spec.store)
