"""Checked by mypy --strict: ``KTable.group_by`` and ``KGroupedTable`` keep their types,
and misuse is a type error (each ``# type: ignore[code]`` line must stay an error)."""

from __future__ import annotations

import dataclasses
from typing import assert_type

from kspark import Grouped, KGroupedTable, KTable, Materialized, Named, StreamsBuilder


@dataclasses.dataclass
class Customer:
    name: str
    region: str
    credit: float


b = StreamsBuilder()
customers = b.table("customers", key_type=str, value_type=Customer)

by_region = customers.group_by(lambda k, c: (c.region, c), key_type=str, value_type=Customer)
assert_type(by_region, KGroupedTable[str, Customer])
named = customers.group_by(lambda k, c: (len(c.name), c.credit), Grouped.as_("by-length"))
assert_type(named, KGroupedTable[int, float])

counts = by_region.count(Named.as_("n"), Materialized.as_("per-region"))
assert_type(counts, KTable[str, int])

best = by_region.reduce(
    lambda a, c: a if a.credit >= c.credit else c, lambda a, c: a if a.name != c.name else c
)
assert_type(best, KTable[str, Customer])

credit = by_region.aggregate(
    lambda: 0.0,
    lambda region, c, total: total + c.credit,
    lambda region, c, total: total - c.credit,
    materialized=Materialized.as_("credit"),
)
assert_type(credit, KTable[str, float])
assert_type(credit.to_stream().node.name, str)

# the subtractor is required, and takes the group key, the value and the aggregate
by_region.aggregate(lambda: 0.0, lambda region, c, total: total + c.credit)  # type: ignore[call-arg]
by_region.reduce(lambda a, c: c)  # type: ignore[call-arg]
by_region.aggregate(lambda: 0.0, lambda r, c, t: t, lambda c, t: t)  # type: ignore[arg-type, misc]


# the selector returns a (group key, value) pair
def region_only(key: str, c: Customer) -> str:
    return c.region


customers.group_by(region_only)  # type: ignore[arg-type]
