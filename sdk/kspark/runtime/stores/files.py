"""Reading the stateful operators' state: kspark's files in the checkpoint
(docs/design/grouped-runner.md), at the version its group state commits.

Spark's state reader gives each task's group state as of the last committed micro-batch
(the version that names the task's files, :mod:`kspark_server.taskfiles`); a job on the
server opens only the files it names (:mod:`kspark_server.taskreads`), so no file of a
failed attempt or of a batch after it is read. Its rows (:func:`task_frame`) are what
interactive queries read (:mod:`kspark_server.queries`).

The app goes on while a reader reads: a version read as of one micro-batch names files
that the task's next batch after a new base collects. A reader that finds them gone
(:class:`kspark_server.taskfiles.StaleVersion`) reads again at the newest committed
version, and its last attempt holds off collection while it reads
(:func:`read_committed`), so a lagging reader neither fails nor mixes versions.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from kspark.compiler import stages as st
from kspark.compiler.bundle import shipped
from kspark.compiler.lowering import flat_schema
from kspark.errors import StoreError


def state_metadata(spark: Any, checkpoint: str) -> list[Any]:
    """The rows of the checkpoint's state metadata (one per stateful operator), or a
    :class:`StoreError` that says why there are none."""
    try:
        return list(spark.read.format("state-metadata").load(checkpoint).collect())
    except Exception as exc:
        raise StoreError(
            f"cannot read the state metadata of checkpoint {checkpoint}: {exc}. Has the app "
            "completed a micro-batch?"
        ) from exc


#: Spark's name of the runner's stateful operators in the state metadata.
OPERATOR_NAME = "applyInPandasWithState"

#: Reads of a store's files before :func:`read_committed` gives up; the last holds off
#: collection while it reads.
READ_ATTEMPTS = 3

T = TypeVar("T")


def read_committed(store: str, read: Callable[[], T], hold: Callable[[bool], None]) -> T:
    """``read()``: a read of store ``store``'s files at the newest committed version,
    once more when the app collected the files of the version it read, and for its last
    attempt under a hold on collection (``hold(True)``, ended by ``hold(False)`` as soon
    as it returns), which no lag can outrun.

    ``read`` reads the committed version afresh each time and gives all of its answer
    or raises: no answer mixes two versions.

    Examples
    --------
    >>> from kspark_server.taskfiles import StaleVersion
    >>> calls = []
    >>> def read():
    ...     calls.append("read")
    ...     if len(calls) < 4:
    ...         raise StaleVersion("[KSPARK_STATE_VERSION_COLLECTED] gone")
    ...     return "answer"
    >>> read_committed("counts", read, lambda on: calls.append(f"hold {on}"))
    'answer'
    >>> calls
    ['read', 'read', 'hold True', 'read', 'hold False']
    """
    from kspark_server.taskfiles import is_stale

    for _ in range(READ_ATTEMPTS - 1):
        try:
            return read()
        except Exception as exc:
            if not is_stale(exc):
                raise
    hold(True)
    try:
        return read()
    except Exception as exc:
        if not is_stale(exc):
            raise
        raise StoreError(
            f"store {store}: files that its committed version names are gone although "
            "collection was held while they were read: something other than the app "
            "removes files under the checkpoint's kspark-state folder (a clean-up job, a "
            "second app with the same checkpoint). Stop it, then query again"
        ) from exc
    finally:
        hold(False)


def holder(spark: Any, checkpoint: str, store: str) -> Callable[[bool], None]:
    """A hold of one reader's own on collecting store ``store``'s files
    (:func:`kspark_server.taskfiles.hold`), set and ended by a job on an executor, which
    sees the checkpoint as the runner's tasks do."""
    from kspark_server import taskreads
    from kspark_server.taskfiles import state_root

    name = uuid.uuid4().hex[:12]

    def hold(on: bool) -> None:
        fn = taskreads.hold_files(state_root(checkpoint), store, on, name)
        spark.range(1).mapInPandas(shipped(fn), "id long").collect()

    return hold


def retried(spark: Any, checkpoint: str, store: str) -> Callable[[Callable[[], T]], T]:
    """:func:`read_committed` for the reads of store ``store`` of ``checkpoint``."""

    def run(read: Callable[[], T]) -> T:
        return read_committed(store, read, holder(spark, checkpoint, store))

    return run


#: A rescaled generation's seeds: store -> task number (as text) -> the group state
#: that names the new layout's files of the task (:class:`kspark.runtime.checkpoints.
#: Generation`).
Seeds = Mapping[str, Mapping[str, Sequence[Any]]]


def group_states(
    spark: Any,
    checkpoint: str,
    op: int | None,
    batch: int | None = None,
    keys: tuple[int, ...] | None = None,
    seeds: Mapping[int, Sequence[Any]] | None = None,
) -> Any:
    """Operator ``op``'s group states as committed by micro-batch ``batch`` (None: the
    last): ``ks_task`` and the version's fields; only the tasks of ``keys`` when given
    (:func:`store_keys`).

    ``seeds`` (task key -> group state, :func:`seed_keys`) stand for the tasks of a
    rescaled generation that have not committed a group state of their own: such a task
    runs on its seed until records reach it, and its state is the seed's."""
    from pyspark.sql import functions as F

    from kspark_server.taskfiles import GROUP_STATE_DDL

    states = None
    if op is not None:
        reader = spark.read.format("statestore").option("operatorId", op)
        if batch is not None:
            reader = reader.option("batchId", batch)
        raw = reader.load(checkpoint)
        if keys is not None:
            raw = raw.where(F.col("key.ks_task").isin(list(keys)))
        states = raw.select(F.col("key.ks_task").alias("ks_task"), "value.groupState.*")
    if not seeds:
        return states
    rows = [(int(k), *v) for k, v in sorted(seeds.items())]
    seeded = spark.createDataFrame(rows, "ks_task int, " + GROUP_STATE_DDL)
    if states is None:
        return seeded
    return states.unionByName(seeded.join(states.select("ks_task"), "ks_task", "left_anti"))


def seed_keys(output: st.Output, store: str, seeds: Seeds | None) -> dict[int, tuple[Any, ...]]:
    """Store ``store``'s seeds in ``seeds`` by task key (:func:`group_states`)."""
    from kspark_server.placement import task_keys

    mine = (seeds or {}).get(store)
    if not mine:
        return {}
    keys = store_keys(output, store)
    if keys is None:
        (stage,) = [
            s for s in output.stages() if isinstance(s, st.Stateful) and s.spec.store == store
        ]
        keys = task_keys(stage.num_partitions)
    return {keys[int(t)]: tuple(v) for t, v in mine.items() if int(t) < len(keys)}


def _operator(spark: Any, checkpoint: str, output: st.Output, store: str, seeded: bool) -> Any:
    """:func:`operator_of`; None where only seeds hold the store's state (a rescaled
    generation that has not committed a micro-batch)."""
    if seeded and not _operators(spark, checkpoint):
        return None
    return operator_of(spark, checkpoint, output, store)


def store_keys(output: st.Output, store: str) -> tuple[int, ...] | None:
    """The task keys whose group states name store ``store``'s files, when several
    operators share the query's one ``applyInPandasWithState``
    (docs/design/sub-topologies.md); None when the app has at most one such operator,
    whose group states are all the store's.

    The operators take their task keys by their place in
    :func:`kspark.compiler.lowering.build.grouped_stages`
    (:func:`kspark_server.placement.task_keys`), and each writes its files in its own
    store's folder, so a store is read from its operator's tasks alone.

    Examples
    --------
    >>> import tempfile
    >>> from kspark import Materialized, StreamsApp, StreamsBuilder, StreamsConfig
    >>> from kspark_server.placement import task_keys
    >>> b = StreamsBuilder()
    >>> s = b.stream("in", key_type=str, value_type=int)
    >>> s.group_by_key().count(materialized=Materialized.as_("a")).to_stream().to("a")
    >>> s.group_by_key().count(materialized=Materialized.as_("b")).to_stream().to("b")
    >>> config = StreamsConfig(application_id="two", data_dir=tempfile.mkdtemp(),
    ...     num_partitions=2)
    >>> output = StreamsApp(b.build(), config, session=object()).compiled()
    >>> {store_keys(output, "a"), store_keys(output, "b")} == {task_keys(2), task_keys(2, 1)}
    True
    """
    from kspark.compiler.lowering.build import grouped_stages
    from kspark_server.placement import task_keys

    grouped = grouped_stages(output)
    if len(grouped) < 2:
        return None
    for i, stage in enumerate(grouped):
        if stage.spec.store == store:
            return task_keys(stage.num_partitions, i)
    raise StoreError(
        f"store {store}: no stateful operator of the app keeps it; its operators keep "
        f"{sorted(s.spec.store for s in grouped)}"
    )


def _operators(spark: Any, checkpoint: str) -> list[int]:
    rows = state_metadata(spark, checkpoint)
    return sorted({int(r["operatorId"]) for r in rows if r["operatorName"] == OPERATOR_NAME})


def _stores(output: st.Output) -> list[str]:
    return sorted({s.spec.store for s in output.stages() if isinstance(s, st.Stateful)})


def operator_of(spark: Any, checkpoint: str, output: st.Output, store: str) -> int | None:
    """The stateful operator whose group states name store ``store``'s files (None: no
    task of any operator holds state of it yet).

    Spark numbers the operators by its plan, not kspark's: the operator is the one whose
    committed versions name files in ``store``'s folder (each file's name carries an id
    fresh for every attempt, so no two stores' folders share one)."""
    from functools import reduce

    from pyspark.sql import functions as F

    from kspark_server import taskreads
    from kspark_server.taskfiles import state_root

    ops = _operators(spark, checkpoint)
    names = _stores(output)
    if not ops:
        raise StoreError(
            f"checkpoint {checkpoint} holds no state of kspark's stateful operators. "
            "Has the app completed a micro-batch?"
        )
    if len(ops) == 1 and (len(names) == 1 or store_keys(output, store) is not None):
        # several operators in one applyInPandasWithState: the store's are its tasks'
        # keys (store_keys)
        return ops[0]
    frames = [group_states(spark, checkpoint, op).withColumn("op", F.lit(op)) for op in ops]
    owners = (
        reduce(lambda a, b: a.unionByName(b), frames)
        .mapInPandas(
            shipped(taskreads.owners(state_root(checkpoint), names)),
            flat_schema(taskreads.OWNERS_SCHEMA),
        )
        .distinct()
    )
    found = retried(spark, checkpoint, store)(owners.collect)
    lost = sorted({int(r["op"]) for r in found if r["store"] is None})
    if lost:
        raise StoreError(
            f"operators {lost} of checkpoint {checkpoint} name state files that no store's "
            f"folder under {state_root(checkpoint)} holds: the checkpoint's kspark-state "
            "folder was removed or copied in part"
        )
    mine = sorted({int(r["op"]) for r in found if r["store"] == store})
    if len(mine) > 1:
        raise StoreError(f"operators {mine} of checkpoint {checkpoint} all name store {store}")
    return mine[0] if mine else None


def task_frame(
    spark: Any, checkpoint: str, output: st.Output, store: str, seeds: Seeds | None = None
) -> Any:
    """A DataFrame of store ``store``'s committed base chunks, one row each: ``blob``,
    ``first`` (whether it is its task's chunk 0) and ``log`` (the task's changes), read on
    the server (:mod:`kspark_server.queries`)."""
    from pyspark.sql.types import ArrayType, BinaryType, BooleanType, StructField, StructType

    from kspark_server import taskreads
    from kspark_server.taskfiles import state_root

    seeded = seed_keys(output, store, seeds)
    op = _operator(spark, checkpoint, output, store, bool(seeded))
    # taskreads.CHUNKS_SCHEMA, built on the client (flat_schema has no array type)
    schema = StructType(
        [
            StructField("blob", BinaryType()),
            StructField("first", BooleanType()),
            StructField("log", ArrayType(BinaryType())),
        ]
    )
    if op is None and not seeded:
        return spark.createDataFrame([], schema)
    keys = store_keys(output, store)
    return group_states(spark, checkpoint, op, keys=keys, seeds=seeded).mapInPandas(
        shipped(taskreads.committed_chunks(state_root(checkpoint), store)), schema
    )


def changes(
    spark: Any,
    checkpoint: str,
    output: st.Output,
    store: str,
    held: dict[int, str],
    batch: int,
    seeds: Seeds | None = None,
) -> tuple[int, list[Any]]:
    """The rows that bring a reader holding ``held`` (per task,
    :func:`kspark_server.taskreads.held_version`) to store ``store``'s state as committed
    by micro-batch ``batch`` (:func:`kspark_server.taskreads.changes_since`): only the
    tasks whose version changed, and of those whose base did not, only the new changes.
    Returns the batch read: ``batch``, or a later one when the app collected the files of
    ``batch``'s versions before they were read (:func:`read_committed`)."""
    from kspark.runtime.checkpoints import last_committed
    from kspark_server import taskreads
    from kspark_server.taskfiles import state_root

    seeded = seed_keys(output, store, seeds)
    op = _operator(spark, checkpoint, output, store, bool(seeded))
    if op is None and not seeded:
        return batch, []
    keys = store_keys(output, store)
    # the first read is at ``batch``; a read again (the app collected its files) at the
    # newest committed batch
    pinned = iter([batch])

    def read() -> tuple[int, list[Any]]:
        at = next(pinned, None)
        if at is None:
            at = last_committed(spark, checkpoint)
        assert at is not None
        frame = group_states(spark, checkpoint, op, at, keys, seeded).mapInPandas(
            shipped(taskreads.changes_since(state_root(checkpoint), store, held)),
            flat_schema(taskreads.CHANGES_SCHEMA),
        )
        return at, list(frame.collect())

    return retried(spark, checkpoint, store)(read)
