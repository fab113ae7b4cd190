"""Kafka Streams' session windows, record by record, as a reference model: the table's
changes per micro-batch, the dropped records, and what the session store holds after
each batch, with or without ``Materialized.with_retention``."""

from __future__ import annotations

from typing import Any

#: a micro-batch's records: (key, value, timestamp)
Batch = list[tuple[Any, Any, int]]


def fold(op: str, aggregates: list[Any], value: Any) -> Any:
    """The aggregate of merged sessions' ``aggregates`` and a new ``value``: the model's
    functions (count; reduce: a sum; aggregate: initializer 100, aggregator ``a + 2v``,
    merger ``a + b - 100``)."""
    if op == "count":
        return sum(aggregates) + 1
    if op == "reduce":
        agg: Any = None
        for a in [*aggregates, value]:
            agg = a if agg is None else agg + a
        return agg
    agg = 100
    for a in aggregates:
        agg = agg + a - 100
    return agg + (value or 0) * 2


def session_model(
    op: str, batches: list[Batch], gap: int, grace: int, retention: int = 0
) -> tuple[list[Any], dict[str, int], list[dict[Any, list[tuple[int, int, Any]]]]]:
    """``(emitted per batch, dropped by reason, store per batch)``.

    A record merges with its key's sessions that can still take records (ending no more
    than gap plus grace before stream time) within a gap of it; a batch emits each
    session it made (latest value) and a tombstone for each session that existed before
    it and was merged away. After each batch the store keeps the sessions that end no
    more than ``max(gap + grace, retention - 1)`` before stream time: those that can
    still take records, or, with a retention, that ended within it.
    """
    sessions: dict[Any, list[list[Any]]] = {}
    stream_time: int | None = None
    dropped: dict[str, int] = {}
    outs: list[Any] = []
    stores: list[dict[Any, list[tuple[int, int, Any]]]] = []
    keep = max(gap + grace, retention - 1)
    for batch in batches:
        before = {(k, x[0], x[1]) for k, xs in sessions.items() for x in xs}
        changed: dict[Any, tuple[int, int]] = {}
        expired: dict[Any, list[Any]] = {}
        for i, (k, v, ts) in enumerate(batch):
            stream_time = ts if stream_time is None else max(stream_time, ts)
            if k is None:
                dropped["null-key"] = dropped.get("null-key", 0) + 1
                continue
            stored = sessions.get(k, [])
            open_ = [x for x in stored if x[1] >= stream_time - grace - gap]
            found = [x for x in open_ if x[1] >= ts - gap and x[0] <= ts + gap]
            start = min([ts] + [x[0] for x in found])
            end = max([ts] + [x[1] for x in found])
            if end < stream_time - grace:
                dropped["late-record"] = dropped.get("late-record", 0) + 1
                continue
            agg = fold(op, [x[2] for x in found], v)
            newest = max([ts] + [x[3] for x in found])
            for x in found:
                changed[(k, x[0], x[1])] = (i, ts)
            sessions[k] = sorted(
                [x for x in stored if x not in found] + [[start, end, agg, newest]]
            )
            changed[(k, start, end)] = (i, ts)
        if stream_time is not None:
            for k in list(sessions):
                for x in sessions[k]:
                    if x[1] < stream_time - keep:
                        expired[(k, x[0], x[1])] = x
                sessions[k] = [x for x in sessions[k] if x[1] >= stream_time - keep]
                if not sessions[k]:
                    del sessions[k]
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
        stores.append({k: [(x[0], x[1], x[2]) for x in xs] for k, xs in sessions.items()})
    return outs, dropped, stores
