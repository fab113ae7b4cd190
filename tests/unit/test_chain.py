"""The fused stateless chain, called in-process on Arrow batches as Spark sends them.

Each case states what the chain gives: output rows, dead letters and drop counts, whatever
fails (test_chain_model.py checks random chains against a record-by-record model).
Vectorized steps are checked against their per-record equivalents.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable, Iterator
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from kspark import StreamsBuilder, StreamsConfig, Topic
from kspark.compiler import stages
from kspark.compiler.compiler import compile_topology
from kspark.errors import (
    DeadLetterQueueProcessingExceptionHandler,
    DeadLetterQueueProductionExceptionHandler,
    InvalidArgumentError,
    LogAndContinueProcessingExceptionHandler,
)
from kspark.plan.types import describe_type
from kspark_server import codec, envelope
from kspark_server.chain import make_chain, with_constants
from kspark_server.handling import ProcessingFailed
from kspark_server.spec import ChainSpec
from kspark_server.transport import arrow_schema


@dataclasses.dataclass
class Order:
    id: str
    qty: int
    tags: list[str]


def _batch(
    key_type: Any, value_type: Any, records: list[tuple[Any, Any]], side: int = -1
) -> pa.RecordBatch:
    """An envelope batch of ``records`` (row ``side`` a metric row instead)."""
    kd, vd = describe_type(key_type), describe_type(value_type)
    schema = arrow_schema(envelope.envelope_json(kd.spark_json(), vd.spark_json()))
    kenc, venc = codec.encoder(kd.spec()), codec.encoder(vd.spec())
    rows = []
    for i, (k, v) in enumerate(records):
        rows.append(
            {
                "key": None if i == side else kenc(k),
                "value": None if i == side else venc(v),
                "timestamp": 1000 + i,
                "headers": [{"key": "h", "value": str(i).encode()}],
                "topic": "in",
                "partition": i % 2,
                "offset": i,
                "ks_seq": i,
                "ks_sub": 0,
                "ks_side": '{"kind": "dropped", "count": 1}' if i == side else None,
            }
        )
    return pa.RecordBatch.from_pylist(rows, schema=schema)


def _chains(b: StreamsBuilder, **config: Any) -> list[ChainSpec]:
    cfg = StreamsConfig(application_id="t", **config)
    out = []
    for part in compile_topology(b.build(), cfg).sinks:
        assert isinstance(part.stage, stages.Chain)
        out.append(part.stage.spec)
    return out


def _run(
    make: Callable[[ChainSpec], Callable[[Any], Iterator[pa.RecordBatch]]],
    spec: ChainSpec,
    batch: pa.RecordBatch,
) -> tuple[list[dict[str, Any]], list[Any]]:
    """Records and side rows (normalised: no chunk ids, stack traces or frames)."""
    records, side = [], []
    for out in make(spec)(iter([batch, batch.slice(3)])):
        for row in out.to_pylist():
            if row["ks_side"] is None:
                records.append(row)
            else:
                s = json.loads(row["ks_side"])
                s.pop("chunk", None)
                s.pop("stack_trace", None)
                side.append(sorted(s.items(), key=str))
    return records, sorted(side, key=str)


def _records(spec: ChainSpec, batch: pa.RecordBatch) -> list[dict[str, Any]]:
    return _run(make_chain, spec, batch)[0]


ORDERS = [
    ("a", Order("o1", 12, ["x"])),
    ("b", Order("o2", 0, ["urgent", "y"])),
    (None, Order("o3", 3, [])),
    ("d", None),
    ("e", Order("o5", 20, ["urgent"])),
    ("f", Order("o6", 0, [])),
    ("g", Order("o7", 7, ["z"])),
]


def _bad(v: Order) -> int:
    return 100 // v.qty


@pytest.mark.parametrize(
    "handler",
    [LogAndContinueProcessingExceptionHandler, DeadLetterQueueProcessingExceptionHandler],
    ids=["continue", "dead-letter"],
)
def test_every_stateless_step_drops_only_its_failing_records(handler: Any) -> None:
    b = StreamsBuilder()
    orders = b.stream(Topic.jsonl("orders", "/in"), key_type=str, value_type=Order)
    valid = orders.filter(lambda k, v: v is not None)
    valid.filter(lambda k, v: v.qty >= 3).map_values(
        lambda k, v: f"{k}:{v.qty}", value_type=str
    ).to(Topic.jsonl("tagged", "/out/tagged"))
    valid.map_values(_bad, value_type=int).select_key(lambda k, v: f"{k}{v}", key_type=str).peek(
        lambda k, v: None
    ).to(Topic.jsonl("ratio", "/out/ratio"))
    valid.map(lambda k, v: (v.id, 1 // (v.qty - 3)), key_type=str, value_type=int).to(
        Topic.jsonl("by-id", "/out/by-id")
    )
    branches = valid.split().branch(lambda k, v: "urgent" in v.tags).default_branch()
    for i, branch in enumerate(branches.values()):
        branch.filter_not(lambda k, v: v.qty == 0).to(
            Topic.jsonl(f"branch-{i}", f"/out/branch-{i}")
        )
    config = {
        "processing_exception_handler": handler,
        "dead_letter_queue_topic": Topic.jsonl("dlq", "/d"),
    }
    batch = _batch(str, Order, ORDERS, side=5)
    outputs = [_records(spec, batch) for spec in _chains(b, **config)]
    assert [r["value"] for r in outputs[0][:2]] == ["a:12", "None:3"]
    assert [r["key"] for r in outputs[1][:2]] == ["a8", "None33"]


def test_table_steps_pass_deletes_and_turn_filtered_rows_into_deletes() -> None:
    b = StreamsBuilder()
    table = b.table(Topic.jsonl("t", "/in"), key_type=str, value_type=int)
    table.filter(lambda k, v: v > 1).map_values(lambda v: v * 10, value_type=int).to_stream().to(
        Topic.jsonl("out", "/out/out")
    )
    (spec,) = _chains(b)
    out = _records(spec, _batch(str, int, [("a", 1), ("b", None), ("c", 5)]))
    assert [(r["key"], r["value"]) for r in out[:3]] == [("a", None), ("b", None), ("c", 50)]


def _sometimes_wrong(v: int) -> Any:
    return "x" if v == 2 else (True if v == 3 else v)


def test_a_wrong_output_type_fails_alone_through_the_steps_processing_handler() -> None:
    # the step declared int: a result that is not one is the step's failure (issue 16)
    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", "/in"), key_type=str, value_type=int).map_values(
        _sometimes_wrong, value_type=int
    ).to(Topic.jsonl("out", "/out/out"))
    (spec,) = _chains(
        b,
        processing_exception_handler=DeadLetterQueueProcessingExceptionHandler,
        dead_letter_queue_topic=Topic.jsonl("dlq", "/d"),
    )
    out = _records(spec, _batch(str, int, [(str(i), i) for i in range(6)]))
    assert [r["value"] for r in out[:4]] == [0, 1, 4, 5]


def test_a_failure_without_handler_names_the_record() -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", "/in"), key_type=str, value_type=int).map_values(
        lambda v: 1 // v, value_type=int
    ).to(Topic.jsonl("out", "/out/out"))
    (spec,) = _chains(b)
    with pytest.raises(ProcessingFailed, match="topic=in partition=0 offset=0"):
        list(make_chain(spec)(iter([_batch(str, int, [("a", 0)])])))


def test_vectorized_steps_match_their_per_record_forms() -> None:
    def per_record(vectorized: bool) -> ChainSpec:
        b = StreamsBuilder()
        s = b.stream(Topic.jsonl("in", "/in"), key_type=str, value_type=int)
        if vectorized:
            s = s.filter(lambda vs: pc.greater(vs, 1), vectorized=True)
            s = s.map_values(lambda vs: pc.multiply(vs, 10), vectorized=True, value_type=int)
        else:
            s = s.filter(lambda k, v: (v or 0) > 1).map_values(lambda v: v * 10, value_type=int)
        s.map_values(lambda k, v: f"{k}={v}", value_type=str).to(Topic.jsonl("out", "/out/out"))
        (spec,) = _chains(b)
        return spec

    batch = _batch(str, int, [("a", 1), ("b", None), ("c", 5), ("d", 2), ("e", 3)], side=4)
    want = _run(make_chain, per_record(False), batch)
    assert _run(make_chain, per_record(True), batch) == want
    assert [r["value"] for r in want[0][:2]] == ["c=50", "d=20"]


def _checked(vs: pa.Array) -> pa.Array:
    if pc.any(pc.equal(vs, 0)).as_py():
        raise ZeroDivisionError("a zero")
    return pc.divide(100, vs)


def test_a_failing_vectorized_batch_runs_again_record_by_record() -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", "/in"), key_type=str, value_type=int).map_values(
        _checked, vectorized=True, value_type=int
    ).to(Topic.jsonl("out", "/out/out"))
    (spec,) = _chains(
        b,
        processing_exception_handler=DeadLetterQueueProcessingExceptionHandler,
        dead_letter_queue_topic=Topic.jsonl("dlq", "/d"),
    )
    records, side = _run(make_chain, spec, _batch(str, int, [("a", 4), ("b", 0), ("c", 50)]))
    assert [(r["key"], r["value"]) for r in records] == [("a", 25), ("c", 2)]
    dead = [dict(s) for s in side if dict(s)["kind"] == "dlq"]
    assert [(d["src_offset"], d["dlq_value"], d["exception_message"]) for d in dead] == [
        (1, "0", "a zero")
    ]


def test_a_vectorized_result_of_another_length_is_a_failure() -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", "/in"), key_type=str, value_type=int).map_values(
        lambda vs: vs.slice(1), vectorized=True, value_type=int
    ).to(Topic.jsonl("out", "/out/out"))
    (spec,) = _chains(b)
    with pytest.raises(ProcessingFailed, match="as many values"):
        list(make_chain(spec)(iter([_batch(str, int, [("a", 1), ("b", 2)])])))


def test_a_vectorized_step_is_checked_when_built() -> None:
    s = StreamsBuilder().stream(Topic.jsonl("in", "/in"), key_type=str, value_type=int)
    with pytest.raises(InvalidArgumentError, match="needs value_type="):
        s.map_values(lambda vs: vs, vectorized=True)  # type: ignore[call-overload]
    with pytest.raises(InvalidArgumentError, match="takes one argument"):
        s.filter(lambda k, vs: vs, vectorized=True)  # type: ignore[call-overload]


def _tags(o: Order) -> Any:
    return {"x": o.tags} if o.qty else ["not", "a", "dict"]


def _first_order(o: Order) -> Any:
    return o if o.qty != 3 else dataclasses.replace(o, qty="three")  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("fn", "value_type", "failing"),
    [(_tags, dict[str, list[str]], 3), (_first_order, Order, 1)],
    ids=["map", "record"],
)
def test_nested_values_of_the_wrong_shape_fail_alone(
    fn: Any, value_type: Any, failing: int
) -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", "/in"), key_type=str, value_type=Order).filter(
        lambda k, v: v is not None
    ).map_values(fn, value_type=value_type).to(Topic.jsonl("out", "/out/out"))
    (spec,) = _chains(
        b,
        processing_exception_handler=DeadLetterQueueProcessingExceptionHandler,
        dead_letter_queue_topic=Topic.jsonl("dlq", "/d"),
    )
    out = _records(spec, _batch(str, Order, ORDERS))
    # the two batches (all of ORDERS, then from the fourth on) hold 9 orders that are not None
    assert len(out) == 9 - failing


def test_vectorized_steps_in_a_chain_with_a_flat_map_match_their_per_record_forms() -> None:
    def chain(vectorized: bool) -> ChainSpec:
        b = StreamsBuilder()
        s = b.stream(Topic.jsonl("in", "/in"), key_type=str, value_type=int)
        if vectorized:
            s = s.filter(lambda vs: pc.greater(vs, 1), vectorized=True)
            s = s.map_values(_checked, vectorized=True, value_type=int)
        else:
            s = s.filter(lambda k, v: (v or 0) > 1).map_values(lambda v: 100 // v, value_type=int)
        s.flat_map_values(lambda v: [v, v + 1], value_type=int).to(Topic.jsonl("out", "/out/out"))
        (spec,) = _chains(b, processing_exception_handler=LogAndContinueProcessingExceptionHandler)
        return spec

    batch = _batch(str, int, [("a", 1), ("b", None), ("c", 5), ("d", 2), ("e", 30)])
    got = _run(make_chain, chain(True), batch)
    assert got == _run(make_chain, chain(False), batch)
    assert [r["value"] for r in got[0][:4]] == [20, 21, 50, 51]


def test_fan_out_outputs_carry_their_own_records_envelope() -> None:
    # three outputs of the third record in a batch of three: as many rows as the batch,
    # yet each must be taken from the third record
    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", "/in"), key_type=str, value_type=int).flat_map_values(
        lambda v: range(v), value_type=int
    ).to(Topic.jsonl("out", "/out/out"))
    (spec,) = _chains(b)
    batch = _batch(str, int, [("a", 0), ("b", 0), ("c", 3)])
    out = [r for o in make_chain(spec)(iter([batch])) for r in o.to_pylist()]
    assert [(r["key"], r["value"], r["offset"], r["timestamp"], r["ks_sub"]) for r in out] == [
        ("c", 0, 2, 1002, 0),
        ("c", 1, 2, 1002, 1),
        ("c", 2, 2, 1002, 2),
    ]


@dataclasses.dataclass
class _Pair:
    key: str
    value: int


def _pairs(k: str, v: int) -> list[Any]:
    # pairs as tuples or objects with key and value; a value of 4 gives something else
    return [(k, v), _Pair(f"{k}!", v + 1)] + (["not a pair"] if v == 4 else [])


def test_a_flat_map_takes_pairs_of_any_shape_and_fails_on_anything_else() -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", "/in"), key_type=str, value_type=int).flat_map(
        _pairs, key_type=str, value_type=int
    ).to(Topic.jsonl("out", "/out/out"))
    (spec,) = _chains(b, processing_exception_handler=LogAndContinueProcessingExceptionHandler)
    batch = _batch(str, int, [("a", 1), ("b", 4), ("c", 7)])
    records, side = _run(make_chain, spec, batch)
    assert [(r["key"], r["value"], r["offset"], r["ks_sub"]) for r in records] == [
        ("a", 1, 0, 0),
        ("a!", 2, 0, 1),
        ("c", 7, 2, 0),
        ("c!", 8, 2, 1),
    ]
    assert [(dict(s)["processor"], dict(s)["count"]) for s in side] == [
        (spec.steps[0].processor, 1)
    ]


def _dynamic_or_not(v: Any):  # type: ignore[no-untyped-def]  # a dynamic result
    return {"n": v["n"] * 2, "tags": sorted(v.get("tags", []))} if v["n"] != 3 else {1, 2}


@pytest.mark.parametrize("out_type", ["dynamic", "int"])
def test_dynamic_values_run_step_by_step(out_type: str) -> None:
    calls: list[str] = []

    def keep(k: Any, v: Any) -> bool:
        calls.append(f"filter {k}")
        return bool(v["n"] != 1)

    def mapper(v: Any):  # type: ignore[no-untyped-def]
        calls.append(f"map {v['n']}")
        return _dynamic_or_not(v)

    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("in", "/in")).filter(keep)
    if out_type == "int":
        s.map_values(lambda v: 10 // (v["n"] - 2), value_type=int).to(Topic.jsonl("o", "/o"))
    else:
        s.map_values(mapper).to(Topic.jsonl("o", "/o"))
    (spec,) = _chains(
        b,
        processing_exception_handler=LogAndContinueProcessingExceptionHandler,
        production_exception_handler=DeadLetterQueueProductionExceptionHandler,
        dead_letter_queue_topic=Topic.jsonl("dlq", "/d"),
    )
    values = [{"n": i, "tags": ["b", "a"]} for i in range(6)]
    batch = _batch(Any, Any, [(f"k{i}", v) for i, v in enumerate(values)])
    out = _records(spec, batch)
    if out_type == "int":  # n=1 filtered, n=2 divides by zero
        assert [r["value"] for r in out[:4]] == [-5, 10, 5, 3]
    else:  # n=1 filtered, n=3 is a set: not JSON, the mapper's processing handler
        assert [json.loads(r["value"]) for r in out[:4]] == [
            {"n": n, "tags": ["a", "b"]} for n in (0, 4, 8, 10)
        ]
        # one step at a time over the batch, not each record through every step
        calls.clear()
        list(make_chain(spec)(iter([batch])))
        assert calls[:6] == [f"filter k{i}" for i in range(6)]


def test_the_chain_modules_hold_nothing_that_cannot_be_pickled() -> None:
    """kspark_server travels to the workers by value, each module's globals with it: none
    may be an object that cannot be pickled (a msgspec decoder made at import was one,
    and every chain failed to ship)."""
    from pyspark import cloudpickle

    from kspark_server import chain, codec, columns, handling, live

    for module in (chain, codec, columns, handling, live):
        for name, value in vars(module).items():
            if not name.startswith("__"):  # the module's own loader and spec stay home
                cloudpickle.dumps(value)


def test_dynamic_columns_leave_as_kspark_json_text_even_when_no_step_changes_them() -> None:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", "/in")).filter(lambda k, v: True).to(Topic.jsonl("o", "/o"))
    (spec,) = _chains(b)
    # as Spark's JSON reader hands them over: a string without quotes, keys unsorted
    batch = _batch(Any, Any, [("k", 1), ("k", 2)])
    raw = pa.array(["u1", '{"b":1,"a":2}'])
    batch = batch.set_column(0, "key", raw).set_column(1, "value", raw)
    out = _records(spec, batch)
    assert [(r["key"], r["value"]) for r in out[:2]] == [
        ('"u1"', '"u1"'),
        ('{"a":2,"b":1}', '{"a":2,"b":1}'),
    ]


@pytest.mark.parametrize("fan_out", [False, True], ids=["map", "flat-map"])
def test_constant_columns_left_out_of_the_pass_reach_handlers_and_dead_letters(
    fan_out: bool,
) -> None:
    """A chain given batches without its source's constant columns (topic, partition,
    headers: kept out of Spark's Arrow pass) gives the same records and the same dead
    letters, with the same error context, as over the whole envelope."""
    b = StreamsBuilder()
    s = (
        b.stream(Topic.parquet("orders", "/in", layout="value"), key_type=str, value_type=Order)
        .filter(lambda k, v: v is not None)
        .map_values(_bad, value_type=int)
    )
    if fan_out:
        s = s.flat_map_values(lambda v: [v, -v], value_type=int)
    s.to(Topic.parquet("out", "/out"))
    (spec,) = _chains(
        b,
        processing_exception_handler=DeadLetterQueueProcessingExceptionHandler,
        dead_letter_queue_topic=Topic.jsonl("dlq", "/d"),
    )
    full = _batch(str, Order, ORDERS, side=2)
    n = full.num_rows
    constants: dict[str, Any] = {
        "topic": "orders",
        "partition": 0,
        "headers": [],
        "ks_sub": 0,
        "ks_seq": {"same_as": "offset"},
    }
    if fan_out:  # a fan-out numbers a record's outputs in ks_sub
        del constants["ks_sub"]
    full = full.set_column(
        full.schema.get_field_index("headers"),
        "headers",
        pa.array([[]] * n, full.schema.field("headers").type),
    )
    full = full.set_column(full.schema.get_field_index("topic"), "topic", pa.array(["orders"] * n))
    full = full.set_column(
        full.schema.get_field_index("partition"), "partition", pa.array([0] * n, pa.int32())
    )
    order = [name for name, _ in envelope.ENVELOPE]
    described = json.dumps(
        [[c, order.index(c), dict(envelope.ENVELOPE)[c], constants[c]] for c in constants]
    )
    stripped = full.drop_columns(list(constants))

    def without(s: ChainSpec) -> Callable[[Any], Iterator[pa.RecordBatch]]:
        run = with_constants(make_chain(s), described)

        def put_back(batches: Any) -> Iterator[pa.RecordBatch]:
            for out in run(batches):
                assert not set(constants) & set(out.schema.names)
                # what Spark does after the pass: the constants as literals
                for c in sorted(constants, key=order.index):
                    t = full.schema.field(c).type
                    v = constants[c]
                    a = (
                        out.column(v["same_as"])
                        if isinstance(v, dict)
                        else pa.array([v] * out.num_rows, t)
                    )
                    out = out.add_column(order.index(c), c, a)
                yield out

        return put_back

    with_all = _run(make_chain, spec, full)
    assert _run(without, spec, stripped) == with_all
    dead = [dict(s) for s in with_all[1] if dict(s)["kind"] == "dlq"]
    assert dead and all(
        (d["src_topic"], d["src_partition"], d["dlq_headers"]) == ("orders", 0, []) for d in dead
    )


def test_only_columns_the_source_makes_constant_are_left_out_of_the_pass() -> None:
    from kspark.compiler.lowering.sources import read_constants

    def read(topic: Topic, value_type: Any = Order) -> stages.Read:
        b = StreamsBuilder()
        b.stream(topic, key_type=str, value_type=value_type).map_values(
            lambda v: 1, value_type=int
        ).to(Topic.parquet("out", "/out"))
        (chain,) = [
            p.stage for p in compile_topology(b.build(), StreamsConfig(application_id="t")).sinks
        ]
        assert isinstance(chain, stages.Chain) and isinstance(chain.input, stages.Read)
        return chain.input

    every = {
        "topic": "in",
        "partition": 0,
        "headers": [],
        "ks_sub": 0,
        "ks_seq": {"same_as": "offset"},
    }
    assert read_constants(read(Topic.parquet("in", "/in", layout="value"))) == every
    # an envelope-layout file topic stores partition, headers and ks_seq
    assert read_constants(read(Topic.jsonl("in", "/in"))) == {"topic": "in", "ks_sub": 0}
    assert read_constants(read(Topic.kafka("in", bootstrap_servers="localhost:9092"))) == {}
