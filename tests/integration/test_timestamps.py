"""Invalid timestamps (null or negative) under StreamsConfig(timestamp_policy=...), after
Kafka Streams' timestamp extractors: fail naming the record, skip and count (and
dead-letter), or use the partition's time."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
from datetime import timedelta
from typing import Any

import pytest

from kspark import StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.errors import StreamsAppError

pytestmark = pytest.mark.spark

SOURCE = "KSTREAM-SOURCE-0000000000"


@dataclasses.dataclass
class Click:
    id: str
    page: str
    ts: int | None


LINES = [
    {"id": "a", "page": "p1", "ts": 100},
    {"id": "b", "page": "p2", "ts": None},  # null
    {"id": "c", "page": "p3", "ts": -1},  # negative
    {"id": "d", "page": "p4", "ts": 200},
    {"id": "e", "page": "p5", "ts": -7},
]


def _app(base: str, app_id: str, stateful: bool, lines: list[Any], **cfg: Any) -> StreamsApp:
    os.makedirs(os.path.join(base, "in"), exist_ok=True)
    with open(os.path.join(base, "in", "a.jsonl"), "w") as f:
        f.writelines(json.dumps(line) + "\n" for line in lines)
    b = StreamsBuilder()
    s = b.stream(
        Topic.jsonl("in", os.path.join(base, "in"), layout="value", timestamp_field="ts"),
        value_type=Click,
    )
    if stateful:  # a stateful operator: where a timestamp decides what happens
        s = s.select_key(lambda k, c: c.id, key_type=str).deduplicate_by_key(timedelta(seconds=1))
    s.to(Topic.jsonl("out", os.path.join(base, "out")))
    config = StreamsConfig(
        application_id=app_id, checkpoint_dir=os.path.join(base, "chk"), num_partitions=1, **cfg
    )
    return StreamsApp(b.build(), config)


def _out(spark: Any, base: str) -> list[tuple[str, int]]:
    rows = spark.read.json(os.path.join(base, "out")).collect()
    return sorted((r.value.id, r.timestamp) for r in rows)


def test_the_default_fails_naming_the_source_and_the_record(spark: Any, app_id: str) -> None:
    with tempfile.TemporaryDirectory() as base:
        app = _app(base, app_id, False, LINES)
        app._session = spark
        with pytest.raises(StreamsAppError, match="KSPARK_INVALID_TIMESTAMP") as e:
            app.run_until_caught_up()
        assert SOURCE in str(e.value) and "timestamp_policy" in str(e.value)


@pytest.mark.parametrize("dead", [False, True], ids=["skip", "skip-dlq"])
def test_skip_drops_and_counts_them(spark: Any, app_id: str, dead: bool) -> None:
    with tempfile.TemporaryDirectory() as base:
        extra: dict[str, Any] = {}
        if dead:
            extra = {
                "dead_letter_queue_topic": Topic.jsonl("dlq", os.path.join(base, "dlq")),
                "dead_letter_dropped_records": True,
            }
        app = _app(base, app_id, True, LINES, timestamp_policy="skip", **extra)
        app._session = spark
        app.run_until_caught_up()
        assert [k for k, _ in _out(spark, base)] == ["a", "d"]
        m = app.metrics()
        assert m.dropped_by_reason() == {(SOURCE, "invalid-timestamp"): 3}
        if dead:
            rows = spark.read.json(os.path.join(base, "dlq")).collect()
            got = sorted((json.loads(r.value)["id"], r.timestamp) for r in rows)
            assert got == [("b", None), ("c", -1), ("e", -7)]
            assert m.dead_letter_records == 3


def test_use_partition_time_gives_them_the_partitions_time(spark: Any, app_id: str) -> None:
    with tempfile.TemporaryDirectory() as base:
        app = _app(base, app_id, True, LINES, timestamp_policy="use-partition-time")
        app._session = spark
        app.run_until_caught_up()
        assert _out(spark, base) == [("a", 100), ("b", 100), ("c", 100), ("d", 200), ("e", 200)]


def test_use_partition_time_fails_while_the_partition_has_no_time(spark: Any, app_id: str) -> None:
    with tempfile.TemporaryDirectory() as base:
        app = _app(base, app_id, True, LINES[1:], timestamp_policy="use-partition-time")
        app._session = spark
        with pytest.raises(StreamsAppError, match="no partition time"):
            app.run_until_caught_up()


# -- the envelope layout: a null or missing "timestamp" is invalid too -------------------
ENVELOPE = [
    '{"key": "a", "value": 1, "timestamp": 100}',
    '{"key": "b", "value": 2, "timestamp": null}',  # null
    '{"key": "c", "value": 3}',  # missing
    '{"key": "d", "value": 4, "timestamp": 200}',
]


def _envelope_app(base: str, app_id: str, typed: bool = True, **cfg: Any) -> StreamsApp:
    os.makedirs(os.path.join(base, "in"), exist_ok=True)
    with open(os.path.join(base, "in", "e.jsonl"), "w") as f:
        f.writelines(line + "\n" for line in ENVELOPE)
    b = StreamsBuilder()
    types: dict[str, Any] = {"key_type": str, "value_type": int} if typed else {}
    (
        b.stream(Topic.jsonl("in", os.path.join(base, "in")), **types)
        .deduplicate_by_key(timedelta(seconds=1))
        .to(Topic.jsonl("out", os.path.join(base, "out")))
    )
    config = StreamsConfig(
        application_id=app_id, checkpoint_dir=os.path.join(base, "chk"), num_partitions=1, **cfg
    )
    return StreamsApp(b.build(), config)


def _envelope_out(spark: Any, base: str) -> list[tuple[str, int]]:
    rows = spark.read.json(os.path.join(base, "out")).collect()
    return sorted((r.key, r.timestamp) for r in rows)


def test_an_envelope_without_a_timestamp_fails_naming_the_line(spark: Any, app_id: str) -> None:
    with tempfile.TemporaryDirectory() as base:
        app = _envelope_app(base, app_id)
        app._session = spark
        with pytest.raises(StreamsAppError, match="KSPARK_INVALID_TIMESTAMP") as e:
            app.run_until_caught_up()
        text = str(e.value)
        assert SOURCE in text and "(null)" in text and "e.jsonl" in text
        assert "line 2 of" in text or "line 3 of" in text


@pytest.mark.parametrize("typed", [True, False], ids=["typed", "dynamic"])
def test_an_envelope_without_a_timestamp_is_skipped_and_dead_lettered(
    spark: Any, app_id: str, typed: bool
) -> None:
    with tempfile.TemporaryDirectory() as base:
        app = _envelope_app(
            base,
            app_id,
            typed,
            timestamp_policy="skip",
            dead_letter_queue_topic=Topic.jsonl("dlq", os.path.join(base, "dlq")),
            dead_letter_dropped_records=True,
        )
        app._session = spark
        app.run_until_caught_up()
        assert _envelope_out(spark, base) == [("a", 100), ("d", 200)]
        assert app.metrics().dropped_by_reason() == {(SOURCE, "invalid-timestamp"): 2}
        rows = spark.read.json(os.path.join(base, "dlq")).collect()
        # the JSON of the key and value, typed or dynamic (not a JSON string of the JSON)
        assert sorted((json.loads(r.key), json.loads(r.value)) for r in rows) == [
            ("b", 2),
            ("c", 3),
        ]
        assert all("e.jsonl" in r.exception_message for r in rows)


def test_an_envelope_without_a_timestamp_gets_the_partition_time(spark: Any, app_id: str) -> None:
    with tempfile.TemporaryDirectory() as base:
        app = _envelope_app(base, app_id, timestamp_policy="use-partition-time")
        app._session = spark
        app.run_until_caught_up()
        assert _envelope_out(spark, base) == [("a", 100), ("b", 100), ("c", 100), ("d", 200)]
