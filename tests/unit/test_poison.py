"""Poison pills in the fused chain: values Arrow refuses on the way out, and stored values
that their class refuses on the way in, each go to the right handler with their record;
the other records of the batch go on. The chains run in-process on Arrow batches."""

from __future__ import annotations

import dataclasses
import decimal
import json
from collections.abc import Callable
from typing import Any

import pyarrow as pa
import pytest
from support.envelopes import envelope_batch

from kspark import StreamsBuilder, StreamsConfig, Topic
from kspark.compiler import stages
from kspark.compiler.compiler import compile_topology
from kspark.errors import (
    DeadLetterQueueDeserializationExceptionHandler,
    DeadLetterQueueProductionExceptionHandler,
    LogAndContinueDeserializationExceptionHandler,
)
from kspark_server.chain import make_chain
from kspark_server.handling import DeserializationFailed, ProcessingFailed


def _batch(value_type: Any, values: list[Any]) -> pa.RecordBatch:
    return envelope_batch(str, value_type, [(f"k{i}", v) for i, v in enumerate(values)])


def _run(
    build: Callable[[Any], Any], value_type: Any, values: list[Any], **config: Any
) -> tuple[list[Any], list[dict[str, Any]]]:
    b = StreamsBuilder()
    build(b.stream(Topic.jsonl("in", "/in"), key_type=str, value_type=value_type)).to(
        Topic.jsonl("out", "/out")
    )
    cfg = StreamsConfig(
        application_id="t", dead_letter_queue_topic=Topic.jsonl("d", "/d"), **config
    )
    (part,) = compile_topology(b.build(), cfg).sinks
    assert isinstance(part.stage, stages.Chain)
    records, side = [], []
    for out in make_chain(part.stage.spec)(iter([_batch(value_type, values)])):
        for row in out.to_pylist():
            if row["ks_side"] is None:
                records.append(row["value"])
            else:
                side.append(json.loads(row["ks_side"]))
    return records, side


UNFIT = {
    "int of 2**63": (int, 2**63),
    "decimal beyond 38 digits": (decimal.Decimal, decimal.Decimal("1e30")),
    "decimal beyond 18 places": (decimal.Decimal, decimal.Decimal("1.0000000000000000001")),
    "lone surrogate": (str, "a\ud800"),
}


@pytest.mark.parametrize("flat", [False, True], ids=["map", "flat-map"])
@pytest.mark.parametrize("case", sorted(UNFIT))
def test_a_value_arrow_refuses_goes_to_the_production_handler(case: str, flat: bool) -> None:
    out_type, bad = UNFIT[case]

    def build(s: Any) -> Any:
        if flat:
            s = s.flat_map_values(lambda v: [v], value_type=int)
        return s.map_values(lambda v: bad if v == 1 else out_type(v), value_type=out_type)

    records, side = _run(
        build,
        int,
        [0, 1, 2],
        production_exception_handler=DeadLetterQueueProductionExceptionHandler,
    )
    assert records == [out_type(0), out_type(2)]  # the batch's other records go on
    (dead,) = side
    assert (dead["kind"], dead["src_offset"], dead["reason"]) == ("dlq", 1, "production-error")
    assert "does not fit its column type" in dead["exception_message"]


def test_without_a_production_handler_the_refused_value_is_named() -> None:
    with pytest.raises(ProcessingFailed, match=r"offset=1.*does not fit its column type"):
        _run(lambda s: s.map_values(lambda v: 2**63 if v else v, value_type=int), int, [0, 1])


@dataclasses.dataclass
class Positive:
    n: int

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError(f"n must be positive, got {self.n}")


def _doubled(flat: bool) -> Callable[[Any], Any]:
    def build(s: Any) -> Any:
        if flat:
            s = s.flat_map_values(lambda v: [v], value_type=Positive)
        return s.map_values(lambda v: v.n * 2, value_type=int)

    return build


# stored as it was written: a class's validator refuses it only when it is read back
STORED = [Positive(1), dataclasses.replace(Positive(1), n=1), Positive(3)]
object.__setattr__(STORED[1], "n", -2)


@pytest.mark.parametrize("flat", [False, True], ids=["map", "flat-map"])
def test_a_value_its_class_refuses_goes_to_the_deserialization_handler(flat: bool) -> None:
    with pytest.raises(DeserializationFailed, match=r"KSPARK_DESERIALIZATION_FAILED.*offset=1"):
        _run(_doubled(flat), Positive, STORED)
    records, side = _run(
        _doubled(flat),
        Positive,
        STORED,
        deserialization_exception_handler=LogAndContinueDeserializationExceptionHandler,
    )
    assert records == [2, 6]
    (count,) = side
    assert (count["kind"], count["reason"], count["count"]) == (
        "dropped",
        "deserialization-error",
        1,
    )
    records, side = _run(
        _doubled(flat),
        Positive,
        STORED,
        deserialization_exception_handler=DeadLetterQueueDeserializationExceptionHandler,
    )
    (dead,) = side
    assert (dead["kind"], dead["src_offset"]) == ("dlq", 1)
    assert json.loads(dead["dlq_value"]) == {"n": -2}
    assert "n must be positive" in dead["exception_message"]
