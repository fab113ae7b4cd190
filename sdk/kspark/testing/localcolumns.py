"""What the Spark path does to columns between stages, done in Python over Arrow tables
for the in-process engine (:mod:`kspark.testing.local`): Spark's ``to_json`` and
``from_json`` of keys and values, a cogroup's union of its inputs, a global store's
broadcast to every task, and the JSON text of packed values.

Each mirrors one Spark expression of :mod:`kspark.compiler.lowering`; they stand apart
from the engine, which only decides when each runs.
"""

from __future__ import annotations

import base64
import json
from typing import Any

import pyarrow as pa

from kspark_server import envelope as env

__all__ = [
    "b64",
    "broadcast",
    "cogrouped",
    "json_safe",
    "json_text",
    "packed_column",
    "spark_json_text",
    "to_arrow_value",
]


def spark_json_text(value: Any, spark_type: Any, keep_nulls: bool = False) -> Any:
    """``value`` as the JSON-compatible object Spark's ``to_json`` writes: a struct's null
    fields left out (kept with ``keep_nulls``: ``ignoreNullFields=false``), a map as an
    object."""
    if value is None:
        return None
    if isinstance(spark_type, dict):
        kind = spark_type.get("type")
        if kind == "struct":
            out = {}
            for f in spark_type["fields"]:
                v = value.get(f["name"])
                if v is not None or keep_nulls:
                    out[f["name"]] = spark_json_text(v, f["type"], keep_nulls)
            return out
        if kind == "array":
            return [spark_json_text(v, spark_type["elementType"], keep_nulls) for v in value]
        if kind == "map":
            items = value.items() if isinstance(value, dict) else value
            return {
                str(k): spark_json_text(v, spark_type["valueType"], keep_nulls) for k, v in items
            }
    if isinstance(value, bytes | bytearray):  # binary: Jackson's base64, as to_json writes it
        return base64.b64encode(value).decode("ascii")
    return value


def to_arrow_value(value: Any, type_: pa.DataType) -> Any:
    """A JSON-parsed value as the Python value Arrow builds ``type_`` from (Spark's
    ``from_json``: a map from an object)."""
    if value is None:
        return None
    if pa.types.is_struct(type_):
        return {
            type_.field(i).name: to_arrow_value(value.get(type_.field(i).name), type_.field(i).type)
            for i in range(type_.num_fields)
        }
    if pa.types.is_map(type_):
        return [(k, to_arrow_value(v, type_.item_type)) for k, v in value.items()]
    if pa.types.is_list(type_) or pa.types.is_large_list(type_):
        return [to_arrow_value(v, type_.value_type) for v in value]
    return value


_PACKABLE_LEAVES = {
    "string",
    "integer",
    "long",
    "short",
    "byte",
    "double",
    "float",
    "boolean",
}


def json_safe(spark_type: Any) -> bool:
    """Whether values of ``spark_type`` cross to JSON text and back as Spark's
    ``to_json``/``from_json`` pass them (no dates, times, decimals or bytes)."""
    if isinstance(spark_type, str):
        return spark_type in _PACKABLE_LEAVES
    kind = spark_type.get("type")
    if kind == "struct":
        return all(json_safe(f["type"]) for f in spark_type["fields"])
    if kind == "array":
        return json_safe(spark_type["elementType"])
    if kind == "map":
        return spark_type["keyType"] == "string" and json_safe(spark_type["valueType"])
    return False


def json_text(value: Any, desc: Any) -> str | None:
    """A key or value as the JSON text a dead letter holds (Spark's ``to_json``); a
    dynamic one is JSON text already."""
    from kspark.plan.types import Dynamic

    if value is None:
        return None
    if isinstance(desc, Dynamic):
        return str(value)
    return json.dumps(spark_json_text(value, desc.spark_json()), separators=(",", ":"))


def b64(v: Any) -> bytes | None:
    return None if v is None else base64.b64decode(v)


def cogrouped(parts: list[pa.Table]) -> pa.Table:
    """A cogroup's input stages in one table, as the Spark path's union makes it
    (:func:`kspark.compiler.lowering.stateful.cogroup`)."""
    names = [name for name, _ in env.ENVELOPE]
    types = [p.schema.field("value").type for p in parts]
    tagged = []
    for i, part in enumerate(parts):
        t = part.select(names)
        n = t.num_rows
        if i:
            t = t.set_column(1, "value", pa.nulls(n, types[0]))
        t = t.append_column("ks_input", pa.array([i] * n, pa.int32()))
        for j in range(1, len(parts)):
            column = part.column("value") if j == i else pa.nulls(n, types[j])
            t = t.append_column(f"ks_value{j}", column)
        tagged.append(t)
    return pa.concat_tables([t.cast(tagged[0].schema) for t in tagged])


def broadcast(table: pa.Table, keys: tuple[int, ...]) -> pa.Table:
    """``table`` with each table update (``ks_jside`` 1, not a side row) once for every
    task, in place, as the Spark lowering explodes it: a processor's global store is whole
    in each task."""
    jside = table.column("ks_jside").to_pylist()
    side = table.column("ks_side").to_pylist()
    tasks = table.column("ks_task").to_pylist()
    rows: list[int] = []
    new_tasks: list[int] = []
    for i, (j, s, t) in enumerate(zip(jside, side, tasks, strict=True)):
        for k in keys if j == 1 and s is None else [t]:
            rows.append(i)
            new_tasks.append(k)
    out = table.take(pa.array(rows, pa.int64()))
    at = out.column_names.index("ks_task")
    return out.set_column(at, "ks_task", pa.array(new_tasks, pa.int32()))


def packed_column(table: pa.Table, name: str, spark_type: Any) -> pa.Table:
    """Column ``name`` as the JSON text Spark's ``to_json`` makes of it, null fields kept
    (as the stateful lowering passes values to an operator)."""
    texts = [
        None
        if v is None
        else json.dumps(spark_json_text(v, spark_type, True), separators=(",", ":"))
        for v in table.column(name).to_pylist()
    ]
    return table.set_column(table.column_names.index(name), name, pa.array(texts, pa.string()))
