"""The schemas in which a stateful operator's records leave it: Spark's, and Arrow's.

The operator works on Arrow tables throughout (:mod:`kspark_server.operators.base`):
columns it does not read, such as a deduplicated record's value, are carried by reference
and never become Python objects. Its output records are declared to Spark in
:func:`operator_schema` and built in :func:`operator_arrow_schema`.
"""

from __future__ import annotations

from typing import Any

import pyarrow as pa

__all__ = ["arrow_schema", "operator_arrow_schema", "operator_schema"]


def operator_schema(output_schema_json: str, packed_out: bool) -> Any:
    """The Spark schema of an operator's output records as they leave it: the value as
    JSON text where it is JSON-packed (``packed_out``). The compiler declares it to
    Spark; the operator builds its Arrow tables in it."""
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
