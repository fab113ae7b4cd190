"""Reading file and table topics: the raw rows, before they take the envelope's form.

Every file record gets a position of its own, deterministic across retries (Spark cannot
number streaming rows): ``modification time (ms) * ROWS_PER_MS + row or line``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from kspark.compiler import stages as st
from kspark.compiler.lowering.columns import schema
from kspark.compiler.resume import Resume
from kspark.compiler.subtopologies import INTERNAL_OPTION
from kspark.errors import CompilationError
from kspark.plan.nodes import PATTERN_OPTION, TopicSpec
from kspark_server.paths import normalize_path, normalized_path_column

if TYPE_CHECKING:
    from pyspark.sql.streaming.readwriter import DataStreamReader

__all__ = ["LINE_POSITION", "LINE_WHERE", "is_pattern", "position", "read_raw", "topic_of_file"]

FILE_FORMATS = {"jsonl": "json", "parquet": "parquet", "csv": "csv"}

#: Formats read line by line, each line with its own position (:func:`_read_lines`).
LINE_FORMATS = ("jsonl", "csv")

#: A file record's position is ``modification time (ms) * ROWS_PER_MS + row or line``:
#: positions of files a millisecond apart do not overlap below 2**21 rows per file.
ROWS_PER_MS = 2097152

#: The column of a line's position, from :func:`_read_lines`.
LINE_POSITION = "ks_position"

#: A line's number (from 1) and file, from :func:`_read_lines`, kept until the timestamp
#: check (:func:`kspark.compiler.lowering.timestamps.invalid_timestamps`) so that its
#: error names the line.
LINE_WHERE = ("ks_line_no", "ks_line_file")


def read_raw(stage: st.Read, spark: SparkSession, resume: Resume | None) -> DataFrame:
    """The rows of a table or file topic as its source gives them."""
    t = stage.topic
    if t.format == "table":
        return spark.readStream.table(t.path or t.name)
    if t.format in LINE_FORMATS:
        return _read_lines(stage, spark, resume)
    if t.format in FILE_FORMATS:
        assert stage.read_schema is not None
        reader = spark.readStream.schema(schema(stage.read_schema))
        if stage.max_files_per_trigger is not None:
            reader = reader.option("maxFilesPerTrigger", stage.max_files_per_trigger)
        for k, v in _reader_options(t):
            reader = reader.option(k, v)
        raw = reader.format(FILE_FORMATS[t.format]).load(_load_path(t))
        if is_pattern(t):
            raw = raw.filter(_matches(t, F.col("_metadata.file_path")))
        return _skip_consumed(raw, resume)
    raise CompilationError(f"{stage.processor}: no reader for format {t.format!r}")


def is_pattern(topic: TopicSpec) -> bool:
    """Whether the file topic is every folder under its path whose name matches its name,
    a regular expression (``stream(re.compile(...))`` bound by ``data_dir``)."""
    return topic.option_dict().get(PATTERN_OPTION) == "true"


def topic_of_file(path: Column) -> Column:
    """The topic of a file a pattern source read: the name of the folder it is in."""
    return F.regexp_extract(path, r"([^/]+)/[^/]+$", 1)


def _matches(topic: TopicSpec, path: Column) -> Column:
    # whole names, as Kafka's pattern subscription matches them
    return topic_of_file(path).rlike(f"^(?:{topic.name})$")


def _load_path(topic: TopicSpec) -> str:
    """What the reader lists: the topic's folder, or for a pattern every folder under its
    path (a glob that Spark lists again at each micro-batch, so new folders are read)."""
    assert topic.path is not None
    return f"{topic.path.rstrip('/')}/*" if is_pattern(topic) else topic.path


def _reader_options(topic: TopicSpec) -> list[tuple[str, str]]:
    """The file source's options: the topic's own, without kspark's, and no partition
    discovery for a pattern (folders of other layouts may sit side by side) and for an
    internal topic: its folder is empty when a running query starts, and the
    ``batch_id=N`` folders its batches add would give the source a column its plan does
    not have (Spark stops the query: ``Invalid batch``)."""
    options = [(k, v) for k, v in topic.options if not k.startswith("kspark.")]
    if is_pattern(topic) or topic.option_dict().get(INTERNAL_OPTION) == "true":
        options.append(("recursiveFileLookup", "true"))
    return options


def position(raw: DataFrame, fmt: str) -> Column:
    """A record's position when the source has no offsets: a line's own (from
    :func:`_read_lines`), else, since Spark cannot number streaming rows, the file's
    modification time, then the row index (Parquet)."""
    if LINE_POSITION in raw.columns:
        return F.col(LINE_POSITION)
    if fmt not in FILE_FORMATS:
        return F.lit(None).cast("long")
    base = F.expr(f"unix_millis(_metadata.file_modification_time) * {ROWS_PER_MS}")
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
    ``ROWS_PER_MS`` plus the line's index, deterministic across retries (unlike
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
    options = dict(_reader_options(stage.topic))
    header = options.pop("header", "false").lower() == "true"
    reader = spark.readStream.format("text")
    for k, v in options.items():  # file-source options (pathGlobFilter, ...), as before
        reader = reader.option(k, v)
    options.pop("recursiveFileLookup", None)
    lines = _split_lines(_whole_files(reader, stage, resume))
    if stage.topic.format == "csv" and header:
        lines = lines.filter(F.col("ks_line") > 0)
    return _parse_lines(lines, stage, options)


def _whole_files(reader: DataStreamReader, stage: st.Read, resume: Resume | None) -> DataFrame:
    """One row per file: its text, whether it is valid UTF-8, its path and the base of
    its lines' positions."""
    reader = reader.option("wholetext", "true")
    if stage.max_files_per_trigger is not None:
        reader = reader.option("maxFilesPerTrigger", stage.max_files_per_trigger)
    raw = reader.load(_load_path(stage.topic))
    if is_pattern(stage.topic):
        raw = raw.filter(_matches(stage.topic, F.col("_metadata.file_path")))
    return _skip_consumed(raw, resume).select(
        "value",
        # split decodes the file as UTF-8, invalid bytes becoming U+FFFD: check it whole
        F.is_valid_utf8(F.col("value")).alias("ks_utf8"),
        F.col("_metadata.file_path").alias("ks_file"),
        F.expr(f"unix_millis(_metadata.file_modification_time) * {ROWS_PER_MS}").alias("ks_base"),
    )


def _split_lines(files: DataFrame) -> DataFrame:
    """The files' non-blank lines, numbered from 0 in ``ks_line``, without line ends and
    without a byte-order mark at the start of a file."""
    # the file's metadata is taken on the source itself, not next to the generator
    lines = files.select(
        F.posexplode(F.split(F.col("value"), "\n")).alias("ks_line", "ks_text"),
        "ks_utf8",
        "ks_file",
        "ks_base",
    )
    text = F.regexp_replace(F.col("ks_text"), "\r$", "")
    text = F.when(F.col("ks_line") == 0, F.regexp_replace(text, "^\ufeff", "")).otherwise(text)
    return lines.withColumn("ks_text", text).filter(F.trim(F.col("ks_text")) != "")


def _parse_lines(lines: DataFrame, stage: st.Read, options: dict[str, str]) -> DataFrame:
    """Each line parsed by the topic's format, with its position, number and file, and
    the line itself where it did not parse."""
    assert stage.read_schema is not None
    read_schema = schema(stage.read_schema)
    parse_options = {
        **options,
        "mode": "PERMISSIVE",
        "columnNameOfCorruptRecord": "_corrupt_record",
    }
    if stage.topic.format == "jsonl":
        parsed = F.from_json(F.col("ks_text"), read_schema, parse_options)
    else:
        ddl = ", ".join(f"`{f.name}` {f.dataType.simpleString()}" for f in read_schema.fields)
        parsed = F.from_csv(F.col("ks_text"), ddl, parse_options)
    bad_utf8 = ~F.col("ks_utf8") & (
        (F.instr(F.col("ks_text"), "\ufffd") > 0) | ~F.is_valid_utf8(F.col("ks_text"))
    )
    bad = parsed.isNull() | parsed["_corrupt_record"].isNotNull() | bad_utf8
    line_no = F.col("ks_line") + 1
    return lines.select(
        *[parsed[f.name].alias(f.name) for f in read_schema.fields if f.name != "_corrupt_record"],
        # invalid bytes as U+FFFD: dead letters and messages are valid text
        F.when(bad, F.make_valid_utf8(F.col("ks_text"))).alias("_corrupt_record"),
        F.when(
            bad,
            F.concat(F.lit("line "), line_no.cast("string"), F.lit(" of "), F.col("ks_file")),
        ).alias("_corrupt_where"),
        (F.col("ks_base") + F.col("ks_line")).alias(LINE_POSITION),
        line_no.alias(LINE_WHERE[0]),
        F.col("ks_file").alias(LINE_WHERE[1]),
    )
