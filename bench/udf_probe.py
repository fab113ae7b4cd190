"""Probe: kspark's chain as mapInArrow over the envelope vs a scalar Arrow UDF over key+value.

    PYTHONPATH=sdk:server_plugin python bench/udf_probe.py --rows 1000000
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import _common as common
import pyarrow as pa

from kspark import StreamsBuilder, StreamsConfig, Topic
from kspark.compiler import stages
from kspark.compiler.compiler import compile_topology
from kspark_server import envelope
from kspark_server.chain import make_chain


def double(e: common.Event) -> int:
    return e.value * 2


def even(k: str, e: common.Event) -> bool:
    return e.value % 2 == 0


def spec_of(kind: str) -> Any:
    b = StreamsBuilder()
    s = b.stream(Topic.parquet("events", "/tmp/in"), key_type=str, value_type=common.Event)
    if kind == "map":
        s.map_values(double).to(Topic.parquet("out", "/tmp/out"))
    else:
        s.filter(even).to(Topic.parquet("out", "/tmp/out"))
    stage = compile_topology(b.build(), StreamsConfig(application_id="p")).sinks[0].stage
    assert isinstance(stage, stages.Chain)
    return stage.spec


def main() -> None:
    a = common.args(__doc__ or "")
    from pyspark import cloudpickle

    cloudpickle.register_pickle_by_value(common)
    spark, base, data = common.setup(a)
    from pyspark.sql import functions as F
    from pyspark.sql.types import StructType

    import json

    hdr = StructType.fromJson({"type": "struct", "fields": [{"name": "h", "type": envelope.HEADERS, "nullable": True, "metadata": {}}]}).fields[0].dataType

    def env_df(df: Any) -> Any:
        return df.select(
            "key",
            F.struct("key", "value", "ts").alias("value"),
            F.col("ts").alias("timestamp"),
            F.array().cast(hdr).alias("headers"),
            F.lit("events").alias("topic"),
            F.lit(0).cast("int").alias("partition"),
            F.col("ts").alias("offset"),
            F.col("ts").alias("ks_seq"),
            F.lit(0).cast("long").alias("ks_sub"),
            F.lit(None).cast("string").alias("ks_side"),
        )

    map_spec, filter_spec = spec_of("map"), spec_of("filter")
    from pyspark.sql.types import StructType as ST

    def out_schema(spec: Any) -> Any:
        return ST.fromJson(json.loads(spec.output_schema))

    def chain_udf(spec: Any, rtype: str, mask: bool) -> Any:
        cache: list[Any] = []

        def fn(key: pa.Array, value: pa.Array, seq: pa.Array) -> pa.Array:
            n = len(key)
            cols = {"key": key, "value": value, "ks_seq": seq, "ks_sub": pa.array([0] * n, pa.int64()),
                    "ks_side": pa.nulls(n, pa.string())}
            batch = pa.RecordBatch.from_pydict(cols)
            if not cache:
                cache.append(make_chain(spec))
            run = cache[0]
            outs = list(run([batch]))
            out = outs[0]
            if mask:
                # which input rows survived: the chain keeps order, seq is unique
                import pyarrow.compute as pc

                return pc.is_in(seq, value_set=out.column("ks_seq"))
            return out.column("value")

        return F.arrow_udf(fn, rtype)

    map_u = chain_udf(map_spec, "long", False)

    def all_udf(spec: Any, names: list[str]) -> Any:
        cache: list[Any] = []

        def fn(*arrays: pa.Array) -> pa.Array:
            n = len(arrays[0])
            cols = dict(zip(names, arrays))
            cols.setdefault("ks_side", pa.nulls(n, pa.string()))
            cols.setdefault("ks_sub", pa.array([0] * n, pa.int64()))
            batch = pa.RecordBatch.from_pydict(cols)
            if not cache:
                cache.append(make_chain(spec))
            return list(cache[0]([batch]))[0].column("value")

        return F.arrow_udf(fn, "long")

    ALL = ["key", "value", "timestamp", "headers", "topic", "partition", "offset", "ks_seq", "ks_sub", "ks_side"]
    LONGS = ["key", "value", "timestamp", "partition", "offset", "ks_seq", "ks_sub", "ks_side"]
    all_u, longs_u = all_udf(map_spec, ALL), all_udf(map_spec, LONGS)
    TOPIC, HDR = LONGS + ["topic"], LONGS + ["headers"]
    topic_u, hdr_u = all_udf(map_spec, TOPIC), all_udf(map_spec, HDR)
    filter_u = chain_udf(filter_spec, "boolean", True)

    def noop(df: Any) -> None:
        df.write.format("noop").mode("overwrite").save()

    src = spark.read.schema(common.SCHEMA).parquet(data)
    variants = {
        "sql map (envelope)": lambda: noop(env_df(src).withColumn("value", F.col("value.value") * 2)),
        "mapInArrow chain map": lambda: noop(env_df(src).mapInArrow(make_chain(map_spec), out_schema(map_spec))),
        "arrow_udf chain map": lambda: noop(env_df(src).withColumn("value", map_u("key", "value", "ks_seq"))),
        "arrow_udf all cols map": lambda: noop(env_df(src).withColumn("value", all_u(*ALL))),
        "arrow_udf no hdr/topic map": lambda: noop(env_df(src).withColumn("value", longs_u(*LONGS))),
        "arrow_udf +topic map": lambda: noop(env_df(src).withColumn("value", topic_u(*TOPIC))),
        "arrow_udf +headers map": lambda: noop(env_df(src).withColumn("value", hdr_u(*HDR))),
        "sql filter (envelope)": lambda: noop(env_df(src).where(F.col("value.value") % 2 == 0)),
        "mapInArrow chain filter": lambda: noop(env_df(src).mapInArrow(make_chain(filter_spec), out_schema(filter_spec))),
        "arrow_udf chain filter": lambda: noop(env_df(src).where(filter_u("key", "value", "ks_seq"))),
    }
    only = os.environ.get("ONLY")
    if os.environ.get("STREAM"):
        ssrc = common.read_events(spark, data)
        n = [0]

        def sink(df: Any) -> None:
            n[0] += 1
            out = df.select("key", "value", "timestamp", "ks_seq")
            common.run_query(out, os.path.join(base, f"o{n[0]}"), os.path.join(base, f"c{n[0]}"))

        variants = {
            "stream sql map": lambda: sink(env_df(ssrc).withColumn("value", F.col("value.value") * 2)),
            "stream mapInArrow map": lambda: sink(env_df(ssrc).mapInArrow(make_chain(map_spec), out_schema(map_spec))),
            "stream arrow_udf map": lambda: sink(env_df(ssrc).withColumn("value", map_u("key", "value", "ks_seq"))),
        }
    for name, fn in variants.items():
        if only and only not in name:
            continue
        ts = []
        for _ in range(a.repeat):
            t0 = time.perf_counter()
            fn()
            ts.append(time.perf_counter() - t0)
        print(f"{name:28s} " + " ".join(f"{t:.2f}" for t in ts) + f"  best {a.rows / min(ts):,.0f}/s", flush=True)


if __name__ == "__main__":
    main()
