"""``KTable.group_by`` with ``count`` and ``aggregate`` on a real server: rows moving
between groups, a delete, a change within a group, tricky keys (empty, non-ASCII, long)
as source and group keys, a restart from the checkpoint between the micro-batches, and
the grouped tables' stores."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from kspark import Materialized, StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark

LONG_KEY = "x" * 300
LONG_REGION = "r" * 200


@dataclasses.dataclass
class Customer:
    name: str
    region: str


def test_regrouped_counts_and_aggregates_survive_a_restart(spark: Any, app_id: str) -> None:
    b = StreamsBuilder()
    customers = b.table(Topic.jsonl("customers", "/unused"), key_type=str, value_type=Customer)
    by_region = customers.group_by(lambda k, c: (c.region, c), key_type=str, value_type=Customer)
    counts = by_region.count(materialized=Materialized.as_("per-region"))
    counts.to_stream().to(Topic.jsonl("counts", "/unused"))
    lengths = by_region.aggregate(
        lambda: 0,
        lambda region, c, total: total + len(c.name),
        lambda region, c, total: total - len(c.name),
        materialized=Materialized.as_("name-lengths"),
        value_type=int,
    )
    lengths.to_stream().to(Topic.jsonl("lengths", "/unused"))
    batches: list[list[tuple[str | None, Customer | None, int]]] = [
        [
            ("", Customer("a", "eu"), 1),
            ("ключ", Customer("bb", "ευρώπη"), 2),
            (LONG_KEY, Customer("ccc", "eu"), 3),
        ],
        [
            ("", Customer("a", "us"), 5),  # moves from eu to us
            ("ключ", None, 6),  # deleted: its group counts 0
            (LONG_KEY, Customer("cccc", "eu"), 7),  # changes within eu
            ("k4", Customer("d", LONG_REGION), 8),
            (None, Customer("dropped", "eu"), 9),
        ],
    ]
    cfg = StreamsConfig(application_id=app_id, num_partitions=2)
    with TopologyTestDriver(b.build(), cfg, session=spark) as d:
        source = d.create_input_topic("customers", key_type=str, value_type=Customer)
        count_out = d.create_output_topic("counts", key_type=str, value_type=int)
        length_out = d.create_output_topic("lengths", key_type=str, value_type=int)
        for i, batch in enumerate(batches):
            if i == 1:
                # a new app on the same checkpoint: the selections and the groups' aggregates
                # come back from it
                d.app.stop()
                d.app = StreamsApp(d.topology, d.config, session=spark)
            for k, v, ts in batch:
                source.pipe_input(k, v, timestamp=ts)
            d.process()
        got_counts = _by_key([(r.key, r.value) for r in count_out.read_records()])
        got_lengths = _by_key([(r.key, r.value) for r in length_out.read_records()])
        groups = ["eu", "us", "ευρώπη", LONG_REGION]
        count_store, length_store = d.store("per-region"), d.store("name-lengths")
        stored = {g: (count_store.get(g), length_store.get(g)) for g in groups}
        dropped = d.metrics().by_name()["dropped-records-total"]
    # each micro-batch emits each group it changed once, with its latest value
    assert got_counts == {"eu": [2, 1], "ευρώπη": [1, 0], "us": [1], LONG_REGION: [1]}
    assert got_lengths == {"eu": [4, 4], "ευρώπη": [2, 0], "us": [1], LONG_REGION: [1]}
    assert stored == {"eu": (1, 4), "us": (1, 1), "ευρώπη": (0, 0), LONG_REGION: (1, 1)}
    # the update without a key (the metrics are the restarted app's)
    assert dropped == 1


def _by_key(records: list[tuple[Any, Any]]) -> dict[Any, list[Any]]:
    """Each group's values in order (across groups and tasks the sink keeps no order)."""
    out: dict[Any, list[Any]] = {}
    for k, v in records:
        out.setdefault(k, []).append(v)
    return out
