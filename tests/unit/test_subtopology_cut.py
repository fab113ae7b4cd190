"""The cut of a topology into sub-topologies (kspark.compiler.subtopologies): plan only,
no Spark."""

from __future__ import annotations

import json
import os
from datetime import timedelta
from pathlib import Path
from typing import Any

from kspark import Materialized, StreamsBuilder, StreamsConfig
from kspark.bindings import bind_topology
from kspark.compiler import compile_topology, subtopologies
from kspark.compiler import stages as st
from kspark.compiler.lowering.build import grouped_stages
from kspark.plan import nodes as n
from kspark.plan.grouped import Aggregate, RegroupedSource, TableGroupBy, change_type
from kspark.plan.types import DYNAMIC, describe_type
from kspark_server.spec import JsonSpec


def _add(a: int, b: int) -> int:
    return a + b


def _cut(build: Any, tmp_path: Path) -> tuple[Any, Any, Any]:
    config = StreamsConfig(application_id="app", data_dir=str(tmp_path))
    b = StreamsBuilder()
    build(b)
    topology = bind_topology(b.build(), config)
    plain = compile_topology(topology, config)
    names = {s.spec.processor for s in plain.stages() if isinstance(s, st.Stateful)}
    cut = subtopologies.cut(topology, names, str(tmp_path / "cp"), "app")
    return topology, cut, compile_topology(cut, config)


def _chain(b: StreamsBuilder) -> None:
    counts = (
        b.stream("in", key_type=str, value_type=int)
        .group_by_key()
        .count(Materialized.as_("counts"))
    )
    counts.to_stream().map(
        lambda k, c: (k[:1], c), key_type=str, value_type=int
    ).group_by_key().reduce(_add, materialized=Materialized.as_("sums")).to_stream().to("sums")


def test_one_stateful_operator_is_not_cut(tmp_path: Path) -> None:
    def build(b: StreamsBuilder) -> None:
        b.stream("in", key_type=str, value_type=int).group_by_key().count().to_stream().to("o")

    topology, cut, _ = _cut(build, tmp_path)
    assert cut is topology
    assert subtopologies.internal_topics(cut) == ()


def test_a_chain_reads_the_first_operators_output_from_its_internal_topic(
    tmp_path: Path,
) -> None:
    _, cut, output = _cut(_chain, tmp_path)
    topics = subtopologies.internal_topics(cut)
    assert len(topics) == 2  # each operator's output crosses its topic
    for t in topics:
        assert t.format == "parquet"
        assert t.path is not None
        assert t.path.startswith(os.path.join(str(tmp_path / "cp"), subtopologies.INTERNAL_DIR))
    grouped = grouped_stages(output)  # none reads another in the same pass
    assert len(grouped) == 2
    for g in grouped:
        # each operator's one reader is its internal topic's sink
        sinks = [p for p in output.sinks if p.stage is g]
        assert len(sinks) == 1
        assert sinks[0].topic.name in {t.name for t in topics}
    # the sum's input starts at a source of the count's topic
    reads = [s for s in output.stages() if isinstance(s, st.Read)]
    assert sorted(r.topic.name for r in reads) == sorted(["in", *[t.name for t in topics]])


def test_an_internal_topic_is_read_without_partition_discovery(tmp_path: Path) -> None:
    """A running query lists an internal topic's folder empty at its start, then finds
    ``batch_id=N`` folders: partition discovery would add a column its plan lacks."""
    from kspark.compiler.lowering.files import _reader_options

    _, cut, output = _cut(_chain, tmp_path)
    internal = {t.name for t in subtopologies.internal_topics(cut)}
    reads = [s for s in output.stages() if isinstance(s, st.Read)]
    for r in reads:
        options = dict(_reader_options(r.topic))
        assert (options.get("recursiveFileLookup") == "true") == (r.topic.name in internal)


def test_a_join_reads_a_counted_table_as_a_table_source(tmp_path: Path) -> None:
    def build(b: StreamsBuilder) -> None:
        counts = b.stream("in", key_type=str, value_type=int).group_by_key().count()
        clicks = b.stream("clicks", key_type=str, value_type=str)
        clicks.join(counts, lambda v, c: f"{v}:{c}", value_type=str).to("joined")

    _, cut, _ = _cut(build, tmp_path)
    join = next(x for x in cut.nodes() if isinstance(x, n.StreamTableJoin))
    assert isinstance(join.table, n.TableSource)
    assert join.table.topic is not None
    assert join.table.topic in subtopologies.internal_topics(cut)


def test_a_regrouped_table_crosses_its_topic_as_changes(tmp_path: Path) -> None:
    """A re-grouped table's count and aggregate read the subtract/add pairs of the
    grouping from its internal topic, as Kafka's repartition topic after KTable#groupBy
    carries them: the aggregation still reads a grouped table (its subtractor's input)."""

    def build(b: StreamsBuilder) -> None:
        table = b.table("names", key_type=str, value_type=str)
        regrouped = table.group_by(lambda k, v: (v[:1], v), key_type=str, value_type=str)
        regrouped.count().to_stream().to("counts")
        regrouped.aggregate(
            lambda: 0,
            lambda k, v, total: total + len(v),
            lambda k, v, total: total - len(v),
            value_type=int,
        ).to_stream().to("lengths")

    _, cut, output = _cut(build, tmp_path)
    aggregates = [x for x in cut.nodes() if isinstance(x, Aggregate)]
    assert len(aggregates) == 2
    for agg in aggregates:
        assert agg.grouped_table
        assert isinstance(agg.parent, RegroupedSource)
        assert agg.parent.value_type == describe_type(str)  # the selected value's
    # both read one topic, of the grouping's changes
    (grouping,) = {id(agg.parent): agg.parent for agg in aggregates}.values()
    (sink,) = [s for s in cut.sinks if s.topic == grouping.topic]
    assert sink.value_type == change_type(describe_type(str))
    specs = [s.spec for s in output.stages() if isinstance(s, st.Stateful)]
    assert sorted(s.processor for s in specs if getattr(s, "table", False)) == sorted(
        agg.name for agg in aggregates
    )


def _untyped_chain(b: StreamsBuilder) -> None:
    # nothing declares a type: keys and values are dynamic from the source on
    first = b.stream("in").deduplicate_by_key(timedelta(hours=1))
    first.map(lambda k, v: (v, [k, v])).deduplicate_by_key(timedelta(hours=1)).to("out")


def test_dynamic_outputs_cross_their_topics_as_json_text(tmp_path: Path) -> None:
    """An operator's dynamic keys and values go through its internal topic as the JSON
    text they travel as between stages: a ``string`` column in the topic's Parquet
    files, read back by the next operator as a dynamic source."""
    _, cut, output = _cut(_untyped_chain, tmp_path)
    topics = subtopologies.internal_topics(cut)
    assert len(topics) == 2
    internal = [s for s in cut.sinks if s.topic in topics]
    assert [(s.key_type, s.value_type) for s in internal] == [(DYNAMIC, DYNAMIC)] * 2
    reads = {
        s.topic.name: json.loads(s.read_schema)
        for s in output.stages()
        if isinstance(s, st.Read) and s.topic in topics and s.read_schema is not None
    }
    assert len(reads) == 2
    for schema in reads.values():
        types = {f["name"]: f["type"] for f in schema["fields"]}
        assert (types["key"], types["value"]) == ("string", "string")
    specs = [s.spec for s in output.stages() if isinstance(s, st.Stateful)]
    assert len(specs) == 2
    for spec in specs:
        assert spec.input.key == spec.input.value == JsonSpec()


def test_a_dynamic_regrouped_table_crosses_its_topic_as_changes_of_json_text(
    tmp_path: Path,
) -> None:
    def build(b: StreamsBuilder) -> None:
        b.table("players").group_by(lambda k, v: (v["team"], v)).count().to_stream().to("o")

    _, cut, _ = _cut(build, tmp_path)
    (sink,) = [s for s in cut.sinks if isinstance(s.parent, TableGroupBy)]
    assert sink.topic in subtopologies.internal_topics(cut)
    assert sink.value_type == change_type(DYNAMIC)
    assert sink.value_type.spark_json()["fields"] == [
        {"name": "new", "type": "string", "nullable": True, "metadata": {}},
        {"name": "old", "type": "string", "nullable": True, "metadata": {}},
    ]


def test_an_untyped_joiners_output_crosses_its_topic(tmp_path: Path) -> None:
    def build(b: StreamsBuilder) -> None:
        s = b.stream("in", key_type=str, value_type=int)
        s.group_by_key().count().to_stream().to("counts")
        clicks = b.stream("clicks", key_type=str, value_type=str)
        clicks.join(s.group_by_key().reduce(_add), lambda v, c: (v, c)).to("joined")

    # the join's output is dynamic (an untyped joiner): it crosses its topic as JSON text
    _, cut, _ = _cut(build, tmp_path)
    assert len(subtopologies.internal_topics(cut)) == 3


def test_each_group_goes_to_its_operator_in_its_own_columns() -> None:
    """The shared function hands a group to the operator ``ks_op`` names, with the
    operator's own column names, and widens its output to the union's columns."""
    import pandas as pd

    from kspark_server.operators.grouped import SubtopologyOperators

    seen: list[tuple[int, list[str]]] = []

    def operator(i: int) -> Any:
        def run(key: Any, rows: Any, state: Any) -> Any:
            frames = list(rows)
            seen.append((i, list(frames[0].columns)))
            yield pd.DataFrame({"key": frames[0]["key"], "n": [i] * len(frames[0])})

        return run

    fn = SubtopologyOperators(
        [operator(0), operator(1)],
        [{"ks_o0_key": "key"}, {"ks_o1_key": "key"}],
        [{"key": "ks_o0_key", "n": "n"}, {"key": "ks_o1_key", "n": "n"}],
        '{"fields": [{"name": "ks_o0_key"}, {"name": "n"}, {"name": "ks_o1_key"}, '
        '{"name": "ks_op"}]}',
    )
    rows = pd.DataFrame({"ks_o0_key": [None], "ks_o1_key": [7], "ks_op": [1]})
    (out,) = list(fn((4096,), iter([rows]), None))
    assert seen == [(1, ["key"])]
    assert list(out.columns) == ["ks_o0_key", "n", "ks_o1_key", "ks_op"]
    assert out.iloc[0].to_dict() == {"ks_o0_key": None, "n": 1, "ks_o1_key": 7, "ks_op": 1}


def _numbers(output: Any) -> dict[str, int]:
    """Each processor's sub-topology as its stages carry it (a source's read, an
    operator's handling): the first part of its dead letters' task ids."""
    found: dict[str, int] = {}
    for stage in output.stages():
        if isinstance(stage, st.Read):
            found[stage.processor] = stage.subtopology
        spec = getattr(stage, "spec", None)
        handling = getattr(spec, "handling", None)
        if handling is not None:
            found[spec.processor] = handling.subtopology  # type: ignore[union-attr]
    return found


def test_a_cut_app_numbers_its_processors_sub_topologies_as_the_user_s_topology(
    tmp_path: Path,
) -> None:
    """A dead letter's task id names its processor's sub-topology in the user's topology
    (``describe()``), on either runner: the internal topics of the cut do not renumber
    them."""
    from kspark.runtime.internal import compile_app

    config = StreamsConfig(
        application_id="app",
        data_dir=str(tmp_path),
        checkpoint_dir=str(tmp_path / "cp"),
    )
    b = StreamsBuilder()
    limits = b.table("table", key_type=str, value_type=int, materialized=Materialized.as_("lim"))
    joined = b.stream("in", key_type=str, value_type=int).join(
        limits, lambda v, lim: v - lim, value_type=int
    )
    joined.group_by_key().aggregate(
        lambda: 0, lambda k, v, a: a + v, materialized=Materialized.as_("totals"), value_type=int
    ).to_stream().to("out")
    topology = bind_topology(b.build(), config)
    output, internal = compile_app(topology, config, {})
    assert internal  # the join and the aggregation are cut apart
    plain = _numbers(compile_topology(topology, config))
    cut = _numbers(output)
    assert plain and {name: cut[name] for name in plain if name in cut} == plain
    assert set(plain) <= set(cut)


def test_a_suppressed_window_crosses_after_its_suppression(tmp_path: Path) -> None:
    """The suppression runs inside its windowed aggregation's operator, so the operator's
    output that crosses the internal topic is the suppressed one: the cut keeps the
    aggregation and its suppression together (Kafka Streams keeps them in one
    sub-topology)."""
    from kspark import Suppressed, TimeWindows
    from kspark.plan.grouped import Suppress

    def build(b: StreamsBuilder) -> None:
        (
            b.stream("in", key_type=str, value_type=int)
            .deduplicate_by_key(timedelta(seconds=5))
            .group_by_key()
            .windowed_by(TimeWindows.of_size_with_no_grace(timedelta(seconds=10)))
            .count()
            .suppress(Suppressed.until_window_closes().with_name("final"))
            .to_stream()
            .to("o")
        )

    _, cut, output = _cut(build, tmp_path)
    internal = [s for s in cut.sinks if s.topic_name.endswith("-internal")]
    assert len(internal) == 2
    assert any(isinstance(s.parent, Suppress) for s in internal)
    assert len(grouped_stages(output)) == 2


def test_an_internal_topic_keeps_each_records_context(tmp_path: Path) -> None:
    """A record that crosses an internal topic keeps the topic, partition and offset it
    was read at (a dead letter downstream names them, as without the cut): the topic
    stores them, and its reader takes no constant topic name."""
    from kspark.compiler.lowering.sources import read_constants
    from kspark_server import envelope as env

    _, cut, output = _cut(_chain, tmp_path)
    internal = {t.name for t in subtopologies.internal_topics(cut)}
    reads = [s for s in output.stages() if isinstance(s, st.Read) and s.topic.name in internal]
    assert reads
    for r in reads:
        assert r.read_schema is not None
        stored = {f["name"] for f in json.loads(r.read_schema)["fields"]}
        assert {name for name, _ in env.CONTEXT.values()} <= stored
        assert "topic" not in read_constants(r)
