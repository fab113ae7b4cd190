"""StreamsApp on file topics: exactly-once output across restarts, and the same output
for any split of the input into micro-batches."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from datetime import timedelta
from typing import Any

import pytest

from kspark import Materialized, StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.runtime.app import State
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark


@dataclasses.dataclass
class Event:
    id: str
    user: str
    n: int
    ts: int


def topology(base: str) -> Any:
    b = StreamsBuilder()
    (
        b.stream(
            Topic.jsonl(
                "events",
                os.path.join(base, "in"),
                layout="value",
                key_field="user",
                timestamp_field="ts",
            ),
            key_type=str,
            value_type=Event,
        )
        .deduplicate_by_key_value(lambda k, e: e.id, timedelta(seconds=30))
        .flat_map_values(lambda e: [e.n] * (e.n % 3), value_type=int)
        .to(Topic.jsonl("out", os.path.join(base, "out")))
    )
    return b.build()


def write(base: str, name: str, events: list[Event]) -> None:
    os.makedirs(os.path.join(base, "in"), exist_ok=True)
    tmp = os.path.join(base, f".{name}")
    with open(tmp, "w") as f:
        for e in events:
            f.write(json.dumps(dataclasses.asdict(e)) + "\n")
    os.replace(tmp, os.path.join(base, "in", name))


def events(start: int, count: int) -> list[Event]:
    out = []
    for i in range(start, start + count):
        out.append(Event(f"e{i % 40}", f"u{i % 5}", i % 7, 1000 * i))
    return out


def read_out(spark: Any, base: str) -> list[tuple[Any, ...]]:
    rows = spark.read.json(os.path.join(base, "out")).select("key", "value", "timestamp").collect()
    return sorted(tuple(r) for r in rows)


def test_restart_from_checkpoint_is_exactly_once(spark: Any, app_id: str) -> None:
    with tempfile.TemporaryDirectory() as one, tempfile.TemporaryDirectory() as two:
        # uninterrupted: everything at once
        write(one, "a.jsonl", events(0, 60))
        write(one, "b.jsonl", events(60, 60))
        cfg1 = StreamsConfig(
            application_id=app_id, checkpoint_dir=os.path.join(one, "chk"), num_partitions=2
        )
        report = StreamsApp(topology(one), cfg1, session=spark).run_until_caught_up()
        assert report.input_records == 120
        # interrupted: a first run, a new app object on the same checkpoint, a second run
        cfg2 = cfg1.with_(checkpoint_dir=os.path.join(two, "chk"))
        write(two, "a.jsonl", events(0, 60))
        app = StreamsApp(topology(two), cfg2, session=spark)
        app.run_until_caught_up()
        assert app.state is State.NOT_RUNNING
        write(two, "b.jsonl", events(60, 60))
        again = StreamsApp(topology(two), cfg2, session=spark)
        assert again.run_until_caught_up().input_records == 60  # nothing read twice
        assert again.run_until_caught_up().input_records == 0
        assert read_out(spark, one) == read_out(spark, two)
        assert len(read_out(spark, two)) > 0


@dataclasses.dataclass
class Rate:
    rate: float


def test_same_output_for_any_micro_batch_split(spark: Any, app_id: str) -> None:
    """The driver's records through dedup, a versioned join and a fan-out, piped as one
    micro-batch and as five: the outputs must be equal."""

    def topo() -> Any:
        b = StreamsBuilder()
        rates = b.table(
            Topic.jsonl("rates", "/unused"),
            key_type=str,
            value_type=Rate,
            materialized=Materialized.as_versioned("rates", timedelta(hours=1)),
        )
        (
            b.stream(Topic.jsonl("pay", "/unused"), key_type=str, value_type=int)
            .deduplicate_by_key_value(lambda k, v: v, timedelta(milliseconds=50))
            .left_join(rates, lambda v, r: v * (r.rate if r else -1.0), value_type=float)
            .flat_map_values(lambda v: [v, v + 0.5] if v > 100 else [v], value_type=float)
            .to(Topic.jsonl("out", "/unused"))
        )
        return b.build()

    pay = [(f"c{i % 3}", (i * 37) % 11 * 20, 10 * i + (i % 4) * 7) for i in range(40)]
    rates = [(f"c{i % 3}", Rate(1.0 + i / 10), 40 * i) for i in range(10)]
    outputs = []
    for split in (1, 5):
        cfg = StreamsConfig(application_id=f"{app_id}-{split}", num_partitions=2)
        with TopologyTestDriver(topo(), cfg, session=spark) as d:
            p = d.create_input_topic("pay", key_type=str, value_type=int)
            r = d.create_input_topic("rates", key_type=str, value_type=Rate)
            size = len(pay) // split
            for i in range(split):
                # table updates come first in each batch: as-of lookups see them in order
                for k, v, ts in rates[i * len(rates) // split : (i + 1) * len(rates) // split]:
                    r.pipe_input(k, v, timestamp=ts)
                for k, v, ts in pay[i * size : (i + 1) * size]:
                    p.pipe_input(k, v, timestamp=ts)
                d.process()
            outputs.append(
                d.create_output_topic("out", key_type=str, value_type=float).read_key_values()
            )
    assert outputs[0] == outputs[1]
    assert len(outputs[0]) > 20


def test_an_app_starts_while_pyspark_active_session_is_a_dead_one(
    spark: Any, spark_server: Any, app_id: str
) -> None:
    """After a server restart, pyspark's active session is the old, dead one. An app on a
    new session must not reach it: a schema given to pyspark as DDL text is parsed through
    the active session (its start failed with NO_ACTIVE_SESSION)."""
    if spark_server is None:
        pytest.skip("needs the embedded server")
    from pyspark.errors.utils import is_debugging_enabled
    from pyspark.sql.connect.session import SparkSession

    # a process that restarts its app has used pyspark before, with a live session:
    # pyspark read (and cached) its debugging setting then
    is_debugging_enabled()
    dead = spark_server.session()
    dead.client.release_session()  # the server forgets it; the client still holds it
    saved = (SparkSession._default_session, getattr(SparkSession._active_session, "session", None))
    SparkSession._default_session = dead
    SparkSession._active_session.session = dead
    try:
        with tempfile.TemporaryDirectory() as base:
            write(base, "a.jsonl", events(0, 20))
            cfg = StreamsConfig(
                application_id=app_id, checkpoint_dir=os.path.join(base, "chk"), num_partitions=2
            )
            report = StreamsApp(topology(base), cfg, session=spark).run_until_caught_up()
            assert report.input_records == 20
    finally:
        SparkSession._default_session, SparkSession._active_session.session = saved


def test_a_new_session_is_the_active_one(spark: Any, spark_server: Any) -> None:
    """A session kspark hands out becomes the thread's active session, also when another
    one is active: after a server restart the old one is dead, and pyspark builds an
    operator's UDFs through the active session (the fail-over bench resumes that way)."""
    from pyspark.sql import SparkSession

    if spark_server is None:
        pytest.skip("needs the embedded server")
    assert spark is not None
    fresh = spark_server.session()
    try:
        assert SparkSession.getActiveSession() is fresh
        # a UDF's schema is parsed through the active session
        assert fresh.range(3).mapInArrow(lambda it: it, "id long").count() == 3
    finally:
        fresh.stop()


def test_read_output_reads_where_an_app_with_relative_paths_wrote(
    spark: Any, app_id: str, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Relative paths name folders of the client's working directory, for the app and for
    ``app.read_output``; the same relative path given to Spark directly is the server's."""
    from pyspark.errors import AnalysisException

    monkeypatch.chdir(tmp_path)
    write(str(tmp_path / "data"), "a.jsonl", events(0, 30))
    cfg = StreamsConfig(application_id=app_id, checkpoint_dir="chk", num_partitions=2)
    app = StreamsApp(topology("data"), cfg, session=spark)
    report = app.run_until_caught_up()
    assert report.input_records == 30
    rows = app.read_output("out").select("key", "value", "timestamp").collect()
    assert rows and sorted(tuple(r) for r in rows) == read_out(spark, str(tmp_path / "data"))
    with pytest.raises(AnalysisException, match="PATH_NOT_FOUND"):
        spark.read.json("data/out").collect()
