"""The bad-input corpus (issue 17): every malformed record ends in a clear error that names
the processor and the record, or in a dead letter and a count; never in a silent drop or a
changed value. Also the data-loss cases of file and table sinks."""

from __future__ import annotations

import dataclasses
import json
import os
import tempfile
import uuid
from collections.abc import Iterator
from typing import Any

import pytest

from kspark import StreamsApp, StreamsBuilder, StreamsConfig, Topic
from kspark.errors import (
    DeadLetterQueueDeserializationExceptionHandler,
    DeadLetterQueueProductionExceptionHandler,
    DeserializationError,
    InvalidTopologyError,
    LogAndContinueDeserializationExceptionHandler,
    StreamsAppError,
)

pytestmark = pytest.mark.spark

SOURCE = "KSTREAM-SOURCE-0000000000"


def line(key: str, value: Any, ts: int) -> bytes:
    return json.dumps({"key": key, "value": value, "timestamp": ts}).encode() + b"\n"


BIG_KEY = "k" * (10 * 1024 * 1024)

#: One bad line per case (a line of an envelope topic of str keys and int values).
BAD_LINES: dict[str, bytes] = {
    "truncated": b'{"key": "a", "value": ',
    "empty array": b"[]",
    "a number": b"42",
    "null": b"null",
    "wrong value type": b'{"key": "a", "value": "three", "timestamp": 3}',
    "wrong timestamp type": b'{"key": "a", "value": 3, "timestamp": "noon"}',
    "invalid utf-8": b'{"key": "\xff\xfe", "value": 3, "timestamp": 3}',
    "10 MB bad value": b'{"key": "a", "value": "' + b"9" * (10 * 1024 * 1024) + b'x"}',
}

GOOD = [("g1", 1, 1), ("g2", 2, 2)]


@pytest.fixture
def base() -> Iterator[str]:
    with tempfile.TemporaryDirectory() as d:
        yield d


def write(base: str, name: str, data: bytes) -> None:
    os.makedirs(os.path.join(base, "in"), exist_ok=True)
    with open(os.path.join(base, "in", name), "wb") as f:
        f.write(data)


def built(spark: Any, base: str, app_id: str, b: StreamsBuilder, **cfg: Any) -> StreamsApp:
    """The app of ``b``'s topology, with its checkpoint in ``base``, on the test session."""
    config = StreamsConfig(
        application_id=app_id, checkpoint_dir=os.path.join(base, "chk"), num_partitions=2, **cfg
    )
    a = StreamsApp(b.build(), config)
    a._session = spark
    return a


def app(
    spark: Any,
    base: str,
    app_id: str,
    topic: Any = None,
    value_type: Any = int,
    **cfg: Any,
) -> StreamsApp:
    """``topic`` (default: the JSON-lines folder ``in``) copied to ``out``."""
    b = StreamsBuilder()
    source = topic or Topic.jsonl("in", os.path.join(base, "in"))
    b.stream(source, key_type=str, value_type=value_type).to(
        Topic.jsonl("out", os.path.join(base, "out"))
    )
    return built(spark, base, app_id, b, **cfg)


def output(spark: Any, base: str) -> list[tuple[str, int]]:
    path = os.path.join(base, "out")
    if not os.path.exists(path):
        return []
    return sorted((r.key, r.value) for r in spark.read.json(path).select("key", "value").collect())


def dropped(a: StreamsApp) -> int:
    return sum(a.metrics().dropped_records_total.values())


@pytest.mark.parametrize("case", sorted(BAD_LINES))
def test_fail_mode_names_the_processor_and_the_line(
    spark: Any, app_id: str, base: str, case: str
) -> None:
    write(base, "a.jsonl", line("g1", 1, 1) + BAD_LINES[case] + b"\n" + line("g2", 2, 2))
    with pytest.raises(DeserializationError) as info:
        app(spark, base, app_id).run_until_caught_up()
    text = str(info.value)
    assert "KSPARK_DESERIALIZATION_FAILED" in text and SOURCE in text
    assert "line 2 of" in text and "a.jsonl" in text
    assert "deserialization_exception_handler" in text


def corpus(base: str) -> list[bytes]:
    """All bad lines in one file between good ones, and a good file that starts with a
    UTF-8 byte-order mark and holds a 10 MB key."""
    bad = [BAD_LINES[c] for c in sorted(BAD_LINES)]
    data = line("g1", 1, 1) + b"\n".join(bad) + b"\n" + line("g2", 2, 2)
    write(base, "a.jsonl", data)
    write(base, "b.jsonl", b"\xef\xbb\xbf" + line("bom", 3, 3) + line(BIG_KEY, 4, 4))
    return bad


EXPECTED = [*((k, v) for k, v, _ in GOOD), ("bom", 3), (BIG_KEY, 4)]


def test_continue_mode_drops_and_counts_every_bad_line(spark: Any, app_id: str, base: str) -> None:
    bad = corpus(base)
    a = app(
        spark,
        base,
        app_id,
        deserialization_exception_handler=LogAndContinueDeserializationExceptionHandler,
    )
    a.run_until_caught_up()
    assert output(spark, base) == sorted(EXPECTED)
    assert dropped(a) == len(bad)
    assert set(a.metrics().dropped_by_processor()) == {SOURCE}


def test_dlq_mode_writes_every_bad_line_once(spark: Any, app_id: str, base: str) -> None:
    bad = corpus(base)
    a = app(
        spark,
        base,
        app_id,
        deserialization_exception_handler=DeadLetterQueueDeserializationExceptionHandler,
        dead_letter_queue_topic=Topic.parquet("dlq", os.path.join(base, "dlq")),
    )
    a.run_until_caught_up()
    assert output(spark, base) == sorted(EXPECTED)
    dead = spark.read.parquet(os.path.join(base, "dlq")).collect()
    assert len(dead) == len(bad) and a.metrics().dead_letter_records == len(bad)
    assert len({r.offset for r in dead}) == len(bad)  # each line its own position
    valid = sorted(b.decode() for b in bad if b != BAD_LINES["invalid utf-8"])
    assert sorted(r.value for r in dead if "\ufffd" not in r.value) == valid
    for r in dead:
        assert r.processor_node_id == SOURCE and r.topic == "in"
        assert r.exception_class == "kspark.errors.DeserializationError"
        assert "a.jsonl" in r.exception_message and "line " in r.exception_message


def test_identical_bad_lines_are_two_dead_letters(spark: Any, app_id: str, base: str) -> None:
    bad = b'{"key": "b", "value": '
    write(base, "a.jsonl", line("a", 1, 1) + bad + b"\n" + bad + b"\n" + line("c", 3, 3))
    a = app(
        spark,
        base,
        app_id,
        deserialization_exception_handler=DeadLetterQueueDeserializationExceptionHandler,
        dead_letter_queue_topic=Topic.jsonl("dlq", os.path.join(base, "dlq")),
    )
    a.run_until_caught_up()
    dead = spark.read.json(os.path.join(base, "dlq")).collect()
    assert [r.value for r in dead] == [bad.decode()] * 2
    assert len({r.offset for r in dead}) == 2
    assert dropped(a) == 2 and a.metrics().dead_letter_records == 2
    assert output(spark, base) == [("a", 1), ("c", 3)]


def test_a_restarted_app_reads_no_line_twice(spark: Any, app_id: str, base: str) -> None:
    """Positions are deterministic: a second file after a restart adds only its lines."""
    write(base, "a.jsonl", line("a", 1, 1) + line("b", 2, 2))
    app(spark, base, app_id).run_until_caught_up()
    write(base, "b.jsonl", line("c", 3, 3))
    app(spark, base, app_id).run_until_caught_up()
    assert output(spark, base) == [("a", 1), ("b", 2), ("c", 3)]


# -- CSV -------------------------------------------------------------------------------
@dataclasses.dataclass
class Row:
    id: int
    name: str
    ts: int


def csv_app(spark: Any, base: str, app_id: str, **cfg: Any) -> StreamsApp:
    b = StreamsBuilder()
    b.stream(
        Topic.csv("rows", os.path.join(base, "in"), key_field="name", timestamp_field="ts"),
        key_type=str,
        value_type=Row,
    ).map_values(lambda r: r.id, value_type=int).to(Topic.jsonl("out", os.path.join(base, "out")))
    return built(spark, base, app_id, b, **cfg)


CSV = b"id,name,ts\n1,alice,1\nx,bob,2\n3,carol,3\n"


def test_a_bad_csv_cell_fails_by_default(spark: Any, app_id: str, base: str) -> None:
    write(base, "a.csv", CSV)
    with pytest.raises(DeserializationError, match="line 3 of") as info:
        csv_app(spark, base, app_id).run_until_caught_up()
    assert SOURCE in str(info.value) and "x,bob,2" in str(info.value)


def test_a_bad_csv_cell_goes_to_the_dead_letter_queue(spark: Any, app_id: str, base: str) -> None:
    write(base, "a.csv", CSV)
    a = csv_app(
        spark,
        base,
        app_id,
        deserialization_exception_handler=DeadLetterQueueDeserializationExceptionHandler,
        dead_letter_queue_topic=Topic.jsonl("dlq", os.path.join(base, "dlq")),
    )
    a.run_until_caught_up()
    assert output(spark, base) == [("alice", 1), ("carol", 3)]  # bob is not read as null
    dead = spark.read.json(os.path.join(base, "dlq")).collect()
    assert [r.value for r in dead] == ["x,bob,2"] and dropped(a) == 1


# -- sinks -----------------------------------------------------------------------------
def test_two_sinks_into_one_topic_keep_every_record(spark: Any, app_id: str, base: str) -> None:
    write(base, "a.jsonl", b"".join(line(f"k{i}", i, i) for i in range(10)))
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("in", os.path.join(base, "in")), key_type=str, value_type=int)
    out = Topic.jsonl("out", os.path.join(base, "out"))
    s.filter(lambda k, v: v % 2 == 0).to(out)
    s.filter(lambda k, v: v % 2 == 1).to(out)
    a = StreamsApp(
        b.build(),
        StreamsConfig(application_id=app_id, checkpoint_dir=os.path.join(base, "chk")),
    )
    a._session = spark
    a.run_until_caught_up()
    assert sorted(v for _, v in output(spark, base)) == list(range(10))


def test_a_table_sink_refuses_a_table_it_did_not_create(spark: Any, app_id: str, base: str) -> None:
    table = f"users_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {table} (id INT) USING parquet")
    spark.sql(f"INSERT INTO {table} VALUES (7)")
    try:
        write(base, "a.jsonl", line("a", 1, 1))
        b = StreamsBuilder()
        b.stream(Topic.jsonl("in", os.path.join(base, "in")), key_type=str, value_type=int).to(
            Topic.table("out", table)
        )
        a = StreamsApp(
            b.build(),
            StreamsConfig(application_id=app_id, checkpoint_dir=os.path.join(base, "chk")),
        )
        a._session = spark
        with pytest.raises(InvalidTopologyError, match=f"table {table} exists") as info:
            a.run_until_caught_up()
        assert "id:int" in str(info.value)
        assert [r.id for r in spark.table(table).collect()] == [7]  # untouched
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {table}")


def test_a_table_sink_appends_batch_by_batch_to_its_own_table(
    spark: Any, app_id: str, base: str
) -> None:
    table = f"out_{uuid.uuid4().hex[:8]}"

    def run(name: str, records: list[tuple[str, int]]) -> None:
        write(base, name, b"".join(line(k, v, v) for k, v in records))
        b = StreamsBuilder()
        b.stream(Topic.jsonl("in", os.path.join(base, "in")), key_type=str, value_type=int).to(
            Topic.table("out", table)
        )
        a = StreamsApp(
            b.build(),
            StreamsConfig(application_id=app_id, checkpoint_dir=os.path.join(base, "chk")),
        )
        a._session = spark
        a.run_until_caught_up()

    try:
        run("a.jsonl", [("a", 1), ("b", 2)])
        run("b.jsonl", [("c", 3)])
        rows = spark.table(table).collect()
        assert sorted((r.key, r.value) for r in rows) == [("a", 1), ("b", 2), ("c", 3)]
        assert len({r.batch_id for r in rows}) == 2
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {table}")


def test_a_table_timestamp_column_is_read_as_milliseconds(
    spark: Any, app_id: str, base: str
) -> None:
    table = f"src_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {table} (key STRING, value BIGINT, timestamp TIMESTAMP) USING parquet")
    spark.sql(f"INSERT INTO {table} VALUES ('a', 1, TIMESTAMP'2024-01-01 00:00:01.250')")
    try:
        app(spark, base, app_id, Topic.table("in", table), int).run_until_caught_up()
        (row,) = spark.read.json(os.path.join(base, "out")).collect()
        assert (row.key, row.value, row.timestamp) == ("a", 1, 1_704_067_201_250)
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {table}")


@dataclasses.dataclass
class Reading:
    id: str
    n: int
    ts: int


def test_table_columns_of_the_wrong_type_go_to_the_deserialization_handler(
    spark: Any, app_id: str, base: str
) -> None:
    # a value-layout table whose columns hold text: a value that does not convert would
    # fail the query through an ANSI cast; it is a record the handler decides about
    table = f"src_{uuid.uuid4().hex[:8]}"
    spark.sql(f"CREATE TABLE {table} (id STRING, n STRING, ts STRING) USING parquet")
    spark.sql(f"INSERT INTO {table} VALUES ('a', '1', '5'), ('b', 'x', '6'), ('c', '3', 'noon')")
    topic = Topic.table("in", table, layout="value", key_field="id", timestamp_field="ts")
    try:
        with pytest.raises(DeserializationError, match=SOURCE):
            app(spark, base, app_id, topic, Reading).run_until_caught_up()
        a = app(
            spark,
            os.path.join(base, "dlq-run"),
            app_id + "d",
            topic,
            Reading,
            deserialization_exception_handler=DeadLetterQueueDeserializationExceptionHandler,
            dead_letter_queue_topic=Topic.jsonl("dlq", os.path.join(base, "dlq")),
        )
        a.run_until_caught_up()
        rows = spark.read.json(os.path.join(base, "dlq-run", "out")).collect()
        assert [(r.key, r.timestamp) for r in rows] == [("a", 5)]
        dead = spark.read.json(os.path.join(base, "dlq")).collect()
        assert sorted(json.loads(r.value)["id"] for r in dead) == ["b", "c"]
        assert dropped(a) == 2
    finally:
        spark.sql(f"DROP TABLE IF EXISTS {table}")


def test_a_negative_timestamp_fails_by_default(spark: Any, app_id: str, base: str) -> None:
    write(base, "a.jsonl", line("g1", 1, 1) + line("neg", 2, -5))
    with pytest.raises(StreamsAppError, match="KSPARK_INVALID_TIMESTAMP") as info:
        app(spark, base, app_id).run_until_caught_up()
    assert SOURCE in str(info.value) and "-5" in str(info.value)


@dataclasses.dataclass
class Positive:
    n: int

    def __post_init__(self) -> None:
        if self.n < 0:
            raise ValueError(f"n must be positive, got {self.n}")


def test_a_value_its_class_refuses_in_a_stateful_operator(
    spark: Any, app_id: str, base: str
) -> None:
    from datetime import timedelta

    write(
        base, "a.jsonl", line("a", {"n": 1}, 1) + line("b", {"n": -2}, 2) + line("c", {"n": 3}, 3)
    )

    def run(**cfg: Any) -> StreamsApp:
        b = StreamsBuilder()
        (
            b.stream(Topic.jsonl("in", os.path.join(base, "in")), key_type=str, value_type=Positive)
            .deduplicate_by_key_value(lambda k, v: v.n, timedelta(seconds=1))
            .to(Topic.jsonl("out", os.path.join(base, "out")))
        )
        config = StreamsConfig(
            application_id=app_id + str(len(cfg)),
            checkpoint_dir=os.path.join(base, f"chk{len(cfg)}"),
            num_partitions=2,
            **cfg,
        )
        a = StreamsApp(b.build(), config)
        a._session = spark
        a.run_until_caught_up()
        return a

    with pytest.raises(DeserializationError, match="n must be positive"):
        run()
    a = run(deserialization_exception_handler=LogAndContinueDeserializationExceptionHandler)
    assert [k for k, _ in output(spark, base)] == ["a", "c"]
    assert dropped(a) == 1


def test_a_bad_csv_cell_is_dropped_and_counted_under_continue(
    spark: Any, app_id: str, base: str
) -> None:
    write(base, "a.csv", CSV)
    a = csv_app(
        spark,
        base,
        app_id,
        deserialization_exception_handler=LogAndContinueDeserializationExceptionHandler,
    )
    a.run_until_caught_up()
    assert output(spark, base) == [("alice", 1), ("carol", 3)]  # bob is not read as null
    assert a.metrics().dropped_by_reason() == {(SOURCE, "deserialization-error"): 1}


def test_a_missing_value_is_a_tombstone(spark: Any, app_id: str, base: str) -> None:
    # a missing value is null (a tombstone), passed on as one: not a dropped record
    write(base, "a.jsonl", line("g1", 1, 1) + b'{"key": "m", "timestamp": 2}\n')
    a = app(spark, base, app_id)
    a.run_until_caught_up()
    assert sorted(output(spark, base), key=str) == sorted([("g1", 1), ("m", None)], key=str)
    assert dropped(a) == 0


def test_a_missing_envelope_timestamp_is_an_invalid_timestamp(
    spark: Any, app_id: str, base: str
) -> None:
    # not the processing time: StreamsConfig.timestamp_policy decides (fail by default);
    # its other policies: tests/integration/test_timestamps.py
    write(base, "a.jsonl", line("g1", 1, 1) + b'{"key": "n", "value": 5}\n')
    with pytest.raises(StreamsAppError, match="KSPARK_INVALID_TIMESTAMP") as info:
        app(spark, base, app_id).run_until_caught_up()
    assert SOURCE in str(info.value) and "line 2 of" in str(info.value)


def test_outputs_arrow_refuses_are_dead_lettered_alone(spark: Any, app_id: str, base: str) -> None:
    # an int of 2**63 or more and a string with a lone surrogate fit their Python types
    # but not their column types: the production handler gets each record alone
    write(base, "a.jsonl", b"".join(line(f"k{i}", i, i) for i in range(4)))
    b = StreamsBuilder()
    s = b.stream(Topic.jsonl("in", os.path.join(base, "in")), key_type=str, value_type=int)
    s.map_values(lambda v: 2**63 if v == 1 else v, value_type=int).to(
        Topic.jsonl("out", os.path.join(base, "out"))
    )
    s.map_values(lambda v: "a\ud800" if v == 2 else str(v), value_type=str).to(
        Topic.jsonl("text", os.path.join(base, "text"))
    )
    config = StreamsConfig(
        application_id=app_id,
        checkpoint_dir=os.path.join(base, "chk"),
        num_partitions=2,
        production_exception_handler=DeadLetterQueueProductionExceptionHandler,
        dead_letter_queue_topic=Topic.parquet("dlq", os.path.join(base, "dlq")),
    )
    a = StreamsApp(b.build(), config)
    a._session = spark
    a.run_until_caught_up()
    assert output(spark, base) == [("k0", 0), ("k2", 2), ("k3", 3)]
    text = spark.read.json(os.path.join(base, "text")).select("key", "value").collect()
    assert sorted((r.key, r.value) for r in text) == [("k0", "0"), ("k1", "1"), ("k3", "3")]
    dead = sorted(spark.read.parquet(os.path.join(base, "dlq")).collect(), key=lambda r: r.key)
    assert [(r.key, r.processor_node_id) for r in dead] == [
        ('"k1"', "KSTREAM-MAPVALUES-0000000001"),
        ('"k2"', "KSTREAM-MAPVALUES-0000000003"),
    ]
    assert all("does not fit its column type" in r.exception_message for r in dead)
    assert a.metrics().dead_letter_records == 2
