"""The record envelope every stream carries between stages, as Spark JSON schemas.

Columns: ``key``, ``value``, ``timestamp`` (event time, ms), ``headers``, ``topic``,
``partition``, ``offset``; and internal ones: ``ks_seq``/``ks_sub`` (order of the record in
its source, and within a fan-out), ``ks_side`` (a dead-letter or metric row instead of a
record, null for records).

``ks_side`` is a JSON string of the :data:`SIDE` schema, not a struct: every row crosses
into Python workers, and a 15-field struct of nulls made Spark's Arrow conversion 3.5 times
slower than the whole rest of the envelope (measured: ``docs/performance.md``).
"""

from __future__ import annotations

import json
from typing import Any

from kspark.plan.types import TypeDesc

HEADERS: dict[str, Any] = {
    "type": "array",
    "elementType": {
        "type": "struct",
        "fields": [
            {"name": "key", "type": "string", "nullable": True, "metadata": {}},
            {"name": "value", "type": "binary", "nullable": True, "metadata": {}},
        ],
    },
    "containsNull": True,
}


def _f(name: str, type_: Any) -> dict[str, Any]:
    return {"name": name, "type": type_, "nullable": True, "metadata": {}}


SIDE: dict[str, Any] = {
    "type": "struct",
    "fields": [
        _f("kind", "string"),
        _f("processor", "string"),
        _f("task", "string"),
        _f("count", "long"),
        _f("chunk", "string"),
        _f("dlq_key", "string"),
        _f("dlq_value", "string"),
        _f("dlq_headers", HEADERS),
        _f("exception_class", "string"),
        _f("exception_message", "string"),
        _f("stack_trace", "string"),
        _f("src_topic", "string"),
        _f("src_partition", "integer"),
        _f("src_offset", "long"),
        _f("src_timestamp", "long"),
    ],
}

#: The dead-letter queue's record schema (docs/errors.md documents it).
DLQ_COLUMNS = (
    "key",
    "value",
    "timestamp",
    "headers",
    "exception_class",
    "exception_message",
    "stack_trace",
    "topic",
    "partition",
    "offset",
    "processor_node_id",
    "task_id",
)


def envelope_fields(
    key: TypeDesc, value: TypeDesc, value_col: str = "value"
) -> list[dict[str, Any]]:
    return [
        _f("key", key.spark_json()),
        _f(value_col, value.spark_json()),
        _f("timestamp", "long"),
        _f("headers", HEADERS),
        _f("topic", "string"),
        _f("partition", "integer"),
        _f("offset", "long"),
        _f("ks_seq", "long"),
        _f("ks_sub", "long"),
        _f("ks_side", "string"),
    ]


def struct_json(fields: list[dict[str, Any]]) -> str:
    return json.dumps({"type": "struct", "fields": fields})


def envelope_json(key: TypeDesc, value: TypeDesc, extra: list[dict[str, Any]] | None = None) -> str:
    """The envelope's Spark schema as JSON (``StructType.fromJson`` reads it)."""
    return struct_json(envelope_fields(key, value) + list(extra or []))


def field(name: str, type_: Any) -> dict[str, Any]:
    return _f(name, type_)
