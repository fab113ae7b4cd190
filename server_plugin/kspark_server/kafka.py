"""A Kafka source and sink for Structured Streaming, written as Spark Python data sources.

Spark 4.3 ships no Kafka connector jar here, so kspark reads and writes Kafka with
``confluent-kafka`` inside Spark's Python workers. Register :class:`KafkaDataSource` with
``spark.dataSource.register`` and use the format ``"kspark_kafka"``.

This module is shipped to the workers by value (cloudpickle), so it imports only the standard
library, pyspark and pyarrow at the top, and ``confluent_kafka`` inside the methods that need
it. It never imports ``kspark``.

Source (``readStream.format("kspark_kafka")``)
    Options, close to Spark's own Kafka source:

    - ``kafka.bootstrap.servers`` (required). Every option that starts with ``kafka.`` goes
      to the confluent-kafka (librdkafka) configuration without the prefix.
    - ``subscribe``: a topic, or topics separated by commas; or ``subscribePattern``: a
      regular expression, every topic whose whole name matches it (internal topics, whose
      names start with ``__``, excepted). One of the two is required. A topic that comes
      to match after the query started is read from offset 0 at the next micro-batch.
    - ``startingOffsets``: ``earliest`` (default), ``latest``, or JSON such as
      ``{"orders": {"0": 23, "1": -2}}`` where ``-2`` is earliest and ``-1`` is latest. The
      JSON must name every partition of every subscribed topic, as in Spark.
    - ``maxOffsetsPerTrigger``: the most records per micro-batch, over all partitions, shared
      in proportion to each partition's backlog (as Spark does), rounded so the total is exact.
    - ``failOnDataLoss``: ``true`` (default) fails the query when records it should read are
      gone (retention, a deleted or re-created topic); ``false`` skips to what is there.
    - ``kafkaConsumer.pollTimeoutMs``: how long a task may wait for its records and how long
      offset look-ups may take (default 120000).

    The schema is Spark's Kafka envelope: ``key``, ``value``, ``topic``, ``partition``,
    ``offset``, ``timestamp``, ``timestampType`` and ``headers``. Offsets are
    ``{"topic": {"partition": next offset to read}}`` and live in Spark's checkpoint only:
    nothing is committed to Kafka and no consumer group is used (partitions are assigned
    explicitly). Partitions added to a subscribed topic are read from offset 0; if they no
    longer start at 0 that is data loss, as in Spark. A subscribed topic that does not exist
    is an error. The isolation level is ``read_uncommitted`` unless
    ``kafka.isolation.level=read_committed`` is given, in which case the source reads up to
    the last stable offset.

Sink (``writeStream.format("kspark_kafka")``)
    Columns: ``value`` (binary or string, required), ``key`` (binary or string), ``headers``
    (``array<struct<key:string,value:binary>>``), ``partition`` (int), ``topic`` (string) and
    ``timestamp`` (timestamp). The ``topic`` option names the topic of rows whose topic column
    is null or absent. Other columns are ignored. Rows with a null partition go through the
    producer's partitioner, which is ``murmur2_random`` here (the Java client's default, so
    keys land on the same partitions as Kafka Streams and Java producers put them) unless
    ``kafka.partitioner`` says otherwise.

    Guarantee: **at least once**. Each task produces its rows with an idempotent producer
    (``enable.idempotence=true``), waits for every delivery report and fails the task if any
    record was not written. The idempotent producer only removes duplicates caused by its own
    retries within one producer session. When Spark re-runs a task or a whole micro-batch
    (after a failure, or after a crash before the batch was committed to the checkpoint), the
    records are written again, so the topic can hold duplicates. Exactly-once output would
    need Kafka transactions tied to the batch id, which this sink does not do.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Container, Iterable, Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    InputPartition,
)
from pyspark.sql.streaming.datasource import (
    ReadAllAvailable,
    ReadLimit,
    ReadMaxRows,
    ReadMinRows,
    SupportsTriggerAvailableNow,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from kspark_server.kafka_conf import EPOCH as _EPOCH
from kspark_server.kafka_conf import bool_option as _bool_option
from kspark_server.kafka_conf import client_conf as _client_conf
from kspark_server.kafka_conf import int_option as _int_option
from kspark_server.kafka_conf import lower as _lower
from kspark_server.kafka_sink import (
    KafkaBatchWriter,
    KafkaSinkError,
    KafkaStreamWriter,
    KafkaWriterCommitMessage,
)

if TYPE_CHECKING:
    from confluent_kafka import Consumer, KafkaError, Message
    from confluent_kafka.admin import AdminClient

__all__ = [
    "KAFKA_SCHEMA",
    "KafkaDataLossError",
    "KafkaDataSource",
    "KafkaInputPartition",
    "KafkaSinkError",
    "KafkaSourceError",
    "KafkaStreamReader",
    "KafkaStreamWriter",
    "KafkaTopicMissingError",
    "KafkaWriterCommitMessage",
    "spread_limit",
]

_log = logging.getLogger("kspark_server.kafka")

#: Offsets as Spark keeps them in its checkpoint: topic -> partition (as a string) -> offset.
Offsets = dict[str, dict[str, int]]
TopicPartitionKey = tuple[str, int]

KAFKA_SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField(
            "headers",
            ArrayType(
                StructType([StructField("key", StringType()), StructField("value", BinaryType())])
            ),
        ),
    ]
)

_EARLIEST = -2
_LATEST = -1
_DEFAULT_TIMEOUT_MS = 120_000
_CONSUME_BATCH = 10_000
# confluent_kafka's timestamp types -> Kafka's TimestampType ids, which Spark reports
_TIMESTAMP_TYPES = {1: 0, 2: 1}  # CREATE_TIME -> 0, LOG_APPEND_TIME -> 1; none -> -1


class KafkaSourceError(RuntimeError):
    """The Kafka source cannot go on."""


class KafkaTopicMissingError(KafkaSourceError):
    """A subscribed topic does not exist."""


class KafkaDataLossError(KafkaSourceError):
    """Records the source should read are no longer in Kafka."""


@dataclass(frozen=True)
class _SourceConfig:
    client: dict[str, str]
    topics: tuple[str, ...]
    pattern: str | None
    starting: str
    max_offsets: int | None
    fail_on_data_loss: bool
    timeout_s: float
    read_committed: bool

    def subscribed(self, topic: str) -> bool:
        """Whether the source reads ``topic``."""
        if self.pattern is None:
            return topic in self.topics
        return not topic.startswith("__") and re.fullmatch(self.pattern, topic) is not None

    @classmethod
    def parse(cls, options: Mapping[str, str]) -> _SourceConfig:
        opts = _lower(options)
        client = _client_conf(opts)
        if "assign" in opts:
            raise ValueError(
                "option 'assign' is not supported by kspark_kafka; use 'subscribe' or "
                "'subscribePattern'"
            )
        topics = tuple(t.strip() for t in opts.get("subscribe", "").split(",") if t.strip())
        pattern = opts.get("subscribepattern", "").strip() or None
        if bool(topics) == bool(pattern):
            raise ValueError(
                "the kspark_kafka source needs one of the options 'subscribe' (a topic name, "
                "or names separated by commas) and 'subscribePattern' (a regular expression)"
            )
        if pattern is not None:
            try:
                re.compile(pattern)
            except re.error as exc:
                raise ValueError(f"option 'subscribePattern' {pattern!r}: {exc}") from None
        timeout_ms = _int_option(opts, "kafkaConsumer.pollTimeoutMs", _DEFAULT_TIMEOUT_MS)
        assert timeout_ms is not None
        isolation = client.get("isolation.level", "read_uncommitted").strip().lower()
        if isolation not in ("read_uncommitted", "read_committed"):
            raise ValueError(
                "option 'kafka.isolation.level' must be 'read_uncommitted' or "
                f"'read_committed', not {isolation!r}"
            )
        return cls(
            client=client,
            topics=topics,
            pattern=pattern,
            starting=opts.get("startingoffsets", "earliest").strip(),
            max_offsets=_int_option(opts, "maxOffsetsPerTrigger", None),
            fail_on_data_loss=_bool_option(opts, "failOnDataLoss", True),
            timeout_s=timeout_ms / 1000.0,
            read_committed=isolation == "read_committed",
        )

    def consumer_conf(self) -> dict[str, Any]:
        return {
            # librdkafka wants a group id; the source never joins the group or commits to it
            "group.id": "kspark-kafka-source",
            "isolation.level": "read_uncommitted",
            **self.client,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "error",
        }


# ---------------------------------------------------------------------------------------------
# the data source


class KafkaDataSource(DataSource):
    """Kafka as a streaming source and sink: ``format("kspark_kafka")``."""

    @classmethod
    def name(cls) -> str:
        return "kspark_kafka"

    def schema(self) -> StructType:
        return KAFKA_SCHEMA

    def streamReader(self, schema: StructType) -> KafkaStreamReader:
        return KafkaStreamReader(_SourceConfig.parse(self.options))

    def streamWriter(self, schema: StructType, overwrite: bool) -> KafkaStreamWriter:
        return KafkaStreamWriter(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool) -> KafkaBatchWriter:
        # kspark's sinks write each micro-batch from foreachBatch, as a batch write
        return KafkaBatchWriter(self.options, schema)


# ---------------------------------------------------------------------------------------------
# the source


class KafkaInputPartition(InputPartition):
    """The records ``[start, end)`` of one topic-partition."""

    def __init__(self, topic: str, partition: int, start: int, end: int) -> None:
        super().__init__((topic, partition, start, end))
        self.topic = topic
        self.partition = partition
        self.start = start
        self.end = end

    def __repr__(self) -> str:
        return f"KafkaInputPartition({self.topic}-{self.partition} [{self.start}, {self.end}))"


def spread_limit(lags: Mapping[TopicPartitionKey, int], limit: int) -> dict[TopicPartitionKey, int]:
    """How many records each partition may read when all of them together may read ``limit``.

    Each partition gets a share in proportion to its backlog (as Spark's Kafka source does);
    the shares are rounded by largest remainder so they add up to exactly
    ``min(limit, total backlog)`` and no share exceeds its backlog.
    """
    lags = {k: v for k, v in lags.items() if v > 0}
    total = sum(lags.values())
    if total <= limit:
        return dict(lags)
    shares = {k: lag * limit // total for k, lag in lags.items()}
    rest = limit - sum(shares.values())
    by_remainder = sorted(lags, key=lambda k: (-(lags[k] * limit % total), k))
    for k in by_remainder[:rest]:
        shares[k] += 1
    return shares


def _flatten(offsets: Mapping[str, Mapping[str, int]]) -> dict[TopicPartitionKey, int]:
    return {(t, int(p)): int(o) for t, parts in offsets.items() for p, o in parts.items()}


def _nest(flat: Mapping[TopicPartitionKey, int]) -> Offsets:
    out: Offsets = {}
    for (t, p), o in sorted(flat.items()):
        out.setdefault(t, {})[str(p)] = int(o)
    return out


def _tp_text(tp: TopicPartitionKey) -> str:
    return f"{tp[0]}-{tp[1]}"


def _timestamp(ts_type: int, ts_ms: int) -> tuple[datetime | None, int]:
    """A Kafka timestamp as Spark's source gives it. One that no ``datetime`` (nor Spark's
    timestamp type) can hold, outside the years 1 to 9999, is read as null: an invalid
    timestamp, which ``StreamsConfig.timestamp_policy`` decides about, naming the record,
    instead of an ``OverflowError`` that would fail every read of its partition.

    >>> _timestamp(1, 2**62)[0] is None, _timestamp(1, 0)[0].year
    (True, 1970)
    """
    kind = _TIMESTAMP_TYPES.get(ts_type)
    if kind is None:
        return None, -1
    try:
        return _EPOCH + timedelta(milliseconds=ts_ms), kind
    except OverflowError:
        return None, kind


def _envelope(msg: Message) -> tuple[Any, ...]:
    """A consumed record as a row of :data:`KAFKA_SCHEMA`."""
    ts_type, ts_ms = msg.timestamp()
    ts, kind = _timestamp(ts_type, ts_ms)
    raw_headers = msg.headers()
    headers: list[tuple[str, bytes | None]] | None = None
    if raw_headers:
        pairs = raw_headers.items() if isinstance(raw_headers, dict) else raw_headers
        headers = [(k, v.encode() if isinstance(v, str) else v) for k, v in pairs]
    return (
        msg.key(),
        msg.value(),
        msg.topic(),
        msg.partition(),
        msg.offset(),
        ts,
        kind,
        headers,
    )


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """Plans micro-batches from Kafka's offsets and reads one topic-partition per task.

    An instance is created on the driver (offset planning) and pickled to the executors
    (``read``), so it holds no client at pickling time: the admin client is made when first
    needed and dropped by ``__getstate__``.
    """

    def __init__(self, config: _SourceConfig) -> None:
        self._config = config
        self._admin: AdminClient | None = None
        self._last_end: Offsets | None = None
        self._target: dict[TopicPartitionKey, int] | None = None
        self._reported: Offsets | None = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        state["_admin"] = None
        return state

    # -- metadata ------------------------------------------------------------------------------

    def _admin_client(self) -> AdminClient:
        if self._admin is None:
            from confluent_kafka.admin import AdminClient

            self._admin = AdminClient(dict(self._config.client))
        return self._admin

    def _partitions(
        self, known: Container[str] = ()
    ) -> tuple[dict[str, list[int]], list[TopicPartitionKey]]:
        """The partitions of each subscribed topic, by topic and all of them. A subscribed
        topic that does not exist is an error, unless it is in ``known`` (read before: it
        was deleted, which the caller handles as data loss).

        It lists every topic rather than asking for the subscribed ones by name, because
        asking by name makes brokers with auto-creation create them.
        """
        try:
            metadata = self._admin_client().list_topics(timeout=self._config.timeout_s)
        except Exception as exc:
            raise KafkaSourceError(
                f"cannot list the topics of Kafka at {self._config.client['bootstrap.servers']}"
                f": {exc}"
            ) from exc
        found: dict[str, list[int]] = {}
        missing: list[str] = []
        subscribed = self._config.topics
        if self._config.pattern is not None:
            # the topics that match now (one read before and gone is the caller's data loss)
            subscribed = tuple(sorted(t for t in metadata.topics if self._config.subscribed(t)))
        for topic in subscribed:
            meta = metadata.topics.get(topic)
            if meta is not None and meta.error is None and meta.partitions:
                found[topic] = sorted(int(p) for p in meta.partitions)
            elif topic not in known:
                missing.append(topic)
        if missing:
            names = ", ".join(repr(t) for t in missing)
            raise KafkaTopicMissingError(
                f"subscribed Kafka topic(s) {names} do not exist at "
                f"{self._config.client['bootstrap.servers']}; create them before starting "
                "the query (kspark_kafka does not create topics)"
            )
        return found, [(t, p) for t, parts in found.items() for p in parts]

    def _list_offsets(
        self, tps: Iterable[TopicPartitionKey], earliest: bool
    ) -> dict[TopicPartitionKey, int]:
        """The earliest offset, or the end offset (high watermark, or last stable offset with
        read_committed), of each topic-partition."""
        from confluent_kafka import IsolationLevel, TopicPartition
        from confluent_kafka.admin import OffsetSpec  # type: ignore[attr-defined]

        wanted = list(tps)
        if not wanted:
            return {}
        spec = (
            OffsetSpec.earliest()  # type: ignore[no-untyped-call]
            if earliest
            else OffsetSpec.latest()  # type: ignore[no-untyped-call]
        )
        request = {TopicPartition(t, p): spec for t, p in wanted}
        isolation = (
            IsolationLevel.READ_COMMITTED
            if self._config.read_committed
            else IsolationLevel.READ_UNCOMMITTED
        )
        futures = self._admin_client().list_offsets(
            request, isolation_level=isolation, request_timeout=self._config.timeout_s
        )
        out: dict[TopicPartitionKey, int] = {}
        for tp, future in futures.items():
            try:
                out[(tp.topic, tp.partition)] = int(future.result().offset)
            except Exception as exc:
                which = "earliest" if earliest else "latest"
                raise KafkaSourceError(
                    f"cannot fetch the {which} offset of {tp.topic}-{tp.partition}: {exc}"
                ) from exc
        return out

    # -- offsets -------------------------------------------------------------------------------

    def initialOffset(self) -> Offsets:
        found, tps = self._partitions()
        starting = self._config.starting
        if starting.lower() == "earliest":
            offsets = self._list_offsets(tps, earliest=True)
        elif starting.lower() == "latest":
            offsets = self._list_offsets(tps, earliest=False)
        else:
            offsets = self._specific_offsets(starting, found)
        self._last_end = _nest(offsets)
        return self._last_end

    def _specific_offsets(
        self, text: str, found: Mapping[str, list[int]]
    ) -> dict[TopicPartitionKey, int]:
        try:
            parsed = json.loads(text)
        except json.JSONDecodeError:
            parsed = None
        if not isinstance(parsed, dict) or not all(isinstance(v, dict) for v in parsed.values()):
            raise ValueError(
                "option 'startingOffsets' must be 'earliest', 'latest' or JSON like "
                f'{{"topic": {{"0": 23, "1": -2}}}}, not {text!r}'
            )
        wanted: dict[TopicPartitionKey, int] = {}
        for topic, parts in parsed.items():
            if topic not in found:
                raise ValueError(
                    f"option 'startingOffsets' names topic {topic!r}, which is not subscribed"
                )
            for p, o in parts.items():
                try:
                    tp, offset = (topic, int(p)), int(o)
                except (TypeError, ValueError):
                    raise ValueError(
                        f"option 'startingOffsets': bad partition/offset {p!r}: {o!r} "
                        f"for topic {topic!r}"
                    ) from None
                if offset < _EARLIEST or tp[1] not in found[topic]:
                    raise ValueError(
                        f"option 'startingOffsets': {_tp_text(tp)} offset {o!r} is not valid "
                        f"(partitions: {found[topic]}; offsets are >= 0, -2 earliest, -1 latest)"
                    )
                wanted[tp] = offset
        absent = [(t, p) for t, parts in found.items() for p in parts if (t, p) not in wanted]
        if absent:
            raise ValueError(
                "option 'startingOffsets' must give an offset for every partition of the "
                f"subscribed topics; missing: {', '.join(_tp_text(tp) for tp in absent)}"
            )
        low = self._list_offsets([tp for tp, o in wanted.items() if o == _EARLIEST], True)
        high = self._list_offsets([tp for tp, o in wanted.items() if o == _LATEST], False)
        return {tp: low.get(tp, high.get(tp, o)) for tp, o in wanted.items()}

    def getDefaultReadLimit(self) -> ReadLimit:
        if self._config.max_offsets is not None:
            return ReadMaxRows(self._config.max_offsets)
        return ReadAllAvailable()

    def _current_end(self, start: Mapping[TopicPartitionKey, int]) -> dict[TopicPartitionKey, int]:
        """The end offset of every partition now, with deleted topics handled as data loss."""
        _, tps = self._partitions(known={t for t, _ in start})
        gone = sorted(tp for tp in start if self._config.subscribed(tp[0]) and tp not in set(tps))
        if gone:
            self._data_loss(
                f"partitions {', '.join(_tp_text(tp) for tp in gone)} no longer exist "
                "(the topic was deleted or re-created)"
            )
        return self._list_offsets(tps, earliest=False)

    def _data_loss(self, what: str) -> None:
        if self._config.fail_on_data_loss:
            raise KafkaDataLossError(
                f"Kafka data loss: {what}. Some data may have been lost. If you want the "
                "query to go on with what is there, set the option failOnDataLoss=false."
            )
        _log.warning("Kafka data loss (failOnDataLoss=false, going on): %s", what)

    def latestOffset(self, start: Offsets | None = None, limit: ReadLimit | None = None) -> Offsets:
        """The end of the next micro-batch: the partitions' end offsets, capped by ``limit``.

        Without arguments (Spark's older call) it continues from the offset it returned last.
        """
        if start is None:
            start = self._last_end if self._last_end is not None else self.initialOffset()
        if limit is None:
            limit = self.getDefaultReadLimit()
        begin = {tp: o for tp, o in _flatten(start).items() if self._config.subscribed(tp[0])}
        latest = self._current_end(begin)
        self._reported = _nest(latest)

        end: dict[TopicPartitionKey, int] = {}
        for tp, high in latest.items():
            if self._target is not None:
                if tp not in self._target and tp not in begin:
                    continue  # appeared after the available-now target was taken
                high = min(high, self._target.get(tp, high))
            # a partition not in ``start`` is new: it is read from offset 0
            first = begin.get(tp, 0)
            if high < first:
                self._data_loss(
                    f"the end offset of {_tp_text(tp)} went back from {first} to {high} "
                    "(the topic was re-created or truncated)"
                )
                end[tp] = high  # partitions() reads the re-created partition from the start
            else:
                end[tp] = high

        lags = {tp: end[tp] - begin.get(tp, 0) for tp in end if end[tp] > begin.get(tp, 0)}
        if isinstance(limit, ReadMaxRows):
            shares = spread_limit(lags, int(limit.max_rows))
            for tp in lags:
                end[tp] = begin.get(tp, 0) + shares.get(tp, 0)
        elif isinstance(limit, ReadMinRows) and sum(lags.values()) < int(limit.min_rows):
            return dict(start)
        # drop new partitions that have nothing to read yet, so the offset does not change
        for tp in [tp for tp in end if tp not in begin and end[tp] == 0]:
            del end[tp]
        result = _nest(end)
        self._last_end = result
        return result

    def reportLatestOffset(self) -> Offsets | None:
        return self._reported

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._list_offsets(self._partitions()[1], earliest=False)

    def partitions(self, start: Offsets, end: Offsets) -> list[KafkaInputPartition]:
        begin = _flatten(start)
        out: list[KafkaInputPartition] = []
        for tp, stop in sorted(_flatten(end).items()):
            first = begin.get(tp, 0)
            if stop < first:
                first = 0  # the partition went back (failOnDataLoss=false): read it anew
            if first < stop:
                out.append(KafkaInputPartition(tp[0], tp[1], first, stop))
        return out

    def commit(self, end: Offsets) -> None:
        """Nothing to do: the offsets live in Spark's checkpoint."""

    def stop(self) -> None:
        self._admin = None

    # -- reading -------------------------------------------------------------------------------

    def read(self, partition: InputPartition) -> Iterator[tuple[Any, ...]]:
        if not isinstance(partition, KafkaInputPartition):
            raise KafkaSourceError(f"not a Kafka input partition: {partition!r}")
        return self._read(partition)

    def _read(self, part: KafkaInputPartition) -> Iterator[tuple[Any, ...]]:
        from confluent_kafka import Consumer

        consumer = Consumer(self._config.consumer_conf())
        try:
            yield from self._read_with(consumer, part)
        finally:
            consumer.close()

    def _range_error(self, part: KafkaInputPartition, low: int, high: int, what: str) -> str:
        return (
            f"{part.topic}-{part.partition}: the offsets [{part.start}, {part.end}) to read "
            f"are not all in Kafka, which has [{low}, {high}): {what}"
        )

    def _partition_gone(self, part: KafkaInputPartition, position: int, detail: str) -> None:
        """The partition no longer exists: an error, or (failOnDataLoss=false) a warning."""
        what = (
            f"Kafka topic-partition {part.topic}-{part.partition} does not exist (was the topic "
            f"deleted?) while reading offsets [{position}, {part.end}){detail}"
        )
        if self._config.fail_on_data_loss:
            raise KafkaTopicMissingError(
                f"{what}. If the query should go on without its records, set the option "
                "failOnDataLoss=false."
            )
        _log.warning("Kafka data loss (failOnDataLoss=false, going on): %s", what)

    def _watermarks(
        self, consumer: Consumer, part: KafkaInputPartition, position: int
    ) -> tuple[int, int] | None:
        """The partition's earliest and end offsets, or None if it is gone and may be."""
        from confluent_kafka import KafkaException, TopicPartition

        try:
            low, high = consumer.get_watermark_offsets(
                TopicPartition(part.topic, part.partition), timeout=self._config.timeout_s
            )
        except KafkaException as exc:
            if _is_unknown(exc.args[0] if exc.args else None):
                self._partition_gone(part, position, "")
                return None
            raise KafkaSourceError(
                f"cannot fetch the offsets of {part.topic}-{part.partition}: {exc}"
            ) from exc
        return int(low), int(high)

    def _read_with(
        self, consumer: Consumer, part: KafkaInputPartition
    ) -> Iterator[tuple[Any, ...]]:
        from confluent_kafka import KafkaError, TopicPartition

        fail = self._config.fail_on_data_loss
        start, end = part.start, part.end
        marks = self._watermarks(consumer, part, start)
        if marks is None:
            return
        low, high = marks
        if start < low:
            self._data_loss(
                self._range_error(part, low, high, f"offsets [{start}, {low}) were deleted")
            )
            start = low
        if end > high:
            self._data_loss(
                self._range_error(
                    part, low, high, "the partition ends before the batch's end offset"
                )
            )
            end = high
        if start >= end:
            return

        consumer.assign([TopicPartition(part.topic, part.partition, start)])
        deadline = time.monotonic() + self._config.timeout_s
        position = start
        while position < end:
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise KafkaSourceError(
                    f"timed out after {self._config.timeout_s:g} s reading "
                    f"{part.topic}-{part.partition}: got offsets [{start}, {position}) of "
                    f"[{start}, {end}) (option kafkaConsumer.pollTimeoutMs)"
                )
            messages = consumer.consume(
                num_messages=min(end - position, _CONSUME_BATCH), timeout=min(remaining, 1.0)
            )
            for msg in messages:
                err = msg.error()
                if err is not None:
                    code = err.code()
                    if code == KafkaError._PARTITION_EOF:
                        eof = int(msg.offset() or 0)
                        if eof >= end:
                            position = end  # the range ends in a gap (compaction, txn markers)
                            break
                        marks = self._watermarks(consumer, part, position)
                        if marks is None:
                            return
                        low, high = marks
                        if high < end:
                            self._data_loss(
                                self._range_error(
                                    part, low, high, f"the partition ends at {high} now"
                                )
                            )
                            return
                        continue
                    if code in (KafkaError._AUTO_OFFSET_RESET, KafkaError.OFFSET_OUT_OF_RANGE):
                        marks = self._watermarks(consumer, part, position)
                        if marks is None:
                            return
                        low, high = marks
                        self._data_loss(
                            self._range_error(
                                part, low, high, f"offset {position} is out of range ({err})"
                            )
                        )
                        if not fail:
                            position = max(position, low)
                            if position >= min(end, high):
                                return
                            consumer.assign([TopicPartition(part.topic, part.partition, position)])
                        break
                    if _is_unknown(err):
                        self._partition_gone(part, position, f": {err}")
                        return
                    if err.fatal():
                        raise KafkaSourceError(
                            f"fatal Kafka error reading {part.topic}-{part.partition}: {err}"
                        )
                    _log.warning("Kafka error reading %s-%s: %s", part.topic, part.partition, err)
                    continue
                offset = int(msg.offset() or 0)
                if offset >= end:
                    position = end
                    break
                if offset < position:
                    continue
                yield _envelope(msg)
                position = offset + 1


def _is_unknown(err: KafkaError | None) -> bool:
    from confluent_kafka import KafkaError

    if not isinstance(err, KafkaError):
        return False
    return err.code() in (
        KafkaError.UNKNOWN_TOPIC_OR_PART,
        KafkaError._UNKNOWN_TOPIC,
        KafkaError._UNKNOWN_PARTITION,
    )
