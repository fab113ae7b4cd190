"""A reference model of Kafka Streams' windowed stream-stream join, for property tests."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: A record: side (0 left, 1 right), key, value, timestamp
Rec = tuple[int, str | None, str | None, int]


def stream_join_reference(
    records: list[tuple[int, Rec]],
    mode: str,
    before: int,
    after: int,
    grace: int,
    joiner: Callable[[str | None, str | None], str],
) -> tuple[list[tuple[str | None, str, int]], int]:
    """Kafka Streams' stream-stream join, literally: every accepted record is kept for
    ever; stream time is the largest timestamp seen; a record is late when stream time has
    passed its window end plus grace; a record that joined nothing is emitted with None
    once stream time passes its window end plus grace (outer sides only)."""
    look = (after, before)
    outer = (mode in ("left", "outer"), mode == "outer")
    kept: list[dict[str, Any]] = []
    out: list[tuple[str | None, str, int]] = []
    late = 0
    tau: int | None = None

    def value(side: int, mine: str | None, other: str | None) -> str:
        return joiner(mine, other) if side == 0 else joiner(other, mine)

    for seq, (side, key, v, ts) in records:
        if tau is None or ts > tau:
            tau = ts
            closed = [r for r in kept if r["wait"] and r["ts"] + look[r["side"]] + grace < tau]
            closed.sort(
                key=lambda r: (r["ts"] + look[r["side"]] + grace, r["ts"], r["side"], r["seq"])
            )
            for r in closed:
                r["wait"] = False
                out.append((r["key"], value(r["side"], r["v"], None), r["ts"]))
        if v is None:
            continue
        if key is None:
            if outer[side]:
                out.append((None, value(side, v, None), ts))
            continue
        if ts + look[side] + grace < tau:
            late += 1
            continue
        lo, hi = (ts - before, ts + after) if side == 0 else (ts - after, ts + before)
        matches = sorted(
            (o for o in kept if o["side"] != side and o["key"] == key and lo <= o["ts"] <= hi),
            key=lambda o: (o["ts"], o["seq"]),
        )
        for o in matches:
            o["wait"] = False
            out.append((key, value(side, v, o["v"]), max(ts, o["ts"])))
        kept.append(
            {
                "side": side,
                "key": key,
                "v": v,
                "ts": ts,
                "seq": seq,
                "wait": outer[side] and not matches,
            }
        )
    return out, late


def processing_order(batch: list[tuple[int, Rec]]) -> list[tuple[int, Rec]]:
    """One task's batch in the operator's processing order (kspark_server.operators.arrow.order):
    each stream in offset order, the two merged by timestamp, the right stream first at
    equal timestamps. ``batch`` holds (position, record) in the order they were piped."""
    import pandas as pd

    from kspark_server.operators.arrow import order

    frame = pd.DataFrame(
        {
            "ks_seq": [seq for seq, _ in batch],
            "ks_sub": [0] * len(batch),
            "topic": ["R" if r[0] else "L" for _, r in batch],
            "partition": [0] * len(batch),
            "timestamp": [r[3] for _, r in batch],
            "ks_jside": [r[0] for _, r in batch],
        }
    )
    return [batch[int(p)] for p in order(frame)]
