"""The root cause of a failure that came back from the server, and its full trace in a log.

A failure from a Python worker reaches the client as Spark's message: the condition
(``[STREAM_FAILED]``, ``[PYTHON_EXCEPTION]``...), the worker's Python traceback, often the
JVM's stack trace and the query's whole logical plan. Its first line is rarely the cause
(``prepareForTriggerAvailableNow: Traceback (most recent call last):``). :func:`root_cause`
finds the cause: the last exception of the last Python traceback, with the function it
was raised in, or else the innermost condition and its message. :func:`write_log` keeps
the full text in ``$KSPARK_HOME/logs`` for the message to name, and :func:`summarize` puts
the three together.
"""

from __future__ import annotations

import hashlib
import os
import re
import traceback

from kspark._conditions import condition as spark_condition
from kspark._paths import kspark_home
from kspark.errors import (
    DeserializationError,
    HandlerError,
    ProcessingError,
    StreamsAppError,
    SuppressionBufferFullError,
)

__all__ = ["first_line", "root_cause", "summarize", "translate_failure", "write_log"]

_TRACEBACK = "Traceback (most recent call last):"
# the end of what a worker's traceback says: the query's plan, the JVM's stack trace
_TAILS = ("\n=== Streaming Query ===", "\nJVM stacktrace:", "\n\tat ")
# "  File "/x/kspark_server/chain.py", line 12, in run"
_FRAME = re.compile(r'^\s+File "([^"]+)", line \d+, in (\S+)')
# the exception line that ends a traceback: "pkg.mod.Name: message" or "Name"
_EXCEPTION = re.compile(
    r"^([A-Za-z_][\w.]*(?:Error|Exception|Exit|Failed|Interrupt|Warning|Fault))(?::\s?(.*))?$"
)
_SQLSTATE = re.compile(r"(?:\s*SQLSTATE: \w+)+\s*$")
_WRAPPER = re.compile(r"^.*?terminated with exception:\s*")


def root_cause(exc: BaseException) -> str:
    """The failure's cause in one line: the last exception of the last Python traceback in
    its message (with the function it was raised in), else its innermost condition.

    Examples
    --------
    >>> text = ('[STREAM_FAILED] Query [id = 1] terminated with exception: [PYTHON_EXCEPTION] '
    ...         'prepareForTriggerAvailableNow: Traceback (most recent call last):\\n'
    ...         '  File "/w/kspark_server/kafka.py", line 93, in _client\\n'
    ...         '    from confluent_kafka import Consumer\\n'
    ...         "ModuleNotFoundError: No module named 'confluent_kafka'\\n"
    ...         '\\n=== Streaming Query ===\\n...')
    >>> root_cause(RuntimeError(text))
    "ModuleNotFoundError: No module named 'confluent_kafka' (in _client, kafka.py)"
    >>> root_cause(RuntimeError("[STREAM_FAILED] Query [id = 1] terminated with exception: "
    ...                         "[PATH_NOT_FOUND] Path does not exist: /in. SQLSTATE: 42K03"))
    '[PATH_NOT_FOUND] Path does not exist: /in.'
    """
    text = str(exc)
    if _TRACEBACK in text:
        found = _from_traceback(text.rsplit(_TRACEBACK, 1)[1])
        if found:
            return found
    lines = [line for line in text.strip().splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    first = _SQLSTATE.sub("", _WRAPPER.sub("", lines[0])).strip()
    condition = spark_condition(exc)
    if condition and f"[{condition}]" not in first and not _WRAPPER.match(lines[0]):
        first = f"[{condition}] {first}"
    return first or type(exc).__name__


def first_line(exc: BaseException) -> str:
    """The first line of ``exc``'s message, without a dangling ``Traceback (...):``.

    Examples
    --------
    >>> first_line(RuntimeError("[PYTHON_EXCEPTION] f: Traceback (most recent call last):\\n..."))
    '[PYTHON_EXCEPTION] f:'
    """
    text = str(exc).strip()
    if not text:
        return type(exc).__name__
    return text.splitlines()[0].replace(_TRACEBACK, "").strip() or type(exc).__name__


def _from_traceback(body: str) -> str | None:
    for tail in _TAILS:
        body = body.split(tail, 1)[0]
    where = None
    last = None
    for line in body.splitlines():
        frame = _FRAME.match(line)
        if frame is not None:
            # pyspark's own frames (its RPC client, its worker loop) say nothing about the
            # cause; the last frame of user code or kspark_server does
            if "/pyspark/" not in frame.group(1).replace(os.sep, "/"):
                where = f"{frame.group(2)}, {os.path.basename(frame.group(1))}"
            continue
        m = _EXCEPTION.match(line.rstrip())
        if m is not None:
            message = _SQLSTATE.sub("", m.group(2) or "").strip()
            last = f"{m.group(1)}: {message}" if message else m.group(1)
    if last is None:
        return None
    return f"{last} (in {where})" if where else last


def write_log(exc: BaseException, what: str) -> str | None:
    """Write ``exc``'s full text and traceback to ``$KSPARK_HOME/logs``; its path, or None
    if it cannot be written (the error is reported without it).

    The file is named after ``what`` and a digest of the text, so reporting the same
    failure again (each ``kspark status`` of a failed app) reuses its file.
    """
    text = str(exc)
    digest = hashlib.sha1(text.encode("utf-8", "replace")).hexdigest()[:12]
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", what) or "kspark"
    path = kspark_home("logs", f"{safe}-{digest}.log")
    if os.path.exists(path):
        return path
    try:
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
            f.write("\n\n--- client traceback ---\n")
            f.write("".join(traceback.format_exception(exc)))
    except OSError:
        return None
    return path


def summarize(exc: BaseException, what: str, *, log: bool = True) -> str:
    """Spark's first line, then ``cause: <root cause>`` when that says more, then, with
    ``log``, ``full trace: <path>`` of the log written for ``what`` (an app id).

    Examples
    --------
    >>> print(summarize(RuntimeError("[X] f: Traceback (most recent call last):\\n"
    ...                              "ValueError: bad"), "app", log=False))
    [X] f:
    cause: ValueError: bad
    """
    first, cause = first_line(exc), root_cause(exc)
    text = first + (f"\ncause: {cause}" if cause != first else "")
    path = write_log(exc, what) if log else None
    return text + (f"\nfull trace: {path}" if path else "")


# kspark's failures, as they reach the client, and only where they were raised: a worker's
# Python traceback ends with the exception's line, "kspark_server.handling.ProcessingFailed:
# <message>", at the start of a line; a record that does not deserialize fails through SQL
# raise_error("[KSPARK_...] <message>"), which Spark reports as "[USER_RAISED_EXCEPTION]
# [KSPARK_...] <message> SQLSTATE: P0001". Spark's message often includes the query's
# logical plan too, and the plan holds that raise_error's literal ("raise_error(
# USER_RAISED_EXCEPTION, map(errorMessage, concat([KSPARK_DESERIALIZATION_FAILED] ...");
# a code that only appears there is not what failed.
_RAISED_IN_WORKER = re.compile(
    r"^\s*(?:[A-Za-z_][\w.]*\.)?"
    r"(ProcessingFailed|HandlerFailed|DeserializationFailed|SuppressionBufferFull): (.*)$"
)
_RAISED_BY_SQL = re.compile(r"(?:^\s*|\[USER_RAISED_EXCEPTION\]\s*)\[(KSPARK_[A-Z_]+)\]\s*(.*)$")


def translate_failure(exc: BaseException, app_id: str, *, log: bool = False) -> StreamsAppError:
    """A kspark error for a failed streaming query, with the worker's message.

    Only failures kspark raised are translated to their own error types:
    ``ProcessingFailed`` and ``HandlerFailed`` from the Python workers, and the
    ``[KSPARK_...]`` codes of SQL ``raise_error``. Any other failure (and a kspark code that
    only appears in the query plan Spark prints with its message) becomes a
    :class:`~kspark.errors.StreamsAppError` with the first line of Spark's message and,
    on the next line, its root cause (:func:`root_cause`). With
    ``log``, the full text goes to a file under ``$KSPARK_HOME/logs`` that the message names.

    Examples
    --------
    >>> raised = "kspark_server.handling.ProcessingFailed: processor P failed on record (...)"
    >>> translate_failure(RuntimeError(raised), "app")
    ProcessingError('[KSPARK_PROCESSING_FAILED] processor P failed on record (...)')
    >>> plan_only = "+- Project [raise_error(USER_RAISED_EXCEPTION, map(errorMessage, concat("
    >>> plan_only += "[KSPARK_DESERIALIZATION_FAILED] S: a record ...)))]"
    >>> type(translate_failure(RuntimeError(plan_only), "app")).__name__
    'StreamsAppError'
    """
    text = str(exc)
    trace = f"\nfull trace: {path}" if log and (path := write_log(exc, app_id)) else ""
    for line in text.splitlines():
        m = _RAISED_IN_WORKER.search(line)
        if m is not None:
            kind, message = m.group(1), _SQLSTATE.sub("", m.group(2)).strip()
            if kind == "ProcessingFailed":
                return ProcessingError(message + trace, application_id=app_id)
            if kind == "DeserializationFailed":
                return DeserializationError(message + trace, application_id=app_id)
            if kind == "SuppressionBufferFull":
                return SuppressionBufferFullError(message + trace, application_id=app_id)
            return HandlerError(message + trace, application_id=app_id)
        m = _RAISED_BY_SQL.search(line)
        if m is not None:
            code, message = m.group(1), _SQLSTATE.sub("", m.group(2)).strip()
            if code == DeserializationError.code:
                return DeserializationError(message + trace, application_id=app_id)
            return StreamsAppError(f"{code} {message}{trace}", application_id=app_id)
    summary = summarize(exc, app_id, log=False)
    return StreamsAppError(f"app {app_id} failed: {summary}{trace}", application_id=app_id)
