"""Dynamic values that do not convert to a declared type (issue 16): where a step declares
the type, the record is that step's failure and goes to the processing handler under the
step's name; never a crash of the batch. The chains run in-process on Arrow batches;
tests/integration/test_dynamic_handlers.py runs the same cases in the test driver."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

from kspark import Materialized, StreamsBuilder, StreamsConfig, Topic
from kspark.bindings import bind_topology
from kspark.compiler import compile_topology
from kspark.compiler import stages as st
from kspark.errors import (
    DeadLetterQueueProcessingExceptionHandler,
    LogAndContinueProcessingExceptionHandler,
    LogAndContinueProductionExceptionHandler,
)
from kspark.plan.types import describe_type
from kspark_server import envelope
from kspark_server.chain import make_chain, output_owners
from kspark_server.handling import ProcessingFailed
from kspark_server.spec import ChainSpec, JsonSpec, PrimSpec
from kspark_server.transport import arrow_schema


@dataclasses.dataclass
class Order:
    id: str
    qty: int


def _batch(rows: list[tuple[Any, Any]]) -> pa.RecordBatch:
    """An envelope batch of dynamic keys and values (JSON text)."""
    schema = arrow_schema(envelope.envelope_json("string", "string"))
    return pa.RecordBatch.from_pylist(
        [
            {
                "key": json.dumps(k),
                "value": json.dumps(v),
                "timestamp": 1000 + i,
                "headers": [],
                "topic": "in",
                "partition": 0,
                "offset": i,
                "ks_seq": i,
                "ks_sub": 0,
                "ks_side": None,
            }
            for i, (k, v) in enumerate(rows)
        ],
        schema=schema,
    )


def _chain(build: Callable[[Any], Any], **config: Any) -> ChainSpec:
    b = StreamsBuilder()
    build(b.stream("in")).to("out")
    cfg = StreamsConfig(
        application_id="t",
        data_dir="/data",
        dead_letter_queue_topic=Topic.jsonl("d", "/d"),
        **config,
    )
    (part,) = compile_topology(bind_topology(b.build(), cfg), cfg).sinks
    assert isinstance(part.stage, st.Chain)
    return part.stage.spec


def _run(spec: ChainSpec, rows: list[tuple[Any, Any]]) -> tuple[list[Any], list[dict[str, Any]]]:
    values, side = [], []
    for out in make_chain(spec)(iter([_batch(rows)])):
        for row in out.to_pylist():
            if row["ks_side"] is None:
                values.append(row["value"])
            else:
                side.append(json.loads(row["ks_side"]))
    return values, side


def _x_for_two(v: Any) -> Any:
    return "x" if v == 2 else v


def _doubled(v: int) -> int:
    # a typed step that a dynamic "x" reaches: "xx" is no int
    return v * 2


CASES: dict[str, tuple[Callable[[Any], Any], list[Any], str]] = {
    # a dynamic stream into a typed step whose result is not of its declared type
    "map_values(f, value_type=int)": (
        lambda s: s.map_values(_x_for_two, value_type=int),
        [0, 1, 3],
        "KSTREAM-MAPVALUES-0000000001",
    ),
    # a dynamic value that reaches a step annotated with int, through a dynamic filter
    "filter into map_values(g: int -> int)": (
        lambda s: s.filter(lambda k, v: v != 1).map_values(_doubled),
        [0, 6],
        "KSTREAM-MAPVALUES-0000000002",
    ),
    # a dict that does not convert to the record type the step declares
    "map_values(f, value_type=Order)": (
        lambda s: s.map_values(
            lambda v: {"id": str(v), "qty": v} if v != 2 else {"id": "2"}, value_type=Order
        ),
        [{"id": "0", "qty": 0}, {"id": "1", "qty": 1}, {"id": "3", "qty": 3}],
        "KSTREAM-MAPVALUES-0000000001",
    ),
}
INPUT = [("a", 0), ("b", 1), ("c", "x"), ("d", 3)]
VALUES = [("a", 0), ("b", 1), ("c", 2), ("d", 3)]


def _input(case: str) -> list[tuple[Any, Any]]:
    return INPUT if case.startswith("filter") else VALUES


@pytest.mark.parametrize("case", sorted(CASES))
def test_log_and_continue_drops_and_counts_the_record_for_the_step(case: str) -> None:
    build, expected, processor = CASES[case]
    spec = _chain(
        build,
        processing_exception_handler=LogAndContinueProcessingExceptionHandler,
        # would swallow the record silently if it were asked instead
        production_exception_handler=LogAndContinueProductionExceptionHandler,
    )
    values, side = _run(spec, _input(case))
    assert [json.loads(v) if isinstance(v, str) else v for v in values] == expected
    assert [(s["kind"], s["processor"], s["reason"], s["count"]) for s in side] == [
        ("dropped", processor, "processing-error", 1)
    ]


@pytest.mark.parametrize("case", sorted(CASES))
def test_log_and_fail_names_the_step_and_the_record(case: str) -> None:
    build, _, processor = CASES[case]
    spec = _chain(build)
    with pytest.raises(ProcessingFailed) as info:
        _run(spec, _input(case))
    text = str(info.value)
    assert f"processor {processor} failed" in text and "offset=2" in text
    assert "processing_exception_handler" in text


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_dead_letter_carries_the_steps_name(case: str) -> None:
    build, expected, processor = CASES[case]
    spec = _chain(build, processing_exception_handler=DeadLetterQueueProcessingExceptionHandler)
    values, side = _run(spec, _input(case))
    assert len(values) == len(expected)
    (dead,) = side
    assert (dead["kind"], dead["processor"], dead["reason"], dead["src_offset"]) == (
        "dlq",
        processor,
        "processing-error",
        2,
    )
    assert (
        "declared type" in dead["exception_message"]
        or "cannot be read" in (dead["exception_message"])
    )
    # the JSON of the stored key and value, not a JSON string of their JSON text
    assert json.loads(dead["dlq_key"]) == "c"
    assert json.loads(dead["dlq_value"]) == dict(_input(case))["c"]


def test_a_dynamic_key_that_does_not_convert_for_a_join_is_the_joins_failure() -> None:
    b = StreamsBuilder()
    rates = b.table("rates", key_type=int, value_type=float)
    b.stream("payments").join(rates, lambda v, r: v * r).to("out")
    cfg = StreamsConfig(
        application_id="t",
        data_dir="/data",
        processing_exception_handler=DeadLetterQueueProcessingExceptionHandler,
        dead_letter_queue_topic=Topic.jsonl("d", "/d"),
    )
    out = compile_topology(bind_topology(b.build(), cfg), cfg)
    join = next(s for s in out.stages() if isinstance(s, st.Stateful))
    assert isinstance(join.stream, st.Chain)
    spec = join.stream.spec
    assert output_owners(spec) == ("KSTREAM-JOIN-0000000003", None)
    values, side = _run(spec, [(1, 5.0), ("one", 6.0), (3, 7.0)])
    assert len(values) == 2
    (dead,) = side
    assert (dead["processor"], dead["reason"], dead["src_offset"]) == (
        "KSTREAM-JOIN-0000000003",
        "processing-error",
        1,
    )


def test_a_chain_that_makes_nothing_owns_nothing() -> None:
    # what a chain reads and passes on unchanged is not any step's to convert
    spec = _chain(lambda s: s.filter(lambda k, v: True).peek(lambda k, v: None))
    assert output_owners(spec) == (None, None)
    spec = _chain(lambda s: s.select_key(lambda k, v: v, key_type=int))
    assert output_owners(spec) == ("KSTREAM-KEY-SELECT-0000000001", None)


def test_a_dynamic_versioned_join_keeps_working() -> None:
    # the owners change who is asked, not what flows: a plain untyped join compiles
    b = StreamsBuilder()
    rates = b.table("rates", materialized=Materialized.as_versioned("r", timedelta(hours=1)))
    b.stream("events").join(rates, lambda v, r: [v, r]).to("out")
    cfg = StreamsConfig(application_id="t", data_dir="/data")
    assert compile_topology(bind_topology(b.build(), cfg), cfg).stages()


def _typed_sink_chain(**config: Any) -> ChainSpec:
    b = StreamsBuilder()
    b.stream("in").filter(lambda k, v: v != 0).to("out")
    cfg = StreamsConfig(
        application_id="t",
        data_dir="/data",
        dead_letter_queue_topic=Topic.jsonl("d", "/d"),
        **config,
    )
    sink_types = {"out": (None, describe_type(int))}
    (part,) = compile_topology(bind_topology(b.build(), cfg), cfg, sink_types=sink_types).sinks
    assert isinstance(part.stage, st.Chain)
    return part.stage.spec


SINK = "KSTREAM-SINK-0000000002"


def test_a_typed_sink_gives_what_does_not_convert_to_the_production_handler() -> None:
    spec = _typed_sink_chain(
        production_exception_handler=LogAndContinueProductionExceptionHandler,
        # would count it under the filter, were it asked
        processing_exception_handler=LogAndContinueProcessingExceptionHandler,
    )
    assert spec.steps == () and spec.sink == SINK and output_owners(spec) == (None, None)
    values, side = _run(spec, INPUT)
    assert values == [0, 1, 3]  # this chain only converts; the filter runs before it
    assert [(s["processor"], s["reason"]) for s in side] == [(SINK, "production-error")]
    with pytest.raises(ProcessingFailed, match=rf"processor {SINK} failed.*offset=2"):
        _run(_typed_sink_chain(), INPUT)


def test_a_sink_without_declared_types_converts_nothing() -> None:
    b = StreamsBuilder()
    b.stream("in").filter(lambda k, v: v != 0).to("out")
    cfg = StreamsConfig(application_id="t", data_dir="/data")
    typed = {"out": (describe_type(str), None)}
    out = compile_topology(bind_topology(b.build(), cfg), cfg, sink_types=typed)
    (part,) = out.sinks
    assert isinstance(part.stage, st.Chain)
    assert part.stage.spec.output.key == PrimSpec(spark="string")
    assert part.stage.spec.output.value == JsonSpec()  # no value type: it stays dynamic
    plain = compile_topology(bind_topology(b.build(), cfg), cfg).sinks[0].stage
    assert isinstance(plain, st.Chain) and plain.spec.sink is None and plain.spec.steps


def test_a_typed_output_topic_declared_before_the_first_batch_types_the_sink() -> None:
    import shutil

    from kspark.testing import TopologyTestDriver

    b = StreamsBuilder()
    b.stream("in").to("out")
    driver = TopologyTestDriver(b.build(), StreamsConfig(application_id="t"), session=object())
    try:
        driver.create_output_topic("out", value_type=int)
        assert driver.app.sink_types == {"out": (None, describe_type(int))}
        (part,) = driver.app.compiled().sinks
        assert isinstance(part.stage, st.Chain) and part.stage.spec.sink == part.processor
        driver._started = True  # after the first batch, the plan stays as it is
        driver.create_output_topic("out", key_type=str)
        assert driver.app.sink_types == {"out": (None, describe_type(int))}
    finally:
        shutil.rmtree(driver._workdir, ignore_errors=True)
