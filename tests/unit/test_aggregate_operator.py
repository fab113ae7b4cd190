"""The aggregate operator's batch logic without Spark: the vectorized ``count`` against the
record-by-record path, on random batches."""

from __future__ import annotations

import json
from typing import Any

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from kspark_server import handling, taskstate
from kspark_server.operators.aggregate import AggregateProcessor
from kspark_server.operators.base import Batch
from kspark_server.spec import AggregateSpec, Handling, KeyValue, Packed, PrimSpec

KV = KeyValue(key=PrimSpec(spark="string"), value=PrimSpec(spark="long"))
COLUMNS = ["key", "value", "timestamp", "headers", "topic", "partition", "offset"]
COLUMNS += ["ks_seq", "ks_sub", "ks_side"]


def processor(
    size: int, grace: int, vectorized: bool, *, gap: int = 0, op: str = "count"
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


def session_model(
    op: str, batches: list[list[tuple[Any, Any, int]]], gap: int, grace: int
) -> tuple[list[Any], dict[Any, int]]:
    """Kafka Streams' session windows, record by record, with a commit per batch: each
    batch emits each session it made (latest value) and a tombstone for each session that
    existed before it and was merged away."""
    sessions: dict[Any, list[list[Any]]] = {}
    stream_time: int | None = None
    dropped: dict[str, int] = {}
    outs: list[Any] = []
    for batch in batches:
        before = {(k, x[0], x[1]) for k, xs in sessions.items() for x in xs}
        changed: dict[Any, tuple[int, int]] = {}
        expired: dict[Any, list[Any]] = {}
        for i, (k, v, ts) in enumerate(batch):
            stream_time = ts if stream_time is None else max(stream_time, ts)
            if k is None:
                dropped["null-key"] = dropped.get("null-key", 0) + 1
                continue
            cur = [x for x in sessions.get(k, []) if x[1] >= stream_time - grace - gap]
            for x in sessions.get(k, []):
                if x not in cur:
                    expired[(k, x[0], x[1])] = x
            found = [x for x in cur if x[1] >= ts - gap and x[0] <= ts + gap]
            start = min([ts] + [x[0] for x in found])
            end = max([ts] + [x[1] for x in found])
            if end < stream_time - grace:
                dropped["late-record"] = dropped.get("late-record", 0) + 1
                continue
            if op == "count":
                agg: Any = sum(x[2] for x in found) + 1
            elif op == "reduce":
                agg = None
                for x in found:
                    agg = x[2] if agg is None else agg + x[2]
                agg = v if agg is None else agg + v
            else:
                agg = 100
                for x in found:
                    agg = agg + x[2] - 100
                agg = agg + (v or 0) * 2
            newest = max([ts] + [x[3] for x in found])
            for x in found:
                changed[(k, x[0], x[1])] = (i, ts)
            rest = [x for x in cur if x not in found] + [[start, end, agg, newest]]
            sessions[k] = sorted(rest)
            changed[(k, start, end)] = (i, ts)
        now = {(k, x[0], x[1]): x for k, xs in sessions.items() for x in xs}
        emitted = []
        for sk, (_, ts) in sorted(changed.items(), key=lambda kv: kv[1][0]):
            wk = {"key": sk[0], "window": {"start": sk[1], "end": sk[2]}}
            last = now.get(sk) or expired.get(sk)
            if last is not None:
                emitted.append({"key": wk, "value": last[2], "timestamp": last[3]})
            elif sk in before:
                emitted.append({"key": wk, "value": None, "timestamp": ts})
        outs.append(emitted or None)
    return outs, {("count", "0_0", reason): n for reason, n in dropped.items()}


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
)
def test_session_windows_against_the_model(
    batches: list[list[tuple[Any, Any, int]]], op: str, gap: int, grace: int
) -> None:
    outs, _, dropped = run(processor(0, grace, True, gap=gap, op=op), batches)
    want, want_dropped = session_model(op, batches, gap, grace)
    assert outs == want
    assert dropped == want_dropped


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
