"""Records that could not be read as their declared types.

A source marks such a record with two columns: ``_corrupt_record`` (its raw text) and
``_corrupt_where`` (where it is, ``line N of <file>``; Kafka's offset alone says that).
:func:`corrupt_records` then applies ``StreamsConfig.deserialization_exception_handler``.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kspark.compiler import stages as st
from kspark.compiler.lowering.sides import drop_rows, record_position

__all__ = ["corrupt_records", "uncast"]


def uncast(raw: DataFrame, bad: Column | None, shown: list[str]) -> list[Column]:
    """The ``_corrupt_record`` and ``_corrupt_where`` columns: those of a line that did
    not parse, or, for a row whose columns did not convert to the declared types, the row
    as JSON text (its ``shown`` columns), for the deserialization handler. None when no
    row can be corrupt (``bad`` None and no line that did not parse): the source then
    has no deserialization check at all."""
    cols = set(raw.columns)
    if bad is None:
        if "_corrupt_record" not in cols:
            return []
        text = F.col("_corrupt_record")
    else:
        text = F.when(bad, F.to_json(F.struct(*[F.col(c) for c in shown if c in cols])))
        if "_corrupt_record" in cols:
            text = F.coalesce(F.col("_corrupt_record"), text)
    out = [text.alias("_corrupt_record")]
    if "_corrupt_where" in cols:
        out.append(F.col("_corrupt_where"))
    return out


def corrupt_records(df: DataFrame, stage: st.Read) -> DataFrame:
    """Rows Spark could not parse: fail (the default), drop, or send to the DLQ."""
    # a file's line says where it is; Kafka's offset alone does
    where = (
        F.concat(F.lit(", "), F.col("_corrupt_where"))
        if "_corrupt_where" in df.columns
        else F.lit("")
    )
    df = df.withColumn("ks_where", where).drop("_corrupt_where")
    if stage.deserialization == "fail":
        out = _fail(df, stage)
    else:
        out = _drop(df, stage)
    return out.drop("_corrupt_record", "ks_where")


def _fail(df: DataFrame, stage: st.Read) -> DataFrame:
    """Fail the query at the first corrupt record, naming it and the fix."""
    bad = F.col("_corrupt_record").isNotNull()
    msg = F.concat(
        F.lit(
            f"[KSPARK_DESERIALIZATION_FAILED] {stage.processor}: a record of topic "
            f"{stage.topic.name!r} could not be read as its declared types (offset "
        ),
        F.coalesce(F.col("offset").cast("string"), F.lit("null")),
        F.col("ks_where"),
        F.lit("): "),
        F.substring(F.col("_corrupt_record"), 1, 200),
        F.lit(
            ". Set StreamsConfig(deserialization_exception_handler=...) to skip such "
            "records or send them to a dead-letter queue."
        ),
    )
    return df.withColumn(
        "ks_side", F.when(bad, F.raise_error(msg).cast("string")).otherwise(F.col("ks_side"))
    )


def _drop(df: DataFrame, stage: st.Read) -> DataFrame:
    """Count corrupt records as dropped (``continue``) or dead-letter them (``dlq``)."""
    chunk = F.concat(
        F.lit(stage.processor + ":"),
        record_position(),
        F.lit(":"),
        F.xxhash64(F.col("_corrupt_record")).cast("string"),
    )
    dead_letter = {
        "dlq_value": F.col("_corrupt_record"),
        "exception_class": F.lit("kspark.errors.DeserializationError"),
        "exception_message": F.concat(
            F.lit(f"record of topic {stage.topic.name} does not match the declared types"),
            F.col("ks_where"),
        ),
    }
    return drop_rows(
        df,
        stage,
        F.col("_corrupt_record").isNotNull(),
        reason="deserialization-error",
        chunk=chunk,
        dead_letter=None if stage.deserialization == "continue" else dead_letter,
    )
