"""Global stores (``StreamsBuilder.add_global_store``) without Spark: the plan (a processor
reads the global stores its ``init`` asks for), the compiled operator (the store's topic
broadcast to every task), and the operator applying updates before each batch's records,
across batches, with the default and a custom state-update processor."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pandas as pd
import pytest

from kspark import StreamsBuilder, StreamsConfig
from kspark.bindings import bind_topology
from kspark.compiler import compile_topology
from kspark.compiler import stages as stg
from kspark.errors import (
    InvalidArgumentError,
    InvalidTopologyError,
    ProcessingExceptionHandler,
    RescaleError,
    Response,
)
from kspark.plan.processing import GlobalStoreSource, Process
from kspark.processor import Processor, ProcessorContext, Record, StateStoreError
from kspark.state import KeyValueStore, Stores
from kspark_server import handling, taskstate
from kspark_server.operators.base import Batch
from kspark_server.spec import GlobalStoreSpec, Handling, KeyValue, Packed, PrimSpec, ProcessorSpec


def rates_builder(name: str = "rates") -> Any:
    return Stores.key_value_store_builder(
        Stores.persistent_key_value_store(name), key_type=str, value_type=float
    )


class Priced(Processor[str, str, str, str]):
    """Forwards each record's value with its rate from the global store; "write" tries
    to put into it."""

    def init(self, context: ProcessorContext[str, str]) -> None:
        self.context = context
        self.rates: KeyValueStore[str, float] = context.get_state_store("rates")

    def process(self, record: Record[str, str]) -> None:
        if record.value == "write":
            self.rates.put("EUR", 0.0)
        self.context.forward(record.with_value(f"{record.value}:{self.rates.get(record.value)}"))


class Plain(Processor[str, str, str, str]):
    def init(self, context: ProcessorContext[str, str]) -> None:
        self.context = context

    def process(self, record: Record[str, str]) -> None:
        self.context.forward(record)


def priced(b: StreamsBuilder, supplier: Any = Priced) -> StreamsBuilder:
    b.stream("payments", key_type=str, value_type=str).process(supplier).to("out")
    return b


# -- the plan ---------------------------------------------------------------------------


def test_a_processor_whose_init_asks_for_a_global_store_reads_it() -> None:
    b = StreamsBuilder().add_global_store(rates_builder(), "rates")
    b.stream("other", key_type=str, value_type=str).process(Plain).to("plain")
    topo = priced(b).build()
    (reader,) = [x for x in topo.nodes() if isinstance(x, Process) and x.global_stores]
    (source,) = reader.global_stores
    assert isinstance(source, GlobalStoreSource) and source.topic_name == "rates"
    assert source.parents == () and source in reader.parents
    # the other processor does not ask for it, so its tasks keep no copy
    (plain,) = [x for x in topo.nodes() if isinstance(x, Process) and not x.global_stores]
    assert plain.parents == (plain.parent,)
    assert "Source: KSTREAM-SOURCE-0000000000 (topics: [rates])" in topo.describe()


def test_describe_shows_a_global_store_as_a_sub_topology_of_its_own() -> None:
    """As Kafka Streams describes it: the global store's source is a sub-topology that
    generates no tasks, with no edge to the processors that read the store."""
    topo = priced(StreamsBuilder().add_global_store(rates_builder(), "rates")).build()
    assert topo.describe().splitlines()[:6] == [
        "Topologies:",
        "   Sub-topology: 0 for global store (will not generate tasks)",
        "    Source: KSTREAM-SOURCE-0000000000 (topics: [rates])",
        "   Sub-topology: 1",
        "    Source: KSTREAM-SOURCE-0000000001 (topics: [payments])",
        "      --> KSTREAM-PROCESSOR-0000000002",
    ]
    assert "<-- KSTREAM-SOURCE-0000000000" not in topo.describe()


def test_describe_shows_a_global_table_as_a_sub_topology_of_its_own() -> None:
    b = StreamsBuilder()
    rates = b.global_table("rates", key_type=str, value_type=float)
    b.stream("payments", key_type=str, value_type=float).join(
        rates, lambda k, v: k, lambda v, r: v * r, value_type=float
    ).to("out")
    text = b.build().describe()
    assert "   Sub-topology: 0 for global store (will not generate tasks)" in text
    assert "   Sub-topology: 1\n" in text
    assert "<-- KSTREAM-SOURCE-0000000000" not in text


def test_global_store_misuse_fails_the_build() -> None:
    with pytest.raises(InvalidTopologyError, match="added already"):
        StreamsBuilder().add_state_store(rates_builder()).add_global_store(rates_builder(), "rates")
    window = Stores.window_store_builder(
        Stores.persistent_window_store("w", timedelta(minutes=1), timedelta(seconds=10), False),
        key_type=str,
        value_type=int,
    )
    with pytest.raises(InvalidTopologyError, match="a global store is a key-value store"):
        StreamsBuilder().add_global_store(window, "w")
    with pytest.raises(InvalidArgumentError, match="not an instance"):
        StreamsBuilder().add_global_store(
            rates_builder(),
            "rates",
            state_update_supplier=Plain(),  # type: ignore[arg-type]
        )

    class TwoGlobals(Plain):
        def init(self, context: ProcessorContext[str, str]) -> None:
            context.get_state_store("rates")
            context.get_state_store("fees")

    b = StreamsBuilder().add_global_store(rates_builder(), "rates")
    b.add_global_store(rates_builder("fees"), "fees")
    with pytest.raises(InvalidTopologyError, match=r"global stores \['fees', 'rates'\]"):
        priced(b, TwoGlobals).build()


def test_the_processor_compiles_with_the_store_s_topic_broadcast() -> None:
    b = priced(StreamsBuilder().add_global_store(rates_builder(), "rates"))
    config = StreamsConfig(application_id="shop", data_dir="/data", num_partitions=4)
    out = compile_topology(bind_topology(b.build(), config), config)
    (stage,) = [x for x in out.stages() if isinstance(x, stg.Stateful)]
    assert stage.broadcast_table and stage.table is not None
    assert isinstance(stage.table, stg.Read) and stage.table.topic.path == "/data/rates"
    spec = stage.spec
    assert isinstance(spec, ProcessorSpec) and spec.global_store is not None
    assert (spec.global_store.name, spec.global_store.update_supplier) == ("rates", None)
    assert spec.global_store.source == "KSTREAM-SOURCE-0000000000"


def test_an_app_with_a_global_store_is_not_rescaled() -> None:
    """Every task keeps a global store whole: a re-split by key would leave each of its
    entries in one task. Refused before the app's checkpoint is read."""
    from kspark.runtime import regroup

    class App:
        query = None

        def __init__(self) -> None:
            self.config = StreamsConfig(application_id="shop", data_dir="/data")
            b = priced(StreamsBuilder().add_global_store(rates_builder(), "rates"))
            self.topology = bind_topology(b.build(), self.config)

    with pytest.raises(RescaleError, match="cannot be rescaled"):
        regroup.rescale(App(), 4, lambda _phase: None)  # type: ignore[arg-type]


# -- the operator -------------------------------------------------------------------------

COLUMNS = ["key", "value", "timestamp", "headers", "topic", "partition", "offset"]
COLUMNS += ["ks_seq", "ks_sub", "ks_side"]
STR = PrimSpec(spark="string")
DOUBLE = PrimSpec(spark="double")


class Recording(ProcessingExceptionHandler):
    def __init__(self) -> None:
        self.seen: list[tuple[str, str]] = []

    def handle(self, context: Any, record: Any, exception: Exception) -> Response:
        self.seen.append((context.processor_node_id, str(exception)))
        return Response.continue_()


class Doubling(Processor[str, float, None, None]):
    """Stores twice each rate; a rate of -1 raises."""

    def init(self, context: ProcessorContext[None, None]) -> None:
        self.store: KeyValueStore[str, float] = context.get_state_store("rates")

    def process(self, record: Record[str, float]) -> None:
        if record.value == -1:
            raise ValueError("negative rate")
        self.store.put(record.key, None if record.value is None else record.value * 2)


def operator(updater: Any = None, handler: Any = None) -> Any:
    from kspark_server.operators.processor import UserProcessor

    schema = json.dumps({"type": "struct", "fields": [{"name": c} for c in COLUMNS]})
    spec = ProcessorSpec(
        processor="priced",
        store="priced",
        supplier=Priced,
        fixed_key=False,
        input=KeyValue(key=STR, value=STR),
        output=KeyValue(key=STR, value=STR),
        output_schema=schema,
        packed=Packed(),
        handling=Handling(processing=handler),
        global_store=GlobalStoreSpec(
            name="rates", key=STR, value=DOUBLE, update_supplier=updater, source="rates-source"
        ),
    )
    p = UserProcessor(spec)
    p.guard = handling.Guard(spec.handling)
    p.unpack_value = lambda x: x
    p.pack_out = lambda x: x
    p.setup()
    return p


Row = tuple[str, str | float | None, int, bool]  # key, value, timestamp, a rate update


def run_batches(p: Any, batches: list[list[Row]], task: int = 0) -> list[list[tuple[str, str]]]:
    """What each batch forwards; the task state kept between batches as the engine keeps
    it (only the entries)."""
    state = taskstate.empty("processor", False)
    got = []
    seq = 0
    for rows in batches:
        n = len(rows)
        frame = pd.DataFrame(
            {
                "key": [None if g else k for k, _, _, g in rows],
                "value": [None if g else v for _, v, _, g in rows],
                "timestamp": [t for _, _, t, _ in rows],
                "headers": [None] * n,
                "topic": ["rates" if g else "payments" for *_, g in rows],
                "partition": [0] * n,
                "offset": list(range(seq, seq + n)),
                "ks_seq": list(range(seq, seq + n)),
                "ks_sub": [0] * n,
                "ks_side": [None] * n,
                "ks_hash": [42] * n,
                "ks_jside": [1 if g else 0 for *_, g in rows],
                "ks_gkey": [k if g else None for k, _, _, g in rows],
                "ks_tvalue": pd.array([v if g else None for _, v, _, g in rows], dtype=object),
            }
        )
        seq += n
        p.touched = set()
        out = p.emitter()
        p.process(state, Batch(frame, COLUMNS, {}), task, out)
        got.append([(r["key"], r["value"]) for _, r in out.carried])
        state = taskstate.from_pairs(
            "processor",
            False,
            taskstate.scalars("processor", False, state),
            {
                k: e
                for k, e in taskstate.change_pairs(
                    "processor", False, state, list(state["entries"])
                )
                if e is not None
            },
        )
    return got


def test_updates_apply_before_the_batch_s_records_and_last_across_batches() -> None:
    got = run_batches(
        operator(),
        [
            # the update comes after the payment in the batch, and is applied before it
            [("a", "EUR", 5, False), ("EUR", 1.5, 9, True), ("GBP", 2.5, 9, True)],
            [("b", "EUR", 10, False), ("b", "GBP", 11, False)],
            [("GBP", None, 12, True), ("c", "GBP", 13, False), ("c", "EUR", 13, False)],
        ],
    )
    assert got == [
        [("a", "EUR:1.5")],
        [("b", "EUR:1.5"), ("b", "GBP:2.5")],
        [("c", "GBP:None"), ("c", "EUR:1.5")],
    ]


def test_a_state_update_processor_writes_the_store_and_its_failures_go_to_the_handler() -> None:
    handler = Recording()
    batches: list[list[Row]] = [
        [("EUR", 1.5, 1, True), ("GBP", -1, 2, True), ("a", "EUR", 3, False)],
        [("a", "GBP", 4, False)],
    ]
    assert run_batches(operator(Doubling, handler), batches) == [
        [("a", "EUR:3.0")],
        [("a", "GBP:None")],
    ]
    assert handler.seen == [("rates-source", "negative rate")]
    # the other tasks apply the same updates, and leave the report to task 0
    other = Recording()
    assert run_batches(operator(Doubling, other), batches, task=2)[0] == [("a", "EUR:3.0")]
    assert other.seen == []


def test_a_processor_cannot_write_a_global_store() -> None:
    handler = Recording()
    got = run_batches(
        operator(handler=handler), [[("EUR", 1.5, 1, True), ("a", "write", 2, False)]]
    )
    assert got == [[]]
    ((where, message),) = handler.seen
    assert where == "priced" and "cannot write global store 'rates' (put)" in message
    with pytest.raises(handling.ProcessingFailed, match="cannot write global store"):
        run_batches(operator(), [[("a", "write", 2, False)]])
    assert issubclass(StateStoreError, RuntimeError)
