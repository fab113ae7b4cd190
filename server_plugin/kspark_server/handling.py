"""Per-record exception handling inside the workers (KIP-1033 / KIP-1034).

A :class:`Guard` calls user functions. When one raises, the guard builds the error
context from the record's envelope and asks the configured handler what to do:

- no handler, or FAIL: raise :class:`ProcessingFailed`, which fails the query with a
  message naming the processor, the exception and the record's context;
- CONTINUE: drop the record and count it;
- RESUME: drop the record, count it and emit its dead-letter records as side rows.

A handler that raises, or returns something that is not a response, raises
:class:`HandlerFailed`, never swallowed. Counts and dead-letter records leave the stage as
side rows (column ``ks_side``), which the sink stage routes and Spark's observed metrics
sum up.
"""

from __future__ import annotations

import base64
import json
import traceback
from collections.abc import Callable, Iterable, Iterator
from typing import Any

import pyarrow as pa

from kspark_server import placement
from kspark_server.envelope import SideKind, side_row
from kspark_server.handlers import (
    Action,
    DeadLetterRecord,
    ErrorHandlerContext,
    Handler,
    Origin,
    Response,
)
from kspark_server.records import RecordView
from kspark_server.spec import Handling, JsonSpec, KeyValue
from kspark_server.transport import arrow_schema


class ProcessingFailed(RuntimeError):
    """A user function failed and the handler said FAIL (or there is no handler)."""


class HandlerFailed(RuntimeError):
    """The exception handler itself raised or returned something invalid."""


class DeserializationFailed(RuntimeError):
    """A record's key or value could not be decoded to its declared class (its constructor
    or a validator raised), and the deserialization handler says FAIL."""


class DroppedRecord(Exception):
    """Not raised: the "exception" of a dead letter for a record that an operator dropped
    by its rules (``StreamsConfig.dead_letter_dropped_records``); its message gives the
    processor and the reason."""


#: Why a record was dropped (the ``reason`` of a drop count or a dead letter): codes, and
#: what each means.
DROP_REASONS: dict[str, str] = {
    "processing-error": "a user function raised and the processing handler dropped it",
    "production-error": "it did not fit its declared type and the production handler dropped it",
    "deserialization-error": "it could not be read and the deserialization handler dropped it",
    "null-key": "a record with a null key cannot join or be aggregated (an inner join's "
    "stream record, a table update, or an aggregation's record)",
    "null-value": "a record with a null value does not join and is not aggregated",
    "null-join-key": "the key selector of a global-table join gave None, so the record has "
    "no table key to join on",
    "expired-stream-record": "the stream record is older than the versioned table's history "
    "retention, so the inner join cannot look it up",
    "expired-put": "the table update is older than the versioned table's history retention",
    "invalid-timestamp": "its timestamp is null or negative (StreamsConfig.timestamp_policy)",
    "late-record": "its window had closed: the window's end plus grace is before the task's "
    "stream time",
}


def record_context(row: RecordView, processor: str, task_id: str) -> dict[str, Any]:
    return {
        "topic": row.get("topic"),
        "partition": row.get("partition"),
        "offset": row.get("offset"),
        "timestamp": row.get("timestamp"),
        "headers": tuple((h["key"], h["value"]) for h in (row.get("headers") or ())),
        "processor_node_id": processor,
        "task_id": task_id,
    }


def _describe(ctx: dict[str, Any]) -> str:
    return (
        f"topic={ctx['topic']} partition={ctx['partition']} offset={ctx['offset']} "
        f"timestamp={ctx['timestamp']} task={ctx['task_id']}"
    )


def _base64_or_repr(x: Any) -> str:
    if isinstance(x, bytes | bytearray):
        return base64.b64encode(x).decode("ascii")
    return repr(x)


def side_json(row: dict[str, Any]) -> str:
    """A side row as the JSON text the ``ks_side`` column holds (binary as base64, which
    Spark's ``from_json`` decodes)."""
    return json.dumps(row, default=_base64_or_repr)


def _raw(x: Any) -> str | None:
    """``x`` as a dead letter's JSON text: ``bytes`` as their base64 string, as Spark's
    ``to_json`` writes binary (the text a source's dead letter holds)."""
    if x is None:
        return None
    try:
        return json.dumps(x, default=_base64_or_repr, sort_keys=True)
    except (TypeError, ValueError):
        return repr(x)


def json_columns(spec: Any, output: bool = False) -> frozenset[str]:
    """The envelope columns that hold dynamic keys or values (JSON text) in the records of
    a stage of ``spec``: ``key``, ``value`` and, for a join's table or right side,
    ``ks_tvalue``; with ``output``, those of the stage's output. A dead letter of such a
    record holds that text as it is (:meth:`Guard._dlq_row`), not a JSON string of it."""
    sides = (
        (("output", "value"),)
        if output
        else (
            ("input", "value"),
            ("stream", "value"),
            ("left", "value"),
            ("table", "ks_tvalue"),
            ("right", "ks_tvalue"),
        )
    )
    out: set[str] = set()
    for attr, value_column in sides:
        kv = getattr(spec, attr, None)
        if isinstance(kv, KeyValue):
            if isinstance(kv.key, JsonSpec):
                out.add("key")
            if isinstance(kv.value, JsonSpec):
                out.add(value_column)
    return frozenset(out)


def _stored_json(text: str | None) -> str | None:
    """The JSON of a stored dynamic cell: its text, which is JSON, or, for a JSON string
    that Spark's JSON reader handed over without its quotes (``kspark_server.codec``), that
    string as JSON."""
    if text is None:
        return None
    try:
        json.loads(text)
    except ValueError:
        return json.dumps(text)
    return text


class Guard:
    """Calls user functions and applies the processing exception handler.

    ``json_columns`` names the record columns that hold dynamic values as JSON text
    (:func:`json_columns`)."""

    def __init__(self, handling: Handling, json_columns: frozenset[str] = frozenset()) -> None:
        self.json_columns = json_columns
        self.handler: Handler | None = handling.processing
        self.production: Handler | None = handling.production
        self.subtopology = handling.subtopology
        self.num_partitions = handling.num_partitions
        self.dead_letter_dropped = handling.dead_letter_dropped
        self.deserialization = handling.deserialization
        self.side: list[dict[str, Any]] = []
        self.dropped: dict[tuple[str, str, str], int] = {}
        # dead letters so far per (processor, position), to tell apart two from one record
        self._letters: dict[tuple[str, Any, Any], int] = {}

    def task_id(self, row: RecordView) -> str:
        key = row.get("ks_task")
        # the row's task key is its operator's: several operators' keys name one task
        part = row.get("partition") or 0 if key is None else placement.task_of(int(key))
        return f"{self.subtopology}_{part}"

    def call(
        self,
        processor: str,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        row: RecordView,
        record: tuple[Any, Any] | None = None,
    ) -> tuple[bool, Any]:
        """``fn(*args)``; on an exception, ask the handler. ``record`` is the (key, value)
        the handler sees, when ``args`` are not ``(key, value)`` or ``(value,)``."""
        try:
            return True, fn(*args)
        except Exception as exc:
            self.on_error(processor, record if record is not None else args, row, exc)
            return False, None

    def encode(
        self,
        processor: str,
        kenc: Callable[[Any], Any],
        venc: Callable[[Any], Any],
        key: Any,
        value: Any,
        row: RecordView,
        owners: tuple[str | None, str | None] = (None, None),
    ) -> tuple[bool, Any]:
        """Serialize a record for the next stage or sink; failures go to the production
        exception handler with the failing part (KEY or VALUE) as the context's origin.

        ``owners`` names, for the key and the value, the step whose declared type the
        part must fit (see ``kspark_server.chain.output_owners``): a part that does not
        fit it, or does not convert to it, is that step's failure and goes to the
        processing handler under the step's name, as a joiner's result does. A part
        without an owner is the sink's to write: the production handler."""
        origin = "KEY"
        try:
            k = kenc(key)
            origin = "VALUE"
            return True, (k, venc(value))
        except Exception as exc:
            owner = owners[0] if origin == "KEY" else owners[1]
            if owner is not None:
                self.on_error(owner, (key, value), row, exc)
            else:
                self.on_error(
                    processor, (key, value), row, exc, kind="production", origin=Origin(origin)
                )
            return False, None

    def on_error(
        self,
        processor: str,
        args: tuple[Any, ...],
        row: RecordView,
        exc: Exception,
        kind: str = "processing",
        origin: Origin | None = None,
    ) -> None:
        task = self.task_id(row)
        ctx = record_context(row, processor, task)
        handler = self.production if kind == "production" else self.handler
        if handler is None:
            raise ProcessingFailed(
                f"processor {processor} failed on record ({_describe(ctx)}): "
                f"{type(exc).__name__}: {exc}. Set StreamsConfig({kind}_exception_handler=...) "
                "to continue past such records or send them to a dead-letter queue."
            ) from exc
        context = self._context(ctx, row, origin)
        record = {"key": args[0] if len(args) > 1 else row.get("key"), "value": args[-1]}
        try:
            response = handler.handle(context, record, exc)
        except Exception as herr:
            raise HandlerFailed(
                f"the {kind} exception handler {type(handler).__name__} raised "
                f"{type(herr).__name__}: {herr} while handling {type(exc).__name__} from "
                f"processor {processor} ({_describe(ctx)})"
            ) from herr
        if not isinstance(response, Response):
            raise HandlerFailed(
                f"the {kind} exception handler {type(handler).__name__} returned "
                f"{response!r}, not a Response (use Response.continue_(), Response.fail() "
                "or Response.resume([...]))"
            )
        reason = f"{kind}-error"
        if response.action is Action.CONTINUE or (
            response.action is Action.RESUME and not response.dead_letter_records
        ):
            self._count(processor, task, reason)
        elif response.action is Action.RESUME:
            # counted as dropped through its dead-letter rows
            for dl in response.dead_letter_records:
                self.side.append(self._dlq_row(dl, ctx, row, exc, reason))
        else:
            raise ProcessingFailed(
                f"processor {processor} failed on record ({_describe(ctx)}): "
                f"{type(exc).__name__}: {exc}; the {kind} exception handler "
                f"{type(handler).__name__} answered FAIL"
            ) from exc

    def _context(
        self, ctx: dict[str, Any], row: RecordView, origin: Origin | None = None
    ) -> ErrorHandlerContext:
        return ErrorHandlerContext(
            **ctx, source_raw_key=row.get("key"), source_raw_value=row.get("value"), origin=origin
        )

    def decode_failed(self, processor: str, row: RecordView, exc: Exception, origin: str) -> None:
        """A record whose key or value (``origin``) its class refused when it was decoded
        for ``processor``: the built-in deserialization handler's answer (fail, drop and
        count, or dead-letter the stored record)."""
        task = self.task_id(row)
        ctx = record_context(row, processor, task)
        if self.deserialization == "fail":
            raise DeserializationFailed(
                f"[KSPARK_DESERIALIZATION_FAILED] {processor}: a record ({_describe(ctx)}) "
                f"could not be read as its declared {origin.lower()} type: "
                f"{type(exc).__name__}: {exc}. Set StreamsConfig("
                "deserialization_exception_handler=...) to skip such records or send them "
                "to a dead-letter queue."
            ) from exc
        if self.deserialization == "dlq":
            dl = DeadLetterRecord(None, None)  # the record as it is stored
            self.side.append(self._dlq_row(dl, ctx, row, exc, "deserialization-error"))
        else:
            self._count(processor, task, "deserialization-error")

    def drop(
        self,
        processor: str,
        task: str,
        reason: str,
        row: RecordView | None = None,
        record: tuple[Any, Any] | None = None,
    ) -> None:
        """Count a record that an operator drops by its rules (a stream record with a null
        value in a join, ...) under ``reason`` (one of :data:`DROP_REASONS`): it shows in
        ``dropped-records-total``. With ``dead_letter_dropped``, the record (``row``, or
        ``record``'s key and value in its envelope) also goes to the dead-letter queue."""
        if not self.dead_letter_dropped or row is None:
            self._count(processor, task, reason)
            return
        ctx = record_context(row, processor, task)
        exc = DroppedRecord(f"{processor} dropped the record: {DROP_REASONS[reason]}")
        key, value = record if record is not None else (None, None)
        self.side.append(self._dlq_row(DeadLetterRecord(key, value), ctx, row, exc, reason))

    def _count(self, processor: str, task: str, reason: str) -> None:
        at = (processor, task, reason)
        self.dropped[at] = self.dropped.get(at, 0) + 1

    def _dlq_row(
        self,
        dl: DeadLetterRecord,
        ctx: dict[str, Any],
        row: RecordView,
        exc: Exception,
        reason: str,
    ) -> dict[str, Any]:
        key = self._letter_json(row, dl.key, ("key",))
        value = self._letter_json(row, dl.value, ("value", "ks_tvalue"))
        pos = (ctx["processor_node_id"], row.get("ks_seq"), row.get("ks_sub"))
        n = self._letters.get(pos, 0)
        self._letters[pos] = n + 1
        return side_row(
            SideKind.DLQ,
            ctx["processor_node_id"],
            ctx["task_id"],
            1,
            dlq_key=key,
            dlq_value=value,
            dlq_headers=list(row.get("headers") or []),
            exception_class=f"{type(exc).__module__}.{type(exc).__qualname__}",
            exception_message=str(exc),
            stack_trace="".join(traceback.format_exception(exc)),
            src_topic=ctx["topic"],
            src_partition=ctx["partition"],
            src_offset=ctx["offset"],
            src_timestamp=ctx["timestamp"],
            reason=reason,
            # the dead letter's identity: the same on every path that runs this processor
            _at=f"{pos[1]}:{pos[2]}:{n}",
        )

    def _letter_json(self, row: RecordView, given: Any, columns: tuple[str, ...]) -> str | None:
        """A dead letter's key or value as JSON text: ``given``, or with None the record's
        own (its first of ``columns``). A stored dynamic cell (JSON text already, as the
        built-in dead-letter handlers pass it on from the context's ``source_raw_*``) is
        kept as it is, so that the dead letter holds the JSON of the value, as for a
        declared type, and not a JSON string of that JSON."""
        if given is None:
            stored = row.get(columns[0])
            return _stored_json(stored) if columns[0] in self.json_columns else _raw(stored)
        if isinstance(given, str):
            for c in columns:
                if c in self.json_columns and given == row.get(c):
                    return _stored_json(given)
        return _raw(given)

    def side_rows(self, chunk: str) -> list[dict[str, Any]]:
        """Dead-letter and metric rows gathered since the last call, then cleared.

        ``chunk`` identifies the input chunk (its first record's position). A stream that
        forks runs the steps before the fork once per path (each path's chain has them),
        and Spark may compute a shared stage once per consumer; so a side row's ``chunk``
        depends only on the processor, the input chunk and, for a dead letter, the
        record's position, never on the path: the copies are identical, and the sink and
        the observed metrics keep one of each (:data:`kspark_server.envelope.SIDE_IDENTITY`).
        """
        rows = list(self.side)
        for (processor, task, reason), n in sorted(self.dropped.items()):
            rows.append(side_row(SideKind.DROPPED, processor, task, n, reason=reason))
        for r in rows:
            at = r.pop("_at", None)
            r["chunk"] = f"{r['processor']}:{chunk}:{r.get('reason')}" + (
                "" if at is None else f":{at}"
            )
        self.side.clear()
        self.dropped.clear()
        self._letters.clear()
        return rows

    def drain_batches(self, schema: pa.Schema, chunk: str) -> Iterator[pa.RecordBatch]:
        """Side rows as one Arrow batch of the stage's output schema."""
        rows = self.side_rows(chunk)
        if rows:
            yield pa.RecordBatch.from_pylist(
                [{"ks_side": side_json(r)} for r in rows], schema=schema
            )

    def drain_after(self, batch: pa.RecordBatch, schema: pa.Schema) -> Iterator[pa.RecordBatch]:
        """The side rows of ``batch``'s records, if any, as :meth:`drain_batches` gives
        them, their chunk named by the batch's first position."""
        if self.side or self.dropped:
            first = batch.slice(0, 1).to_pylist()[0]
            yield from self.drain_batches(schema, f"{first['ks_seq']}:{first['ks_sub']}")

    def decode(
        self, processor: str, kdec: Callable[[Any], Any], vdec: Callable[[Any], Any], row: Any
    ) -> tuple[Any, Any] | None:
        """A record's key and value as ``processor`` takes them; None where a class's
        constructor or validator refused a stored one (:meth:`decode_failed` has had the
        record)."""
        origin = "KEY"
        try:
            key = kdec(row["key"])
            origin = "VALUE"
            return key, vdec(row["value"])
        except Exception as exc:
            self.decode_failed(processor, row, exc, origin)
            return None


def record_stage(
    guard: Guard, schema_json: str, each: Callable[[dict[str, Any]], bool]
) -> Callable[[Iterable[pa.RecordBatch]], Iterator[pa.RecordBatch]]:
    """The ``mapInArrow`` function that gives every row of its input to ``each``, which
    may change the row and says whether it goes on (False: ``guard`` has had it), and
    adds each batch's side rows after it (its output schema: ``schema_json``)."""

    def run(batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        schema = arrow_schema(schema_json)
        for batch in batches:
            out = [row for row in batch.to_pylist() if each(row)]
            yield pa.RecordBatch.from_pylist(out, schema=schema)
            yield from guard.drain_after(batch, schema)

    return run
