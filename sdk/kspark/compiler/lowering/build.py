"""The entry point: an app's stages lowered, one by one, to its streaming DataFrame."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession

from kspark.compiler import stages as st
from kspark.compiler.lowering.sinks import observe_sides, union_sinks
from kspark.compiler.lowering.sources import read, read_constants
from kspark.compiler.lowering.sql import sql_filter
from kspark.compiler.lowering.stateful import cogroup, stateful
from kspark.compiler.lowering.stateless import chain, id_stage, join_key_stage, topic_name_stage
from kspark.compiler.resume import Resume
from kspark.errors import CompilationError
from kspark.plan import graph

__all__ = ["build_dataframe"]

DataFrameOf = Callable[[st.Stage], DataFrame]


def build_dataframe(
    output: st.Output,
    spark: SparkSession,
    resume: Resume | None = None,
    checkpoint: str | None = None,
) -> DataFrame:
    """The app's streaming DataFrame: the union of every sink's records and side rows,
    tagged by ``ks_sink``, with the side rows' metrics observed. ``checkpoint`` is the
    query's checkpoint, where the ``apply_in_pandas`` runner keeps its state files."""

    _one_grouped_operator(output)

    def lower(stage: st.Stage, df_of: DataFrameOf) -> DataFrame:
        return _lower(stage, df_of, spark, resume, checkpoint)

    df_of = graph.map_nodes(output.roots(), lambda s: s.inputs, lower)
    return observe_sides(union_sinks(output, df_of))


def _one_grouped_operator(output: st.Output) -> None:
    """Spark runs at most one ``applyInPandasWithState`` in a streaming query (it refuses
    more when the query starts): a topology with more stateful operators cannot run under
    ``stateful_runner='apply_in_pandas'``, and is told so before anything starts."""
    grouped = [
        s.spec.processor
        for s in graph.toposort(output.roots(), lambda s: s.inputs)
        if isinstance(s, st.Stateful) and s.spec.state.runner == "apply_in_pandas"
    ]
    if len(grouped) > 1:
        raise CompilationError(
            f"stateful_runner='apply_in_pandas' runs one stateful operator per app, and "
            f"this topology has {len(grouped)}: {', '.join(grouped)} (Spark runs at most "
            "one applyInPandasWithState in a streaming query). Run it with the default "
            "StreamsConfig(stateful_runner='transform_with_state')",
            processor=grouped[1],
        )


def _lower(
    stage: st.Stage,
    df_of: DataFrameOf,
    spark: SparkSession,
    resume: Resume | None,
    checkpoint: str | None,
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
        parts = [df_of(p) for p in stage.parts]
        df = parts[0]
        for p in parts[1:]:
            df = df.unionByName(p)
        return df
    if isinstance(stage, st.Cogroup):
        return cogroup(stage, df_of)
    if isinstance(stage, st.Shuffle):
        return df_of(stage.input).repartition(stage.num_partitions, "key")
    if isinstance(stage, st.Stateful):
        return stateful(stage, df_of, spark, resume, checkpoint)
    raise CompilationError(f"no lowering for stage {type(stage).__name__}")
