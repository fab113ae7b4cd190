"""The test driver's in-process engine without Spark: what it runs, what it refuses, the
driver API it answers, and Spark's hash as the engine places records with it
(tests/integration/test_driver_engines.py checks it against Spark)."""

from __future__ import annotations

import dataclasses
import itertools
import json
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kspark import Materialized, Named, StreamsBuilder, StreamsConfig, TimeWindows, Topic
from kspark.compiler import stages
from kspark.compiler.compiler import compile_topology
from kspark.errors import (
    EngineNotSupportedError,
    InvalidArgumentError,
    StoreError,
    StreamsAppError,
)
from kspark.processor import Processor, ProcessorContext, PunctuationType, Record
from kspark.state import KeyValueStore, Stores
from kspark.testing import TopologyTestDriver
from kspark_server import envelope, placement
from kspark_server.chain import make_chain
from kspark_server.envelope import SideKind
from kspark_server.transport import arrow_schema


@dataclasses.dataclass
class Order:
    customer: str | None
    note: str


def _config(**kw: Any) -> StreamsConfig:
    return StreamsConfig(**{"application_id": "local-engine", "num_partitions": 3, **kw})


def counts() -> Any:
    b = StreamsBuilder()
    (
        b.stream("in", key_type=str, value_type=int)
        .group_by_key()
        .count(Named.as_("count"), Materialized.as_("counts"))
        .to_stream()
        .to("out")
    )
    return b.build()


def test_counts_in_process_with_output_partitions_as_spark_hashes() -> None:
    with TopologyTestDriver(counts(), _config(), engine="local") as d:
        src = d.create_input_topic("in")
        out = d.create_output_topic("out")
        for i, k in enumerate(["a", "b", "a", "c", "a"]):
            src.pipe_input(k, i, timestamp=i)
        records = out.read_records()
        # one micro-batch: each changed key's latest count, in the order of its last record
        assert [(r.key, r.value) for r in records] == [("b", 1), ("c", 1), ("a", 3)]
        h = placement.spark_hasher("string")
        assert all(r.partition == h(r.key, 42) % 3 for r in records)
        assert d.get_key_value_store("counts").get("a") == 3
        assert d.metrics().by_name()["records-consumed-total"] == 5


def test_kafka_driver_api() -> None:
    with TopologyTestDriver(counts(), _config(), engine="local") as d:
        src = d.create_input_topic("in")
        out = d.create_output_topic("out")
        assert d.produced_topic_names() == set()
        src.pipe_records([("a", 1, 0), ("b", 2, 1), ("a", 3, 2)])
        # one micro-batch: each key's latest count
        assert out.get_queue_size() == 2
        assert d.produced_topic_names() == {"out"}
        assert out.read_key_values_to_map() == {"a": 2, "b": 1}
        assert out.get_queue_size() == 0 and out.is_empty()
        d.advance_wall_clock_time(timedelta(seconds=5))
        with pytest.raises(InvalidArgumentError):
            d.advance_wall_clock_time(-1)
        with pytest.raises(StoreError):
            d.get_window_store("counts")
        with pytest.raises(StoreError):
            d.get_versioned_key_value_store("counts")


def test_window_store_and_late_records() -> None:
    b = StreamsBuilder()
    (
        b.stream("in", key_type=str, value_type=int)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(timedelta(seconds=10)))
        .count(Named.as_("count"), Materialized.as_("windows"))
        .to_stream()
        # a windowed key to text: a batch whose records are all late reaches this chain
        # with side rows only
        .map(lambda w, n: (f"{w.key}@{w.window.start}", n), key_type=str, value_type=int)
        .to("out")
    )
    with TopologyTestDriver(b.build(), _config(), engine="local") as d:
        src = d.create_input_topic("in")
        out = d.create_output_topic("out")
        src.pipe_input("a", 1, timestamp=25_000)
        d.process()
        src.pipe_input("a", 1, timestamp=1_000)  # late: its window closed
        d.process()
        assert out.read_key_values() == [("a@20000", 1)]
        assert d.get_window_store("windows").fetch("a", 0, 40_000) == [(20_000, 1)]
        assert d.metrics().by_name()["dropped-records-total"] == 1


def test_a_joined_table_s_store_answers() -> None:
    """The store of an outer table-table join answers each key's joined row: the state is
    in the task files, which the group state names."""
    b = StreamsBuilder()
    left = b.table("L", key_type=str, value_type=str)
    right = b.table("R", key_type=str, value_type=str)
    left.outer_join(
        right, lambda a, c: f"{a}+{c}", materialized=Materialized.as_("joined"), value_type=str
    ).to_stream().to("out")
    cfg = StreamsConfig(application_id="joined-store")
    with TopologyTestDriver(b.build(), cfg) as d:
        ins = [d.create_input_topic(t, key_type=str, value_type=str) for t in "LR"]
        ins[0].pipe_input("a", "x", timestamp=1)
        ins[0].pipe_input("b", "x", timestamp=1)
        d.process()
        ins[0].pipe_input("a", None, timestamp=2)
        ins[1].pipe_input("a", "y", timestamp=3)
        d.process()
        store = d.store("joined")
        assert (store.get("a"), store.get("b"), store.get("c")) == ("None+y", "x+None", None)


def test_a_chain_passes_a_batch_of_side_rows_only_when_the_key_type_changes() -> None:
    """A windowed key (a struct) mapped to text: a batch with no record, only the side
    rows of the operator before, gives the side rows and takes no key column to cast."""
    b = StreamsBuilder()
    (
        b.stream(Topic.jsonl("in", "/unused"), key_type=str, value_type=int)
        .group_by_key()
        .windowed_by(TimeWindows.of_size_with_no_grace(timedelta(seconds=10)))
        .count()
        .to_stream()
        .map(lambda w, n: (w.key, n), key_type=str, value_type=int)
        .to(Topic.jsonl("out", "/unused"))
    )
    output = compile_topology(b.build(), _config())
    (chain,) = [s for s in output.stages() if isinstance(s, stages.Chain) and s.spec.steps]
    schema = arrow_schema(_input_schema(chain))
    side = json.dumps({"kind": SideKind.STORE_ENTRIES.value, "processor": "s", "task": "0_0"})
    row = {name: None for name in schema.names} | {"ks_side": side, "ks_seq": 0, "ks_sub": 0}
    batch = pa.RecordBatch.from_pylist([row], schema=schema)
    out = list(make_chain(chain.spec)(iter([batch])))
    assert [r["ks_side"] for b in out for r in b.to_pylist()] == [side]


def _input_schema(chain: stages.Chain) -> str:
    return envelope.envelope_json(
        chain.input.key_type.spark_json(), chain.input.value_type.spark_json()
    )


def test_filter_expr_is_refused_naming_the_processor_and_the_switch() -> None:
    b = StreamsBuilder()
    b.stream("in", key_type=str, value_type=int).filter_expr("value > 1").to("out")
    with TopologyTestDriver(b.build(), _config(), engine="local") as d:
        d.create_input_topic("in").pipe_input("a", 2, timestamp=0)
        with pytest.raises(EngineNotSupportedError) as e:
            d.process()
    assert e.value.code == "KSPARK_ENGINE_NOT_SUPPORTED"
    assert "KSTREAM-FILTER" in str(e.value) and 'engine="spark"' in str(e.value)


def test_invalid_timestamps_follow_the_timestamp_policy() -> None:
    with TopologyTestDriver(counts(), _config(), engine="local") as d:
        d.create_input_topic("in").pipe_input("a", 2, timestamp=-5)
        with pytest.raises(StreamsAppError, match=r"KSPARK_INVALID_TIMESTAMP.*offset 0"):
            d.process()
    with TopologyTestDriver(counts(), _config(timestamp_policy="skip"), engine="local") as d:
        d.create_input_topic("in").pipe_records([("a", 2, -5), ("b", 1, 7)])
        assert d.create_output_topic("out").read_key_values() == [("b", 1)]
        assert d.metrics().dropped_by_reason() == {
            ("KSTREAM-SOURCE-0000000000", "invalid-timestamp"): 1
        }
    cfg = _config(timestamp_policy="use-partition-time")
    with TopologyTestDriver(counts(), cfg, engine="local") as d:
        d.create_input_topic("in").pipe_records([("a", 1, 40), ("a", 2, -5)])
        assert d.create_output_topic("out").read_records()[-1].timestamp == 40


def test_a_driver_without_a_session_runs_in_process() -> None:
    """The default: no engine and no session is the in-process engine (a session would
    say Spark); the counts come back without any Spark server."""
    with TopologyTestDriver(counts(), _config()) as d:
        assert d.engine == "local"
        d.create_input_topic("in").pipe_records([("a", 1, 0), ("a", 1, 1)])
        assert d.create_output_topic("out").read_key_values()[-1] == ("a", 2)


def test_engine_choice_is_checked() -> None:
    with pytest.raises(InvalidArgumentError):
        TopologyTestDriver(counts(), _config(), engine="jvm")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError):
        TopologyTestDriver(counts(), _config(), session=object(), engine="local")


@pytest.mark.parametrize(
    ("spark_type", "value", "expected"),
    [
        # Spark's own answers: SELECT hash(CAST(1 AS INT)), hash(1L), ...
        ("integer", 1, -559580957),
        ("long", 1, -1712319331),
        ("integer", None, 42),
    ],
)
def test_spark_hash(spark_type: str, value: Any, expected: int) -> None:
    assert placement.spark_hasher(spark_type)(value, 42) == expected


def test_spark_hash_of_int_agrees_with_the_task_key_hash() -> None:
    h = placement.spark_hasher("integer")
    assert all(h(i, 42) == placement.murmur3_int(i) for i in range(-50, 50))


@settings(max_examples=25, deadline=None, derandomize=True)
@given(
    data=st.lists(
        st.tuples(st.sampled_from(["a", "b", "c"]), st.integers(0, 9), st.integers(0, 30_000)),
        min_size=1,
        max_size=30,
    ),
    cuts=st.lists(st.integers(1, 29), max_size=3, unique=True),
    restarts=st.lists(st.integers(0, 3), max_size=2),
)
def test_a_restart_rebuilds_the_same_state(
    data: list[tuple[str, int, int]], cuts: list[int], restarts: list[int]
) -> None:
    """Operators that start over on empty local stores (a restart on new executors)
    rebuild their state from its durable form: the same output as a run without one."""
    b = StreamsBuilder()
    s = b.stream("in", key_type=str, value_type=int).deduplicate_by_key_value(
        lambda k, v: v, timedelta(seconds=5)
    )
    s.group_by_key().windowed_by(
        TimeWindows.of_size_and_grace(timedelta(seconds=10), timedelta(seconds=2))
    ).count().to_stream().map(lambda w, n: (f"{w.key}@{w.window.start}", n)).to("out")
    topology = b.build()
    bounds = [0, *sorted(c for c in cuts if c < len(data)), len(data)]
    batches = [data[x:y] for x, y in itertools.pairwise(bounds) if y > x]

    def run(restart_at: set[int]) -> list[Any]:
        with TopologyTestDriver(topology, _config(), engine="local") as d:
            src, out = d.create_input_topic("in"), d.create_output_topic("out")
            seen = []
            for i, batch in enumerate(batches):
                if i in restart_at and d._local is not None:
                    d._local.restart()
                for k, v, ts in batch:
                    src.pipe_input(k, v, timestamp=ts)
                d.process()
                seen.append(out.read_key_values())
            return seen

    assert run(set(restarts)) == run(set())


def test_stores_read_the_engines_stages_after_the_app_is_replaced() -> None:
    """A test that restarts the app (a new ``StreamsApp`` on the driver) reads the stores
    the engine holds: the engine's stages, not the new app's plan."""
    from kspark import StreamsApp

    with TopologyTestDriver(counts(), _config(), engine="local") as d:
        d.create_input_topic("in").pipe_records([("a", 1, 0), ("a", 2, 1)])
        d.process()
        d.app = StreamsApp(d.topology, d.config)
        assert d.get_key_value_store("counts").get("a") == 2


def test_a_rescale_is_refused_naming_the_switch() -> None:
    with TopologyTestDriver(counts(), _config(), engine="local") as d:
        with pytest.raises(EngineNotSupportedError, match=r'rescale.*engine="spark"'):
            d.rescale(4)


class Ticking(Processor[str, int, str, int]):
    """Keeps each key's last value in a store; a wall-clock punctuator every minute
    forwards ("tick", number of keys) with the time it fires at."""

    def init(self, context: ProcessorContext[str, int]) -> None:
        self.context = context
        self.last: KeyValueStore[str, int] = context.get_state_store("last")
        context.schedule(timedelta(minutes=1), PunctuationType.WALL_CLOCK_TIME, self.tick)

    def process(self, record: Record[str, int]) -> None:
        self.last.put(record.key, record.value)

    def tick(self, timestamp: int) -> None:
        assert timestamp == self.context.current_system_time_ms()
        self.context.forward(Record("tick", sum(1 for _ in self.last.all()), timestamp))


def test_a_wall_clock_punctuator_follows_the_drivers_clock() -> None:
    """In process, the driver's clock is the processor's wall clock: it moves only with
    advance_wall_clock_time, and a due punctuator fires once in the next micro-batch of
    its task, after the task's records."""
    b = StreamsBuilder()
    b.add_state_store(
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store("last"), key_type=str, value_type=int
        )
    )
    b.stream("in", key_type=str, value_type=int).process(Ticking, "last").to("out")
    with TopologyTestDriver(b.build(), _config(num_partitions=1), engine="local") as d:
        src, out = d.create_input_topic("in"), d.create_output_topic("out")
        start = d._wall_clock_ms
        src.pipe_records([("a", 1, 0), ("b", 2, 1)])
        d.process()
        d.advance_wall_clock_time(timedelta(seconds=59))
        src.pipe_input("c", 3, timestamp=2)
        d.process()
        assert out.read_records() == []  # due a minute after the first init
        d.advance_wall_clock_time(timedelta(minutes=3))  # three intervals: it fires once
        src.pipe_input("a", 4, timestamp=3)
        d.process()
        (tick,) = out.read_records()
        assert (tick.key, tick.value, tick.timestamp) == ("tick", 3, start + 239_000)
        assert d.get_key_value_store("last").get("a") == 4


def test_a_foreign_key_join_and_a_regrouped_table_run_in_process() -> None:
    b = StreamsBuilder()
    orders = b.table("orders", key_type=str, value_type=int)
    customers = b.table("customers", key_type=int, value_type=str)
    orders.join(
        customers,
        foreign_key_extractor=lambda o: o,
        joiner=lambda o, c: c,
        materialized=Materialized.as_("named"),
        value_type=str,
    ).to_stream().to("out")
    orders.group_by(lambda k, o: (o, k), key_type=int, value_type=str).count(
        materialized=Materialized.as_("per-customer")
    ).to_stream().to("counts")
    with TopologyTestDriver(b.build(), _config(), engine="local") as d:
        o, c = d.create_input_topic("orders"), d.create_input_topic("customers")
        c.pipe_input(7, "Ann", timestamp=0)
        o.pipe_records([("o1", 7, 1), ("o2", 7, 2), ("o3", 8, 3)])
        d.process()
        o.pipe_input("o1", 8, timestamp=4)
        c.pipe_input(8, "Bob", timestamp=5)
        d.process()
        got = d.create_output_topic("out").read_key_values()
        # o1 leaves Ann for a customer not there yet (a delete), then Bob arrives
        assert got[:3] == [("o1", "Ann"), ("o2", "Ann"), ("o1", None)]
        assert sorted(got[3:]) == [("o1", "Bob"), ("o3", "Bob")]
        assert d.get_key_value_store("named").get("o3") == "Bob"
        counts = d.get_key_value_store("per-customer")
        assert (counts.get(7), counts.get(8)) == (1, 2)


def test_a_global_table_join_and_record_picked_topics_run_in_process() -> None:
    b = StreamsBuilder()
    rates = b.global_table("rates", key_type=str, value_type=int)
    b.stream("in", key_type=str, value_type=int).left_join(
        rates, lambda k, v: f"r{v % 2}", lambda v, r: v * 10 + (r or 0), value_type=int
    ).to(lambda k, v, ctx: "odd" if v % 2 else "even")
    with TopologyTestDriver(b.build(), _config(), engine="local") as d:
        d.create_input_topic("rates").pipe_records([("r0", 1, 0), ("r1", 2, 0)])
        d.create_input_topic("in").pipe_records([("a", 4, 1), ("b", 3, 2), ("c", 6, 3)])
        d.process()
        odd = d.create_output_topic("odd", key_type=str, value_type=int)
        even = d.create_output_topic("even", key_type=str, value_type=int)
        assert odd.read_key_values() == [("a", 41), ("c", 61)]
        assert even.read_key_values() == [("b", 32)]
        # the topics that records named are topics the driver produced to
        assert d.produced_topic_names() == {"odd", "even"}


def test_a_record_value_with_a_null_field_reaches_the_operator_whole() -> None:
    """A record value crosses into an operator as Spark's to_json with null fields kept: a
    field that is None is still there for the operator's decoder."""
    b = StreamsBuilder()
    orders = b.table("orders", key_type=str, value_type=Order)
    customers = b.table("customers", key_type=str, value_type=str)
    orders.left_join(
        customers,
        foreign_key_extractor=lambda o: o.customer,
        joiner=lambda o, c: f"{o.note}:{c}",
        value_type=str,
    ).to_stream().to("out")
    with TopologyTestDriver(b.build(), _config(), engine="local") as d:
        d.create_input_topic("customers").pipe_input("c1", "Ann", timestamp=0)
        d.create_input_topic("orders").pipe_records(
            [("o1", Order("c1", "a"), 1), ("o2", Order(None, "b"), 2)]
        )
        assert d.create_output_topic("out").read_key_values() == [
            ("o1", "a:Ann"),
            ("o2", "b:None"),
        ]


class Priced(Processor[str, str, str, str]):
    """Looks each payment's currency up in the global store ``rates``."""

    def init(self, context: ProcessorContext[str, str]) -> None:
        self.context = context
        self.rates: KeyValueStore[str, float] = context.get_state_store("rates")

    def process(self, record: Record[str, str]) -> None:
        self.context.forward(record.with_value(f"{record.value}:{self.rates.get(record.value)}"))


def test_a_global_store_is_whole_in_every_task_in_process() -> None:
    b = StreamsBuilder()
    b.add_global_store(
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store("rates"), key_type=str, value_type=float
        ),
        "rates",
    )
    b.stream("payments", key_type=str, value_type=str).process(Priced).to("out")
    accounts = [f"acct-{i}" for i in range(9)]  # over the three tasks
    with TopologyTestDriver(b.build(), _config(), engine="local") as d:
        rates, pays = d.create_input_topic("rates"), d.create_input_topic("payments")
        out = d.create_output_topic("out")
        rates.pipe_records([("EUR", 1.5, 1), ("GBP", 2.5, 1)])
        pays.pipe_records([(a, "EUR", 10) for a in accounts])
        d.process()
        assert sorted(set(out.read_values())) == ["EUR:1.5"]
        if d._local is not None:
            d._local.restart()
        rates.pipe_input("EUR", None, timestamp=20)
        pays.pipe_records([(a, c, 30) for a in accounts for c in ("EUR", "GBP")])
        d.process()
        got = out.read_values()
        assert len(got) == 18 and sorted(set(got)) == ["EUR:None", "GBP:2.5"]
