"""A reference model of Kafka Streams' same-key table-table joins, for property tests.

Each table is a dict of its latest values; each update is applied and, as the join
processors of ``KTableKTableInnerJoin``, ``KTableKTableLeftJoin`` and
``KTableKTableOuterJoin`` decide (the sources sending old values where Kafka Streams
enables them), emits the key's joined row or a tombstone.
"""

from __future__ import annotations

from collections.abc import Callable

#: An update: side (0 left, 1 right), key, value (None: delete), timestamp
Upd = tuple[int, str | None, str | None, int]
#: An output record: key, value (None: tombstone), timestamp
Out = tuple[str, str | None, int]


def table_join_reference(
    updates: list[Upd], mode: str, joiner: Callable[[str | None, str | None], str]
) -> tuple[list[Out], dict[str, str], int]:
    """The join's output records, its final table and the number of updates dropped (a
    null key), for ``updates`` in processing order."""
    tables: tuple[dict[str, tuple[str, int]], dict[str, tuple[str, int]]] = ({}, {})
    out: list[Out] = []
    result: dict[str, str] = {}
    dropped = 0
    for side, key, value, ts in updates:
        if key is None:
            dropped += 1
            continue
        mine, theirs = tables[side], tables[1 - side]
        old = mine.get(key)
        if value is None:
            mine.pop(key, None)
        else:
            mine[key] = (value, ts)
        other = theirs.get(key)
        # Kafka Streams' rule of each processor, on the side it reads
        if mode == "inner" or (mode == "left" and side == 1):
            emit = other is not None
        else:  # an outer side: its source sends old values
            emit = other is not None or value is not None or old is not None
        if not emit:
            continue
        left, right = tables[0].get(key), tables[1].get(key)
        lv = None if left is None else left[0]
        rv = None if right is None else right[0]
        if mode == "inner":
            dead = lv is None or rv is None
        elif mode == "left":
            dead = lv is None
        else:
            dead = lv is None and rv is None
        joined = None if dead else joiner(lv, rv)
        stamp = ts if other is None else max(ts, other[1])
        out.append((key, joined, stamp))
        if joined is None:
            result.pop(key, None)
        else:
            result[key] = joined
    return out, result, dropped
