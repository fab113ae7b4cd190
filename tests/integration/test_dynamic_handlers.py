"""A dynamic value that does not convert to the type a step declares (issue 16) is that
step's failure: the processing handler is asked under the step's name (continue: counted
as dropped; fail: an error naming the step and the record; dead-letter queue: a dead
letter with the step's name), and the production handler is not. Run in the test driver;
tests/unit/test_dynamic_handlers.py checks the same in-process, on both chain forms."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import pytest

from kspark import StreamsBuilder, StreamsConfig, Topic
from kspark.errors import (
    DeadLetterQueueProcessingExceptionHandler,
    DeadLetterQueueProductionExceptionHandler,
    LogAndContinueProcessingExceptionHandler,
    LogAndContinueProductionExceptionHandler,
    ProcessingError,
)
from kspark.plan.topology import Topology
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark


def _x_for_two(v: Any) -> Any:
    return "x" if v == 2 else v


def _doubled(v: int) -> int:
    return v * 2


def mapped() -> Topology:
    # an untyped stream into a step that declares int; its function gives "x" for 2
    b = StreamsBuilder()
    b.stream("in").map_values(_x_for_two, value_type=int).to("out")
    return b.build()


def filtered() -> Topology:
    # an untyped filter into a step annotated int -> int; "x" comes out of it as "xx"
    b = StreamsBuilder()
    b.stream("in").filter(lambda k, v: v != 1).map_values(_doubled).to("out")
    return b.build()


CASES: dict[str, tuple[Callable[[], Topology], list[Any], list[int], str]] = {
    "map_values(f, value_type=int)": (
        mapped,
        [0, 1, 2, 3],
        [0, 1, 3],
        "KSTREAM-MAPVALUES-0000000001",
    ),
    "filter into map_values(g: int -> int)": (
        filtered,
        [0, 1, "x", 3],
        [0, 6],
        "KSTREAM-MAPVALUES-0000000002",
    ),
}


def _pipe(d: TopologyTestDriver, values: list[Any]) -> None:
    src = d.create_input_topic("in")
    for i, v in enumerate(values):
        src.pipe_input(f"k{i}", v, timestamp=i)


@pytest.mark.parametrize("case", sorted(CASES))
def test_continue_counts_the_record_as_dropped_by_the_step(
    spark: Any, app_id: str, case: str
) -> None:
    topology, values, expected, processor = CASES[case]
    cfg = StreamsConfig(
        application_id=app_id,
        num_partitions=1,
        processing_exception_handler=LogAndContinueProcessingExceptionHandler,
        # were it asked, it would drop the record too, but count it as a production error
        production_exception_handler=LogAndContinueProductionExceptionHandler,
    )
    with TopologyTestDriver(topology(), cfg, session=spark) as d:
        _pipe(d, values)
        assert sorted(d.create_output_topic("out", value_type=int).read_values()) == expected
        m = d.metrics()
        assert sum(m.dropped_records_total.values()) == 1
        assert m.dropped_by_reason() == {(processor, "processing-error"): 1}


@pytest.mark.parametrize("case", sorted(CASES))
def test_fail_names_the_step_and_the_record(spark: Any, app_id: str, case: str) -> None:
    topology, values, _, processor = CASES[case]
    cfg = StreamsConfig(
        application_id=app_id,
        num_partitions=1,
        production_exception_handler=LogAndContinueProductionExceptionHandler,
    )
    with TopologyTestDriver(topology(), cfg, session=spark) as d:
        _pipe(d, values)
        with pytest.raises(ProcessingError) as info:
            d.process()
    text = str(info.value)
    assert processor in text and "offset=2" in text
    assert "processing_exception_handler" in text


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_dead_letter_carries_the_steps_name(spark: Any, app_id: str, case: str) -> None:
    topology, values, expected, processor = CASES[case]
    cfg = StreamsConfig(
        application_id=app_id,
        num_partitions=1,
        processing_exception_handler=DeadLetterQueueProcessingExceptionHandler,
        dead_letter_queue_topic=Topic.parquet("dlq", "/unused"),
    )
    with TopologyTestDriver(topology(), cfg, session=spark) as d:
        _pipe(d, values)
        assert sorted(d.create_output_topic("out", value_type=int).read_values()) == expected
        (dead,) = d.dead_letter_topic().read_raw()
        assert dead["processor_node_id"] == processor and dead["offset"] is not None
        assert "declared type is long" in dead["exception_message"]
        assert d.metrics().dead_letter_records == 1


# -- a typed sink: the test driver's output topic with declared types -------------------
SINK = "KSTREAM-SINK-0000000002"


def untyped_to_out() -> Topology:
    b = StreamsBuilder()
    b.stream("in").filter(lambda k, v: v != 0).to("out")
    return b.build()


@pytest.mark.parametrize("mode", ["continue", "fail", "dead-letter"])
def test_a_value_that_does_not_convert_at_a_typed_sink_goes_to_the_production_handler(
    spark: Any, app_id: str, mode: str
) -> None:
    handlers: dict[str, Any] = {
        # were it asked, a typed sink's failure would count as a processing error
        "processing_exception_handler": LogAndContinueProcessingExceptionHandler
    }
    if mode == "continue":
        handlers["production_exception_handler"] = LogAndContinueProductionExceptionHandler
    elif mode == "dead-letter":
        handlers["production_exception_handler"] = DeadLetterQueueProductionExceptionHandler
        handlers["dead_letter_queue_topic"] = Topic.parquet("dlq", "/unused")
    cfg = StreamsConfig(application_id=app_id, num_partitions=1, **handlers)
    with TopologyTestDriver(untyped_to_out(), cfg, session=spark) as d:
        out = d.create_output_topic("out", key_type=str, value_type=int)  # before a batch
        _pipe(d, [0, 1, "x", 3])
        if mode == "fail":
            with pytest.raises(ProcessingError) as info:
                d.process()
            text = str(info.value)
            assert SINK in text and "offset=2" in text and "declared type is long" in text
            assert "production_exception_handler" in text
            return
        assert out.read_key_values() == [("k1", 1), ("k3", 3)]
        m = d.metrics()
        if mode == "continue":
            assert m.dropped_by_reason() == {(SINK, "production-error"): 1}
        else:
            (dead,) = d.dead_letter_topic().read_raw()
            assert dead["processor_node_id"] == SINK
            # the JSON of the stored record's value, as for a declared type
            assert json.loads(dead["value"]) == "x" and json.loads(dead["key"]) == "k2"
            assert m.dead_letter_records == 1
