"""Struct columns that cross the stateful operators' Python worker as flat
columns, the JVM's half (:mod:`kspark_server.structcols` names the columns and holds the
Arrow half): pyspark would convert each row's struct to a Python ``dict`` and back."""

from __future__ import annotations

from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import BooleanType, DataType, StructField, StructType

from kspark_server import structcols

__all__ = ["flat_columns", "flat_struct", "flattened", "nested"]


def flat_columns(schema: StructType) -> list[str]:
    """The columns of ``schema`` that cross as flat columns."""
    return [f.name for f in schema.fields if structcols.flattenable(f.dataType.jsonValue())]


def _at(t: DataType, path: tuple[str, ...]) -> DataType:
    for name in path:
        assert isinstance(t, StructType)
        t = t[name].dataType
    return t


def _leaf(name: str, leaf: structcols.Leaf, t: DataType) -> Column:
    c = F.col(name)
    for f in leaf.path:
        c = c.getField(f)
    if leaf.kind != "value":
        return c.isNull().alias(leaf.name)
    if _at(t, leaf.path).typeName() in structcols.NUMBERS:
        # never null: pandas would hold a null number as a float or NaN
        return F.coalesce(c, F.lit(0).cast(_at(t, leaf.path))).alias(leaf.name)
    return c.alias(leaf.name)


def flattened(df: DataFrame, columns: list[str]) -> DataFrame:
    """``df`` with ``columns`` (structs) as their flat columns, in their places."""
    if not columns:
        return df
    out: list[Column] = []
    for f in df.schema.fields:
        if f.name in columns:
            out.extend(
                _leaf(f.name, leaf, f.dataType)
                for leaf in structcols.leaves(f.name, f.dataType.jsonValue())
            )
        else:
            out.append(F.col(f.name))
    return df.select(*out)


def flat_struct(schema: StructType, columns: list[str]) -> StructType:
    """``schema`` with ``columns`` as their flat columns (as :func:`flattened` makes
    them)."""
    fields: list[StructField] = []
    for f in schema.fields:
        if f.name not in columns:
            fields.append(f)
            continue
        for leaf in structcols.leaves(f.name, f.dataType.jsonValue()):
            t = BooleanType() if leaf.kind != "value" else _at(f.dataType, leaf.path)
            fields.append(StructField(leaf.name, t, True))
    return StructType(fields)


def nested(df: DataFrame, schema: StructType, columns: list[str]) -> DataFrame:
    """``df`` (in :func:`flat_struct` of ``schema``) with ``columns`` put back together:
    ``schema``'s columns in its order."""
    if not columns:
        return df
    out: list[Column] = []
    for f in schema.fields:
        if f.name not in columns:
            out.append(F.col(f.name))
            continue
        by = {(x.path, x.kind): x.name for x in structcols.leaves(f.name, f.dataType.jsonValue())}

        def build(path: tuple[str, ...], t: DataType, by: dict[Any, str] = by) -> Column:
            if isinstance(t, StructType):
                inner = F.struct(*[build((*path, g.name), g.dataType).alias(g.name) for g in t])
                return F.when(F.col(by[(path, "struct_null")]), F.lit(None).cast(t)).otherwise(
                    inner
                )
            value = F.col(by[(path, "value")])
            if (path, "null") in by:
                return F.when(F.col(by[(path, "null")]), F.lit(None).cast(t)).otherwise(value)
            return value

        out.append(build((), f.dataType).alias(f.name))
    return df.select(*out)
