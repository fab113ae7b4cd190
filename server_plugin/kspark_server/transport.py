"""How a stateful operator's records cross into ``transformWithStateInPandas``: packed.

Spark 4.3's ``transformWithStateInPandas`` turns every input row into a Python tuple and
rebuilds pandas frames from them (its runner groups rows by key one row at a time), which
costs about as much as the operator's own work (``docs/performance.md``). So the records
are packed first, in a vectorised ``mapInArrow`` step: each Arrow batch is split by task
key, and each task's part becomes **one** row, ``(ks_task, ks_rows)``, whose binary
``ks_rows`` is an Arrow IPC stream of the records. The state operator then sees a handful
of rows per task and batch, and :func:`unpack` reads them back into one pandas frame with
Arrow's own conversion.

Rows leave the operator as before (one output row per record): Spark's conversion of
pandas frames to Arrow is columnar already.

Example
-------
>>> import pyarrow as pa
>>> rb = pa.record_batch({"ks_task": pa.array([2, 1, 2], pa.int32()), "v": ["a", "b", "c"]})
>>> packed = list(pack_by_task(iter([rb])))[0]
>>> packed.column("ks_task").to_pylist()
[1, 2]
>>> unpack(packed.column("ks_rows").to_pylist())["v"].tolist()
['b', 'a', 'c']
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

__all__ = ["PACKED_SCHEMA_DDL", "pack_by_task", "unpack"]

#: The schema of the packed rows, as Spark DDL.
PACKED_SCHEMA_DDL = "ks_task int, ks_rows binary"


def _ipc(batch: pa.RecordBatch) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        writer.write_batch(batch)
    return bytes(sink.getvalue())


def pack_by_task(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """Split each batch by ``ks_task``; one output row per task: the task and its records
    as an Arrow IPC stream (the records keep their order within the task)."""
    for rb in batches:
        n = rb.num_rows
        if n == 0:
            continue
        tasks = rb.column("ks_task").to_numpy(zero_copy_only=False)
        # a stable sort keeps each task's records in their input order
        idx = np.argsort(tasks, kind="stable")
        ordered = rb.take(pa.array(idx))
        sorted_tasks = tasks[idx]
        starts = np.concatenate(([0], np.flatnonzero(np.diff(sorted_tasks)) + 1))
        ends = np.concatenate((starts[1:], [n]))
        yield pa.RecordBatch.from_arrays(
            [
                pa.array(sorted_tasks[starts], pa.int32()),
                pa.array(
                    [
                        _ipc(ordered.slice(int(s), int(e - s)))
                        for s, e in zip(starts, ends, strict=True)
                    ],
                    pa.binary(),
                ),
            ],
            names=["ks_task", "ks_rows"],
        )


def unpack(blobs: Iterable[Any]) -> pd.DataFrame:
    """The records of packed rows (:func:`pack_by_task`), as one pandas frame."""
    tables = [pa.ipc.open_stream(pa.py_buffer(b)).read_all() for b in blobs if b is not None]
    if not tables:
        return pd.DataFrame()
    table = tables[0] if len(tables) == 1 else pa.concat_tables(tables)
    # nullable integers become floats with NaN, as Spark's own conversion makes them
    return table.to_pandas()
