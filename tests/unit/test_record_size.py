"""Records over a Kafka sink's byte limit go to the production handler with their context,
under the sink's name (issue 17), before the sink's producer would refuse them. The
chains run in-process on Arrow batches; tests/integration/test_kafka.py runs the same
against a broker."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kspark import StreamsBuilder, StreamsConfig, Topic
from kspark.compiler import compile_topology, stages
from kspark.compiler.specs import kafka_record_limit
from kspark.errors import (
    ConfigError,
    DeadLetterQueueProductionExceptionHandler,
    LogAndContinueProductionExceptionHandler,
)
from kspark.plan.types import describe_type
from kspark_server import codec, envelope
from kspark_server.chain import make_chain
from kspark_server.handling import ProcessingFailed
from kspark_server.recordsize import RECORD_OVERHEAD, record_sizes
from kspark_server.spec import ChainSpec
from kspark_server.transport import arrow_schema

SINK = "KSTREAM-SINK-0000000002"
LIMIT = 2048


@dataclasses.dataclass
class Note:
    id: str
    text: str


def _kafka(name: str, limit: int | None = LIMIT) -> Any:
    extra = {} if limit is None else {"kafka.message.max.bytes": str(limit)}
    return Topic.kafka(name, bootstrap_servers="broker:9092", **extra)


def _batch(value_type: Any, values: list[Any], headers: int = 0) -> pa.RecordBatch:
    kd, vd = describe_type(str), describe_type(value_type)
    schema = arrow_schema(envelope.envelope_json(kd.spark_json(), vd.spark_json()))
    kenc, venc = codec.encoder(kd.spec()), codec.encoder(vd.spec())
    rows = [
        {
            "key": kenc(f"k{i}"),
            "value": venc(v),
            "timestamp": 1000 + i,
            "headers": [{"key": "h", "value": b"x" * headers}] if headers else [],
            "topic": "in",
            "partition": 0,
            "offset": i,
            "ks_seq": i,
            "ks_sub": 0,
            "ks_side": None,
        }
        for i, v in enumerate(values)
    ]
    return pa.RecordBatch.from_pylist(rows, schema=schema)


def _spec(value_type: Any, steps: bool = True, **config: Any) -> ChainSpec:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("in", "/in"), key_type=str, value_type=value_type)
    if steps:
        s = s.filter(lambda k, v: v is not None)
    s.to(_kafka("out"))
    cfg = StreamsConfig(
        application_id="t", dead_letter_queue_topic=Topic.jsonl("d", "/d"), **config
    )
    (part,) = compile_topology(b.build(), cfg).sinks
    assert isinstance(part.stage, stages.Chain)
    return part.stage.spec


def _run(spec: ChainSpec, batch: pa.RecordBatch) -> tuple[list[Any], list[dict[str, Any]]]:
    records, side = [], []
    for out in make_chain(spec)(iter([batch])):
        for row in out.to_pylist():
            if row["ks_side"] is None:
                records.append(row["value"])
            else:
                side.append(json.loads(row["ks_side"]))
    return records, side


BIG = "y" * 3000
VALUES = ["a", BIG, "b", BIG + "z"]


@pytest.mark.parametrize("steps", [True, False], ids=["sink's chain", "no steps"])
def test_continue_drops_and_counts_each_record_over_the_limit(steps: bool) -> None:
    spec = _spec(str, steps, production_exception_handler=LogAndContinueProductionExceptionHandler)
    sink = SINK if steps else "KSTREAM-SINK-0000000001"
    assert spec.record_limit is not None and spec.record_limit.processor == sink
    records, side = _run(spec, _batch(str, VALUES))
    assert records == ["a", "b"]
    assert [(s["kind"], s["processor"], s["reason"], s["count"]) for s in side] == [
        ("dropped", sink, "production-error", 2)
    ]


def test_fail_names_the_sink_the_topic_the_limit_and_the_fix() -> None:
    with pytest.raises(ProcessingFailed) as info:
        _run(_spec(str), _batch(str, VALUES))
    text = str(info.value)
    assert f"processor {SINK} failed" in text and "offset=1" in text
    assert "2048-byte limit of Kafka topic 'out'" in text
    assert "kafka.message.max.bytes" in text and "production_exception_handler" in text


def test_the_dead_letter_queue_gets_each_record_over_the_limit() -> None:
    spec = _spec(str, production_exception_handler=DeadLetterQueueProductionExceptionHandler)
    records, side = _run(spec, _batch(str, VALUES))
    assert records == ["a", "b"]
    assert [(s["kind"], s["processor"], s["src_offset"]) for s in side] == [
        ("dlq", SINK, 1),
        ("dlq", SINK, 3),
    ]
    assert json.loads(side[0]["dlq_value"]) == BIG


def test_records_and_headers_count_as_the_sink_writes_them() -> None:
    batch = _batch(Note, [Note("n", "é" * 10)], headers=100)
    (size,) = record_sizes(batch)
    text = json.dumps({"id": "n", "text": "é" * 10}, separators=(",", ":"), ensure_ascii=False)
    assert size == len(b"k0") + len(text.encode()) + len("h") + 100 + RECORD_OVERHEAD
    spec = _spec(Note, production_exception_handler=LogAndContinueProductionExceptionHandler)
    records, side = _run(spec, _batch(Note, [Note("n", "t"), Note("m", "u" * 3000)]))
    assert records == [{"id": "n", "text": "t"}] and side[0]["count"] == 1


def test_a_file_sink_has_no_limit_and_a_shared_stage_stays_shared() -> None:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("in", "/in"), key_type=str, value_type=str).map_values(
        str.upper, value_type=str
    )
    s.to(Topic.jsonl("files", "/files"))
    s.to(_kafka("out"))
    out = compile_topology(b.build(), StreamsConfig(application_id="t"))
    by_topic = {p.topic.name: p.stage for p in out.sinks}
    assert isinstance(by_topic["files"], stages.Chain)
    assert by_topic["files"].spec.record_limit is None
    kafka = by_topic["out"]
    assert isinstance(kafka, stages.Chain) and kafka.spec.record_limit is not None


def test_the_limit_is_the_producers_message_max_bytes() -> None:
    assert kafka_record_limit(_kafka("t", None)) == 1_000_000
    assert kafka_record_limit(_kafka("t", 4096)) == 4096
    with pytest.raises(ConfigError, match=r"kafka\.message\.max\.bytes"):
        kafka_record_limit(
            Topic.kafka("t", bootstrap_servers="b:1", **{"kafka.message.max.bytes": "x"})
        )


@settings(max_examples=40, deadline=None)
@given(
    key=st.integers(0, 300),
    value=st.integers(0, 2500),
    header=st.integers(0, 300),
)
def test_what_the_check_lets_through_the_producer_takes(key: int, value: int, header: int) -> None:
    # librdkafka refuses a record over message.max.bytes in produce(), before any broker
    from confluent_kafka import KafkaException, Producer

    producer = Producer({"bootstrap.servers": "127.0.0.1:9", "message.max.bytes": LIMIT})
    k, v = "k" * key, "v" * value
    headers = [{"key": "h", "value": b"x" * header}] if header else []
    schema = arrow_schema(envelope.envelope_json("string", "string"))
    batch = pa.RecordBatch.from_pylist(
        [{"key": k, "value": v, "headers": headers, "ks_seq": 0, "ks_sub": 0}], schema=schema
    )
    (size,) = record_sizes(batch)
    try:
        producer.produce(
            "t",
            key=k.encode(),
            value=v.encode(),
            headers=[("h", b"x" * header)] if header else None,
        )
        taken = True
    except KafkaException:
        taken = False
    finally:
        producer.purge()
    if size <= LIMIT:
        assert taken
    assert size - RECORD_OVERHEAD <= LIMIT or not taken
