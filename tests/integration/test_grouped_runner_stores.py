"""Interactive queries: ``app.store`` reads kspark's files at the version the committed
group states name, and answers as the in-process engine does
(tests/integration/test_driver_engines.py), over micro-batches that are each a restart."""

from __future__ import annotations

import os
import random
import uuid
from datetime import timedelta
from typing import Any

import pytest
from support.topologies import Summing, as_of_join

from kspark import Materialized, StreamsBuilder, StreamsConfig, TimeWindows
from kspark.state import Stores
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark

KEYS = ["a", "b", "c", "d"]


def windows() -> Any:
    b = StreamsBuilder()
    b.stream("in", key_type=str, value_type=int).group_by_key().windowed_by(
        TimeWindows.of_size_and_grace(timedelta(seconds=5), timedelta(seconds=2))
    ).count(materialized=Materialized.as_("windows")).to_stream().map(
        lambda w, n: (f"{w.key}@{w.window.start}", n), key_type=str, value_type=int
    ).to("out")
    return b.build()


def processor() -> Any:
    b = StreamsBuilder()
    b.add_state_store(
        Stores.key_value_store_builder(
            Stores.persistent_key_value_store("psums"), key_type=str, value_type=int
        )
    )
    b.stream("in", key_type=str, value_type=int).process(Summing, "psums").to("out")
    return b.build()


#: topology, its input topics, its store
CASES = {
    "as_of_join": (as_of_join, ("in", "table"), "rates"),
    "windows": (windows, ("in",), "windows"),
    "processor": (processor, ("in",), "psums"),
}


def contents(store: Any) -> Any:
    """Every key's answers, and the store's size."""
    answers: dict[str, Any] = {}
    for k in KEYS:
        if hasattr(store, "fetch"):
            answers[k] = store.fetch(k, 0, 40_000)
        elif hasattr(store, "versions"):
            answers[k] = [store.get(k), store.get(k, as_of=5_000), store.versions(k)]
        else:
            answers[k] = store.get(k)
    return answers, store.approximate_num_entries()


def run(case: str, engine: str, session: Any) -> list[Any]:
    """The store's contents after each of three micro-batches."""
    make, inputs, name = CASES[case]
    rnd = random.Random(case)
    records = [
        (rnd.randrange(len(inputs)), rnd.choice(KEYS), rnd.randrange(31), rnd.randrange(20_001))
        for _ in range(18)
    ]
    cfg = StreamsConfig(application_id=f"gs-{uuid.uuid4().hex[:8]}", num_partitions=2)
    seen = []
    with TopologyTestDriver(make(), cfg, session=session, engine=engine) as d:  # type: ignore[arg-type]
        srcs = [d.create_input_topic(t, key_type=str, value_type=int) for t in inputs]
        for batch in (records[:6], records[6:11], records[11:]):
            for topic, key, value, ts in batch:
                srcs[topic].pipe_input(key, value, timestamp=ts)
            d.process()  # on Spark, each a restart of the query
            seen.append(contents(d.store(name)))
    return seen


@pytest.mark.parametrize(
    "case",
    [
        "as_of_join",
        pytest.param("windows", marks=pytest.mark.extended),
        pytest.param("processor", marks=pytest.mark.extended),
    ],
)
def test_stores_answer_as_in_the_in_process_engine(spark: Any, case: str) -> None:
    want = run(case, "local", None)
    assert want[-1][1] > 0
    assert run(case, "spark", spark) == want


@pytest.mark.extended  # five restarts and reads: about a minute
def test_a_replica_answers_as_the_store_after_each_batch(spark: Any) -> None:
    """``app.replica`` follows the files' change feed: after each of five micro-batches
    (each a restart of the query), refreshed, it answers every key's reads as
    ``app.store`` does; a refresh with nothing committed since changes nothing, and a
    replica not refreshed keeps its answers."""
    make, inputs, name = CASES["as_of_join"]

    def versioned(store: Any) -> Any:
        answers = {k: [store.get(k), store.get(k, as_of=5_000), store.versions(k)] for k in KEYS}
        return answers, store.approximate_num_entries()

    rnd = random.Random("replica")
    records = [
        (rnd.randrange(len(inputs)), rnd.choice(KEYS), rnd.randrange(31), rnd.randrange(20_001))
        for _ in range(30)
    ]
    cfg = StreamsConfig(
        application_id=f"gr-{uuid.uuid4().hex[:8]}",
        num_partitions=2,
    )
    with TopologyTestDriver(make(), cfg, session=spark, engine="spark") as d:
        srcs = [d.create_input_topic(t, key_type=str, value_type=int) for t in inputs]
        replica: Any = None
        before: Any = None
        for i in range(5):
            for topic, key, value, ts in records[6 * i : 6 * i + 6]:
                srcs[topic].pipe_input(key, value, timestamp=ts)
            d.process()
            if replica is None:
                replica = d.app.replica(name)
            else:
                assert versioned(replica) == before  # as of its last refresh
                assert replica.refresh() >= 1
                assert replica.refresh() == 0
            before = versioned(d.store(name))
            assert versioned(replica) == before
        assert replica.as_of_batch is not None and versioned(replica)[1] > 0


def test_a_read_that_the_app_overtook_reads_the_newest_version(spark: Any) -> None:
    """A reader that read the committed versions of one micro-batch and opens their files
    after the app ran two more (a small store: each task writes a new base every batch,
    and the batch after one collects the files it replaced) finds them gone, and reads
    again at the newest committed version: the newest state, whole, and no error."""
    from kspark.runtime.checkpoints import last_committed
    from kspark.runtime.stores import files
    from kspark_server import placement
    from kspark_server.taskfiles import TaskFiles, state_root

    b = StreamsBuilder()
    b.stream("in", key_type=str, value_type=int).group_by_key().count(
        materialized=Materialized.as_("counts")
    ).to_stream().to("out")
    cfg = StreamsConfig(
        application_id=f"go-{uuid.uuid4().hex[:8]}",
        num_partitions=2,
    )
    keys = [f"k{i}" for i in range(8)]
    with TopologyTestDriver(b.build(), cfg, session=spark, engine="spark") as d:
        src = d.create_input_topic("in", key_type=str, value_type=int)
        ckpt, output = d.app.checkpoint_location, d.app.compiled()
        batches = []
        for i in range(3):
            for k in keys:
                src.pipe_input(k, i, timestamp=1_000 * i)
            d.process()
            batches.append(last_committed(spark, ckpt))
        first, newest = batches[0], batches[-1]
        assert first is not None and newest is not None
        op = files.operator_of(spark, ckpt, output, "counts")
        assert op is not None
        gone = [
            TaskFiles(state_root(ckpt), "counts", placement.task_of(int(r[0])), r[1:], create=False)
            for r in files.group_states(spark, ckpt, op, first).collect()
        ]
        assert any(
            not all(os.path.exists(os.path.join(f.folder, n)) for n in f.named()) for f in gone
        ), "the app collected files of the first batch's versions"
        at, rows = files.changes(spark, ckpt, output, "counts", {}, first)
        assert at == newest
        assert sorted(map(tuple, rows)) == sorted(
            map(tuple, files.changes(spark, ckpt, output, "counts", {}, newest)[1])
        )
        assert d.store("counts").get("k0") == 3
