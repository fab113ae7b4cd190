"""Interactive queries: read an app's state stores from its checkpoint, from the client.

The stores are read as of the last committed micro-batch, with no running query needed,
from kspark's files that the committed group states name
(:mod:`~kspark.runtime.stores.files`): a job on the server answers, and the client gets
only the entries asked for. A versioned store answers ``get(key)``,
``get(key, as_of)`` (KIP-960) and ``versions(key, from_ts, to_ts)`` (KIP-968) with
exactly the rules the join uses: the same :class:`kspark_server.versioned.VersionedStore`
code wraps the state read back.

The views are by kind: tables' (:mod:`~kspark.runtime.stores.tables`), aggregations'
(:mod:`~kspark.runtime.stores.aggregates`), processors'
(:mod:`~kspark.runtime.stores.processors`); replicas in
:mod:`~kspark.runtime.stores.replica`.
"""

from __future__ import annotations

from typing import Any

from kspark.compiler import stages as st
from kspark.runtime.stores.aggregates import (
    MAX_FETCH_WINDOWS,
    ReadOnlyAggregateStore,
    ReadOnlySessionStore,
    ReadOnlySlidingWindowStore,
    ReadOnlyWindowStore,
    open_aggregate_store,
)
from kspark.runtime.stores.files import Seeds
from kspark.runtime.stores.processors import (
    ReadOnlyProcessorStore,
    ReadOnlyProcessorVersionedStore,
    ReadOnlyProcessorWindowStore,
    _processor_view,
)
from kspark.runtime.stores.replica import StoreReplica
from kspark.runtime.stores.sources import _CheckpointSource
from kspark.runtime.stores.tables import (
    ReadOnlyJoinedStore,
    ReadOnlyKeyValueStore,
    ReadOnlyVersionedStore,
    ValueAndTimestamp,
    VersionedRecord,
    _find_stage,
    _table_spec,
    _view,
)
from kspark_server.spec import ProcessorSpec


def committed_frame(
    spark: Any, checkpoint: str, output: st.Output, name: str, seeds: Seeds | None = None
) -> Any:
    """A DataFrame of the committed base chunks of the operator store ``name`` (one row
    each: ``blob``, ``first``, ``log``), read on the server from kspark's files; a rescaled
    generation's tasks that have committed nothing yet from their ``seeds``."""
    from kspark.runtime.stores import files

    return files.task_frame(spark, checkpoint, output, name, seeds)


def _checkpoint_source(
    spark: Any, checkpoint: str, output: st.Output, name: str, seeds: Seeds | None = None
) -> _CheckpointSource:
    """Operator store ``name``'s committed state, read by a job per question; each job
    reads again at a newer version if the app collected the files of the one it read
    (:func:`kspark.runtime.stores.files.read_committed`)."""
    from kspark.runtime.stores import files

    frame = committed_frame(spark, checkpoint, output, name, seeds)
    return _CheckpointSource(frame, files.retried(spark, checkpoint, name))


def open_store(
    spark: Any, checkpoint: str, output: st.Output, name: str, seeds: Seeds | None = None
) -> Any:
    """The read-only view of store ``name`` of a compiled app whose query checkpoint is
    ``checkpoint`` (``seeds``: its generation's, after a rescale)."""
    found = _find_stage(output, name).spec
    if isinstance(found, ProcessorSpec):
        (store,) = [d for d in found.stores if d.name == name]
        source = _checkpoint_source(spark, checkpoint, output, found.store, seeds)
        return _processor_view(name, source, store)
    spec = _table_spec(output, name, "answer interactive queries")
    return _view(name, _checkpoint_source(spark, checkpoint, output, name, seeds), spec)


__all__ = [
    "MAX_FETCH_WINDOWS",
    "ReadOnlyAggregateStore",
    "ReadOnlyJoinedStore",
    "ReadOnlyKeyValueStore",
    "ReadOnlyProcessorStore",
    "ReadOnlyProcessorVersionedStore",
    "ReadOnlyProcessorWindowStore",
    "ReadOnlySessionStore",
    "ReadOnlySlidingWindowStore",
    "ReadOnlyVersionedStore",
    "ReadOnlyWindowStore",
    "StoreReplica",
    "ValueAndTimestamp",
    "VersionedRecord",
    "committed_frame",
    "open_aggregate_store",
    "open_store",
]
