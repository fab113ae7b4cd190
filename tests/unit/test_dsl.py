from __future__ import annotations

import dataclasses
from datetime import timedelta

import attrs
import pytest

from kspark import (
    Branched,
    Deduplicated,
    Joined,
    Materialized,
    Named,
    StreamsBuilder,
    Topic,
)
from kspark.errors import (
    InvalidArgumentError,
    InvalidTopologyError,
    KSparkError,
    TypeMappingError,
)
from kspark.plan import nodes as n
from kspark.plan.types import DYNAMIC, describe_type


@dataclasses.dataclass
class Payment:
    id: str
    amount: float


@attrs.frozen
class Rate:
    currency: str
    rate: float
    history: list[float]
    note: str | None = None


def _stream(b: StreamsBuilder) -> object:
    return b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment)


def test_every_call_returns_a_new_object_and_leaves_the_old_one_alone() -> None:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment)
    before = s.node
    f = s.filter(lambda k, v: v.amount > 0)
    assert f is not s
    assert s.node is before
    assert f.node.parents == (before,)  # type: ignore[attr-defined]


def test_generated_names_follow_kafka_streams_and_are_deterministic() -> None:
    def build() -> list[str]:
        b = StreamsBuilder()
        s = b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment)
        s.filter(lambda k, v: True).map_values(lambda v: v.amount, value_type=float).to(
            Topic.jsonl("out", "/tmp/o")
        )
        return [node.name for node in b.build().nodes()]

    assert (
        build()
        == build()
        == [
            "KSTREAM-SOURCE-0000000000",
            "KSTREAM-FILTER-0000000001",
            "KSTREAM-MAPVALUES-0000000002",
            "KSTREAM-SINK-0000000003",
        ]
    )


def test_named_processor_and_duplicate_names_are_rejected() -> None:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment)
    s.filter(lambda k, v: True, Named.as_("positive")).to(Topic.jsonl("a", "/tmp/a"))
    s.filter(lambda k, v: True, Named.as_("positive")).to(Topic.jsonl("b", "/tmp/b"))
    with pytest.raises(InvalidTopologyError, match="positive"):
        b.build()


def test_map_values_arity_selects_value_or_key_value_mapper() -> None:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment)
    one = s.map_values(lambda v: v.amount, value_type=float)
    two = s.map_values(lambda k, v: k + v.id, value_type=str)
    assert isinstance(one.node, n.MapValues) and not one.node.with_key
    assert isinstance(two.node, n.MapValues) and two.node.with_key
    with pytest.raises(InvalidArgumentError, match="argument"):
        s.map_values(lambda a, b, c: a, value_type=str)


def test_types_come_from_annotations_or_arguments() -> None:
    def to_cents(p: Payment) -> int:
        return int(p.amount * 100)

    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment)
    assert s.map_values(to_cents).node.value_type == describe_type(int)
    assert s.map_values(lambda v: v.id).node.value_type == DYNAMIC  # any JSON value
    assert s.select_key(lambda k, v: v.id, key_type=str).node.key_type == describe_type(str)


def test_type_mapping_of_records_and_containers() -> None:
    desc = describe_type(Rate)
    spark = desc.spark_json()
    assert [f["name"] for f in spark["fields"]] == ["currency", "rate", "history", "note"]
    assert spark["fields"][2]["type"] == {
        "type": "array",
        "elementType": "double",
        "containsNull": True,
    }
    with pytest.raises(TypeMappingError):
        describe_type(set[int])
    with pytest.raises(TypeMappingError):
        describe_type(int | str)


def test_invalid_arguments_have_clear_errors_with_codes() -> None:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment)
    with pytest.raises(InvalidArgumentError) as e:
        s.deduplicate_by_key(timedelta(seconds=-1))
    assert e.value.code == "KSPARK_INVALID_ARGUMENT"
    assert "KSTREAM-DEDUPLICATE" in str(e.value)
    with pytest.raises(InvalidArgumentError, match="callable"):
        s.filter("not a function")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="topic name"):
        b.stream(42, key_type=str, value_type=Payment)  # type: ignore[call-overload]
    with pytest.raises(InvalidArgumentError, match="topic name"):
        b.stream(" ", key_type=str, value_type=Payment)
    with pytest.raises(InvalidArgumentError):
        Topic.jsonl("t", "/x", layout="envelope", key_field="k")
    with pytest.raises(KSparkError):
        Named.as_("")


def test_grace_period_needs_a_versioned_table() -> None:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment)
    t = b.table(Topic.jsonl("rates", "/tmp/r"), key_type=str, value_type=float)
    with pytest.raises(InvalidTopologyError, match="versioned"):
        s.join(
            t, lambda v, r: v.amount * r, Joined.as_("j").with_grace_period(timedelta(seconds=1))
        )
    vt = b.table(
        Topic.jsonl("rates2", "/tmp/r2"),
        key_type=str,
        value_type=float,
        materialized=Materialized.as_versioned("rates-v", timedelta(hours=1)),
    )
    j = s.join(
        vt,
        lambda v, r: v.amount * r,
        Joined.with_grace_period(timedelta(seconds=1)),
        value_type=float,
    )
    assert isinstance(j.node, n.StreamTableJoin) and j.node.versioned and j.node.grace_ms == 1000


def test_option_objects_are_frozen_and_return_copies() -> None:
    d = Deduplicated.as_("x")
    d2 = d.with_store_name("s")
    assert d.store_name is None and d2.store_name == "s" and d2.name == "x"
    with pytest.raises(attrs.exceptions.FrozenInstanceError):
        d.name = "y"  # type: ignore[misc]
    m = Materialized.as_versioned("v", timedelta(minutes=5))
    assert m.with_store_name("w").store_name == "w" and m.store_name == "v"
    with pytest.raises(InvalidArgumentError):
        Materialized.as_versioned("v", timedelta(minutes=-5))


def test_split_branches_are_named_like_kafka_streams() -> None:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment)
    branches = (
        s.split(Named.as_("pay-"))
        .branch(lambda k, v: v.amount < 0, Branched.as_("refunds"))
        .branch(lambda k, v: v.amount > 1000)
        .default_branch()
    )
    assert sorted(branches) == ["pay-0", "pay-2", "pay-refunds"]


def test_merge_rejects_different_types() -> None:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment)
    t = b.stream(Topic.jsonl("other", "/tmp/o"), key_type=str, value_type=int)
    with pytest.raises(InvalidTopologyError, match="value types"):
        s.merge(t)  # type: ignore[arg-type]


def test_describe_matches_kafka_streams_layout() -> None:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment)
    s.deduplicate_by_key(timedelta(seconds=10)).repartition().to(Topic.jsonl("out", "/tmp/o"))
    text = b.build().describe()
    assert text == (
        "Topologies:\n"
        "   Sub-topology: 0\n"
        "    Source: KSTREAM-SOURCE-0000000000 (topics: [payments])\n"
        "      --> KSTREAM-DEDUPLICATE-0000000001\n"
        "    Processor: KSTREAM-DEDUPLICATE-0000000001 (stores: [KSTREAM-DEDUPLICATE-STATE-STORE-0000000002])\n"
        "      <-- KSTREAM-SOURCE-0000000000\n"
        "   Sub-topology: 1\n"
        "    Processor: KSTREAM-REPARTITION-0000000003 (stores: [])\n"
        "      --> KSTREAM-SINK-0000000004\n"
        "      <-- KSTREAM-DEDUPLICATE-0000000001\n"
        "    Sink: KSTREAM-SINK-0000000004 (topic: out)\n"
        "      <-- KSTREAM-REPARTITION-0000000003\n"
    ).rstrip("\n").replace(
        "      <-- KSTREAM-SOURCE-0000000000\n   Sub",
        "      --> KSTREAM-REPARTITION-0000000003\n      <-- KSTREAM-SOURCE-0000000000\n   Sub",
    )
    assert "flowchart LR" in b.build().to_mermaid()
    assert b.build().to_dot().startswith("digraph")


def test_topology_needs_a_sink() -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment)
    with pytest.raises(InvalidTopologyError, match="no sink"):
        b.build()


def test_to_table_makes_a_table_of_a_stream() -> None:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment)
    updates = b.stream(Topic.jsonl("rate-updates", "/tmp/u"), key_type=str, value_type=float)
    plain = updates.to_table()
    assert isinstance(plain.node, n.ToTable) and not plain.node.versioned
    assert plain.store_name.startswith("KSTREAM-TOTABLE-STATE-STORE-")
    versioned = updates.filter(lambda k, v: v > 0).to_table(
        Named.as_("rates-table"), Materialized.as_versioned("rates", timedelta(hours=1))
    )
    assert versioned.name == "rates-table" and versioned.store_name == "rates"
    assert (
        isinstance(versioned.node, n.ToTable) and versioned.node.history_retention_ms == 3_600_000
    )
    j = s.join(
        versioned,
        lambda p, r: p.amount * r,
        Joined.as_("j").with_grace_period(timedelta(seconds=1)),
    )
    assert (
        isinstance(j.node, n.StreamTableJoin) and j.node.versioned and j.node.store_name == "rates"
    )
    with pytest.raises(InvalidTopologyError, match="versioned"):
        s.join(
            plain,
            lambda p, r: p.amount * r,
            Joined.as_("j2").with_grace_period(timedelta(seconds=1)),
        )
    with pytest.raises(InvalidArgumentError, match="one Materialized"):
        updates.to_table(Materialized.as_("a"), Materialized.as_("b"))  # type: ignore[arg-type]
