"""A reference model of Kafka Streams' ``KTable.groupBy`` followed by ``count``, ``reduce``
or ``aggregate`` (``KTableRepartitionMap`` then ``KTableAggregate``/``KTableReduce``),
record by record, with a record cache flushed once per micro-batch: each batch emits, per
group it changed, the group's latest aggregate once, in the order of each group's last
change."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

#: a source table update: key, value (None deletes), timestamp
Update = tuple[str | None, Any, int]
#: an emitted row: group, aggregate (None: a tombstone), timestamp
Row = tuple[Any, Any, int]


def changes(
    updates: list[Update], selector: Callable[[Any, Any], tuple[Any, Any]]
) -> tuple[list[tuple[Any, Any, Any, int]], int]:
    """The ``(group, new, old, timestamp)`` records the re-keying forwards for
    ``updates`` (one source task's, in order), and how many updates or selections it
    dropped (a null source key, a selection with a null key or value)."""
    table: dict[Any, Any] = {}
    out: list[tuple[Any, Any, Any, int]] = []
    dropped = 0
    for key, value, ts in updates:
        if key is None:
            dropped += 1
            continue
        old = table.pop(key, None)
        new = None
        if value is not None:
            gk, gv = selector(key, value)
            if gk is None or gv is None:
                dropped += 1
            else:
                new = (gk, gv)
                table[key] = new
        if old is not None and new is not None and old[0] == new[0]:
            out.append((new[0], new[1], old[1], ts))
            continue
        if old is not None:
            out.append((old[0], None, old[1], ts))
        if new is not None:
            out.append((new[0], new[1], None, ts))
    return out, dropped


def aggregate(
    records: list[tuple[Any, Any, Any, int]],
    op: str,
    fns: dict[str, Callable[..., Any]],
    aggs: dict[Any, tuple[Any, int]],
) -> list[Row]:
    """Apply one batch's change records to the group aggregates ``aggs`` (group ->
    (aggregate, timestamp), updated in place); the rows the batch emits."""
    last: dict[Any, int] = {}
    for i, (group, new, old, ts) in enumerate(records):
        prior = aggs.get(group)
        agg = None if prior is None else prior[0]
        if old is not None and agg is not None:
            if op == "count":
                agg = agg - 1
            elif op == "reduce":
                agg = fns["subtractor"](agg, old)
            else:
                agg = fns["subtractor"](group, old, agg)
        if new is not None:
            if op == "count":
                agg = (agg or 0) + 1
            elif op == "reduce":
                agg = new if agg is None else fns["adder"](agg, new)
            else:
                start = fns["initializer"]() if agg is None else agg
                agg = fns["adder"](group, new, start)
        newest = ts if prior is None else max(ts, prior[1])
        if agg is None:
            aggs.pop(group, None)
            aggs[(_GONE, group)] = (None, ts)
        else:
            aggs.pop((_GONE, group), None)
            aggs[group] = (agg, newest)
        last[group] = i
    rows: list[Row] = []
    for group, _ in sorted(last.items(), key=lambda kv: kv[1]):
        if group in aggs:
            rows.append((group, aggs[group][0], aggs[group][1]))
        else:
            rows.append((group, None, aggs.pop((_GONE, group))[1]))
    return rows


_GONE = object()
