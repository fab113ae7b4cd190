"""The Kafka sink of the ``kspark_kafka`` data source (:mod:`kspark_server.kafka` has the
source and the options; its docstring says what the sink writes and guarantees).

Shipped to the workers by value, as the source: standard library, pyspark and pyarrow at the
top, ``confluent_kafka`` inside the methods that need it."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    StringType,
    StructType,
    TimestampType,
)

from kspark_server.envelope import DLQ_EXCEPTION_HEADER
from kspark_server.kafka_conf import EPOCH as _EPOCH
from kspark_server.kafka_conf import client_conf as _client_conf
from kspark_server.kafka_conf import lower as _lower

if TYPE_CHECKING:
    from confluent_kafka import KafkaError, Message, Producer

__all__ = [
    "KafkaBatchWriter",
    "KafkaSinkError",
    "KafkaStreamWriter",
    "KafkaWriterCommitMessage",
]

_log = logging.getLogger("kspark_server.kafka")


class KafkaSinkError(RuntimeError):
    """The Kafka sink could not write a batch."""


def _too_large(err: Any) -> bool:
    """Whether a Kafka error says that a record is over a size limit."""
    if err is None:
        return False
    try:
        from confluent_kafka import KafkaError

        return bool(err.code() == KafkaError.MSG_SIZE_TOO_LARGE)
    except (AttributeError, ImportError):
        return False


_SINK_COLUMNS: dict[str, tuple[type[DataType], ...]] = {
    "key": (BinaryType, StringType),
    "value": (BinaryType, StringType),
    "headers": (ArrayType,),
    "partition": (IntegerType,),
    "topic": (StringType,),
    "timestamp": (TimestampType, LongType),
}


@dataclass
class KafkaWriterCommitMessage(WriterCommitMessage):
    """What one write task did: how many records it wrote."""

    count: int


def _check_sink_schema(schema: StructType, default_topic: str | None) -> None:
    fields = {f.name: f.dataType for f in schema.fields}
    if "value" not in fields:
        raise ValueError(
            "the kspark_kafka sink needs a 'value' column (binary or string); "
            f"the columns are {list(fields)}"
        )
    for name, allowed in _SINK_COLUMNS.items():
        dtype = fields.get(name)
        if dtype is not None and not isinstance(dtype, allowed):
            wanted = " or ".join(t.__name__.removesuffix("Type").lower() for t in allowed)
            raise ValueError(
                f"the kspark_kafka sink's column {name!r} must be {wanted}, "
                f"not {dtype.simpleString()}"
            )
    headers = fields.get("headers")
    if headers is not None:
        ok = (
            isinstance(headers, ArrayType)
            and isinstance(headers.elementType, StructType)
            and [f.name for f in headers.elementType.fields] == ["key", "value"]
            and isinstance(headers.elementType.fields[0].dataType, StringType)
            and isinstance(headers.elementType.fields[1].dataType, BinaryType)
        )
        if not ok:
            raise ValueError(
                "the kspark_kafka sink's column 'headers' must be "
                f"array<struct<key:string,value:binary>>, not {headers.simpleString()}"
            )
    if "topic" not in fields and not default_topic:
        raise ValueError("the kspark_kafka sink needs a 'topic' column or the option 'topic'")


def _to_bytes(value: Any, column: str) -> bytes | None:
    if value is None:
        return None
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, bytearray | memoryview):
        return bytes(value)
    raise KafkaSinkError(f"column {column!r} holds {type(value).__name__}, not bytes or str")


def _headers(value: Any) -> list[tuple[str, bytes | None]] | None:
    if not value:
        return None
    out: list[tuple[str, bytes | None]] = []
    for h in value:
        if isinstance(h, dict):
            k, v = h.get("key"), h.get("value")
        else:  # a Row or a tuple
            k, v = h[0], h[1]
        if k is None:
            raise KafkaSinkError("a header has a null key")
        out.append((str(k), _to_bytes(v, "headers")))
    return out


def _timestamp_ms(value: Any) -> int:
    """Milliseconds since the epoch; 0 lets the producer use the current time.

    A naive datetime (a ``TIMESTAMP_NTZ`` column, or a Row built by hand) is UTC, as
    everywhere in kspark (docs/concepts.md, "Time zones"), never the worker's local time:
    the same record gets the same Kafka timestamp on every server.
    """
    if value is None:
        return 0
    if isinstance(value, datetime):
        aware = value if value.tzinfo is not None else value.replace(tzinfo=UTC)
        return (aware - _EPOCH) // timedelta(milliseconds=1)
    return int(value)


_Record = tuple[str | None, bytes | None, bytes | None, Any, int, int]


def _records_of_batch(batch: Any) -> Iterator[_Record]:
    names = set(batch.schema.names)

    def column(name: str) -> list[Any]:
        if name in names:
            values: list[Any] = batch.column(name).to_pylist()
            return values
        return [None] * batch.num_rows

    topics, keys, values = column("topic"), column("key"), column("value")
    headers, partitions, stamps = column("headers"), column("partition"), column("timestamp")
    for i in range(batch.num_rows):
        part = partitions[i]
        yield (
            topics[i],
            _to_bytes(keys[i], "key"),
            _to_bytes(values[i], "value"),
            _headers(headers[i]),
            -1 if part is None else int(part),
            _timestamp_ms(stamps[i]),
        )


def _record_of_row(row: Any) -> _Record:
    fields = getattr(row, "__fields__", None)
    get: Callable[[str], Any]
    if isinstance(row, Mapping):
        get = row.get
    elif fields is not None:
        present = set(fields)

        def get(name: str) -> Any:
            return row[name] if name in present else None
    else:
        raise KafkaSinkError(f"cannot write a {type(row).__name__}: expected a Row")
    part = get("partition")
    return (
        get("topic"),
        _to_bytes(get("key"), "key"),
        _to_bytes(get("value"), "value"),
        _headers(get("headers")),
        -1 if part is None else int(part),
        _timestamp_ms(get("timestamp")),
    )


class KafkaStreamWriter(DataSourceStreamArrowWriter):
    """Produces each micro-batch's rows to Kafka and fails the task on any failed delivery.

    ``write`` receives Arrow record batches from Spark; it also accepts Rows (or dicts) so it
    can be driven directly.
    """

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        opts = _lower(options)
        self._client = _client_conf(opts)
        topic = opts.get("topic", "").strip()
        self._default_topic = topic or None
        _check_sink_schema(schema, self._default_topic)

    def _producer_conf(self) -> dict[str, Any]:
        return {"enable.idempotence": True, "partitioner": "murmur2_random", **self._client}

    def write(self, iterator: Iterator[Any]) -> KafkaWriterCommitMessage:
        from confluent_kafka import Producer

        producer = Producer(self._producer_conf())
        failures: list[str] = []
        failed = 0

        def on_delivery(err: KafkaError | None, msg: Message) -> None:
            nonlocal failed
            if err is not None:
                failed += 1
                if len(failures) < 5:
                    text = f"{msg.topic()}[{msg.partition()}]: {err.str()}"
                    if _too_large(err):  # the broker's limit is below the producer's
                        text += (
                            f" (a record of {len(msg) or 0} bytes: raise max.message.bytes on "
                            "the broker or the topic, or set the sink's "
                            "kafka.message.max.bytes to the broker's limit, so that larger "
                            "records go to the production handler)"
                        )
                    failures.append(text)

        count = 0
        for item in iterator:
            records = (
                _records_of_batch(item) if hasattr(item, "num_rows") else [_record_of_row(item)]
            )
            for record in records:
                self._produce(producer, record, on_delivery)
                count += 1
                if count % 1000 == 0:
                    producer.poll(0)
            if failed:
                break
        producer.flush()
        unsent = len(producer)
        if failed or unsent:
            raise KafkaSinkError(
                f"the kspark_kafka sink could not write {failed + unsent} of {count} records "
                f"to Kafka at {self._client['bootstrap.servers']}"
                + (f"; first errors: {'; '.join(failures)}" if failures else "")
                + (f"; {unsent} still unsent after flush" if unsent else "")
            )
        return KafkaWriterCommitMessage(count=count)

    def _produce(
        self,
        producer: Producer,
        record: _Record,
        on_delivery: Callable[[KafkaError | None, Message], None],
    ) -> None:
        from confluent_kafka import KafkaException

        topic, key, value, headers, partition, timestamp = record
        topic = topic or self._default_topic
        if not topic:
            raise KafkaSinkError(
                "a row has a null 'topic' and the kspark_kafka sink has no 'topic' option"
            )
        while True:
            try:
                producer.produce(
                    topic,
                    value=value,
                    key=key,
                    partition=partition,
                    on_delivery=on_delivery,
                    timestamp=timestamp,
                    headers=headers,
                )
                return
            except BufferError:
                producer.poll(0.1)  # the local queue is full: serve deliveries, then retry
            except KafkaException as exc:
                if _too_large(exc.args[0] if exc.args else None):
                    raise KafkaSinkError(
                        self._too_large_text(topic, key, value, headers, str(exc))
                    ) from exc
                raise KafkaSinkError(
                    f"the kspark_kafka sink could not produce to {topic}"
                    f"{'' if partition < 0 else f'[{partition}]'}: {exc}"
                ) from exc

    def _too_large_text(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        headers: list[tuple[str, bytes | None]] | None,
        detail: str,
    ) -> str:
        """The error of a record the producer refuses as too large. A sink's records were
        measured before (``kspark_server.recordsize``) and went to the production handler,
        so this is a dead-letter record (which carries the raw record and the error), or a
        limit kspark did not know: the batch fails, once, with the fix."""
        size = len(key or b"") + len(value or b"")
        size += sum(len(k) + len(v or b"") for k, v in headers or ())
        limit = self._client.get("message.max.bytes", "1000000 (librdkafka's default)")
        dead_letter = any(k == DLQ_EXCEPTION_HEADER for k, _ in headers or ())
        what = "a dead-letter record" if dead_letter else "a record"
        fix = (
            "A dead-letter record keeps the raw record and the error, so it is larger than "
            "the record: give the dead-letter topic a higher kafka.message.max.bytes (and "
            "max.message.bytes on the broker), or a file topic"
            if dead_letter
            else "Raise kafka.message.max.bytes on the sink's Topic.kafka (and "
            "max.message.bytes on the broker), or make the records smaller"
        )
        return (
            f"the kspark_kafka sink could not produce {what} of {size} bytes (key, value "
            f"and headers) to Kafka topic {topic}: it is over the limit "
            f"(message.max.bytes={limit}): {detail}. {fix}."
        )

    def commit(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to do: each task's records are in Kafka when its ``write`` returns."""

    def abort(self, messages: Sequence[WriterCommitMessage | None], batchId: int) -> None:
        """Nothing to undo: records already produced stay (at-least-once)."""


class KafkaBatchWriter(DataSourceArrowWriter):
    """The batch form of :class:`KafkaStreamWriter` (``df.write.format("kspark_kafka")``),
    used by kspark's ``foreachBatch`` sink writer."""

    def __init__(self, options: Mapping[str, str], schema: StructType) -> None:
        self._stream = KafkaStreamWriter(options, schema)

    def write(self, iterator: Iterator[Any]) -> KafkaWriterCommitMessage:
        return self._stream.write(iterator)

    def commit(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """Nothing to do: each task's records are in Kafka when its ``write`` returns."""

    def abort(self, messages: Sequence[WriterCommitMessage | None]) -> None:
        """Nothing to undo: records already produced stay (at-least-once)."""
