"""Records a source turns into side rows: counted as dropped, or dead-lettered.

A side row stands in for a record that the app does not process (one that did not parse,
or whose timestamp is invalid); :func:`drop_rows` makes one, so that every record is
output, counted with a reason, or stops the app.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kspark.compiler import stages as st
from kspark.compiler.lowering.columns import side_struct
from kspark.plan.types import Dynamic, TypeDesc
from kspark_server.envelope import SideKind

__all__ = ["drop_rows", "json_text", "record_position"]


def record_position() -> Column:
    """A record's position as text, for a side row's identity: its offset, or, where the
    source has none (a Spark table), a hash of the record. (Spark refuses row ids such as
    ``monotonically_increasing_id`` in a stream, so two byte-identical rows of a table
    share an identity, and count once: a limit documented in docs/errors.md.)"""
    return F.coalesce(
        F.col("offset").cast("string"),
        F.concat(
            F.lit("h"),
            F.xxhash64(F.col("key"), F.col("value"), F.col("timestamp")).cast("string"),
        ),
    )


def json_text(c: Column, desc: TypeDesc) -> Column:
    """``c`` (of type ``desc``) as JSON text (null stays null), as dead letters hold keys
    and values. A dynamic value is JSON text already and stays as it is, unless it is a
    JSON string that Spark's JSON reader handed over without its quotes."""
    text = F.to_json(F.array(c))  # to_json takes no primitive: write ``[x]``, strip ``[]``
    quoted = F.when(c.isNotNull(), text.substr(F.lit(2), F.length(text) - 2))
    if isinstance(desc, Dynamic):
        return F.when(F.try_parse_json(c).isNotNull(), c).otherwise(quoted)
    return quoted


def drop_rows(
    df: DataFrame,
    stage: st.Read,
    bad: Column,
    *,
    reason: str,
    chunk: Column,
    dead_letter: dict[str, Column] | None,
) -> DataFrame:
    """``df`` with its ``bad`` rows turned into side rows of ``stage``'s processor,
    counted as dropped for ``reason`` or, with ``dead_letter`` (the dead letter's own
    fields), sent to the dead-letter queue with the record's headers and source.
    ``chunk`` identifies the row, so that a retried micro-batch counts it once."""
    common = {
        "processor": F.lit(stage.processor),
        "task": F.concat(F.lit(f"{stage.subtopology}_"), F.col("partition").cast("string")),
        "count": F.lit(1).cast("long"),
        "reason": F.lit(reason),
        "chunk": chunk,
    }
    if dead_letter is None:
        side = side_struct(kind=F.lit(SideKind.DROPPED.value), **common)
    else:
        side = side_struct(
            kind=F.lit(SideKind.DLQ.value),
            **common,
            **dead_letter,
            stack_trace=F.lit(""),
            dlq_headers=F.col("headers"),
            src_topic=F.col("topic"),
            src_partition=F.col("partition"),
            src_offset=F.col("offset"),
            src_timestamp=F.col("timestamp"),
        )
    return (
        df.withColumn("ks_side", F.when(bad, side).otherwise(F.col("ks_side")))
        .withColumn("key", F.when(bad, F.lit(None)).otherwise(F.col("key")))
        .withColumn("value", F.when(bad, F.lit(None)).otherwise(F.col("value")))
    )
