"""Spark types and column helpers that every lowering stage shares."""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import Column
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    BooleanType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from kspark_server import envelope as env

__all__ = [
    "dtype",
    "either",
    "flat_schema",
    "no_headers",
    "schema",
    "side_struct",
    "side_type",
    "tail",
    "typed",
    "typed_fields",
]


def dtype(desc_json: Any) -> DataType:
    """A Spark type from its JSON form (a type name or a dict).

    >>> dtype("long").simpleString()
    'bigint'
    """
    return (
        StructType.fromJson(
            {
                "type": "struct",
                "fields": [{"name": "x", "type": desc_json, "nullable": True, "metadata": {}}],
            }
        )
        .fields[0]
        .dataType
    )


def schema(schema_json: str) -> StructType:
    """A Spark schema from its JSON text."""
    return StructType.fromJson(json.loads(schema_json))


_FLAT_TYPES = {
    "int": IntegerType,
    "long": LongType,
    "binary": BinaryType,
    "string": StringType,
    "boolean": BooleanType,
}


def flat_schema(ddl: str) -> StructType:
    """The schema of a flat DDL text such as ``"ks_task int, blob binary"``, built on the
    client.

    A DDL string handed to ``mapInPandas`` and the like is parsed through pyspark's
    *active* session, which need not be the app's: after a server restart it is the dead
    one, and the app would fail at start with ``NO_ACTIVE_SESSION``.

    >>> flat_schema("ks_task int, blob binary").simpleString()
    'struct<ks_task:int,blob:binary>'
    """
    fields = []
    for part in ddl.split(","):
        name, type_name = part.split()
        fields.append(StructField(name, _FLAT_TYPES[type_name](), True))
    return StructType(fields)


_SIDE_TYPE: DataType | None = None


def side_type() -> DataType:
    """The type of the side rows' contents; the ``ks_side`` column holds them as JSON."""
    global _SIDE_TYPE
    if _SIDE_TYPE is None:
        _SIDE_TYPE = dtype(env.SIDE)
    return _SIDE_TYPE


def side_struct(**cols: Column) -> Column:
    """A side row (as JSON) with the given fields and nulls elsewhere."""
    fields = []
    for f in env.SIDE["fields"]:
        c = cols.get(f["name"], F.lit(None))
        fields.append(c.cast(dtype(f["type"])).alias(f["name"]))
    return F.to_json(F.struct(*fields))


def no_headers() -> Column:
    """An empty headers list: empty, never null, as the envelope's ``headers`` column holds."""
    return F.array().cast(dtype(env.HEADERS))


def tail(offset: Column, seq: Column | None = None) -> list[Column]:
    """The envelope's last columns for a record read at ``offset``: its sequence number
    (``seq``, else the offset), sub-position 0 and no side row."""
    return [
        (seq if seq is not None else offset).cast("long").alias("ks_seq"),
        F.lit(0).cast("long").alias("ks_sub"),
        F.lit(None).cast("string").alias("ks_side"),
    ]


def either(*bads: Column | None) -> Column | None:
    """Whether any of ``bads`` is true; None when none can be (all None)."""
    out: Column | None = None
    for bad in bads:
        if bad is not None:
            out = bad if out is None else out | bad
    return out


def typed(c: Column, to: DataType, source: str) -> tuple[Column, Column | None]:
    """``c`` as type ``to``, and whether a non-null ``c`` did not convert (None: it
    cannot fail). A Spark timestamp becomes epoch milliseconds (a cast to long would give
    seconds); anything else is a ``try_cast``, so that a value of the wrong type goes to
    the deserialization handler instead of failing the query through an ANSI cast error."""
    if isinstance(to, LongType) and source.startswith("timestamp"):
        return F.unix_millis(c), None
    if source and to.simpleString() == source:
        return c, None  # already of its type: nothing to convert, nothing to fail
    converted = c.try_cast(to)
    return converted, c.isNotNull() & converted.isNull()


def typed_fields(
    columns: dict[str, Column], to: StructType, sources: dict[str, str]
) -> tuple[Column, Column | None]:
    """A struct of ``columns`` as ``to``, field by field (a ``try_cast`` of a whole struct
    nulls a field that does not convert and says nothing), and whether any non-null
    field did not convert (None: none can fail)."""
    fields: list[Column] = []
    bad: Column | None = None
    for f in to.fields:
        value, failed = typed(columns[f.name], f.dataType, sources.get(f.name, ""))
        fields.append(value.alias(f.name))
        bad = either(bad, failed)
    return F.struct(*fields), bad
