"""The aggregate operator's batch logic without Spark: the vectorized ``count`` against the
record-by-record path, on random batches."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from kspark_server import handling, taskstate
from kspark_server.aggregate import AggregateProcessor
from kspark_server.spec import AggregateSpec, Handling, KeyValue, Packed, PrimSpec
from kspark_server.tasks import Batch

KV = KeyValue(key=PrimSpec(spark="string"), value=PrimSpec(spark="long"))
COLUMNS = ["key", "value", "timestamp", "headers", "topic", "partition", "offset"]
COLUMNS += ["ks_seq", "ks_sub", "ks_side"]


def processor(size: int, grace: int, vectorized: bool) -> AggregateProcessor:
    schema = json.dumps({"type": "struct", "fields": [{"name": c} for c in COLUMNS]})
    spec = AggregateSpec(
        processor="count",
        store="s",
        op="count",
        input=KV,
        output=KV,
        window_size_ms=size,
        window_advance_ms=size,
        grace_ms=grace,
        output_schema=schema,
        packed=Packed(),
        handling=Handling(processing=None),
    )
    p = AggregateProcessor(spec)
    p.guard = handling.Guard(spec.handling)
    p.unpack_value = lambda x: x
    p.vectorized = vectorized
    p.setup()
    return p


def run(p: AggregateProcessor, batches: list[list[tuple[Any, Any, int]]]) -> Any:
    st_ = taskstate.empty("aggregate", False)
    outs, seq = [], 0
    for records in batches:
        frame = pd.DataFrame(
            {
                "key": [k for k, _, _ in records],
                "value": pd.Series([v for _, v, _ in records], dtype=object),
                "timestamp": [t for _, _, t in records],
                "headers": [None] * len(records),
                "topic": ["in"] * len(records),
                "partition": [0] * len(records),
                "offset": list(range(seq, seq + len(records))),
                "ks_seq": list(range(seq, seq + len(records))),
                "ks_sub": [0] * len(records),
                "ks_side": [None] * len(records),
                "ks_hash": [7] * len(records),
            }
        )
        seq += len(records)
        p.touched = set()
        out = p.emitter()
        p.process(st_, Batch(frame, COLUMNS, {}), 0, out)
        result = out.frame(Batch(frame, COLUMNS, {}), COLUMNS, True)
        outs.append(
            None if result is None else result[["key", "value", "timestamp"]].to_dict("records")
        )
    return outs, st_, dict(p.guard.dropped)


@settings(max_examples=60, deadline=None)
@given(
    batches=st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(["a", "b", None]),
                st.one_of(st.none(), st.integers(0, 3)),
                st.integers(0, 40),
            ),
            min_size=1,
            max_size=12,
        ),
        min_size=1,
        max_size=3,
    ),
    size=st.sampled_from([0, 5, 10]),
    grace=st.sampled_from([0, 4]),
)
def test_vectorized_count_is_the_record_by_record_count(
    batches: list[list[tuple[Any, Any, int]]], size: int, grace: int
) -> None:
    fast = run(processor(size, grace if size else 0, True), batches)
    slow = run(processor(size, grace if size else 0, False), batches)
    assert fast == slow
