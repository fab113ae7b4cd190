"""The stateful operators' output path: an operator's Arrow output, as the
frames it yields (:func:`~kspark_server.operators.grouped.output_frame`), reads back
through pyspark's own pandas-to-Arrow conversion as exactly the same rows, whatever the
values: nulls, empty and 1 MiB values, bytes that are not UTF-8, 64-bit extremes,
timestamps at the ends of their range, nested values, headers.

pyspark's ``applyInPandasWithState`` worker concatenates the frames of a partition's
groups and pads them with empty rows up to the number of groups; the tests do the same.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql.pandas.types import from_arrow_schema

from kspark_server import envelope as env
from kspark_server import transport
from kspark_server.operators.grouped import JSON_COLUMNS, frame_table, output_frame, output_struct

UTC = dt.UTC
HEADERS = JSON_COLUMNS["headers"]
MIB = b"\xff\xfe" * (1 << 19)


def edge_table() -> pa.Table:
    """The envelope's columns and a few nested ones, a row per edge case."""
    struct = pa.struct(
        [
            ("n", pa.int64()),
            ("at", pa.timestamp("us", tz="UTC")),
            ("tags", pa.map_(pa.string(), pa.binary())),
        ]
    )
    return pa.table(
        {
            "key": pa.array([None, b"", MIB, b"\x80\x00\xc3", b"k"], pa.binary()),
            "value": pa.array(["x" * (1 << 20), "", None, "é\u2028\U0001f600", "v"], pa.string()),
            "timestamp": pa.array([-(2**63), 2**63 - 1, None, 0, 253402300799999], pa.int64()),
            "headers": pa.array(
                [
                    None,
                    [],
                    [{"key": "a", "value": b"\xff"}, {"key": None, "value": None}],
                    [{"key": 'q"\n\\', "value": MIB}],
                    [{"key": "", "value": b""}],
                ],
                HEADERS,
            ),
            "partition": pa.array([None, 0, 2**31 - 1, -(2**31), 3], pa.int32()),
            "offset": pa.array([2**62 + 1, None, 2**63 - 1, 0, 7], pa.int64()),
            "ks_side": pa.array([None, None, None, None, '{"kind": "x"}'], pa.string()),
            "at": pa.array(
                [
                    dt.datetime(1, 1, 1, tzinfo=UTC),
                    dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
                    None,
                    dt.datetime(1970, 1, 1, tzinfo=UTC),
                    dt.datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
                ],
                pa.timestamp("us", tz="UTC"),
            ),
            "nested": pa.array(
                [
                    None,
                    {"n": None, "at": None, "tags": None},
                    {"n": 2**62 + 1, "at": dt.datetime(1, 1, 1, tzinfo=UTC), "tags": {}},
                    {
                        "n": -1,
                        "at": dt.datetime(9999, 12, 31, tzinfo=UTC),
                        "tags": {"t": b"\xff", "u": None},
                    },
                    {"n": 0, "at": None, "tags": {"": b""}},
                ],
                struct,
            ),
            "none": pa.nulls(5, pa.string()),
        }
    )


def spark_reads(parts: list[pa.Table], groups: int, declared: Any) -> pa.Table:
    """What Spark gets from a worker whose ``groups`` groups yielded ``parts``."""
    frames = [output_frame(p) for p in parts]
    rows = sum(len(f) for f in frames)
    pad = pd.DataFrame(dict.fromkeys(declared.names), index=range(max(1, groups) - rows))
    if len(pad) or groups:
        frames.append(pad)
    return frame_table(frames, declared).slice(0, rows)


def same(got: pa.Table, want: pa.Table) -> None:
    assert got.schema.names == want.schema.names
    for name in want.column_names:
        g, w = got.column(name).cast(want.schema.field(name).type), want.column(name)
        assert g.equals(w), f"column {name} differs"


@pytest.mark.parametrize("groups", [0, 1, 3, 12])
@pytest.mark.parametrize("split", [[5], [2, 3], [1, 0, 4], [0, 5], [5, 0]])
def test_edge_values_read_back_exactly(groups: int, split: list[int]) -> None:
    table = edge_table()
    declared = output_struct(from_arrow_schema(table.schema))
    parts, at = [], 0
    for n in split:
        parts.append(table.slice(at, n))
        at += n
    same(spark_reads(parts, groups, declared), table)


def test_headers_travel_as_json_text() -> None:
    """pyspark converts a list column row by row in Python; the headers leave as text."""
    table = edge_table().select(["key", "headers"])
    frame = output_frame(table)
    assert frame["headers"].array.__arrow_array__().to_pylist()[:2] == [None, "[]"]
    declared = output_struct(from_arrow_schema(table.schema))
    assert declared["headers"].dataType.simpleString() == "string"


def test_flat_columns_are_not_copied_to_python_objects() -> None:
    """The flat columns are views of the operator's Arrow columns."""
    table = edge_table()
    frame = output_frame(table)
    for name in ("key", "value", "timestamp", "offset", "at"):
        assert frame[name].array.__arrow_array__().equals(table.column(name).combine_chunks())


def test_an_envelope_round_trips_in_its_declared_schema() -> None:
    """The operator's output schema (as the compiler declares it) and back."""
    declared_json = env.envelope_json("binary", "string")
    schema = transport.operator_arrow_schema(declared_json, False)
    assert schema is not None
    table = edge_table().select([n for n in schema.names if n in edge_table().column_names])
    full = pa.table(
        {
            n: table.column(n) if n in table.column_names else pa.nulls(5, schema.field(n).type)
            for n in schema.names
        }
    ).cast(schema)
    declared = output_struct(transport.operator_schema(declared_json, False))
    same(spark_reads([full], 4, declared), full)
