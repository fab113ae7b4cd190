"""The Processor API without Spark: the plan (stores connected at build, types from the
processor's generic base), the stores over a task state, and the operator's processing
and punctuation against a small reference model, over any split into micro-batches."""

from __future__ import annotations

import itertools
import json
from datetime import timedelta
from typing import Any

import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kspark import StreamsBuilder, StreamsConfig, Topic
from kspark.compiler import compile_topology
from kspark.compiler import stages as stg
from kspark.errors import (
    InvalidArgumentError,
    InvalidTopologyError,
    ProcessingExceptionHandler,
    Response,
)
from kspark.plan.processing import Process, ProcessValues
from kspark.processor import (
    FixedKeyProcessor,
    FixedKeyProcessorContext,
    FixedKeyRecord,
    Processor,
    ProcessorContext,
    PunctuationType,
    Record,
)
from kspark.state import KeyValueStore, Stores
from kspark_server import handling, taskstate
from kspark_server.operators.base import Batch
from kspark_server.procstores import KVStore, MemoryTable, VersionedKVStore, WindowKVStore
from kspark_server.spec import Handling, KeyValue, Packed, PrimSpec, ProcessorSpec, StoreSpec

INTERVAL = 10


class Counter(Processor[str, str, str, int]):
    """Counts each key's records ("del" removes the key's count) and forwards the count;
    every ``INTERVAL`` ms of stream time forwards ("tick", the number of keys)."""

    def init(self, context: ProcessorContext[str, int]) -> None:
        self.context = context
        self.counts: KeyValueStore[str, int] = context.get_state_store("counts")
        context.schedule(timedelta(milliseconds=INTERVAL), PunctuationType.STREAM_TIME, self.tick)

    def process(self, record: Record[str, str]) -> None:
        if record.value == "del":
            self.counts.delete(record.key)
            return
        n = (self.counts.get(record.key) or 0) + 1
        self.counts.put(record.key, n)
        self.context.forward(record.with_value(n))

    def tick(self, timestamp: int) -> None:
        with self.counts.all() as it:
            keys = sum(1 for _ in it)
        self.context.forward(Record("tick", keys * 1000 + timestamp % 1000, timestamp))


def store_builder(name: str = "counts") -> Any:
    return Stores.key_value_store_builder(
        Stores.persistent_key_value_store(name), key_type=str, value_type=int
    )


# -- the plan ---------------------------------------------------------------------------


def test_output_types_come_from_the_generic_base_and_stores_connect_at_build() -> None:
    b = StreamsBuilder()
    s = b.stream("in", key_type=str, value_type=str).process(Counter, "counts")
    assert isinstance(s.node, Process) and s.node.changes_key
    assert (s.node.key_type.display(), s.node.value_type.display()) == ("str", "int")
    s.to("out")
    b.add_state_store(store_builder())  # after the processor that names it
    topo = b.build()
    (node,) = [x for x in topo.nodes() if isinstance(x, Process)]
    assert [d.name for d in node.store_defs] == ["counts"]
    assert topo.stores() == {"counts": node.name}
    assert "(stores: [counts])" in topo.describe()


def test_a_store_never_added_fails_the_build() -> None:
    b = StreamsBuilder()
    b.stream("in", key_type=str, value_type=str).process(Counter, "counts").to("out")
    with pytest.raises(InvalidTopologyError, match=r"\['counts'\].*never added"):
        b.build()


def test_get_state_store_of_a_store_not_connected_fails_the_build() -> None:
    b = StreamsBuilder().add_state_store(store_builder())
    b.stream("in", key_type=str, value_type=str).process(Counter).to("out")
    with pytest.raises(InvalidTopologyError, match="not connected") as info:
        b.build()
    assert "'counts'" in str(info.value) and "KSTREAM-PROCESSOR-0000000001" in str(info.value)


def test_suppliers_are_classes_or_factories_of_processors() -> None:
    s = StreamsBuilder().stream("in", key_type=str, value_type=str)
    with pytest.raises(InvalidArgumentError, match="not an instance"):
        s.process(Counter(), "counts")  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="FixedKeyProcessor"):
        s.process_values(Counter)  # type: ignore[arg-type]
    made = s.process(lambda: Counter(), "counts", key_type=str, value_type=int)
    assert made.node.value_type.display() == "int"
    with pytest.raises(InvalidTopologyError, match="added already"):
        StreamsBuilder().add_state_store(store_builder()).add_state_store(store_builder())


class Keep(FixedKeyProcessor[str, str, int]):
    def init(self, context: FixedKeyProcessorContext[str, int]) -> None:
        self.context = context

    def process(self, record: FixedKeyRecord[str, str]) -> None:
        self.context.forward(record.with_value(len(record.value)))


def test_process_values_keeps_the_key_and_compiles_to_a_processor_operator() -> None:
    b = StreamsBuilder()
    src = b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=str)
    s = src.process_values(Keep)
    assert isinstance(s.node, ProcessValues) and not s.node.changes_key
    s.to(Topic.jsonl("out", "/tmp/out"))
    out = compile_topology(b.build(), StreamsConfig(application_id="p"))
    (stage,) = [x for x in out.stages() if isinstance(x, stg.Stateful)]
    assert isinstance(stage.spec, ProcessorSpec) and stage.spec.fixed_key
    assert stage.spec.application_id == "p"


# -- the stores -------------------------------------------------------------------------


def test_key_value_store_ranges_and_prefix_scans_in_key_order() -> None:
    kv = KVStore("s", MemoryTable(), PrimSpec(spark="string"), PrimSpec(spark="long"))
    kv.put_all([("b2", 2), ("a1", 1), ("b1", 3), ("c", 4)])
    with kv.range("a1", "b2") as it:
        assert list(it) == [("a1", 1), ("b1", 3), ("b2", 2)]
    assert list(kv.reverse_range("b1", None)) == [("c", 4), ("b2", 2), ("b1", 3)]
    assert list(kv.prefix_scan("b")) == [("b1", 3), ("b2", 2)]
    assert kv.put_if_absent("c", 9) == 4 and kv.put_if_absent("d", 5) is None
    kv.put("c", None)
    assert kv.get("c") is None and kv.approximate_num_entries() == 4


def test_versioned_store_answers_as_of_and_drops_history_past_retention() -> None:
    v = VersionedKVStore("v", MemoryTable(), None, None, 100, {})
    v.put("k", "a", 10)
    v.put("k", "b", 50)
    assert v.get("k").value == "b"  # type: ignore[union-attr]
    found = v.get("k", 20)
    assert found is not None and (found.value, found.timestamp, found.valid_to) == ("a", 10, 50)
    assert v.get("k", 5) is None
    assert v.delete("k", 60) is not None and v.get("k") is None
    assert v.put("k", "old", -100) == -1  # older than the history retention


def test_window_store_fetches_windows_and_expires_them() -> None:
    w = WindowKVStore("w", MemoryTable(), None, None, 100, False, {})
    w.put("k", 1, 0)
    w.put("k", 2, 10)
    w.put("j", 3, 10)
    assert list(w.fetch("k", 0, 10)) == [(0, 1), (10, 2)]
    assert list(w.fetch_all(10, 10)) == [(("j", 10), 3), (("k", 10), 2)]
    w.put("k", 4, 105)  # stream time 105: windows starting at or before 5 expire
    assert list(w.fetch("k", 0, 200)) == [(10, 2), (105, 4)]
    dup = WindowKVStore("d", MemoryTable(), None, None, 100, True, {})
    dup.put("k", 1, 0)
    dup.put("k", 2, 0)
    assert list(dup.fetch("k", 0, 0)) == [(0, 1), (0, 2)]


# -- the operator -------------------------------------------------------------------------

COLUMNS = ["key", "value", "timestamp", "headers", "topic", "partition", "offset"]
COLUMNS += ["ks_seq", "ks_sub", "ks_side"]
STR = PrimSpec(spark="string")
LONG = PrimSpec(spark="long")


def operator(supplier: Any = Counter, handler: Any = None) -> Any:
    from kspark_server.operators.processor import UserProcessor

    schema = json.dumps({"type": "struct", "fields": [{"name": c} for c in COLUMNS]})
    spec = ProcessorSpec(
        processor="counter",
        store="counter",
        supplier=supplier,
        fixed_key=False,
        stores=(StoreSpec(name="counts", kind="key_value", key=STR, value=LONG),),
        input=KeyValue(key=STR, value=STR),
        output=KeyValue(key=STR, value=LONG),
        output_schema=schema,
        packed=Packed(),
        handling=Handling(processing=handler),
    )
    p = UserProcessor(spec)
    p.guard = handling.Guard(spec.handling)
    p.unpack_value = lambda x: x
    p.pack_out = lambda x: x
    p.setup()
    return p


def run_batches(batches: list[list[tuple[str, str, int]]], p: Any = None) -> list[tuple[str, int]]:
    """The records forwarded over ``batches``, the task state kept between them."""
    p = p if p is not None else operator()
    state = taskstate.empty("processor", False)
    got: list[tuple[str, int]] = []
    seq = 0
    for records in batches:
        frame = pd.DataFrame(
            {
                "key": [k for k, _, _ in records],
                "value": [v for _, v, _ in records],
                "timestamp": [t for _, _, t in records],
                "headers": [None] * len(records),
                "topic": ["in"] * len(records),
                "partition": [0] * len(records),
                "offset": list(range(seq, seq + len(records))),
                "ks_seq": list(range(seq, seq + len(records))),
                "ks_sub": [0] * len(records),
                "ks_side": [None] * len(records),
                "ks_hash": [7] * len(records),
            }
        )
        seq += len(records)
        p.touched = set()
        out = p.emitter()
        p.process(state, Batch(frame, COLUMNS, {}), 0, out)
        got.extend((r["key"], r["value"]) for _, r in out.carried)
        # what the engine saves between batches: only the entries, as the local store would
        # hold them (a real run rebuilds them from the durable log)
        state = taskstate.from_pairs(
            "processor",
            False,
            taskstate.scalars("processor", False, state),
            dict(
                (k, e)
                for k, e in taskstate.change_pairs(
                    "processor", False, state, list(state["entries"])
                )
                if e is not None
            ),
        )
    return got


def reference(records: list[tuple[str, str, int]]) -> list[tuple[str, int]]:
    """Kafka Streams' processor and punctuation rules, literally."""
    counts: dict[str, int] = {}
    out: list[tuple[str, int]] = []
    stream_time: int | None = None
    due = 0
    for k, v, ts in records:
        if v == "del":
            counts.pop(k, None)
        else:
            counts[k] = counts.get(k, 0) + 1
            out.append((k, counts[k]))
        stream_time = ts if stream_time is None else max(stream_time, ts)
        if stream_time >= due:
            out.append(("tick", len(counts) * 1000 + stream_time % 1000))
            due = due + INTERVAL if due + INTERVAL > stream_time else stream_time + INTERVAL
    return out


RECORDS = st.lists(
    st.tuples(
        st.sampled_from(["a", "b", "c"]), st.sampled_from(["x", "x", "del"]), st.integers(0, 60)
    ),
    min_size=1,
    max_size=25,
)


@settings(max_examples=80, deadline=None)
@given(records=RECORDS, cuts=st.lists(st.integers(1, 24), max_size=4, unique=True))
def test_operator_matches_the_reference_over_any_batch_split(
    records: list[tuple[str, str, int]], cuts: list[int]
) -> None:
    bounds = [0, *sorted(c for c in cuts if c < len(records)), len(records)]
    batches = [records[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    assert run_batches(batches) == reference(records)


class Recording(ProcessingExceptionHandler):
    def __init__(self) -> None:
        self.seen: list[tuple[str | None, str, int | None, str]] = []

    def handle(self, context: Any, record: Any, exception: Exception) -> Response:
        self.seen.append((context.topic, context.processor_node_id, context.offset, str(exception)))
        return Response.continue_()


class Fragile(Processor[str, str, str, int]):
    """Raises on "boom"; forwards a str (the wrong type) on "str"; its punctuator raises
    at its second firing and then cancels itself."""

    def init(self, context: ProcessorContext[str, int]) -> None:
        self.context = context
        self.counts: KeyValueStore[str, int] = context.get_state_store("counts")
        self.ticker = context.schedule(
            timedelta(milliseconds=INTERVAL), PunctuationType.STREAM_TIME, self.tick
        )

    def process(self, record: Record[str, str]) -> None:
        if record.value == "boom":
            raise ValueError("boom")
        if record.value == "str":
            self.context.forward(record)  # type: ignore[arg-type]
            return
        self.context.forward(record.with_value(1))

    def tick(self, timestamp: int) -> None:
        n = (self.counts.get("ticks") or 0) + 1
        self.counts.put("ticks", n)
        if n == 2:
            self.ticker.cancel()
            raise RuntimeError("tock")
        self.context.forward(Record("tick", timestamp, timestamp))


def test_failures_in_process_and_punctuators_go_to_the_handler_and_cancel_lasts() -> None:
    handler = Recording()
    p = operator(Fragile, handler)
    got = run_batches(
        [[("a", "x", 0), ("a", "boom", 1)], [("a", "str", 2), ("a", "x", 30)], [("a", "x", 90)]],
        p,
    )
    # the second firing raised and cancelled: no ticks after it, in later batches either
    assert got == [("a", 1), ("tick", 0), ("a", 1), ("a", 1)]
    assert [(t, where, off) for t, where, off, _ in handler.seen] == [
        ("in", "counter", 1),
        ("in", "counter", 2),
        (None, "counter", None),
    ]
    assert "boom" in handler.seen[0][3] and "tock" in handler.seen[2][3]
    assert "declared type" in handler.seen[1][3]


def test_without_a_handler_a_failing_processor_stops_the_task_naming_it() -> None:
    with pytest.raises(handling.ProcessingFailed, match="processor counter failed on record"):
        run_batches([[("a", "boom", 0)]], operator(Fragile))


def test_a_rescale_moves_store_entries_by_hash_and_keeps_the_schedule() -> None:
    from kspark_server import rescale

    state = taskstate.empty("processor", False)
    state["stream_time"] = 50
    state["punct"] = {"0": ["STREAM_TIME", 10, 60, False]}
    for i, key in enumerate("abcd"):
        state["entries"][("counts", key)] = [key, i]
        state["hash"][("counts", key)] = i
    parts = rescale.split("processor", False, state, 2)
    assert sorted(parts) == [0, 1]
    assert sorted(k for _, k in parts[1]["entries"]) == ["b", "d"]
    assert all(p["punct"] == state["punct"] and p["stream_time"] == 50 for p in parts.values())
    merged = rescale.merge("processor", False, list(parts.values()))
    assert merged["entries"] == state["entries"] and merged["stream_time"] == 50
    assert rescale.entries("processor", False, merged) == 4
