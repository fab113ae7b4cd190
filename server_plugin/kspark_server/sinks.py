"""The micro-batch writer: routes one batch of the app's output to its sinks.

It runs as the streaming query's ``foreachBatch`` function on the server. Each sink gets
its rows (columns ``k<i>``/``v<i>`` of the union), and the dead-letter queue gets the
dead-letter side rows. A file sink writes batch ``N`` into ``<path>/batch_id=N``, replacing
what a failed earlier attempt of the same batch left, so output is exactly once across
restarts. Sinks into one topic (``TopicRef.destination``) are written as one union, so
that merged branches keep all their records.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

from pyspark.sql import DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import DataType, StructType

from kspark_server.envelope import (
    CONTEXT,
    DLQ_HEADERS,
    HEADERS,
    SIDE,
    SIDE_IDENTITY,
    SideKind,
    field,
)
from kspark_server.lease import Lease, lease_dir
from kspark_server.spec import DynamicSinkSpec, SinkSpec, SinksSpec, TopicRef, check_spec

_log = logging.getLogger("kspark.sinks")

#: kspark's file topic formats, and Spark's name of each
FILE_FORMATS = {"jsonl": "json", "parquet": "parquet", "csv": "csv"}


def make_batch_writer(spec: SinksSpec) -> Any:
    """The ``foreachBatch`` function of a sinks spec."""
    check_spec(spec)
    sinks = spec.sinks
    dynamic = spec.dynamic
    ends = spec.ends
    dlq = spec.dlq
    side_schema = StructType.fromJson(SIDE)
    kafka_format = spec.kafka_format
    batch_offset = spec.batch_offset
    lease = (
        Lease(lease_dir(spec.lease_checkpoint_dir), spec.lease_token, spec.application_id)
        if spec.lease_checkpoint_dir
        else None
    )

    # sinks into one topic (merged branches) are written together: one write per topic
    # and batch, since each write replaces the batch's whole folder or partition
    groups: dict[tuple[str, ...], list[SinkSpec]] = {}
    for s in sinks:
        groups.setdefault(s.topic.destination, []).append(s)

    def write_batch(df: DataFrame, query_batch_id: int) -> None:
        # after a rescale the query checkpoint is new, but the app's batches go on counting
        batch_id = query_batch_id + batch_offset
        if lease is not None:
            try:
                lease.keep()  # any session can now see that the app runs
            except OSError as exc:
                _log.warning("cannot renew the lease in %s: %s", lease.folder, exc)
        # a sink whose records name their topics reads the batch once to find the names,
        # then once per topic: from the cache, so that its extractor runs once per record
        outputs = len(sinks) + len(dynamic) + (1 if dlq else 0) + (1 if ends else 0)
        cached = outputs > 1 or bool(dynamic)
        if cached:
            df = df.persist()
        try:
            if ends:
                # no sink reads the rows of the ends (foreach, print, a branch that ends
                # in peek), so a write may not compute them: compute the whole batch once,
                # into the cache the sinks then read
                df.count()
            # which sinks have records in this batch: one pass over the cached batch, not
            # one per sink (each costs a Spark job, some tenths of a second on an idle batch)
            present = _sinks_present(df) if cached else None
            internal = []
            for topic, parts in _destinations(df, groups, dynamic):
                part = functools.reduce(DataFrame.unionByName, parts)
                group = groups.get(topic.destination, [])
                if present is not None and len(parts) == len(group):
                    empty = not any(s.index in present for s in group)
                else:
                    empty = topic.internal and part.isEmpty()
                if topic.internal:
                    internal.append(topic)
                    if empty:
                        continue
                elif empty:
                    # still written (it replaces what a failed attempt of the batch left),
                    # from no rows: Spark then neither scans the batch nor shuffles it
                    part = part.limit(0)
                # rows that all left an operator in its tasks' processing order keep it;
                # a dynamic sink's rows (parts beyond the group) are sorted
                emitted = len(parts) == len(group) and all(s.emitted_order for s in group)
                write_topic(part, topic, batch_id, topic.ordered, kafka_format, emitted)
            if spec.fail_after_internal == batch_id and internal:
                _fail_once(internal[0], batch_id)
            if dlq:
                dead = (
                    df.filter(F.col("ks_side").isNotNull())
                    .select(F.from_json("ks_side", side_schema).alias("s"))
                    .filter(F.col("s.kind") == SideKind.DLQ.value)
                    .select("s.*")
                    .dropDuplicates(list(SIDE_IDENTITY))
                    .select(
                        F.col("dlq_key").alias("key"),
                        F.col("dlq_value").alias("value"),
                        F.col("src_timestamp").alias("timestamp"),
                        F.col("dlq_headers").alias("headers"),
                        "exception_class",
                        "exception_message",
                        "stack_trace",
                        F.col("src_topic").alias("topic"),
                        F.col("src_partition").alias("partition"),
                        F.col("src_offset").alias("offset"),
                        F.col("processor").alias("processor_node_id"),
                        F.col("task").alias("task_id"),
                        F.col("src_offset").alias("ks_seq"),
                        F.lit(0).cast("long").alias("ks_sub"),
                    )
                )
                write_topic(dead, dlq, batch_id, True, kafka_format)
        finally:
            if cached:
                df.unpersist()

    return write_batch


def _sinks_present(df: DataFrame) -> set[int]:
    """The numbers of the sinks that have records in the batch ``df`` (side rows aside)."""
    rows = df.filter(F.col("ks_side").isNull()).select("ks_sink").distinct().collect()
    return {int(r[0]) for r in rows}


def _destinations(
    df: DataFrame,
    groups: dict[tuple[str, ...], list[SinkSpec]],
    dynamic: tuple[DynamicSinkSpec, ...],
) -> list[tuple[TopicRef, list[DataFrame]]]:
    """Each topic the batch writes, with the rows of every sink into it: the static sinks'
    groups, joined by the topics that the batch's records of dynamic sinks name (one
    write per destination, as a write replaces the batch's folder)."""
    out: dict[tuple[str, ...], tuple[TopicRef, list[DataFrame]]] = {
        dest: (group[0].topic, [sink_rows(df, s) for s in group]) for dest, group in groups.items()
    }
    for d in dynamic:
        rows = df.filter(F.col("ks_side").isNull() & (F.col("ks_sink") == d.index))
        names = sorted(r[0] for r in rows.select("topic").distinct().collect())
        for name in names:
            ref = d.rule.resolve(name)
            if ref is None:  # the topic name stage sent such records to the handler
                continue
            static = SinkSpec(index=d.index, topic=ref, num_partitions=d.num_partitions)
            picked = sink_rows(df.filter(F.col("topic") == name), static)
            out.setdefault(ref.destination, (ref, []))[1].append(picked)
    return list(out.values())


def _fail_once(topic: TopicRef, batch_id: int) -> None:
    """A test's fault (``SinksSpec.fail_after_internal``): the batch fails once, its
    internal topics written and its commit not."""
    import os

    assert topic.path is not None
    marker = os.path.join(topic.path, f"_fault-{batch_id}")
    if os.path.exists(marker):
        return
    with open(marker, "w"):
        pass
    raise RuntimeError(f"injected fault after writing batch {batch_id}'s internal topics")


def sink_rows(df: DataFrame, s: SinkSpec) -> DataFrame:
    """Sink ``s``'s records of the batch, in the columns every topic writer takes."""
    i = s.index
    return df.filter(F.col("ks_side").isNull() & (F.col("ks_sink") == i)).select(
        F.col(f"k{i}").alias("key"),
        F.col(f"v{i}").alias("value"),
        "timestamp",
        "headers",
        F.expr(f"pmod(hash(k{i}), {int(s.num_partitions)})").cast("int").alias("partition"),
        "ks_seq",
        "ks_sub",
        *(
            [F.col(c).cast(t).alias(name) for c, (name, t) in CONTEXT.items()]
            if s.topic.internal
            else []
        ),
    )


def write_topic(
    df: DataFrame,
    topic: TopicRef,
    batch_id: int,
    ordered: bool,
    kafka_format: str = "kafka",
    emitted: bool = False,
) -> None:
    """Write one batch's rows ``df`` into ``topic``.

    An ``ordered`` topic gets one file, sorted by source position (``ks_seq``,
    ``ks_sub``). Otherwise each Spark partition writes its own file, sorted by source
    position, but for rows ``emitted`` in a stateful operator's processing order
    (:attr:`SinkSpec.emitted_order`): those keep it, as Kafka Streams produces records
    (a sort by position would change it where a task merges several input partitions,
    and would cost a sort of every batch).
    """
    fmt = topic.format
    if fmt == "kafka":
        _write_kafka(df, topic, kafka_format)
        return
    if ordered:
        # one sorted file, without orderBy: its sampling job would run the batch twice
        df = df.repartition(1).sortWithinPartitions("ks_seq", "ks_sub")
    elif not emitted:
        df = df.sortWithinPartitions("ks_seq", "ks_sub")
    df = df.drop("ks_seq", "ks_sub")
    if fmt in FILE_FORMATS:
        writer = df.write.mode("overwrite").format(FILE_FORMATS[fmt])
        if fmt == "csv":
            writer = writer.option("header", "true")
        assert topic.path is not None  # kspark.Topic requires one for files and tables
        writer.save(f"{topic.path.rstrip('/')}/batch_id={batch_id}")
    elif fmt == "table":
        assert topic.path is not None
        _write_table(df, topic.path, batch_id)
    else:
        raise ValueError(f"unknown sink format {fmt!r}")


def _kafka_bytes(df: DataFrame, name: str) -> Any:
    """A key or value column as Kafka bytes: text for primitives, JSON for records, as
    kspark's Kafka source reads them back."""
    dtype = df.schema[name].dataType.typeName()
    col = F.col(name)
    if dtype == "binary":
        return col
    if dtype in ("struct", "array", "map"):
        return F.to_json(col).cast("binary")
    return col.cast("string").cast("binary")


def _write_kafka(df: DataFrame, topic: TopicRef, kafka_format: str) -> None:
    """Produce one micro-batch (at least once: a retried batch is produced again)."""
    opts = {k: v for k, v in topic.options if not k.startswith("kspark.")}
    opts.pop("subscribe", None)
    headers = F.col("headers")
    if "exception_class" in df.columns:  # the dead-letter queue
        extra = [(c, h) for c, h in DLQ_HEADERS.items() if c in df.columns]
        headers = F.concat(
            F.coalesce(headers, F.array().cast("array<struct<key:string,value:binary>>")),
            F.array(
                *[
                    F.struct(
                        F.lit(h).alias("key"), F.col(c).cast("string").cast("binary").alias("value")
                    )
                    for c, h in extra
                ]
            ),
        )
    cols = [
        _kafka_bytes(df, "key").alias("key"),
        _kafka_bytes(df, "value").alias("value"),
        headers.alias("headers"),
    ]
    if kafka_format != "kafka":
        cols.append(F.col("timestamp").alias("timestamp"))
    out = df.sortWithinPartitions("ks_seq", "ks_sub").select(*cols)
    out.write.format(kafka_format).options(**opts).option("topic", topic.name).mode("append").save()


#: The table property that marks a table kspark created as a sink: the only tables it
#: writes into.
TABLE_MARK = "kspark.sink"


def _quote(table: str) -> str:
    return ".".join(f"`{part.strip('`')}`" for part in table.split("."))


def _columns(schema: StructType) -> list[tuple[str, str]]:
    # names without case (the catalog may store them in lower case), types without
    # nullability (Parquet files make every column nullable)
    return [(f.name.lower(), f.dataType.simpleString()) for f in schema.fields]


def table_sink_schema(key: DataType, value: DataType) -> StructType:
    """The columns of a table that kspark creates for a sink of these key and value types."""
    columns = [
        ("key", key.jsonValue()),
        ("value", value.jsonValue()),
        ("timestamp", "long"),
        ("headers", HEADERS),
        ("partition", "integer"),
        ("batch_id", "long"),
    ]
    return StructType.fromJson({"type": "struct", "fields": [field(*c) for c in columns]})


def table_problem(spark: Any, table: str, expected: StructType | None) -> str | None:
    """Why kspark must not write into ``table``, or None if it may.

    kspark writes only into tables it created (marked with :data:`TABLE_MARK`) whose
    columns are those it writes (``expected``; None skips that check): writing into any
    other table would replace or mix up its rows. An absent table is fine: kspark creates
    it.
    """
    if not spark.catalog.tableExists(table):
        return None
    actual = spark.table(table).schema
    rows = spark.sql(f"SHOW TBLPROPERTIES {_quote(table)}").collect()
    if {r["key"]: r["value"] for r in rows}.get(TABLE_MARK) != "true":
        return (
            f"table {table} exists and was not created by kspark (its columns: "
            f"{actual.simpleString()}); kspark writes only into tables it creates, and would "
            "replace or mix up this table's rows. Choose another table, or drop this one. A "
            "table that an older kspark created as this sink can be adopted with ALTER "
            f"TABLE {table} SET TBLPROPERTIES ('{TABLE_MARK}' = 'true')"
        )
    if expected is not None and _columns(actual) != _columns(expected):
        return (
            f"table {table} has the columns {actual.simpleString()}, but this sink writes "
            f"{expected.simpleString()}; write into another table, or drop this one"
        )
    return None


def _write_table(df: DataFrame, table: str, batch_id: int) -> None:
    spark = df.sparkSession
    out = df.withColumn("batch_id", F.lit(batch_id).cast("long"))
    if not spark.catalog.tableExists(table):
        # created and marked in one step: a crash between the two would leave an unmarked
        # table that kspark then refuses
        (
            out.writeTo(table)
            .using("parquet")
            .partitionedBy(F.col("batch_id"))
            .tableProperty(TABLE_MARK, "true")
            .create()
        )
        return
    # checked at app start too; here for a table created or changed since
    problem = table_problem(spark, table, None)
    if problem is not None:
        raise RuntimeError(f"[KSPARK_TABLE_SINK_REFUSED] {problem}")
    # a retried batch replaces its own partition and nothing else; insertInto matches
    # columns by position, so put them in the table's order
    spark.conf.set("spark.sql.sources.partitionOverwriteMode", "dynamic")
    out.select(*spark.table(table).columns).write.insertInto(table, overwrite=True)
