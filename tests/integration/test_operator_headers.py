"""Headers cross the stateful operators as Arrow columns (kspark_server.transport): a
record's headers, binary values and null values included, come out of each operator as
they went in."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from kspark import Materialized, StreamsBuilder, StreamsConfig
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark

HEADERS = [("trace", b"\x00\xffid"), ("empty", None), ("trace", b"second")]


@dataclasses.dataclass
class Pay:
    id: str
    amount: int


def test_headers_survive_dedup_and_a_versioned_join(spark: Any, app_id: str) -> None:
    b = StreamsBuilder()
    rates = b.table(
        "rates",
        key_type=str,
        value_type=int,
        materialized=Materialized.as_versioned("rates-store", timedelta(days=1)),
    )
    pays = b.stream("pays", key_type=str, value_type=Pay)
    # by key: the operator never reads the value, which then crosses by reference too
    pays.deduplicate_by_key(timedelta(minutes=1)).to("deduped")
    pays.left_join(rates, lambda p, r: p.amount * (r or 0), value_type=int).to("joined")
    config = StreamsConfig(application_id=app_id, num_partitions=2)
    with TopologyTestDriver(b.build(), config, session=spark) as d:
        d.create_input_topic("rates", key_type=str, value_type=int).pipe_input(
            "EUR", 3, timestamp=1, headers=[("rate", b"r")]
        )
        src = d.create_input_topic("pays", key_type=str, value_type=Pay)
        src.pipe_input("EUR", Pay("p1", 10), timestamp=5, headers=HEADERS)
        src.pipe_input("EUR", Pay("p1", 10), timestamp=6, headers=[("dup", b"x")])
        src.pipe_input("USD", Pay("p2", 7), timestamp=7)
        deduped = d.create_output_topic("deduped", key_type=str, value_type=Pay).read_records()
        assert [(r.key, r.value, r.headers) for r in deduped] == [
            ("EUR", Pay("p1", 10), tuple(HEADERS)),
            ("USD", Pay("p2", 7), ()),
        ]
        joined = d.create_output_topic("joined", key_type=str, value_type=int).read_records()
        assert [(r.key, r.value, r.headers) for r in joined] == [
            ("EUR", 30, tuple(HEADERS)),
            ("EUR", 30, (("dup", b"x"),)),
            ("USD", 0, ()),
        ]
