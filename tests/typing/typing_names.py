"""Checked by mypy --strict: topologies that name their topics, typed and untyped forms.

A key or value with no declared type is dynamic at run time and ``Any`` for mypy; one that
is declared keeps its precise type. ``# type: ignore[code]`` lines must stay errors."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any, assert_type

from kspark import KStream, KTable, Materialized, StreamsBuilder, StreamsConfig, Topic
from kspark.plan.types import TypeDesc
from kspark.testing import TestInputTopic, TestOutputTopic, TopologyTestDriver


@dataclasses.dataclass
class Order:
    id: str
    qty: int


b = StreamsBuilder()

untyped = b.stream("events")
assert_type(untyped, KStream[Any, Any])
tens = untyped.filter(lambda k, v: v > 0).map_values(lambda v: v * 10)
tens.to("tens")

half = b.stream("orders", value_type=Order)
assert_type(half, KStream[Any, Order])
typed = b.stream("orders", key_type=str, value_type=Order)
assert_type(typed, KStream[str, Order])
keyed = b.stream("orders", key_type=str)
assert_type(keyed, KStream[str, Any])
shaped = b.stream("docs", key_type=str, value_type=dict)
assert_type(shaped, KStream[str, dict[Any, Any]])
anything: KStream[str, Any] = b.stream("docs", key_type=str, value_type=Any)
lists = b.stream("lists", value_type=list)
assert_type(lists, KStream[Any, list[Any]])

rates = b.table("rates", materialized=Materialized.as_versioned("rates", timedelta(hours=1)))
assert_type(rates, KTable[Any, Any])
typed_rates = b.table("rates-typed", key_type=str, value_type=float)
assert_type(typed_rates, KTable[str, float])

joined = typed.left_join(rates, lambda o, r: {"id": o.id, "rate": r})
joined.to("joined")
deduped = untyped.deduplicate_by_key_value(lambda k, v: v["id"], timedelta(minutes=5))
deduped.to(Topic.jsonl("deduped", "/data/deduped"))

b.stream(42)  # type: ignore[call-overload]

config = StreamsConfig(
    application_id="names",
    topics={"rates": Topic.parquet("rates", "/lake/rates")},
    bootstrap_servers=None,
    data_dir="/data",
)

driver = TopologyTestDriver(b.build(), config)
src_any = driver.create_input_topic("events")
assert_type(src_any, TestInputTopic[Any, Any])
src_dict = driver.create_input_topic("docs", key_type=str, value_type=dict)
assert_type(src_dict, TestInputTopic[str, dict[Any, Any]])
out_typed = driver.create_output_topic("tens", key_type=str, value_type=int)
assert_type(out_typed, TestOutputTopic[str, int])
out_any = driver.create_output_topic("joined")
assert_type(out_any, TestOutputTopic[Any, Any])

# a Topic with a schema: keyword-only key_type= and value_type= on every factory
schema_topics = {
    "orders": Topic.jsonl("orders", "/data/orders", layout="value", value_type=Order),
    "out": Topic.parquet("out", "/data/out", key_type=str, value_type=int),
    "rows": Topic.csv("rows", "/data/rows", header=True, value_type=Order),
    "lake": Topic.table("lake", "db.lake", key_type=str),
    "events": Topic.kafka("events", "k:9092", value_type=dict, startingOffsets="earliest"),
}
assert_type(schema_topics["out"].value_type, TypeDesc | None)
