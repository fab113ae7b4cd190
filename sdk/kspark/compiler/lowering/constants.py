"""Envelope columns that are the same for every record stay out of a Python pass.

A source can make some envelope columns constant (:func:`.sources.read_constants`); a
Python pass after it runs without them, and they are added back as literals after it
(docs/design/stateless-chain.md).
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from kspark.compiler.lowering.columns import dtype, no_headers
from kspark_server import envelope as env

__all__ = ["add_constants", "constant_column", "describe_constants"]


def constant_column(name: str, value: Any) -> Column:
    """Envelope column ``name`` as the literal ``value``, typed as the sources type it."""
    if name == "headers":
        assert value == []
        return no_headers()
    if isinstance(value, dict):
        return F.col(value["same_as"])
    return F.lit(value).cast(dtype(dict(env.ENVELOPE)[name]))


def add_constants(df: DataFrame, schema: StructType, constants: dict[str, Any]) -> DataFrame:
    """``df`` with the ``constants`` columns (:func:`.sources.read_constants`) added back
    after a Python pass that left them out, in ``schema``'s column order."""
    if not constants:
        return df
    return df.select(
        *[
            constant_column(f.name, constants[f.name]).alias(f.name)
            if f.name in constants
            else F.col(f.name)
            for f in schema.fields
        ]
    )


def describe_constants(constants: dict[str, Any], columns: list[str]) -> str:
    """``constants`` (name to value) as :func:`kspark_server.chain.constant_widener` takes
    them, at their positions in ``columns``."""
    return json.dumps(
        [
            [name, columns.index(name), dict(env.ENVELOPE)[name], constants[name]]
            for name in sorted(constants, key=columns.index)
        ]
    )
