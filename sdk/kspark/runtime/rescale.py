"""What every rescale shares: its report, the checks that refuse an app before anything is
read, and the switch to a new checkpoint generation. The rescale itself moves kspark's
state files (:mod:`kspark.runtime.regroup`, :meth:`kspark.StreamsApp.rescale`).

Open-source Spark cannot change the number of state partitions of a query checkpoint.
kspark's tasks are its own (``pmod(hash(key), num_partitions)``), and each state entry
keeps its key's hash, so a rescale is a re-split of the state plus a new query checkpoint
that starts from it, reads each input from where the old checkpoint's last committed
batch ended, and goes on numbering output batches. The old checkpoint stays as it was.
"""

from __future__ import annotations

import re
from typing import Any

import attrs

from kspark.compiler import stages as st
from kspark.errors import RescaleError
from kspark.plan.processing import Process
from kspark.plan.topology import Topology
from kspark.runtime.checkpoints import (
    Generation,
    _exists,
    current_generation,
    write_generation,
)

__all__ = ["RescaleReport", "StoreRescale", "check_store_name", "refuse_global_stores"]


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


def refuse_global_stores(topology: Topology) -> None:
    """Every task holds a global store whole: a re-split by key would leave each key's
    entry in one task only, so an app with one is refused."""
    readers = sorted(
        node.name for node in topology.nodes() if isinstance(node, Process) and node.global_stores
    )
    if readers:
        raise RescaleError(
            f"processors {readers} read a global store, which every task keeps whole: an "
            "app with global stores cannot be rescaled; start it with a new application_id "
            "and checkpoint_dir at the new num_partitions instead"
        )


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
