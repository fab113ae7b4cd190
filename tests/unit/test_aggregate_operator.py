"""The aggregate operator's batch logic without Spark: the vectorized ``count`` against the
record-by-record path, on random batches."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
from support.sessionmodel import session_model

from kspark_server import handling, taskstate
from kspark_server.operators.aggregate import AggregateProcessor
from kspark_server.operators.base import Batch
from kspark_server.spec import AggregateSpec, Handling, KeyValue, Packed, PrimSpec

KV = KeyValue(key=PrimSpec(spark="string"), value=PrimSpec(spark="long"))
COLUMNS = ["key", "value", "timestamp", "headers", "topic", "partition", "offset"]
COLUMNS += ["ks_seq", "ks_sub", "ks_side"]


def processor(
    size: int,
    grace: int,
    vectorized: bool,
    *,
    gap: int = 0,
    op: str = "count",
    retention: int = 0,
) -> AggregateProcessor:
    schema = json.dumps({"type": "struct", "fields": [{"name": c} for c in COLUMNS]})
    fns: dict[str, Any] = {}
    if op == "reduce":
        fns["reducer"] = lambda a, v: a + v
    elif op == "aggregate":
        fns["initializer"] = lambda: 100
        fns["aggregator"] = lambda k, v, a: a + (v or 0) * 2
        fns["merger"] = lambda k, a, b: a + b - 100
    spec = AggregateSpec(
        processor="count",
        store="s",
        op=op,
        input=KV,
        output=KV,
        window_size_ms=size,
        window_advance_ms=size,
        grace_ms=grace,
        session_gap_ms=gap,
        retention_ms=retention,
        output_schema=schema,
        packed=Packed(),
        handling=Handling(processing=None),
        **fns,
    )
    p = AggregateProcessor(spec)
    p.guard = handling.Guard(spec.handling)
    p.unpack_value = lambda x: x
    p.vectorized = vectorized
    p.setup()
    return p


def run(
    p: AggregateProcessor,
    batches: list[list[tuple[Any, Any, int]]],
    stores: list[Any] | None = None,
) -> Any:
    """Outputs per batch, the final state and the dropped records; a session
    aggregation's store after each batch goes into ``stores``, as the model gives it."""
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
        if stores is not None:
            table = st_["table"]
            stores.append({k: [(x[0], x[1], x[2]) for x in e[1]] for k, e in table.items()})
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


@settings(max_examples=80, deadline=None)
@given(
    batches=st.lists(
        st.lists(
            st.tuples(
                st.sampled_from(["a", "b", None]),
                st.integers(0, 3),
                st.integers(0, 60),
            ),
            min_size=1,
            max_size=10,
        ),
        min_size=1,
        max_size=3,
    ),
    op=st.sampled_from(["count", "reduce", "aggregate"]),
    gap=st.sampled_from([3, 10]),
    grace=st.sampled_from([0, 5]),
    retention=st.sampled_from([0, 15, 40]),
)
def test_session_windows_against_the_model(
    batches: list[list[tuple[Any, Any, int]]], op: str, gap: int, grace: int, retention: int
) -> None:
    retention = retention and max(retention, gap + grace)
    stores: list[Any] = []
    p = processor(0, grace, True, gap=gap, op=op, retention=retention)
    outs, _, dropped = run(p, batches, stores)
    want, want_dropped, want_stores = session_model(op, batches, gap, grace, retention)
    assert outs == want
    assert dropped == {("count", "0_0", reason): n for reason, n in want_dropped.items()}
    assert stores == want_stores
    if retention:  # the retention changes what the store keeps, never what is emitted
        assert want == session_model(op, batches, gap, grace)[0]


def test_a_record_between_two_sessions_merges_them_and_retracts_both() -> None:
    batches = [[("a", 1, 0), ("a", 1, 20)], [("a", 1, 10)]]
    outs, _, _ = run(processor(0, 20, True, gap=10), batches)
    w = lambda s, e: {"key": "a", "window": {"start": s, "end": e}}  # noqa: E731
    assert outs == [
        [
            {"key": w(0, 0), "value": 1, "timestamp": 0},
            {"key": w(20, 20), "value": 1, "timestamp": 20},
        ],
        [
            {"key": w(0, 0), "value": None, "timestamp": 10},
            {"key": w(20, 20), "value": None, "timestamp": 10},
            {"key": w(0, 20), "value": 3, "timestamp": 20},
        ],
    ]


def test_a_session_that_expires_in_the_batch_that_made_it_is_still_emitted() -> None:
    # gap 10, no grace: at stream time 20 the session [0, 0] can take no record any more
    outs, st_, _ = run(processor(0, 0, True, gap=10), [[("a", 1, 0), ("a", 1, 20)]])
    assert [r["key"]["window"] for r in outs[0]] == [
        {"start": 0, "end": 0},
        {"start": 20, "end": 20},
    ]
    assert [x[:2] for x in st_["table"]["a"][1]] == [[20, 20]]
