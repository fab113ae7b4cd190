"""Arrow helpers of the per-task operators: a task's processing order, and output tables.

A task's micro-batch stays columnar: only the columns an operator reads become Python
objects, and output rows are taken from the input table by position (:func:`make_table`).

Within a task, records are taken in offset order per input partition, and across input
partitions by the smallest head timestamp, as Kafka Streams does (:func:`order`).
"""

from __future__ import annotations

import base64
import json
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

__all__ = [
    "as_table",
    "headers_from_text",
    "interleave",
    "ints",
    "make_table",
    "order",
    "records_table",
    "runs",
]


def ints(table: pa.Table, name: str, fill: int) -> np.ndarray[Any, Any]:
    """An integer column as int64 numpy, nulls as ``fill`` (zeros if there is no column)."""
    if name not in table.column_names:
        return np.full(table.num_rows, fill, dtype="int64")
    col = pc.fill_null(table.column(name), fill)
    return np.asarray(col.to_numpy(), dtype="int64")


def order(frame: pa.Table | pd.DataFrame) -> np.ndarray[Any, Any]:
    """Positions of ``frame``'s rows in processing order: offset order within each
    (topic, partition); head-timestamp order across them, a table's head before a
    stream's at equal timestamps.

    The merge by head is done in numpy: a queue's record goes out once it is the queue's
    head and the smallest head, so it goes out with the largest merge key of the records
    before it in its queue (the key that held it back). Sorting by that running maximum
    (then by position in the queue) gives the merge's order without a per-record heap.
    """
    table = as_table(frame)
    n = table.num_rows
    seq = ints(table, "ks_seq", 0)
    sub = ints(table, "ks_sub", 0)
    topics = table.column("topic").combine_chunks().dictionary_encode()
    topic_code = np.asarray(pc.fill_null(topics.indices, -1).to_numpy(), dtype="int64")
    part = ints(table, "partition", -1)
    queue = pd.factorize(topic_code * (1 << 32) + part, use_na_sentinel=False)[0]
    if n == 0 or int(queue.max()) == 0:
        return np.lexsort((sub, seq))
    ts = ints(table, "timestamp", 0)
    # at equal timestamps, a table update goes before a stream record (0 before 1): the join
    # then sees the version valid from that time, as an as-of lookup (validFrom <= t) does
    side = 1 - ints(table, "ks_jside", 0)
    by_key = np.lexsort((queue, sub, seq, side, ts))
    rank = np.empty(n, dtype="int64")
    rank[by_key] = np.arange(n, dtype="int64")
    by_queue = np.lexsort((sub, seq, queue))
    q = queue[by_queue].astype("int64") * n
    # the running maximum restarts at each queue: later queues' ranks are offset above
    held = np.maximum.accumulate(rank[by_queue] + q) - q
    return by_queue[np.lexsort((np.arange(n), held))]


def headers_from_text(text: Any) -> list[dict[str, Any]]:
    """Headers as the envelope has them (a list of ``{key, value}``, values bytes).

    Headers cross the operators as Arrow, in that form already; headers given as JSON
    text (values base64) are read back too.
    """
    if text is None:
        return []
    if not isinstance(text, str):
        return list(text)
    return [
        {
            "key": h.get("key"),
            "value": None if h.get("value") is None else base64.b64decode(h["value"]),
        }
        for h in json.loads(text)
    ]


def as_table(frame: pa.Table | pd.DataFrame) -> pa.Table:
    """A task's records as an Arrow table (unit tests hand the operators pandas frames)."""
    if isinstance(frame, pa.Table):
        return frame
    return pa.Table.from_pandas(frame, preserve_index=False)


def _column(values: list[Any], field: pa.Field | None, where: str) -> pa.Array:
    """Python cells as an Arrow column of ``field``'s type (inferred if there is none)."""
    try:
        return pa.array(values, type=None if field is None else field.type, from_pandas=True)
    except (pa.ArrowException, OverflowError, TypeError, ValueError) as exc:
        raise ValueError(
            f"{where}: cannot write the operator's output column "
            f"{'?' if field is None else field.name}: {exc}"
        ) from exc


def make_table(
    n: int,
    names: list[str],
    schema: pa.Schema | None,
    given: dict[str, Any],
    where: str,
) -> pa.Table:
    """A table of ``n`` rows in the output ``schema`` (or ``names``): each column from
    ``given`` (an Arrow column, or a list of Python cells), or all null."""
    arrays: list[Any] = []
    fields = list(schema) if schema is not None else [None] * len(names)
    for name, field in zip(names, fields, strict=True):
        v = given.get(name)
        if v is None:
            arrays.append(pa.nulls(n, pa.null() if field is None else field.type))
        elif isinstance(v, list):
            arrays.append(_column(v, field, where))
        elif field is not None and v.type != field.type:
            arrays.append(v.cast(field.type))
        else:
            arrays.append(v)
    if schema is not None:
        return pa.Table.from_arrays(arrays, schema=schema)
    return pa.Table.from_arrays(arrays, names=names)


def records_table(
    records: list[dict[str, Any]], names: list[str], schema: pa.Schema | None, where: str
) -> pa.Table:
    """Records kept in state (raw cells, :meth:`kspark_server.records.ArrowRecord.to_dict`) as a table."""
    given = {c: [r.get(c) for r in records] for c in names}
    if "headers" in given:
        given["headers"] = [headers_from_text(h) for h in given["headers"]]
    return make_table(len(records), names, schema, given, where)


def interleave(tables: list[tuple[list[int], pa.Table]]) -> pa.Table:
    """Tables whose rows go to the given positions of the output, in position order."""
    where = np.concatenate([np.asarray(p, dtype="int64") for p, _ in tables])
    both = pa.concat_tables([t for _, t in tables])
    return both.take(pa.array(np.argsort(where, kind="stable")))


def runs(codes: np.ndarray[Any, Any]) -> list[tuple[int, int, int]]:
    """(value, start, end) of each run of equal values in ``codes``."""
    if not len(codes):
        return []
    starts = np.flatnonzero(np.concatenate(([True], codes[1:] != codes[:-1])))
    ends = np.append(starts[1:], len(codes))
    return list(zip(codes[starts].tolist(), starts.tolist(), ends.tolist(), strict=True))
