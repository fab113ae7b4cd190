"""The typed, fluent DSL."""

from __future__ import annotations

from kspark.dsl.joinwindows import JoinWindows, StreamJoined
from kspark.dsl.grouped import (
    BufferConfig,
    Grouped,
    KGroupedStream,
    SessionWindowedKStream,
    SessionWindows,
    Suppressed,
    TimeWindowedKStream,
    TimeWindows,
)
from kspark.dsl.options import Branched, Deduplicated, Joined, Materialized, Named, Repartitioned
from kspark.dsl.streams import BranchedKStream, KStream, KTable, StreamsBuilder

__all__ = [
    "Branched",
    "BranchedKStream",
    "BufferConfig",
    "Deduplicated",
    "JoinWindows",
    "Grouped",
    "Joined",
    "KGroupedStream",
    "KStream",
    "KTable",
    "Materialized",
    "Named",
    "Repartitioned",
    "StreamJoined",
    "SessionWindowedKStream",
    "SessionWindows",
    "StreamsBuilder",
    "Suppressed",
    "TimeWindowedKStream",
    "TimeWindows",
]
