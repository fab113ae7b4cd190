"""A failure upstream of a fork is handled once per record, not once per path.

Each path below a fork runs the steps before it in its own chain (docs/concepts.md), so a
record that fails there fails on every path. The side rows each path makes for it must be
identical, so that the writer keeps one dead letter and the observed metrics count one
drop (the writer keeps one side row per ``SIDE_IDENTITY``; the observation keeps a set).
The chains run here in-process, on the batches Spark would hand each path.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pyarrow as pa
from support.envelopes import envelope_batch

from kspark import StreamsBuilder, StreamsConfig, Topic
from kspark.compiler import stages
from kspark.compiler.compiler import compile_topology
from kspark.errors import (
    DeadLetterQueueProcessingExceptionHandler,
    LogAndContinueProcessingExceptionHandler,
)
from kspark_server.chain import make_chain
from kspark_server.envelope import SIDE_IDENTITY


def _batch(values: list[int], first: int = 0) -> pa.RecordBatch:
    return envelope_batch(str, int, [(f"k{v}", v) for v in values], first)


def _inverse(v: int) -> int:
    return 100 // v


def _fork(b: StreamsBuilder) -> None:
    """A failing step, then five paths: two sinks, a flat map and a split into two
    branches."""
    upstream = b.stream(Topic.jsonl("in", "/in"), key_type=str, value_type=int).map_values(
        _inverse, value_type=int
    )
    upstream.filter(lambda k, v: v > 10).to(Topic.jsonl("big", "/out/big"))
    upstream.map_values(lambda v: str(v), value_type=str).to(Topic.jsonl("text", "/out/text"))
    upstream.flat_map_values(lambda v: [v, v], value_type=int).to(Topic.jsonl("two", "/out/two"))
    branches = upstream.split().branch(lambda k, v: v % 2 == 0).default_branch()
    for i, branch in enumerate(branches.values()):
        branch.to(Topic.jsonl(f"branch-{i}", f"/out/branch-{i}"))


def _side_rows(handler: Any) -> list[dict[str, Any]]:
    b = StreamsBuilder()
    _fork(b)
    config = StreamsConfig(
        application_id="t",
        processing_exception_handler=handler,
        dead_letter_queue_topic=Topic.jsonl("dlq", "/dlq"),
    )
    parts = compile_topology(b.build(), config).sinks
    assert len(parts) == 5
    # two input batches, with the same failing value (0) twice in the first
    batches = [_batch([1, 0, 5, 0]), _batch([0, 20], first=4)]
    side = []
    for part in parts:
        assert isinstance(part.stage, stages.Chain)
        for out in make_chain(part.stage.spec)(iter(batches)):
            side.extend(json.loads(s) for s in out.column("ks_side").to_pylist() if s)
    return side


def _observed(side: list[dict[str, Any]]) -> Counter[tuple[str, str]]:
    """What the observed metrics count: a set of (kind, processor, task, count, chunk)."""
    kept = {(s["kind"], s["processor"], s["task"], s["count"], s["chunk"]) for s in side}
    counts: Counter[tuple[str, str]] = Counter()
    for kind, processor, _, count, _ in kept:
        counts[(kind, processor)] += count
    return counts


def test_dead_letters_of_a_failure_before_a_fork_are_written_once_per_record() -> None:
    side = _side_rows(DeadLetterQueueProcessingExceptionHandler)
    letters = [s for s in side if s["kind"] == "dlq"]
    assert len(letters) == 3 * 5  # every path failed on every bad record
    written = {tuple(s[f] for f in SIDE_IDENTITY): s for s in letters}
    assert sorted(s["src_offset"] for s in written.values()) == [1, 3, 4]
    proc = letters[0]["processor"]
    assert proc.startswith("KSTREAM-MAPVALUES")
    assert _observed(side) == Counter({("dlq", proc): 3})


def test_drops_of_a_failure_before_a_fork_are_counted_once_per_record() -> None:
    side = _side_rows(LogAndContinueProcessingExceptionHandler)
    (proc,) = {s["processor"] for s in side}
    assert _observed(side) == Counter({("dropped", proc): 3})


def test_a_failing_split_predicate_is_the_splits_failure_once_per_record() -> None:
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("in", "/in"), key_type=str, value_type=int)
    branches = s.split().branch(lambda k, v: 100 // v > 30).branch(lambda k, v: v > 2)
    for i, branch in enumerate(branches.default_branch().values()):
        branch.to(Topic.jsonl(f"b{i}", f"/out/b{i}"))
    config = StreamsConfig(
        application_id="t",
        processing_exception_handler=DeadLetterQueueProcessingExceptionHandler,
        dead_letter_queue_topic=Topic.jsonl("dlq", "/dlq"),
    )
    side = []
    for part in compile_topology(b.build(), config).sinks:
        assert isinstance(part.stage, stages.Chain)
        for out in make_chain(part.stage.spec)(iter([_batch([1, 0, 5, 0])])):
            side.extend(json.loads(x) for x in out.column("ks_side").to_pylist() if x)
    assert len(side) == 2 * 3
    (proc,) = {x["processor"] for x in side}
    assert proc.startswith("KSTREAM-BRANCH-")  # the split, not one of its branches
    assert _observed(side) == Counter({("dlq", proc): 2})
