"""The live records of one Arrow batch in the fused stateless chain
(:mod:`kspark_server.chain`): positions in the batch, their keys and values decoded only
when a step reads them, and the guarded loop that calls a user function on each.
"""

from __future__ import annotations

import contextlib
import itertools
from collections.abc import Callable
from typing import Any

import numpy as np
import pyarrow as pa

from kspark_server import columns, handling
from kspark_server.records import ArrowColumns, ArrowRecord

#: The result of a user function that raised (its record is dropped).
FAILED: Any = object()


class Undecodable(Exception):
    """Raised by :class:`Live` when some records could not be decoded (and went to the
    deserialization handler): the step that asked runs again without them. ``keep`` says
    which of the live records remain."""

    def __init__(self, keep: list[bool]) -> None:
        super().__init__("records that could not be decoded")
        self.keep = keep


def retrying(fn: Callable[[Live], Any], live: Live) -> Any:
    """``fn(live)``, run again without the records that could not be decoded. A step
    decodes its input before it calls any user function, so running it again is safe."""
    while True:
        try:
            return fn(live)
        except Undecodable as u:
            live.keep(u.keep)


class Live:
    """The records of one batch that are still alive, column by column.

    ``rows`` are their positions in ``batch``, ascending; a fan-out repeats a position once
    per output, so that each output keeps its input record's envelope and error context.
    Keys and values are decoded only when a step reads them; until a step replaces them,
    they are the batch's own columns, which the output carries over by reference. Values
    are a Python list, or an Arrow array after a vectorized step.
    """

    __slots__ = (
        "_cols",
        "_keys",
        "_values",
        "batch",
        "failed",
        "guard",
        "keys_new",
        "reader",
        "rows",
        "subs",
        "values_new",
        "vdec",
    )

    def __init__(
        self,
        batch: pa.RecordBatch,
        guard: handling.Guard,
        vdec: columns.ColumnDecoder,
        reader: str = "source",
    ) -> None:
        self.batch, self.guard, self.vdec = batch, guard, vdec
        #: the processor that decodes the batch's records (the chain's first step)
        self.reader = reader
        self.rows: list[int] | range = range(batch.num_rows)
        #: whether a record failed in the last :func:`call_each`
        self.failed = False
        self._keys: list[Any] | None = None
        self._values: list[Any] | pa.Array | None = None
        self.keys_new = self.values_new = False
        self._cols = ArrowColumns(batch)
        #: the output ``ks_sub`` of each live record, once a fanned-out chain numbers them
        self.subs: list[int] | None = None

    def column(self, name: str) -> pa.Array:
        """The batch's column ``name`` at the live rows."""
        col = self.batch.column(name)
        if isinstance(self.rows, range):  # every row, once
            return col
        return col.take(np.fromiter(self.rows, np.int64, len(self.rows)))

    def keys(self, kdec: columns.ColumnDecoder) -> list[Any]:
        if self._keys is None:
            self._keys = self._decode(kdec, self.column("key"), "KEY")
        return self._keys

    def values(self) -> list[Any]:
        if self._values is None:
            self._values = self._decode(self.vdec, self.column("value"), "VALUE")
        elif isinstance(self._values, pa.Array):
            self._values = self.vdec(self._values)
        return self._values

    def _decode(self, dec: columns.ColumnDecoder, col: pa.Array, origin: str) -> list[Any]:
        """``col`` decoded; if a class's constructor or validator refuses a stored value,
        each refused record goes to the deserialization handler and :class:`Undecodable`
        asks the caller to run its step again on the others."""
        with contextlib.suppress(Exception):
            return dec(col)
        keep = []
        for j in range(len(col)):
            try:
                dec(col.slice(j, 1))
                keep.append(True)
            except Exception as exc:
                self.guard.decode_failed(self.reader, self.row(j), exc, origin)
                keep.append(False)
        if all(keep):  # fails as a whole only: a bug, not a record's
            return dec(col)
        raise Undecodable(keep)

    def set_keys(self, keys: list[Any]) -> None:
        self._keys, self.keys_new = keys, True

    def set_values(self, values: list[Any] | pa.Array, vdec: columns.ColumnDecoder) -> None:
        self._values, self.values_new, self.vdec = values, True, vdec

    def arrow_values(self) -> list[Any] | pa.Array:
        """The values as they are now: an Arrow array if not yet decoded."""
        if self._values is None:
            return self.column("value")
        return self._values

    def row(self, j: int) -> Any:
        """Live record ``j``'s envelope, read only when asked (the guard's ``row``)."""
        return ArrowRecord(self._cols, self.rows[j])

    def fail(self, processor: str, args: tuple[Any, ...], j: int, exc: Exception) -> None:
        """Live record ``j`` failed in ``processor``: ask the handler (or raise)."""
        self.failed = True
        self.guard.on_error(processor, args, self.row(j), exc)

    def keep(self, mask: list[bool]) -> None:
        """Keep the live records where ``mask`` is true."""
        self.rows = list(itertools.compress(self.rows, mask))
        if self._keys is not None:
            self._keys = list(itertools.compress(self._keys, mask))
        if isinstance(self._values, pa.Array):
            self._values = self._values.filter(pa.array(mask, pa.bool_()))
        elif self._values is not None:
            self._values = list(itertools.compress(self._values, mask))
        if self.subs is not None:
            self.subs = list(itertools.compress(self.subs, mask))

    def fan_out(self, results: list[Any], pairs: bool) -> None:
        """Each live record becomes its ``results`` (from :func:`call_each`; :data:`FAILED`
        gives none): its (key, value) ``pairs``, or else values under its key."""
        if self.failed:
            results = [() if r is FAILED else r for r in results]
        counts = list(map(len, results))
        at = np.fromiter(self.rows, np.int64, len(self.rows))
        self.rows = np.repeat(at, counts).tolist()
        flat = list(itertools.chain.from_iterable(results))
        if pairs:
            self._keys, self.keys_new = [p[0] for p in flat], True
            flat = [p[1] for p in flat]
        elif self._keys is not None:
            self._keys = list(
                itertools.chain.from_iterable(map(itertools.repeat, self._keys, counts))
            )
        self._values, self.values_new = flat, True


def call_each(live: Live, name: str, fn: Callable[..., Any], *cols: list[Any]) -> list[Any]:
    """``fn`` on each live record's ``cols``; a failure is handled and gives :data:`FAILED`.

    The loop is the one a plain ``mapInArrow`` would run: one call per record inside
    ``try`` (free in Python 3.11 when nothing raises).
    """
    out: list[Any] = []
    append = out.append
    live.failed = False
    if len(cols) == 1:
        for v in cols[0]:
            try:
                append(fn(v))
            except Exception as exc:
                live.fail(name, (v,), len(out), exc)
                append(FAILED)
    else:
        for args in zip(*cols, strict=True):
            try:
                append(fn(*args))
            except Exception as exc:
                live.fail(name, args, len(out), exc)
                append(FAILED)
    return out


def keep_succeeded(live: Live, results: list[Any]) -> list[Any]:
    """The results of the last :func:`call_each` that are not :data:`FAILED`; the records
    whose call failed leave ``live``."""
    if not live.failed:
        return results
    mask = [r is not FAILED for r in results]
    live.keep(mask)
    return list(itertools.compress(results, mask))
