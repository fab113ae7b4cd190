"""State-preserving rescale (the learner-task idea): N=2 -> M=4 -> M=1 between micro-batches
gives the same output as no rescale, with every store's entries carried over."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from kspark import (
    Deduplicated,
    Materialized,
    StreamsBuilder,
    StreamsConfig,
    Topic,
)
from kspark.errors import ConfigError, DeadLetterQueueProcessingExceptionHandler, RescaleError
from kspark.testing import TopologyTestDriver

pytestmark = pytest.mark.spark

DAY = timedelta(days=1)


def convert(amount: str, rate: str | None) -> str:
    if amount == "poison":
        raise ValueError("a poison payment")
    return f"{amount}@{rate}"


def topology() -> Any:
    b = StreamsBuilder()
    rates = b.table(
        Topic.jsonl("rates", "/unused"),
        key_type=str,
        value_type=str,
        materialized=Materialized.as_versioned("rates", DAY),
    )
    (
        b.stream(Topic.jsonl("payments", "/unused"), key_type=str, value_type=str)
        # long interval and retention: the answers do not depend on stream time, which is
        # per task and so is not comparable across partitionings
        .deduplicate_by_key_value(
            lambda k, v: v, DAY, Deduplicated.as_("dedup").with_store_name("seen")
        )
        .left_join(rates, convert, value_type=str)
        .to(Topic.jsonl("out", "/unused"))
    )
    return b.build()


def batches() -> list[list[tuple[str, str, str | None, int]]]:
    """Three micro-batches of (topic, key, value, ts). Each batch resends the payments of
    the one before, which only the dedup state written before a rescale can catch, and
    the join needs rate versions written before it."""
    out = []
    for n in range(3):
        batch: list[tuple[str, str, str | None, int]] = []
        for k in range(12):
            key, t = f"c{k}", n * 1000 + k * 10
            batch.append(("rates", key, f"r{n}-{k}", t))
            batch.append(("payments", key, f"p{n}-{k}", t + 5))
            batch.append(("payments", key, f"p{n}-{k}", t + 7))  # a duplicate in the batch
            if n:
                batch.append(("payments", key, f"p{n - 1}-{k}", t + 6))  # and of the batch before
        batch.append(("payments", f"x{n}", "poison", n * 1000 + 500))
        out.append(batch)
    return out


def run(
    spark: Any, app_id: str, rescales: dict[int, int]
) -> tuple[list[Any], list[Any], list[Any]]:
    cfg = StreamsConfig(
        application_id=app_id,
        num_partitions=2,
        processing_exception_handler=DeadLetterQueueProcessingExceptionHandler(),
        dead_letter_queue_topic=Topic.jsonl("dlq", "/unused"),
    )
    reports = []
    with TopologyTestDriver(topology(), cfg, session=spark) as d:
        pay = d.create_input_topic("payments", key_type=str, value_type=str)
        rates = d.create_input_topic("rates", key_type=str, value_type=str)
        for i, batch in enumerate(batches()):
            if i in rescales:
                reports.append(d.rescale(rescales[i]))
            for topic, key, value, ts in batch:
                (pay if topic == "payments" else rates).pipe_input(key, value, timestamp=ts)
            d.process()
        out = sorted(
            (r.key, r.value, r.timestamp)
            for r in d.create_output_topic("out", key_type=str, value_type=str).read_records()
        )
        dead = sorted((r["key"], r["offset"] is not None) for r in d.dead_letter_topic().read_raw())
    return out, dead, reports


@pytest.mark.cluster
def test_rescale_round_trip_keeps_the_output(spark: Any, app_id: str) -> None:
    expected, expected_dead, _ = run(spark, app_id + "-ref", {})
    got, dead, reports = run(spark, app_id, {1: 4, 2: 1})
    # the reference is what the semantics say: one output per first-seen key, as of its time
    assert expected == sorted(
        (f"c{k}", f"p{n}-{k}@r{n}-{k}", n * 1000 + k * 10 + 5) for n in range(3) for k in range(12)
    )
    assert len(expected_dead) == 3
    assert got == expected
    assert dead == expected_dead
    first, second = reports
    assert (first.from_partitions, first.to_partitions, second.to_partitions) == (2, 4, 1)
    for report in reports:
        by_store = {s.store: s for s in report.stores}
        assert set(by_store) == {"seen", "rates"}
        assert all(s.entries_before == s.entries_after > 0 for s in report.stores)
    assert {s.store: s.entries_after for s in first.stores} == {"seen": 13, "rates": 12}
    assert {s.store: s.entries_after for s in second.stores} == {"seen": 26, "rates": 12}
    assert [s.tasks_after for s in second.stores] == [1, 1]
    # each process() runs three micro-batches: the dedup's, the join's (reading the
    # dedup's internal topic) and the sink's (reading the join's)
    assert second.resumes_after_batch == 5


def test_rescale_refuses_what_it_cannot_do(spark: Any, app_id: str) -> None:
    cfg = StreamsConfig(application_id=app_id, num_partitions=2)
    with TopologyTestDriver(topology(), cfg, session=spark) as d:
        with pytest.raises(RescaleError, match="no committed micro-batch"):
            d.rescale(4)
        d.create_input_topic("payments", key_type=str, value_type=str).pipe_input(
            "a", "1", timestamp=1
        )
        d.process()
        with pytest.raises(RescaleError, match="already has 2 partitions"):
            d.rescale(2)
        with pytest.raises(RescaleError, match="positive"):
            d.rescale(0)
        d.rescale(3)
        # the rescaled checkpoint refuses a config that still says 2 partitions
        from kspark import StreamsApp

        stale = StreamsApp(d.topology, d.config.with_(num_partitions=2), session=spark)
        with pytest.raises(ConfigError, match="num_partitions=3"):
            stale.run_until_caught_up()


CLI_MODULE = """
from kspark import StreamsBuilder, Topic
from datetime import timedelta

def topology():
    b = StreamsBuilder()
    (b.stream(Topic.jsonl("in", {data!r} + "/in"), key_type=str, value_type=str)
      .deduplicate_by_key(timedelta(days=1))
      .to(Topic.jsonl("out", {data!r} + "/out")))
    return b.build()
"""


def test_rescale_command(
    spark_server: Any,
    tmp_path: Any,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import json
    import os

    from kspark.cli import main

    if spark_server is None:
        pytest.skip("needs the embedded server's URL")
    data = str(tmp_path / "data")
    os.makedirs(f"{data}/in")
    (tmp_path / "cli_rescale_app.py").write_text(CLI_MODULE.format(data=data))
    monkeypatch.chdir(tmp_path)

    def write(name: str, keys: list[str]) -> None:
        with open(f"{data}/in/{name}.json", "w") as f:
            for k in keys:
                f.write(json.dumps({"key": k, "value": name, "timestamp": 1}) + "\n")

    def config(partitions: int) -> str:
        path = str(tmp_path / f"cfg{partitions}.json")
        with open(path, "w") as f:
            json.dump({"checkpoint_dir": f"{data}/chk", "num_partitions": partitions}, f)
        return path

    common = ["--remote", spark_server.url, "--app-id", "cli-rescale"]
    write("a", ["k1", "k2", "k3"])
    assert main(["run", "cli_rescale_app:topology", "--config", config(2), *common]) == 0
    assert (
        main(
            [
                "rescale",
                "cli_rescale_app:topology",
                "--partitions",
                "3",
                "--config",
                config(2),
                *common,
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert "num_partitions=3" in out
    write("b", ["k1", "k4"])  # k1 is a duplicate only the moved state knows
    assert main(["run", "cli_rescale_app:topology", "--config", config(2), *common]) == 1  # refused
    assert "num_partitions=3" in capsys.readouterr().err
    assert main(["run", "cli_rescale_app:topology", "--config", config(3), *common]) == 0
    rows = []
    for root, _, files in os.walk(f"{data}/out"):
        for name in files:
            if name.endswith(".json"):
                with open(os.path.join(root, name)) as f:
                    rows += [json.loads(line)["key"] for line in f if line.strip()]
    assert sorted(rows) == ["k1", "k2", "k3", "k4"]


def _running_app(base: Any, app_id: str, spark: Any) -> Any:
    import json

    from kspark import StreamsApp

    (base / "in").mkdir()
    with open(base / "in" / "a.jsonl", "w") as f:
        for k in ("a", "b", "c"):
            f.write(json.dumps({"key": k, "value": k, "timestamp": 1}) + "\n")
    b = StreamsBuilder()
    (
        b.stream(Topic.jsonl("in", str(base / "in")), key_type=str, value_type=str)
        .deduplicate_by_key(DAY)
        .to(Topic.jsonl("out", str(base / "out")))
    )
    cfg = StreamsConfig(application_id=app_id, checkpoint_dir=str(base / "chk"), num_partitions=2)
    return b.build(), cfg, StreamsApp(b.build(), cfg, session=spark)


def test_rescale_refuses_an_app_running_in_another_session(
    spark: Any, spark_url: str, app_id: str, tmp_path: Any
) -> None:
    from kspark import StreamsApp, connect

    topo, cfg, running = _running_app(tmp_path, app_id, spark)
    running.start()
    other = connect(spark_url)  # a second session: spark.streams does not show the app
    try:
        running.query.processAllAvailable()  # a batch ran: the run's lease is in place
        assert not any(q.name == app_id for q in other.streams.active)
        with pytest.raises(RescaleError, match=f"app {app_id} is running: its lease"):
            StreamsApp(topo, cfg, session=other).rescale(4, progress=False)
        running.stop()  # says its run ended: another session may rescale at once
        report = StreamsApp(topo, cfg, session=other).rescale(4, progress=False)
        assert report.to_partitions == 4
    finally:
        running.stop()
        other.stop()


def test_two_rescales_do_not_run_at_once(spark: Any, app_id: str, tmp_path: Any) -> None:
    from kspark.runtime.lease import RescaleLock

    _topo, cfg, app = _running_app(tmp_path, app_id, spark)
    app.run_until_caught_up(progress=False)
    with RescaleLock(spark, cfg.checkpoint_dir, app_id):  # another rescale holds the lock
        with pytest.raises(RescaleError, match="another rescale"):
            app.rescale(3, progress=False)
    assert app.rescale(3, progress=False).to_partitions == 3  # the lock was released
