"""Crash safety: the Spark Connect server is killed (SIGKILL, the whole process group with
its Python workers) in the middle of a micro-batch, restarted, and the app resumes from its
checkpoint. Every input record's result (deduplicated, joined as of its time, or sent to
the dead-letter queue) must appear exactly once.

These tests kill the session's server, so they run last (tests/conftest.py).
"""

from __future__ import annotations

import glob
import json
import os
import time
from collections import Counter
from datetime import timedelta
from typing import Any

import pytest

from kspark import Deduplicated, Materialized, StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.errors import DeadLetterQueueProcessingExceptionHandler

pytestmark = [pytest.mark.spark, pytest.mark.slow]

DAY = timedelta(days=1)
BATCHES = 3


def hold_if_armed(crash_dir: str, point: str, value: str) -> None:
    """Block this worker while ``armed-<point>-<value>`` exists, after saying so: the test
    kills the server while it waits, in the middle of the micro-batch."""
    armed = os.path.join(crash_dir, f"armed-{point}-{value}")
    if os.path.exists(armed):
        with open(os.path.join(crash_dir, f"held-{point}-{value}"), "w"):
            pass
        while os.path.exists(armed):
            time.sleep(0.05)


def topology(data: str, crash_dir: str) -> Any:
    def mark(value: str) -> str:
        hold_if_armed(crash_dir, "chain", value)
        return value

    def convert(payment: str, rate: str | None) -> str:
        hold_if_armed(crash_dir, "join", payment)
        if payment.startswith("poison"):
            raise ValueError(f"poison payment {payment}")
        return f"{payment}@{rate}"

    b = StreamsBuilder()
    rates = b.table(
        Topic.jsonl("rates", f"{data}/rates"),
        key_type=str,
        value_type=str,
        materialized=Materialized.as_versioned("rates", DAY),
    )
    (
        b.stream(Topic.jsonl("payments", f"{data}/payments"), key_type=str, value_type=str)
        .map_values(mark, value_type=str)
        .deduplicate_by_key(DAY, Deduplicated.as_("dedup"))
        .left_join(rates, convert, value_type=str)
        .to(Topic.jsonl("out", f"{data}/out"))
    )
    return b.build()


def write_inputs(data: str) -> None:
    os.makedirs(f"{data}/rates")
    with open(f"{data}/rates/rates.json", "w") as f:
        for k in range(8):
            f.write(json.dumps({"key": f"c{k}", "value": f"r{k}", "timestamp": 0}) + "\n")
    os.makedirs(f"{data}/payments")
    for n in range(BATCHES):  # one file per micro-batch (max_files_per_trigger=1)
        with open(f"{data}/payments/p{n}.json", "w") as f:
            for k in range(8):
                ts = 1 + n * 100 + k
                f.write(json.dumps({"key": f"c{k}", "value": f"p{n}-{k}", "timestamp": ts}) + "\n")
                f.write(
                    json.dumps({"key": f"c{k}", "value": f"dup{n}-{k}", "timestamp": ts}) + "\n"
                )
            f.write(
                json.dumps({"key": f"x{n}", "value": f"poison{n}", "timestamp": n * 100 + 50})
                + "\n"
            )
        # the file source takes the oldest file first
        os.utime(f"{data}/payments/p{n}.json", (1_700_000_000 + n, 1_700_000_000 + n))


def config(app_id: str, data: str) -> StreamsConfig:
    return StreamsConfig(
        application_id=app_id,
        checkpoint_dir=f"{data}/checkpoint",
        num_partitions=2,
        max_files_per_trigger=1,
        processing_exception_handler=DeadLetterQueueProcessingExceptionHandler(),
        dead_letter_queue_topic=Topic.jsonl("dlq", f"{data}/dlq"),
    )


def read_topic(path: str) -> list[dict[str, Any]]:
    rows = []
    for f in sorted(glob.glob(f"{path}/batch_id=*/*.json")):
        with open(f) as fh:
            rows.extend(json.loads(line) for line in fh if line.strip())
    return rows


def results(data: str) -> tuple[Counter[tuple[Any, ...]], Counter[tuple[Any, ...]]]:
    out = Counter((r["key"], r["value"]) for r in read_topic(f"{data}/out"))
    dead = Counter((r.get("key"), r.get("value")) for r in read_topic(f"{data}/dlq"))
    return out, dead


def wait_for(path: str, app: StreamsApp, seconds: float = 180) -> None:
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise AssertionError(f"the app never reached the kill point {os.path.basename(path)}")
        if app.query is not None and not app.query.isActive:
            raise AssertionError(f"the app stopped before the kill point: {app.query.exception()}")
        time.sleep(0.1)


@pytest.fixture(scope="module")
def reference(
    spark: Any, tmp_path_factory: pytest.TempPathFactory
) -> tuple[Counter[Any], Counter[Any]]:
    data = str(tmp_path_factory.mktemp("crash-ref"))
    write_inputs(data)
    StreamsApp(
        topology(data, f"{data}/none"), config("crash-ref", data), session=spark
    ).run_until_caught_up()
    out, dead = results(data)
    # the semantics, independently of kspark: the first payment per key wins, as of rate r<k>
    assert (
        out
        == Counter(
            {(f"c{k}", f"p0-{k}@r{k}"): 1 for k in range(8)}
            | {(f"x{n}", None): 0 for n in range(BATCHES)}
        )
        - Counter()
    )
    assert sum(dead.values()) == BATCHES
    return out, dead


@pytest.mark.parametrize(
    ("point", "value"), [("chain", "p0-3"), ("join", "p0-5"), ("join", "poison2")]
)
def test_kill_9_mid_batch_then_resume_gives_each_result_once(
    spark_server: Any,
    reference: tuple[Counter[Any], Counter[Any]],
    tmp_path: Any,
    point: str,
    value: str,
) -> None:
    if spark_server is None:
        pytest.skip("needs the embedded server (it is killed and restarted)")
    data, crash_dir = str(tmp_path / "data"), str(tmp_path / "crash")
    os.makedirs(crash_dir)
    write_inputs(data)
    topo = topology(data, crash_dir)
    armed = os.path.join(crash_dir, f"armed-{point}-{value}")
    with open(armed, "w"):
        pass
    app = StreamsApp(topo, config("crash", data), session=spark_server.session())
    app.start()
    wait_for(os.path.join(crash_dir, f"held-{point}-{value}"), app)
    spark_server.kill()
    spark_server.start(same_port=True)
    os.remove(armed)
    resumed = StreamsApp(topo, config("crash", data), session=spark_server.session())
    resumed.run_until_caught_up()
    assert results(data) == reference


# -- the fault test: many small batches, the server killed at seeded random points --------

FAULT_BATCHES = 10
FAULT_KILLS = 10


def write_fault_inputs(data: str) -> None:
    """Rates that change over time (a versioned join answers as of each payment), and
    one payments file per micro-batch with duplicates and a poison payment each."""
    os.makedirs(f"{data}/rates")
    with open(f"{data}/rates/rates.json", "w") as f:
        # in time order: a partition is read in offset order, so a later line with an
        # older timestamp would wait behind the newer ones (Kafka's timestamp sync)
        for v in range(3):
            for k in range(4):
                ts = v * 300
                f.write(json.dumps({"key": f"c{k}", "value": f"r{k}.{v}", "timestamp": ts}) + "\n")
    os.makedirs(f"{data}/payments")
    for n in range(FAULT_BATCHES):
        with open(f"{data}/payments/p{n}.json", "w") as f:
            for k in range(4):
                ts = n * 100 + k + 1
                for value in (f"p{n}-{k}", f"p{n}-{k}", f"q{n}-{k}"):  # an exact duplicate
                    f.write(json.dumps({"key": f"c{k}-{n % 3}", "value": value, "timestamp": ts}))
                    f.write("\n")
            f.write(json.dumps({"key": "x", "value": f"poison{n}", "timestamp": n * 100 + 50}))
            f.write("\n")
        os.utime(f"{data}/payments/p{n}.json", (1_700_000_000 + n, 1_700_000_000 + n))


def fault_topology(data: str, crash_dir: str) -> Any:
    """Deduplication, then the versioned join (two sub-topologies: the dedup's output
    crosses an internal topic)."""

    def mark(value: str) -> str:
        hold_if_armed(crash_dir, "chain", value)
        return value

    def rekey(key: str, value: str) -> str:
        return key.split("-")[0]  # to the currency: the key the rates have

    def convert(payment: str, rate: str | None) -> str:
        hold_if_armed(crash_dir, "join", payment)
        if payment.startswith("poison"):
            raise ValueError(f"poison payment {payment}")
        return f"{payment}@{rate}"

    b = StreamsBuilder()
    rates = b.table(
        Topic.jsonl("rates", f"{data}/rates"),
        key_type=str,
        value_type=str,
        materialized=Materialized.as_versioned("rates", DAY),
    )
    payments = b.stream(
        Topic.jsonl("payments", f"{data}/payments"), key_type=str, value_type=str
    ).map_values(mark, value_type=str)
    payments = payments.deduplicate_by_key_value(lambda k, v: v, DAY, Deduplicated.as_("dedup"))
    (
        payments.select_key(rekey, key_type=str)
        .left_join(rates, convert, value_type=str)
        .to(Topic.jsonl("out", f"{data}/out"))
    )
    return b.build()


def fault_expected() -> tuple[Counter[tuple[Any, ...]], Counter[tuple[Any, ...]]]:
    """The results by the semantics alone: each distinct payment once, joined with its currency's rate as of its time; each poison
    payment once in the dead-letter queue."""
    out: Counter[tuple[Any, ...]] = Counter()
    for n in range(FAULT_BATCHES):
        for k in range(4):
            ts = n * 100 + k + 1
            rate = f"r{k}.{min(ts // 300, 2)}"
            out[(f"c{k}", f"p{n}-{k}@{rate}")] += 1
            out[(f"c{k}", f"q{n}-{k}@{rate}")] += 1
    # dead letters hold the record's key and value as JSON text
    dead = Counter({('"x"', f'"poison{n}"'): 1 for n in range(FAULT_BATCHES)})
    return out, dead


@pytest.mark.fault
def test_killed_at_seeded_random_points_each_result_appears_once(
    spark_server: Any, tmp_path: Any
) -> None:
    """Kafka's exactly-once system tests in spirit: an app with deduplication, a versioned
    join, a dead-letter queue and a file sink runs over many small batches while its
    server is killed (SIGKILL) at FAULT_KILLS seeded random points; the verifier checks
    that every input's result appears exactly once and nothing is lost."""
    import random

    if spark_server is None:
        pytest.skip("needs the embedded server (it is killed and restarted)")
    # the reference: the same app, never killed, must give what the semantics say
    ref = str(tmp_path / "ref")
    write_fault_inputs(ref)
    StreamsApp(
        fault_topology(ref, f"{ref}/none"),
        config("fault-ref", ref),
        session=spark_server.session(),
    ).run_until_caught_up()
    want = fault_expected()
    assert results(ref) == want
    data, crash_dir = str(tmp_path / "data"), str(tmp_path / "crash")
    os.makedirs(crash_dir)
    write_fault_inputs(data)
    topo = fault_topology(data, crash_dir)
    # points in processing order: a payment's chain step, then its join (poison included)
    points = [
        (point, f"{kind}{n}-{k}")
        for n in range(FAULT_BATCHES)
        for k in range(4)
        for kind in ("p", "q")
        for point in ("chain", "join")
    ]
    rng = random.Random(20261123)
    kills = sorted(rng.sample(range(len(points)), FAULT_KILLS))
    cfg = config("fault", data)
    done = 0
    for i in kills:
        point, value = points[i]
        armed = os.path.join(crash_dir, f"armed-{point}-{value}")
        with open(armed, "w"):
            pass
        app = StreamsApp(topo, cfg, session=spark_server.session())
        app.start()
        wait_for(os.path.join(crash_dir, f"held-{point}-{value}"), app)
        spark_server.kill()
        spark_server.start(same_port=True)
        os.remove(armed)
        os.remove(os.path.join(crash_dir, f"held-{point}-{value}"))
        done += 1
    assert done == FAULT_KILLS
    StreamsApp(topo, cfg, session=spark_server.session()).run_until_caught_up()
    assert results(data) == want
