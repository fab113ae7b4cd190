"""Records too large for a Kafka sink go to the production exception handler.

A Kafka producer refuses a record larger than its ``message.max.bytes`` (and a broker one
larger than its ``max.message.bytes``). Found in the sink's writer, such a record could
only fail the whole micro-batch, without its context, and fail it again on every retry.
So the chain that feeds a Kafka sink measures each record first, the way the sink will
write it (``kspark_server.sinks._kafka_bytes``), and hands a record over the limit to the
production handler with its context, under the sink's name: fail (an error naming the
sink, the topic, the limit and the fix), continue (dropped and counted), or dead-letter.

The measure is the record's key, value and header bytes plus :data:`RECORD_OVERHEAD`,
which covers the producer's own per-record framing (librdkafka 2.x counts 30 to 40 bytes
of it), so a record this check lets through is never refused by the producer. The
writer still checks: a dead-letter record carries the raw record and the error, so it can
be too large for its own topic; that fails the batch with an error that says so, once,
rather than dead-lettering it again (see ``kspark_server.kafka``).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kspark_server import handling
from kspark_server.spec import RecordLimit

#: Bytes counted per record on top of its key, value and headers: the producer's framing.
RECORD_OVERHEAD = 64

#: What a number, boolean or timestamp takes at most as the text the sink writes.
_SCALAR_TEXT = 32


class RecordTooLargeError(ValueError):
    """A record over the byte limit of the Kafka topic it is written to."""


def _text_sizes(col: pa.Array) -> np.ndarray:
    """Bytes of each cell of a key or value column as the Kafka sink writes it."""
    n = len(col)
    if pa.types.is_string(col.type) or pa.types.is_binary(col.type):
        return np.asarray(pc.fill_null(pc.binary_length(col), 0), dtype=np.int64)
    if pa.types.is_large_string(col.type) or pa.types.is_large_binary(col.type):
        return np.asarray(pc.fill_null(pc.binary_length(col), 0), dtype=np.int64)
    if pa.types.is_nested(col.type):
        # the sink writes Spark's to_json of it: compact JSON, the same length within a few
        # bytes (it is measured with the overhead's margin)
        return np.fromiter(
            (
                0
                if x is None
                else len(
                    json.dumps(x, separators=(",", ":"), default=str, ensure_ascii=False).encode()
                )
                for x in col.to_pylist()
            ),
            np.int64,
            n,
        )
    return np.where(np.asarray(col.is_valid()), _SCALAR_TEXT, 0).astype(np.int64)


def _header_sizes(col: pa.Array) -> np.ndarray:
    """Bytes of each row's header keys and values."""
    sizes = np.zeros(len(col), np.int64)
    if len(col) == 0 or col.null_count == len(col):
        return sizes
    items = pc.list_flatten(col)
    if len(items) == 0:
        return sizes
    parents = np.asarray(pc.list_parent_indices(col))
    each = np.zeros(len(items), np.int64)
    for name in ("key", "value"):
        each += np.asarray(pc.fill_null(pc.binary_length(items.field(name)), 0), np.int64)
    np.add.at(sizes, parents, each)
    return sizes


def record_sizes(batch: pa.RecordBatch) -> np.ndarray:
    """Each record's size as the Kafka sink produces it, framing included."""
    sizes = _text_sizes(batch.column("key")) + _text_sizes(batch.column("value"))
    pos = batch.schema.get_field_index("headers")
    if pos >= 0:
        sizes += _header_sizes(batch.column(pos))
    out: np.ndarray = sizes + RECORD_OVERHEAD
    return out


def limited(
    limit: RecordLimit,
    handling_: Any,
    run: Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]],
    row_of: Callable[[pa.RecordBatch, int], Any],
    json_columns: frozenset[str] = frozenset(),
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """``run`` with every record over ``limit`` taken out of its output and handed to the
    production handler of ``handling_`` under the sink's name. ``json_columns``: the
    output's columns of dynamic values (``kspark_server.handling.json_columns``)."""

    def checked(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        guard = handling.Guard(handling_, json_columns)
        for out in run(batches):
            if out.num_rows == 0:
                yield out
                continue
            records = np.asarray(out.column("ks_side").is_null())
            sizes = record_sizes(out)
            over = np.flatnonzero(records & (sizes > limit.max_bytes))
            if len(over) == 0:
                yield out
                continue
            for i in over:
                row = row_of(out, int(i))
                exc = RecordTooLargeError(
                    f"a record of {int(sizes[i])} bytes is over the {limit.max_bytes}-byte "
                    f"limit of Kafka topic {limit.topic!r} (the producer's "
                    "message.max.bytes; the broker's max.message.bytes must allow it "
                    "too). Raise it with Topic.kafka(..., **{'kafka.message.max.bytes': "
                    "'<bytes>'}) and on the broker, or make the record smaller"
                )
                guard.on_error(
                    limit.processor,
                    (row.get("key"), row.get("value")),
                    row,
                    exc,
                    kind="production",
                )
            keep = np.ones(out.num_rows, bool)
            keep[over] = False
            yield out.filter(pa.array(keep))
            first = out.slice(int(over[0]), 1).to_pylist()[0]
            yield from guard.drain_batches(out.schema, f"{first['ks_seq']}:{first['ks_sub']}")

    return checked
