"""The fused stateless chain against a record-by-record reference model.

The model below takes one input record at a time through every step, as Kafka Streams'
processors do, and says what the chain must give: the output records in their order
(with each fan-out output's ``ks_sub``), and which records failed where, as dead letters
or drop counts. The chain runs each step over a whole batch instead; for random step
sequences with fan-outs, branches, failing user functions and values of the wrong type,
both must agree.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable
from typing import Any

import pyarrow as pa
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kspark import StreamsBuilder, StreamsConfig, Topic
from kspark.compiler import stages
from kspark.compiler.compiler import compile_topology
from kspark.errors import (
    LogAndContinueProcessingExceptionHandler,
    LogAndContinueProductionExceptionHandler,
    ProcessingExceptionHandler,
)
from kspark_server import envelope
from kspark_server.chain import make_chain
from kspark_server.handlers import DeadLetterRecord, ErrorHandlerContext, Response
from kspark_server.spec import (
    BranchStep,
    ChainSpec,
    FlatMapStep,
    FlatMapValuesStep,
    MapStep,
    MapValuesStep,
    Step,
)
from kspark_server.transport import arrow_schema

OPS = [
    "filter",
    "filter_not",
    "map_values",
    "map_values_key",
    "select_key",
    "map",
    "peek",
    "flat_map",
    "flat_map_values",
    "branch",
]

Pair = tuple[Any, Any]


class Failed(Exception):
    """A step of the model failed on ``record`` (the key and value its handler sees)."""

    def __init__(self, step: int, record: Pair) -> None:
        super().__init__(step)
        self.step, self.record = step, record


#: What the recording handler was called with.
CALLS: list[tuple[Any, ...]] = []


class Recording(ProcessingExceptionHandler):
    """Notes each call, and dead-letters the record as its failing step saw it."""

    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        where = (context.topic, context.partition, context.offset, context.timestamp)
        CALLS.append((context.processor_node_id, *where, context.headers, *record.values()))
        return Response.resume([DeadLetterRecord(record["key"], record["value"])])


def _num(v: Any) -> int:
    return v if isinstance(v, int) else 0


def _user_functions(op: str, m: int, bad: int) -> Any:
    """The user function(s) of one step: they raise on values ``bad`` modulo ``m``; the
    mappers sometimes give a null value, a ``map_values`` a str for its declared int."""

    def check(v: Any) -> int:
        if _num(v) % m == bad:
            raise ValueError(f"{v} is bad")
        return _num(v)

    if op in ("filter", "filter_not"):
        return lambda k, v: check(v) % 3 != 0
    if op == "map_values":
        return lambda v: "x" if v == 35 else None if v == 7 else check(v) + 1
    if op == "map_values_key":
        return lambda k, v: check(v) * 2 + len(k or "")
    if op == "select_key":
        return lambda k, v: None if v == 11 else f"{k}{check(v) % 5}"
    if op == "map":
        return lambda k, v: (str(v), check(v) - 1)
    if op == "peek":
        return lambda k, v: check(v)
    if op == "flat_map":
        return lambda k, v: [(f"{k}.{j}", _num(v) + j) for j in range(check(v) % 3)]
    if op == "flat_map_values":

        def values(v: Any) -> Any:  # a generator that may fail after its first output
            for j in range(_num(v) % 4):
                yield _num(v) * 10 + j
                check(v + j if isinstance(v, int) else v)

        return values
    # branch: the record's first predicate that holds, or the default branch
    return (lambda k, v: _num(v) % 3 == 0, lambda k, v: check(v) % 2 == 0)


def _build(ops: list[tuple[str, int, int, int]]) -> Any:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("in", "/in"), key_type=str, value_type=int)
    for op, m, bad, index in ops:
        fn = _user_functions(op, m, bad)
        if op == "filter":
            s = s.filter(fn)
        elif op == "filter_not":
            s = s.filter_not(fn)
        elif op == "map_values":
            s = s.map_values(fn, value_type=int)
        elif op == "map_values_key":
            s = s.map_values(fn, value_type=int)
        elif op == "select_key":
            s = s.select_key(fn, key_type=str)
        elif op == "map":
            s = s.map(fn, key_type=str, value_type=int)
        elif op == "peek":
            s = s.peek(fn)
        elif op == "flat_map":
            s = s.flat_map(fn, key_type=str, value_type=int)
        elif op == "flat_map_values":
            s = s.flat_map_values(fn, value_type=int)
        else:
            branches = s.split().branch(fn[0]).branch(fn[1]).default_branch()
            s = list(branches.values())[index]
    s.to(Topic.jsonl("out", "/out/out"))
    return b


def _step(op: str, fn: Any, index: int) -> Callable[[Any, Any], list[Pair]]:
    """The model of one step: a record to its outputs."""
    if op == "filter":
        return lambda k, v: [(k, v)] if fn(k, v) else []
    if op == "filter_not":
        return lambda k, v: [] if fn(k, v) else [(k, v)]
    if op == "map_values":
        return lambda k, v: [(k, fn(v))]
    if op == "map_values_key":
        return lambda k, v: [(k, fn(k, v))]
    if op == "select_key":
        return lambda k, v: [(fn(k, v), v)]
    if op == "map":
        return lambda k, v: [fn(k, v)]
    if op == "peek":
        return lambda k, v: (fn(k, v), [(k, v)])[1]
    if op == "flat_map":
        return lambda k, v: list(fn(k, v))
    if op == "flat_map_values":
        return lambda k, v: [(k, x) for x in fn(v)]

    def branch(k: Any, v: Any) -> list[Pair]:
        first = next((i for i, p in enumerate(fn) if p(k, v)), len(fn))
        return [(k, v)] if first == index else []

    return branch


def _model(
    ops: list[tuple[str, int, int, int]], records: list[Pair]
) -> tuple[list[tuple[Any, ...]], list[tuple[int, int, Any, Any]]]:
    """Outputs ``(key, value, offset, ks_sub)`` in order, and failures ``(step, offset,
    key, value)`` with the record the handler sees; step ``len(ops)`` is the encoding of
    the output, owned by the last step that made the value."""
    steps = [_step(op, _user_functions(op, m, bad), index) for op, m, bad, index in ops]
    fans_out = any(op in ("flat_map", "flat_map_values") for op, _, _, _ in ops)
    out: list[tuple[Any, ...]] = []
    failed: list[tuple[int, int, Any, Any]] = []
    for offset, record in enumerate(records):
        pairs = [record]
        for n, step in enumerate(steps):
            nxt: list[Pair] = []
            for k, v in pairs:
                try:
                    nxt.extend(step(k, v))
                except Exception:
                    # a function of the value alone: the handler sees the stored key
                    by_value = ops[n][0] in ("map_values", "flat_map_values")
                    failed.append((n, offset, record[0] if by_value else k, v))
            pairs = nxt
        for j, (k, v) in enumerate(pairs):
            if v is not None and type(v) is not int:
                failed.append((len(steps), offset, k, v))
            else:
                out.append((k, v, offset, j if fans_out else 0))
    return out, failed


def _batch(records: list[Pair], side: int) -> pa.RecordBatch:
    schema = arrow_schema(envelope.envelope_json("string", "long"))
    rows = [
        {
            "key": k,
            "value": v,
            "timestamp": 1000 + i,
            "headers": [{"key": "h", "value": str(i).encode()}],
            "topic": "in",
            "partition": i % 2,
            "offset": i,
            "ks_seq": i,
            "ks_sub": 0,
            "ks_side": None,
        }
        for i, (k, v) in enumerate(records)
    ]
    if side >= 0:  # a metric row among the records: it passes through
        rows.insert(min(side, len(rows)), {"ks_side": '{"kind": "dropped", "count": 1}'})
    return pa.RecordBatch.from_pylist(rows, schema=schema)


def _owner(spec: ChainSpec, n: int) -> str:
    """The processor a failure of model step ``n`` is reported under."""
    if n == len(spec.steps):
        makers = (MapStep, MapValuesStep, FlatMapStep, FlatMapValuesStep)
        n = max(i for i, s in enumerate(spec.steps) if isinstance(s, makers))
    step: Step = spec.steps[n]
    return step.split or step.processor if isinstance(step, BranchStep) else step.processor


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    ops=st.lists(
        st.tuples(st.sampled_from(OPS), st.integers(2, 9), st.integers(0, 8), st.integers(0, 2)),
        min_size=1,
        max_size=6,
    ),
    records=st.lists(
        st.tuples(st.sampled_from(["a", "b", None]), st.integers(0, 60) | st.none()),
        min_size=1,
        max_size=25,
    ),
    side=st.integers(-1, 25),
    dead_letters=st.booleans(),
)
def test_the_chain_gives_what_the_record_by_record_model_gives(
    ops: list[tuple[str, int, int, int]],
    records: list[Pair],
    side: int,
    dead_letters: bool,
) -> None:
    ops = [(op, m, bad % m, index) for op, m, bad, index in ops]
    config = StreamsConfig(
        application_id="t",
        processing_exception_handler=(
            Recording if dead_letters else LogAndContinueProcessingExceptionHandler
        ),
        production_exception_handler=LogAndContinueProductionExceptionHandler,
        dead_letter_queue_topic=Topic.jsonl("dlq", "/d"),
    )
    (part,) = compile_topology(_build(ops).build(), config).sinks
    assert isinstance(part.stage, stages.Chain)
    spec = part.stage.spec
    assert len(spec.steps) == len(ops)

    CALLS.clear()
    got: list[tuple[Any, ...]] = []
    letters: list[tuple[str, int, Any, Any]] = []
    counts: Counter[str] = Counter()
    passed = 0
    for batch in make_chain(spec)(iter([_batch(records, side)])):
        for row in batch.to_pylist():
            if row["ks_side"] is None:
                got.append((row["key"], row["value"], row["offset"], row["ks_sub"]))
                continue
            s = json.loads(row["ks_side"])
            assert s.get("reason", "processing-error") == "processing-error"
            if s["kind"] == "dlq":
                key, value = (
                    None if x is None else json.loads(x) for x in (s["dlq_key"], s["dlq_value"])
                )
                letters.append((s["processor"], s["src_offset"], key, value))
            elif "processor" in s:
                counts[s["processor"]] += s["count"]
            else:
                passed += 1

    want, failed = _model(ops, records)
    assert got == want
    assert passed == (side >= 0)
    reported = [(_owner(spec, n), offset, k, v) for n, offset, k, v in failed]
    if not dead_letters:
        assert counts == Counter(p for p, _, _, _ in reported)
        return
    # the handler is called once per failure, with the record's context
    contexts = [
        (p, "in", offset % 2, offset, 1000 + offset, (("h", str(offset).encode()),), k, v)
        for p, offset, k, v in reported
    ]
    assert sorted(CALLS, key=repr) == sorted(contexts, key=repr)
    # a dead letter's null key or value is the record's stored one
    stored = [
        (p, offset, records[offset][0] if k is None else k, records[offset][1] if v is None else v)
        for p, offset, k, v in reported
    ]
    assert sorted(letters, key=repr) == sorted(stored, key=repr)
