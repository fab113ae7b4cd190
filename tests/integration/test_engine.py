"""The stateful engine (state format 6): task placement, the executor-local store and its
rebuilds, and the refusal of another state format."""

from __future__ import annotations

import json
import os
import shutil
from datetime import timedelta
from typing import Any

import pytest

from kspark import StreamsBuilder, StreamsConfig, Topic
from kspark.errors import ObsoleteCheckpointError, StreamsAppError
from kspark.testing import TopologyTestDriver
from kspark_server import localstore, placement, stateenc

pytestmark = pytest.mark.spark

S = 1000


def test_task_keys_hash_as_spark_does(spark: Any) -> None:
    from pyspark.sql import functions as F

    rows = (
        spark.range(-300, 300)
        .select(F.col("id").cast("int").alias("i"))
        .select("i", F.hash("i").alias("h"))
        .collect()
    )
    assert all(placement.murmur3_int(r["i"]) == r["h"] for r in rows)


@pytest.mark.parametrize("n", [2, 3, 4, 7])
def test_each_task_runs_in_its_own_partition(spark: Any, n: int) -> None:
    """Spark's hash partitioning of the task keys (what the operator's groupBy does)
    puts task t in partition t: every partition works."""
    from pyspark.sql import functions as F

    from kspark.compiler.lowering.stateful import task_column

    df = spark.range(5000).select(F.concat(F.lit("k"), F.col("id").cast("string")).alias("key"))
    placed = (
        df.select(task_column("key", n).alias("ks_task"))
        .repartition(n, "ks_task")
        .select("ks_task", F.spark_partition_id().alias("p"))
        .distinct()
        .collect()
    )
    assert sorted((placement.task_of(r["ks_task"]), r["p"]) for r in placed) == [
        (t, t) for t in range(n)
    ]


def dedup_topology(interval_ms: int) -> Any:
    b = StreamsBuilder()
    b.stream(Topic.jsonl("in", "/unused"), key_type=str, value_type=str).deduplicate_by_key(
        timedelta(milliseconds=interval_ms)
    ).to(Topic.jsonl("out", "/unused"))
    return b.build()


def _local_dir(spark_server: Any, d: TopologyTestDriver) -> str:
    """Where the driver's app keeps its local stores (the driver's own folder)."""
    if spark_server is None:
        pytest.skip("needs the server's executors on this machine's disk")
    assert d.config.state_dir is not None
    return d.config.state_dir


def _run_batches(
    spark: Any,
    spark_server: Any,
    app_id: str,
    batches: list[list[tuple[str, str, int]]],
    between: Any,
) -> list[str]:
    """The batches through a dedup, calling ``between(local_state_dir)`` before each but
    the first."""
    cfg = StreamsConfig(application_id=app_id, num_partitions=2)
    with TopologyTestDriver(dedup_topology(10 * S), cfg, session=spark) as d:
        src = d.create_input_topic("in", key_type=str, value_type=str)
        sink = d.create_output_topic("out", key_type=str, value_type=str)
        for i, batch in enumerate(batches):
            if i:
                between(_local_dir(spark_server, d))
            for k, v, ts in batch:
                src.pipe_input(k, v, timestamp=ts)
            d.process()
        return sink.read_values()


BATCHES = [
    [("a", "a1", 1 * S), ("b", "b1", 2 * S), ("c", "c1", 3 * S)],
    [("a", "a2", 4 * S), ("b", "b2", 5 * S), ("d", "d1", 6 * S)],
    [("c", "c2", 7 * S), ("d", "d2", 30 * S), ("a", "a3", 31 * S)],
]
#: a, b, c first seen; repeats within 10 s dropped; d2 is 24 s after d1; a3 27 s after a1
EXPECTED = ["a1", "b1", "c1", "d1", "d2", "a3"]


@pytest.mark.cluster
def test_a_lost_local_store_is_rebuilt_from_the_checkpoint(
    spark: Any, spark_server: Any, app_id: str
) -> None:
    """A new executor (here: the local stores wiped between batches) finds no local store
    and rebuilds it from the durable base and log: nothing is forgotten."""

    def wipe(root: str) -> None:
        assert os.path.isdir(root), "the operator keeps its local stores here"
        for name in os.listdir(root):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)

    assert _run_batches(spark, spark_server, app_id, BATCHES, wipe) == EXPECTED
    # the driver kept the stores in its own folder, which it deleted when closed: nothing
    # is left under the server's own local-state root
    assert not os.path.exists(os.path.join(spark_server.local_state_dir, app_id))


@pytest.mark.cluster
def test_a_local_store_ahead_of_the_checkpoint_is_rolled_back(
    spark: Any, spark_server: Any, app_id: str
) -> None:
    """A failed batch attempt leaves the local store ahead of the committed state: its
    version no longer matches, so the task rebuilds it instead of trusting it."""

    def run_ahead(root: str) -> None:
        found = 0
        for dirpath, _, files in os.walk(root):
            if "data.mdb" not in files:
                continue
            store = localstore.TaskStore(dirpath)
            try:
                version = store.version
                assert version is not None
                # what an attempt that failed after its own writes leaves behind: one batch
                # ahead, and "d" seen at 5 s, which would drop d1 (6 s) if it were trusted
                poison = (stateenc.pack("d"), stateenc.pack([5 * S, 0]))
                store.apply([poison], store.scalars(), (version[0], version[1] + 1))
                found += 1
            finally:
                store.env.close()
        assert found, "the operator keeps its local stores here"

    assert _run_batches(spark, spark_server, app_id, BATCHES, run_ahead) == EXPECTED


@pytest.mark.cluster
def test_a_checkpoint_of_another_state_format_is_refused(
    spark: Any, app_id: str, tmp_path: Any
) -> None:
    from kspark import StreamsApp
    from kspark.runtime.checkpoints import current_generation, write_generation

    data = tmp_path / "in"
    data.mkdir()
    ckpt = str(tmp_path / "ckpt")

    def write(name: str, records: list[tuple[str, str, int]]) -> None:
        with open(data / name, "w") as f:
            for k, v, ts in records:
                f.write(json.dumps({"key": k, "value": v, "timestamp": ts}) + "\n")

    def app() -> Any:
        b = StreamsBuilder()
        b.stream(Topic.jsonl("in", str(data)), key_type=str, value_type=str).deduplicate_by_key(
            timedelta(seconds=10)
        ).to(Topic.jsonl("out", str(tmp_path / "out")))
        cfg = StreamsConfig(application_id=app_id, checkpoint_dir=ckpt, num_partitions=2)
        return StreamsApp(b.build(), cfg, session=spark)

    write("1.jsonl", BATCHES[0])
    app().run_until_caught_up(progress=False)
    # a checkpoint whose generation records no state format
    gen = current_generation(spark, ckpt)
    assert gen.state_format is not None
    import attrs

    write_generation(spark, ckpt, attrs.evolve(gen, state_format=None))
    write("2.jsonl", BATCHES[1])
    with pytest.raises(ObsoleteCheckpointError, match="new checkpoint_dir") as e:
        app().run_until_caught_up(progress=False)
    assert isinstance(e.value, StreamsAppError) and "state format unknown" in str(e.value)
    out = spark.read.json(str(tmp_path / "out")).select("value").collect()
    assert sorted(r["value"] for r in out) == ["a1", "b1", "c1"]  # batch 2 did not run


def rates_topology() -> Any:
    from kspark import Materialized

    b = StreamsBuilder()
    rates = b.table(
        Topic.jsonl("rates", "/unused"),
        key_type=str,
        value_type=str,
        materialized=Materialized.as_versioned("rates", timedelta(days=1)),
    )
    b.stream(Topic.jsonl("payments", "/unused"), key_type=str, value_type=str).join(
        rates, lambda amount, rate: f"{amount}@{rate}", value_type=str
    ).to(Topic.jsonl("out", "/unused"))
    return b.build()


def _rate(n: int, k: int) -> str:
    return f"rate-{n}-{k}-" + "x" * 40


@pytest.mark.cluster
@pytest.mark.extended  # about a minute; tests/unit/test_base_chunks.py covers the chunks
def test_a_base_of_several_chunks_restarts_reads_and_rescales_alike(
    spark: Any, spark_server: Any, app_id: str
) -> None:
    """State format 6: a task's base spans several chunks (the suite's chunks are 4
    KiB). A rebuild from them (local stores wiped), the store's readers (a lookup, as of a
    time, the versions, the count, a replica) and a rescale give the answers of the state
    itself."""
    from kspark.runtime.stores.files import group_states, operator_of

    n_keys = 300
    cfg = StreamsConfig(application_id=app_id, num_partitions=2)
    with TopologyTestDriver(rates_topology(), cfg, session=spark) as d:
        rates = d.create_input_topic("rates", key_type=str, value_type=str)
        pay = d.create_input_topic("payments", key_type=str, value_type=str)
        out = d.create_output_topic("out", key_type=str, value_type=str)
        # version n of key k from n * 10 s; payments join as of their time
        for k in range(n_keys):
            rates.pipe_input(f"c{k}", _rate(0, k), timestamp=k)
        d.process()
        for k in range(0, n_keys, 10):
            rates.pipe_input(f"c{k}", _rate(1, k), timestamp=10 * S + k)
        d.process()

        app = d.app
        ckpt = app.checkpoint_location
        op = operator_of(spark, ckpt, app.compiled(), "rates")
        assert op is not None
        chunks = group_states(spark, ckpt, op).select("ks_task", "base_chunks").collect()
        assert len(chunks) == 2 and all(r["base_chunks"] > 1 for r in chunks), chunks

        def answers(store: Any) -> Any:
            probe = [f"c{k}" for k in (0, 1, 10, 157, 290, 299)] + ["nope"]
            return (
                store.approximate_num_entries(),
                [store.get(k) for k in probe],
                [store.get(k, as_of=5 * S) for k in probe],
                [store.versions(k) for k in probe],
            )

        expected_get = [
            (_rate(1, k) if k % 10 == 0 else _rate(0, k), 10 * S + k if k % 10 == 0 else k)
            for k in (0, 1, 10, 157, 290, 299)
        ]
        before = answers(d.store("rates"))
        assert before[0] == n_keys
        assert [None if v is None else (v.value, v.timestamp) for v in before[1]] == [
            *expected_get,
            None,
        ]
        assert [v.value for v in before[2][:-1]] == [_rate(0, k) for k in (0, 1, 10, 157, 290, 299)]
        replica = app.replica("rates")
        assert answers(replica) == before

        # a rebuild from the chunks: a new executor finds no local store
        root = _local_dir(spark_server, d)
        assert os.listdir(root), "the operator keeps its local stores here"
        for name in os.listdir(root):
            shutil.rmtree(os.path.join(root, name), ignore_errors=True)
        for k in (0, 1, 157, 290):
            pay.pipe_input(f"c{k}", f"p{k}", timestamp=20 * S)
            pay.pipe_input(f"c{k}", f"old{k}", timestamp=5 * S)
        d.process()
        replica.refresh()
        assert answers(d.store("rates")) == before
        assert answers(replica) == before

        # most keys change: the batch writes a new base, whose chunks the replica follows
        for k in range(0, n_keys, 2):
            rates.pipe_input(f"c{k}", _rate(2, k), timestamp=30 * S + k)
        d.process()
        replica.refresh()
        before = answers(d.store("rates"))
        assert [v.value for v in before[1][:3]] == [_rate(2, 0), _rate(0, 1), _rate(2, 10)]
        assert answers(replica) == before

        report = d.rescale(3)
        assert {s.store: (s.entries_before, s.entries_after) for s in report.stores} == {
            "rates": (n_keys, n_keys)
        }
        for k in (10, 299):
            pay.pipe_input(f"c{k}", f"p{k}", timestamp=20 * S)
        d.process()
        assert answers(d.store("rates")) == before
        got = sorted(out.read_values())
    assert got == sorted(
        [f"p{k}@{_rate(1 if k % 10 == 0 else 0, k)}" for k in (0, 1, 157, 290)]
        + [f"old{k}@{_rate(0, k)}" for k in (0, 1, 157, 290)]
        + [f"p10@{_rate(1, 10)}", f"p299@{_rate(0, 299)}"]
    )
