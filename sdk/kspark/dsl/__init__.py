"""The typed, fluent DSL."""

from __future__ import annotations

from kspark.dsl.cogroup import (
    CogroupedKStream,
    SessionWindowedCogroupedKStream,
    TimeWindowedCogroupedKStream,
)
from kspark.dsl.globaltable import GlobalKTable
from kspark.dsl.grouped import (
    BufferConfig,
    EmitStrategy,
    Grouped,
    KGroupedStream,
    KGroupedTable,
    SessionWindowedKStream,
    SessionWindows,
    SlidingWindowedKStream,
    SlidingWindows,
    Suppressed,
    TimeWindowedKStream,
    TimeWindows,
)
from kspark.dsl.joinwindows import JoinWindows, StreamJoined
from kspark.dsl.options import Branched, Deduplicated, Joined, Materialized, Named, Repartitioned
from kspark.dsl.printed import Printed
from kspark.dsl.streams import BranchedKStream, KStream, KTable, StreamsBuilder

__all__ = [
    "Branched",
    "BranchedKStream",
    "BufferConfig",
    "CogroupedKStream",
    "Deduplicated",
    "EmitStrategy",
    "GlobalKTable",
    "Grouped",
    "JoinWindows",
    "Joined",
    "KGroupedStream",
    "KGroupedTable",
    "KStream",
    "KTable",
    "Materialized",
    "Named",
    "Printed",
    "Repartitioned",
    "SessionWindowedCogroupedKStream",
    "SessionWindowedKStream",
    "SessionWindows",
    "SlidingWindowedKStream",
    "SlidingWindows",
    "StreamJoined",
    "StreamsBuilder",
    "Suppressed",
    "TimeWindowedCogroupedKStream",
    "TimeWindowedKStream",
    "TimeWindows",
]
