"""The same-key table-table join (``KTable.join/left_join/outer_join`` of a table), per task.

Both tables' updates arrive in one input, the right table's tagged ``ks_jside == 1`` with
their value in ``ks_tvalue`` (as a stream-table join's table), and are taken in the task's
processing order (:func:`kspark_server.operators.arrow.order`). Each update is applied to
its side and, as Kafka Streams' ``KTableKTableInnerJoin``, ``KTableKTableLeftJoin`` and
``KTableKTableOuterJoin`` do, may emit the join's new result for its key:

============  ============================  ===========================================
join          an update of the left table   an update of the right table
============  ============================  ===========================================
inner         right absent: nothing;        left absent: nothing; else
              else ``joiner(new, right)``   ``joiner(left, new)``, a tombstone for a
              or, for a delete, a tombstone delete
left          ``joiner(new, right)`` (right left absent: nothing; else
              may be None); a delete: a     ``joiner(left, new)`` (new may be None)
              tombstone, unless neither
              side had a value
outer         ``joiner(new, right)``; a     ``joiner(left, new)``; a delete: a
              delete: a tombstone once      tombstone once both are absent, unless
              both are absent, unless       neither side had a value
              neither side had a value
============  ============================  ===========================================

The result's timestamp is the larger of the two sides' timestamps (the update's own when
the other side is absent). An update with a null key is dropped and counted.

State: per key, ``[left value, left timestamp, right value, right timestamp, result]``
in the executor-local store; the result (as it leaves the operator) is what
``app.store(name)`` answers.
"""

from __future__ import annotations

from typing import Any

import msgspec

from kspark_server import codec
from kspark_server.operators.base import Batch, Emitter, QueueEmitter, TaskProcessor, identity
from kspark_server.spec import TableJoinSpec

__all__ = ["TableJoinProcessor"]

# a key's entry
_LV, _LTS, _RV, _RTS, _OUT = range(5)


class TableJoinProcessor(TaskProcessor):
    """Kafka Streams' table-table join on the same key, per task (see the module's text)."""

    new_value = True
    spec: TableJoinSpec
    emitter_class = QueueEmitter

    def setup(self) -> None:
        s = self.spec
        self.mode = s.mode
        self.kdec = codec.decoder(s.left.key, plain=True)
        self.lvdec = codec.decoder(s.left.value, plain=True)
        self.rvdec = codec.decoder(s.right.value, plain=True)
        self.venc = codec.encoder(s.output.value, "value")
        self.unpack = (self.unpack_value, msgspec.json.decode if s.packed.tvalue else identity)
        #: a side's value is stored as it travels: JSON text when packed, else plain
        self.plain = (not s.packed.value, not s.packed.tvalue)
        self.packed_out = s.packed.out
        self.joiner = s.joiner
        self.with_key = s.joiner_with_key

    def process(self, st: Any, batch: Batch, task: int, out: Emitter) -> None:
        assert isinstance(out, QueueEmitter)
        table: dict[Any, list[Any]] = st["table"]
        khash: dict[Any, int] = st["hash"]
        jside = batch.col("ks_jside")
        lvalues = batch.col("value")
        rvalues = batch.col("ks_tvalue")
        keys, hashes = batch.keys, batch.hashes
        hashable, plain = codec.hashable, codec.plain
        mode = self.mode
        subtask = f"{self.guard.subtopology}_{task}"
        for i, ts, position in batch.walk(st):
            side = 1 if jside[i] == 1 else 0
            key = keys[i]
            if key is None:
                # as Kafka Streams' table-table join: an update without a key is skipped
                row = batch.row(i)
                record = (row.get("key"), row.get("ks_tvalue" if side else "value"))
                self.guard.drop(self.processor, subtask, "null-key", row, record)
                continue
            new = rvalues[i] if side else lvalues[i]
            if new is not None and self.plain[side]:
                new = plain(new)
            hk = key if type(key) is str else hashable(key)
            e = table.get(hk)
            e = [None, 0, None, 0, None] if e is None else list(e)
            mine, theirs = (_RV, _LV) if side else (_LV, _RV)
            old = e[mine]
            other = e[theirs]
            e[mine], e[mine + 1] = new, ts
            emit = self._emits(mode, side, new, old, other)
            if emit:
                result_ts = ts if other is None else max(ts, e[theirs + 1])
                lv, rv = e[_LV], e[_RV]
                if self._is_tombstone(mode, lv, rv):
                    res: Any = None
                    ok = True
                else:
                    ok, res = self._join(key, lv, rv, batch, i, side)
                if ok:
                    e[_OUT] = res if res is None or self.packed_out else plain(res)
                    out.put_value(i, res, result_ts, position)
            touched = self.touched
            touched.add(hk)
            if e[_LV] is None and e[_RV] is None:
                table.pop(hk, None)
                khash.pop(hk, None)
            else:
                if not emit and self._is_tombstone(mode, e[_LV], e[_RV]):
                    e[_OUT] = None
                table[hk] = e
                khash[hk] = hashes[i]

    @staticmethod
    def _emits(mode: str, side: int, new: Any, old: Any, other: Any) -> bool:
        """Whether an update of ``side`` (its new and old value; ``other``: the other
        side's value) emits the key's result, as Kafka Streams' join processors decide."""
        if mode == "inner":
            return other is not None
        outer_side = mode == "outer" or side == 0
        if not outer_side:  # the right side of a left join
            return other is not None
        return other is not None or new is not None or old is not None

    @staticmethod
    def _is_tombstone(mode: str, lv: Any, rv: Any) -> bool:
        """Whether the result of a key whose sides hold ``lv`` and ``rv`` is a delete."""
        if mode == "inner":
            return lv is None or rv is None
        if mode == "left":
            return lv is None
        return lv is None and rv is None

    def _join(
        self, key: Any, lv: Any, rv: Any, batch: Batch, i: int, side: int
    ) -> tuple[bool, Any]:
        """``joiner(left, right)`` packed as it leaves the operator; (False, None) where
        the decoding or the joiner failed and the exception handler took the record."""
        row = batch.row(i)
        origin = "KEY"
        try:
            k = self.kdec(key)
            origin = "VALUE"
            left = None if lv is None else self.lvdec(self.unpack[0](lv))
            right = None if rv is None else self.rvdec(self.unpack[1](rv))
        except Exception as exc:
            self.guard.decode_failed(self.processor, row, exc, origin)
            return False, None
        joiner, venc, pack = self.joiner, self.venc, self.pack_out
        args = (k, left, right) if self.with_key else (left, right)
        return self.guard.call(
            self.processor,
            lambda *a: pack(venc(joiner(*a))),
            args,
            row,
            record=(k, right if side else left),
        )
