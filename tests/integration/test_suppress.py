"""``KTable.suppress(Suppressed.until_time_limit(...))`` on a real server: a struct-valued
table whose keys wait across micro-batches and a restart from the checkpoint, tombstones,
tricky keys, and a bounded buffer that emits early; the same topology in process gives
the same records (the engines' agreement)."""

from __future__ import annotations

import dataclasses
from datetime import timedelta
from typing import Any

import pytest

from kspark import BufferConfig, StreamsApp, StreamsBuilder, StreamsConfig, Suppressed, Topic
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark

LONG_KEY = "x" * 600


@dataclasses.dataclass
class Price:
    amount: int
    currency: str


BATCHES: list[list[tuple[str, Price | None, int]]] = [
    [("", Price(1, "EUR"), 0), ("ключ", Price(2, "€"), 1), (LONG_KEY, Price(3, "USD"), 2)],
    # "" changes (its buffer time stays 0); "ключ" is deleted; stream time 12 lets "" out
    [("", Price(4, "EUR"), 5), ("ключ", None, 6), ("k", Price(5, "GBP"), 12)],
    [("k", Price(6, "GBP"), 13), ("z", Price(7, "CHF"), 40)],
]


def _run(d: TopologyTestDriver, restart: Any) -> list[list[tuple[str, Any, int]]]:
    src = d.create_input_topic("prices", key_type=str, value_type=Price)
    calm = d.create_output_topic("calm", key_type=str, value_type=Price)
    early = d.create_output_topic("early", key_type=str, value_type=Price)
    out: list[list[tuple[str, Any, int]]] = []
    for i, batch in enumerate(BATCHES):
        if i == 1:
            restart(d)
        for k, v, ts in batch:
            src.pipe_input(k, v, timestamp=ts)
        d.process()
        out.append(_sorted((r.key, r.value, r.timestamp) for r in calm.read_records()))
        out.append(_sorted((r.key, r.value, r.timestamp) for r in early.read_records()))
    return out


def _sorted(records: Any) -> list[tuple[str, Any, int]]:
    """Records of one micro-batch, by key and time (two tasks' records interleave)."""
    return sorted(records, key=lambda r: (r[0], r[2]))


def _topology() -> Any:
    b = StreamsBuilder()
    prices = b.table(Topic.jsonl("prices", "/unused"), key_type=str, value_type=Price)
    limit = timedelta(milliseconds=10)
    prices.suppress(Suppressed.until_time_limit(limit, BufferConfig.unbounded())).to_stream().to(
        Topic.jsonl("calm", "/unused")
    )
    bounded = BufferConfig.max_records(1).emit_early_when_full()
    prices.suppress(Suppressed.until_time_limit(timedelta(days=1), bounded)).to_stream().to(
        Topic.jsonl("early", "/unused")
    )
    return b.build()


def test_suppressed_table_survives_a_restart(spark: Any, app_id: str) -> None:
    cfg = StreamsConfig(application_id=app_id, num_partitions=1)

    def restart(d: TopologyTestDriver) -> None:
        # a new app on the same checkpoint: the buffers and stream times come back
        d.app.stop()
        d.app = StreamsApp(d.topology, d.config, session=spark)

    with TopologyTestDriver(_topology(), cfg, session=spark) as d:
        got = _run(d, restart)
    with TopologyTestDriver(_topology(), cfg, engine="local") as d:
        local = _run(d, lambda d: None)
    eur4, gbp6 = Price(4, "EUR"), Price(6, "GBP")
    assert got[0::2] == [
        [],
        _sorted([("", eur4, 5), ("ключ", None, 6), (LONG_KEY, Price(3, "USD"), 2)]),
        [("k", gbp6, 13)],
    ]
    # one key at a time: each new key pushes the waiting one out
    assert got[1::2] == [
        _sorted([("", Price(1, "EUR"), 0), ("ключ", Price(2, "€"), 1)]),
        _sorted([("", eur4, 5), (LONG_KEY, Price(3, "USD"), 2), ("ключ", None, 6)]),
        [("k", gbp6, 13)],
    ]
    assert got == local
