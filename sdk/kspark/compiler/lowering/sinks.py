"""Sinks: the union of every sink's records, and the ``foreachBatch`` writer."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from kspark.compiler import stages as st
from kspark.compiler.bundle import shipped
from kspark.compiler.lowering.columns import dtype, side_type
from kspark.compiler.lowering.kafka import kafka_format
from kspark.compiler.subtopologies import INTERNAL_OPTION
from kspark.errors import InvalidTopologyError
from kspark_server import envelope as env

__all__ = ["SIDE_METRICS", "observe_sides", "union_sinks", "writer_function"]

#: Name of the observed metrics that carry drop counts and gauges to the client.
SIDE_METRICS = "kspark"


def union_sinks(
    output: st.Output,
    df_of: Callable[[st.Stage], DataFrame],
    rows: DataFrame | None = None,
    made: set[int] | None = None,
) -> DataFrame:
    """One DataFrame of every sink's records, tagged by ``ks_sink``, with each sink's key
    and value in columns of its own (``k<i>``, ``v<i>``; a sink whose records name their
    topics too), and the side rows of the topology's ends (``ks_sink`` -1). ``rows`` are
    the rows of the sinks numbered in ``made``, already in these columns (several
    stateful operators' output, :func:`.stateful.grouped_sinks`)."""
    final: DataFrame | None = rows
    parts: tuple[st.SinkPart | st.DynamicSinkPart, ...] = (*output.sinks, *output.dynamic)
    for part in parts:
        if made and part.index in made:
            continue
        i = part.index
        d = df_of(part.stage).select(
            F.lit(i).alias("ks_sink"),
            F.col("key").alias(f"k{i}"),
            F.col("value").alias(f"v{i}"),
            *env.TAIL,
        )
        final = d if final is None else final.unionByName(d, allowMissingColumns=True)
    for end in output.ends:
        # a branch that reaches no sink runs for its side effects; only its side rows go on
        d = (
            df_of(end)
            .filter(F.col("ks_side").isNotNull())
            .select(F.lit(-1).alias("ks_sink"), *env.TAIL)
        )
        final = d if final is None else final.unionByName(d, allowMissingColumns=True)
    assert final is not None
    return final


def observe_sides(df: DataFrame, output: st.Output) -> DataFrame:
    """``df`` with its side rows and its records counted in the :data:`SIDE_METRICS`
    observation: the records of ``output``'s sinks, but those of its internal topics
    (records that another operator of the app reads, counted once, at the app's sink)."""
    side = F.from_json(F.col("ks_side"), side_type())  # type: ignore[arg-type]
    internal = [p.index for p in output.sinks if (INTERNAL_OPTION, "true") in p.topic.options]
    record = F.col("ks_side").isNull()
    if internal:
        record = record & ~F.col("ks_sink").isin(internal)
    return df.observe(
        SIDE_METRICS,
        F.collect_set(
            F.when(
                F.col("ks_side").isNotNull(),
                F.struct(
                    side["kind"].alias("kind"),
                    side["processor"].alias("processor"),
                    side["task"].alias("task"),
                    side["count"].alias("count"),
                    side["chunk"].alias("chunk"),
                    side["reason"].alias("reason"),
                ),
            )
        ).alias("side"),
        F.count(F.when(record, 1)).alias("records"),
    )


def writer_function(
    output: st.Output,
    spark: SparkSession | None = None,
    batch_offset: int = 0,
    lease: tuple[str, str, str] | None = None,
) -> Any:
    """The ``foreachBatch`` function; with ``lease`` (checkpoint dir, run token, app id) it
    keeps the run's lease in the checkpoint (:mod:`kspark_server.lease`)."""
    from kspark_server.sinks import make_batch_writer

    if spark is not None:
        _check_tables(output, spark)
    spec = output.writer_spec
    # a rescaled app's new checkpoint numbers its batches from 0 again; its sinks go on
    spec = dataclasses.replace(spec, batch_offset=int(batch_offset))
    if lease is not None:
        spec = dataclasses.replace(
            spec,
            lease_checkpoint_dir=lease[0],
            lease_token=lease[1],
            application_id=lease[2],
        )
    topics = [s.topic for s in spec.sinks] + ([spec.dlq] if spec.dlq is not None else [])
    for d in spec.dynamic:
        topics += [*d.rule.explicit, *([d.rule.default] if d.rule.default is not None else [])]
    if spark is not None and any(t.format == "kafka" for t in topics):
        spec = dataclasses.replace(spec, kafka_format=kafka_format(spark, spec.kafka_client))
    return shipped(make_batch_writer(spec))


def _check_tables(output: st.Output, spark: SparkSession) -> None:
    """Refuse, before the query starts, a table sink that kspark must not write into: one
    it did not create, or whose columns differ from the sink's."""
    from kspark_server.sinks import table_problem, table_sink_schema

    checks: list[tuple[str, StructType | None]] = [
        (
            p.topic.path or p.topic.name,
            table_sink_schema(
                dtype(p.stage.key_type.spark_json()), dtype(p.stage.value_type.spark_json())
            ),
        )
        for p in output.sinks
        if p.topic.format == "table"
    ]
    dlq = output.writer_spec.dlq
    if dlq is not None and dlq.format == "table":
        checks.append((dlq.path or dlq.name, None))
    for table, expected in checks:
        problem = table_problem(spark, table, expected)
        if problem is not None:
            raise InvalidTopologyError(problem, table=table)
