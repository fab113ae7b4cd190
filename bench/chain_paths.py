"""A stateless chain's two forms on Spark: a ``mapInArrow`` over the record envelope
against the scalar Arrow UDF (docs/performance.md, session 10).

    ./run bench chain_paths [--rows N]

Batch queries into Spark's ``noop`` sink over ``--rows`` records in kspark's envelope
(value struct, empty headers, topic, offsets), so that no stream start or sink is timed:
Spark SQL's own expression, then kspark's compiled chain (``kspark.compiler.lower.chain``)
of ``map_values``, of ``filter``, and of ``map_values`` under ``LogAndContinue`` with 1%
of the records raising, each as a ``mapInArrow`` and as the UDF. Best of --repeat runs.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import _common as common

import kspark_server
from kspark import StreamsBuilder, StreamsConfig, Topic
from kspark.compiler import stages
from kspark.compiler.compiler import compile_topology
from kspark.compiler.lower import chain
from kspark.errors import LogAndContinueProcessingExceptionHandler
from kspark_server import chain as server_chain
from kspark_server import envelope


def double(e: common.Event) -> int:
    return e.value * 2


def double_or_fail(e: common.Event) -> int:
    if e.value % 100 == 0:  # 1% of the values
        raise ValueError(f"bad value {e.value}")
    return e.value * 2


def even(k: str, e: common.Event) -> bool:
    return e.value % 2 == 0


def spec_of(step: str) -> Any:
    """The chain spec of ``source -> step -> sink``."""
    b = StreamsBuilder()
    s = b.stream(Topic.parquet("events", "/unused"), key_type=str, value_type=common.Event)
    s = (
        s.filter(even)
        if step == "filter"
        else s.map_values(double if step == "map" else double_or_fail)
    )
    s.to(Topic.parquet("out", "/unused"))
    handler = LogAndContinueProcessingExceptionHandler if step == "map-1%" else None
    cfg = StreamsConfig(application_id="p", processing_exception_handler=handler)
    stage = compile_topology(b.build(), cfg).sinks[0].stage
    assert isinstance(stage, stages.Chain)
    return stage.spec


def main() -> None:
    a = common.args(__doc__ or "")
    spark, _, data = common.setup(a)
    from pyspark import cloudpickle
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    cloudpickle.register_pickle_by_value(common)  # the workers import no bench module
    cloudpickle.register_pickle_by_value(sys.modules[__name__])
    # as StreamsApp does: the workers run this tree's kspark_server, not the installed one
    cloudpickle.register_pickle_by_value(kspark_server)
    logging.disable(logging.WARNING)
    headers = StructType.fromJson(
        {"type": "struct", "fields": [envelope.field("h", envelope.HEADERS)]}
    )[0].dataType
    src = spark.read.schema(common.SCHEMA).parquet(data)
    env = src.select(
        "key",
        F.struct("key", "value", "ts").alias("value"),
        F.col("ts").alias("timestamp"),
        F.array().cast(headers).alias("headers"),
        F.lit("events").alias("topic"),
        F.lit(0).alias("partition"),
        F.col("ts").alias("offset"),
        F.col("ts").alias("ks_seq"),
        F.lit(0).cast("long").alias("ks_sub"),
        F.lit(None).cast("string").alias("ks_side"),
    )
    real = server_chain.udf_outputs

    def run(step: str, udf: bool) -> None:
        server_chain.udf_outputs = real if udf else (lambda spec: None)  # type: ignore[assignment]
        try:
            chain(env, spec_of(step)).write.format("noop").mode("overwrite").save()
        finally:
            server_chain.udf_outputs = real

    variants = {
        "spark-sql map": lambda: (
            env.withColumn("value", F.col("value.value") * 2)
            .write.format("noop")
            .mode("overwrite")
            .save()
        ),
    }
    for step in ("map", "filter", "map-1%"):
        for udf in (False, True):
            variants[f"{step} {'udf' if udf else 'mapInArrow'}"] = (
                lambda s=step, u=udf: run(s, u)  # type: ignore[misc]
            )
    for name, fn in variants.items():
        print(f"{name:22s} {a.rows / common.timed(fn, a.repeat):>12,.0f} records/s", flush=True)


if __name__ == "__main__":
    main()
