"""Checked by mypy --strict (./run test): a global table keeps its key and value types; a
stream joins it on the key its selector picks, keeps its own key type and takes the
joiner's value type; a selector of the wrong key type, or a joiner of the wrong values, is
a type error."""

from __future__ import annotations

import dataclasses
from typing import assert_type

from kspark import GlobalKTable, KStream, Materialized, Named, StreamsBuilder


@dataclasses.dataclass
class Payment:
    currency: str
    amount: float


@dataclasses.dataclass
class Rate:
    rate: float


@dataclasses.dataclass
class Converted:
    amount: float


b = StreamsBuilder()
rates = b.global_table("rates", key_type=str, value_type=Rate)
assert_type(rates, GlobalKTable[str, Rate])
named = b.global_table("rates2", key_type=str, value_type=Rate, materialized=Materialized.as_("r"))
payments = b.stream("payments", key_type=int, value_type=Payment)

converted = payments.join(rates, lambda k, p: p.currency, lambda p, r: Converted(p.amount * r.rate))
assert_type(converted, KStream[int, Converted])

with_key = payments.join(rates, lambda k, p: p.currency, lambda k, p, r: f"{k}:{r.rate}", "conv")
assert_type(with_key, KStream[int, str])

left = payments.left_join(
    named,
    lambda k, p: p.currency,
    lambda p, r: 0.0 if r is None else p.amount * r.rate,
    Named.as_("left"),
)
assert_type(left, KStream[int, float])


def amount(key: int, p: Payment) -> float:
    return p.amount


payments.join(rates, amount, lambda p, r: r)  # type: ignore[arg-type]
payments.join(rates, lambda k, p: p.currency, lambda p, r: r.missing)  # type: ignore[attr-defined]
