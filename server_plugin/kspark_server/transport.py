"""How a stateful operator's records cross into ``transformWithStateInPandas``: packed.

Spark 4.3's ``transformWithStateInPandas`` turns every input row into a Python tuple and
rebuilds pandas frames from them (its runner groups rows by key one row at a time), which
costs about as much as the operator's own work (``docs/design/stateful-runner.md``). So the records
are packed first, in a vectorised ``mapInArrow`` step: each Arrow batch is split by task
key, and each task's part becomes **one** row, ``(ks_task, ks_rows)``, whose binary
``ks_rows`` is an Arrow IPC stream of the records. The state operator then sees a handful
of rows per task and batch, and :func:`unpack_table` reads them back into one Arrow
table.

Under ``transform_with_state``, rows leave the operator packed the same way: each
task's output is one row, ``ks_rows`` (:data:`OUTPUT_SCHEMA_DDL`), an Arrow IPC stream
of the output records, and a vectorised ``mapInArrow`` step after the operator
(:func:`unpack_rows`) turns it back into rows (``apply_in_pandas`` yields them in the
envelope's schema instead: :mod:`kspark_server.operators.grouped`). The operator works on
Arrow tables throughout (:func:`unpack_table`, :func:`pack_table`): columns it does not
read, such as a deduplicated record's value, are carried by reference and never become
Python objects.

Example
-------
>>> import pyarrow as pa
>>> rb = pa.record_batch({"ks_task": pa.array([2, 1, 2], pa.int32()), "v": ["a", "b", "c"]})
>>> packed = list(pack_by_task(iter([rb])))[0]
>>> packed.column("ks_task").to_pylist()
[1, 2]
>>> unpack_table(packed.column("ks_rows").to_pylist()).column("v").to_pylist()
['b', 'a', 'c']
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa

__all__ = [
    "OUTPUT_SCHEMA_DDL",
    "PACKED_SCHEMA_DDL",
    "pack_by_task",
    "pack_table",
    "unpack_rows",
    "unpack_table",
]

#: The schema of the packed rows, as Spark DDL.
PACKED_SCHEMA_DDL = "ks_task int, ks_rows binary"

#: The schema of an operator's packed output rows, as Spark DDL.
OUTPUT_SCHEMA_DDL = "ks_rows binary"


def _ipc(batch: pa.RecordBatch | pa.Table) -> bytes:
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, batch.schema) as writer:
        if isinstance(batch, pa.Table):
            writer.write_table(batch)
        else:
            writer.write_batch(batch)
    return bytes(sink.getvalue())


def pack_table(table: pa.Table) -> bytes:
    """``table`` as an Arrow IPC stream: an operator's output for :func:`unpack_rows`."""
    return _ipc(table)


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


def unpack_table(blobs: Iterable[Any]) -> pa.Table | None:
    """The records of packed rows (:func:`pack_by_task`), as one Arrow table; None if
    there are none."""
    tables = [pa.ipc.open_stream(pa.py_buffer(b)).read_all() for b in blobs if b is not None]
    if not tables:
        return None
    return tables[0] if len(tables) == 1 else pa.concat_tables(tables)


def unpack_rows(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
    """The ``mapInArrow`` step after an operator: each packed output row
    (:data:`OUTPUT_SCHEMA_DDL`) back into the records it holds.

    Example
    -------
    >>> t = pa.table({"v": [1, 2]})
    >>> rb = pa.record_batch({"ks_rows": pa.array([pack_table(t)], pa.binary())})
    >>> [b.num_rows for b in unpack_rows(iter([rb]))]
    [2]
    """
    for rb in batches:
        for blob in rb.column("ks_rows").to_pylist():
            if blob is None:
                continue
            for out in pa.ipc.open_stream(pa.py_buffer(blob)):
                if out.num_rows:
                    yield out


def operator_schema(output_schema_json: str, packed_out: bool) -> Any:
    """The Spark schema of an operator's output records as they leave it: the value as
    JSON text where it is JSON-packed (``packed_out``). The compiler declares it to
    ``mapInArrow``; the operator builds its Arrow tables in it."""
    import json

    from pyspark.sql.types import StringType, StructField, StructType

    schema = StructType.fromJson(json.loads(output_schema_json))
    return StructType(
        [
            StructField(f.name, StringType(), True) if f.name == "value" and packed_out else f
            for f in schema.fields
        ]
    )


def arrow_schema(schema: Any) -> pa.Schema:
    """The Arrow schema of a Spark schema (a ``StructType`` or its JSON text), timestamps
    as UTC instants.

    pyspark's own Arrow UDFs type their results the same way (``timezone="UTC"``); it
    also makes a naive datetime a UTC one (docs/concepts.md, "Time zones"), and without
    a zone ``to_arrow_schema`` refuses a ``timestamp`` field.

    Examples
    --------
    >>> arrow_schema('{"type": "struct", "fields": [{"name": "at", "type": "timestamp",'
    ...              ' "nullable": true, "metadata": {}}]}').field("at").type
    TimestampType(timestamp[us, tz=UTC])
    """
    import json

    from pyspark.sql.pandas.types import to_arrow_schema
    from pyspark.sql.types import StructType

    if isinstance(schema, str):
        schema = StructType.fromJson(json.loads(schema))
    return to_arrow_schema(schema, timezone="UTC")


def operator_arrow_schema(output_schema_json: str, packed_out: bool) -> pa.Schema | None:
    """:func:`operator_schema` in Arrow (:func:`arrow_schema`); None where the schema
    names columns without their types (unit tests build operators so): the operator's
    tables then infer them."""
    try:
        return arrow_schema(operator_schema(output_schema_json, packed_out))
    except (KeyError, TypeError, ValueError):
        return None
