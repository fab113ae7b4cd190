"""Lowering of stages to Spark Connect DataFrame operations.

This is the only part of the compiler that touches pyspark, and it uses the Spark Connect
client API only: no JVM on the client.
"""

from __future__ import annotations

import dataclasses
import json
import weakref
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyspark.errors import AnalysisException
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import (
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from kspark.compiler import stages as st
from kspark.errors import CompilationError, InvalidTopologyError
from kspark.plan import graph
from kspark.plan.types import Dynamic, Primitive, TypeDesc
from kspark_server import envelope as env
from kspark_server.envelope import SideKind
from kspark_server.paths import normalize_path, normalized_path_column
from kspark_server.spec import FlatMapStep, FlatMapValuesStep

if TYPE_CHECKING:
    from kspark.runtime.checkpoints import Resume

__all__ = ["INPUT_METRICS_PREFIX", "SIDE_METRICS", "build_dataframe", "writer_function"]

#: Name of the observed metrics that carry drop counts and gauges to the client.
SIDE_METRICS = "kspark"

#: Prefix of the observed metrics that count each source's records (``records``); the
#: name goes on with the source processor's name.
INPUT_METRICS_PREFIX = "kspark_in:"


_FILE_FORMATS = {"jsonl": "json", "parquet": "parquet", "csv": "csv"}

#: Formats read line by line, each line with its own position (:func:`_read_lines`).
_LINE_FORMATS = ("jsonl", "csv")

#: A file record's position is ``modification time (ms) * _ROWS_PER_MS + row or line``:
#: positions of files a millisecond apart do not overlap below 2**21 rows per file.
_ROWS_PER_MS = 2097152

#: The column of a line's position, from :func:`_read_lines`.
_LINE_POSITION = "ks_position"

#: A record that could not be read: its raw text, and where it is (``line N of <file>``).
_CORRUPT_COLUMNS = ("_corrupt_record", "_corrupt_where")

#: A line's number (from 1) and file, from :func:`_read_lines`, kept until the timestamp
#: check (:func:`_invalid_timestamps`) so that its error names the line.
_LINE_WHERE = ("ks_line_no", "ks_line_file")


def _dtype(desc_json: Any) -> DataType:
    """A Spark type from its JSON form (a type name or a dict)."""
    return (
        StructType.fromJson(
            {
                "type": "struct",
                "fields": [{"name": "x", "type": desc_json, "nullable": True, "metadata": {}}],
            }
        )
        .fields[0]
        .dataType
    )


_simple = _dtype


def _schema(schema_json: str) -> StructType:
    return StructType.fromJson(json.loads(schema_json))


_FLAT_TYPES = {"int": IntegerType, "long": LongType, "binary": BinaryType, "string": StringType}


def flat_schema(ddl: str) -> StructType:
    """The schema of a flat DDL text such as ``"ks_task int, blob binary"``, built on the
    client.

    A DDL string handed to ``mapInPandas`` and the like is parsed through pyspark's
    *active* session, which need not be the app's: after a server restart it is the dead
    one, and the app would fail at start with ``NO_ACTIVE_SESSION``.

    >>> flat_schema("ks_task int, blob binary").simpleString()
    'struct<ks_task:int,blob:binary>'
    """
    fields = []
    for part in ddl.split(","):
        name, type_name = part.split()
        fields.append(StructField(name, _FLAT_TYPES[type_name](), True))
    return StructType(fields)


_SIDE_TYPE: DataType | None = None


def side_type() -> DataType:
    """The type of the side rows' contents; the ``ks_side`` column holds them as JSON."""
    global _SIDE_TYPE
    if _SIDE_TYPE is None:
        _SIDE_TYPE = _dtype(env.SIDE)
    return _SIDE_TYPE


def _tail(offset: Column, seq: Column | None = None) -> list[Column]:
    return [
        (seq if seq is not None else offset).cast("long").alias("ks_seq"),
        F.lit(0).cast("long").alias("ks_sub"),
        F.lit(None).cast("string").alias("ks_side"),
    ]


def _kafka_decode(c: Column, desc: TypeDesc) -> tuple[Column, Column]:
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
        decoded = text.try_cast(_simple(desc.spark))
        return decoded, c.isNotNull() & decoded.isNull()
    schema = _dtype(desc.spark_json())
    assert isinstance(schema, StructType)
    names = [f.name for f in schema.fields]
    with_corrupt = StructType([*schema.fields]).add("_corrupt_record", "string")
    parsed = F.from_json(text, with_corrupt, {"columnNameOfCorruptRecord": "_corrupt_record"})
    bad = bad_text | (c.isNotNull() & (parsed.isNull() | parsed["_corrupt_record"].isNotNull()))
    value = F.when(c.isNull() | bad, F.lit(None)).otherwise(
        F.struct(*[parsed[n].alias(n) for n in names])
    )
    return value.cast(schema), bad


#: Per session: does the server have Spark's JVM Kafka connector? Weak keys: an entry goes
#: with its session, and a new session never inherits an old one's answer (as it could
#: through a reused ``id()``).
_JVM_KAFKA: weakref.WeakKeyDictionary[SparkSession, bool] = weakref.WeakKeyDictionary()


def kafka_format(spark: SparkSession, mode: str) -> str:
    """``kafka`` (the JVM connector) or ``kspark_kafka`` (kspark's Python data source,
    registered on the session here)."""
    if mode == "auto":
        if spark not in _JVM_KAFKA:
            try:
                # analysing a read is what finds (or fails to find) the data source
                probe = spark.read.format("kafka").option("kafka.bootstrap.servers", "localhost:1")
                _ = probe.option("subscribe", "kspark-probe").load().schema
                _JVM_KAFKA[spark] = True
            except Exception as exc:
                if "kafka" not in str(exc).lower() or "find" not in str(exc).lower():
                    raise
                _JVM_KAFKA[spark] = False
        mode = "jvm" if _JVM_KAFKA[spark] else "python"
    if mode == "jvm":
        return "kafka"
    from kspark_server.kafka import KafkaDataSource

    spark.dataSource.register(KafkaDataSource)
    return "kspark_kafka"


def _read(stage: st.Read, spark: SparkSession, resume: Resume | None = None) -> DataFrame:
    t = stage.topic
    key_t, value_t = _dtype(stage.key_type.spark_json()), _dtype(stage.value_type.spark_json())
    if t.format == "kafka":
        fmt = kafka_format(spark, stage.kafka_client)
        reader = spark.readStream.format(fmt).option("subscribe", t.name)
        if fmt == "kafka":
            reader = reader.option("includeHeaders", "true")
        for k, v in t.options:
            reader = reader.option(k, v)
        if resume is not None and t.name in resume.kafka_offsets:
            # a rescaled app's new checkpoint goes on where the old one's last batch ended
            reader = reader.option(
                "startingOffsets", json.dumps({t.name: resume.kafka_offsets[t.name]})
            )
        raw = reader.load()
        key, undecoded_key = _kafka_decode(F.col("key"), stage.key_type)
        value, undecoded_value = _kafka_decode(F.col("value"), stage.value_type)
        out = raw.select(
            key.alias("key"),
            value.alias("value"),
            F.expr("unix_millis(timestamp)").alias("timestamp"),
            # empty, never null: null lists crossing into a Python pass make Spark's Arrow
            # batch size check quadratic in the batch's rows (docs/performance.md, session 12)
            F.coalesce(F.col("headers"), F.array().cast(_dtype(env.HEADERS))).alias("headers"),
            F.col("topic"),
            F.col("partition").cast("int").alias("partition"),
            F.col("offset").cast("long").alias("offset"),
            *_tail(F.col("offset")),
            F.when(
                undecoded_key | undecoded_value,
                F.concat(
                    F.lit("key="),
                    F.coalesce(F.make_valid_utf8(F.col("key").cast("string")), F.lit("null")),
                    F.lit(" value="),
                    F.coalesce(F.make_valid_utf8(F.col("value").cast("string")), F.lit("null")),
                ),
            ).alias("_corrupt_record"),
        )
        # counted after the checks, which turn rows into side rows but never remove one,
        # so that Spark runs the source and the checks as one stage (docs/performance.md)
        return _count_input(_invalid_timestamps(_corrupt_records(out, stage), stage), stage)
    if t.format == "table":
        raw = spark.readStream.table(t.path or t.name)
    elif t.format in _LINE_FORMATS:
        raw = _read_lines(stage, spark, resume)
    elif t.format in _FILE_FORMATS:
        assert stage.read_schema is not None
        reader = spark.readStream.schema(_schema(stage.read_schema))
        if stage.max_files_per_trigger is not None:
            reader = reader.option("maxFilesPerTrigger", stage.max_files_per_trigger)
        for k, v in t.options:
            reader = reader.option(k, v)
        raw = _skip_consumed(reader.format(_FILE_FORMATS[t.format]).load(t.path), resume)
    else:
        raise CompilationError(f"{stage.processor}: no reader for format {t.format!r}")

    cols = set(raw.columns)
    position = F.col(_LINE_POSITION) if _LINE_POSITION in cols else _position(t.format)
    if t.layout == "envelope":
        offset = F.coalesce(F.col("offset"), position) if "offset" in cols else position
        seq = F.coalesce(F.col("ks_seq"), offset) if "ks_seq" in cols else offset
        headers = (
            F.coalesce(F.col("headers"), F.array().cast(_dtype(env.HEADERS)))
            if "headers" in cols
            else F.array().cast(_dtype(env.HEADERS))
        )
        dtypes = dict(raw.dtypes)
        key, bad_key = _typed(F.col("key"), key_t, dtypes["key"])
        value, bad_value = _typed(F.col("value"), value_t, dtypes["value"])
        stamp, bad_stamp = (
            _typed(F.col("timestamp"), LongType(), dtypes["timestamp"])
            if "timestamp" in cols
            else (F.lit(None).cast("long"), None)
        )
        line_where = [F.col(c) for c in _LINE_WHERE if c in cols]
        # a row of a topic without a timestamp column (a Spark table) gets the processing
        # time; a null or missing one in a row that has the column is an invalid
        # timestamp, for StreamsConfig.timestamp_policy (_invalid_timestamps)
        out = raw.select(
            key.alias("key"),
            value.alias("value"),
            (stamp if "timestamp" in cols else F.expr("unix_millis(current_timestamp())")).alias(
                "timestamp"
            ),
            headers.alias("headers"),
            F.lit(t.name).alias("topic"),
            (F.coalesce(F.col("partition"), F.lit(0)) if "partition" in cols else F.lit(0))
            .cast("int")
            .alias("partition"),
            offset.cast("long").alias("offset"),
            *_tail(offset, seq),
            *_uncast(raw, _either(bad_key, bad_value, bad_stamp), ["key", "value", "timestamp"]),
            *line_where,
        )
    else:
        value_fields = [f["name"] for f in stage.value_type.spark_json()["fields"]]
        dtypes = dict(raw.dtypes)
        key, bad_key = (
            _typed(F.col(t.key_field), key_t, dtypes.get(t.key_field, ""))
            if t.key_field
            else (F.lit(None).cast(key_t), None)
        )
        if t.timestamp_field:
            ts, bad_ts = _typed(
                F.col(t.timestamp_field), LongType(), dtypes.get(t.timestamp_field, "")
            )
        else:
            ts, bad_ts = F.expr("unix_millis(current_timestamp())"), None
        assert isinstance(value_t, StructType)  # layout="value" needs a record type
        value, bad_value = _typed_fields(
            {c: F.col(c) for c in value_fields}, value_t, {c: dtypes.get(c, "") for c in cols}
        )
        offset = position
        out = raw.select(
            key.alias("key"),
            value.alias("value"),
            ts.alias("timestamp"),
            F.array().cast(_dtype(env.HEADERS)).alias("headers"),
            F.lit(t.name).alias("topic"),
            F.lit(0).cast("int").alias("partition"),
            offset.alias("offset"),
            *_tail(offset),
            *_uncast(raw, _either(bad_key, bad_ts, bad_value), value_fields),
            *[F.col(c) for c in _LINE_WHERE if c in cols],
        )
    if "_corrupt_record" in out.columns:
        out = _corrupt_records(out, stage)
    # counted after the checks (same count: they turn rows into side rows, never remove
    # one), so that Spark runs the source and the checks as one stage: an observation
    # between them split it in two (docs/performance.md)
    return _count_input(_invalid_timestamps(out, stage), stage)


def _either(*bads: Column | None) -> Column | None:
    """Whether any of ``bads`` is true; None when none can be (all None)."""
    out: Column | None = None
    for bad in bads:
        if bad is not None:
            out = bad if out is None else out | bad
    return out


def _typed(c: Column, to: DataType, source: str) -> tuple[Column, Column | None]:
    """``c`` as type ``to``, and whether a non-null ``c`` did not convert (None: it
    cannot fail). A Spark timestamp becomes epoch milliseconds (a cast to long would give
    seconds); anything else is a ``try_cast``, so that a value of the wrong type goes to
    the deserialization handler instead of failing the query through an ANSI cast error."""
    if isinstance(to, LongType) and source.startswith("timestamp"):
        return F.unix_millis(c), None
    if source and _dtype_name(to) == source:
        return c, None  # already of its type: nothing to convert, nothing to fail
    typed = c.try_cast(to)
    return typed, c.isNotNull() & typed.isNull()


def _typed_fields(
    columns: dict[str, Column], to: StructType, sources: dict[str, str]
) -> tuple[Column, Column | None]:
    """A struct of ``columns`` as ``to``, field by field (a ``try_cast`` of a whole struct
    nulls a field that does not convert and says nothing), and whether any non-null
    field did not convert (None: none can fail)."""
    fields: list[Column] = []
    bad: Column | None = None
    for f in to.fields:
        value, failed = _typed(columns[f.name], f.dataType, sources.get(f.name, ""))
        fields.append(value.alias(f.name))
        bad = _either(bad, failed)
    return F.struct(*fields), bad


def _dtype_name(t: DataType) -> str:
    return t.simpleString()


def _uncast(raw: DataFrame, bad: Column | None, shown: list[str]) -> list[Column]:
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


def _record_position() -> Column:
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


def _json_text(c: Column, desc: TypeDesc) -> Column:
    """``c`` (of type ``desc``) as JSON text (null stays null), as dead letters hold keys
    and values. A dynamic value is JSON text already and stays as it is, unless it is a
    JSON string that Spark's JSON reader handed over without its quotes."""
    text = F.to_json(F.array(c))  # to_json takes no primitive: write ``[x]``, strip ``[]``
    quoted = F.when(c.isNotNull(), text.substr(F.lit(2), F.length(text) - 2))
    if isinstance(desc, Dynamic):
        return F.when(F.try_parse_json(c).isNotNull(), c).otherwise(quoted)
    return quoted


def _invalid_timestamps(df: DataFrame, stage: st.Read) -> DataFrame:
    """Records whose timestamp is null or negative, by ``StreamsConfig.timestamp_policy``:
    fail naming the record, drop and count them, or leave the timestamp null for the next
    stateful operator to fill in with its partition's time (``kspark_server.timestamps``).
    Rows that are already side rows (a record that did not parse) are left alone."""
    if _LINE_WHERE[0] in df.columns:
        where = F.concat(
            F.lit(", line "),
            F.col(_LINE_WHERE[0]).cast("string"),
            F.lit(" of "),
            F.col(_LINE_WHERE[1]),
        )
        df = df.withColumn("ks_ts_where", where).drop(*_LINE_WHERE)
    else:
        df = df.withColumn("ks_ts_where", F.lit(""))
    return _invalid_timestamp_policy(df, stage).drop("ks_ts_where")


def _invalid_timestamp_policy(df: DataFrame, stage: st.Read) -> DataFrame:
    """:func:`_invalid_timestamps` once the record's file and line, if any, are in
    ``ks_ts_where``."""
    ts = F.col("timestamp")
    invalid = F.col("ks_side").isNull() & (ts.isNull() | (ts < 0))
    policy = stage.timestamp_policy
    if policy == "use-partition-time":
        return df.withColumn("timestamp", F.when(invalid, F.lit(None)).otherwise(ts))
    if policy == "fail":
        msg = F.concat(
            F.lit(
                f"[KSPARK_INVALID_TIMESTAMP] {stage.processor}: a record of topic "
                f"{stage.topic.name!r} has an invalid timestamp ("
            ),
            F.coalesce(ts.cast("string"), F.lit("null")),
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
    chunk = F.concat(
        F.lit(stage.processor + ":ts:"),
        F.coalesce(F.col("partition").cast("string"), F.lit("")),
        F.lit(":"),
        _record_position(),
    )
    dead_letter = {
        "dlq_key": _json_text(F.col("key"), stage.key_type),
        "dlq_value": _json_text(F.col("value"), stage.value_type),
        "exception_class": F.lit("kspark_server.handling.DroppedRecord"),
        "exception_message": F.concat(
            F.lit(
                f"{stage.processor} dropped the record: its timestamp is null or negative "
                "(StreamsConfig.timestamp_policy='skip')"
            ),
            F.col("ks_ts_where"),
        ),
    }
    return _drop_rows(
        df,
        stage,
        invalid,
        reason="invalid-timestamp",
        chunk=chunk,
        dead_letter=dead_letter if stage.dead_letter_dropped else None,
    )


def _drop_rows(
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
        side = _side_struct(kind=F.lit(SideKind.DROPPED.value), **common)
    else:
        side = _side_struct(
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


def _count_input(df: DataFrame, stage: st.Read) -> DataFrame:
    """Count the records read, for the app's records-in figures.

    Spark's ``numInputRows`` sums a source over every scan of it in the plan, and a
    stream that feeds two sinks (or branches that are merged) is scanned once per path to
    the final union, so it would count such records twice or more. An observation on the
    source's DataFrame counts each record once: every scan of the shared subtree counts
    the same records, and Spark reports one value per observation name.
    """
    return df.observe(INPUT_METRICS_PREFIX + stage.processor, F.count(F.lit(1)).alias("records"))


def _position(fmt: str) -> Column:
    """A record's position when the source has no offsets: Spark cannot number streaming
    rows, so use the file's modification time, then the row index (Parquet; JSON-lines and
    CSV files number their lines in :func:`_read_lines`)."""
    if fmt not in _FILE_FORMATS:
        return F.lit(None).cast("long")
    base = F.expr(f"unix_millis(_metadata.file_modification_time) * {_ROWS_PER_MS}")
    if fmt == "parquet":
        return base + F.col("_metadata.row_index")
    return base


def _skip_consumed(raw: DataFrame, resume: Resume | None) -> DataFrame:
    """Without the files an earlier checkpoint generation consumed (a rescale's new
    checkpoint lists the folder afresh)."""
    if resume is None or not resume.skip_files:
        return raw
    path = normalized_path_column(F.col("_metadata.file_path"))
    return raw.filter(~path.isin(sorted({normalize_path(f) for f in resume.skip_files})))


def _read_lines(stage: st.Read, spark: SparkSession, resume: Resume | None) -> DataFrame:
    """A JSON-lines or CSV topic, one row per line, each with its own position.

    Spark's JSON and CSV sources cannot number the lines of a file, so records of one
    file shared a position: two identical bad lines became one dead letter. Here each file
    is read whole (``wholetext``, one row per file) and split into its lines, numbered by
    ``posexplode``: the position is the file's modification time in ms times
    ``_ROWS_PER_MS`` plus the line's index, deterministic across retries (unlike
    ``monotonically_increasing_id``). Each line is then parsed by ``from_json`` or
    ``from_csv`` with the reader's own rules (``PERMISSIVE``, the line in
    ``_corrupt_record``), so a line that does not fit the declared types, whatever the
    format, goes to the deserialization handler: also a CSV cell that Spark's CSV source
    would have read as null, a JSON line that is not an object (``42``, ``[]``, ``null``,
    which that source read as no record or as several), and a line of invalid UTF-8. A
    UTF-8 byte-order mark at the start of a file is dropped, as are blank lines and, with
    ``header``, a CSV file's first line. The cost: a file is one Spark row and one task, so
    a file must stay under 2 GB, and one file is not split between tasks.
    """
    t = stage.topic
    assert stage.read_schema is not None
    schema = _schema(stage.read_schema)
    options = dict(t.options)
    header = options.pop("header", "false").lower() == "true"
    reader = spark.readStream.format("text")
    for k, v in options.items():  # file-source options (pathGlobFilter, ...), as before
        reader = reader.option(k, v)
    reader = reader.option("wholetext", "true")
    if stage.max_files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", stage.max_files_per_trigger)
    files = _skip_consumed(reader.load(t.path), resume).select(
        "value",
        # split decodes the file as UTF-8, invalid bytes becoming U+FFFD: check it whole
        F.is_valid_utf8(F.col("value")).alias("ks_utf8"),
        F.col("_metadata.file_path").alias("ks_file"),
        F.expr(f"unix_millis(_metadata.file_modification_time) * {_ROWS_PER_MS}").alias("ks_base"),
    )
    # the file's metadata is taken above, on the source itself, not next to the generator
    lines = files.select(
        F.posexplode(F.split(F.col("value"), "\n")).alias("ks_line", "ks_text"),
        "ks_utf8",
        "ks_file",
        "ks_base",
    )
    text = F.regexp_replace(F.col("ks_text"), "\r$", "")
    text = F.when(F.col("ks_line") == 0, F.regexp_replace(text, "^\ufeff", "")).otherwise(text)
    lines = lines.withColumn("ks_text", text).filter(F.trim(F.col("ks_text")) != "")
    if t.format == "csv" and header:
        lines = lines.filter(F.col("ks_line") > 0)
    parse_options = {
        **options,
        "mode": "PERMISSIVE",
        "columnNameOfCorruptRecord": "_corrupt_record",
    }
    if t.format == "jsonl":
        parsed = F.from_json(F.col("ks_text"), schema, parse_options)
    else:
        ddl = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in schema.fields)
        parsed = F.from_csv(F.col("ks_text"), ddl, parse_options)
    bad_utf8 = ~F.col("ks_utf8") & (
        (F.instr(F.col("ks_text"), "\ufffd") > 0) | ~F.is_valid_utf8(F.col("ks_text"))
    )
    bad = parsed.isNull() | parsed["_corrupt_record"].isNotNull() | bad_utf8
    line_no = F.col("ks_line") + 1
    return lines.select(
        *[parsed[f.name].alias(f.name) for f in schema.fields if f.name != "_corrupt_record"],
        # invalid bytes as U+FFFD: dead letters and messages are valid text
        F.when(bad, F.make_valid_utf8(F.col("ks_text"))).alias("_corrupt_record"),
        F.when(
            bad,
            F.concat(F.lit("line "), line_no.cast("string"), F.lit(" of "), F.col("ks_file")),
        ).alias("_corrupt_where"),
        (F.col("ks_base") + F.col("ks_line")).alias(_LINE_POSITION),
        line_no.alias(_LINE_WHERE[0]),
        F.col("ks_file").alias(_LINE_WHERE[1]),
    )


def _side_struct(**cols: Column) -> Column:
    """A side row (as JSON) with the given fields and nulls elsewhere."""
    fields = []
    for f in env.SIDE["fields"]:
        c = cols.get(f["name"], F.lit(None))
        fields.append(c.cast(_dtype(f["type"])).alias(f["name"]))
    return F.to_json(F.struct(*fields))


def _corrupt_records(df: DataFrame, stage: st.Read) -> DataFrame:
    """Rows Spark could not parse: fail (the default), drop, or send to the DLQ."""
    mode = stage.deserialization
    bad = F.col("_corrupt_record").isNotNull()
    # a file's line says where it is; Kafka's offset alone does
    where = (
        F.concat(F.lit(", "), F.col("_corrupt_where"))
        if "_corrupt_where" in df.columns
        else F.lit("")
    )
    df = df.withColumn("ks_where", where).drop("_corrupt_where")
    if mode == "fail":
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
        ).drop("_corrupt_record", "ks_where")
    chunk = F.concat(
        F.lit(stage.processor + ":"),
        _record_position(),
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
    return _drop_rows(
        df,
        stage,
        bad,
        reason="deserialization-error",
        chunk=chunk,
        dead_letter=None if mode == "continue" else dead_letter,
    ).drop("_corrupt_record", "ks_where")


def _task(column: str, n: int) -> Column:
    """The task key of a record: task ``pmod(hash, n)``'s group key, which Spark places in
    shuffle partition ``t``, one task per partition (:mod:`kspark_server.placement`)."""
    from kspark_server.placement import task_keys

    keys = ",".join(str(k) for k in task_keys(int(n)))
    return F.expr(f"element_at(array({keys}), pmod(hash(`{column}`), {int(n)}) + 1)").cast("int")


def _hash(column: str) -> Column:
    """The Spark hash a task is derived from; state entries keep it, so that a rescale can
    re-split them as ``pmod(hash, M)``."""
    return F.expr(f"hash(`{column}`)")


def _stateful(
    stage: st.Stateful, df_of: Any, spark: SparkSession, resume: Resume | None
) -> DataFrame:
    from kspark_server.tasks import make_processor
    from kspark_server.transport import (
        OUTPUT_SCHEMA_DDL,
        PACKED_SCHEMA_DDL,
        operator_schema,
        pack_by_task,
        unpack_rows,
    )

    spec = stage.spec
    processor = make_processor(spec)
    stream = df_of(stage.stream)
    if stage.table is not None:
        table = df_of(stage.table)
        tvalue_t = _dtype(stage.table.value_type.spark_json())
        svalue_t = _dtype(stage.stream.value_type.spark_json())
        names = [name for name, _ in env.ENVELOPE]
        left = stream.select(
            *names, F.lit(None).cast(tvalue_t).alias("ks_tvalue"), F.lit(0).alias("ks_jside")
        )
        right = table.select(
            *[
                F.lit(None).cast(svalue_t).alias("value") if c == "value" else F.col(c)
                for c in names
            ],
            F.col("value").alias("ks_tvalue"),
            F.lit(1).alias("ks_jside"),
        )
        stream = left.unionByName(right)
    # values that the operator reads travel as JSON text, which msgspec parses fast;
    # everything else (headers, a deduplicated value) crosses as Arrow columns, by
    # reference (docs/performance.md)
    packed = spec.packed
    if packed.value:
        stream = stream.withColumn("value", F.to_json("value"))
    if packed.tvalue:
        stream = stream.withColumn("ks_tvalue", F.to_json("ks_tvalue"))
    # records cross into the operator packed, one row per task and Arrow batch
    # (kspark_server.transport: Spark's runner would otherwise handle them row by row)
    tasked = stream.withColumn("ks_hash", _hash(stage.task_column)).withColumn(
        "ks_task", _task(stage.task_column, stage.num_partitions)
    )
    # columns that are the same for every record stay out of both Python passes
    # (docs/performance.md); the operator puts them back while it works
    constants = _stateful_constants(stage)
    if constants:
        # the packed columns: a source's envelope (and for a join the table's value and
        # side), then the two above; positions are in this order (no schema round trip)
        order = [name for name, _ in env.ENVELOPE]
        if stage.table is not None:
            order += ["ks_tvalue", "ks_jside"]
        processor.constants_json = _describe_constants(constants, [*order, "ks_hash", "ks_task"])
        tasked = tasked.drop(*constants)
    grouped = tasked.mapInArrow(pack_by_task, flat_schema(PACKED_SCHEMA_DDL)).groupBy("ks_task")
    initial = None
    if resume is not None and spec.store in resume.initial_state:
        warm = spark.read.parquet(resume.initial_state[spec.store])
        # each row one chunk of a task's base (a rescale of state format 5 wrote one
        # whole base per task: chunk 0)
        chunk = F.col("chunk") if "chunk" in warm.columns else F.lit(0).alias("chunk")
        initial = warm.select("ks_task", chunk, "blob").groupBy("ks_task")
    out_schema = _schema(spec.output_schema)
    # records leave the operator packed too, one row per task, and are unpacked by a
    # vectorised step (kspark_server.transport)
    result: DataFrame = grouped.transformWithStateInPandas(
        statefulProcessor=processor,
        outputStructType=flat_schema(OUTPUT_SCHEMA_DDL),
        outputMode="Append",
        timeMode="None",
        initialState=initial,
    )
    unpacked = operator_schema(spec.output_schema, packed.out)
    result = result.mapInArrow(
        unpack_rows, StructType([f for f in unpacked.fields if f.name not in constants])
    )
    result = _add_constants(result, unpacked, constants)
    if packed.out:
        value_type: Any = out_schema["value"].dataType  # a struct, list or map (json_packable)
        result = result.withColumn("value", F.from_json("value", value_type))
    return result


#: The envelope's columns while a ``filter_expr`` condition runs beside the value's fields.
_SQL_ENVELOPE = "__kspark_envelope"


def sql_filter(df: DataFrame, stage: st.SqlFilter) -> DataFrame:
    """``df``'s records for which ``stage.condition`` is true, and every side row.

    The condition runs over a projection that has the value's fields as columns (the
    stage's ``scope``), with the envelope kept whole in one struct column beside them and
    restored after the filter. Spark analyses the condition here, so one that does not
    parse, names no column or is no boolean fails the app's start with the processor's
    name, not its first micro-batch.
    """
    value = F.col("value")
    scope = [
        (value.getField(src[len("value.") :]) if src.startswith("value.") else F.col(src)).alias(
            name
        )
        for name, src in stage.scope
    ]
    projected = df.select(F.struct(*[F.col(c) for c in df.columns]).alias(_SQL_ENVELOPE), *scope)
    try:
        condition = F.expr(stage.condition)
        # side rows (dead letters, counts) are no records: they pass, whatever the values
        keep = F.col(f"{_SQL_ENVELOPE}.ks_side").isNotNull() | F.coalesce(condition, F.lit(False))
        out = projected.filter(keep).select(f"{_SQL_ENVELOPE}.*")
        out.schema  # noqa: B018  (analyses the condition now, on the server)
    except AnalysisException as exc:  # ParseException is one too
        names = ", ".join(name for name, _ in stage.scope)
        raise InvalidTopologyError(
            f"{stage.processor}: filter_expr({stage.condition!r}) is not a Spark SQL boolean "
            f"condition over the columns {names}: {_first_line(exc)}",
            processor=stage.processor,
        ) from exc
    return out


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__


def _constants(stage: st.Read) -> dict[str, Any]:
    """The envelope columns that :func:`_read` makes the same for every record of
    ``stage``'s topic, with their value: the topic's name for any topic but Kafka, and a
    file topic's partition (0) and headers (none) where its rows have no such column."""
    t = stage.topic
    if t.format == "kafka":
        return {}
    out: dict[str, Any] = {"topic": t.name, "ks_sub": 0}
    if t.layout == "envelope":
        if stage.read_schema is None:  # a table: its columns are not known here
            return out
        stored = {f["name"] for f in json.loads(stage.read_schema)["fields"]}
    else:
        stored = set()
    if "ks_seq" not in stored:
        out["ks_seq"] = {"same_as": "offset"}
    if "partition" not in stored:
        out["partition"] = 0
    if "headers" not in stored:
        out["headers"] = []
    return out


def _constant_column(name: str, value: Any) -> Column:
    """Envelope column ``name`` as the literal ``value``, typed as in :func:`_read`."""
    if name == "headers":
        assert value == []
        return F.array().cast(_dtype(env.HEADERS))
    if isinstance(value, dict):
        return F.col(value["same_as"])
    return F.lit(value).cast(_dtype(dict(env.ENVELOPE)[name]))


def _add_constants(df: DataFrame, schema: StructType, constants: dict[str, Any]) -> DataFrame:
    """``df`` with the ``constants`` columns (:func:`_constants`) added back after a Python
    pass that left them out, in ``schema``'s column order."""
    if not constants:
        return df
    return df.select(
        *[
            _constant_column(f.name, constants[f.name]).alias(f.name)
            if f.name in constants
            else F.col(f.name)
            for f in schema.fields
        ]
    )


def _describe_constants(constants: dict[str, Any], columns: list[str]) -> str:
    """``constants`` (name to value) as :func:`kspark_server.chain.constant_widener` takes
    them, at their positions in ``columns``."""
    return json.dumps(
        [
            [name, columns.index(name), dict(env.ENVELOPE)[name], constants[name]]
            for name in sorted(constants, key=columns.index)
        ]
    )


def _stateful_constants(stage: st.Stateful) -> dict[str, Any]:
    """The constant envelope columns (:func:`_constants`) that a stateful operator's input
    and output share: for deduplication and stream-table joins, whose output records are
    their stream's records, straight after a source (both sources for a join: the
    constants they agree on). None for the other operators, whose output records they
    make themselves."""
    if stage.spec.kind not in ("dedup", "join") or not isinstance(stage.stream, st.Read):
        return {}
    found = _constants(stage.stream)
    if stage.table is not None:
        if not isinstance(stage.table, st.Read):
            return {}
        other = _constants(stage.table)
        found = {k: v for k, v in found.items() if k in other and other[k] == v}
    return found


def _chain(df: DataFrame, stage: st.Chain, constants: dict[str, Any]) -> DataFrame:
    """The chain's ``mapInArrow`` pass over ``df``; the ``constants`` columns (name to
    value, :func:`_constants`) stay out of the pass and are added back after it
    (:func:`kspark_server.chain.with_constants`, docs/performance.md)."""
    from kspark_server.chain import make_chain, with_constants

    schema = _schema(stage.spec.output_schema)
    run = make_chain(stage.spec)
    if any(isinstance(s, FlatMapStep | FlatMapValuesStep) for s in stage.spec.steps):
        # a fan-out numbers a record's outputs in ks_sub
        constants = {k: v for k, v in constants.items() if k != "ks_sub"}
    if not constants:
        return df.mapInArrow(run, schema)
    described = _describe_constants(constants, [name for name, _ in env.ENVELOPE])
    passed = StructType([f for f in schema.fields if f.name not in constants])
    out = df.drop(*constants).mapInArrow(with_constants(run, described), passed)
    return _add_constants(out, schema, constants)


def build_dataframe(
    output: st.Output, spark: SparkSession, resume: Resume | None = None
) -> DataFrame:
    """The app's streaming DataFrame: the union of every sink's records and side rows,
    tagged by ``ks_sink``, with the side rows' metrics observed."""
    from kspark_server.chain import make_id_stage

    def lower(stage: st.Stage, df_of: Callable[[st.Stage], DataFrame]) -> DataFrame:
        df: DataFrame
        if isinstance(stage, st.Read):
            df = _read(stage, spark, resume)
        elif isinstance(stage, st.Chain):
            constants = _constants(stage.input) if isinstance(stage.input, st.Read) else {}
            df = _chain(df_of(stage.input), stage, constants)
        elif isinstance(stage, st.SqlFilter):
            df = sql_filter(df_of(stage.input), stage)
        elif isinstance(stage, st.IdStage):
            df = df_of(stage.input).mapInArrow(
                make_id_stage(stage.spec), _schema(stage.spec.output_schema)
            )
        elif isinstance(stage, st.Union):
            parts = [df_of(p) for p in stage.parts]
            df = parts[0]
            for p in parts[1:]:
                df = df.unionByName(p)
        elif isinstance(stage, st.Shuffle):
            df = df_of(stage.input).repartition(stage.num_partitions, "key")
        elif isinstance(stage, st.Stateful):
            df = _stateful(stage, df_of, spark, resume)
        else:
            raise CompilationError(f"no lowering for stage {type(stage).__name__}")
        return df

    df_of = graph.map_nodes(output.roots(), lambda s: s.inputs, lower)

    final: DataFrame | None = None
    for part in output.sinks:
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
    side = F.from_json(F.col("ks_side"), side_type())  # type: ignore[arg-type]
    return final.observe(
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
        F.count(F.when(F.col("ks_side").isNull(), 1)).alias("records"),
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
    if spark is not None and any(t.format == "kafka" for t in topics):
        spec = dataclasses.replace(spec, kafka_format=kafka_format(spark, spec.kafka_client))
    return make_batch_writer(spec)


def _check_tables(output: st.Output, spark: SparkSession) -> None:
    """Refuse, before the query starts, a table sink that kspark must not write into: one
    it did not create, or whose columns differ from the sink's."""
    from kspark_server.sinks import table_problem, table_sink_schema

    checks: list[tuple[str, StructType | None]] = [
        (
            p.topic.path or p.topic.name,
            table_sink_schema(
                _dtype(p.stage.key_type.spark_json()), _dtype(p.stage.value_type.spark_json())
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
