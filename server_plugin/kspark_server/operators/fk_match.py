"""A foreign-key join's second stage, keyed by the foreign key (see
:mod:`kspark_server.operators.fk_messages` for the three stages and their messages).

Its input is the subscriptions (side 0) and the right table's updates (side 1, the value
in ``ks_tvalue``), taken in the task's processing order:

==================  ===================================================================
record              responses sent (keyed by the left key)
==================  ===================================================================
``SUBSCRIBE``       registers the left key (and version) as a subscriber of the foreign
                    key; ``SUBSCRIBED`` with the left value and the right value now
                    (None if there is none, or the foreign key is null)
``UNSUBSCRIBE``     removes the subscriber; nothing (the new foreign key answers)
``DELETE``          removes the subscriber; ``DELETED``
a right update      ``UPDATED`` with the new right value (None: a delete) to each
                    subscriber of the key; nothing if the key had and has no value
==================  ===================================================================

A right update with a null key is dropped and counted.

State: per foreign key, ``[right value, right timestamp, [[left key, version], ...]]``
(the subscribers).
"""

from __future__ import annotations

from typing import Any

from kspark_server import codec, stateenc
from kspark_server.operators.base import Batch, Emitter, KeyedEmitter, TaskProcessor
from kspark_server.operators.fk_messages import (
    DELETE,
    DELETED,
    SUBSCRIBE,
    SUBSCRIBED,
    UNSUBSCRIBE,
    UPDATED,
)
from kspark_server.spec import FkMatchSpec

__all__ = ["FkMatchProcessor"]


class FkMatchProcessor(TaskProcessor):
    """A foreign-key join's right side: the right table and its subscribers."""

    new_value = True
    spec: FkMatchSpec
    emitter_class = KeyedEmitter

    def setup(self) -> None:
        self.plain_right = not self.spec.packed.tvalue

    def process(self, st: Any, batch: Batch, task: int, out: Emitter) -> None:
        assert isinstance(out, KeyedEmitter)
        proc = self.spec.processor
        table: dict[Any, list[Any]] = st["table"]
        khash: dict[Any, int] = st["hash"]
        jside = batch.col("ks_jside")
        messages = batch.col("value")
        rvalues = batch.col("ks_tvalue")
        keys, hashes = batch.keys, batch.hashes
        hashable, plain = codec.hashable, codec.plain
        pack, unpack = stateenc.pack, stateenc.unpack
        subtask = f"{self.guard.subtopology}_{task}"
        # each touched key's [right value, right ts, {hashable left key: [left key,
        # version]}], written back to the table once, after the batch
        work: dict[Any, list[Any]] = {}
        for i, ts, position in batch.walk(st):
            fk = keys[i]
            right = jside[i] == 1
            if fk is None:
                if right:
                    row = batch.row(i)
                    self.guard.drop(proc, subtask, "null-key", row, (None, row.get("ks_tvalue")))
                    continue
                # a left value whose foreign key is null: answered at once, nothing kept
                msg = unpack(messages[i])
                op, lk, ver = msg[0], msg[1], msg[2]
                if op == SUBSCRIBE:
                    out.put(i, lk, pack([ver, SUBSCRIBED, msg[3], None, 0]), ts, position)
                elif op == DELETE:
                    out.put(i, lk, pack([ver, DELETED]), ts, position)
                continue
            hk = fk if type(fk) is str else hashable(fk)
            w = work.get(hk)
            if w is None:
                e = table.get(hk)
                subs = {} if e is None else {hashable(s[0]): s for s in e[2]}
                w = work[hk] = [None, 0, subs] if e is None else [e[0], e[1], subs]
                khash[hk] = hashes[i]
            if right:
                rv = rvalues[i]
                if rv is not None and self.plain_right:
                    rv = plain(rv)
                old = w[0]
                w[0], w[1] = rv, ts
                if old is None and rv is None:
                    continue
                for lk, ver in w[2].values():
                    out.put(i, lk, pack([ver, UPDATED, rv, ts]), ts, position)
                continue
            msg = unpack(messages[i])
            op, lk, ver = msg[0], msg[1], msg[2]
            hl = lk if type(lk) is str else hashable(lk)
            if op == SUBSCRIBE:
                w[2][hl] = [lk, ver]
                out.put(i, lk, pack([ver, SUBSCRIBED, msg[3], w[0], w[1]]), ts, position)
            elif op == UNSUBSCRIBE:
                w[2].pop(hl, None)
            elif op == DELETE:
                w[2].pop(hl, None)
                out.put(i, lk, pack([ver, DELETED]), ts, position)
        for hk, (rv, rts, subs) in work.items():
            self.touched.add(hk)
            if rv is None and not subs:
                table.pop(hk, None)
                khash.pop(hk, None)
            else:
                table[hk] = [rv, rts, list(subs.values())]
