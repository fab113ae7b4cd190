"""Interactive queries and replicas of an app with several stateful operators: the
operators share one ``applyInPandasWithState``, each under its own task keys, and each
store is read from its own operator's tasks (docs/design/sub-topologies.md). Its answers
are the in-process engine's, after micro-batches that are each a restart of the query."""

from __future__ import annotations

import random
import uuid
from datetime import timedelta
from typing import Any

import pytest
from support.topologies import Summing

from kspark import Materialized, StreamsBuilder, StreamsConfig
from kspark.state import Stores
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark

KEYS = ["a", "b", "c", "d"]


def three_operators() -> Any:
    """Stream ``in`` joined as of each record's time to the versioned table ``table``
    (store ``rates``), the joined records counted by key (store ``counts``: it reads the
    join's output from an internal topic); side by side, a processor summing ``in`` by
    key (store ``psums``)."""
    b = StreamsBuilder()
    b.add_state_store(
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store("psums"), key_type=str, value_type=int
        )
    )
    rates = b.table(
        "table",
        key_type=str,
        value_type=int,
        materialized=Materialized.as_versioned("rates", timedelta(seconds=20)),
    )
    s = b.stream("in", key_type=str, value_type=int)
    joined = s.left_join(rates, lambda v, r: v * 100 + (r if r is not None else -1), value_type=int)
    joined.group_by_key().count(materialized=Materialized.as_("counts")).to_stream().to("counts")
    s.process(Summing, "psums").to("sums")
    return b.build()


def versioned(store: Any) -> Any:
    answers = {k: [store.get(k), store.get(k, as_of=5_000), store.versions(k)] for k in KEYS}
    return answers, store.approximate_num_entries()


def answers(d: TopologyTestDriver) -> dict[str, Any]:
    """Every store's answers: gets, as-of gets and versions, a scan, the sizes."""
    counts, psums = d.store("counts"), d.store("psums")
    return {
        "rates": versioned(d.store("rates")),
        "counts": ({k: counts.get(k) for k in KEYS}, counts.approximate_num_entries()),
        "psums": ({k: psums.get(k) for k in KEYS}, sorted(psums.all())),
    }


def run(engine: str, session: Any, replicas: bool = False) -> list[Any]:
    """The stores' answers after each of three micro-batches; with ``replicas``, checks
    that replicas of the table stores, refreshed, answer as the stores do."""
    rnd = random.Random("subtopology-stores")
    records = [
        (rnd.randrange(2), rnd.choice(KEYS), rnd.randrange(31), rnd.randrange(20_001))
        for _ in range(18)
    ]
    cfg = StreamsConfig(application_id=f"ss-{uuid.uuid4().hex[:8]}", num_partitions=2)
    seen = []
    kept: dict[str, Any] = {}
    with TopologyTestDriver(three_operators(), cfg, session=session, engine=engine) as d:  # type: ignore[arg-type]
        srcs = [d.create_input_topic(t, key_type=str, value_type=int) for t in ("in", "table")]
        for batch in (records[:6], records[6:11], records[11:]):
            for topic, key, value, ts in batch:
                srcs[topic].pipe_input(key, value, timestamp=ts)
            d.process()  # on Spark, each a restart of the query
            now = answers(d)
            seen.append(now)
            if replicas:
                for name in ("rates", "counts"):
                    if name in kept:
                        assert kept[name].refresh() >= 0
                    else:
                        kept[name] = d.app.replica(name)
                assert versioned(kept["rates"]) == now["rates"]
                assert {k: kept["counts"].get(k) for k in KEYS} == now["counts"][0]
    return seen


def test_each_store_of_three_grouped_operators_answers_as_in_the_in_process_engine(
    spark: Any,
) -> None:
    want = run("local", None)
    assert all(want[-1][name][0] for name in want[-1])
    assert run("spark", spark, replicas=True) == want
