"""Branches that reach no sink run, as in Kafka Streams: their actions are called, their
failures are handled, and their stores are kept (``StreamsBuilder.build`` keeps them as the
topology's ends)."""

from __future__ import annotations

from typing import Any

import pytest

from kspark import Materialized, StreamsBuilder, StreamsConfig, Topic
from kspark.errors import LogAndContinueProcessingExceptionHandler, ProcessingError
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark


def _refuse_negative(key: str, value: int) -> None:
    if value < 0:
        raise ValueError(f"negative amount for {key}")


def test_a_branch_that_ends_in_peek_runs(spark: Any, app_id: str) -> None:
    """The peek at the end of the branch is called: its failure stops the app, named."""
    b = StreamsBuilder()
    src = b.stream(Topic.jsonl("in", "/unused"), key_type=str, value_type=int)
    src.filter(lambda k, v: v != 0).peek(_refuse_negative)
    src.to(Topic.jsonl("out", "/unused"))
    topology = b.build()
    (end,) = topology.ends
    assert "KSTREAM-PEEK" in end.name and end.name in topology.describe()
    config = StreamsConfig(application_id=app_id, num_partitions=2)
    with TopologyTestDriver(topology, config, session=spark) as d:
        d.create_input_topic("in", key_type=str, value_type=int).pipe_input("a", 1, timestamp=1)
        out = d.create_output_topic("out", key_type=str, value_type=int)
        assert out.read_key_values() == [("a", 1)]
        d.create_input_topic("in", key_type=str, value_type=int).pipe_input("b", -5, timestamp=2)
        with pytest.raises(ProcessingError, match=end.name):
            d.process()


def test_a_dangling_branchs_drops_are_counted(spark: Any, app_id: str) -> None:
    """A branch's records go nowhere after its end, and what its handler skips is counted
    for its processor like anywhere else."""
    b = StreamsBuilder()
    src = b.stream(Topic.jsonl("in", "/unused"), key_type=str, value_type=int)
    src.map_values(lambda v: 10 // v, value_type=int)
    src.to(Topic.jsonl("out", "/unused"))
    topology = b.build()
    (end,) = topology.ends
    config = StreamsConfig(
        application_id=app_id,
        num_partitions=2,
        processing_exception_handler=LogAndContinueProcessingExceptionHandler,
    )
    with TopologyTestDriver(topology, config, session=spark) as d:
        d.create_input_topic("in", key_type=str, value_type=int).pipe_records(
            [("a", 0, 1), ("b", 2, 2), ("c", 0, 3)]
        )
        out = d.create_output_topic("out", key_type=str, value_type=int)
        assert out.read_key_values() == [("a", 0), ("b", 2), ("c", 0)]
        dropped = d.metrics().dropped_by_reason()
        assert sum(n for (proc, _), n in dropped.items() if proc == end.name) == 2, dropped


def test_a_table_that_nothing_reads_keeps_its_store(spark: Any, app_id: str) -> None:
    b = StreamsBuilder()
    src = b.stream(Topic.jsonl("in", "/unused"), key_type=str, value_type=int)
    src.group_by_key().count(materialized=Materialized.as_("counts"))
    src.to(Topic.jsonl("out", "/unused"))
    config = StreamsConfig(application_id=app_id, num_partitions=2)
    with TopologyTestDriver(b.build(), config, session=spark) as d:
        d.create_input_topic("in", key_type=str, value_type=int).pipe_records(
            [("a", 1, 1), ("b", 2, 2), ("a", 3, 3)]
        )
        d.process()
        counts = d.store("counts")
        assert (counts.get("a"), counts.get("b")) == (2, 1)
