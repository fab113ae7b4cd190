"""Dynamic keys and values in an internal topic's Parquet files: the JSON text the
operators write (``kspark_server.codec``) in a ``string`` column, read back by the next
operator's decoder as the same Python values, of the same types
(docs/design/sub-topologies.md). No Spark: the files are written and read with pyarrow,
as Spark's Parquet writer and reader store a ``string`` column."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.dynamicvalues import SHAPES, same

from kspark_server import codec, columns
from kspark_server.spec import JsonSpec


def through_a_topic(values: list[Any], folder: Path) -> list[Any]:
    """``values`` written as an internal topic's ``value`` column and read back."""
    encode = codec.encoder(JsonSpec())
    path = folder / "part-0.parquet"
    pq.write_table(pa.table({"value": pa.array([encode(v) for v in values], pa.string())}), path)
    return columns.column_decoder(JsonSpec())(pq.read_table(path).column("value").combine_chunks())


def test_every_shape_reads_back_as_it_was_written(tmp_path: Path) -> None:
    got = through_a_topic(SHAPES, tmp_path)
    assert len(got) == len(SHAPES)
    for want, have in zip(SHAPES, got, strict=True):
        assert same(want, have), (want if not isinstance(want, str) else want[:40], have)


def test_equal_values_are_equal_text_whatever_their_dicts_order() -> None:
    """A dynamic key's text is its identity in the topic: the next operator partitions and
    keeps its state by it."""
    encode = codec.encoder(JsonSpec())
    assert encode({"b": 1, "a": [2]}) == encode({"a": [2], "b": 1}) == '{"a":[2],"b":1}'


@pytest.mark.parametrize("value", [math.nan, math.inf, b"bytes", {"k": {1, 2}}])
def test_a_value_json_has_no_text_for_fails_on_its_record(value: Any) -> None:
    with pytest.raises(codec.EncodeError, match="is not JSON-compatible"):
        codec.encoder(JsonSpec())(value)


_JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=12,
)


@settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(values=st.lists(_JSON_VALUES, min_size=1, max_size=8))
def test_any_json_value_reads_back_as_it_was_written(values: list[Any], tmp_path: Path) -> None:
    got = through_a_topic(values, tmp_path)
    assert all(same(w, h) for w, h in zip(values, got, strict=True)), (values, got)
