"""The record envelope every stream carries between stages: the one definition that the
client's compiler and the operators share.

Columns: ``key``, ``value``, ``timestamp`` (event time, ms), ``headers``, ``topic``,
``partition``, ``offset``; and internal ones: ``ks_seq``/``ks_sub`` (order of the record in
its source, and within a fan-out), ``ks_side`` (a dead-letter or metric row instead of a
record, null for records).

``ks_side`` is a JSON string of the :data:`SIDE` schema, not a struct: every row crosses
into Python workers, and a 15-field struct of nulls made Spark's Arrow conversion 3.5 times
slower than the whole rest of the envelope (``docs/design/stateless-chain.md``). Its
``kind`` is a :class:`SideKind`.

Types are Spark's JSON form (what ``StructType.fromJson`` reads), so this module needs no
pyspark.

Examples
--------
>>> [f["name"] for f in envelope_fields("string", "long")][:4]
['key', 'value', 'timestamp', 'headers']
>>> SideKind("dlq") is SideKind.DLQ
True
"""

from __future__ import annotations

import dataclasses
import enum
import json
from collections.abc import Iterable
from typing import Any

__all__ = [
    "DLQ_EXCEPTION_HEADER",
    "DLQ_HEADERS",
    "ENVELOPE",
    "HEADERS",
    "SIDE",
    "STORED",
    "TAIL",
    "RecordContext",
    "SideKind",
    "envelope_fields",
    "envelope_json",
    "field",
    "side_row",
    "stored_fields",
    "struct_json",
]


@dataclasses.dataclass(frozen=True, slots=True)
class RecordContext:
    """A record's place in its source, from its envelope (Kafka Streams'
    ``RecordContext``): its source ``topic``, ``partition`` and ``offset``, its
    ``timestamp`` (ms) and its ``headers`` as ``(key, value)`` pairs. A topic name
    extractor (``KStream.to(extractor)``) gets it with each record.

    Examples
    --------
    >>> ctx = RecordContext(topic="orders", partition=0, offset=7, timestamp=1000)
    >>> f"{ctx.topic}-archive"
    'orders-archive'
    """

    topic: str | None
    partition: int | None
    offset: int | None
    timestamp: int | None
    headers: tuple[tuple[str, bytes | None], ...] = ()


def field(name: str, type_: Any) -> dict[str, Any]:
    """One nullable struct field in Spark's JSON form."""
    return {"name": name, "type": type_, "nullable": True, "metadata": {}}


#: Headers: ``(key, value)`` pairs, values as bytes.
HEADERS: dict[str, Any] = {
    "type": "array",
    "elementType": {
        "type": "struct",
        "fields": [field("key", "string"), field("value", "binary")],
    },
    "containsNull": True,
}

#: The envelope's columns in order, with their Spark types; ``None`` for key and value,
#: whose types are the stream's.
ENVELOPE: tuple[tuple[str, Any], ...] = (
    ("key", None),
    ("value", None),
    ("timestamp", "long"),
    ("headers", HEADERS),
    ("topic", "string"),
    ("partition", "integer"),
    ("offset", "long"),
    ("ks_seq", "long"),
    ("ks_sub", "long"),
    ("ks_side", "string"),
)

#: The columns after key and value.
TAIL: tuple[str, ...] = tuple(name for name, _ in ENVELOPE[2:])

#: The columns an envelope-layout topic stores (the rest are derived when it is read).
STORED: tuple[str, ...] = ("key", "value", "timestamp", "headers", "partition", "offset", "ks_seq")

#: An internal topic between sub-topologies also stores each record's context (envelope
#: column -> its column in the topic, Spark type): a record that crosses it keeps the
#: topic, partition and offset it was read at, as in Kafka Streams, where the cut is not.
CONTEXT: dict[str, tuple[str, str]] = {
    "topic": ("ks_ctx_topic", "string"),
    "partition": ("ks_ctx_partition", "integer"),
    "offset": ("ks_ctx_offset", "long"),
}


class SideKind(enum.StrEnum):
    """What a side row (``ks_side``) carries; its JSON holds the value."""

    #: records dropped by a handler's CONTINUE or a deserialization handler
    DROPPED = "dropped"
    #: a dead-letter record (its record counts as dropped too)
    DLQ = "dlq"
    #: records ``deduplicate`` dropped
    DUPLICATES = "duplicates"
    #: a store's entries in one task after a batch (a gauge)
    STORE_ENTRIES = "store_entries"
    #: a store's entries as a restarted task loaded them (the restore report)
    LOADED_ENTRIES = "loaded_entries"
    #: a task found its local store at the committed version and used it as it was
    #: (count: 0); the three ``local_*`` kinds are the restore report's, one per task
    LOCAL_REUSED = "local_reused"
    #: a task's local store was behind and applied the durable log's newer changes
    #: (count: the entries it wrote)
    LOCAL_CAUGHT_UP = "local_caught_up"
    #: a task's local store was missing, ahead, of another incarnation, older than the
    #: durable base or corrupted, and was rebuilt (count: the entries it wrote)
    LOCAL_REBUILT = "local_rebuilt"
    #: a task's local store was a standby copy that another executor's job kept warm,
    #: promoted to the task's own (count: the entries written to bring it to the
    #: committed version); reported next to the task's ``local_*`` row
    LOCAL_PROMOTED = "local_promoted"
    #: versioned-table updates older than the history retention, dropped
    EXPIRED_PUTS = "expired_puts"
    #: records a windowed operator dropped because their window had closed (late)
    LATE_RECORDS = "late_records"


#: The contents of a side row.
SIDE: dict[str, Any] = {
    "type": "struct",
    "fields": [
        field("kind", "string"),
        field("processor", "string"),
        field("task", "string"),
        field("count", "long"),
        field("chunk", "string"),
        field("dlq_key", "string"),
        field("dlq_value", "string"),
        field("dlq_headers", HEADERS),
        field("exception_class", "string"),
        field("exception_message", "string"),
        field("stack_trace", "string"),
        field("src_topic", "string"),
        field("src_partition", "integer"),
        field("src_offset", "long"),
        field("src_timestamp", "long"),
        # why the record was dropped: a code of kspark_server.handling.DROP_REASONS
        field("reason", "string"),
    ],
}


def side_row(kind: SideKind, processor: str, task: str, count: int, **more: Any) -> dict[str, Any]:
    """A side row (:data:`SIDE`): ``count`` records of ``kind`` at ``processor`` (a store,
    for a store's gauges) in ``task``, and ``more`` of its fields."""
    return {"kind": kind, "processor": processor, "task": task, "count": count, **more}


#: The fields that identify a side row. Copies of one side row (a stage that Spark ran
#: twice, or steps before a fork that each path runs) agree on these, though a dead
#: letter's stack trace may differ with the path; the writer keeps one dead letter per
#: identity.
SIDE_IDENTITY: tuple[str, ...] = ("kind", "processor", "task", "chunk")


def envelope_fields(key: Any, value: Any) -> list[dict[str, Any]]:
    """The envelope's fields for key and value of the given Spark (JSON) types."""
    types = {"key": key, "value": value}
    return [field(name, types.get(name, t)) for name, t in ENVELOPE]


def stored_fields(key: Any, value: Any, internal: bool = False) -> list[dict[str, Any]]:
    """The fields of an envelope-layout topic (:data:`STORED`); of an ``internal`` topic,
    with the records' context (:data:`CONTEXT`)."""
    fields = [f for f in envelope_fields(key, value) if f["name"] in STORED]
    if internal:
        fields += [field(name, spark) for name, spark in CONTEXT.values()]
    return fields


def struct_json(fields: Iterable[dict[str, Any]]) -> str:
    """A struct of ``fields`` as the JSON text ``StructType.fromJson`` reads."""
    return json.dumps({"type": "struct", "fields": list(fields)})


def envelope_json(key: Any, value: Any, extra: Iterable[dict[str, Any]] = ()) -> str:
    """The envelope's Spark schema as JSON, with ``extra`` fields after it."""
    return struct_json([*envelope_fields(key, value), *extra])


#: A dead letter's fields as record headers, under the names of KIP-1034: the sinks write
#: them (``kspark_server.sinks``), and the Kafka source knows a dead letter by them.
DLQ_HEADERS = {
    "exception_class": "__streams.errors.exception",
    "exception_message": "__streams.errors.message",
    "stack_trace": "__streams.errors.stacktrace",
    "topic": "__streams.errors.topic",
    "partition": "__streams.errors.partition",
    "offset": "__streams.errors.offset",
    "processor_node_id": "__streams.errors.processor.node.id",
    "task_id": "__streams.errors.task.id",
}

#: The header that marks a dead-letter record.
DLQ_EXCEPTION_HEADER = DLQ_HEADERS["exception_class"]
