"""Which writer an app's file topics get: Spark's own file sink, or kspark's batch folders.

kspark has two layouts for a file topic (JSON lines, Parquet, CSV):

- **Spark's file sink** (``StreamsConfig(file_sink="spark")``): the query writes the
  topic with ``writeStream.format(...)``, in the JVM, and Spark's ``_spark_metadata`` log
  in the topic's folder lists the files of every committed micro-batch. Spark's readers
  (batch and streaming, kspark's sources included) read only what the log lists, so the
  topic is exactly once for them. No Python process runs for the sink.
- **Batch folders** (``file_sink="batch_folders"``): kspark's ``foreachBatch`` writer
  (:mod:`kspark_server.sinks`) writes micro-batch ``N`` into ``<topic>/batch_id=N``,
  replacing what a failed attempt of that batch left. It can write several topics, a
  dead-letter queue and tables from one query, keeps the run's lease
  (:mod:`kspark_server.lease`), and numbers batches on across a rescale; it costs a Python
  process per query start (0.7 to 2 s; docs/design/file-sinks.md) and a
  call back into the server per batch.

``"auto"``, the default, gives Spark's sink to an app that allows it (see
:func:`spark_sink_blocker`) and has no state, and batch folders to the rest. A topic keeps
the layout it was first written in: Spark's readers ignore batch folders next to a
``_spark_metadata`` log, and a log next to batch folders would hide them, so kspark
refuses to mix them.

Why not for apps with state: Spark's log numbers its entries by the query's batch, and a
rescale (:mod:`kspark.runtime.rescale`) starts a new query checkpoint whose batches count
from 0 again, which the log would take for batches already written; and the lease that
lets a rescale see a running app from any session is kept by the ``foreachBatch``
writer. An app with state can still choose ``file_sink="spark"``; it then cannot be
rescaled.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, Literal

from kspark.errors import ConfigError
from kspark.runtime.checkpoints import Generation, _exists
from kspark_server.sinks import FILE_FORMATS, sink_rows
from kspark_server.spec import TopicRef

if TYPE_CHECKING:
    from kspark.compiler import stages as st
    from kspark.config import StreamsConfig

__all__ = [
    "SPARK_LOG",
    "choose",
    "file_topics",
    "logged_batches",
    "spark_sink_blocker",
    "spark_writer",
]

#: The folder of Spark's file sink log inside a topic's folder.
SPARK_LOG = "_spark_metadata"

Mode = Literal["batch_folders", "spark"]


def file_topics(output: st.Output) -> list[TopicRef]:
    """The app's file topics (sinks and dead-letter queue), each once."""
    spec = output.writer_spec
    topics = [s.topic for s in spec.sinks] + ([spec.dlq] if spec.dlq is not None else [])
    seen: dict[tuple[str, ...], TopicRef] = {}
    for t in topics:
        if t.format in FILE_FORMATS and t.path:
            seen.setdefault(t.destination, t)
    return list(seen.values())


def spark_sink_blocker(output: st.Output, generation: Generation) -> str | None:
    """Why this app cannot write through Spark's file sink, or None if it can.

    Spark's sink is one output per query; kspark's ``foreachBatch`` writer is needed for
    more than one topic, a dead-letter queue, Kafka and tables, and for a rescaled app.
    """
    spec = output.writer_spec
    if output.dynamic:
        return "it has a sink whose records name their topics, and Spark's sink writes one topic"
    if spec.dlq is not None:
        return "it has a dead-letter queue, a second output of the query"
    destinations = {s.topic.destination for s in spec.sinks}
    if len(destinations) != 1:
        return f"it writes {len(destinations)} topics, and Spark's sink writes one"
    topic = spec.sinks[0].topic
    if topic.format not in FILE_FORMATS:
        return f"its topic {topic.name} is a {topic.format} topic, not files"
    if generation.batch_offset:
        return f"it was rescaled, and its batches go on numbering from {generation.batch_offset}"
    return None


def _has(spark: Any, topic: TopicRef, name: str) -> bool:
    """Whether file topic ``topic``'s folder holds ``name`` (a glob)."""
    assert topic.path is not None
    return _exists(spark, f"{topic.path.rstrip('/')}/{name}")


def choose(
    spark: Any,
    output: st.Output,
    config: StreamsConfig,
    generation: Generation,
    *,
    stateful: bool,
) -> Mode:
    """The writer of this start of the app (see the module).

    Raises
    ------
    ConfigError
        If ``config.file_sink`` asks for a writer that the app or its topics' layout
        does not allow; the message says why and what to change.
    """
    app = config.application_id
    wanted = config.file_sink
    blocker = spark_sink_blocker(output, generation)
    if wanted == "spark" and blocker is not None:
        raise ConfigError(
            f"app {app}: file_sink='spark' cannot be used: {blocker}; use "
            "file_sink='batch_folders' (or 'auto')",
            option="file_sink",
        )
    topics = file_topics(output)
    if wanted == "spark" or (wanted == "auto" and blocker is None and not stateful):
        topic = topics[0]
        if not _has(spark, topic, "batch_id=*"):
            return "spark"
        if wanted == "spark":
            raise ConfigError(
                f"app {app}: topic {topic.name} ({topic.path}) holds batch_id=N folders "
                "that kspark's batch-folder writer wrote; Spark's file sink would hide "
                "them from every reader. Write into a new folder, or use "
                "file_sink='batch_folders'",
                option="file_sink",
            )
    for topic in topics:
        if _has(spark, topic, SPARK_LOG):
            raise ConfigError(
                f"app {app}: topic {topic.name} ({topic.path}) was written by Spark's file "
                f"sink (it has a {SPARK_LOG} log), and Spark's readers would not see the "
                "batch_id=N folders that this app would add"
                + (f" (it cannot use Spark's sink: {blocker})" if blocker else "")
                + ". Write into a new folder"
                + ("" if blocker else ", or use file_sink='spark'"),
                option="file_sink",
            )
    return "batch_folders"


def spark_writer(df: Any, output: st.Output) -> Any:
    """The app's ``DataStreamWriter`` into its one file topic through Spark's file sink:
    the records of every sink into that topic (merged branches), side rows left out
    (their counts are observed upstream, in :func:`kspark.compiler.lowering.build_dataframe`)."""
    spec = output.writer_spec
    topic = spec.sinks[0].topic
    assert topic.path is not None
    rows = functools.reduce(lambda a, b: a.unionByName(b), [sink_rows(df, s) for s in spec.sinks])
    # records leave in the order each partition processed them: Spark cannot sort a
    # stream (the batch-folder writer sorts by source position all but deduplication's
    # output); a topic that must be read in source order (the test driver's) keeps the
    # sort columns for its reader
    if not topic.ordered:
        rows = rows.drop("ks_seq", "ks_sub")
    writer = rows.writeStream.format(FILE_FORMATS[topic.format]).option("path", topic.path)
    if topic.format == "csv":
        writer = writer.option("header", "true")
    return writer


def logged_batches(folder: str) -> list[list[str]] | None:
    """The files of each micro-batch that Spark's file sink committed into the local
    ``folder``, in batch order, from its ``_spark_metadata`` log; None if the folder has
    no log. Only uncompacted logs (each batch its own log file) keep the batches apart:
    the test driver, which reads this way, sets a compaction interval that its runs never
    reach.

    >>> import tempfile
    >>> logged_batches(tempfile.mkdtemp()) is None
    True
    """
    import json
    import os
    from urllib.parse import unquote, urlparse

    log = os.path.join(folder, SPARK_LOG)
    if not os.path.isdir(log):
        return None
    names = [n for n in os.listdir(log) if not n.startswith(".")]
    if any(not n.isdigit() for n in names):
        raise ValueError(f"{log} holds compacted entries ({sorted(names)[-1]}): batches merged")
    batches: list[list[str]] = []
    for name in sorted(names, key=int):
        with open(os.path.join(log, name)) as f:
            lines = f.read().splitlines()[1:]  # the first line is the log's version
        entries = [json.loads(line) for line in lines if line.strip()]
        batches.append(
            [unquote(urlparse(e["path"]).path) for e in entries if e.get("action") == "add"]
        )
    return batches
