"""Sources: a topic's records in the envelope's form, checked and counted.

Every source ends the same way: records that did not parse go to the deserialization
handler (:mod:`.corrupt`), invalid timestamps to the timestamp policy (:mod:`.timestamps`),
and an observation counts the records read.
"""

from __future__ import annotations

import json
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StructType

from kspark.compiler import stages as st
from kspark.compiler.lowering.columns import dtype, either, no_headers, tail, typed, typed_fields
from kspark.compiler.lowering.corrupt import corrupt_records, uncast
from kspark.compiler.lowering.files import LINE_WHERE, is_pattern, position, read_raw, topic_of_file
from kspark.compiler.lowering.kafka import read_kafka
from kspark.compiler.lowering.timestamps import invalid_timestamps
from kspark.compiler.resume import Resume
from kspark.compiler.subtopologies import INTERNAL_OPTION
from kspark.plan.nodes import TopicSpec
from kspark_server import envelope as env

__all__ = ["INPUT_METRICS_PREFIX", "read", "read_constants"]

#: Prefix of the observed metrics that count each source's records (``records``); the
#: name goes on with the source processor's name.
INPUT_METRICS_PREFIX = "kspark_in:"


def read(stage: st.Read, spark: SparkSession, resume: Resume | None = None) -> DataFrame:
    """``stage``'s topic in envelope form, its corrupt records and invalid timestamps
    handled, its records counted."""
    if stage.topic.format == "kafka":
        out = corrupt_records(read_kafka(stage, spark, resume), stage)
    else:
        raw = read_raw(stage, spark, resume)
        if stage.topic.layout == "envelope":
            out = _from_envelope(raw, stage)
        else:
            out = _from_value_fields(raw, stage)
        if "_corrupt_record" in out.columns:
            out = corrupt_records(out, stage)
    # counted after the checks (same count: they turn rows into side rows, never remove
    # one), so that Spark runs the source and the checks as one stage: an observation
    # between them splits it in two (docs/design/stateless-chain.md)
    return _count_input(invalid_timestamps(out, stage), stage)


def _from_envelope(raw: DataFrame, stage: st.Read) -> DataFrame:
    """Rows stored in the envelope's own columns (``layout="envelope"``), converted to
    the declared types; columns a row lacks get their default."""
    t = stage.topic
    cols = set(raw.columns)
    offset = position(raw, t.format)
    if "offset" in cols:
        offset = F.coalesce(F.col("offset"), offset)
    seq = F.coalesce(F.col("ks_seq"), offset) if "ks_seq" in cols else offset
    headers = F.coalesce(F.col("headers"), no_headers()) if "headers" in cols else no_headers()
    dtypes = dict(raw.dtypes)
    key, bad_key = typed(F.col("key"), dtype(stage.key_type.spark_json()), dtypes["key"])
    value, bad_value = typed(F.col("value"), dtype(stage.value_type.spark_json()), dtypes["value"])
    # a row of a topic without a timestamp column (a Spark table) gets the processing
    # time; a null or missing one in a row that has the column is an invalid
    # timestamp, for StreamsConfig.timestamp_policy (invalid_timestamps)
    stamp: Column
    bad_stamp: Column | None = None
    if "timestamp" in cols:
        stamp, bad_stamp = typed(F.col("timestamp"), LongType(), dtypes["timestamp"])
    else:
        stamp = F.expr("unix_millis(current_timestamp())")
    partition = F.coalesce(F.col("partition"), F.lit(0)) if "partition" in cols else F.lit(0)
    topic = _topic_column(raw, t)
    if env.CONTEXT["topic"][0] in cols:
        # an internal topic's record keeps the context it was read at: the cut between
        # sub-topologies is kspark's, not the app's (its order stays the topic's: seq)
        topic, partition, offset = (
            F.coalesce(F.col(env.CONTEXT[c][0]), default)
            for c, default in (("topic", topic), ("partition", partition), ("offset", offset))
        )
    return raw.select(
        key.alias("key"),
        value.alias("value"),
        stamp.alias("timestamp"),
        headers.alias("headers"),
        topic.alias("topic"),
        partition.cast("int").alias("partition"),
        offset.cast("long").alias("offset"),
        *tail(offset, seq),
        *uncast(raw, either(bad_key, bad_value, bad_stamp), ["key", "value", "timestamp"]),
        *[F.col(c) for c in LINE_WHERE if c in cols],
    )


def _from_value_fields(raw: DataFrame, stage: st.Read) -> DataFrame:
    """Rows whose columns are the value's fields (``layout="value"``), with the key and
    timestamp taken from the topic's ``key_field`` and ``timestamp_field``."""
    t = stage.topic
    cols = set(raw.columns)
    value_fields = [f["name"] for f in stage.value_type.spark_json()["fields"]]
    dtypes = dict(raw.dtypes)
    key_t = dtype(stage.key_type.spark_json())
    key, bad_key = (
        typed(F.col(t.key_field), key_t, dtypes.get(t.key_field, ""))
        if t.key_field
        else (F.lit(None).cast(key_t), None)
    )
    if t.timestamp_field:
        ts, bad_ts = typed(F.col(t.timestamp_field), LongType(), dtypes.get(t.timestamp_field, ""))
    else:
        ts, bad_ts = F.expr("unix_millis(current_timestamp())"), None
    value_t = dtype(stage.value_type.spark_json())
    assert isinstance(value_t, StructType)  # layout="value" needs a record type
    value, bad_value = typed_fields(
        {c: F.col(c) for c in value_fields}, value_t, {c: dtypes.get(c, "") for c in cols}
    )
    offset = position(raw, t.format)
    return raw.select(
        key.alias("key"),
        value.alias("value"),
        ts.alias("timestamp"),
        no_headers().alias("headers"),
        _topic_column(raw, t).alias("topic"),
        F.lit(0).cast("int").alias("partition"),
        offset.alias("offset"),
        *tail(offset),
        *uncast(raw, either(bad_key, bad_ts, bad_value), value_fields),
        *[F.col(c) for c in LINE_WHERE if c in cols],
    )


def _topic_column(raw: DataFrame, topic: TopicSpec) -> Column:
    """Each record's topic: the topic's name, or for a pattern source the folder its
    file is in."""
    if not is_pattern(topic):
        return F.lit(topic.name)
    path = F.col(LINE_WHERE[1]) if LINE_WHERE[1] in raw.columns else F.col("_metadata.file_path")
    return topic_of_file(path)


def _count_input(df: DataFrame, stage: st.Read) -> DataFrame:
    """Count the records read, for the app's records-in figures.

    Spark's ``numInputRows`` sums a source over every scan of it in the plan, and a
    stream that feeds two sinks (or branches that are merged) is scanned once per path to
    the final union, so it would count such records twice or more. An observation on the
    source's DataFrame counts each record once: every scan of the shared subtree counts
    the same records, and Spark reports one value per observation name. An internal
    topic's records are not counted (docs/design/sub-topologies.md).
    """
    if (INTERNAL_OPTION, "true") in stage.topic.options:
        # an internal topic's records were the app's records already (its sources'); the
        # default runner, which has no such topic, reports the same figures
        return df
    # a source of several topics reads each on its own: one observation each
    name = INPUT_METRICS_PREFIX + stage.processor + (f"#{stage.part}" if stage.part else "")
    return df.observe(name, F.count(F.lit(1)).alias("records"))


def read_constants(stage: st.Read) -> dict[str, Any]:
    """The envelope columns that :func:`read` makes the same for every record of
    ``stage``'s topic, with their value: the topic's name for any topic but Kafka, and a
    file topic's partition (0) and headers (none) where its rows have no such column."""
    t = stage.topic
    if t.format == "kafka":
        return {}
    out: dict[str, Any] = {"ks_sub": 0} if is_pattern(t) else {"topic": t.name, "ks_sub": 0}
    if t.layout == "envelope":
        if stage.read_schema is None:  # a table: its columns are not known here
            return out
        stored = {f["name"] for f in json.loads(stage.read_schema)["fields"]}
        if env.CONTEXT["topic"][0] in stored:  # each record's own (an internal topic)
            out.pop("topic", None)
    else:
        stored = set()
    if "ks_seq" not in stored:
        out["ks_seq"] = {"same_as": "offset"}
    if "partition" not in stored:
        out["partition"] = 0
    if "headers" not in stored:
        out["headers"] = []
    return out
