"""The Kafka data source's reader and writer, driven directly (no Spark) against tansu, an
in-memory Kafka-compatible broker (see tests/support/broker.py)."""

from __future__ import annotations

import json
import pickle
import random
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any, cast

import pytest

pytest.importorskip("confluent_kafka")

import pyarrow as pa
from pyspark.sql import Row
from pyspark.sql.datasource import CaseInsensitiveDict
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)
from support.broker import (
    Broker,
    BrokerUnavailable,
    consume_all,
    create_topic,
    delete_topic,
    produce,
    start_broker,
)

from kspark_server.kafka import (
    KAFKA_SCHEMA,
    KafkaDataLossError,
    KafkaDataSource,
    KafkaInputPartition,
    KafkaSinkError,
    KafkaStreamReader,
    KafkaStreamWriter,
    KafkaTopicMissingError,
    KafkaWriterCommitMessage,
    spread_limit,
)

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


@pytest.fixture(scope="module")
def broker() -> Iterator[Broker]:
    try:
        b = start_broker()
    except BrokerUnavailable as exc:
        pytest.skip(f"no test Kafka broker: {exc}")
    try:
        yield b
    finally:
        b.stop()


@pytest.fixture
def topic() -> str:
    return f"t-{uuid.uuid4().hex[:10]}"


def _source(broker: Broker, topic: str, **options: str) -> KafkaDataSource:
    opts = CaseInsensitiveDict(
        {
            "kafka.bootstrap.servers": broker.bootstrap,
            "subscribe": topic,
            "kafkaConsumer.pollTimeoutMs": "10000",
            **options,
        }
    )
    return KafkaDataSource(opts)


def _reader(broker: Broker, topic: str, **options: str) -> KafkaStreamReader:
    return _source(broker, topic, **options).streamReader(KAFKA_SCHEMA)


def _read_all(reader: KafkaStreamReader, start: dict[str, Any], end: dict[str, Any]) -> list[Any]:
    return [row for part in reader.partitions(start, end) for row in reader.read(part)]


def _fill(broker: Broker, topic: str, counts: dict[int, int]) -> None:
    produce(
        broker.bootstrap,
        topic,
        [
            (f"k{p}-{i}".encode(), f"v{p}-{i}".encode(), None, p, None)
            for p, n in counts.items()
            for i in range(n)
        ],
    )


# ---------------------------------------------------------------------------------------------
# no broker needed


def test_name_and_schema_match_sparks_kafka_envelope() -> None:
    assert KafkaDataSource.name() == "kspark_kafka"
    assert KafkaDataSource({}).schema().simpleString() == (
        "struct<key:binary,value:binary,topic:string,partition:int,offset:bigint,"
        "timestamp:timestamp,timestampType:int,headers:array<struct<key:string,value:binary>>>"
    )


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"subscribe": "t"}, "kafka.bootstrap.servers"),
        ({"kafka.bootstrap.servers": "h:1"}, "subscribe"),
        ({"kafka.bootstrap.servers": "h:1", "subscribe": " , "}, "subscribe"),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "maxOffsetsPerTrigger": "x"},
            "maxOffsetsPerTrigger",
        ),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "maxOffsetsPerTrigger": "0"},
            "positive",
        ),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "failOnDataLoss": "maybe"},
            "failOnDataLoss",
        ),
        ({"kafka.bootstrap.servers": "h:1"}, "subscribePattern"),
        (
            {"kafka.bootstrap.servers": "h:1", "subscribe": "t", "subscribePattern": "t.*"},
            "one of",
        ),
        ({"kafka.bootstrap.servers": "h:1", "subscribePattern": "t(["}, "subscribePattern"),
        ({"kafka.bootstrap.servers": "h:1", "assign": "{}"}, "assign"),
    ],
)
def test_bad_source_options_are_refused(options: dict[str, str], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        KafkaDataSource(CaseInsensitiveDict(options)).streamReader(KAFKA_SCHEMA)


def test_spread_limit_is_proportional_and_exact() -> None:
    assert spread_limit({("t", 0): 6, ("t", 1): 3}, 4) == {("t", 0): 3, ("t", 1): 1}
    assert spread_limit({("t", 0): 2, ("t", 1): 0}, 10) == {("t", 0): 2}
    rng = random.Random(7)
    for _ in range(500):
        lags = {("t", p): rng.randrange(0, 50) for p in range(rng.randrange(1, 8))}
        limit = rng.randrange(1, 200)
        shares = spread_limit(lags, limit)
        assert sum(shares.values()) == min(limit, sum(lags.values()))
        assert all(0 <= shares[tp] <= lags[tp] for tp in shares)


def test_reader_options_pass_kafka_settings_through() -> None:
    reader = KafkaDataSource(
        CaseInsensitiveDict(
            {
                "kafka.bootstrap.servers": "h:1",
                "kafka.client.id": "me",
                "subscribe": "a, b",
                "startingOffsets": "latest",
                "maxOffsetsPerTrigger": "7",
            }
        )
    ).streamReader(KAFKA_SCHEMA)
    conf = reader._config.consumer_conf()
    assert conf["bootstrap.servers"] == "h:1" and conf["client.id"] == "me"
    assert conf["enable.auto.commit"] is False
    assert reader._config.topics == ("a", "b")
    assert reader.getDefaultReadLimit() == ReadMaxRows(7)


# ---------------------------------------------------------------------------------------------
# offsets


def test_initial_offset_earliest_latest_and_specific(broker: Broker, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 2)
    _fill(broker, topic, {0: 3, 1: 2})

    assert _reader(broker, topic).initialOffset() == {topic: {"0": 0, "1": 0}}
    latest = _reader(broker, topic, startingOffsets="latest").initialOffset()
    assert latest == {topic: {"0": 3, "1": 2}}

    specific = json.dumps({topic: {"0": 1, "1": -1}})
    assert _reader(broker, topic, startingOffsets=specific).initialOffset() == {
        topic: {"0": 1, "1": 2}
    }
    specific = json.dumps({topic: {"0": -2, "1": 1}})
    assert _reader(broker, topic, startingOffsets=specific).initialOffset() == {
        topic: {"0": 0, "1": 1}
    }

    with pytest.raises(ValueError, match=f"every partition.*{topic}-1"):
        _reader(broker, topic, startingOffsets=json.dumps({topic: {"0": 1}})).initialOffset()
    with pytest.raises(ValueError, match="not subscribed"):
        _reader(broker, topic, startingOffsets='{"other": {"0": 1}}').initialOffset()
    with pytest.raises(ValueError, match="startingOffsets"):
        _reader(broker, topic, startingOffsets="yesterday").initialOffset()


def test_latest_offset_caps_each_batch_and_advances_to_the_end(broker: Broker, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 2)
    _fill(broker, topic, {0: 6, 1: 3})
    reader = _reader(broker, topic, maxOffsetsPerTrigger="4")
    limit = reader.getDefaultReadLimit()
    assert limit == ReadMaxRows(4)

    start = reader.initialOffset()
    steps = []
    for _ in range(10):
        end = reader.latestOffset(start, limit)
        if end == start:
            break
        sizes = {p: end[topic][p] - start[topic][p] for p in end[topic]}
        assert all(n >= 0 for n in sizes.values()) and 0 < sum(sizes.values()) <= 4
        steps.append(end)
        start = end
    assert steps[0] == {topic: {"0": 3, "1": 1}}  # 4 shared 6:3, rounded to sum to 4
    assert steps[-1] == {topic: {"0": 6, "1": 3}}
    assert len(steps) == 3
    assert reader.reportLatestOffset() == {topic: {"0": 6, "1": 3}}

    # Spark's ReadAllAvailable (e.g. the last batch of availableNow) ignores the option
    fresh = _reader(broker, topic, maxOffsetsPerTrigger="4")
    assert fresh.latestOffset(fresh.initialOffset(), ReadAllAvailable()) == {
        topic: {"0": 6, "1": 3}
    }
    # ReadMinRows: not enough new records yet -> the start again
    begin = {topic: {"0": 5, "1": 3}}
    assert fresh.latestOffset(begin, ReadMinRows(5)) == begin

    # the older call without arguments continues from the offset it returned last
    old_style = _reader(broker, topic, maxOffsetsPerTrigger="4")
    old_style.initialOffset()
    assert old_style.latestOffset() == {topic: {"0": 3, "1": 1}}
    assert old_style.latestOffset() == {topic: {"0": 5, "1": 3}}
    assert old_style.latestOffset() == {topic: {"0": 6, "1": 3}}
    assert old_style.latestOffset() == {topic: {"0": 6, "1": 3}}


def test_available_now_stops_at_the_offsets_seen_when_it_started(
    broker: Broker, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, 1)
    _fill(broker, topic, {0: 2})
    reader = _reader(broker, topic)
    start = reader.initialOffset()
    reader.prepareForTriggerAvailableNow()
    _fill(broker, topic, {0: 3})
    assert reader.latestOffset(start, ReadAllAvailable()) == {topic: {"0": 2}}
    assert _reader(broker, topic).latestOffset(start, ReadAllAvailable()) == {topic: {"0": 5}}


def test_a_pattern_subscribes_every_matching_topic_and_later_ones(broker: Broker) -> None:
    run = uuid.uuid4().hex[:8]
    orders_a, orders_b, other = f"orders-{run}-a", f"orders-{run}-b", f"other-{run}"
    for t, n in ((orders_a, 2), (orders_b, 1), (other, 1)):
        create_topic(broker.bootstrap, t, n)
        _fill(broker, t, dict.fromkeys(range(n), 2))
    options = {
        "kafka.bootstrap.servers": broker.bootstrap,
        "subscribePattern": f"orders-{run}-.*",
        "kafkaConsumer.pollTimeoutMs": "10000",
    }
    reader = KafkaDataSource(CaseInsensitiveDict(options)).streamReader(KAFKA_SCHEMA)
    start = reader.initialOffset()
    assert start == {orders_a: {"0": 0, "1": 0}, orders_b: {"0": 0}}  # not other-...
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {orders_a: {"0": 2, "1": 2}, orders_b: {"0": 2}}
    assert {row[2] for row in _read_all(reader, start, end)} == {orders_a, orders_b}
    # a topic created later that matches is read from its beginning at the next batch
    later = f"orders-{run}-c"
    create_topic(broker.bootstrap, later, 1)
    _fill(broker, later, {0: 3})
    following = reader.latestOffset(end, ReadAllAvailable())
    assert following == {**end, later: {"0": 3}}
    rows = _read_all(reader, end, following)
    assert [(row[2], row[4]) for row in rows] == [(later, 0), (later, 1), (later, 2)]
    # the whole name must match, as Kafka's pattern subscription matches it
    prefix = {**options, "subscribePattern": f"orders-{run}"}
    assert (
        KafkaDataSource(CaseInsensitiveDict(prefix)).streamReader(KAFKA_SCHEMA).initialOffset()
        == {}
    )


# ---------------------------------------------------------------------------------------------
# reading


def test_read_returns_the_exact_envelope(broker: Broker, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 2)
    produce(
        broker.bootstrap,
        topic,
        [
            (b"k1", b"v1", [("h1", b"a"), ("h2", None)], 0, 1_700_000_000_123),
            (None, b"v2", None, 0, 1_700_000_000_456),
            (b"k3", None, [("h", b"z")], 1, 1_700_000_000_789),
        ],
    )
    reader = _reader(broker, topic)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {topic: {"0": 2, "1": 1}}
    parts = reader.partitions(start, end)
    assert [(p.topic, p.partition, p.start, p.end) for p in parts] == [
        (topic, 0, 0, 2),
        (topic, 1, 0, 1),
    ]

    def ts(ms: int) -> datetime:
        return datetime(2023, 11, 14, 22, 13, 20, ms * 1000, tzinfo=UTC)

    rows = _read_all(reader, start, end)
    assert rows == [
        (b"k1", b"v1", topic, 0, 0, ts(123), 0, [("h1", b"a"), ("h2", None)]),
        (None, b"v2", topic, 0, 1, ts(456), 0, None),
        (b"k3", None, topic, 1, 0, ts(789), 0, [("h", b"z")]),
    ]
    assert len(KAFKA_SCHEMA.fields) == len(rows[0])

    # a range starting inside the partition
    assert [r[4] for r in reader.read(KafkaInputPartition(topic, 0, 1, 2))] == [1]
    assert reader.partitions(end, end) == []

    # the tuples convert to Arrow with the source's schema the way Spark's worker does it
    worker = pytest.importorskip("pyspark.sql.worker.plan_data_source_read")
    batches = list(
        worker.records_to_arrow_batches(iter(rows), 100, KAFKA_SCHEMA, KafkaDataSource({}))
    )
    first = batches[0].to_pylist()[0]
    assert first["headers"] == [{"key": "h1", "value": b"a"}, {"key": "h2", "value": None}]
    assert first["timestamp"] == ts(123)


def test_a_partition_missing_from_the_start_offsets_is_read_from_the_beginning(
    broker: Broker, topic: str
) -> None:
    # what happens when a partition is added to a subscribed topic: it is in the broker's
    # metadata but not in the batch's start offsets
    create_topic(broker.bootstrap, topic, 2)
    _fill(broker, topic, {0: 2, 1: 3})
    reader = _reader(broker, topic)
    start = {topic: {"0": 2}}
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {topic: {"0": 2, "1": 3}}
    assert [(p.partition, p.start, p.end) for p in reader.partitions(start, end)] == [(1, 0, 3)]
    assert [(r[3], r[4]) for r in _read_all(reader, start, end)] == [(1, 0), (1, 1), (1, 2)]


def test_partitions_added_to_a_topic_are_picked_up(broker: Broker, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewPartitions  # type: ignore[attr-defined]

    create_topic(broker.bootstrap, topic, 1)
    _fill(broker, topic, {0: 1})
    reader = _reader(broker, topic)
    start = reader.initialOffset()
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    try:
        for future in admin.create_partitions([NewPartitions(topic, 2)]).values():
            future.result(timeout=10)
    except Exception as exc:
        pytest.skip(f"the test broker cannot add partitions (CreatePartitions): {exc}")
    _fill(broker, topic, {1: 2})
    end = reader.latestOffset(start, ReadAllAvailable())
    assert end == {topic: {"0": 1, "1": 2}}
    assert [(r[3], r[4]) for r in _read_all(reader, start, end)] == [(0, 0), (1, 0), (1, 1)]


def test_a_missing_topic_is_a_clear_error(broker: Broker, topic: str) -> None:
    with pytest.raises(KafkaTopicMissingError, match=f"'{topic}' do not exist"):
        _reader(broker, topic).initialOffset()
    with pytest.raises(KafkaTopicMissingError, match=f"'{topic}'"):
        _reader(broker, topic).latestOffset({}, ReadAllAvailable())
    with pytest.raises(KafkaTopicMissingError, match=f"{topic}-0 does not exist.*failOnDataLoss"):
        list(_reader(broker, topic).read(KafkaInputPartition(topic, 0, 0, 3)))
    lenient = _reader(broker, topic, failOnDataLoss="false")
    assert list(lenient.read(KafkaInputPartition(topic, 0, 0, 3))) == []
    # looking did not create it (tansu auto-creates topics asked for by name)
    with pytest.raises(KafkaTopicMissingError):
        _reader(broker, topic).initialOffset()


def test_a_deleted_topic_is_data_loss(broker: Broker, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 1)
    _fill(broker, topic, {0: 2})
    start = _reader(broker, topic).initialOffset()
    delete_topic(broker.bootstrap, topic)
    with pytest.raises(KafkaDataLossError, match=f"{topic}-0 no longer exist.*failOnDataLoss"):
        _reader(broker, topic).latestOffset(start, ReadAllAvailable())
    lenient = _reader(broker, topic, failOnDataLoss="false")
    assert lenient.latestOffset(start, ReadAllAvailable()) == {}


def test_a_recreated_topic_is_data_loss_or_read_anew(broker: Broker, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 1)
    _fill(broker, topic, {0: 5})
    start = _reader(broker, topic, startingOffsets="latest").initialOffset()
    assert start == {topic: {"0": 5}}
    delete_topic(broker.bootstrap, topic)
    create_topic(broker.bootstrap, topic, 1)
    _fill(broker, topic, {0: 2})

    with pytest.raises(
        KafkaDataLossError, match=f"{topic}-0 went back from 5 to 2.*failOnDataLoss"
    ):
        _reader(broker, topic).latestOffset(start, ReadAllAvailable())

    lenient = _reader(broker, topic, failOnDataLoss="false")
    end = lenient.latestOffset(start, ReadAllAvailable())
    assert end == {topic: {"0": 2}}
    assert [(r[1], r[4]) for r in _read_all(lenient, start, end)] == [(b"v0-0", 0), (b"v0-1", 1)]


def test_reading_past_the_end_of_a_partition_is_data_loss(broker: Broker, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 1)
    _fill(broker, topic, {0: 3})
    part = KafkaInputPartition(topic, 0, 1, 10)
    with pytest.raises(
        KafkaDataLossError, match=rf"{topic}-0: the offsets \[1, 10\) .*\[0, 3\).*failOnDataLoss"
    ):
        list(_reader(broker, topic).read(part))
    rows = list(_reader(broker, topic, failOnDataLoss="false").read(part))
    assert [r[4] for r in rows] == [1, 2]


class _FakeMessage:
    def __init__(self, offset: int) -> None:
        self._offset = offset

    def error(self) -> None:
        return None

    def offset(self) -> int:
        return self._offset

    def key(self) -> bytes:
        return b"k%d" % self._offset

    def value(self) -> bytes:
        return b"v"

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 0

    def timestamp(self) -> tuple[int, int]:
        return (1, 0)

    def headers(self) -> None:
        return None


class _ConsumerAfterRetention:
    """A partition whose offsets below 5 were deleted by retention (tansu cannot delete
    records, so this stands in for the broker)."""

    def __init__(self) -> None:
        self.position = -1

    def get_watermark_offsets(self, tp: Any, timeout: float = -1) -> tuple[int, int]:
        return (5, 8)

    def assign(self, tps: list[Any]) -> None:
        self.position = tps[0].offset

    def consume(self, num_messages: int = 1, timeout: float = -1) -> list[_FakeMessage]:
        out = [_FakeMessage(o) for o in range(self.position, 8)][:num_messages]
        self.position += len(out)
        return out


def test_records_deleted_by_retention_are_data_loss_or_skipped() -> None:
    options = {"kafka.bootstrap.servers": "h:1", "subscribe": "t"}
    part = KafkaInputPartition("t", 0, 2, 8)
    strict = KafkaDataSource(CaseInsensitiveDict(options)).streamReader(KAFKA_SCHEMA)
    with pytest.raises(
        KafkaDataLossError,
        match=r"t-0: .*\[2, 8\).*\[5, 8\): offsets \[2, 5\) were deleted.*failOnDataLoss",
    ):
        list(strict._read_with(cast(Any, _ConsumerAfterRetention()), part))
    lenient = KafkaDataSource(
        CaseInsensitiveDict({**options, "failOnDataLoss": "false"})
    ).streamReader(KAFKA_SCHEMA)
    rows = list(lenient._read_with(cast(Any, _ConsumerAfterRetention()), part))
    assert [r[4] for r in rows] == [5, 6, 7]
    assert rows[0][:2] == (b"k5", b"v") and rows[0][5] == datetime(1970, 1, 1, tzinfo=UTC)


def test_the_reader_pickles_without_its_clients(broker: Broker, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 1)
    _fill(broker, topic, {0: 2})
    reader = _reader(broker, topic)
    start = reader.initialOffset()
    end = reader.latestOffset(start, ReadAllAvailable())
    copy = pickle.loads(pickle.dumps(reader))
    parts = [pickle.loads(pickle.dumps(p)) for p in copy.partitions(start, end)]
    assert [r[4] for p in parts for r in copy.read(p)] == [0, 1]
    reader.commit(end)
    reader.stop()


# ---------------------------------------------------------------------------------------------
# writing


def _writer(broker: Broker, schema: StructType, **options: str) -> KafkaStreamWriter:
    opts = CaseInsensitiveDict({"kafka.bootstrap.servers": broker.bootstrap, **options})
    return KafkaDataSource(opts).streamWriter(schema, False)


def _murmur2(data: bytes) -> int:
    """Kafka's Java murmur2, as its default partitioner uses it (unsigned 32 bits)."""
    m, length = 0x5BD1E995, len(data)
    h = (0x9747B28C ^ length) & 0xFFFFFFFF
    for i in range(0, length - length % 4, 4):
        k = data[i] | data[i + 1] << 8 | data[i + 2] << 16 | data[i + 3] << 24
        k = (k * m) & 0xFFFFFFFF
        k ^= k >> 24
        h = ((h * m) & 0xFFFFFFFF) ^ ((k * m) & 0xFFFFFFFF)
    tail, rest = length & ~3, length % 4
    if rest == 3:
        h ^= data[tail + 2] << 16
    if rest >= 2:
        h ^= data[tail + 1] << 8
    if rest >= 1:
        h = ((h ^ data[tail]) * m) & 0xFFFFFFFF
    h ^= h >> 13
    h = (h * m) & 0xFFFFFFFF
    return h ^ (h >> 15)


def test_murmur2_matches_kafkas_test_vectors() -> None:
    def signed(v: int) -> int:
        return v - (1 << 32) if v >= 1 << 31 else v

    assert signed(_murmur2(b"21")) == -973932308
    assert signed(_murmur2(b"foobar")) == -790332482
    assert signed(_murmur2(b"a-little-bit-long-string")) == -985981536
    assert signed(_murmur2(b"abc")) == 479470107


def test_writer_writes_rows_with_headers_and_partitions(broker: Broker, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 3)
    schema = StructType(
        [
            StructField("key", StringType()),
            StructField("value", BinaryType()),
            StructField("headers", HEADERS_TYPE),
            StructField("partition", IntegerType()),
        ]
    )
    writer = _writer(broker, schema, topic=topic)
    rows = [
        Row(
            key="a",
            value=b"1",
            headers=[Row(key="h", value=b"x"), Row(key="n", value=None)],
            partition=2,
        ),
        Row(key=None, value=b"2", headers=None, partition=0),
        Row(key="c", value=None, headers=[], partition=2),
    ]
    message = writer.write(iter(rows))
    assert message == KafkaWriterCommitMessage(count=3)
    assert pickle.loads(pickle.dumps(message)) == message
    writer.commit([message], 0)

    got = consume_all(broker.bootstrap, topic)
    assert [(r["partition"], r["offset"], r["key"], r["value"], r["headers"]) for r in got] == [
        (0, 0, None, b"2", None),
        (2, 0, b"a", b"1", [("h", b"x"), ("n", None)]),
        (2, 1, b"c", None, None),
    ]


def test_writer_takes_arrow_batches_topic_column_timestamps_and_partitions_like_java(
    broker: Broker, topic: str
) -> None:
    create_topic(broker.bootstrap, topic, 5)
    other = f"{topic}-other"
    create_topic(broker.bootstrap, other, 1)
    schema = StructType(
        [
            StructField("topic", StringType()),
            StructField("key", BinaryType()),
            StructField("value", StringType()),
            StructField("timestamp", TimestampType()),
            StructField("extra", IntegerType()),  # ignored
        ]
    )
    writer = _writer(broker, schema, topic=topic)
    when = datetime(2024, 1, 2, 3, 4, 5, 678000, tzinfo=UTC)
    keys = [f"key-{i}".encode() for i in range(20)]
    batch = pa.RecordBatch.from_pydict(
        {
            "topic": [None] * 20 + [other],
            "key": [*keys, b"x"],
            "value": [f"v{i}" for i in range(21)],
            "timestamp": [when] * 21,
            "extra": list(range(21)),
        },
        schema=pa.schema(
            [
                ("topic", pa.string()),
                ("key", pa.binary()),
                ("value", pa.string()),
                ("timestamp", pa.timestamp("us", tz="UTC")),
                ("extra", pa.int32()),
            ]
        ),
    )
    assert writer.write(iter([batch])).count == 21

    got = consume_all(broker.bootstrap, topic)
    assert len(got) == 20
    assert {r["timestamp"] for r in got} == {1704164645678}
    # keys land where Kafka's Java clients (and so Kafka Streams) put them
    assert {r["key"]: r["partition"] for r in got} == {
        k: (_murmur2(k) & 0x7FFFFFFF) % 5 for k in keys
    }
    assert [(r["key"], r["value"]) for r in consume_all(broker.bootstrap, other)] == [
        (b"x", b"v20")
    ]


def test_writer_fails_the_task_when_a_record_is_not_delivered(broker: Broker, topic: str) -> None:
    create_topic(broker.bootstrap, topic, 2)
    schema = StructType(
        [StructField("value", BinaryType()), StructField("partition", IntegerType())]
    )
    writer = _writer(broker, schema, topic=topic, **{"kafka.message.timeout.ms": "3000"})
    with pytest.raises(KafkaSinkError, match=f"kspark_kafka sink could not .*{topic}"):
        writer.write(iter([Row(value=b"1", partition=7)]))


@pytest.mark.parametrize(
    ("fields", "options", "message"),
    [
        ([StructField("key", BinaryType())], {"topic": "t"}, "needs a 'value' column"),
        ([StructField("value", BinaryType())], {}, "'topic' column or the option 'topic'"),
        ([StructField("value", IntegerType())], {"topic": "t"}, "'value' must be binary or string"),
        (
            [StructField("value", BinaryType()), StructField("partition", StringType())],
            {"topic": "t"},
            "'partition' must be integer",
        ),
        (
            [StructField("value", BinaryType()), StructField("headers", ArrayType(StringType()))],
            {"topic": "t"},
            "array<struct<key:string,value:binary>>",
        ),
    ],
)
def test_bad_sink_schemas_are_refused(
    fields: list[StructField], options: dict[str, str], message: str
) -> None:
    opts = CaseInsensitiveDict({"kafka.bootstrap.servers": "h:1", **options})
    with pytest.raises(ValueError, match=message):
        KafkaDataSource(opts).streamWriter(StructType(fields), False)
