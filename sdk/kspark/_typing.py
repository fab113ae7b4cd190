"""The ``Literal`` aliases of every string option of kspark's public API, in one place.

Each alias is the type of the option and, through :func:`typing.get_args`, the list of
values its validation accepts, so the two cannot drift apart.

Examples
--------
>>> from typing import get_args
>>> get_args(TopicLayout)
('envelope', 'value')
"""

from __future__ import annotations

from typing import Literal, TypeAlias

__all__ = [
    "FileSink",
    "HandlerName",
    "KafkaClient",
    "ProgressMode",
    "TimestampPolicy",
    "TopicFormat",
    "TopicLayout",
    "TopicRole",
]

#: Where a topic lives (``Topic.format``): a directory of JSON-lines, Parquet or CSV files,
#: a Spark table, or a Kafka topic.
TopicFormat: TypeAlias = Literal["jsonl", "parquet", "csv", "table", "kafka"]

#: How a topic's rows hold records (``Topic.layout``): ``"envelope"`` rows carry ``key``,
#: ``value`` and ``timestamp`` columns; each ``"value"`` row is the value itself.
TopicLayout: TypeAlias = Literal["envelope", "value"]

#: Which side of the app a topic is on (``Topology.with_topics``).
TopicRole: TypeAlias = Literal["source", "sink", "pattern"]

#: How Kafka topics are read and written (``StreamsConfig.kafka_client``): Spark's JVM
#: connector, kspark's Python source and sink, or ``"auto"`` (the JVM one when the server
#: has it).
KafkaClient: TypeAlias = Literal["auto", "jvm", "python"]

#: How an app writes its file topics (``StreamsConfig.file_sink``): Spark's own file sink
#: (``"spark"``: written by the JVM, exactly once through its ``_spark_metadata`` log),
#: kspark's ``batch_id=N`` folders (``"batch_folders"``, through ``foreachBatch``), or
#: ``"auto"`` (Spark's where the app allows it: docs/configuration.md, ``file_sink``).
FileSink: TypeAlias = Literal["auto", "batch_folders", "spark"]
#: Which Spark API runs the stateful operators (``StreamsConfig.stateful_runner``).
StatefulRunner: TypeAlias = Literal["apply_in_pandas"]

#: The short names of the built-in exception handlers, which ``StreamsConfig``'s
#: ``*_exception_handler`` options (and config files) take in place of a class.
HandlerName: TypeAlias = Literal["log-and-fail", "log-and-continue", "dead-letter-queue"]

#: How a running app shows its progress (``StreamsApp.start(progress=...)``).
ProgressMode: TypeAlias = Literal["auto", "terminal", "notebook", "none"]

#: What happens to a record whose timestamp is invalid, null or negative
#: (``StreamsConfig.timestamp_policy``), after Kafka Streams' timestamp extractors:
#: stop the app (``FailOnInvalidTimestamp``), drop and count it
#: (``LogAndSkipOnInvalidTimestamp``), or give it its partition's time
#: (``UsePartitionTimeOnInvalidTimestamp``).
TimestampPolicy: TypeAlias = Literal["fail", "skip", "use-partition-time"]
