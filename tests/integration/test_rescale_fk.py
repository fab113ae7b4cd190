"""Rescale of a foreign-key join alone (orders FK-joined to customers), from 1 to 3 and
from 3 to 2 partitions between micro-batches: its output and result store are those of
the same app that never rescaled. In the 3-task layout some result tasks get no input in
the batch between the rescales, so their state is only in the files their seed names."""

from __future__ import annotations

from typing import Any

import pytest
from test_rescale_operators import fk_join

from kspark import StreamsBuilder, StreamsConfig
from kspark.testing import TopologyTestDriver

pytestmark = [pytest.mark.spark, pytest.mark.extended]

CUSTOMERS = [f"c{i}" for i in range(6)]
ORDERS = [f"o{i}" for i in range(10)]


def topology() -> Any:
    b = StreamsBuilder()
    fk_join(b)
    return b.build()


def batch(n: int) -> list[tuple[str, str, Any, int]]:
    base = n * 1_000
    recs: list[tuple[str, str, Any, int]] = []
    for i, c in enumerate(CUSTOMERS):
        if n == 0 or i % 2 == n % 2:
            recs.append(("customers", c, f"r{(i + n) % 3}", base + 10 + i))
    if n == 2:
        recs.append(("customers", "c5", None, base + 20))
    for i, o in enumerate(ORDERS):
        if n == 0 or i % 3 == n % 3:
            recs.append(("orders", o, CUSTOMERS[(i + n) % len(CUSTOMERS)], base + 30 + i))
    if n == 1:
        recs.append(("orders", "o9", None, base + 45))
    return sorted(recs, key=lambda r: r[3])


def run(spark: Any, app_id: str, rescales: dict[int, int]) -> dict[str, Any]:
    cfg = StreamsConfig(application_id=app_id, num_partitions=1)
    outputs: list[Any] = []
    with TopologyTestDriver(topology(), cfg, session=spark) as d:
        sources = {
            t: d.create_input_topic(t, key_type=str, value_type=str)
            for t in ("customers", "orders")
        }
        sink = d.create_output_topic("fk", key_type=str, value_type=str)
        for n in range(3):
            if n in rescales:
                d.rescale(rescales[n])
            for topic, k, v, ts in batch(n):
                sources[topic].pipe_input(k, v, timestamp=ts)
            d.process()
            outputs.append(
                sorted(((r.key, r.value, r.timestamp) for r in sink.read_records()), key=repr)
            )
        store = [d.store("fk").get(o) for o in ORDERS]
    return {"outputs": outputs, "store": store}


def test_a_foreign_key_join_keeps_its_answers_across_rescales(spark: Any, app_id: str) -> None:
    expected = run(spark, app_id + "-ref", {})
    got = run(spark, app_id, {1: 3, 2: 2})
    for n, (g, e) in enumerate(zip(got["outputs"], expected["outputs"], strict=True)):
        assert g == e, f"batch {n}"
    assert got["store"] == expected["store"]
    # o0 and o8 keep their batch-0 results through batch 1, where their result task of
    # the 3-task layout has no input: the rescale to 2 takes them from its seed
    assert expected["store"][0] == "c0@r2"
