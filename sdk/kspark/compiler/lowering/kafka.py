"""Kafka topics: which connector reads them, and their bytes decoded to the declared types."""

from __future__ import annotations

import json
import weakref

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import StructType

from kspark._conditions import condition
from kspark.compiler import stages as st
from kspark.compiler.lowering.columns import dtype, no_headers, tail
from kspark.compiler.resume import Resume
from kspark.plan.types import Dynamic, Primitive, TypeDesc

__all__ = ["kafka_format", "read_kafka"]

#: Per session: does the server have Spark's JVM Kafka connector? Weak keys: an entry goes
#: with its session, and a new session never inherits an old one's answer (as it could
#: through a reused ``id()``).
JVM_KAFKA: weakref.WeakKeyDictionary[SparkSession, bool] = weakref.WeakKeyDictionary()


def kafka_format(spark: SparkSession, mode: str) -> str:
    """``kafka`` (the JVM connector) or ``kspark_kafka`` (kspark's Python data source,
    registered on the session here)."""
    if mode == "auto":
        if spark not in JVM_KAFKA:
            JVM_KAFKA[spark] = _has_jvm_kafka(spark)
        mode = "jvm" if JVM_KAFKA[spark] else "python"
    if mode == "jvm":
        return "kafka"
    from kspark.compiler.bundle import shipped_data_source
    from kspark_server.kafka import KafkaDataSource

    spark.dataSource.register(shipped_data_source(KafkaDataSource))
    return "kspark_kafka"


def _has_jvm_kafka(spark: SparkSession) -> bool:
    """Whether the server finds Spark's Kafka data source: analysing a read is what finds
    (or fails to find) it."""
    try:
        probe = spark.read.format("kafka").option("kafka.bootstrap.servers", "localhost:1")
        _ = probe.option("subscribe", "kspark-probe").load().schema
    except Exception as exc:
        if not _source_missing(exc):
            raise
        return False
    return True


#: Spark's conditions for a server without the Kafka connector: the one it gives for
#: ``kafka`` itself, and the one for any data source it cannot find.
_SOURCE_MISSING = frozenset({"KAFKA_DATA_SOURCE_NOT_ENABLED", "DATA_SOURCE_NOT_FOUND"})


def _source_missing(exc: BaseException) -> bool:
    """Whether ``exc`` says the server has no Kafka data source: Spark's condition says
    so; the message only of an error without one."""
    found = condition(exc)
    if found is not None:
        return found in _SOURCE_MISSING
    text = str(exc).lower()
    return "kafka" in text and "find" in text


def read_kafka(stage: st.Read, spark: SparkSession, resume: Resume | None) -> DataFrame:
    """A Kafka topic's records in envelope form, with ``_corrupt_record`` set (its key and
    value as text) where they did not decode to the declared types."""
    t = stage.topic
    fmt = kafka_format(spark, stage.kafka_client)
    pattern = "subscribePattern" in t.option_dict()
    reader = spark.readStream.format(fmt)
    if not pattern:  # a pattern source subscribes by its subscribePattern option
        reader = reader.option("subscribe", t.name)
    if fmt == "kafka":
        reader = reader.option("includeHeaders", "true")
    for k, v in t.options:
        reader = reader.option(k, v)
    if resume is not None and not pattern and t.name in resume.kafka_offsets:
        # a rescaled app's new checkpoint goes on where the old one's last batch ended
        reader = reader.option(
            "startingOffsets", json.dumps({t.name: resume.kafka_offsets[t.name]})
        )
    raw = reader.load()
    key, undecoded_key = _decode(F.col("key"), stage.key_type)
    value, undecoded_value = _decode(F.col("value"), stage.value_type)
    return raw.select(
        key.alias("key"),
        value.alias("value"),
        F.expr("unix_millis(timestamp)").alias("timestamp"),
        # empty, never null: null lists crossing into a Python pass make Spark's Arrow
        # batch size check quadratic in the batch's rows (docs/design/stateless-chain.md)
        F.coalesce(F.col("headers"), no_headers()).alias("headers"),
        F.col("topic"),
        F.col("partition").cast("int").alias("partition"),
        F.col("offset").cast("long").alias("offset"),
        *tail(F.col("offset")),
        F.when(undecoded_key | undecoded_value, _raw_text()).alias("_corrupt_record"),
    )


def _raw_text() -> Column:
    """A Kafka record's key and value as text, for a record that did not decode."""
    return F.concat(
        F.lit("key="),
        F.coalesce(F.make_valid_utf8(F.col("key").cast("string")), F.lit("null")),
        F.lit(" value="),
        F.coalesce(F.make_valid_utf8(F.col("value").cast("string")), F.lit("null")),
    )


def _decode(c: Column, desc: TypeDesc) -> tuple[Column, Column]:
    """Kafka bytes to the declared type (primitives as text, records as JSON), and whether
    they failed to parse (a null stays null: a tombstone is not a bad record)."""
    text = c.cast("string")
    # the cast keeps the bytes as they are: invalid UTF-8 would reach the app as a changed
    # value (or fail a Python worker), so it goes to the deserialization handler
    bad_text = c.isNotNull() & ~F.is_valid_utf8(text)
    if isinstance(desc, Dynamic):
        return text, bad_text  # JSON text, parsed in the operators
    if isinstance(desc, Primitive):
        if desc.spark == "binary":
            return c, F.lit(False)
        if desc.spark == "string":
            return text, bad_text
        decoded = text.try_cast(dtype(desc.spark))
        return decoded, c.isNotNull() & decoded.isNull()
    struct = dtype(desc.spark_json())
    assert isinstance(struct, StructType)
    names = [f.name for f in struct.fields]
    with_corrupt = StructType([*struct.fields]).add("_corrupt_record", "string")
    parsed = F.from_json(text, with_corrupt, {"columnNameOfCorruptRecord": "_corrupt_record"})
    bad = bad_text | (c.isNotNull() & (parsed.isNull() | parsed["_corrupt_record"].isNotNull()))
    value = F.when(c.isNull() | bad, F.lit(None)).otherwise(
        F.struct(*[parsed[n].alias(n) for n in names])
    )
    return value.cast(struct), bad
