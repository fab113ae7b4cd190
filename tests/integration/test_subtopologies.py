"""Several stateful operators on Spark: one
``applyInPandasWithState`` runs them all, and an operator that reads another's output
reads it from an internal topic in a later micro-batch (docs/design/sub-topologies.md).
Each topology's output on Spark is the in-process engine's, over micro-batch splits
(each ``process()`` a restart of the query)."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

from kspark import Materialized, StreamsBuilder, StreamsConfig
from kspark.compiler.subtopologies import INTERNAL_DIR
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark


def _add(a: int, b: int) -> int:
    return a + b


def two_aggregations() -> Any:
    """Two operators side by side: a count by key, a sum by the key's first letter."""
    b = StreamsBuilder()
    s = b.stream("in", key_type=str, value_type=int)
    s.group_by_key().count(Materialized.as_("counts")).to_stream().to("counts")
    s.map(lambda k, v: (k[:1], v), key_type=str, value_type=int).group_by_key().reduce(
        _add, materialized=Materialized.as_("sums")
    ).to_stream().to("sums")
    return b.build()


def chain() -> Any:
    """A count whose updates are summed by the key's first letter: the sum reads the
    count's output through an internal topic."""
    b = StreamsBuilder()
    s = b.stream("in", key_type=str, value_type=int)
    counts = s.group_by_key().count(Materialized.as_("counts"))
    counts.to_stream().map(
        lambda k, c: (k[:1], c), key_type=str, value_type=int
    ).group_by_key().reduce(_add, materialized=Materialized.as_("sums")).to_stream().to("sums")
    return b.build()


def table_join() -> Any:
    """A stream joined with a table that a count makes."""
    b = StreamsBuilder()
    counts = (
        b.stream("in", key_type=str, value_type=int)
        .group_by_key()
        .count(Materialized.as_("counts"))
    )
    clicks = b.stream("clicks", key_type=str, value_type=str)
    clicks.join(counts, lambda v, c: f"{v}:{c}", value_type=str).to("joined")
    return b.build()


def regrouped_table() -> Any:
    """A table of names re-grouped by first letter, counted and summed by length: the
    grouping's changes (a row leaving one group and joining another) reach both
    aggregations through its internal topic."""
    b = StreamsBuilder()
    names = b.table("names", key_type=str, value_type=str)
    by_letter = names.group_by(lambda k, v: (v[:1], v), key_type=str, value_type=str)
    by_letter.count(Materialized.as_("letters")).to_stream().to("counts")
    by_letter.aggregate(
        lambda: 0,
        lambda k, v, total: total + len(v),
        lambda k, v, total: total - len(v),
        materialized=Materialized.as_("lengths"),
        value_type=int,
    ).to_stream().to("lengths")
    return b.build()


IN = [(f"k{(i * 7) % 5}{i % 2}", i, 1000 * i) for i in range(24)]


def run(
    spark: Any,
    topology: Callable[[], Any],
    batches: list[dict[str, list[tuple[Any, Any, int]]]],
    outputs: dict[str, type],
    app_id: str,
) -> dict[str, list[Any]]:
    cfg = StreamsConfig(application_id=app_id, num_partitions=2)
    engine = "spark" if spark is not None else "local"
    with TopologyTestDriver(topology(), cfg, session=spark, engine=engine) as d:
        types = {"in": int, "clicks": str, "names": str}
        ins = {
            name: d.create_input_topic(name, key_type=str, value_type=types[name])
            for name in {t for batch in batches for t in batch}
        }
        outs = {
            name: d.create_output_topic(name, key_type=str, value_type=t)
            for name, t in outputs.items()
        }
        for batch in batches:
            for topic, records in batch.items():
                for k, v, ts in records:
                    ins[topic].pipe_input(k, v, timestamp=ts)
            d.process()
        got = {name: out.read_key_values() for name, out in outs.items()}
        if spark is not None:
            internal = os.path.join(d.config.checkpoint_dir, INTERNAL_DIR)
            got["internal"] = sorted(os.listdir(internal)) if os.path.isdir(internal) else []
        return got


def _same(spark: Any, app_id: str, topology: Any, batches: Any, outputs: Any) -> dict[str, Any]:
    want = run(None, topology, batches, outputs, app_id + "-local")
    got = run(spark, topology, batches, outputs, app_id)
    internal = got.pop("internal")
    assert got == want
    return {"internal": internal, **got}


def test_two_operators_side_by_side(spark: Any, app_id: str) -> None:
    split = [{"in": IN[:9]}, {"in": IN[9:10]}, {"in": IN[10:]}]
    got = _same(spark, app_id, two_aggregations, split, {"counts": int, "sums": int})
    # each operator's output crosses its internal topic on the way to its sink
    assert len(got["internal"]) == 2


def test_chain_through_an_internal_topic(spark: Any, app_id: str) -> None:
    split = [{"in": IN[:9]}, {"in": IN[9:10]}, {"in": IN[10:]}]
    got = _same(spark, app_id, chain, split, {"sums": int})
    assert len(got["internal"]) == 2
    assert got["sums"]


def test_join_with_a_counted_table(spark: Any, app_id: str) -> None:
    """The table's updates reach the join a micro-batch after the count (as a table read
    from a repartition topic does in Kafka Streams): the clicks of a later ``process()``
    see them."""
    clicks = [(k, f"c{i}", 100_000 + i) for i, (k, _, _) in enumerate(IN[:12])]
    split = [{"in": IN[:12]}, {"clicks": clicks[:6]}, {"in": IN[12:]}, {"clicks": clicks[6:]}]
    got = _same(spark, app_id, table_join, split, {"joined": str})
    assert got["joined"]


def test_a_regrouped_table_counts_and_aggregates_its_changes(spark: Any, app_id: str) -> None:
    """The count and the aggregate of a re-grouped table subtract a row from the group it
    leaves and add it to the one it joins, from the changes the grouping wrote to its
    internal topic (as Kafka Streams' repartition topic after KTable#groupBy carries them),
    across restarts of the query."""
    split = [
        {"names": [("1", "ann", 1), ("2", "al", 2), ("3", "bo", 3)]},
        {"names": [("2", "bea", 4), ("1", None, 5)]},  # al moves to b; ann is deleted
        {"names": [("3", "ben", 6), ("4", "cy", 7)]},  # bo changes within b
    ]
    got = _same(spark, app_id, regrouped_table, split, {"counts": int, "lengths": int})
    # the grouping's topic, read by both aggregations, and each aggregation's own
    assert len(got["internal"]) == 3
    # each group's last update: a emptied, b with bea and ben, c with cy
    assert dict(got["counts"]) == {"a": 0, "b": 2, "c": 1}
    assert dict(got["lengths"]) == {"a": 0, "b": 6, "c": 2}


def test_a_batch_failing_after_its_internal_topics_are_written_doubles_nothing(
    spark: Any, app_id: str
) -> None:
    """The count's batch writes its internal topic and fails before it commits; the
    restart runs the batch again, which writes the topic's batch folder again under the
    same name: the sum reads each record once, and the output is a clean run's."""
    import dataclasses

    import attrs

    from kspark.errors import StreamsAppError

    split = [{"in": IN[:12]}, {"in": IN[12:]}]
    want = run(None, chain, split, {"sums": int}, app_id + "-local")["sums"]
    cfg = StreamsConfig(application_id=app_id, num_partitions=2)
    with TopologyTestDriver(chain(), cfg, session=spark) as d:
        src = d.create_input_topic("in", key_type=str, value_type=int)
        out = d.create_output_topic("sums", key_type=str, value_type=int)
        for k, v, ts in IN[:12]:
            src.pipe_input(k, v, timestamp=ts)
        d.process()  # batches 0 (count), 1 (sum), 2 (the sum's sink)
        output = d.app.compiled()
        d.app._output = attrs.evolve(
            output, writer_spec=dataclasses.replace(output.writer_spec, fail_after_internal=3)
        )
        for k, v, ts in IN[12:]:
            src.pipe_input(k, v, timestamp=ts)
        with pytest.raises(StreamsAppError, match="injected fault"):
            d.process()
        d.process()  # the restart: batch 3 again, then the rest
        assert out.read_key_values() == want
