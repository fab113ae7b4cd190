"""Struct columns crossing the stateful operators' Python worker flat (``kspark_server.structcols``):
through pyspark's own pandas conversions, both ways, every value comes back exactly."""

from __future__ import annotations

from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pyspark.sql.conversion import ArrowBatchTransformer

from kspark_server import structcols
from kspark_server.operators.grouped import frame_table, output_frame

INNER = pa.struct([("name", pa.string()), ("flag", pa.bool_()), ("raw", pa.binary())])
VALUE = pa.struct(
    [
        ("big", pa.int64()),
        ("small", pa.int8()),
        ("ratio", pa.float64()),
        ("f32", pa.float32()),
        ("inner", INNER),
    ]
)

inner = st.none() | st.fixed_dictionaries(
    {
        "name": st.none() | st.text(max_size=3),
        "flag": st.none() | st.booleans(),
        "raw": st.none() | st.binary(max_size=3),
    }
)
value = st.none() | st.fixed_dictionaries(
    {
        "big": st.none() | st.integers(-(2**63), 2**63 - 1),
        "small": st.none() | st.integers(-128, 127),
        "ratio": st.none() | st.floats(allow_nan=True),
        "f32": st.none() | st.floats(width=32, allow_nan=False),
        "inner": inner,
    }
)


def _from_spark(table: pa.Table) -> list[pd.DataFrame]:
    """``table``'s rows as pyspark hands ``applyInPandasWithState`` its frames."""
    frames = []
    for batch in table.to_batches(max_chunksize=3):
        series = ArrowBatchTransformer.to_pandas(
            batch,
            timezone="UTC",
            struct_in_pandas="dict",
            ndarray_as_list=False,
            prefer_int_ext_dtype=False,
            df_for_struct=False,
        )
        frames.append(pd.concat(series, axis=1))
    return frames


def _same(a: list[Any], b: list[Any]) -> bool:
    # NaN equals NaN here: the value crossed, not a copy of it
    return repr(a) == repr(b)


@settings(max_examples=60, deadline=None)
@given(st.lists(value, min_size=1, max_size=8))
def test_flat_columns_carry_every_value_both_ways(values: list[Any]) -> None:
    col = pa.array(values, VALUE)
    table = pa.table({"key": pa.array(["k"] * len(values)), "value": col})
    flat = structcols.unnest(table, ["value"])
    assert not any(pa.types.is_struct(t) for t in flat.schema.types)
    # into the operator: pyspark's frames, read back in the flat schema, nested
    frames = _from_spark(flat)
    back = pa.concat_tables(
        [pa.Table.from_pandas(f, schema=flat.schema, preserve_index=False) for f in frames]
    )
    nested = structcols.nest(back, {"value": VALUE})
    assert nested.column_names == ["key", "value"]
    assert _same(nested.column("value").to_pylist(), col.to_pylist())
    # out of it: the output frame as pyspark converts it, nested again
    from pyspark.sql.pandas.types import from_arrow_schema

    out = frame_table([output_frame(flat)], from_arrow_schema(flat.schema))
    want = col.to_pylist()
    assert _same(structcols.nest(out, {"value": VALUE}).column("value").to_pylist(), want)


@pytest.mark.parametrize(
    "t",
    [
        pa.struct([("at", pa.timestamp("us", "UTC"))]),
        pa.struct([("xs", pa.list_(pa.int64()))]),
        pa.struct([]),
        pa.int64(),
    ],
)
def test_other_columns_cross_as_they_are(t: pa.DataType) -> None:
    assert not structcols.flattenable(t)
    table = pa.table({"c": pa.nulls(2, t)})
    assert structcols.unnest(table, ["c"]).equals(table)
