"""The processing order of a task's micro-batch (kspark_server.operators.arrow.order) against a
reference model: offset order per (topic, partition), merged by head timestamp."""

from __future__ import annotations

import heapq
from typing import Any

import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from kspark_server.operators.arrow import order


def reference(rows: list[dict[str, Any]]) -> list[int]:
    queues: dict[tuple[str, int], list[int]] = {}
    for i, r in enumerate(rows):
        queues.setdefault((r["topic"], r["partition"]), []).append(i)
    lists = [
        sorted(q, key=lambda i: (rows[i]["ks_seq"], rows[i]["ks_sub"])) for q in queues.values()
    ]

    def head(i: int) -> tuple[int, int, int, int]:
        r = rows[i]  # a table update (ks_jside 1) before a stream record at equal times
        return (r["timestamp"], 1 - r.get("ks_jside", 0), r["ks_seq"], r["ks_sub"])

    heads = [(*head(q[0]), n, 0) for n, q in enumerate(lists)]
    heapq.heapify(heads)
    out = []
    while heads:
        *_, n, j = heapq.heappop(heads)
        out.append(lists[n][j])
        if j + 1 < len(lists[n]):
            heapq.heappush(heads, (*head(lists[n][j + 1]), n, j + 1))
    return out


row = st.fixed_dictionaries(
    {
        "topic": st.sampled_from(["a", "b", "c"]),
        "partition": st.integers(0, 1),
        "ks_seq": st.integers(0, 6),
        "ks_sub": st.integers(0, 1),
        "timestamp": st.integers(0, 6),
        "ks_jside": st.integers(0, 1),
    }
)


@settings(max_examples=500, deadline=None)
@given(rows=st.lists(row, min_size=1, max_size=14), rising=st.booleans())
def test_order_matches_the_head_timestamp_merge(rows: list[dict[str, Any]], rising: bool) -> None:
    if rising:  # the usual case: timestamps rise with offsets (the numpy fast path)
        rows = sorted(rows, key=lambda r: (r["ks_seq"], r["ks_sub"]))
        stamps = sorted(r["timestamp"] for r in rows)
        rows = [
            dict(r, ks_seq=i, timestamp=t)
            for i, (r, t) in enumerate(zip(rows, stamps, strict=True))
        ]
    frame = pd.DataFrame(rows)

    def key(i: int) -> tuple[Any, ...]:
        r = rows[i]  # equal positions make the order ambiguous: compare what is ordered
        return (r["topic"], r["partition"], r["ks_seq"], r["ks_sub"], r["timestamp"], r["ks_jside"])

    assert [key(i) for i in order(frame).tolist()] == [key(i) for i in reference(rows)]
