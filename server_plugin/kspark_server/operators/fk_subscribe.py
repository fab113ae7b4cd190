"""A foreign-key join's first stage, keyed by the left table's key (see
:mod:`kspark_server.operators.fk_messages` for the three stages and their messages).

Each left update gets the key's next version number and its foreign key,
``foreign_key_extractor(value)`` (or ``(key, value)``), and sends:

==============================  ==================================================
left update                     subscriptions sent
==============================  ==================================================
a value, same foreign key       ``SUBSCRIBE`` to the foreign key
a value, another foreign key    ``UNSUBSCRIBE`` to the old one, ``SUBSCRIBE`` to
                                the new one
a value whose foreign key is    ``SUBSCRIBE`` with a null key (answered without
None                            a right value; ``UNSUBSCRIBE`` the old one)
a delete                        ``DELETE`` to the key's foreign key; nothing if the
                                key has no value
==============================  ==================================================

A left update with a null key is dropped and counted, as Kafka Streams skips it.

State: per left key, ``[foreign key, version]``; the foreign key as its column holds it.
"""

from __future__ import annotations

from typing import Any

from kspark_server import codec, stateenc
from kspark_server.operators.base import Batch, Emitter, KeyedEmitter, TaskProcessor
from kspark_server.operators.fk_messages import DELETE, SUBSCRIBE, UNSUBSCRIBE
from kspark_server.spec import FkSubscribeSpec

__all__ = ["FkSubscribeProcessor"]


class FkSubscribeProcessor(TaskProcessor):
    """A foreign-key join's left side: foreign keys, versions, subscriptions."""

    new_value = True
    spec: FkSubscribeSpec
    emitter_class = KeyedEmitter

    def setup(self) -> None:
        s = self.spec
        self.kdec = codec.decoder(s.left.key, plain=True)
        self.vdec = codec.decoder(s.left.value, plain=True)
        self.plain_values = not s.packed.value
        self.fkenc = codec.encoder(s.fk, "key")
        self.extractor = s.extractor

    def process(self, st: Any, batch: Batch, task: int, out: Emitter) -> None:
        assert isinstance(out, KeyedEmitter)
        proc = self.spec.processor
        table: dict[Any, list[Any]] = st["table"]
        khash: dict[Any, int] = st["hash"]
        values = batch.col("value")
        keys, hashes = batch.keys, batch.hashes
        hashable, plain, pack = codec.hashable, codec.plain, stateenc.pack
        subtask = f"{self.guard.subtopology}_{task}"
        #: versions of keys deleted earlier in this batch: a key's versions keep growing
        #: within the micro-batch, where older responses may still be under way
        gone: dict[Any, int] = {}
        for i, ts, position in batch.walk(st):
            key = keys[i]
            if key is None:
                row = batch.row(i)
                self.guard.drop(proc, subtask, "null-key", row, (None, row.get("value")))
                continue
            hk = key if type(key) is str else hashable(key)
            e = table.get(hk)
            lv = values[i]
            if lv is None:
                if e is None:
                    continue
                ver = e[1] + 1
                out.put(i, e[0], pack([DELETE, key, ver]), ts, position)
                table.pop(hk, None)
                khash.pop(hk, None)
                gone[hk] = ver
                self.touched.add(hk)
                continue
            ok, fk = self._foreign_key(key, lv, batch, i)
            if not ok:
                continue
            ver = (e[1] if e is not None else gone.get(hk, 0)) + 1
            if e is not None and e[0] is not None and hashable(e[0]) != hashable(fk):
                out.put(i, e[0], pack([UNSUBSCRIBE, key, ver]), ts, position)
            if self.plain_values:
                lv = plain(lv)
            out.put(i, fk, pack([SUBSCRIBE, key, ver, lv]), ts, position)
            table[hk] = [fk, ver]
            khash[hk] = hashes[i]
            self.touched.add(hk)

    def _foreign_key(self, key: Any, lv: Any, batch: Batch, i: int) -> tuple[bool, Any]:
        """The foreign key of a left value, as the right table's key column holds it;
        (False, None) where decoding or the extractor failed and the handler took the
        record."""
        row = batch.row(i)
        origin = "KEY"
        try:
            k = self.kdec(key)
            origin = "VALUE"
            v = self.vdec(self.unpack_value(lv))
        except Exception as exc:
            self.guard.decode_failed(self.spec.processor, row, exc, origin)
            return False, None
        extractor, fkenc = self.extractor, self.fkenc

        def extract(*a: Any) -> Any:
            fk = extractor(*a)
            return None if fk is None else fkenc(fk)

        args = (k, v) if self.spec.extractor_with_key else (v,)
        return self.guard.call(self.spec.processor, extract, args, row, record=(k, v))
