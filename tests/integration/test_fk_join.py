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
    # the stages a micro-batch apart, through internal topics: about 60 s
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


@dataclasses.dataclass
class Placed:
    tier: str
    region: str | None


@pytest.mark.extended  # seven operators a micro-batch apart: about 90 s
def test_joins_on_foreign_keys_with_other_stateful_operators(spark: Any) -> None:
    """A foreign-key join of a count whose result
    joins again on a foreign key (as Kafka's multi-join test chains two): seven operators
    in one applyInPandasWithState, each stage's messages through an internal topic. A
    count that moves to another tier retracts its old result; a deleted region leaves the
    left join's row without one; the stores answer as the semantics say."""
    b = StreamsBuilder()
    counts = (
        b.stream(Topic.jsonl("clicks", "/unused"), key_type=str, value_type=str)
        .group_by_key()
        .count(materialized=Materialized.as_("counts"))
    )
    tiers = b.table(Topic.jsonl("tiers", "/unused"), key_type=str, value_type=str)
    regions = b.table(Topic.jsonl("regions", "/unused"), key_type=str, value_type=str)
    tiered = counts.join(
        tiers,
        foreign_key_extractor=lambda n: "big" if n > 1 else "small",
        joiner=lambda n, t: t,
        materialized=Materialized.as_("tiered"),
        value_type=str,
    )
    placed = tiered.left_join(
        regions,
        foreign_key_extractor=lambda t: t,
        joiner=lambda t, r: Placed(t, r),
        materialized=Materialized.as_("placed"),
        value_type=Placed,
    )
    placed.to_stream().to(Topic.jsonl("out", "/unused"))
    cfg = StreamsConfig(application_id="fk-multi", num_partitions=2)
    with TopologyTestDriver(b.build(), cfg, session=spark) as d:
        clicks = d.create_input_topic("clicks", key_type=str, value_type=str)
        t = d.create_input_topic("tiers", key_type=str, value_type=str)
        r = d.create_input_topic("regions", key_type=str, value_type=str)
        out = d.create_output_topic("out", key_type=str, value_type=Placed)
        t.pipe_input("small", "small", timestamp=1)
        t.pipe_input("big", "big", timestamp=1)
        r.pipe_input("small", "eu", timestamp=1)
        r.pipe_input("big", "us", timestamp=1)
        clicks.pipe_input("u1", "a", timestamp=2)
        clicks.pipe_input("u2", "a", timestamp=2)
        d.process()
        first = {rec.key: rec.value for rec in out.read_records()}
        # u1's count moves it to the big tier; the big region goes
        clicks.pipe_input("u1", "b", timestamp=3)
        r.pipe_input("big", None, timestamp=4)
        d.process()
        records = [(rec.key, rec.value) for rec in out.read_records()]
        stores = {name: d.store(name) for name in ("counts", "tiered", "placed")}
        final = {name: {k: s.get(k) for k in ("u1", "u2")} for name, s in stores.items()}

    assert first == {"u1": Placed("small", "eu"), "u2": Placed("small", "eu")}
    # the changes end in each key's row of the tables as they end
    assert records[-1] == ("u1", Placed("big", None))
    assert [k for k, _ in records] == ["u1"] * len(records)
    assert final == {
        "counts": {"u1": 2, "u2": 1},
        "tiered": {"u1": "big", "u2": "small"},
        "placed": {"u1": Placed("big", None), "u2": Placed("small", "eu")},
    }
