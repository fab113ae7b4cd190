"""One record read field by field: what the exception handlers' context is built from.

The happy path of an operator reads only the columns it needs; a failing (or dropped,
dead-lettered) record needs its whole envelope (topic, partition, offset, headers...).
Every operator hands :class:`~kspark_server.handling.Guard` a :class:`RecordView`, which
converts a field only when asked:

- :class:`ArrowRecord`: a row of an Arrow table or record batch (a chain's batch, a
  stateful task's micro-batch);
- :class:`DictRecord`: a record kept as a dict of raw cells (a join's grace buffer, a
  window join's buffered record).

Fields that travel as JSON text (a JSON-packed value) or as stored text (headers of a
record kept in state) are read back through per-column ``decoders``.

Examples
--------
>>> import pyarrow as pa
>>> rows = ArrowColumns(pa.table({"key": ["a", "b"], "value": ['{"n": 1}', None]}),
...                     {"value": lambda text: text.upper()})
>>> r = ArrowRecord(rows, 0)
>>> r.get("key"), r["value"], r.get("topic", "none")
('a', '{"N": 1}', 'none')
>>> DictRecord({"key": "b", "value": None}, {}).get("value") is None
True
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, Protocol

import pyarrow as pa

from kspark_server import codec

__all__ = ["ArrowColumns", "ArrowRecord", "DictRecord", "RecordView", "arrow_record"]

Decoders = Mapping[str, Callable[[Any], Any]]


class RecordView(Protocol):
    """A record's fields by envelope column name (``key``, ``value``, ``topic``, ...)."""

    def get(self, name: str, default: Any = None) -> Any:
        """Field ``name`` (``default`` if the record has no such column; None if null)."""
        ...

    def __getitem__(self, name: str) -> Any: ...


class ArrowColumns:
    """The columns of an Arrow table or batch, each looked up once: a failing record's
    context reads about ten of them, and a batch may have many failing records."""

    __slots__ = ("_cols", "data", "decoders")

    def __init__(self, data: pa.Table | pa.RecordBatch, decoders: Decoders | None = None) -> None:
        self.data = data
        self.decoders: Decoders = decoders or {}
        self._cols: dict[str, Any] = {}

    def raw(self, name: str, i: int, default: Any = None) -> Any:
        """Row ``i``'s cell of column ``name`` as it travels (``default``: no column)."""
        try:
            col = self._cols[name]
        except KeyError:
            pos = self.data.schema.get_field_index(name)
            col = self._cols[name] = self.data.column(pos) if pos >= 0 else None
        return default if col is None else col[i].as_py()

    def cell(self, name: str, i: int, default: Any = None) -> Any:
        """Row ``i``'s field ``name``, read back through its decoder."""
        v = self.raw(name, i, default)
        dec = self.decoders.get(name)
        return dec(v) if dec is not None and v is not None else v


class ArrowRecord:
    """Row ``i`` of :class:`ArrowColumns`, a :class:`RecordView`."""

    __slots__ = ("_cols", "_i")

    def __init__(self, cols: ArrowColumns, i: int) -> None:
        self._cols, self._i = cols, i

    def get(self, name: str, default: Any = None) -> Any:
        return self._cols.cell(name, self._i, default)

    def __getitem__(self, name: str) -> Any:
        return self._cols.cell(name, self._i)

    def to_dict(self, columns: list[str]) -> dict[str, Any]:
        """The raw cells (as they travel, plain Python), for a record kept in state."""
        return {c: codec.plain(self._cols.raw(c, self._i)) for c in columns}


def arrow_record(data: pa.Table | pa.RecordBatch, i: int) -> ArrowRecord:
    """Row ``i`` of ``data`` as a :class:`RecordView` (for a single record)."""
    return ArrowRecord(ArrowColumns(data), i)


class DictRecord:
    """A record kept as a dict of raw cells, a :class:`RecordView`."""

    __slots__ = ("_decoders", "_record")

    def __init__(self, record: Mapping[str, Any], decoders: Decoders) -> None:
        self._record, self._decoders = record, decoders

    def get(self, name: str, default: Any = None) -> Any:
        if name not in self._record:
            return default
        v = self._record[name]
        dec = self._decoders.get(name)
        return dec(v) if dec is not None and v is not None else v

    def __getitem__(self, name: str) -> Any:
        return self.get(name)
