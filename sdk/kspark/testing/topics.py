"""The test driver's topics: the records a test pipes in (:class:`TestInputTopic`) and
reads out (:class:`TestOutputTopic`), as Kafka Streams' ``TestInputTopic`` and
``TestOutputTopic``.

They buffer, encode and decode records and read what the engine wrote; running the
topology is the driver's (:mod:`kspark.testing.driver`), which they reach through
:class:`TopicHost` only.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

import attrs

from kspark.errors import InvalidArgumentError
from kspark.plan.types import Dynamic, TypeDesc
from kspark.runtime import filesink
from kspark.testing.local import LocalEngine

if TYPE_CHECKING:
    from kspark.testing.local import LocalEngine

__all__ = [
    "Headers",
    "TestInputTopic",
    "TestOutputTopic",
    "TestRecord",
    "TopicHost",
    "in_output_order",
    "reader",
    "writer",
]


class TopicHost(Protocol):
    """What a test topic needs of its driver
    (:class:`~kspark.testing.driver.TopologyTestDriver`): where the topic's files go, the
    engine that holds its records, and the run of what is pending before a read."""

    @property
    def engine(self) -> str: ...

    @property
    def _local(self) -> LocalEngine | None: ...

    @property
    def _workdir(self) -> str: ...

    def _topic_path(self, name: str) -> str: ...

    def _next_seq(self) -> int: ...

    def _process_pending(self) -> None: ...


K = TypeVar("K")
V = TypeVar("V")

Headers = Sequence[tuple[str, bytes | None]]


@attrs.frozen(kw_only=True)
class TestRecord(Generic[K, V]):
    """A record read from (or piped to) a test topic."""

    __test__ = False  # not a pytest test class

    key: K
    value: V
    timestamp: int | None = None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    topic: str | None = None
    partition: int | None = None
    offset: int | None = None


class TestInputTopic(Generic[K, V]):
    """An input topic of the driver; records are buffered until the next ``process()``."""

    __test__ = False

    def __init__(
        self,
        driver: TopicHost,
        name: str,
        key: TypeDesc,
        value: TypeDesc,
        stored: tuple[TypeDesc, TypeDesc] | None = None,
    ) -> None:
        self._driver = driver
        self.name = name
        stored_key, stored_value = stored or (key, value)
        # the columns are written as the topology reads them: a key or value it reads as
        # dynamic is written as JSON text, whatever type the test declares for it
        self._key = stored_key if isinstance(stored_key, Dynamic) else key
        self._value = stored_value if isinstance(stored_value, Dynamic) else value
        self._offsets: dict[int, int] = {}
        self._clock = int(time.time() * 1000)
        self._pending: list[dict[str, Any]] = []
        self._kenc = writer(stored_key, key, "key")
        self._venc = writer(stored_value, value, "value")

    def pipe_input(
        self,
        key: K | None,
        value: V | None,
        timestamp: int | None = None,
        headers: Headers | None = None,
        partition: int = 0,
    ) -> None:
        """Buffer one record. ``timestamp`` is in ms (default: the topic's clock)."""
        if timestamp is None:
            timestamp = self._clock
        if isinstance(timestamp, bool) or not isinstance(timestamp, int):
            raise InvalidArgumentError(f"timestamp must be int milliseconds, got {timestamp!r}")
        offset = self._offsets.get(partition, 0)
        self._offsets[partition] = offset + 1
        self._pending.append(
            {
                "key": self._kenc(key),
                "value": self._venc(value),
                "timestamp": timestamp,
                "headers": [{"key": k, "value": v} for k, v in (headers or ())],
                "partition": partition,
                "offset": offset,
                "ks_seq": self._driver._next_seq(),
            }
        )

    def pipe_records(self, records: Iterable[TestRecord[K, V] | tuple[Any, ...]]) -> None:
        """Buffer several records: ``TestRecord`` objects or ``(key, value[, timestamp])``."""
        for r in records:
            if isinstance(r, TestRecord):
                self.pipe_input(r.key, r.value, r.timestamp, r.headers, r.partition or 0)
            else:
                self.pipe_input(*r)

    def pipe_value_list(self, values: Iterable[V]) -> None:
        for v in values:
            self.pipe_input(None, v)

    def _take(self) -> list[dict[str, Any]]:
        """The buffered records, handed to the in-process engine."""
        rows, self._pending = self._pending, []
        return rows

    def _flush(self) -> None:
        if not self._pending:
            return
        import pyarrow as pa
        import pyarrow.parquet as pq

        from kspark_server import envelope as env
        from kspark_server.transport import arrow_schema

        fields = env.stored_fields(self._key.spark_json(), self._value.spark_json())
        # timestamps as UTC instants, a naive datetime as UTC, as the operators write them
        schema = arrow_schema(json.dumps({"type": "struct", "fields": fields}))
        table = pa.Table.from_pylist(self._pending, schema=schema)
        directory = self._driver._topic_path(self.name)
        os.makedirs(directory, exist_ok=True)
        tmp = os.path.join(self._driver._workdir, f".tmp-{uuid.uuid4().hex}.parquet")
        pq.write_table(table, tmp)
        # a rename makes the file appear whole to Spark's file listing
        os.replace(tmp, os.path.join(directory, f"part-{self._driver._next_seq():012d}.parquet"))
        self._pending.clear()


class TestOutputTopic(Generic[K, V]):
    """An output topic of the driver; reading consumes what has been read."""

    __test__ = False

    def __init__(
        self,
        driver: TopicHost,
        name: str,
        key: TypeDesc,
        value: TypeDesc,
        stored: tuple[TypeDesc, TypeDesc] | None = None,
    ) -> None:
        self._driver = driver
        self.name = name
        stored_key, stored_value = stored or (key, value)
        self._kdec = reader(stored_key, key, "key")
        self._vdec = reader(stored_value, value, "value")
        self._position = 0

    def _all_rows(self) -> list[dict[str, Any]]:
        engine = self._driver._local
        if engine is not None:
            return [dict(r) for batch in engine.topics.get(self.name, ()) for r in batch]
        if self._driver.engine == "local":  # nothing processed yet
            return []
        import pyarrow.parquet as pq

        directory = self._driver._topic_path(self.name)
        if not os.path.isdir(directory):
            return []
        rows: list[dict[str, Any]] = []
        logged = filesink.logged_batches(directory)
        if logged is not None:  # written by Spark's file sink, with the sort columns
            for files in logged:
                rows.extend(in_output_order([pq.read_table(f).to_pylist() for f in files]))
            return rows
        batches = sorted(
            (int(d.split("=", 1)[1]), d) for d in os.listdir(directory) if d.startswith("batch_id=")
        )
        for _, d in batches:
            path = os.path.join(directory, d)
            files = sorted(f for f in os.listdir(path) if f.endswith(".parquet"))
            rows.extend(
                in_output_order([pq.read_table(os.path.join(path, f)).to_pylist() for f in files])
            )
        return rows

    def read_records(self) -> list[TestRecord[K, V]]:
        """Records written since the last read, in output order."""
        self._driver._process_pending()
        rows = self._all_rows()
        out = []
        for offset in range(self._position, len(rows)):
            r = rows[offset]
            out.append(
                TestRecord(
                    key=self._kdec(r["key"]),
                    value=self._vdec(r["value"]),
                    timestamp=r.get("timestamp"),
                    headers=tuple((h["key"], h["value"]) for h in r.get("headers") or ()),
                    topic=self.name,
                    partition=r.get("partition"),
                    offset=offset,
                )
            )
        self._position = len(rows)
        return out

    def read_key_values(self) -> list[tuple[K, V]]:
        return [(r.key, r.value) for r in self.read_records()]

    def read_values(self) -> list[V]:
        return [r.value for r in self.read_records()]

    def read_raw(self) -> list[dict[str, Any]]:
        """All rows of the topic's files as written (for dead-letter topics)."""
        self._driver._process_pending()
        return self._all_rows()

    def read_key_values_to_map(self) -> dict[Any, V]:
        """The records written since the last read as a dict: each key's last value (a
        tombstone's ``None`` too), as Kafka Streams' ``readKeyValuesToMap``.

        Examples
        --------
        >>> out.read_key_values_to_map()  # doctest: +SKIP
        {'a': 2, 'b': None}
        """
        from kspark_server import codec

        result: dict[Any, V] = {}
        for r in self.read_records():
            if r.key is None:
                raise InvalidArgumentError(
                    f"topic {self.name!r} has a record with a null key; read_key_values_to_map "
                    "needs keys (read_key_values() keeps every record)"
                )
            try:
                result[r.key] = r.value
            except TypeError:  # a dynamic key: a dict or list
                result[codec.hashable(r.key)] = r.value
        return result

    def get_queue_size(self) -> int:
        """How many records are written and not read yet (Kafka Streams'
        ``getQueueSize``)."""
        self._driver._process_pending()
        return max(0, len(self._all_rows()) - self._position)

    def is_empty(self) -> bool:
        self._driver._process_pending()
        return len(self._all_rows()) <= self._position


def in_output_order(files: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """One micro-batch's rows, from its files, in output order. Rows that Spark's file sink
    wrote carry their source position (``ks_seq``, ``ks_sub``), by which they are sorted
    (Spark cannot sort a stream); the batch-folder writer wrote one file, sorted."""
    rows = [r for f in files for r in f]
    if rows and "ks_seq" in rows[0]:
        rows.sort(key=lambda r: (r["ks_seq"], r.get("ks_sub") or 0))
        for r in rows:
            r.pop("ks_seq")
            r.pop("ks_sub", None)
    return rows


def reader(stored: TypeDesc, wanted: TypeDesc, what: str) -> Callable[[Any], Any]:
    """Reads a column written as ``stored`` as a value of type ``wanted``: a dynamic value
    (JSON text) converts to a declared type, and fails on the record that does not."""
    from kspark_server import codec

    if isinstance(stored, Dynamic) and not isinstance(wanted, Dynamic):
        load, convert = codec.decoder(stored.spec()), codec.converter(wanted.spec(), what)
        return lambda x: convert(load(x))
    # a declared type read as dynamic keeps the type it was written with
    return codec.decoder((stored if isinstance(wanted, Dynamic) else wanted).spec())


def writer(stored: TypeDesc, declared: TypeDesc, what: str) -> Callable[[Any], Any]:
    """Writes a value the test declares as ``declared`` into a column the topology reads
    as ``stored``: checked against the declared type, then as JSON text where the topology
    reads a dynamic value (a record as the dict of its fields)."""
    from kspark_server import codec

    check = codec.encoder(declared.spec(), what)
    if isinstance(stored, Dynamic) and not isinstance(declared, Dynamic):
        dump = codec.encoder(stored.spec(), what)
        return lambda x: dump(check(x))
    return check
