"""Exception handling (KIP-1033, KIP-1034): processing, production and deserialization
handlers, the dead-letter queue and the dropped-records metrics."""

from __future__ import annotations

import json
import os
import tempfile
from typing import Any

import pytest

from kspark import StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.errors import (
    DeadLetterQueueDeserializationExceptionHandler,
    DeadLetterQueueProcessingExceptionHandler,
    DeadLetterRecord,
    DeserializationError,
    ErrorHandlerContext,
    HandlerError,
    LogAndContinueDeserializationExceptionHandler,
    LogAndContinueProcessingExceptionHandler,
    LogAndFailProductionExceptionHandler,
    ProcessingError,
    ProcessingExceptionHandler,
    Response,
)
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark


def parse(v: str) -> int:
    return 100 // int(v)  # "0" divides by zero, "x" is not a number


def topology() -> Any:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", "/unused"), key_type=str, value_type=str).map_values(
        parse, value_type=int
    ).to(Topic.jsonl("out", "/unused"))
    return b.build()


def drive(
    spark: Any, cfg: StreamsConfig, records: list[tuple[str, str]]
) -> tuple[list[Any], TopologyTestDriver]:
    d = TopologyTestDriver(topology(), cfg, session=spark)
    src = d.create_input_topic("in", key_type=str, value_type=str)
    for i, (k, v) in enumerate(records):
        src.pipe_input(k, v, timestamp=1000 + i, headers=[("trace", f"t{i}".encode())])
    out = d.create_output_topic("out", key_type=str, value_type=int).read_key_values()
    return out, d


POISON = [("a", "1"), ("b", "0"), ("c", "4"), ("d", "x"), ("e", "5")]


def test_default_fails_with_processor_exception_and_record(spark: Any, app_id: str) -> None:
    with pytest.raises(ProcessingError) as e:
        drive(spark, StreamsConfig(application_id=app_id, num_partitions=2), POISON)
    text = str(e.value)
    assert e.value.code == "KSPARK_PROCESSING_FAILED"
    assert "KSTREAM-MAPVALUES-0000000001" in text and "ZeroDivisionError" in text
    assert "topic=in" in text and "offset=1" in text and "processing_exception_handler" in text


def test_continue_drops_only_the_poison_records_and_counts_them(spark: Any, app_id: str) -> None:
    cfg = StreamsConfig(
        application_id=app_id,
        num_partitions=2,
        processing_exception_handler=LogAndContinueProcessingExceptionHandler,
    )
    out, d = drive(spark, cfg, POISON)
    try:
        assert out == [("a", 100), ("c", 25), ("e", 20)]
        m = d.metrics()
        assert m.dropped_by_processor() == {"KSTREAM-MAPVALUES-0000000001": 2}
        assert all(task.startswith("0_") for _, task in m.dropped_records_total)
    finally:
        d.close()


def test_resume_writes_dead_letters_with_context(spark: Any, app_id: str) -> None:
    cfg = StreamsConfig(
        application_id=app_id,
        num_partitions=2,
        processing_exception_handler=DeadLetterQueueProcessingExceptionHandler(),
        dead_letter_queue_topic=Topic.jsonl("dlq", "/unused"),
    )
    out, d = drive(spark, cfg, POISON)
    try:
        assert out == [("a", 100), ("c", 25), ("e", 20)]
        dead = sorted(d.dead_letter_topic().read_raw(), key=lambda r: r["offset"])
        assert [(json.loads(r["key"]), json.loads(r["value"])) for r in dead] == [
            ("b", "0"),
            ("d", "x"),
        ]
        first = dead[0]
        assert first["exception_class"] == "builtins.ZeroDivisionError"
        assert "by zero" in first["exception_message"] and "Traceback" in first["stack_trace"]
        assert (first["topic"], first["partition"], first["offset"]) == ("in", 0, 1)
        assert first["processor_node_id"] == "KSTREAM-MAPVALUES-0000000001"
        assert first["timestamp"] == 1001
        assert [(h["key"], h["value"]) for h in first["headers"]] == [("trace", b"t1")]
        assert d.metrics().dead_letter_records == 2
    finally:
        d.close()


class Recording(ProcessingExceptionHandler):
    """Sends the context it was given to the DLQ, to check every field."""

    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        fields = {
            "topic": context.topic,
            "partition": context.partition,
            "offset": context.offset,
            "timestamp": context.timestamp,
            "processor": context.processor_node_id,
            "task": context.task_id,
            "headers": [[k, (v or b"").decode()] for k, v in context.headers],
            "raw_key": context.source_raw_key,
            "raw_value": context.source_raw_value,
            "record": [record["key"], record["value"]],
        }
        return Response.resume([DeadLetterRecord(key="ctx", value=fields)])


def test_context_fields_match_the_input_record(spark: Any, app_id: str) -> None:
    cfg = StreamsConfig(
        application_id=app_id,
        num_partitions=2,
        processing_exception_handler=Recording,
        dead_letter_queue_topic=Topic.jsonl("dlq", "/unused"),
    )
    _, d = drive(spark, cfg, [("a", "1"), ("b", "2"), ("c", "0")])
    try:
        (row,) = d.dead_letter_topic().read_raw()
        ctx = json.loads(row["value"])
        assert ctx == {
            "topic": "in",
            "partition": 0,
            "offset": 2,
            "timestamp": 1002,
            "processor": "KSTREAM-MAPVALUES-0000000001",
            "task": ctx["task"],
            "headers": [["trace", "t2"]],
            "raw_key": "c",
            "raw_value": "0",
            "record": ["c", "0"],
        }
        assert ctx["task"] in ("0_0", "0_1")
    finally:
        d.close()


class Raising(ProcessingExceptionHandler):
    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        raise RuntimeError("handler bug")


class NotAResponse(ProcessingExceptionHandler):
    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        return "continue please"  # type: ignore[return-value]


@pytest.mark.parametrize("handler", [Raising, NotAResponse])
def test_a_broken_handler_fails_the_app_distinctly(spark: Any, app_id: str, handler: type) -> None:
    cfg = StreamsConfig(
        application_id=app_id, num_partitions=2, processing_exception_handler=handler
    )
    with pytest.raises(HandlerError) as e:
        drive(spark, cfg, POISON)
    assert e.value.code == "KSPARK_HANDLER_FAILED" and handler.__name__ in str(e.value)


def test_a_result_of_the_wrong_type_is_the_steps_failure(spark: Any, app_id: str) -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", "/unused"), key_type=str, value_type=str).map_values(
        lambda v: int(v) if v.isdigit() else v,
        value_type=int,  # a str slips through
    ).to(Topic.jsonl("out", "/unused"))
    cfg = StreamsConfig(
        application_id=app_id,
        num_partitions=2,
        processing_exception_handler=LogAndContinueProcessingExceptionHandler,
        # asked for values no step made; it must not be asked here (issue 16)
        production_exception_handler=LogAndFailProductionExceptionHandler,
    )
    with TopologyTestDriver(b.build(), cfg, session=spark) as d:
        src = d.create_input_topic("in", key_type=str, value_type=str)
        for k, v in [("a", "1"), ("b", "two"), ("c", "3")]:
            src.pipe_input(k, v, timestamp=0)
        out = d.create_output_topic("out", key_type=str, value_type=int)
        assert out.read_key_values() == [("a", 1), ("c", 3)]
        assert sum(d.metrics().dropped_records_total.values()) == 1


def _jsonl_app(base: str, app_id: str, **cfg: Any) -> StreamsApp:
    os.makedirs(os.path.join(base, "in"), exist_ok=True)
    with open(os.path.join(base, "in", "a.jsonl"), "w") as f:
        f.write('{"key": "a", "value": 1, "timestamp": 1}\n{"key": "b", "value": \n')
        f.write(
            '{"key": "c", "value": "three", "timestamp": 3}\n{"key": "d", "value": 4, "timestamp": 4}\n'
        )
    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", os.path.join(base, "in")), key_type=str, value_type=int).to(
        Topic.jsonl("out", os.path.join(base, "out"))
    )
    config = StreamsConfig(
        application_id=app_id, checkpoint_dir=os.path.join(base, "chk"), num_partitions=2, **cfg
    )
    return StreamsApp(b.build(), config)


def test_deserialization_failures(spark: Any, app_id: str) -> None:
    with tempfile.TemporaryDirectory() as base:
        app = _jsonl_app(base, app_id)
        app._session = spark
        with pytest.raises(DeserializationError, match="offset"):
            app.run_until_caught_up()
    with tempfile.TemporaryDirectory() as base:
        app = _jsonl_app(
            base,
            app_id,
            deserialization_exception_handler=LogAndContinueDeserializationExceptionHandler,
        )
        app._session = spark
        app.run_until_caught_up()
        rows = spark.read.json(os.path.join(base, "out")).select("key", "value").collect()
        assert sorted((r.key, r.value) for r in rows) == [("a", 1), ("d", 4)]
        assert sum(app.metrics().dropped_records_total.values()) == 2
    with tempfile.TemporaryDirectory() as base:
        app = _jsonl_app(
            base,
            app_id,
            deserialization_exception_handler=DeadLetterQueueDeserializationExceptionHandler,
            dead_letter_queue_topic=Topic.parquet("dlq", os.path.join(base, "dlq")),
        )
        app._session = spark
        app.run_until_caught_up()
        dead = spark.read.parquet(os.path.join(base, "dlq")).collect()
        assert sorted(r.value for r in dead) == [
            '{"key": "b", "value": ',
            '{"key": "c", "value": "three", "timestamp": 3}',
        ]


def test_a_failure_before_a_fork_is_dead_lettered_and_counted_once(spark: Any, app_id: str) -> None:
    # the failing step feeds two sinks and a split: every path runs it, one record each
    b = StreamsBuilder()
    parsed = b.stream(Topic.jsonl("in", "/unused"), key_type=str, value_type=str).map_values(
        parse, value_type=int
    )
    parsed.to(Topic.jsonl("out", "/unused"))
    parsed.map_values(lambda v: v * 2, value_type=int).to(Topic.jsonl("twice", "/unused"))
    branches = parsed.split().branch(lambda k, v: v > 20).default_branch()
    for i, branch in enumerate(branches.values()):
        branch.to(Topic.jsonl(f"branch-{i}", "/unused"))
    cfg = StreamsConfig(
        application_id=app_id,
        num_partitions=2,
        processing_exception_handler=DeadLetterQueueProcessingExceptionHandler,
        dead_letter_queue_topic=Topic.jsonl("dlq", "/unused"),
    )
    d = TopologyTestDriver(b.build(), cfg, session=spark)
    try:
        src = d.create_input_topic("in", key_type=str, value_type=str)
        for i, (k, v) in enumerate(POISON):
            src.pipe_input(k, v, timestamp=1000 + i)
        out = d.create_output_topic("twice", key_type=str, value_type=int).read_key_values()
        assert out == [("a", 200), ("c", 50), ("e", 40)]
        dead = d.dead_letter_topic().read_raw()
        assert sorted(json.loads(r["key"]) for r in dead) == ["b", "d"]
        m = d.metrics()
        assert m.dead_letter_records == 2
        assert m.dropped_by_processor() == {"KSTREAM-MAPVALUES-0000000001": 2}
    finally:
        d.close()
