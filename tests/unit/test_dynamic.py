"""Dynamic keys and values (no declared type): JSON text between steps, converted to a
declared type where one is needed. Plan-only and worker-side tests, no Spark."""

from __future__ import annotations

import dataclasses
import json
import os
from datetime import timedelta
from typing import Any

import pyarrow as pa
import pytest

from kspark import Materialized, StreamsBuilder, StreamsConfig, Topic
from kspark.bindings import bind_topology
from kspark.compiler import compile_topology
from kspark.compiler import stages as st
from kspark.errors import InvalidTopologyError
from kspark.plan.types import DYNAMIC, Dynamic, describe_type
from kspark_server import codec
from kspark_server import envelope as env
from kspark_server.chain import make_chain
from kspark_server.spec import (
    ChainSpec,
    Handling,
    JoinSpec,
    JsonSpec,
    KeyValue,
    MapValuesStep,
    PrimSpec,
)
from kspark_server.transport import arrow_schema


@dataclasses.dataclass
class Order:
    id: str
    qty: int


CFG = StreamsConfig(application_id="dyn", num_partitions=2, data_dir="/data")


def test_dict_list_and_any_declare_dynamic_values_of_that_shape() -> None:
    assert describe_type(dict) == Dynamic(shape="dict")
    assert describe_type(list) == Dynamic(shape="list")
    assert describe_type(Any) == DYNAMIC
    assert describe_type(dict[str, Any]).spark_json()["valueType"] == "string"
    assert DYNAMIC.spark_json() == "string" and DYNAMIC.spec() == JsonSpec()


@pytest.mark.parametrize(
    "value", [None, True, 7, 2.5, "abc", "5", [1, "x", None], {"b": 1, "a": {"c": [2]}}]
)
def test_json_values_come_back_equal(value: Any) -> None:
    enc, dec = codec.encoder(JsonSpec()), codec.decoder(JsonSpec())
    text = enc(value)
    assert text is None if value is None else isinstance(text, str)
    assert dec(text) == value


def test_equal_dicts_give_equal_text_whatever_their_order() -> None:
    enc = codec.encoder(JsonSpec(), "key")
    assert enc({"a": 1, "b": 2}) == enc({"b": 2, "a": 1})


def test_json_text_from_a_hand_written_file_reads_as_its_value() -> None:
    # Spark's JSON reader gives a JSON string without its quotes
    dec = codec.decoder(JsonSpec())
    assert dec("abc") == "abc" and dec('{"a":1}') == {"a": 1} and dec("12") == 12


def test_values_that_are_not_json_and_wrong_shapes_fail_with_the_fix() -> None:
    with pytest.raises(codec.EncodeError, match=r"not JSON-compatible.*declare its type"):
        codec.encoder(JsonSpec())(Order("o", 1))
    with pytest.raises(codec.EncodeError, match="declared type is dict"):
        codec.encoder(JsonSpec(shape="dict"))([1])
    assert codec.encoder(JsonSpec(shape="list"))((1, 2)) == "[1,2]"


def test_dynamic_values_convert_to_declared_types() -> None:
    order = describe_type(Order).spec()
    assert codec.converter(order)({"id": "o1", "qty": 2}) == Order("o1", 2)
    assert codec.converter(order)(Order("o1", 2)) == Order("o1", 2)
    assert codec.converter(PrimSpec(spark="double"))(3) == 3.0
    with pytest.raises(codec.EncodeError, match="cannot be read"):
        codec.converter(order)({"id": "o1"})
    with pytest.raises(codec.EncodeError, match="declared type is long"):
        codec.converter(PrimSpec(spark="long"))("x")


def _run_chain(spec: ChainSpec, rows: list[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    schema = arrow_schema(env.envelope_json("string", "string"))
    cols: dict[str, list[Any]] = {f.name: [None] * len(rows) for f in schema}
    cols["key"] = [k for k, _ in rows]
    cols["value"] = [v for _, v in rows]
    cols["ks_seq"] = list(range(len(rows)))
    cols["ks_sub"] = [0] * len(rows)
    cols["timestamp"] = [0] * len(rows)
    batch = pa.RecordBatch.from_pydict(cols, schema=schema)
    out = list(make_chain(spec)([batch]))
    return [(r["key"], r["value"]) for b in out for r in b.to_pylist() if r["ks_side"] is None]


def test_a_chain_carries_dynamic_values_as_json_text() -> None:
    dyn = KeyValue(key=JsonSpec(), value=JsonSpec())
    step = MapValuesStep(processor="M", fn=lambda v: {"n": v["n"] * 10}, with_key=False)
    spec = ChainSpec(
        input=dyn,
        output=dyn,
        steps=(step,),
        output_schema=env.envelope_json("string", "string"),
    )
    assert _run_chain(spec, [('"a"', '{"n":1}')]) == [('"a"', '{"n":10}')]


def test_a_chain_from_dynamic_values_converts_them_to_the_declared_output_type() -> None:
    order = describe_type(Order)
    step = MapValuesStep(processor="M", fn=lambda v: v, with_key=False)
    spec = ChainSpec(
        input=KeyValue(key=JsonSpec(), value=JsonSpec()),
        output=KeyValue(key=PrimSpec(spark="string"), value=order.spec()),
        steps=(step,),
        output_schema=env.envelope_json("string", order.spark_json()),
        handling=Handling(),
    )
    out = _run_chain(spec, [('"a"', json.dumps({"id": "o1", "qty": 3}))])
    assert out == [("a", {"id": "o1", "qty": 3})]


def test_untyped_topologies_compile_end_to_end() -> None:
    b = StreamsBuilder()
    events = b.stream("events")
    (
        events.filter(lambda k, v: v["n"] > 0)
        .map_values(lambda v: v["n"] * 10)
        .deduplicate_by_key_value(lambda k, v: v, timedelta(minutes=1))
        .to("tens")
    )
    events.deduplicate(lambda k, v: v["id"], timedelta(minutes=1)).to("unique")
    rates = b.table("rates", materialized=Materialized.as_versioned("rates", timedelta(hours=1)))
    events.left_join(rates, lambda v, r: {"v": v, "r": r}).to("joined")
    out = compile_topology(bind_topology(b.build(), CFG), CFG)
    for stage in out.stages():
        if isinstance(stage, st.Read):
            assert stage.key_type == DYNAMIC and stage.value_type == DYNAMIC
    join = next(s for s in out.stages() if isinstance(s, st.Stateful) and s.table is not None)
    assert isinstance(join.spec, JoinSpec)
    assert join.spec.table.value == JsonSpec() and join.spec.output.value == JsonSpec()
    assert not join.spec.packed.value and not join.spec.packed.out


def test_a_dynamic_stream_key_is_converted_to_the_table_key_type() -> None:
    b = StreamsBuilder()
    rates = b.table("rates", key_type=str, value_type=float)
    b.stream("payments").join(rates, lambda v, r: v * r).to("out")
    topology = b.build()
    assert topology.node("KSTREAM-JOIN-0000000003").key_type == describe_type(str)
    out = compile_topology(bind_topology(topology, CFG), CFG)
    join = next(s for s in out.stages() if isinstance(s, st.Stateful))
    assert isinstance(join.stream, st.Chain) and join.stream.spec.steps == ()
    assert join.stream.spec.input.key == JsonSpec()
    assert join.stream.spec.output.key == PrimSpec(spark="string")


def test_declared_key_types_that_differ_still_do_not_join() -> None:
    b = StreamsBuilder()
    rates = b.table("rates", key_type=str, value_type=float)
    with pytest.raises(InvalidTopologyError, match="differs from table key type"):
        b.stream("payments", key_type=int).join(rates, lambda v, r: v * r)


def test_a_sink_of_dynamic_values_writes_json_text_to_kafka() -> None:
    b = StreamsBuilder()
    b.stream("in").to("out")
    cfg = CFG.with_(bootstrap_servers="broker:9092")
    out = compile_topology(bind_topology(b.build(), cfg), cfg)
    (read,) = [s for s in out.stages() if isinstance(s, st.Read)]
    assert read.topic == Topic.kafka(
        "in", bootstrap_servers="broker:9092", startingOffsets="earliest"
    )
    assert read.read_schema is None


def test_the_test_driver_writes_and_reads_dynamic_values_as_json_text() -> None:
    import shutil

    import pyarrow.parquet as pq

    from kspark.testing import TopologyTestDriver

    b = StreamsBuilder()
    b.stream("events").to("out")
    driver = TopologyTestDriver(b.build(), CFG, session=object())
    try:
        typed = driver.create_input_topic("events", key_type=str, value_type=Order)
        typed.pipe_input("a", Order("o1", 2), timestamp=1)
        untyped = driver.create_input_topic("events")
        untyped.pipe_input(None, {"id": "o2", "qty": 3}, timestamp=2)
        assert [(r["key"], json.loads(r["value"])) for r in typed._pending] == [
            ('"a"', {"id": "o1", "qty": 2})
        ]
        assert json.loads(untyped._pending[0]["value"]) == {"id": "o2", "qty": 3}
        untyped._pending.clear()  # read_records would run the app on it
        typed._flush()
        # what the sink would write: the stream's dynamic key and value, as JSON text
        folder = os.path.join(driver._topic_path("out"), "batch_id=0")
        os.makedirs(folder)
        for name in os.listdir(driver._topic_path("events")):
            shutil.copy(os.path.join(driver._topic_path("events"), name), folder)
        rows = pq.read_table(folder).to_pylist()
        assert rows[0]["value"] == '{"id":"o1","qty":2}'
        # after the first batch the plan is fixed: a typed output topic converts as it
        # reads (before it, the sink converts: tests/unit/test_dynamic_handler_routing.py)
        driver._started = True
        assert driver.create_output_topic("out", key_type=str, value_type=Order).read_records()[
            0
        ].value == Order("o1", 2)
        assert driver.create_output_topic("out").read_key_values() == [
            ("a", {"id": "o1", "qty": 2})
        ]
    finally:
        shutil.rmtree(driver._workdir, ignore_errors=True)


def test_a_dynamic_table_key_is_converted_to_the_stream_key_type() -> None:
    b = StreamsBuilder()
    rates = b.table("rates")
    b.stream("payments", key_type=str, value_type=float).join(rates, lambda v, r: v * r).to("out")
    out = compile_topology(bind_topology(b.build(), CFG), CFG)
    join = next(s for s in out.stages() if isinstance(s, st.Stateful))
    assert isinstance(join.table, st.Chain) and join.table.key_type == describe_type(str)
    assert isinstance(join.spec, JoinSpec) and join.spec.table.key == PrimSpec(spark="string")
