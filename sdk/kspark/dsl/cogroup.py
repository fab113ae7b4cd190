"""Cogrouping (KIP-150): several grouped streams aggregated into one table,
``CogroupedKStream``.

``KGroupedStream.cogroup(aggregator)`` starts a cogrouped stream; each further
``cogroup(grouped_stream, aggregator)`` adds a grouped stream of the same key type, with
its own value type and its own aggregator, and ``aggregate(initializer)`` folds them all
into one aggregate per key: one store, one table, one operator, the records of all inputs
in the order their task processes them. ``windowed_by(TimeWindows...)`` or
``windowed_by(SessionWindows...)`` aggregate per window or per session.

The classes live in :mod:`kspark.dsl.grouped`, next to ``KGroupedStream``, and the rules
that build their nodes in :mod:`kspark.dsl._aggregation`; this module names them.

Examples
--------
>>> from kspark import StreamsBuilder
>>> b = StreamsBuilder()
>>> views = b.stream("views", key_type=str, value_type=int)
>>> clicks = b.stream("clicks", key_type=str, value_type=str)
>>> stats = (
...     views.group_by_key()
...     .cogroup(lambda user, seconds, total: total + seconds)
...     .cogroup(clicks.group_by_key(), lambda user, page, total: total + 1)
...     .aggregate(lambda: 0, value_type=int)
... )
>>> stats.to_stream().to("stats")
>>> print(b.build().describe())  # doctest: +NORMALIZE_WHITESPACE
Topologies:
   Sub-topology: 0
    Source: KSTREAM-SOURCE-0000000000 (topics: [views])
      --> COGROUPKSTREAM-AGGREGATE-0000000003
    Source: KSTREAM-SOURCE-0000000001 (topics: [clicks])
      --> COGROUPKSTREAM-AGGREGATE-0000000004
    Processor: COGROUPKSTREAM-AGGREGATE-0000000003 (stores: [COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000002]) [operator: fused into the cogrouped aggregation]
      --> COGROUPKSTREAM-MERGE-0000000005
      <-- KSTREAM-SOURCE-0000000000
    Processor: COGROUPKSTREAM-AGGREGATE-0000000004 (stores: [COGROUPKSTREAM-AGGREGATE-STATE-STORE-0000000002]) [operator: fused into the cogrouped aggregation]
      --> COGROUPKSTREAM-MERGE-0000000005
      <-- KSTREAM-SOURCE-0000000001
    Processor: COGROUPKSTREAM-MERGE-0000000005 (stores: []) [operator: kspark task operator (per-task state)]
      --> KTABLE-TOSTREAM-0000000006
      <-- COGROUPKSTREAM-AGGREGATE-0000000003, COGROUPKSTREAM-AGGREGATE-0000000004
    Processor: KTABLE-TOSTREAM-0000000006 (stores: [])
      --> KSTREAM-SINK-0000000007
      <-- COGROUPKSTREAM-MERGE-0000000005
    Sink: KSTREAM-SINK-0000000007 (topic: stats)
      <-- KTABLE-TOSTREAM-0000000006
"""

from __future__ import annotations

from kspark.dsl.grouped import (
    CogroupedKStream,
    SessionWindowedCogroupedKStream,
    TimeWindowedCogroupedKStream,
)

__all__ = [
    "CogroupedKStream",
    "SessionWindowedCogroupedKStream",
    "TimeWindowedCogroupedKStream",
]
