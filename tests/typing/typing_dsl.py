"""Checked by mypy --strict (./run test): the DSL's types flow through fluent calls, and
misuse is a type error. Each ``# type: ignore[code]`` marks a line mypy must reject: with
``warn_unused_ignores`` (part of --strict), a line that stopped being an error fails the check."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import assert_type

import pyarrow.compute as pc

from kspark import JoinWindows, KStream, KTable, Materialized, StreamsBuilder, Topic


@dataclasses.dataclass
class Payment:
    id: str
    amount: float


@dataclasses.dataclass
class Rate:
    rate: float


b = StreamsBuilder()
payments = b.stream(Topic.jsonl("payments", "/p"), key_type=str, value_type=Payment)
assert_type(payments, KStream[str, Payment])

amounts = payments.map_values(lambda p: p.amount)
assert_type(amounts, KStream[str, float])

keyed = payments.map_values(lambda k, p: f"{k}:{p.id}")
assert_type(keyed, KStream[str, str])

rekeyed = payments.select_key(lambda k, p: p.id, key_type=str)
assert_type(rekeyed, KStream[str, Payment])

pairs = payments.map(lambda k, p: (p.id, int(p.amount)))
assert_type(pairs, KStream[str, int])

rates = b.table(
    Topic.jsonl("rates", "/r"),
    key_type=str,
    value_type=Rate,
    materialized=Materialized.as_versioned("rates", timedelta(hours=1)),
)
assert_type(rates, KTable[str, Rate])

converted = payments.join(rates, lambda p, r: p.amount * r.rate)
assert_type(converted, KStream[str, float])

left = payments.left_join(rates, lambda p, r: p.amount * (r.rate if r else 1.0))
assert_type(left, KStream[str, float])

# two streams: the windows by position or by name
refunds = b.stream(Topic.jsonl("refunds", "/f"), key_type=str, value_type=Payment)
within = JoinWindows.of_time_difference_with_no_grace(timedelta(minutes=5))
net = payments.join(refunds, lambda p, r: p.amount - r.amount, within)
assert_type(net, KStream[str, float])
net_by_name = payments.left_join(refunds, lambda p, r: p.amount, windows=within)
assert_type(net_by_name, KStream[str, float])

deduped = payments.deduplicate_by_key_value(lambda k, p: p.id, timedelta(minutes=1))
assert_type(deduped, KStream[str, Payment])

# vectorized steps: a function of a batch of values, the new value type given
cents = payments.map_values(
    lambda values: pc.multiply(values.field("amount"), 100), vectorized=True, value_type=float
)
assert_type(cents, KStream[str, float])
large = payments.filter(lambda values: pc.greater(values.field("amount"), 100), vectorized=True)
assert_type(large, KStream[str, Payment])
big = payments.filter_expr("amount > 100")
assert_type(big, KStream[str, Payment])

# misuse: each of these must stay a type error
payments.filter(lambda p: p.amount > 0)  # type: ignore[arg-type, misc]
payments.join(rates, lambda p, r, extra, more: p)  # type: ignore[arg-type, misc]
payments.map_values(lambda p: p.missing)  # type: ignore[attr-defined]
amounts.merge(payments)  # type: ignore[arg-type]
payments.deduplicate_by_key(60)  # type: ignore[arg-type]
payments.filter_expr(lambda k, p: p.amount > 0)  # type: ignore[arg-type]
payments.map_values(lambda values: values, vectorized=True)  # type: ignore[call-overload]
