"""Checked by mypy --strict (./run test): foreign-key joins keep the left key type and
take the joiner's value type, the other table's key type being any."""

from __future__ import annotations

import dataclasses
from typing import assert_type

from kspark import KTable, Materialized, StreamsBuilder


@dataclasses.dataclass
class Order:
    customer_id: int
    amount: float


@dataclasses.dataclass
class Customer:
    name: str


b = StreamsBuilder()
orders = b.table("orders", key_type=str, value_type=Order)
customers = b.table("customers", key_type=int, value_type=Customer)

enriched = orders.join(customers, lambda o: o.customer_id, lambda o, c: f"{o.amount}:{c.name}")
assert_type(enriched, KTable[str, str])

left = orders.left_join(
    customers,
    foreign_key_extractor=lambda o: o.customer_id,
    joiner=lambda o, c: c.name if c else "",
    materialized=Materialized.as_("enriched"),
)
assert_type(left, KTable[str, str])
orders.join(customers, lambda o: o.customer_id, lambda o, c: c.missing)  # type: ignore[attr-defined]
