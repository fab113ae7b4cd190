"""The exception handler API (KIP-1033, KIP-1034): contexts, responses and handlers.

Handlers run in the server's Python workers, so this module lives in ``kspark_server``
(shipped by value, standard library only); user code imports it as :mod:`kspark.errors`.

Examples
--------
>>> from kspark.errors import Response, DeadLetterRecord
>>> Response.continue_().action
<Action.CONTINUE: 'CONTINUE'>
>>> Response.resume([DeadLetterRecord("k", "v")]).dead_letter_records
(DeadLetterRecord(key='k', value='v'),)
"""

from __future__ import annotations

import dataclasses
import enum
import logging
from collections.abc import Iterable
from typing import Any, ClassVar, Protocol

__all__ = [
    "Action",
    "DeadLetterQueueDeserializationExceptionHandler",
    "DeadLetterQueueProcessingExceptionHandler",
    "DeadLetterQueueProductionExceptionHandler",
    "DeadLetterRecord",
    "DeserializationExceptionHandler",
    "ErrorHandlerContext",
    "Handler",
    "LogAndContinueDeserializationExceptionHandler",
    "LogAndContinueProcessingExceptionHandler",
    "LogAndContinueProductionExceptionHandler",
    "LogAndFailDeserializationExceptionHandler",
    "LogAndFailProcessingExceptionHandler",
    "LogAndFailProductionExceptionHandler",
    "Origin",
    "ProcessingExceptionHandler",
    "ProductionExceptionHandler",
    "Response",
]

# the logger keeps the name users configured before the API moved here
_log = logging.getLogger("kspark.errors")


class Origin(enum.StrEnum):
    """Which part of a record failed to deserialize or serialize (equal to its name)."""

    KEY = "KEY"
    VALUE = "VALUE"


class Action(enum.StrEnum):
    """What a handler decided; :class:`Response`'s constructors make them."""

    CONTINUE = "CONTINUE"
    FAIL = "FAIL"
    RESUME = "RESUME"


@dataclasses.dataclass(frozen=True, kw_only=True)
class ErrorHandlerContext:
    """Where a failing record came from. Read-only: it cannot forward records.

    Attributes
    ----------
    topic, partition, offset
        The source record's position.
    headers
        The source record's headers, as ``(key, value_bytes)`` pairs.
    processor_node_id
        The processor whose function failed, such as ``KSTREAM-MAPVALUES-0000000002``.
    task_id
        ``"<subtopology>_<partition>"``.
    timestamp
        The record's timestamp in ms.
    source_raw_key, source_raw_value
        The key and value as the source gave them, before the topology changed them.
    origin
        Production failures only: the part of the record that failed to serialize.
    """

    topic: str | None
    partition: int | None
    offset: int | None
    headers: tuple[tuple[str, bytes | None], ...]
    processor_node_id: str
    task_id: str
    timestamp: int | None
    source_raw_key: object = None
    source_raw_value: object = None
    origin: Origin | None = None


@dataclasses.dataclass(frozen=True)
class DeadLetterRecord:
    """A record for the dead-letter queue; None fields default to the source record's."""

    key: object = None
    value: object = None


@dataclasses.dataclass(frozen=True)
class Response:
    """A handler's answer: ``Response.continue_()``, ``Response.fail()`` or
    ``Response.resume(dead_letter_records)``.

    Examples
    --------
    >>> Response.fail().action is Action.FAIL
    True
    >>> Response("teleport")
    Traceback (most recent call last):
    ...
    ValueError: 'teleport' is not a valid Action
    """

    action: Action
    dead_letter_records: tuple[DeadLetterRecord, ...] = ()

    def __post_init__(self) -> None:
        # refuse a made-up action here, not in the worker that reads it
        object.__setattr__(self, "action", Action(self.action))

    @classmethod
    def continue_(cls) -> Response:
        """Drop the failing record and go on with the next."""
        return cls(Action.CONTINUE)

    @classmethod
    def fail(cls) -> Response:
        """Stop the app with an error naming the processor, exception and record."""
        return cls(Action.FAIL)

    @classmethod
    def resume(cls, dead_letter_records: Iterable[DeadLetterRecord] = ()) -> Response:
        """Drop the failing record, write ``dead_letter_records`` to the DLQ, go on."""
        return cls(Action.RESUME, tuple(dead_letter_records))


class Handler(Protocol):
    """What the workers call: any object with this ``handle`` (the classes below have it)."""

    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response: ...


class _Handler:
    #: True for handlers that write to ``StreamsConfig.dead_letter_queue_topic``
    writes_dead_letters: ClassVar[bool] = False
    #: what failed, for the built-in handlers' log lines
    _kind: ClassVar[str] = ""

    def configure(self, config: Any) -> None:
        """Called once with the app's :class:`~kspark.StreamsConfig` before it starts."""

    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        """The answer to ``exception``, raised on ``record`` (override it)."""
        raise NotImplementedError


class ProcessingExceptionHandler(_Handler):
    """Decides what happens when a user function raises on a record (KIP-1033).

    Subclass it and override :meth:`handle`, then pass the class or an instance as
    ``StreamsConfig(processing_exception_handler=...)``. It runs on the Spark server.
    """

    _kind = "processing"


class DeserializationExceptionHandler(_Handler):
    """Decides what happens to a record whose key or value cannot be read as its type."""

    _kind = "deserialization"


class ProductionExceptionHandler(_Handler):
    """Decides what happens to a record that cannot be written to its sink."""

    _kind = "production"


def _log_failure(kind: str, context: ErrorHandlerContext, exception: Exception, then: str) -> None:
    _log.warning(
        "%s exception in %s (topic=%s partition=%s offset=%s): %s: %s; %s",
        kind,
        context.processor_node_id,
        context.topic,
        context.partition,
        context.offset,
        type(exception).__name__,
        exception,
        then,
    )


# The three built-in behaviours, each mixed into the three handler kinds below (which
# give ``_kind``), as Kafka Streams has LogAndFail, LogAndContinue and DeadLetterQueue
# handlers of each kind.
class _LogAndFail(_Handler):
    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        _log_failure(self._kind, context, exception, "failing")
        return Response.fail()


class _LogAndContinue(_Handler):
    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        _log_failure(self._kind, context, exception, "dropping the record")
        return Response.continue_()


class _DeadLetterQueue(_Handler):
    writes_dead_letters = True

    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        _log_failure(self._kind, context, exception, "sending it to the dead-letter queue")
        return Response.resume([DeadLetterRecord(context.source_raw_key, context.source_raw_value)])


class LogAndFailProcessingExceptionHandler(_LogAndFail, ProcessingExceptionHandler):
    """The default: log the failure and stop the app."""


class LogAndContinueProcessingExceptionHandler(_LogAndContinue, ProcessingExceptionHandler):
    """Log the failure, drop the record and go on."""


class DeadLetterQueueProcessingExceptionHandler(_DeadLetterQueue, ProcessingExceptionHandler):
    """Send the failing record to the dead-letter topic and go on."""


class LogAndFailDeserializationExceptionHandler(_LogAndFail, DeserializationExceptionHandler):
    """The default: log the failure and stop the app."""


class LogAndContinueDeserializationExceptionHandler(
    _LogAndContinue, DeserializationExceptionHandler
):
    """Log the failure, drop the record and go on."""


class DeadLetterQueueDeserializationExceptionHandler(
    _DeadLetterQueue, DeserializationExceptionHandler
):
    """Send the record to the dead-letter topic and go on."""


class LogAndFailProductionExceptionHandler(_LogAndFail, ProductionExceptionHandler):
    """The default: log the failure and stop the app."""


class LogAndContinueProductionExceptionHandler(_LogAndContinue, ProductionExceptionHandler):
    """Log the failure, drop the record and go on."""


class DeadLetterQueueProductionExceptionHandler(_DeadLetterQueue, ProductionExceptionHandler):
    """Send the record to the dead-letter topic and go on."""
