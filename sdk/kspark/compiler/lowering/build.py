"""The entry point: an app's stages lowered, one by one, to its streaming DataFrame."""

from __future__ import annotations

from collections.abc import Callable

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kspark.compiler import stages as st
from kspark.compiler.lowering.sinks import observe_sides, union_sinks
from kspark.compiler.lowering.sources import read, read_constants
from kspark.compiler.lowering.sql import sql_filter
from kspark.compiler.lowering.stateful import stateful
from kspark.compiler.lowering.stateless import chain, id_stage, topic_name_stage
from kspark.compiler.resume import Resume
from kspark.errors import CompilationError
from kspark.plan import graph

__all__ = ["build_dataframe"]

DataFrameOf = Callable[[st.Stage], DataFrame]


def build_dataframe(
    output: st.Output, spark: SparkSession, resume: Resume | None = None
) -> DataFrame:
    """The app's streaming DataFrame: the union of every sink's records and side rows,
    tagged by ``ks_sink``, with the side rows' metrics observed."""

    def lower(stage: st.Stage, df_of: DataFrameOf) -> DataFrame:
        return _lower(stage, df_of, spark, resume)

    df_of = graph.map_nodes(output.roots(), lambda s: s.inputs, lower)
    return observe_sides(_sources_first(output, df_of, union_sinks(output, df_of)))


def _sources_first(output: st.Output, df_of: DataFrameOf, df: DataFrame) -> DataFrame:
    """``df`` behind a branch that reads every source in the order of their topics'
    names, and keeps no row.

    Spark numbers a query's sources in the order it meets them in the plan and keeps each
    one's offsets under its number in the checkpoint. The plan's own order follows the
    topology's shape, so a topology that reads its topics in another order, or a plan
    built otherwise, would resume a topic from another one's offsets. Met first here, the
    sources are numbered by their topics' names whatever the shape behind them."""
    reads = sorted(
        (s for s in output.stages() if isinstance(s, st.Read)),
        key=lambda r: (r.topic.name, r.processor, r.part),
    )
    if len(reads) < 2:
        return df
    first: DataFrame | None = None
    for r in reads:
        d = df_of(r).where(F.lit(False)).select(F.lit(-1).alias("ks_sink"))
        first = d if first is None else first.unionByName(d)
    assert first is not None
    return first.unionByName(df, allowMissingColumns=True)


def _lower(
    stage: st.Stage, df_of: DataFrameOf, spark: SparkSession, resume: Resume | None
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
    if isinstance(stage, st.TopicNameStage):
        return topic_name_stage(df_of(stage.input), stage)
    if isinstance(stage, st.Union):
        parts = [df_of(p) for p in stage.parts]
        df = parts[0]
        for p in parts[1:]:
            df = df.unionByName(p)
        return df
    if isinstance(stage, st.Shuffle):
        return df_of(stage.input).repartition(stage.num_partitions, "key")
    if isinstance(stage, st.Stateful):
        return stateful(stage, df_of, spark, resume)
    raise CompilationError(f"no lowering for stage {type(stage).__name__}")
