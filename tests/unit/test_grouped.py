"""Plan-only tests of grouping and aggregation: names, node properties, describe(), the
compiled operator specs, validation; and the operator's pure parts."""

from __future__ import annotations

import dataclasses
from datetime import timedelta

import pytest

from kspark import (
    Grouped,
    Materialized,
    Named,
    StreamsBuilder,
    StreamsConfig,
    Suppressed,
    TimeWindows,
    Topic,
    Window,
    Windowed,
)
from kspark.compiler import compile_topology
from kspark.compiler import stages as st
from kspark.errors import InvalidArgumentError, InvalidTopologyError
from kspark.plan.grouped import Aggregate, Suppress
from kspark_server import codec
from kspark_server.spec import AggregateSpec, PrimSpec, RecordSpec, SpecError
from kspark_server.windows import windows_for

CFG = StreamsConfig(application_id="grouped-test", num_partitions=3)


@dataclasses.dataclass
class Payment:
    currency: str
    amount: float


def _aggregates(topology: object) -> list[st.Stateful]:
    out = compile_topology(topology, CFG)  # type: ignore[arg-type]
    return [s for s in out.stages() if isinstance(s, st.Stateful)]


def test_names_follow_kafka_streams_store_first_then_processor() -> None:
    b = StreamsBuilder()
    s = b.stream("in", key_type=str, value_type=int)
    c = s.group_by_key().count()
    r = s.group_by_key().reduce(lambda a, v: a + v)
    a = s.group_by_key().aggregate(lambda: 0, lambda k, v, t: t + v, Named.as_("sum"))
    assert (c.name, c.store_name) == (
        "KSTREAM-AGGREGATE-0000000002",
        "KSTREAM-AGGREGATE-STATE-STORE-0000000001",
    )
    assert (r.name, r.store_name) == (
        "KSTREAM-REDUCE-0000000004",
        "KSTREAM-REDUCE-STATE-STORE-0000000003",
    )
    assert (a.name, a.store_name) == ("sum", "KSTREAM-AGGREGATE-STATE-STORE-0000000005")
    named = s.group_by_key().count(materialized=Materialized.as_("counts"))
    assert named.store_name == "counts"


def test_group_by_repartitions_and_group_by_key_only_after_a_key_change() -> None:
    b = StreamsBuilder()
    s = b.stream("in", key_type=str, value_type=Payment)
    plain = s.group_by_key().count().node
    assert isinstance(plain, Aggregate) and plain.stateful and not plain.repartitions
    rekeyed = s.select_key(lambda k, p: p.currency, key_type=str).group_by_key().count().node
    assert rekeyed.repartitions
    by = s.group_by(lambda k, p: p.currency, Grouped.as_("by-currency"), key_type=str).count()
    assert by.node.repartitions and by.node.key_type.display() == "str"
    assert isinstance(by.node, Aggregate) and by.node.grouped_name == "by-currency"
    after_repartition = s.select_key(lambda k, p: p.currency, key_type=str).repartition()
    assert not after_repartition.group_by_key().count().node.repartitions
    # a keyed stateful operator after the key change has grouped by the new key already
    deduped = s.select_key(lambda k, p: p.currency, key_type=str).deduplicate_by_key(
        timedelta(seconds=1)
    )
    assert not deduped.group_by_key().count().node.repartitions
    by_id = s.deduplicate(lambda k, p: p.currency, timedelta(seconds=1))
    assert by_id.group_by_key().count().node.repartitions


def test_describe_splits_sub_topologies_and_names_the_operator() -> None:
    b = StreamsBuilder()
    (
        b.stream("payments", key_type=str, value_type=Payment)
        .group_by(lambda k, p: p.currency, key_type=str)
        .windowed_by(TimeWindows.of_size_with_no_grace(timedelta(minutes=1)))
        .count()
        .suppress(Suppressed.until_window_closes())
        .to_stream()
        .to("out")
    )
    text = b.build().describe()
    assert "Sub-topology: 1" in text
    assert (
        "Processor: KSTREAM-AGGREGATE-0000000003 (stores: [KSTREAM-AGGREGATE-STATE-STORE-0000000002])"
        " [operator: kspark task operator (per-task state)]"
    ) in text
    assert "Processor: KTABLE-SUPPRESS-0000000004 (stores: []) [operator: fused into" in text


def test_count_compiles_to_the_aggregate_operator() -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=Payment).group_by_key().count(
        materialized=Materialized.as_("counts")
    ).to_stream().to(Topic.jsonl("out", "/tmp/out"))
    (stage,) = _aggregates(b.build())
    spec = stage.spec
    assert isinstance(spec, AggregateSpec)
    assert (spec.op, spec.store, spec.window_size_ms, spec.suppress) == (
        "count",
        "counts",
        0,
        False,
    )
    assert spec.output.value == PrimSpec(spark="long")
    assert spec.packed.value and not spec.packed.out  # a record value travels as JSON text
    assert stage.task_column == "key" and stage.num_partitions == 3


def test_windowed_aggregate_has_a_windowed_key_and_suppress_fuses_into_it() -> None:
    b = StreamsBuilder()
    w = TimeWindows.of_size_and_grace(timedelta(seconds=10), timedelta(seconds=2)).advance_by(
        timedelta(seconds=5)
    )
    t = (
        b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=Payment)
        .group_by_key()
        .windowed_by(w)
        .aggregate(lambda: 0.0, lambda k, p, total: total + p.amount, value_type=float)
    )
    t.suppress(Suppressed.until_window_closes().with_name("final")).to_stream().to(
        Topic.jsonl("out", "/tmp/out")
    )
    (stage,) = _aggregates(b.build())
    spec = stage.spec
    assert isinstance(spec, AggregateSpec)
    assert (spec.window_size_ms, spec.window_advance_ms, spec.grace_ms) == (10_000, 5_000, 2_000)
    assert spec.suppress and spec.processor == t.name
    assert isinstance(spec.output.key, RecordSpec) and spec.output.key.cls is Windowed
    assert stage.key_type.display() == "Windowed"


def test_a_suppressed_table_must_be_read_only_through_the_suppression() -> None:
    b = StreamsBuilder()
    w = TimeWindows.of_size_with_no_grace(timedelta(seconds=10))
    t = b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int).group_by_key()
    counts = t.windowed_by(w).count()
    counts.suppress(Suppressed.until_window_closes()).to_stream().to(Topic.jsonl("a", "/tmp/a"))
    counts.to_stream().to(Topic.jsonl("b", "/tmp/b"))
    with pytest.raises(InvalidTopologyError, match="also read by"):
        compile_topology(b.build(), CFG)


def test_invalid_uses_fail_when_the_plan_is_built() -> None:
    b = StreamsBuilder()
    s = b.stream("in", key_type=str, value_type=int)
    with pytest.raises(InvalidTopologyError, match="windowed aggregation"):
        s.group_by_key().count().suppress(Suppressed.until_window_closes())
    with pytest.raises(InvalidArgumentError, match="versioned"):
        s.group_by_key().count(
            materialized=Materialized.as_versioned("v", history_retention=timedelta(hours=1))
        )
    with pytest.raises(InvalidArgumentError, match="advance"):
        TimeWindows.of_size_with_no_grace(timedelta(seconds=5)).advance_by(timedelta(seconds=6))
    with pytest.raises(InvalidArgumentError, match="positive"):
        TimeWindows.of_size_with_no_grace(timedelta(0))
    with pytest.raises(InvalidArgumentError, match="callable"):
        s.group_by_key().reduce(42)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="TimeWindows"):
        s.group_by_key().windowed_by(timedelta(seconds=1))  # type: ignore[arg-type]


def test_aggregate_specs_check_themselves() -> None:
    from kspark_server.spec import KeyValue, Packed

    kv = KeyValue(key=PrimSpec(spark="string"), value=PrimSpec(spark="long"))
    base = {
        "processor": "p",
        "store": "s",
        "input": kv,
        "output": kv,
        "output_schema": "{}",
        "packed": Packed(),
    }
    assert AggregateSpec(op="count", **base).kind == "aggregate"  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="reducer"):
        AggregateSpec(op="reduce", **base)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="advance"):
        AggregateSpec(op="count", window_size_ms=10, window_advance_ms=20, **base)  # type: ignore[arg-type]
    with pytest.raises(SpecError, match="suppression"):
        AggregateSpec(op="count", suppress=True, **base)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("ts", "size", "advance", "starts"),
    [
        (0, 10, 10, [0]),
        (9, 10, 10, [0]),
        (10, 10, 10, [10]),
        (12, 10, 5, [5, 10]),
        (3, 10, 5, [0]),  # no window starts before 0
        (29, 30, 10, [0, 10, 20]),
    ],
)
def test_windows_for_is_kafka_streams_time_windows(
    ts: int, size: int, advance: int, starts: list[int]
) -> None:
    assert windows_for(ts, size, advance) == starts
    assert all(s <= ts < s + size for s in starts)


def test_windowed_keys_round_trip_through_their_codec() -> None:
    from kspark.plan.grouped import windowed_type
    from kspark.plan.types import describe_type

    spec = windowed_type(describe_type(str)).spec()
    cell = codec.encoder(spec)(Windowed("EUR", Window(0, 60_000)))
    assert cell == {"key": "EUR", "window": {"start": 0, "end": 60_000}}
    assert codec.decoder(spec)(cell) == Windowed("EUR", Window(0, 60_000))


def test_suppress_node_checks_its_parent() -> None:
    b = StreamsBuilder()
    s = b.stream("in", key_type=str, value_type=int)
    with pytest.raises(InvalidTopologyError):
        Suppress(name="x", parent=s.node, key_type=None, value_type=None)


def test_aggregated_tables_take_filter_and_map_values_as_steps_after_the_operator() -> None:
    b = StreamsBuilder()
    counts = b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int).group_by_key()
    t = counts.count(materialized=Materialized.as_("n")).filter(lambda k, n: n > 1)
    t = t.map_values(lambda n: f"{n}x", value_type=str)
    assert t.store_name == "n"
    t.to_stream().to(Topic.jsonl("out", "/tmp/out"))
    out = compile_topology(b.build(), CFG)
    chains = [s for s in out.stages() if isinstance(s, st.Chain)]
    (chain,) = chains
    assert isinstance(chain.input, st.Stateful)
    assert [s.op for s in chain.spec.steps] == ["table_filter", "table_map_values"]


def test_session_windows_compile_with_their_gap_and_merger() -> None:
    from kspark import SessionWindows

    b = StreamsBuilder()
    w = SessionWindows.of_inactivity_gap_and_grace(timedelta(minutes=5), timedelta(seconds=30))
    g = b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int).group_by_key()
    t = g.windowed_by(w).aggregate(lambda: 0, lambda k, v, a: a + v, lambda k, a, c: a + c)
    t.to_stream().to(Topic.jsonl("out", "/tmp/out"))
    (stage,) = _aggregates(b.build())
    spec = stage.spec
    assert isinstance(spec, AggregateSpec)
    assert (spec.session_gap_ms, spec.grace_ms, spec.window_size_ms) == (300_000, 30_000, 0)
    assert spec.merger is not None and stage.key_type.display() == "Windowed"
    with pytest.raises(InvalidTopologyError, match="TimeWindows"):
        g.windowed_by(w).count().suppress(Suppressed.until_window_closes())
    with pytest.raises(InvalidArgumentError, match="positive"):
        SessionWindows.of_inactivity_gap_with_no_grace(timedelta(0))


@pytest.mark.parametrize("materialized", [None, "counts"])
def test_a_stream_joins_an_aggregated_table_with_a_store_of_its_own(
    materialized: str | None,
) -> None:
    b = StreamsBuilder()
    s = b.stream("in", key_type=str, value_type=int)
    other = b.stream("o", key_type=str, value_type=int)
    mat = Materialized.as_(materialized) if materialized else None
    counts = s.group_by_key().count(materialized=mat)
    other.join(counts, lambda v, c: v + c).to("out")
    other.left_join(counts, lambda v, c: v + (c or 0)).to("out2")
    topo = b.build()  # the aggregation and both joins each own a store
    owners = topo.stores()
    assert owners[counts.store_name] == counts.name
    assert len(owners) == 3


def test_a_long_value_pandas_held_as_a_float_decodes_to_an_int() -> None:
    dec = codec.decoder(PrimSpec(spark="long"))
    assert dec(2.0) == 2 and type(dec(2.0)) is int
    assert dec(None) is None and dec(7) == 7
