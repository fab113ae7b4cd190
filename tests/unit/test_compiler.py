"""Plan-only tests of the compiler: no Spark server."""

from __future__ import annotations

import dataclasses
import json
from datetime import timedelta

import pytest

from kspark import Materialized, StreamsBuilder, StreamsConfig, Topic
from kspark.compiler import compile_topology
from kspark.compiler import stages as st
from kspark.errors import CompilationError, ConfigError
from kspark.plan import nodes as n
from kspark.plan.topology import Topology
from kspark_server.spec import DedupSpec, JoinSpec, JsonSpec, PrimSpec


@dataclasses.dataclass
class Payment:
    id: str
    amount: float


CFG = StreamsConfig(application_id="plan-test", num_partitions=3)


def _chains(output: st.Output) -> list[st.Chain]:
    return [s for s in output.stages() if isinstance(s, st.Chain)]


def test_stateless_steps_fuse_into_one_python_pass() -> None:
    b = StreamsBuilder()
    (
        b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment)
        .filter(lambda k, v: v.amount > 0)
        .map_values(lambda v: v.amount)
        .flat_map_values(lambda a: [a, a])
        .select_key(lambda k, v: "x", key_type=str)
        .peek(lambda k, v: None)
        .map_values(lambda v: round(v, 2), value_type=float)
        .to(Topic.parquet("out", "/tmp/out"))
    )
    out = compile_topology(b.build(), CFG)
    (chain,) = _chains(out)
    assert [s.op for s in chain.spec.steps] == [
        "filter",
        "map_values",
        "flat_map_values",
        "select_key",
        "peek",
        "map_values",
    ]
    assert chain.spec.output.value == PrimSpec(spark="double")


def test_stateful_operators_cut_chains() -> None:
    b = StreamsBuilder()
    (
        b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment)
        .filter(lambda k, v: True)
        .deduplicate_by_key(timedelta(seconds=5))
        .map_values(lambda v: v.amount, value_type=float)
        .to(Topic.parquet("out", "/tmp/out"))
    )
    out = compile_topology(b.build(), CFG)
    kinds = [type(s).__name__ for s in out.stages()]
    assert kinds == ["Read", "Chain", "Stateful", "Chain"]
    stateful = next(s for s in out.stages() if isinstance(s, st.Stateful))
    assert isinstance(stateful.spec, DedupSpec) and stateful.spec.interval_ms == 5000
    assert stateful.num_partitions == 3 and stateful.task_column == "key"


def test_deduplicate_by_id_repartitions_by_id() -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment).deduplicate(
        lambda k, v: v.id, timedelta(seconds=5)
    ).to(Topic.parquet("out", "/tmp/out"))
    out = compile_topology(b.build(), CFG)
    stateful = next(s for s in out.stages() if isinstance(s, st.Stateful))
    assert stateful.task_column == "ks_id" and isinstance(stateful.stream, st.IdStage)


def test_an_unannotated_function_gives_dynamic_values_carried_as_json_text() -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment).map_values(
        lambda v: v.amount
    ).to(Topic.parquet("out", "/tmp/out"))
    (chain,) = _chains(compile_topology(b.build(), CFG))
    assert chain.spec.input.value != JsonSpec()
    assert chain.spec.output.key == PrimSpec(spark="string")
    assert chain.spec.output.value == JsonSpec()
    assert '"name":"value","type":"string"' in chain.spec.output_schema.replace(" ", "")


def test_versioned_join_spec() -> None:
    b = StreamsBuilder()
    rates = b.table(
        Topic.jsonl("rates", "/tmp/r"),
        key_type=str,
        value_type=float,
        materialized=Materialized.as_versioned("rates", timedelta(hours=2)),
    )
    s = b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment)
    s.left_join(rates, lambda p, r: p.amount * (r or 1.0), value_type=float).to(
        Topic.parquet("o", "/tmp/o")
    )
    out = compile_topology(b.build(), CFG)
    join = next(s for s in out.stages() if isinstance(s, st.Stateful))
    assert isinstance(join.spec, JoinSpec)
    assert join.spec.versioned and join.spec.left
    assert join.spec.history_retention_ms == 7_200_000 and join.spec.store == "rates"


def test_kafka_topics_compile_to_the_kafka_format_with_the_envelope() -> None:
    b = StreamsBuilder()
    b.stream(
        Topic.kafka("payments", bootstrap_servers="broker:9092", startingOffsets="earliest"),
        key_type=str,
        value_type=Payment,
    ).to(Topic.kafka("out", bootstrap_servers="broker:9092"))
    out = compile_topology(b.build(), CFG)
    (read,) = [s for s in out.stages() if isinstance(s, st.Read)]
    assert read.topic.format == "kafka" and read.read_schema is None
    assert read.topic.option_dict() == {
        "kafka.bootstrap.servers": "broker:9092",
        "startingOffsets": "earliest",
    }
    sink = out.writer_spec.sinks[0].topic
    assert sink.format == "kafka" and sink.name == "out"


def test_value_layout_reads_with_the_value_schema() -> None:
    b = StreamsBuilder()
    b.stream(
        Topic.jsonl("payments", "/tmp/p", layout="value", key_field="id"),
        key_type=str,
        value_type=Payment,
    ).to(Topic.parquet("out", "/tmp/out"))
    (read,) = [s for s in compile_topology(b.build(), CFG).stages() if isinstance(s, st.Read)]
    assert read.read_schema is not None
    names = [f["name"] for f in json.loads(read.read_schema)["fields"]]
    assert names == ["id", "amount", "_corrupt_record"]


def test_unknown_node_fails_loudly() -> None:
    from kspark.compiler.compiler import _Compiler

    b = StreamsBuilder()
    src = b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment)
    src.to(Topic.parquet("out", "/tmp/out"))
    compiler = _Compiler(b.build(), CFG)

    class Mystery(n.Node):
        pass

    with pytest.raises(CompilationError, match="Mystery"):
        compiler.visit(Mystery(name="X", key_type=None, value_type=None))


def test_dlq_handler_needs_a_dlq_topic() -> None:
    from kspark.errors import DeadLetterQueueProcessingExceptionHandler

    b = StreamsBuilder()
    b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment).to(
        Topic.parquet("o", "/tmp/o")
    )
    cfg = CFG.with_(processing_exception_handler=DeadLetterQueueProcessingExceptionHandler)
    with pytest.raises(ConfigError, match="dead_letter_queue_topic"):
        compile_topology(b.build(), cfg)


def test_driver_rewires_topics_without_changing_names() -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment).to(
        Topic.jsonl("o", "/tmp/o")
    )
    topo = b.build()
    rewired: Topology = topo.with_topics(
        lambda name, t, role: Topic.parquet(name, f"/elsewhere/{name}")
    )
    assert [x.name for x in rewired.nodes()] == [x.name for x in topo.nodes()]
    assert {s.topic.path for s in rewired.sources() if s.topic} == {"/elsewhere/payments"}


def test_to_table_feeds_the_join_from_the_stream() -> None:
    b = StreamsBuilder()
    rates = (
        b.stream(Topic.jsonl("rate-updates", "/tmp/u"), key_type=str, value_type=float)
        .map_values(lambda r: r * 2, value_type=float)
        .to_table(Materialized.as_versioned("rates", timedelta(hours=2)))
    )
    s = b.stream(Topic.jsonl("payments", "/tmp/p"), key_type=str, value_type=Payment)
    s.join(rates, lambda p, r: p.amount * r, value_type=float).to(Topic.parquet("o", "/tmp/o"))
    out = compile_topology(b.build(), CFG)
    join = next(s for s in out.stages() if isinstance(s, st.Stateful))
    assert isinstance(join.spec, JoinSpec)
    assert join.spec.versioned and join.spec.store == "rates"
    # the table side is the mapped stream: a chain over the rate-updates source
    assert isinstance(join.table, st.Chain)
    assert [step.op for step in join.table.spec.steps] == ["map_values"]
