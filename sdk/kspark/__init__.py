"""kspark: the Kafka Streams DSL on Apache Spark Structured Streaming over Spark Connect.

Examples
--------
>>> from kspark import StreamsBuilder, Topic
>>> b = StreamsBuilder()
>>> b.stream(Topic.jsonl("in", "/tmp/in"), key_type=str, value_type=int).to(
...     Topic.jsonl("out", "/tmp/out")
... )
>>> b.build().sinks[0].name
'KSTREAM-SINK-0000000001'
"""

from __future__ import annotations

import kspark._deps  # noqa: F401  (first: names the install command if pyspark is missing)
from kspark import dsl
from kspark.config import StreamsConfig
from kspark.dsl import *  # noqa: F403  (the DSL: its __all__)
from kspark.plan.nodes import Topic
from kspark.plan.topology import Topology
from kspark.runtime.app import State, StreamsApp
from kspark.runtime.server import connect
from kspark_server.envelope import RecordContext
from kspark_server.windows import Window, Windowed

__version__ = "0.1.0"

__all__ = [
    *dsl.__all__,
    "RecordContext",
    "State",
    "StreamsApp",
    "StreamsConfig",
    "Topic",
    "Topology",
    "Window",
    "Windowed",
    "connect",
]
