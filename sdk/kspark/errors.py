"""kspark's exception hierarchy, and the exception handler API.

Every error kspark raises is a :class:`KSparkError` with a stable ``code`` (for example
``KSPARK_INVALID_ARGUMENT``) and named parameters, so that programs can match on the code
and people can read the message. Messages name the processor, the record's context where
there is one, and the fix.

The handler API of KIP-1033 (:class:`ErrorHandlerContext`, :class:`Response`, the
handler classes) is defined in :mod:`kspark_server.handlers`, because it runs in the
server's workers, and is re-exported here.

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

# The exception handler API runs in the server's workers, so it lives in kspark_server;
# user code imports it from here.
from kspark_server import handlers as _handlers
from kspark_server.handlers import *  # noqa: F403

__all__ = [
    "AppAlreadyRunningError",
    "CodeShippingError",
    "CompilationError",
    "ConfigError",
    "DeserializationError",
    "EngineNotSupportedError",
    "HandlerError",
    "InvalidArgumentError",
    "InvalidTopologyError",
    "KSparkError",
    "MissingDependencyError",
    "ObsoleteCheckpointError",
    "ProcessingError",
    "RescaleError",
    "ServerError",
    "ServerUnreachableError",
    "StoreError",
    "StreamsAppError",
    "SuppressionBufferFullError",
    "TypeMappingError",
    "UnboundTopicError",
    "UnknownAppError",
]
__all__ += _handlers.__all__


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


class UnboundTopicError(ConfigError):
    """Topic names of the topology that nothing binds to where their records live;
    ``params["names"]`` lists them."""

    code = "KSPARK_UNBOUND_TOPIC"


class InvalidTopologyError(KSparkError, ValueError):
    """The topology cannot be built or run as described."""

    code = "KSPARK_INVALID_TOPOLOGY"


class TypeMappingError(KSparkError, TypeError):
    """A Python type cannot be mapped to a Spark schema."""

    code = "KSPARK_UNSUPPORTED_TYPE"


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


class EngineNotSupportedError(KSparkError, NotImplementedError):
    """The test driver's in-process engine cannot run part of a topology exactly as
    Spark would (``filter_expr``, a pattern source, the Processor API, ...); the error
    names the processor, and ``TopologyTestDriver(..., engine="spark")`` runs it."""

    code = "KSPARK_ENGINE_NOT_SUPPORTED"


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


class ObsoleteCheckpointError(StreamsAppError):
    """The app's checkpoint holds state that this kspark cannot read: the state of the
    removed ``transform_with_state`` runner (in Spark's state store), or state in another
    state format. Nothing was run."""

    code = "KSPARK_OBSOLETE_CHECKPOINT"


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


class SuppressionBufferFullError(StreamsAppError):
    """A suppression's buffer passed its bound with
    ``BufferConfig.should_shut_down_when_full()``: the message names the processor, the
    task, the record and the fix (more room, a shorter time limit, or
    ``emit_early_when_full()``)."""

    code = "KSPARK_SUPPRESSION_BUFFER_FULL"
