"""Stateless operators end to end on the real server, through the test driver."""

from __future__ import annotations

import dataclasses
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from kspark import Branched, Named, StreamsBuilder, StreamsConfig, Topic
from kspark.errors import LogAndContinueProcessingExceptionHandler
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark


@dataclasses.dataclass
class Order:
    id: str
    qty: int
    tags: list[str]


def cfg(app_id: str) -> StreamsConfig:
    return StreamsConfig(application_id=app_id, num_partitions=2)


def test_operator_chain_and_branches(spark: Any, app_id: str) -> None:
    b = StreamsBuilder()
    orders = b.stream(Topic.jsonl("orders", "/unused"), key_type=str, value_type=Order)
    big = orders.filter(lambda k, v: v.qty >= 10).map_values(lambda v: v.qty * 2, value_type=int)
    big.to(Topic.jsonl("big", "/unused"))
    orders.filter_not(lambda k, v: v.qty >= 10).flat_map_values(
        lambda k, v: [f"{k}:{t}" for t in v.tags], value_type=str
    ).to(Topic.jsonl("tags", "/unused"))
    orders.map(lambda k, v: (v.id, v.qty), key_type=str, value_type=int).select_key(
        lambda k, v: k.upper(), key_type=str
    ).to(Topic.jsonl("by-id", "/unused"))
    branches = (
        orders.split(Named.as_("b-"))
        .branch(lambda k, v: "urgent" in v.tags, Branched.as_("urgent"))
        .default_branch(Branched.as_("rest"))
    )
    branches["b-urgent"].merge(branches["b-rest"].filter(lambda k, v: v.qty == 1)).to(
        Topic.jsonl("merged", "/unused")
    )
    with TopologyTestDriver(b.build(), cfg(app_id), session=spark) as d:
        src = d.create_input_topic("orders", key_type=str, value_type=Order)
        src.pipe_input("a", Order("o1", 12, ["x"]), timestamp=1)
        src.pipe_input("b", Order("o2", 1, ["urgent", "y"]), timestamp=2)
        src.pipe_input("c", Order("o3", 3, []), timestamp=3)
        src.pipe_input(None, Order("o4", 20, ["urgent"]), timestamp=4, headers=[("h", b"1")])
        big = d.create_output_topic("big", key_type=str, value_type=int).read_records()
        assert [(r.key, r.value, r.timestamp) for r in big] == [("a", 24, 1), (None, 40, 4)]
        assert big[1].headers == (("h", b"1"),)
        tags = d.create_output_topic("tags", key_type=str, value_type=str).read_key_values()
        assert tags == [("b", "b:urgent"), ("b", "b:y")]
        by_id = d.create_output_topic("by-id", key_type=str, value_type=int).read_key_values()
        assert by_id == [("O1", 12), ("O2", 1), ("O3", 3), ("O4", 20)]
        merged = d.create_output_topic("merged", key_type=str, value_type=Order).read_values()
        assert sorted(o.id for o in merged) == ["o2", "o4"]


def test_peek_and_records_across_batches(spark: Any, app_id: str) -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", "/unused"), key_type=str, value_type=int).peek(
        lambda k, v: None
    ).map_values(lambda k, v: f"{k}={v}", value_type=str).to(Topic.jsonl("out", "/unused"))
    with TopologyTestDriver(b.build(), cfg(app_id), session=spark) as d:
        src = d.create_input_topic("in", key_type=str, value_type=int)
        out = d.create_output_topic("out", key_type=str, value_type=str)
        src.pipe_input("x", 1, timestamp=10)
        assert out.read_values() == ["x=1"]
        src.pipe_records([("y", 2, 11), ("z", 3, 12)])
        records = out.read_records()
        assert [r.value for r in records] == ["y=2", "z=3"]
        assert [r.offset for r in records] == [1, 2]  # positions in the output topic
        assert d.metrics().input_records == 3


def _per_unit(orders: pa.Array) -> pa.Array:
    qty = orders.field("qty")
    if pc.any(pc.equal(qty, 13)).as_py():
        raise ValueError("13 is unlucky")
    return pc.divide(120.0, qty)


def test_vectorized_steps_and_their_failures(spark: Any, app_id: str) -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("orders", "/unused"), key_type=str, value_type=Order).filter(
        lambda orders: pc.greater_equal(orders.field("qty"), 3), vectorized=True
    ).map_values(_per_unit, vectorized=True, value_type=float).to(Topic.jsonl("out", "/unused"))
    config = StreamsConfig(
        application_id=app_id,
        num_partitions=2,
        processing_exception_handler=LogAndContinueProcessingExceptionHandler,
    )
    with TopologyTestDriver(b.build(), config, session=spark) as d:
        src = d.create_input_topic("orders", key_type=str, value_type=Order)
        src.pipe_input("a", Order("o1", 12, ["x"]), timestamp=1)
        src.pipe_input("b", Order("o2", 1, []), timestamp=2)
        src.pipe_input("c", Order("o3", 13, []), timestamp=3)
        src.pipe_input("d", Order("o4", 3, []), timestamp=4)
        out = d.create_output_topic("out", key_type=str, value_type=float).read_key_values()
        # the batch that raised ran again record by record: only "c" failed
        assert sorted(out) == [("a", 10.0), ("d", 40.0)]
        assert d.metrics().dropped_by_processor() == {"KSTREAM-MAPVALUES-0000000002": 1}
