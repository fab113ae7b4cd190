"""Sliding windows (KIP-450) of :class:`~kspark_server.operators.aggregate.AggregateProcessor`:
one micro-batch of a task, record by record, as Kafka Streams'
``KStreamSlidingWindowAggregate`` processes them. The aggregate operator keeps the state,
the emitter and the user's functions; this module decides which windows each record
creates and updates, and which windows a batch emits and keeps.
"""

from __future__ import annotations

from typing import Any

from kspark_server import codec
from kspark_server.operators.base import Batch

__all__ = ["SlidingBatch", "closed_window"]


def closed_window(key: Any, ts: Any, ctx: list[Any]) -> dict[str, Any]:
    """The record of a closed window's final result, its value aside: the window's key
    and time, at the position of the record that last changed it (``ctx``: its topic,
    partition, offset, ``ks_seq`` and ``ks_sub``)."""
    topic, partition, offset, seq, sub = ctx
    return {
        "key": key,
        "timestamp": int(ts),
        "headers": None,
        "topic": topic,
        "partition": partition,
        "offset": offset,
        "ks_seq": seq,
        "ks_sub": sub,
        "ks_side": None,
    }


class SlidingBatch:
    """One batch of sliding windows (KIP-450), record by record as Kafka Streams'
    ``KStreamSlidingWindowAggregate`` processes them.

    A key's entry is ``[index time, windows, key]``, each window ``[start, aggregate,
    timestamp, context]`` (its end is start plus the time difference, both included;
    ``context`` the record context of its last update when emitting on close), sorted by
    start. A window stays in the entry while a later record may read it: while its start
    is at most three time differences before stream time minus grace (a record that is
    not too late reads windows from two time differences before its own time), or for the
    store's retention if that is longer.
    """

    # ``p`` is the AggregateProcessor running the batch (its settings, guard, functions
    # and emitter); typed loosely so that this module does not import the operator back
    def __init__(self, p: Any, st: Any, batch: Batch, task: int, out: Any):
        self.p, self.st, self.batch, self.out = p, st, batch, out
        self.size, self.grace = p.size, p.grace
        self.task_id = f"{p.guard.subtopology}_{task}"
        #: per key: start -> window, read from the entry once
        self.wins: dict[Any, dict[int, list[Any]]] = {}
        self.kcs: dict[Any, Any] = {}
        #: (key, start) -> (position of its last update, order within that record)
        self.last: dict[Any, tuple[int, int]] = {}
        self.seq = 0
        self.ctx_cols = (
            [batch.col(c) for c in ("topic", "partition", "offset", "ks_seq", "ks_sub")]
            if p.suppress
            else None
        )

    def windows_of(self, hk: Any) -> dict[int, list[Any]]:
        got = self.wins.get(hk)
        if got is None:
            entry = self.st["table"].get(hk)
            got = {} if entry is None else {int(w[0]): list(w) for w in entry[1]}
            if entry is not None:
                self.kcs[hk] = entry[2]
            self.wins[hk] = got
        return got

    def run(self) -> None:
        p, st, batch = self.p, self.st, self.batch
        prior = st["stream_time"]
        stream_time = prior
        keys, values, tss = p._keys(batch), p._values(batch), batch.ts
        hashes = batch.hashes
        for i in range(batch.n):
            ts = tss[i]
            if stream_time is None or ts > stream_time:
                stream_time = ts
            key, value = keys[i], values[i]
            if key is None or value is None:
                # Kafka Streams skips (and counts) a record with a null key or value
                reason = "null-key" if key is None else "null-value"
                p.guard.drop(p.processor, self.task_id, reason, batch.row(i))
                continue
            if ts < 0:
                p.guard.drop(p.processor, self.task_id, "invalid-timestamp", batch.row(i))
                continue
            close = stream_time - self.grace
            if ts + self.size < close:
                # even the window starting right after it has closed
                p.guard.drop(p.processor, self.task_id, "late-record", batch.row(i))
                continue
            hk = key if type(key) is str else codec.hashable(key)
            if p.keep_key:
                self.kcs[hk] = codec.plain(key)
            else:
                self.kcs.setdefault(hk, None)
            wins = self.windows_of(hk)
            rec = _SlidingRecord(self, wins, hk, i, key, value, ts, close)
            if ts < self.size:
                rec.early()
            else:
                rec.normal()
            st["hash"][hk] = hashes[i]
        st["stream_time"] = stream_time
        self.finish(prior, stream_time)

    def finish(self, prior: Any, stream_time: Any) -> None:
        """Emit (updates, or the windows this batch closed), then write back every loaded
        entry without the windows no record can read any more."""
        p, st, size = self.p, self.st, self.size
        table: dict[Any, Any] = st["table"]
        for hk in table:  # keys loaded only for the windows they close
            self.windows_of(hk)
        out = self.out
        if stream_time is None:
            return
        close = int(stream_time) - self.grace
        if p.suppress:
            low = None if prior is None else int(prior) - self.grace
            done = []
            for hk, wins in self.wins.items():
                for start, w in wins.items():
                    end = start + size
                    if end < close and (low is None or end >= low):
                        ctx = w[3] or [None, None, None, 0, 0]
                        done.append((end, int(ctx[3] or 0), int(ctx[4] or 0), hk, start))
            done.sort(key=lambda t: t[:3])
            for _, _, _, hk, start in done:
                w = self.wins[hk][start]
                out.carry(closed_window(self.window_key(hk, start), w[2], w[3]), w[1])
        else:
            tss = self.batch.ts
            for (hk, start), (i, _) in sorted(self.last.items(), key=lambda kv: kv[1]):
                got = self.wins[hk].get(start)
                if got is None:  # the aggregate became None: a tombstone
                    out.row(i, self.window_key(hk, start), None, tss[i])
                else:
                    out.row(i, self.window_key(hk, start), got[1], int(got[2]))
        keep_from = close - p.keep_for
        for hk, wins in self.wins.items():
            kept = sorted((w for s, w in wins.items() if s >= keep_from), key=lambda w: w[0])
            p.touched.add(hk)
            if not kept:
                table.pop(hk, None)
                continue
            open_starts = [int(w[0]) for w in kept if int(w[0]) + size >= close]
            if p.suppress and open_starts:
                index = open_starts[0]
            else:
                index = int(kept[-1][0]) + p.keep_for - size
            table[hk] = [index, kept, self.kcs.get(hk)]

    def window_key(self, hk: Any, start: int) -> dict[str, Any]:
        kc = self.kcs.get(hk)
        return {
            "key": hk if kc is None else kc,
            "window": {"start": int(start), "end": int(start) + self.size},
        }


class _SlidingRecord:
    """One record's updates of its key's sliding windows (``KStreamSlidingWindowAggregate``'s
    ``processReverse``, ``processEarly`` and ``createWindows``)."""

    def __init__(
        self,
        b: SlidingBatch,
        wins: dict[int, list[Any]],
        hk: Any,
        i: int,
        key: Any,
        value: Any,
        ts: int,
        close: int,
    ) -> None:
        self.b, self.wins, self.hk, self.i = b, wins, hk, i
        self.key, self.value, self.ts, self.close = key, value, ts, close
        self.size = b.size
        self.dead_lettered = False
        self.row = b.batch.row(i)

    def update(self, start: int, base: tuple[Any, int] | None) -> bool:
        """Fold the record into window ``start`` whose aggregate so far is ``base``
        (``(cell, timestamp)``; None: the initializer's); a closed window misses it (and
        counts it). False if the user's function failed."""
        b, p = self.b, self.b.p
        if start + self.size < self.close:
            p.guard.drop(
                p.processor, b.task_id, "late-record", None if self.dead_lettered else self.row
            )
            self.dead_lettered = True
            return True
        prior: list[Any] = []
        if base is not None:
            prior = [base[0] if p.op == "count" else p.adec(base[0])]
        ok, res = p._fold(prior, self.key, self.value, self.row)
        if not ok:
            return False
        obj, cell = res
        if obj is None:  # Kafka Streams stores a null aggregate as a delete
            self.wins.pop(start, None)
        else:
            newest = self.ts if base is None else max(self.ts, int(base[1]))
            self.wins[start] = [start, cell, newest, self.ctx()]
        self.mark(start)
        return True

    def ctx(self) -> Any:
        cols = self.b.ctx_cols
        return None if cols is None else [c[self.i] for c in cols]

    def mark(self, start: int) -> None:
        self.b.seq += 1
        self.b.last[(self.hk, start)] = (self.i, self.b.seq)

    def copy_right(self, agg: tuple[Any, int]) -> None:
        """The record's own right window ``[ts + 1, ts + 1 + size]``: the records after it
        that ``agg`` (a window that holds the record's time) holds."""
        start = self.ts + 1
        self.wins[start] = [start, agg[0], int(agg[1]), self.ctx()]
        self.mark(start)

    def normal(self) -> None:
        ts, size, wins = self.ts, self.size, self.wins
        left_agg: tuple[Any, int] | None = None
        right_agg: tuple[Any, int] | None = None
        left_exists = right_exists = False
        prev: int | None = None
        starts = sorted((s for s in wins if ts - 2 * size <= s <= ts + 1), reverse=True)
        for s in starts:
            w = wins[s]
            end, agg = s + size, (w[1], int(w[2]))
            if s == ts + 1:
                right_exists = True
            elif end > ts:
                if right_agg is None:
                    right_agg = agg
                if not self.update(s, agg):
                    return
            elif end == ts:
                left_exists = True
                if not self.update(s, agg):
                    return
                if agg[1] >= ts:  # a record at this time came before: nothing to create
                    return
                prev = agg[1]
            else:
                left_agg, prev = agg, agg[1]
                break
        if prev is not None and prev + 1 not in wins and prev + 1 + size >= ts:
            # the previous record's right window, which only this record is in
            if not self.update(prev + 1, None):
                return
        if not left_exists:
            base = None
            if prev is not None and ts - size <= prev:
                assert left_agg is not None
                base = (left_agg[0], ts)
            if not self.update(ts - size, base):
                return
        if not right_exists and right_agg is not None and right_agg[1] > ts:
            self.copy_right(right_agg)

    def early(self) -> None:
        """A record before the time difference: its windows would start before 0, so it
        goes into ``[0, size]``, which holds every such record, as in Kafka Streams."""
        ts, wins = self.ts, self.wins
        combined: tuple[Any, int] | None = None
        right_agg: tuple[Any, int] | None = None
        right_exists = False
        prev: int | None = None
        for s in sorted(s for s in wins if 0 <= s <= ts + 1):
            w = wins[s]
            agg = (w[1], int(w[2]))
            if s == 0:
                combined = agg
                if agg[1] < ts:
                    prev = agg[1]
            elif s <= ts:
                right_agg = agg
                if not self.update(s, agg):
                    return
            else:
                right_exists = True
        if right_agg is None and combined is not None and combined[1] > ts:
            right_agg = combined
        if not right_exists and right_agg is not None and right_agg[1] > ts:
            self.copy_right(right_agg)
        if prev is not None and prev + 1 not in wins and not self.update(prev + 1, None):
            return
        self.update(0, combined)
