"""The windowed stream-stream join (``KStream.join/left_join/outer_join`` of two streams).

Both streams arrive in one input, the right stream's rows tagged ``ks_jside == 1`` with
their value in ``ks_tvalue`` (as a stream-table join's table), grouped by task. Per task,
records are taken in the order of :func:`kspark_server.operators.arrow.order`, and stream time is the
largest timestamp the task has seen on either side, advanced record by record, as in Kafka
Streams' ``KStreamKStreamJoin``:

- a left record at ``t1`` joins every buffered right record of its key at ``t2`` with
  ``t1 - before <= t2 <= t1 + after`` (a right record, the left ones with
  ``t2 - after <= t1 <= t2 + before``); each pair gives ``joiner(left, right)`` once, with
  timestamp ``max(t1, t2)``, when its second record arrives;
- a record's window closes when stream time passes its window end plus the grace period:
  ``t1 + after + grace`` for a left record, ``t2 + before + grace`` for a right one. A
  record that arrives after its window closed is *late*: it is dropped and counted
  (``dropped-records-total`` and ``late_records``);
- a left (left and outer join) or right (outer join) record that joined nothing gives
  ``joiner(value, None)`` or ``joiner(None, value)`` once its window closes, never before
  (Kafka Streams 3.1 and later: no spurious results), with its own timestamp;
- a record stays buffered until no record that is not late could join it: stream time past
  ``t + before + after + grace``;
- a record with a null value is dropped and counted; one with a null key too, except on an
  outer side, where it gives ``joiner(value, None)`` at once (KIP-962).

State: per key, the buffered records of both sides, in the executor-local store
(:mod:`kspark_server.localstore`) with a time index of each key's next deadline (the
earliest window close of a record still waiting for a match, or the earliest expiry). A
batch loads the keys its records touch and the keys whose deadline it passes, and nothing
else.
"""

from __future__ import annotations

import heapq
import json
from typing import Any

from kspark_server import codec, stateenc
from kspark_server.envelope import SideKind, side_row
from kspark_server.localstore import TaskStore
from kspark_server.operators.arrow import headers_from_text
from kspark_server.operators.base import Batch, Emitter, TaskProcessor, identity
from kspark_server.records import DictRecord
from kspark_server.spec import WindowJoinSpec

__all__ = ["WindowJoinProcessor"]

# a buffered record: [timestamp, waiting (for a match, to be emitted with None at window
# close), value (as it travels), headers (JSON text), topic, partition, offset, seq, sub]
_TS, _WAIT, _VALUE, _HEADERS, _TOPIC, _PART, _OFFSET, _SEQ, _SUB = range(9)
_SIDES = ("l", "r")


class WindowJoinProcessor(TaskProcessor):
    """Kafka Streams' windowed stream-stream join, per task (see the module's text)."""

    spec: WindowJoinSpec
    time_indexed = True

    def setup(self) -> None:
        s = self.spec
        self.before, self.after, self.grace = s.before_ms, s.after_ms, s.grace_ms
        #: how far after its own timestamp a record's window ends, per side
        self.look = (s.after_ms, s.before_ms)
        #: whether a side's unmatched records are emitted with None (left, right)
        self.outer = (s.mode in ("left", "outer"), s.mode == "outer")
        self.kdec = codec.decoder(s.left.key)
        self.lvdec = codec.decoder(s.left.value)
        self.rvdec = codec.decoder(s.right.value)
        self.venc = codec.encoder(s.output.value, "value")
        self.unpack = (
            json.loads if s.packed.value else identity,
            json.loads if s.packed.tvalue else identity,
        )
        self.joiner = s.joiner
        self.with_key = s.joiner_with_key
        self.late = 0
        self._local: TaskStore | None = None

    # -- which keys a batch loads ------------------------------------------------------

    def _partial(self, local: TaskStore, batch: Batch | None) -> Any:
        self._local = local
        return super()._partial(local, batch)

    def keys(self, st: Any, batch: Batch) -> list[Any]:
        found = batch.distinct_keys()
        # and the keys whose next deadline the batch's stream time passes
        final = max(batch.ts) if batch.n else None
        if st["stream_time"] is not None:
            final = st["stream_time"] if final is None else max(final, st["stream_time"])
        if final is not None and self._local is not None:
            unpack = stateenc.unpack
            found.update(unpack(kb) for kb in self._local.due(final))
        return list(found)

    def time_of(self, entry: Any) -> int:
        """A key's next deadline: the earliest window close of its records that wait for
        a match, or the earliest expiry of the others."""
        e = entry[0]
        span = self.before + self.after + self.grace
        t: int | None = None
        for side, name in enumerate(_SIDES):
            close = self.look[side] + self.grace
            for r in e[name]:
                d = r[_TS] + (close if r[_WAIT] else span)
                if t is None or d < t:
                    t = d
        return 0 if t is None else t

    # -- the join ----------------------------------------------------------------------

    def process(self, st: Any, batch: Batch, task: int, out: Emitter) -> None:
        bufs: dict[Any, Any] = st["bufs"]
        khash: dict[Any, int] = st["hash"]
        touched = self.touched
        # copies: the base class compares the entries as loaded with the new ones to keep
        # the time index right, so loaded entries are never changed in place
        for hk in list(bufs):
            e = bufs[hk]
            bufs[hk] = {"k": e["k"], "l": [list(r) for r in e["l"]], "r": [list(r) for r in e["r"]]}
            touched.add(hk)
        look, grace, outer = self.look, self.grace, self.outer
        before, after = self.before, self.after
        # records waiting for a match, by window close: emitted with None once it passes
        waiting: list[tuple[int, int, int, int, int, int, Any, list[Any]]] = []
        n = 0
        for hk, e in bufs.items():
            for side, name in enumerate(_SIDES):
                if outer[side]:
                    for r in e[name]:
                        if r[_WAIT]:
                            close = r[_TS] + look[side] + grace
                            waiting.append((close, r[_TS], side, r[_SEQ], r[_SUB], n, hk, r))
                            n += 1
        heapq.heapify(waiting)
        jside = batch.col("ks_jside")
        lvalues = batch.col("value")
        rvalues = batch.col("ks_tvalue")
        headers = batch.col("headers")
        topics = batch.col("topic")
        parts = batch.col("partition")
        offsets = batch.col("offset")
        seqs = batch.col("ks_seq")
        subs = batch.col("ks_sub")
        keys, tss, hashes = batch.keys, batch.ts, batch.hashes
        hashable, plain = codec.hashable, codec.plain
        stream_time = st["stream_time"]
        subtask = f"{self.guard.subtopology}_{task}"
        for i in range(batch.n):
            ts = tss[i]
            if stream_time is None or ts > stream_time:
                stream_time = ts
                self._emit_closed(waiting, stream_time, bufs, out, task)
            side = 1 if jside[i] == 1 else 0
            value = rvalues[i] if side else lvalues[i]
            if value is not None and self.unpack[side] is identity:
                value = plain(value)  # kept in state: plain Python values
            key = keys[i]
            if value is None or (key is None and not outer[side]):
                # Kafka Streams drops (and counts) a record with a null value, and one with
                # a null key that nothing can join
                self.guard.drop(
                    self.processor,
                    subtask,
                    "null-value" if value is None else "null-key",
                    batch.row(i),
                )
                continue
            env = [
                ts,
                False,
                value,
                headers[i],
                topics[i],
                parts[i],
                offsets[i],
                seqs[i],
                subs[i],
            ]
            if key is None:  # an outer side's record with a null key joins nothing (KIP-962)
                self._emit(out, key, side, env, None, ts, 0, batch.row(i))
                continue
            if ts + look[side] + grace < stream_time:
                row = batch.row(i)
                # the right side's value is in ks_tvalue: the dead letter carries the record's
                record = (row.get("key"), row.get("ks_tvalue" if side else "value"))
                self.guard.drop(self.processor, subtask, "late-record", row, record)
                self.late += 1
                continue
            hk = key if type(key) is str else hashable(key)
            e = bufs.get(hk)
            if e is None:
                e = bufs[hk] = {"k": plain(key), "l": [], "r": []}
            khash[hk] = hashes[i]
            touched.add(hk)
            lo, hi = (ts - before, ts + after) if side == 0 else (ts - after, ts + before)
            matches = [o for o in e[_SIDES[1 - side]] if lo <= o[_TS] <= hi]
            matches.sort(key=lambda o: (o[_TS], o[_SEQ], o[_SUB]))
            for j, o in enumerate(matches):
                o[_WAIT] = False
                self._emit(out, e["k"], side, env, o, max(ts, o[_TS]), j, batch.row(i))
            env[_WAIT] = outer[side] and not matches
            e[_SIDES[side]].append(env)
            if env[_WAIT]:
                close = ts + look[side] + grace
                heapq.heappush(waiting, (close, ts, side, env[_SEQ], env[_SUB], n, hk, env))
                n += 1
        st["stream_time"] = stream_time
        if stream_time is None:
            return
        # expiry: a record no record that is not late can join any more
        span = before + after + grace
        for hk in list(bufs):
            e = bufs[hk]
            for name in _SIDES:
                keep = [r for r in e[name] if r[_WAIT] or r[_TS] + span >= stream_time]
                if len(keep) != len(e[name]):
                    e[name] = keep
            if not e["l"] and not e["r"]:
                del bufs[hk]
                khash.pop(hk, None)

    def _emit_closed(
        self, waiting: list[Any], stream_time: int, bufs: dict[Any, Any], out: Emitter, task: int
    ) -> None:
        """Emit, with None, the waiting records whose windows stream time has passed."""
        while waiting and waiting[0][0] < stream_time:
            _, _, side, _, _, _, hk, r = heapq.heappop(waiting)
            if not r[_WAIT]:
                continue  # joined since it started waiting
            r[_WAIT] = False
            key = bufs[hk]["k"]
            row = DictRecord(self._record(key, r, None, r[_TS], 0, task), self._decoders(side))
            self._emit(out, key, side, r, None, r[_TS], 0, row)

    def _decoders(self, side: int) -> dict[str, Any]:
        decoders: dict[str, Any] = {"headers": headers_from_text}
        if self.unpack[side] is not identity:
            decoders["value"] = self.unpack[side]
        return decoders

    def _record(
        self, key: Any, r: list[Any], value: Any, ts: int, j: int, task: int
    ) -> dict[str, Any]:
        return {
            "key": key,
            "value": value,
            "timestamp": ts,
            "headers": r[_HEADERS],
            "topic": r[_TOPIC],
            "partition": r[_PART],
            "offset": r[_OFFSET],
            "ks_seq": r[_SEQ],
            # the results of one record keep their order (a fan-out, as flat_map's)
            "ks_sub": int(r[_SUB] or 0) * 65536 + j,
            "ks_side": None,
            "ks_task": task,
        }

    def _emit(
        self,
        out: Emitter,
        key: Any,
        side: int,
        this: list[Any],
        other: list[Any] | None,
        ts: int,
        j: int,
        row: Any,
    ) -> None:
        """``joiner(left, right)`` of ``this`` record (of ``side``) and ``other`` (None:
        it joined nothing), as a record with ``this`` record's envelope and ``ts``."""
        vals: list[Any] = [None, None]
        vals[side] = this[_VALUE]
        if other is not None:
            vals[1 - side] = other[_VALUE]
        lv = None if vals[0] is None else self.lvdec(self.unpack[0](vals[0]))
        rv = None if vals[1] is None else self.rvdec(self.unpack[1](vals[1]))
        k = None if key is None else self.kdec(key)
        joiner, venc, pack = self.joiner, self.venc, self.pack_out
        args = (k, lv, rv) if self.with_key else (lv, rv)
        ok, res = self.guard.call(
            self.processor,
            lambda *a: pack(venc(joiner(*a))),
            args,
            row,
            record=(k, lv if side == 0 else rv),
        )
        if ok:
            rec = self._record(key, this, None, ts, j, 0)
            del rec["ks_task"]
            out.carry(rec, res)

    def extra_side(self, st: Any, task: int, entries: int) -> list[dict[str, Any]]:
        late, self.late = self.late, 0
        rows = super().extra_side(st, task, entries)
        if late:
            t = f"{self.guard.subtopology}_{task}"
            rows.append(side_row(SideKind.LATE_RECORDS, self.processor, t, late))
        return rows
