"""State-preserving rescale: move a stopped app's state from N to M partitions.

Open-source Spark cannot change the number of state partitions of a query checkpoint.
kspark's tasks are its own (``pmod(hash(key), num_partitions)``), and each state entry
keeps its key's hash, so a rescale is a re-split of the state plus a new query checkpoint
that starts from it, as Kafka Streams warms a task on a new instance before it moves
(learner tasks, KIP-441):

1. **warm**: read every store of the current checkpoint with Spark's state reader, re-split
   each task's state by ``pmod(hash, M)`` and write the new tasks' states as Parquet;
2. **verify**: the entries per store after the re-split equal the entries before;
3. **switch**: record a new checkpoint generation that starts from that state
   (``transformWithState``'s ``initialState``), reads each input from where the old
   checkpoint's last committed batch ended, and goes on numbering output batches.

Nothing is switched unless all three steps pass. The old checkpoint stays as it was.
"""

from __future__ import annotations

import re
import time
import uuid
from collections.abc import Callable
from typing import Any

import attrs

from kspark.compiler import stages as st
from kspark.compiler.bundle import shipped
from kspark.compiler.compiler import compile_topology
from kspark.compiler.lowering import flat_schema
from kspark.config import MAX_PARTITIONS, StreamsConfig
from kspark.errors import RescaleError
from kspark.plan.processing import Process
from kspark.plan.topology import Topology
from kspark.runtime import lease
from kspark.runtime.checkpoints import (
    Generation,
    _exists,
    current_generation,
    query_progress,
    write_generation,
)

__all__ = ["RescaleReport", "StoreRescale", "check_store_name", "rescale"]


@attrs.frozen(kw_only=True)
class StoreRescale:
    """One store's part of a rescale."""

    store: str
    processor: str
    entries_before: int
    entries_after: int
    tasks_before: int
    tasks_after: int


@attrs.frozen(kw_only=True)
class RescaleReport:
    """What :func:`rescale` did."""

    application_id: str
    from_partitions: int
    to_partitions: int
    generation: int
    checkpoint: str
    resumes_after_batch: int
    stores: tuple[StoreRescale, ...]
    files_already_read: int
    kafka_topics: tuple[str, ...]
    seconds: float
    #: whether the app ran through it (a warm rescale, :mod:`kspark.runtime.regroup`)
    warm: bool = False
    #: catch-up rounds of a warm rescale while the app ran on its old layout
    rounds: int = 0
    #: seconds from the app's stop to its start on the new layout (a warm rescale)
    switch_seconds: float | None = None

    @classmethod
    def of(
        cls,
        new: Generation,
        *,
        application_id: str,
        from_partitions: int,
        stores: tuple[StoreRescale, ...],
        seconds: float,
        **warm: Any,
    ) -> RescaleReport:
        """The report of a rescale of ``application_id`` from ``from_partitions`` that
        switched to generation ``new`` (``warm``: a warm rescale's fields)."""
        return cls(
            application_id=application_id,
            from_partitions=from_partitions,
            to_partitions=new.num_partitions or 0,
            generation=new.number,
            checkpoint=new.checkpoint,
            resumes_after_batch=new.batch_offset - 1,
            stores=stores,
            files_already_read=len(new.skip_files),
            kafka_topics=tuple(sorted(new.kafka_offsets)),
            seconds=seconds,
            **warm,
        )

    def summary(self) -> str:
        lines = [
            f"rescaled {self.application_id} from {self.from_partitions} to {self.to_partitions} "
            f"partitions in {self.seconds:.1f}s: generation {self.generation} "
            f"({self.checkpoint}) resumes after batch {self.resumes_after_batch}"
        ]
        if self.switch_seconds is not None:
            lines.append(
                f"  warm: the app ran on its old layout through {self.rounds} catch-up "
                f"round(s); stopped for {self.switch_seconds:.1f}s to switch"
            )
        for s in self.stores:
            lines.append(
                f"  store {s.store} ({s.processor}): {s.entries_before:,} entries in "
                f"{s.tasks_before} task(s) -> {s.entries_after:,} in {s.tasks_after} task(s)"
            )
        return "\n".join(lines)


def _stateful_stages(output: st.Output) -> list[st.Stateful]:
    return [s for s in output.stages() if isinstance(s, st.Stateful)]


def _refuse_unsupported_sources(output: st.Output) -> None:
    for s in output.stages():
        if isinstance(s, st.Read) and s.topic.format == "table":
            raise RescaleError(
                f"{s.processor} reads the Spark table {s.topic.path or s.topic.name}, whose "
                "offsets kspark cannot carry to a new checkpoint; only file and Kafka "
                "sources can be rescaled"
            )


_STORE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,248}")


def check_store_name(name: str, processor: str) -> str:
    """``name`` if it can name a folder of the rescale's warm copy, else
    :class:`RescaleError`: a name such as ``../query`` would point outside it, at the live
    checkpoint, which the warm copy's writes overwrite.

    >>> check_store_name("rates-v2", "J")
    'rates-v2'
    >>> check_store_name("../query", "J")
    Traceback (most recent call last):
    ...
    kspark.errors.RescaleError: [KSPARK_RESCALE_FAILED] store '../query' of J ...
    """
    if not _STORE_NAME.fullmatch(name) or ".." in name:
        raise RescaleError(
            f"store {name!r} of {processor} cannot be rescaled: a store name that names a "
            "folder must be 1-249 letters, digits, '.', '_' or '-', start with a letter or "
            "digit, and hold no '..'; rename the store (Materialized.as_ / "
            "Deduplicated.with_store_name)"
        )
    return name


def rescale(
    spark: Any,
    topology: Topology,
    config: StreamsConfig,
    partitions: int,
    *,
    on_phase: Callable[[str], None] | None = None,
    own_runs: frozenset[str] = frozenset(),
) -> RescaleReport:
    """Move the checkpointed state of the app (``topology`` run with ``config``, on the
    session ``spark``) to ``partitions`` partitions (see the module doc);
    :meth:`kspark.StreamsApp.rescale` calls it.

    The app must be stopped. Afterwards, run it with
    ``StreamsConfig(num_partitions=partitions)``; its output is the same as if it had
    never been rescaled (each task's stream time is the largest of the old tasks it takes
    keys from).

    Raises
    ------
    RescaleError
        If the app is running, has no committed state, reads a source whose position
        cannot be carried over, or the re-split state does not match the old one.
    """
    if config.stateful_runner == "apply_in_pandas":
        # its state is in kspark's own files, which the rescale does not re-split yet
        raise RescaleError(
            "rescale: this function moves the state of stateful_runner="
            "'transform_with_state' apps; an app on stateful_runner='apply_in_pandas' is "
            "rescaled with app.rescale(N)"
        )
    if type(partitions) is not int or partitions < 1:
        raise RescaleError(f"partitions must be a positive integer, got {partitions!r}")
    if partitions > MAX_PARTITIONS:
        raise RescaleError(f"partitions must be at most {MAX_PARTITIONS}, got {partitions}")
    readers = sorted(
        node.name for node in topology.nodes() if isinstance(node, Process) and node.global_stores
    )
    if readers:
        # every task holds the whole global store; a re-split by key would leave each
        # key's entry in one task only
        raise RescaleError(
            f"processors {readers} read a global store, which every task keeps whole: an "
            "app with global stores cannot be rescaled; start it with a new application_id "
            "and checkpoint_dir at the new num_partitions instead"
        )
    cfg = config
    app_id = cfg.application_id
    for q in spark.streams.active:
        if q.name == app_id:
            raise RescaleError(f"app {app_id} is running; stop it before rescaling")
    # a run of another session (kspark submit, another notebook) shows in its lease
    lease.check_not_running(spark, cfg.checkpoint_dir, app_id, own_runs)
    with lease.RescaleLock(spark, cfg.checkpoint_dir, app_id):
        return _rescale(spark, topology, cfg, partitions, on_phase)


def _refuse_spark_sink_topics(spark: Any, output: st.Output, app_id: str) -> None:
    """A topic written by Spark's file sink cannot go on across a rescale: the rescaled
    query's batches count from 0 again, and Spark's log would skip them as written
    (:mod:`kspark.runtime.filesink`)."""
    from kspark.runtime.filesink import SPARK_LOG, file_topics

    for topic in file_topics(output):
        assert topic.path is not None
        if _exists(spark, f"{topic.path.rstrip('/')}/{SPARK_LOG}"):
            raise RescaleError(
                f"app {app_id} writes topic {topic.name} ({topic.path}) through Spark's "
                f"file sink (file_sink='spark'), whose {SPARK_LOG} log cannot go on across "
                "a rescale. An app without state needs no rescale: change num_partitions "
                "directly. Otherwise run it with file_sink='batch_folders' into a new "
                "topic folder first"
            )


def _rescale(
    spark: Any,
    topology: Topology,
    cfg: StreamsConfig,
    partitions: int,
    on_phase: Callable[[str], None] | None,
) -> RescaleReport:
    phase = on_phase or (lambda _text: None)
    t0 = time.perf_counter()
    app_id = cfg.application_id
    gen = current_generation(spark, cfg.checkpoint_dir)
    old_partitions = gen.num_partitions or cfg.num_partitions
    from kspark_server.taskstate import STATE_FORMAT

    # the same number of partitions is a migration of another state format
    if partitions == old_partitions and gen.state_format == STATE_FORMAT:
        raise RescaleError(f"app {app_id} already has {partitions} partitions; nothing to do")
    # compiled for the generation's partitions: the state is laid out by them
    output = compile_topology(topology, cfg.with_(num_partitions=old_partitions))
    _refuse_unsupported_sources(output)
    _refuse_spark_sink_topics(spark, output, app_id)
    phase("reading the checkpoint")
    progress = query_progress(spark, gen.checkpoint)
    if progress.last_committed is None:
        raise RescaleError(
            f"app {app_id} has no committed micro-batch in {gen.checkpoint}; there is no "
            "state to rescale: change num_partitions directly"
        )
    new_number = gen.number + 1
    base = cfg.checkpoint_dir.rstrip("/")
    warm_dir = f"{base}/rescale-g{new_number}-{uuid.uuid4().hex[:6]}"

    from pyspark.sql import functions as F

    from kspark.runtime import shipping
    from kspark.runtime.stores.statestore import _operator_id, task_frame
    from kspark_server import rescale as server_rescale
    from kspark_server.placement import task_keys

    shipping.ship(topology)
    stores: list[StoreRescale] = []
    initial: dict[str, str] = {}
    for stage in _stateful_stages(output):  # every name checked before anything is written
        check_store_name(stage.spec.store, stage.spec.processor)
    for stage in _stateful_stages(output):
        spec = stage.spec
        name, kind, versioned = spec.store, spec.kind, spec.versioned
        phase(f"warming store {name}")
        op = _operator_id(spark, gen.checkpoint, name)
        old = task_frame(spark, gen.checkpoint, op, name)
        parts = old.mapInPandas(
            shipped(
                server_rescale.split_states(kind, versioned, partitions, cfg.state_base_chunk_bytes)
            ),
            flat_schema(server_rescale.PARTS_SCHEMA),
        ).persist()
        try:
            counts = parts.agg(
                F.sum("old_entries").alias("entries"),
                F.sum(F.when(F.col("ks_task") == -1, 1).otherwise(0)).alias("tasks"),
                F.sum("old_checksum").alias("checksum"),
            ).collect()[0]
            before, tasks_before = int(counts["entries"] or 0), int(counts["tasks"] or 0)
            old_sum = int(counts["checksum"] or 0)
            # per new task: the checksums of the parts it is made of
            keys = task_keys(partitions)
            expected = {
                keys[int(r["ks_task"])]: (int(r["entries"] or 0), int(r["checksum"] or 0))
                for r in parts.filter("ks_task >= 0")
                .groupBy("ks_task")
                .agg(F.sum("entries").alias("entries"), F.sum("checksum").alias("checksum"))
                .collect()
            }
            merged = (
                parts.filter("ks_task >= 0")
                .select("ks_task", "part")
                .groupBy("ks_task")
                .applyInPandas(
                    shipped(
                        server_rescale.merge_states(
                            kind, versioned, partitions, cfg.state_base_chunk_bytes
                        )
                    ),
                    flat_schema(server_rescale.STATES_SCHEMA),
                )
            )
            path = f"{warm_dir}/{name}"
            merged.write.mode("overwrite").parquet(path)
        except Exception as exc:
            if "UnhashedState" in str(exc) or "no key hash" in str(exc):
                raise RescaleError(
                    f"store {name} ({spec.processor}) holds an entry without its key's hash, "
                    "so it cannot be re-split; nothing was switched"
                ) from exc
            raise
        finally:
            parts.unpersist()
        phase(f"verifying store {name}")
        written = spark.read.parquet(path)
        check = written.agg(
            F.sum("entries").alias("entries"),
            F.countDistinct("ks_task").alias("tasks"),
            F.sum(
                F.when(~F.col("ks_task").isin(list(task_keys(partitions))), 1).otherwise(0)
            ).alias("bad"),
        ).collect()[0]
        after, tasks_after = int(check["entries"] or 0), int(check["tasks"] or 0)
        bad_tasks = int(check["bad"] or 0)
        if after != before or bad_tasks:
            raise RescaleError(
                f"store {name} ({spec.processor}): the re-split state has {after:,} entries "
                f"in {tasks_after} task(s), the old one {before:,}; nothing was switched "
                f"(the warm copy is in {path})"
            )
        # content, task by task: each written state read back must hold exactly the
        # entries its parts held, and the parts all the old tasks' entries
        # (a task's base is in chunks, one row each: its counts are their sums)
        got = {
            int(r["ks_task"]): (int(r["entries"]), int(r["checksum"]))
            for r in written.select("ks_task", "blob")
            .mapInPandas(
                shipped(server_rescale.check_states(kind, versioned)),
                flat_schema(server_rescale.CHECK_SCHEMA),
            )
            .groupBy("ks_task")
            .agg(F.sum("entries").alias("entries"), F.sum("checksum").alias("checksum"))
            .collect()
        }
        new_sum = sum(c for _, c in expected.values())
        wrong = sorted(t for t in set(got) | set(expected) if got.get(t) != expected.get(t))
        if wrong or new_sum != old_sum:
            raise RescaleError(
                f"store {name} ({spec.processor}): the rewritten state does not match the old "
                f"one (checksums differ in task key(s) {wrong[:5]}, or in total: "
                f"{new_sum} vs {old_sum}); nothing was switched (the warm copy is in {path})"
            )
        stores.append(
            StoreRescale(
                store=name,
                processor=spec.processor,
                entries_before=before,
                entries_after=after,
                tasks_before=tasks_before,
                tasks_after=tasks_after,
            )
        )
        initial[name] = path
    kafka_offsets = _kafka_offsets(output, progress.offsets)
    new = Generation(
        number=new_number,
        checkpoint=f"{base}/query-g{new_number}",
        num_partitions=partitions,
        batch_offset=gen.batch_offset + progress.last_committed + 1,
        initial_state=initial,
        skip_files=tuple(sorted(set(gen.skip_files) | set(progress.files))),
        kafka_offsets=kafka_offsets,
        previous=gen.number,
        state_format=STATE_FORMAT,
    )
    phase("switching")
    switch_generation(spark, cfg.checkpoint_dir, app_id, gen, new)
    return RescaleReport.of(
        new,
        application_id=app_id,
        from_partitions=old_partitions,
        stores=tuple(stores),
        seconds=time.perf_counter() - t0,
    )


def switch_generation(
    spark: Any,
    checkpoint_dir: str,
    app_id: str,
    gen: Generation,
    new: Generation,
    current: Generation | None = None,
) -> None:
    """Record generation ``new``, which replaces ``gen``, unless another rescale switched
    ``gen`` meanwhile (:class:`RescaleError`). ``current`` is the checkpoint's current
    generation when the caller has read it already."""
    if current is None:
        current = current_generation(spark, checkpoint_dir)
    if current.number != gen.number:
        raise RescaleError(
            f"app {app_id}'s checkpoint changed generation while it was rescaled (another "
            "rescale switched it); nothing was switched by this one"
        )
    write_generation(spark, checkpoint_dir, new)


def _kafka_offsets(output: st.Output, offsets: tuple[str | None, ...]) -> dict[str, dict[str, int]]:
    """Each Kafka topic's offsets at the end of the last committed batch.

    Kafka sources log their offsets as ``{"topic": {"partition": offset}}``; the log does
    not name its sources otherwise, so they are matched by topic.
    """
    import json

    topics = {
        s.topic.name
        for s in output.stages()
        if isinstance(s, st.Read) and s.topic.format == "kafka"
    }
    found: dict[str, dict[str, int]] = {}
    for text in offsets:
        if text is None:
            continue
        try:
            doc = json.loads(text)
        except ValueError:
            continue
        if not isinstance(doc, dict):
            continue
        for topic, parts in doc.items():
            if topic in topics and isinstance(parts, dict):
                found[topic] = {str(p): int(o) for p, o in parts.items()}
    missing = sorted(topics - set(found))
    if missing:
        raise RescaleError(
            f"cannot find the committed offsets of Kafka topic(s) {missing} in the checkpoint"
        )
    return found
