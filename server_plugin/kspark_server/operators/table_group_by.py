"""``KTable.group_by``: a table's updates re-keyed by group, per task of the source key.

A table's changelog carries only new values; re-grouping needs the old one too, to take
a row out of the group it leaves (Kafka Streams materializes the source table for it).
So this operator keeps, per source key, the ``(group key, value)`` that
``selector(key, value)`` gave for the key's current value, and turns each update of the
source table into :class:`~kspark_server.spec.Change` records for the aggregation, as
Kafka Streams' ``KTableRepartitionMap`` does:

=============================  ==============================================================
the update                     records (key: the group; value: ``Change(new, old)``)
=============================  ==============================================================
a first value                  ``(g, Change(v, None))``
a new value, the same group    ``(g, Change(v2, v1))``: one record, subtracted then added
a new value, another group     ``(g1, Change(None, v1))`` then ``(g2, Change(v2, None))``
a delete (None)                ``(g1, Change(None, v1))``
=============================  ==============================================================

A selected pair whose group key or value is None (or a selector that returns None) takes
no part in any group: it is dropped and counted (``null-key``, ``null-value``) and the key's row leaves its old group.
An update without a key is dropped and counted too. A selector that raises goes to the
processing exception handler; the update then changes no group (the key's row stays in
its group, as nothing was forwarded in Kafka Streams either), and the key keeps no
selection, so its next update subtracts nothing.

The records of a task leave as one queue in the order they were made (topic: the
processor, partition: the task), subtraction before addition, so the aggregation takes
them in that order whatever the micro-batches.

State: per source key, ``[group key, value]`` as their columns hold them (the group key
as the aggregation's key column, the value as a field of the ``Change``).
"""

from __future__ import annotations

from typing import Any

import msgspec

from kspark_server import codec
from kspark_server.operators.base import Batch, Emitter, KeyedEmitter, TaskProcessor
from kspark_server.spec import TableGroupBySpec

__all__ = ["TableGroupByProcessor"]


class TableGroupByProcessor(TaskProcessor):
    """Kafka Streams' ``KTableRepartitionMap`` with the source table's old values kept
    here (see the module's text)."""

    new_value = True
    spec: TableGroupBySpec
    emitter_class = KeyedEmitter

    def setup(self) -> None:
        s = self.spec
        self.kdec = codec.decoder(s.input.key, plain=True)
        self.vdec = codec.decoder(s.input.value, plain=True)
        self.gkenc = codec.encoder(s.selected.key, "group key")
        self.gvenc = codec.encoder(s.selected.value, "grouped value")
        self.selector = s.selector
        self.packed_out = s.packed.out

    def _change(self, new: Any, old: Any) -> Any:
        """A ``Change`` as its column holds it (JSON text when packed)."""
        cell = {"new": new, "old": old}
        return msgspec.json.encode(cell).decode() if self.packed_out else cell

    def _select(self, key: Any, value: Any, batch: Batch, i: int) -> tuple[bool, Any]:
        """``(ok, (group key cell, value cell))`` of the update's new value; not ok when
        decoding or the selector failed (the handler has had the record)."""
        row = batch.row(i)
        origin = "KEY"
        try:
            k = self.kdec(key)
            origin = "VALUE"
            v = self.vdec(self.unpack_value(value))
        except Exception as exc:
            self.guard.decode_failed(self.processor, row, exc, origin)
            return False, None
        selector, gkenc, gvenc = self.selector, self.gkenc, self.gvenc

        def select(kk: Any, vv: Any) -> tuple[Any, Any]:
            got = selector(kk, vv)
            if got is None:  # no pair at all: as a pair with a null key
                return None, None
            if not (isinstance(got, tuple | list) and len(got) == 2):
                raise TypeError(
                    f"{self.processor}: the selector must return a (key, value) pair, "
                    f"got {type(got).__name__}"
                )
            gk, gv = got
            return gkenc(gk), gvenc(gv)

        return self.guard.call(self.processor, select, (k, v), row)

    def process(self, st: Any, batch: Batch, task: int, out: Emitter) -> None:
        assert isinstance(out, KeyedEmitter)
        table: dict[Any, Any] = st["table"]
        khash: dict[Any, int] = st["hash"]
        keys, hashes = batch.keys, batch.hashes
        values = batch.col("value")
        subtask = f"{self.guard.subtopology}_{task}"
        hashable, plain = codec.hashable, codec.plain
        for i, ts, position in batch.walk(st):
            key = keys[i]
            if key is None:
                self.guard.drop(self.processor, subtask, "null-key", batch.row(i))
                continue
            hk = key if type(key) is str else hashable(key)
            old = table.get(hk)
            value = values[i]
            new: Any = None
            if value is not None:
                ok, got = self._select(key, value, batch, i)
                if not ok:
                    # nothing leaves or joins a group; the key keeps no selection
                    table.pop(hk, None)
                    khash.pop(hk, None)
                    self.touched.add(hk)
                    continue
                gk, gv = plain(got[0]), plain(got[1])
                if gk is None or gv is None:
                    # Kafka Streams skips a selected pair with a null key or value
                    reason = "null-key" if gk is None else "null-value"
                    self.guard.drop(self.processor, subtask, reason, batch.row(i))
                else:
                    new = [gk, gv]
            if old is not None and new is not None and old[0] == new[0]:
                out.put(i, new[0], self._change(new[1], old[1]), ts, position)
            else:
                if old is not None:
                    out.put(i, old[0], self._change(None, old[1]), ts, position)
                if new is not None:
                    out.put(i, new[0], self._change(new[1], None), ts, position)
            self.touched.add(hk)
            if new is None:
                table.pop(hk, None)
                khash.pop(hk, None)
            else:
                table[hk] = new
                khash[hk] = hashes[i]
