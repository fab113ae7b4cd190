"""The typed, fluent DSL."""

from __future__ import annotations

from kspark.dsl.joinwindows import JoinWindows, StreamJoined
from kspark.dsl.options import Branched, Deduplicated, Joined, Materialized, Named, Repartitioned
from kspark.dsl.streams import BranchedKStream, KStream, KTable, StreamsBuilder

__all__ = [
    "Branched",
    "BranchedKStream",
    "Deduplicated",
    "JoinWindows",
    "Joined",
    "KStream",
    "KTable",
    "Materialized",
    "Named",
    "Repartitioned",
    "StreamJoined",
    "StreamsBuilder",
]
