"""The ends of a stream and its multi-topic beginnings, as plans: ``foreach``, ``print``,
``to(topic_extractor)``, ``stream([...])`` and ``stream(re.compile(...))``, bound and
compiled with no Spark; and their operators called in-process on Arrow batches."""

from __future__ import annotations

import json
import os
import re
from typing import Any

import pyarrow as pa
import pytest

from kspark import Printed, RecordContext, StreamsBuilder, StreamsConfig, Topic
from kspark.bindings import bind_topology, topic_names
from kspark.compiler import stages as st
from kspark.compiler.compiler import compile_topology
from kspark.errors import (
    CompilationError,
    ConfigError,
    InvalidArgumentError,
    InvalidTopologyError,
    LogAndContinueProcessingExceptionHandler,
    LogAndContinueProductionExceptionHandler,
    UnboundTopicError,
)
from kspark.plan import nodes as n
from kspark.plan.types import describe_type
from kspark.runtime.checkpoints import Generation
from kspark.runtime.filesink import spark_sink_blocker
from kspark_server import codec, envelope
from kspark_server.chain import make_chain
from kspark_server.printing import PrintAction, format_record
from kspark_server.spec import ForeachStep, TopicRef, TopicRule
from kspark_server.topicnames import make_topic_name_stage
from kspark_server.transport import arrow_schema


def config(**kw: Any) -> StreamsConfig:
    return StreamsConfig(application_id="ends", **kw)


def compiled(b: StreamsBuilder, **kw: Any) -> st.Output:
    cfg = config(**kw)
    return compile_topology(bind_topology(b.build(), cfg), cfg)


# -- foreach and print ----------------------------------------------------------------------


def test_foreach_and_print_are_terminal_processors() -> None:
    b = StreamsBuilder()
    s = b.stream("in", key_type=str, value_type=int)
    s.foreach(lambda k, v: None)
    s.print(Printed.to_sysout())
    topology = b.build()  # no sink: the stream ends in foreach and print
    assert [t.name for t in topology.ends] == [
        "KSTREAM-FOREACH-0000000001",
        "KSTREAM-PRINTER-0000000002",
    ]
    assert "Processor: KSTREAM-PRINTER-0000000002 (stores: [])" in topology.describe()


def test_a_topology_without_any_end_is_refused() -> None:
    b = StreamsBuilder()
    b.stream("in")
    with pytest.raises(InvalidTopologyError, match="foreach"):
        b.build()


def test_print_labels_as_kafka_streams_does(tmp_path: Any) -> None:
    b = StreamsBuilder()
    s = b.stream("in", key_type=str, value_type=int)
    s.print(Printed.to_sysout())
    s.print(Printed.to_sysout().with_label("mine"))
    s.print(Printed.to_sysout().with_label("mine"), label="given")
    s.print(Printed.to_sysout().with_name("printer"))
    printers = b.build().ends
    labels = [t.label for t in printers if isinstance(t, n.Print)]
    assert labels == ["KSTREAM-PRINTER-0000000001", "mine", "given", "printer"]
    assert [t.name for t in b.build().ends][-1] == "printer"
    assert format_record("x", None, None, None) == "[x]: null, null"
    assert format_record("x", "k", {"a": 1}, lambda k, v: v["a"]) == "[x]: 1"


def test_printed_to_file_resolves_the_path_on_the_client(tmp_path: Any) -> None:
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        assert Printed.to_file("out/p.txt").file_path == str(tmp_path / "out" / "p.txt")
    finally:
        os.chdir(here)
    with pytest.raises(InvalidArgumentError):
        Printed.to_file("")
    with pytest.raises(InvalidArgumentError, match="Printed"):
        StreamsBuilder().stream("in").print("stdout")  # type: ignore[arg-type]


def test_print_action_appends_whole_lines(tmp_path: Any) -> None:
    path = str(tmp_path / "deep" / "printed.txt")
    action = PrintAction("lbl", path)
    action("a", 1)
    action("b", None)
    with open(path) as f:
        assert f.read() == "[lbl]: a, 1\n[lbl]: b, null\n"


def test_a_print_action_that_has_printed_still_pickles_by_value(tmp_path: Any) -> None:
    """A server without kspark_server gets the printing module by value: once a record
    was printed, the action and its module must hold nothing that does not pickle."""
    from pyspark import cloudpickle

    from kspark_server import printing

    path = str(tmp_path / "printed.txt")
    action = PrintAction("lbl", path)
    action("a", 1)
    cloudpickle.register_pickle_by_value(printing)
    try:
        shipped = cloudpickle.loads(cloudpickle.dumps(action))
    finally:
        cloudpickle.unregister_pickle_by_value(printing)
    shipped("b", 2)
    with open(path) as f:
        assert f.read() == "[lbl]: a, 1\n[lbl]: b, 2\n"


def test_foreach_compiles_to_a_chain_that_ends_the_stream() -> None:
    b = StreamsBuilder()
    s = b.stream("in", key_type=str, value_type=int)
    s.filter(lambda k, v: v > 0).foreach(lambda k, v: None)
    s.to("out")
    out = compiled(b, data_dir="/data")
    (end,) = out.ends
    assert isinstance(end, st.Chain)
    (*_, last) = end.spec.steps
    assert isinstance(last, ForeachStep) and last.processor == "KSTREAM-FOREACH-0000000002"
    assert out.roots()[-1] is end and out.dynamic == ()
    # the writer computes each batch whole, whether or not a sink reads the branch
    assert out.writer_spec.ends
    # Spark's file sink runs the branch too: its query unions the end's side rows
    assert spark_sink_blocker(out, Generation(checkpoint="")) is None


def test_a_branch_that_ends_in_peek_makes_the_writer_compute_each_batch() -> None:
    b = StreamsBuilder()
    s = b.stream("in", key_type=str, value_type=int)
    s.peek(lambda k, v: None)
    s.to("out")
    assert compiled(b, data_dir="/data").writer_spec.ends
    only_sinks = StreamsBuilder()
    only_sinks.stream("in", key_type=str, value_type=int).to("out")
    assert not compiled(only_sinks, data_dir="/data").writer_spec.ends


def _batch(records: list[tuple[Any, Any]]) -> pa.RecordBatch:
    kd, vd = describe_type(str), describe_type(int)
    schema = arrow_schema(envelope.envelope_json(kd.spark_json(), vd.spark_json()))
    kenc, venc = codec.encoder(kd.spec()), codec.encoder(vd.spec())
    rows = [
        {
            "key": kenc(k),
            "value": venc(v),
            "timestamp": 100 * (i + 1),
            "headers": [{"key": "h", "value": b"x"}],
            "topic": "in",
            "partition": i % 2,
            "offset": i,
            "ks_seq": i,
            "ks_sub": 0,
            "ks_side": None,
        }
        for i, (k, v) in enumerate(records)
    ]
    return pa.RecordBatch.from_pylist(rows, schema=schema)


def _sides(batches: list[pa.RecordBatch]) -> list[dict[str, Any]]:
    return [
        json.loads(r["ks_side"]) for b in batches for r in b.to_pylist() if r["ks_side"] is not None
    ]


@pytest.mark.parametrize("fans_out", [False, True])
def test_the_foreach_step_acts_on_each_record_and_outputs_none(fans_out: bool) -> None:
    seen: list[tuple[str, int]] = []

    def act(k: str, v: int) -> None:
        if v == 2:
            raise ValueError("two")
        seen.append((k, v))

    b = StreamsBuilder()
    s = b.stream("in", key_type=str, value_type=int)
    if fans_out:  # a chain whose records fan out before the foreach
        s = s.flat_map_values(lambda v: [v], value_type=int)
    s.foreach(act)
    out = compiled(
        b, data_dir="/d", processing_exception_handler=LogAndContinueProcessingExceptionHandler
    )
    chain = out.ends[0]
    assert isinstance(chain, st.Chain)
    result = list(make_chain(chain.spec)([_batch([("a", 1), ("b", 2), ("c", 3)])]))
    assert seen == [("a", 1), ("c", 3)]
    records = [r for b in result for r in b.to_pylist() if r["ks_side"] is None]
    assert records == []  # the stream ends: no records, and none counted as dropped...
    (side,) = _sides(result)  # ...but the one whose action failed
    assert side["processor"] == f"KSTREAM-FOREACH-000000000{2 if fans_out else 1}"
    assert side["reason"] == "processing-error"


# -- to(topic_extractor) --------------------------------------------------------------------


def test_a_topic_extractor_is_a_sink_bound_as_the_app_binds_names() -> None:
    b = StreamsBuilder()
    b.stream("in", key_type=str, value_type=int).to(lambda k, v, ctx: "x")
    topology = b.build()
    (sink,) = topology.ends
    assert isinstance(sink, n.DynamicSink) and not sink.bound
    assert "Sink: KSTREAM-SINK-0000000001 (extractor: " in topology.describe()
    with pytest.raises(CompilationError, match="not bound"):
        compile_topology(topology, config(data_dir="/d"))

    by_dir = compiled(b, data_dir="/data").writer_spec.dynamic[0].rule
    assert by_dir.resolve("eu") == TopicRef(name="eu", format="jsonl", path="/data/eu")
    by_kafka = compiled(b, bootstrap_servers="k:9092").writer_spec.dynamic[0].rule
    ref = by_kafka.resolve("eu")
    assert ref is not None and ref.format == "kafka" and ref.name == "eu"
    assert dict(ref.options)["kafka.bootstrap.servers"] == "k:9092"
    explicit = (
        compiled(b, topics={"in": Topic.jsonl("in", "/i"), "eu": Topic.parquet("eu", "/lake/eu")})
        .writer_spec.dynamic[0]
        .rule
    )
    assert explicit.resolve("eu") == TopicRef(name="eu", format="parquet", path="/lake/eu")
    assert explicit.resolve("us") is None  # unbound: the production handler's


def test_names_that_would_leave_the_data_dir_are_unbound() -> None:
    rule = TopicRule(default=TopicRef(name="*", format="jsonl", path="/data"))
    assert [rule.resolve(x) for x in ("../etc", "a/b", "", ".", "..")] == [None] * 5


def test_the_topic_name_stage_names_topics_and_hands_failures_to_the_handlers() -> None:
    contexts: list[RecordContext] = []

    def pick(k: str, v: int, ctx: RecordContext) -> Any:
        contexts.append(ctx)
        if v == 2:
            raise RuntimeError("cannot pick")
        return {1: "known", 3: "unknown", 4: None}[v]

    b = StreamsBuilder()
    b.stream("in", key_type=str, value_type=int).to(pick)
    out = compiled(
        b,
        topics={"in": Topic.jsonl("in", "/i"), "known": Topic.jsonl("known", "/k")},
        processing_exception_handler=LogAndContinueProcessingExceptionHandler,
        production_exception_handler=LogAndContinueProductionExceptionHandler,
    )
    stage = out.dynamic[0].stage
    assert isinstance(stage, st.TopicNameStage)
    batches = list(
        make_topic_name_stage(stage.spec)([_batch([("a", 1), ("b", 2), ("c", 3), ("d", 4)])])
    )
    records = [r for b in batches for r in b.to_pylist() if r["ks_side"] is None]
    assert [(r["key"], r["topic"]) for r in records] == [("a", "known")]
    reasons = sorted(s["reason"] for s in _sides(batches))
    assert reasons == ["processing-error", "production-error", "production-error"]
    assert contexts[0] == RecordContext(
        topic="in", partition=0, offset=0, timestamp=100, headers=(("h", b"x"),)
    )


def test_an_unbound_topic_name_fails_without_a_production_handler() -> None:
    b = StreamsBuilder()
    b.stream("in", key_type=str, value_type=int).to(lambda k, v, ctx: "nowhere")
    out = compiled(b, topics={"in": Topic.jsonl("in", "/i")})
    stage = out.dynamic[0].stage
    assert isinstance(stage, st.TopicNameStage)
    with pytest.raises(Exception, match="production_exception_handler"):
        list(make_topic_name_stage(stage.spec)([_batch([("a", 1)])]))


# -- stream(["a", "b"]) and stream(re.compile(...)) ------------------------------------------


def test_a_stream_of_several_topics_is_one_source() -> None:
    b = StreamsBuilder()
    b.stream(["eu", Topic.jsonl("us", "/us")], key_type=str, value_type=int).to("out")
    topology = b.build()
    assert "Source: KSTREAM-SOURCE-0000000000 (topics: [eu, us])" in topology.describe()
    assert set(topic_names(topology)) == {"eu", "us", "out"}
    out = compiled(b, data_dir="/data")
    union = out.sinks[0].stage
    assert isinstance(union, st.Union)
    reads = [p for p in union.parts if isinstance(p, st.Read)]
    assert [(r.topic.name, r.topic.path, r.part) for r in reads] == [
        ("eu", "/data/eu", 0),
        ("us", "/us", 1),
    ]
    with pytest.raises(InvalidArgumentError, match="more than once"):
        StreamsBuilder().stream(["a", "a"])
    with pytest.raises(InvalidArgumentError, match="at least one"):
        StreamsBuilder().stream([])


def test_the_topics_of_one_source_declare_one_type() -> None:
    b = StreamsBuilder()
    b.stream(["a", "b"]).to("out")
    topics = {
        "a": Topic.jsonl("a", "/a", value_type=int),
        "b": Topic.jsonl("b", "/b", value_type=str),
    }
    with pytest.raises(ConfigError, match="different value_types"):
        bind_topology(b.build(), config(topics=topics, data_dir="/d"))
    same = {**topics, "b": Topic.jsonl("b", "/b", value_type=int)}
    bound = bind_topology(b.build(), config(topics=same, data_dir="/d"))
    assert bound.sources()[0].value_type == describe_type(int)


def test_a_pattern_binds_to_kafka_or_to_folders_under_the_data_dir() -> None:
    b = StreamsBuilder()
    b.stream(re.compile("orders-.*"), key_type=str).to("out")
    topology = b.build()
    assert "Source: KSTREAM-SOURCE-0000000000 (topics: orders-.*)" in topology.describe()
    assert set(topic_names(topology)) == {"out"}
    kafka = bind_topology(topology, config(bootstrap_servers="k:9092")).sources()[0].topic
    assert kafka is not None and kafka.option_dict()["subscribePattern"] == "orders-.*"
    files = bind_topology(topology, config(data_dir="/data")).sources()[0].topic
    assert files is not None and (files.path, files.option_dict()) == (
        "/data",
        {n.PATTERN_OPTION: "true"},
    )
    with pytest.raises(UnboundTopicError, match="orders-"):
        bind_topology(topology, config(topics={"out": Topic.jsonl("out", "/o")}))
    out = compiled(b, data_dir="/data")
    read = out.sinks[0].stage
    assert isinstance(read, st.Read) and read.topic.name == "orders-.*"
