"""Foreign-key table-table joins on a real server: a left join of records with a
changing foreign key, a fan-out of a right update, deletes, a restart from the
checkpoint, the result table's store, and keys and values of awkward sizes (an empty
key, non-ASCII, a 1 MiB value)."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kspark import Materialized, StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark

BIG = "x" * (1 << 20)


@dataclasses.dataclass
class Order:
    customer_id: str | None
    note: str


@dataclasses.dataclass
class Enriched:
    note: str
    customer: str | None


def test_a_left_join_on_a_foreign_key_across_a_restart(spark: Any) -> None:
    b = StreamsBuilder()
    orders = b.table(Topic.jsonl("orders", "/unused"), key_type=str, value_type=Order)
    customers = b.table(Topic.jsonl("customers", "/unused"), key_type=str, value_type=str)
    enriched = orders.left_join(
        customers,
        foreign_key_extractor=lambda o: o.customer_id,
        joiner=lambda o, c: Enriched(o.note, c),
        materialized=Materialized.as_("enriched"),
        value_type=Enriched,
    )
    enriched.to_stream().to(Topic.jsonl("out", "/unused"))
    cfg = StreamsConfig(application_id="fk-join", num_partitions=2)
    with TopologyTestDriver(b.build(), cfg, session=spark) as d:
        o = d.create_input_topic("orders", key_type=str, value_type=Order)
        c = d.create_input_topic("customers", key_type=str, value_type=str)
        out = d.create_output_topic("out", key_type=str, value_type=Enriched)
        c.pipe_input("c1", "Ann", timestamp=1)
        c.pipe_input("ü", "Zoë", timestamp=1)
        o.pipe_input("o1", Order("c1", "a"), timestamp=2)
        o.pipe_input("", Order("ü", "empty key"), timestamp=2)
        o.pipe_input("o3", Order("c9", BIG), timestamp=2)
        o.pipe_input("o4", Order(None, "no customer"), timestamp=2)
        d.process()
        # the foreign key of o1 moves; c9 appears
        c.pipe_input("c9", "Nine", timestamp=3)
        o.pipe_input("o1", Order("ü", "a"), timestamp=4)
        d.process()
        # a new app on the same checkpoint: the three stages' state comes back from it
        d.app.stop()
        d.app = StreamsApp(d.topology, d.config, session=spark)
        c.pipe_input("ü", "Zoë2", timestamp=5)
        o.pipe_input("o3", None, timestamp=6)
        c.pipe_input("c1", None, timestamp=7)
        d.process()
        records = [(r.key, r.value, r.timestamp) for r in out.read_records()]
        store = d.store("enriched")
        final = {k: store.get(k) for k in ("o1", "", "o3", "o4")}

    per_key: dict[str, list[Any]] = {}
    for k, v, ts in records:
        per_key.setdefault(k, []).append((v, ts))
    assert per_key["o1"] == [
        (Enriched("a", "Ann"), 2),
        (Enriched("a", "Zoë"), 4),
        (Enriched("a", "Zoë2"), 5),
    ]
    assert per_key[""] == [(Enriched("empty key", "Zoë"), 2), (Enriched("empty key", "Zoë2"), 5)]
    assert per_key["o3"] == [(Enriched(BIG, None), 2), (Enriched(BIG, "Nine"), 3), (None, 6)]
    assert per_key["o4"] == [(Enriched("no customer", None), 2)]
    assert final == {
        "o1": Enriched("a", "Zoë2"),
        "": Enriched("empty key", "Zoë2"),
        "o3": None,
        "o4": Enriched("no customer", None),
    }
