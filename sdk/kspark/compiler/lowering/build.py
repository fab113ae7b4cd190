"""The entry point: an app's stages lowered, one by one, to its streaming DataFrame."""

from __future__ import annotations

import functools
from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession

from kspark.compiler import stages as st
from kspark.compiler.lowering.grouped import grouped_operator, grouped_part, grouped_sinks
from kspark.compiler.lowering.sinks import observe_sides, union_sinks
from kspark.compiler.lowering.sources import read, read_constants
from kspark.compiler.lowering.sql import sql_filter
from kspark.compiler.lowering.stateful import cogroup
from kspark.compiler.lowering.stateless import chain, id_stage, join_key_stage, topic_name_stage
from kspark.compiler.resume import Resume
from kspark.compiler.subtopologies import INTERNAL_OPTION
from kspark.errors import CompilationError
from kspark.plan import graph

__all__ = ["build_dataframe", "grouped_stages"]

DataFrameOf = Callable[[st.Stage], DataFrame]


def build_dataframe(
    output: st.Output,
    spark: SparkSession,
    resume: Resume | None = None,
    checkpoint: str | None = None,
) -> DataFrame:
    """The app's streaming DataFrame: the union of every sink's records and side rows,
    tagged by ``ks_sink``, with the side rows' metrics observed. ``checkpoint`` is the
    query's checkpoint, where the stateful operators keep their state files."""
    grouped = grouped_stages(output)
    results: dict[int, DataFrame] = {}

    def df_of(stage: st.Stage) -> DataFrame:
        if id(stage) not in results:
            results[id(stage)] = lower(stage)
        return results[id(stage)]

    def lower(stage: st.Stage) -> DataFrame:
        if isinstance(stage, st.Stateful):
            # one operator: lowered in place (several: grouped_sinks below)
            return grouped_operator(grouped_part(stage, df_of, resume, checkpoint))
        return _lower(stage, df_of, spark, resume)

    if len(grouped) < 2:
        for stage in graph.toposort(output.roots(), lambda s: s.inputs):
            df_of(stage)
        return observe_sides(union_sinks(output, df_of), output)
    sinks = _internal_sinks(output, grouped)
    skip = {id(s) for s in grouped}
    for stage in graph.toposort(output.roots(), lambda s: s.inputs):
        if id(stage) not in skip:
            df_of(stage)
    parts = [grouped_part(s, df_of, resume, checkpoint, operator=i) for i, s in enumerate(grouped)]
    rows = grouped_sinks(parts, [p.index for p in sinks])
    return observe_sides(union_sinks(output, df_of, rows, {p.index for p in sinks}), output)


def _internal_sinks(output: st.Output, grouped: list[st.Stateful]) -> list[st.SinkPart]:
    """The sink of each of several stateful operators: the internal topic that
    its output crosses (:func:`kspark.compiler.subtopologies.cut` makes it), its only
    reader. The query reads the operators' output once (:func:`.stateful.grouped_sinks`)."""
    readers: dict[int, list[object]] = {id(s): [] for s in grouped}
    for stage in output.stages():
        for i in stage.inputs:
            if id(i) in readers:
                readers[id(i)].append(stage)
    for e in output.ends:
        if id(e) in readers:
            readers[id(e)].append(e)
    found = []
    for s in grouped:
        parts = [p for p in output.sinks if p.stage is s]
        internal = len(parts) == 1 and (INTERNAL_OPTION, "true") in parts[0].topic.options
        if readers[id(s)] or not internal:
            raise CompilationError(
                f"{s.spec.processor}: the stateful operators of an app run in one "
                "applyInPandasWithState, which the query reads once: each operator's "
                "output must go to its internal topic alone (StreamsApp cuts the "
                "topology so; compile it through StreamsApp)",
                processor=s.spec.processor,
            )
        found.append(parts[0])
    return found


def grouped_stages(output: st.Output) -> list[st.Stateful]:
    """The stateful operators of ``output``, in
    the order of their task keys (:func:`kspark_server.placement.task_keys`): all of them
    run in ONE ``applyInPandasWithState`` (Spark runs at most one in a streaming query),
    so none may read another's output within the query. Such an edge crosses an internal
    topic (:mod:`kspark.compiler.subtopologies`), which cuts the topology into
    sub-topologies before it is compiled; one left is refused here, naming both."""
    stages = graph.toposort(output.roots(), lambda s: s.inputs)
    grouped = [s for s in stages if isinstance(s, st.Stateful)]
    if len(grouped) < 2:
        return grouped
    ids = {id(s) for s in grouped}
    for s in grouped:
        upstream = graph.toposort(s.inputs, lambda x: x.inputs)
        before = [u for u in upstream if id(u) in ids]
        if before:
            first = before[0]
            assert isinstance(first, st.Stateful)
            raise CompilationError(
                f"{s.spec.processor} reads the output of {first.spec.processor} in the same "
                "micro-batch, and every stateful operator of an app runs in one "
                "applyInPandasWithState: the records between them must cross an internal "
                "topic (StreamsApp adds one where the records between them can be written "
                "to a file topic)",
                processor=s.spec.processor,
            )
    return grouped


def _lower(
    stage: st.Stage,
    df_of: DataFrameOf,
    spark: SparkSession,
    resume: Resume | None,
) -> DataFrame:
    """One stage as DataFrame operations over its inputs' DataFrames (``df_of``)."""
    if isinstance(stage, st.Read):
        return read(stage, spark, resume)
    if isinstance(stage, st.Chain):
        constants = read_constants(stage.input) if isinstance(stage.input, st.Read) else {}
        return chain(df_of(stage.input), stage, constants)
    if isinstance(stage, st.SqlFilter):
        return sql_filter(df_of(stage.input), stage)
    if isinstance(stage, st.IdStage):
        return id_stage(df_of(stage.input), stage)
    if isinstance(stage, st.JoinKeyStage):
        return join_key_stage(df_of(stage.input), stage)
    if isinstance(stage, st.TopicNameStage):
        return topic_name_stage(df_of(stage.input), stage)
    if isinstance(stage, st.Union):
        return functools.reduce(lambda a, b: a.unionByName(b), [df_of(p) for p in stage.parts])
    if isinstance(stage, st.Cogroup):
        return cogroup(stage, df_of)
    if isinstance(stage, st.Shuffle):
        return df_of(stage.input).repartition(stage.num_partitions, "key")
    raise CompilationError(f"no lowering for stage {type(stage).__name__}")
