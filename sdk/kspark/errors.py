"""kspark's exception hierarchy.

Every error kspark raises is a :class:`KSparkError` with a stable ``code`` (for example
``KSPARK_INVALID_ARGUMENT``) and named parameters, so that programs can match on the code
and people can read the message. Messages name the processor, the record's context where
there is one, and the fix.

Examples
--------
>>> from kspark.errors import InvalidArgumentError
>>> err = InvalidArgumentError("interval must not be negative", parameter="interval")
>>> err.code
'KSPARK_INVALID_ARGUMENT'
>>> err.params["parameter"]
'interval'
"""

from __future__ import annotations

from typing import Any, ClassVar

__all__ = [
    "AppAlreadyRunningError",
    "CodeShippingError",
    "CompilationError",
    "ConfigError",
    "DeadLetterQueueDeserializationExceptionHandler",
    "DeadLetterQueueProcessingExceptionHandler",
    "DeadLetterQueueProductionExceptionHandler",
    "DeadLetterRecord",
    "DeserializationError",
    "DeserializationExceptionHandler",
    "ErrorHandlerContext",
    "HandlerError",
    "InvalidArgumentError",
    "InvalidTopologyError",
    "KSparkError",
    "LogAndContinueDeserializationExceptionHandler",
    "LogAndContinueProcessingExceptionHandler",
    "LogAndContinueProductionExceptionHandler",
    "LogAndFailDeserializationExceptionHandler",
    "LogAndFailProcessingExceptionHandler",
    "LogAndFailProductionExceptionHandler",
    "MissingDependencyError",
    "Origin",
    "ProcessingError",
    "ProcessingExceptionHandler",
    "ProductionExceptionHandler",
    "Response",
    "ServerError",
    "ServerUnreachableError",
    "StreamsAppError",
    "TypeMappingError",
    "UnknownAppError",
    "UnknownTypeError",
]


class KSparkError(Exception):
    """Base class of every kspark error.

    Parameters
    ----------
    message
        The human-readable explanation, which should say how to fix the problem.
    **params
        Named parameters of the error, kept in :attr:`params`.
    """

    code: ClassVar[str] = "KSPARK_ERROR"

    def __init__(self, message: str, **params: Any) -> None:
        super().__init__(f"[{self.code}] {message}")
        self.message = message
        self.params: dict[str, Any] = dict(params)


class InvalidArgumentError(KSparkError, ValueError):
    """An argument to a DSL call or option builder is invalid."""

    code = "KSPARK_INVALID_ARGUMENT"


class ConfigError(KSparkError, ValueError):
    """A :class:`~kspark.StreamsConfig` option is invalid."""

    code = "KSPARK_INVALID_CONFIG"


class InvalidTopologyError(KSparkError, ValueError):
    """The topology cannot be built or run as described."""

    code = "KSPARK_INVALID_TOPOLOGY"


class TypeMappingError(KSparkError, TypeError):
    """A Python type cannot be mapped to a Spark schema."""

    code = "KSPARK_UNSUPPORTED_TYPE"


class UnknownTypeError(KSparkError, TypeError):
    """A processor's output type is needed but could not be inferred."""

    code = "KSPARK_UNKNOWN_TYPE"


class CompilationError(KSparkError):
    """The compiler met a plan node it has no rule for."""

    code = "KSPARK_COMPILATION_FAILED"


class CodeShippingError(KSparkError):
    """User code or ``kspark_server`` could not be shipped to the server."""

    code = "KSPARK_CODE_SHIPPING_FAILED"


class ServerError(KSparkError, RuntimeError):
    """The embedded Spark Connect server could not be started or reached."""

    code = "KSPARK_SERVER_FAILED"


class ServerUnreachableError(ServerError, ConnectionError):
    """No Spark Connect server answers at the given ``sc://host:port``."""

    code = "KSPARK_SERVER_UNREACHABLE"


class UnknownAppError(KSparkError, LookupError):
    """``kspark status`` or ``kspark stop`` named an app that was not submitted from here,
    or whose query the server no longer knows."""

    code = "KSPARK_UNKNOWN_APP"


class MissingDependencyError(KSparkError, ImportError):
    """A package kspark needs is not installed, or two installed packages clash.

    The message names the ``pip install`` that fixes it, for example
    ``pip install 'kspark[client]'`` for the Spark Connect client.
    """

    code = "KSPARK_MISSING_DEPENDENCY"


class StoreError(KSparkError, LookupError):
    """An interactive query cannot be answered: unknown store, or state not readable."""

    code = "KSPARK_STORE_QUERY_FAILED"


class RescaleError(KSparkError, RuntimeError):
    """A rescale was refused or failed its checks; the app's checkpoint is unchanged."""

    code = "KSPARK_RESCALE_FAILED"


class StreamsAppError(KSparkError, RuntimeError):
    """A running app failed; the message carries the processor and record context."""

    code = "KSPARK_APP_FAILED"


class AppAlreadyRunningError(StreamsAppError):
    """An app with this ``application_id`` (and checkpoint) is already running."""

    code = "KSPARK_APP_ALREADY_RUNNING"


class ProcessingError(StreamsAppError):
    """A user function raised and the processing exception handler answered FAIL."""

    code = "KSPARK_PROCESSING_FAILED"


class DeserializationError(StreamsAppError):
    """A record could not be read as its declared key or value type (and the
    deserialization handler answered FAIL). Dead-letter records name this class."""

    code = "KSPARK_DESERIALIZATION_FAILED"


class HandlerError(StreamsAppError):
    """An exception handler raised, or returned something that is not a Response."""

    code = "KSPARK_HANDLER_FAILED"


# ---------------------------------------------------------------------------------------
# Exception handlers (KIP-1033, KIP-1034). This part of the module uses the standard
# library only: it is shipped to the server by value, where kspark is not installed.
# ---------------------------------------------------------------------------------------

import dataclasses  # noqa: E402
import enum  # noqa: E402
import logging  # noqa: E402

_log = logging.getLogger("kspark.errors")


class Origin(enum.Enum):
    """Which part of a record failed to deserialize or serialize."""

    KEY = "KEY"
    VALUE = "VALUE"


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

    def __post_init__(self) -> None:
        if isinstance(self.origin, str):  # the workers pass the name
            object.__setattr__(self, "origin", Origin(self.origin))


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
    >>> Response.continue_().action
    'CONTINUE'
    >>> Response.resume([DeadLetterRecord("k", "v")]).dead_letter_records
    (DeadLetterRecord(key='k', value='v'),)
    """

    action: str
    dead_letter_records: tuple[DeadLetterRecord, ...] = ()

    @classmethod
    def continue_(cls) -> Response:
        """Drop the failing record and go on with the next."""
        return cls("CONTINUE")

    @classmethod
    def fail(cls) -> Response:
        """Stop the app with an error naming the processor, exception and record."""
        return cls("FAIL")

    @classmethod
    def resume(cls, dead_letter_records: Any = ()) -> Response:
        """Drop the failing record, write ``dead_letter_records`` to the DLQ, go on."""
        return cls("RESUME", tuple(dead_letter_records))


class _Handler:
    #: True for handlers that write to ``StreamsConfig.dead_letter_queue_topic``
    writes_dead_letters: ClassVar[bool] = False

    def configure(self, config: Any) -> None:
        """Called once with the app's :class:`~kspark.StreamsConfig` before it starts."""


class ProcessingExceptionHandler(_Handler):
    """Decides what happens when a user function raises on a record (KIP-1033).

    Subclass it and override :meth:`handle`, then pass the class or an instance as
    ``StreamsConfig(processing_exception_handler=...)``. It runs on the Spark server.
    """

    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        raise NotImplementedError


class DeserializationExceptionHandler(_Handler):
    """Decides what happens to a record whose key or value cannot be read as its type."""

    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        raise NotImplementedError


class ProductionExceptionHandler(_Handler):
    """Decides what happens to a record that cannot be written to its sink."""

    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        raise NotImplementedError


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


def _dead_letter(context: ErrorHandlerContext) -> DeadLetterRecord:
    return DeadLetterRecord(context.source_raw_key, context.source_raw_value)


class LogAndFailProcessingExceptionHandler(ProcessingExceptionHandler):
    """The default: log the failure and stop the app."""

    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        _log_failure("processing", context, exception, "failing")
        return Response.fail()


class LogAndContinueProcessingExceptionHandler(ProcessingExceptionHandler):
    """Log the failure, drop the record and go on."""

    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        _log_failure("processing", context, exception, "dropping the record")
        return Response.continue_()


class DeadLetterQueueProcessingExceptionHandler(ProcessingExceptionHandler):
    """Send the failing record to the dead-letter topic and go on."""

    writes_dead_letters = True

    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        _log_failure("processing", context, exception, "sending it to the dead-letter queue")
        return Response.resume([_dead_letter(context)])


class LogAndFailDeserializationExceptionHandler(DeserializationExceptionHandler):
    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        _log_failure("deserialization", context, exception, "failing")
        return Response.fail()


class LogAndContinueDeserializationExceptionHandler(DeserializationExceptionHandler):
    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        _log_failure("deserialization", context, exception, "dropping the record")
        return Response.continue_()


class DeadLetterQueueDeserializationExceptionHandler(DeserializationExceptionHandler):
    writes_dead_letters = True

    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        _log_failure("deserialization", context, exception, "sending it to the dead-letter queue")
        return Response.resume([_dead_letter(context)])


class LogAndFailProductionExceptionHandler(ProductionExceptionHandler):
    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        _log_failure("production", context, exception, "failing")
        return Response.fail()


class LogAndContinueProductionExceptionHandler(ProductionExceptionHandler):
    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        _log_failure("production", context, exception, "dropping the record")
        return Response.continue_()


class DeadLetterQueueProductionExceptionHandler(ProductionExceptionHandler):
    writes_dead_letters = True

    def handle(
        self, context: ErrorHandlerContext, record: dict[str, Any], exception: Exception
    ) -> Response:
        _log_failure("production", context, exception, "sending it to the dead-letter queue")
        return Response.resume([_dead_letter(context)])
