"""Checked by mypy --strict (./run test): table-table joins keep the key type and take
the joiner's value type; a joiner of the wrong values is a type error."""

from __future__ import annotations

import dataclasses
from typing import assert_type

from kspark import KTable, Materialized, StreamsBuilder


@dataclasses.dataclass
class Order:
    amount: float


@dataclasses.dataclass
class Limit:
    limit: float


b = StreamsBuilder()
orders = b.table("orders", key_type=str, value_type=Order)
limits = b.table("limits", key_type=str, value_type=Limit)

checked = orders.join(limits, lambda o, lim: o.amount <= lim.limit)
assert_type(checked, KTable[str, bool])

with_key = orders.join(limits, lambda k, o, lim: f"{k}:{o.amount}", "named")
assert_type(with_key, KTable[str, str])

left = orders.left_join(
    limits, lambda o, lim: lim is None or o.amount <= lim.limit, None, Materialized.as_("left")
)
assert_type(left, KTable[str, bool])

outer = orders.outer_join(limits, lambda o, lim: o.amount if o else 0.0)
assert_type(outer, KTable[str, float])

again = checked.to_stream()
orders.join(limits, lambda o, lim: o.missing)  # type: ignore[attr-defined]
