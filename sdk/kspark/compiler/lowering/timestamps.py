"""``StreamsConfig.timestamp_policy``: records whose timestamp is null or negative.

The policy applies where records are read; a stateful operator, which keeps time per
task, fills in the timestamps that ``use-partition-time`` leaves null
(``kspark_server.timestamps``).
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kspark.compiler import stages as st
from kspark.compiler.lowering.files import LINE_WHERE
from kspark.compiler.lowering.sides import drop_rows, json_text, record_position

__all__ = ["invalid_timestamps"]


def invalid_timestamps(df: DataFrame, stage: st.Read) -> DataFrame:
    """Records whose timestamp is null or negative, by ``StreamsConfig.timestamp_policy``:
    fail naming the record, drop and count them, or leave the timestamp null for the next
    stateful operator to fill in with its partition's time (``kspark_server.timestamps``).
    Rows that are already side rows (a record that did not parse) are left alone."""
    if LINE_WHERE[0] in df.columns:
        where = F.concat(
            F.lit(", line "),
            F.col(LINE_WHERE[0]).cast("string"),
            F.lit(" of "),
            F.col(LINE_WHERE[1]),
        )
        df = df.withColumn("ks_ts_where", where).drop(*LINE_WHERE)
    else:
        df = df.withColumn("ks_ts_where", F.lit(""))
    return _apply_policy(df, stage).drop("ks_ts_where")


def _apply_policy(df: DataFrame, stage: st.Read) -> DataFrame:
    """:func:`invalid_timestamps` once the record's file and line, if any, are in
    ``ks_ts_where``."""
    ts = F.col("timestamp")
    invalid = F.col("ks_side").isNull() & (ts.isNull() | (ts < 0))
    policy = stage.timestamp_policy
    if policy == "use-partition-time":
        return df.withColumn("timestamp", F.when(invalid, F.lit(None)).otherwise(ts))
    if policy == "fail":
        return _fail(df, stage, invalid)
    return _skip(df, stage, invalid)


def _fail(df: DataFrame, stage: st.Read, invalid: Column) -> DataFrame:
    """Fail the query at the first invalid timestamp, naming the record and the fix."""
    msg = F.concat(
        F.lit(
            f"[KSPARK_INVALID_TIMESTAMP] {stage.processor}: a record of topic "
            f"{stage.topic.name!r} has an invalid timestamp ("
        ),
        F.coalesce(F.col("timestamp").cast("string"), F.lit("null")),
        F.lit(") at partition "),
        F.coalesce(F.col("partition").cast("string"), F.lit("null")),
        F.lit(" offset "),
        F.coalesce(F.col("offset").cast("string"), F.lit("null")),
        F.col("ks_ts_where"),
        F.lit(
            ". Set StreamsConfig(timestamp_policy='skip') to drop such records, or "
            "'use-partition-time' to give them their partition's time."
        ),
    )
    return df.withColumn(
        "ks_side",
        F.when(invalid, F.raise_error(msg).cast("string")).otherwise(F.col("ks_side")),
    )


def _skip(df: DataFrame, stage: st.Read, invalid: Column) -> DataFrame:
    """Drop records with an invalid timestamp, counted (and dead-lettered where the app
    dead-letters dropped records)."""
    chunk = F.concat(
        F.lit(stage.processor + ":ts:"),
        F.coalesce(F.col("partition").cast("string"), F.lit("")),
        F.lit(":"),
        record_position(),
    )
    dead_letter = {
        "dlq_key": json_text(F.col("key"), stage.key_type),
        "dlq_value": json_text(F.col("value"), stage.value_type),
        "exception_class": F.lit("kspark_server.handling.DroppedRecord"),
        "exception_message": F.concat(
            F.lit(
                f"{stage.processor} dropped the record: its timestamp is null or negative "
                "(StreamsConfig.timestamp_policy='skip')"
            ),
            F.col("ks_ts_where"),
        ),
    }
    return drop_rows(
        df,
        stage,
        invalid,
        reason="invalid-timestamp",
        chunk=chunk,
        dead_letter=dead_letter if stage.dead_letter_dropped else None,
    )
