"""The Processor API's types: processors, their contexts, records and store interfaces.

User processors run in the server's Python workers, so the classes they subclass live in
``kspark_server`` (shipped by value, standard library only); user code imports them as
:mod:`kspark.processor` and :mod:`kspark.state`.

Examples
--------
>>> r = Record("k", 1, 1000)
>>> r.with_value("one")
Record(key='k', value='one', timestamp=1000, headers=())
>>> r.with_key(None).key is None
True
>>> PunctuationType.STREAM_TIME.value
'STREAM_TIME'
"""

from __future__ import annotations

import abc
import dataclasses
import enum
from collections.abc import Callable
from datetime import timedelta
from types import TracebackType
from typing import Any, Generic, Self, TypeVar

__all__ = [
    "Cancellable",
    "FixedKeyProcessor",
    "FixedKeyProcessorContext",
    "FixedKeyRecord",
    "KeyValueIterator",
    "KeyValueStore",
    "Processor",
    "ProcessorContext",
    "PunctuationType",
    "Punctuator",
    "Record",
    "RecordMetadata",
    "StateStoreError",
    "VersionedKeyValueStore",
    "VersionedRecord",
    "WindowStore",
    "WindowStoreIterator",
]

K = TypeVar("K")
V = TypeVar("V")
KIn = TypeVar("KIn")
VIn = TypeVar("VIn")
KOut = TypeVar("KOut")
VOut = TypeVar("VOut")
NK = TypeVar("NK")
NV = TypeVar("NV")

#: A punctuator: called with the time it fires at (stream time or wall-clock time, ms).
Punctuator = Callable[[int], None]

Headers = tuple[tuple[str, bytes | None], ...]


def _headers(headers: Any) -> Headers:
    if headers is None or headers == ():
        return ()
    if type(headers) is tuple and all(type(h) is tuple and len(h) == 2 for h in headers):
        return headers  # already normalized (a record's own headers)
    if isinstance(headers, dict):
        return tuple((str(k), v) for k, v in headers.items())
    return tuple((str(k), v) for k, v in headers)


class StateStoreError(RuntimeError):
    """A processor asked for a state store it is not connected to, or used one wrongly."""


@dataclasses.dataclass(frozen=True)
class _RecordFields(Generic[K, V]):
    """What a :class:`Record` and a :class:`FixedKeyRecord` hold, and the changes both
    allow; each change makes a record of the same class."""

    key: K
    value: V
    timestamp: int
    headers: Headers = ()

    def __init__(self, key: K, value: V, timestamp: int, headers: Any = None) -> None:
        object.__setattr__(self, "key", key)
        object.__setattr__(self, "value", value)
        object.__setattr__(self, "timestamp", int(timestamp))
        object.__setattr__(self, "headers", _headers(headers))

    def with_timestamp(self, timestamp: int) -> Self:
        """This record with another timestamp (ms)."""
        return type(self)(self.key, self.value, timestamp, self.headers)

    def with_headers(self, headers: Any) -> Self:
        """This record with other headers."""
        return type(self)(self.key, self.value, self.timestamp, headers)


class Record(_RecordFields[K, V]):
    """A record a processor receives or forwards; immutable (``with_*`` give new ones).

    ``headers`` are ``(key, value bytes)`` pairs; a dict or None is accepted too.

    Examples
    --------
    >>> r = Record("user-1", 3, 1_000, {"source": b"web"})
    >>> r.headers
    (('source', b'web'),)
    >>> r.with_timestamp(2_000).with_headers(None)
    Record(key='user-1', value=3, timestamp=2000, headers=())
    """

    def with_key(self, key: NK) -> Record[NK, V]:
        """This record with another key."""
        return Record(key, self.value, self.timestamp, self.headers)

    def with_value(self, value: NV) -> Record[K, NV]:
        """This record with another value."""
        return Record(self.key, value, self.timestamp, self.headers)


class FixedKeyRecord(_RecordFields[K, V]):
    """A record of a :class:`FixedKeyProcessor`: its key cannot change (no ``with_key``).

    Examples
    --------
    >>> FixedKeyRecord("k", 1, 5).with_value(2.5)
    FixedKeyRecord(key='k', value=2.5, timestamp=5, headers=())
    """

    def with_value(self, value: NV) -> FixedKeyRecord[K, NV]:
        """This record with another value."""
        return FixedKeyRecord(self.key, value, self.timestamp, self.headers)


@dataclasses.dataclass(frozen=True)
class RecordMetadata:
    """Where the record being processed came from (``ProcessorContext.record_metadata``)."""

    topic: str | None
    partition: int | None
    offset: int | None


class PunctuationType(enum.Enum):
    """What time a punctuator follows."""

    #: the task's stream time: the largest timestamp of the records it has processed
    STREAM_TIME = "STREAM_TIME"
    #: the system clock, checked at micro-batch boundaries (see docs/processor-api.md)
    WALL_CLOCK_TIME = "WALL_CLOCK_TIME"


class Cancellable(abc.ABC):
    """What ``ProcessorContext.schedule`` returns: ``cancel()`` stops the punctuator."""

    @abc.abstractmethod
    def cancel(self) -> None:
        """Stop the punctuator (it fires no more in this task)."""


class _ContextBase(abc.ABC):
    """What both contexts share."""

    @property
    @abc.abstractmethod
    def application_id(self) -> str:
        """The app's ``application_id``."""

    @property
    @abc.abstractmethod
    def task_id(self) -> str:
        """The task, as ``<sub-topology>_<partition>``."""

    @abc.abstractmethod
    def schedule(
        self, interval: timedelta, type: PunctuationType, punctuator: Punctuator
    ) -> Cancellable:
        """Call ``punctuator(time)`` every ``interval`` of ``type``'s time."""

    @abc.abstractmethod
    def get_state_store(self, name: str) -> Any:
        """The store ``name``, which the processor must be connected to (``process(...,
        name)``)."""

    @abc.abstractmethod
    def record_metadata(self) -> RecordMetadata | None:
        """Topic, partition and offset of the record being processed; None in a
        punctuator."""

    @abc.abstractmethod
    def current_stream_time_ms(self) -> int:
        """The task's stream time (the largest timestamp processed; -1 before any)."""

    @abc.abstractmethod
    def current_system_time_ms(self) -> int:
        """The system clock, in ms."""

    def commit(self) -> None:  # noqa: B027
        """Does nothing: kspark commits every task at the end of each micro-batch."""


class ProcessorContext(_ContextBase, Generic[KOut, VOut]):
    """The context of a :class:`Processor` (given to ``init``)."""

    @abc.abstractmethod
    def forward(self, record: Record[KOut, VOut], child_name: str | None = None) -> None:
        """Send ``record`` downstream (``child_name``: only the stream of that name;
        kspark's processors have one downstream stream, so it must be None)."""


class FixedKeyProcessorContext(_ContextBase, Generic[KOut, VOut]):
    """The context of a :class:`FixedKeyProcessor`."""

    @abc.abstractmethod
    def forward(self, record: FixedKeyRecord[KOut, VOut], child_name: str | None = None) -> None:
        """Send ``record`` downstream with its key unchanged."""


class Processor(abc.ABC, Generic[KIn, VIn, KOut, VOut]):
    """A processor of records with keys ``KIn``, values ``VIn``, forwarding ``KOut``,
    ``VOut`` (``KStream.process``). One instance per task and micro-batch: ``init``, then
    ``process`` for each of the batch's records of the task, then ``close``."""

    def init(self, context: ProcessorContext[KOut, VOut]) -> None:
        """Keep the context; get stores; schedule punctuators."""

    @abc.abstractmethod
    def process(self, record: Record[KIn, VIn]) -> None:
        """Process one record."""

    def close(self) -> None:
        """Release what ``init`` took (called after each micro-batch of the task)."""


class FixedKeyProcessor(abc.ABC, Generic[KIn, VIn, VOut]):
    """A processor that keeps each record's key (``KStream.process_values``)."""

    def init(self, context: FixedKeyProcessorContext[KIn, VOut]) -> None:
        """Keep the context; get stores; schedule punctuators."""

    @abc.abstractmethod
    def process(self, record: FixedKeyRecord[KIn, VIn]) -> None:
        """Process one record."""

    def close(self) -> None:
        """Release what ``init`` took (called after each micro-batch of the task)."""


# -- stores -----------------------------------------------------------------------------


class _ClosingIterator:
    """An iterator that is also a context manager, which closes it."""

    def __iter__(self) -> Self:
        return self

    def close(self) -> None:
        """Release the iterator."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class KeyValueIterator(_ClosingIterator, abc.ABC, Generic[K, V]):
    """An iterator of ``(key, value)`` pairs; a context manager that closes it."""

    @abc.abstractmethod
    def __next__(self) -> tuple[K, V]: ...


class KeyValueStore(abc.ABC, Generic[K, V]):
    """A task's key-value store (Kafka Streams' ``KeyValueStore``).

    Ranges compare keys as Python values (``from_key <= key <= to_key``); None bounds are
    open.
    """

    name: str

    @abc.abstractmethod
    def get(self, key: K) -> V | None:
        """The value of ``key``, or None."""

    @abc.abstractmethod
    def put(self, key: K, value: V | None) -> None:
        """Set ``key``'s value (None deletes it)."""

    @abc.abstractmethod
    def put_if_absent(self, key: K, value: V) -> V | None:
        """Put ``value`` if ``key`` has none; return the value it had."""

    @abc.abstractmethod
    def put_all(self, entries: list[tuple[K, V | None]]) -> None:
        """Put each ``(key, value)``."""

    @abc.abstractmethod
    def delete(self, key: K) -> V | None:
        """Remove ``key``; return the value it had."""

    @abc.abstractmethod
    def range(self, from_key: K | None, to_key: K | None) -> KeyValueIterator[K, V]:
        """The entries with ``from_key <= key <= to_key``, in key order."""

    @abc.abstractmethod
    def reverse_range(self, from_key: K | None, to_key: K | None) -> KeyValueIterator[K, V]:
        """:meth:`range`, in reverse key order."""

    @abc.abstractmethod
    def all(self) -> KeyValueIterator[K, V]:
        """Every entry, in key order."""

    @abc.abstractmethod
    def reverse_all(self) -> KeyValueIterator[K, V]:
        """Every entry, in reverse key order."""

    @abc.abstractmethod
    def prefix_scan(self, prefix: str) -> KeyValueIterator[K, V]:
        """The entries whose key (a ``str``, or its ``str()``) starts with ``prefix``."""

    @abc.abstractmethod
    def approximate_num_entries(self) -> int:
        """The number of entries."""


@dataclasses.dataclass(frozen=True)
class VersionedRecord(Generic[V]):
    """A version of a versioned store's key: its value and when it is valid from
    (``valid_to`` exclusive, None while current)."""

    value: V
    timestamp: int
    valid_to: int | None = None


class VersionedKeyValueStore(abc.ABC, Generic[K, V]):
    """A store keeping each key's versions for ``history_retention`` (KIP-889)."""

    name: str

    @abc.abstractmethod
    def put(self, key: K, value: V | None, timestamp: int) -> int:
        """Add a version of ``key`` valid from ``timestamp`` (None: a tombstone)."""

    @abc.abstractmethod
    def get(self, key: K, as_of_timestamp: int | None = None) -> VersionedRecord[V] | None:
        """The latest version, or the one valid at ``as_of_timestamp``."""

    @abc.abstractmethod
    def delete(self, key: K, timestamp: int) -> VersionedRecord[V] | None:
        """A tombstone at ``timestamp``; return the version it replaces there."""


class WindowStoreIterator(_ClosingIterator, abc.ABC, Generic[V]):
    """``(window start, value)`` pairs of one key; a context manager."""

    @abc.abstractmethod
    def __next__(self) -> tuple[int, V]: ...


class WindowStore(abc.ABC, Generic[K, V]):
    """A store of values per key and window start, kept for ``retention``."""

    name: str

    @abc.abstractmethod
    def put(self, key: K, value: V | None, window_start: int) -> None:
        """Put ``value`` in ``key``'s window starting at ``window_start``."""

    @abc.abstractmethod
    def fetch(self, key: K, time_from: int, time_to: int) -> WindowStoreIterator[V]:
        """``key``'s windows starting within ``[time_from, time_to]``, oldest first."""

    @abc.abstractmethod
    def fetch_all(self, time_from: int, time_to: int) -> KeyValueIterator[tuple[K, int], V]:
        """Every key's windows starting within ``[time_from, time_to]``, as
        ``((key, window start), value)``."""
