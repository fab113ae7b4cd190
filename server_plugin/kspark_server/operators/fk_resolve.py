"""A foreign-key join's last stage, keyed by the left key (see
:mod:`kspark_server.operators.fk_messages` for the three stages and their messages).

A response whose version is older than the newest this key has seen is dropped: the
left value it answers has been replaced. The others set the key's result:

===============  =======================================================================
response         result (``inner``; ``left``)
===============  =======================================================================
``SUBSCRIBED``   right value None: none; ``joiner(left, None)``. Else
                 ``joiner(left, right)``
``UPDATED``      as ``SUBSCRIBED``, with the key's left value and the new right value
``DELETED``      none
===============  =======================================================================

A result is emitted when it is a value, and a tombstone when the key had a value before
(no tombstone for a key that had none). The result's timestamp is the larger of the left
and the right update's (the left one's while the foreign key has had no right value); a
deleted left value's tombstone, the delete's.

State: per left key, ``[version, left value, left timestamp, right timestamp, result]``;
the result (as it leaves the operator) is what ``app.store(name)`` answers.
"""

from __future__ import annotations

from typing import Any

import msgspec

from kspark_server import codec, stateenc
from kspark_server.operators.base import Batch, Emitter, KeyedEmitter, TaskProcessor, identity
from kspark_server.operators.fk_messages import DELETED, SUBSCRIBED, UPDATED
from kspark_server.spec import FkResolveSpec

__all__ = ["FkResolveProcessor"]

# a key's entry
_VER, _LV, _LTS, _RTS, _OUT = range(5)


class FkResolveProcessor(TaskProcessor):
    """A foreign-key join's result: the newest version's responses, joined."""

    new_value = True
    spec: FkResolveSpec
    emitter_class = KeyedEmitter

    def setup(self) -> None:
        s = self.spec
        self.kdec = codec.decoder(s.key, plain=True)
        self.lvdec = codec.decoder(s.left_value, plain=True)
        self.rvdec = codec.decoder(s.right_value, plain=True)
        self.venc = codec.encoder(s.output.value, "value")
        self.unpack_l = msgspec.json.decode if s.left_packed else identity
        self.unpack_r = msgspec.json.decode if s.right_packed else identity
        self.packed_out = s.packed.out
        self.inner = s.mode == "inner"

    def process(self, st: Any, batch: Batch, task: int, out: Emitter) -> None:
        assert isinstance(out, KeyedEmitter)
        table: dict[Any, list[Any]] = st["table"]
        khash: dict[Any, int] = st["hash"]
        messages = batch.col("value")
        keys, hashes = batch.keys, batch.hashes
        hashable, plain, unpack = codec.hashable, codec.plain, stateenc.unpack
        #: the versions of keys whose left value was deleted earlier in this batch
        gone: dict[Any, int] = {}
        for i, ts, position in batch.walk(st):
            key = keys[i]
            hk = key if type(key) is str else hashable(key)
            msg = unpack(messages[i])
            ver, what = msg[0], msg[1]
            e = table.get(hk)
            newest = e[_VER] if e is not None else gone.get(hk, 0)
            if ver < newest:
                continue  # the answer to a replaced left value
            if what == DELETED:
                if e is not None:
                    if e[_OUT] is not None:
                        out.put(i, key, None, ts, position)
                    table.pop(hk, None)
                    khash.pop(hk, None)
                    self.touched.add(hk)
                gone[hk] = ver
                continue
            if what == SUBSCRIBED:
                lv, rv, rts = msg[2], msg[3], msg[4]
                lts = ts
                old = None if e is None else e[_OUT]
            elif what == UPDATED and e is not None and ver == e[_VER]:
                lv, rv, rts = e[_LV], msg[2], msg[3]
                lts = e[_LTS]
                old = e[_OUT]
            else:
                continue
            ok, res = self._result(key, lv, rv, batch, i)
            if not ok:
                res = old
            elif res is not None and not self.packed_out:
                res = plain(res)
            table[hk] = [ver, lv, lts, rts, res]
            khash[hk] = hashes[i]
            self.touched.add(hk)
            if ok and (res is not None or old is not None):
                out.put(i, key, res, max(lts, rts), position)

    def _result(self, key: Any, lv: Any, rv: Any, batch: Batch, i: int) -> tuple[bool, Any]:
        """The key's result for left value ``lv`` and right value ``rv`` (None: none),
        packed as it leaves the operator; (False, None) where decoding or the joiner
        failed and the exception handler took the record."""
        if rv is None and self.inner:
            return True, None
        row = batch.row(i)
        origin = "KEY"
        try:
            k = self.kdec(key)
            origin = "VALUE"
            left = self.lvdec(self.unpack_l(lv))
            right = None if rv is None else self.rvdec(self.unpack_r(rv))
        except Exception as exc:
            self.guard.decode_failed(self.spec.processor, row, exc, origin)
            return False, None
        joiner, venc, pack = self.spec.joiner, self.venc, self.pack_out
        args = (k, left, right) if self.spec.joiner_with_key else (left, right)
        return self.guard.call(
            self.spec.processor,
            lambda *a: None if (r := joiner(*a)) is None else pack(venc(r)),
            args,
            row,
            record=(k, left),
        )
