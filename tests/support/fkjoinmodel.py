"""A reference model of Kafka Streams' foreign-key table-table joins (KIP-213), for
property tests.

The result of a foreign-key join is a function of the two tables as they end: each left
key whose value has a foreign key with a right value joins it; in a left join every left
key has a result, ``joiner(value, None)`` where there is no right value (or no foreign
key). Between the ends, the changelog must never step back to an older left value of a
key (KIP-213's guarantee, which Kafka Streams keeps with a hash of the left value).
"""

from __future__ import annotations

from collections.abc import Callable

#: An update: side (0 left, 1 right), key, value (None: delete), timestamp
Upd = tuple[int, str | None, str | None, int]


def fk_join_reference(
    updates: list[Upd],
    mode: str,
    foreign_key: Callable[[str], str | None],
    joiner: Callable[[str, str | None], str],
) -> dict[str, str]:
    """The join's final table for ``updates`` (a null key is skipped)."""
    tables: tuple[dict[str, str], dict[str, str]] = ({}, {})
    for side, key, value, _ in updates:
        if key is None:
            continue
        if value is None:
            tables[side].pop(key, None)
        else:
            tables[side][key] = value
    left, right = tables
    result: dict[str, str] = {}
    for k, lv in left.items():
        fk = foreign_key(lv)
        rv = None if fk is None else right.get(fk)
        if rv is not None or mode == "left":
            result[k] = joiner(lv, rv)
    return result
