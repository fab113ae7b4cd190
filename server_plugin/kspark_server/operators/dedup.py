"""KIP-655 deduplication (``KStream.deduplicate``), per task.

State: the task's stream time and, per id, the timestamp of the last forwarded record
(and its ``ks_hash``), expired through the local store's time index once stream time has
moved past the deduplication interval.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kspark_server import codec
from kspark_server.envelope import SideKind
from kspark_server.operators.base import Batch, Emitter, TaskProcessor
from kspark_server.spec import DedupSpec

__all__ = ["DedupProcessor"]


class DedupProcessor(TaskProcessor):
    """KIP-655 deduplication. State: the task's stream time and, per id, the timestamp of
    the last forwarded record (and its ``ks_hash``). Only one entry per id can be live
    (see docs/operators)."""

    spec: DedupSpec

    def setup(self) -> None:
        s = self.spec
        self.mode = s.mode
        self.interval = s.interval_ms
        self.id_selector = s.id_selector
        self.kdec = codec.decoder(s.input.key)
        self.vdec = codec.decoder(s.input.value)
        self.duplicates = 0

    time_indexed = True

    def keys(self, st: Any, batch: Batch) -> list[Any]:
        key_type = batch.table.column("key").type
        if self.mode == "by_key" and (
            pa.types.is_string(key_type) or pa.types.is_large_string(key_type)
        ):
            # a text key is its own state key: the batch's keys as Arrow dictionary codes
            # in processing order (no Python object per record), each distinct key once
            self._batch_ok = None
            chunk = pc.dictionary_encode(batch.arrow("key").combine_chunks())
            self._codes = pc.fill_null(chunk.indices, -1).to_numpy(zero_copy_only=False)
            self._distinct = chunk.dictionary.to_pylist()
            return list(self._distinct)
        idents = self._idents(batch)
        self._batch_ok = [ok for ok, _ in idents]
        index: dict[Any, int] = {}
        put = index.setdefault
        self._codes = np.fromiter(
            (-1 if ident is None else put(ident, len(index)) for _, ident in idents),
            dtype="int64",
            count=len(idents),
        )
        self._distinct = list(index)
        return list(self._distinct)

    def time_of(self, entry: Any) -> int:
        return int(entry[0])

    def expire_before(self, st: Any) -> int | None:
        t = st["stream_time"]
        return None if t is None else int(t) - self.interval

    def _idents(self, batch: Batch) -> list[tuple[bool, Any]]:
        if self.mode == "by_id":
            return [(True, x) for x in batch.col("ks_id")]
        hashable = codec.hashable
        if self.mode == "by_key":
            return [
                (True, k if type(k) is str else None if k is None else hashable(k))
                for k in batch.keys
            ]
        assert self.id_selector is not None
        values = batch.col("value")
        out: list[tuple[bool, Any]] = []
        for i, key in enumerate(batch.keys):
            origin = "KEY"
            try:  # a class's constructor or validator may refuse a stored key or value
                k = self.kdec(key)
                origin = "VALUE"
                args = (k, self.vdec(self.unpack_value(values[i])))
            except Exception as exc:
                self.guard.decode_failed(self.processor, batch.row(i), exc, origin)
                out.append((False, None))
                continue
            ok, ident = self.guard.call(self.processor, self.id_selector, args, batch.row(i))
            if not ok:
                out.append((False, None))
            elif key is None or ident is None:
                out.append((True, None))
            else:
                out.append((True, (hashable(key), hashable(ident))))
        return out

    def process(self, st: Any, batch: Batch, task: int, out: Emitter) -> None:
        seen: dict[Any, int] = st["seen"]
        interval = self.interval
        ts = batch.ts_array.astype("int64", copy=False)
        # the stream time as of each record (its own timestamp included), which does not
        # depend on which records are duplicates: the ids' decisions are independent
        # given it
        start = st["stream_time"]
        times = np.maximum.accumulate(ts)
        if start is not None:
            times = np.maximum(times, start)
        codes = self._codes
        active = codes >= 0
        if self._batch_ok is not None:
            ok = np.fromiter(self._batch_ok, dtype=bool, count=len(codes))
            active &= ok
        else:
            ok = None
        taken = ~active if ok is None else ok & ~active
        if active.any():
            prev, last = _decide(ts, times, codes, active, taken, seen, self._distinct, interval)
        else:
            prev, last = {}, {}
        out.take_all(np.flatnonzero(taken).tolist())
        duplicates = int(len(ts) - np.count_nonzero(taken))
        if ok is not None:
            duplicates -= int(len(ts) - np.count_nonzero(ok))
        hashes: dict[Any, int] = st["hash"]
        if last:
            seen.update(prev)
            at = np.fromiter(last.values(), dtype="int64", count=len(last))
            hashes.update(zip(last, batch.hash_array[at].tolist(), strict=True))
            self.touched.update(last)
        stream_time = int(times[-1]) if len(times) else start
        if stream_time is not None:
            low = stream_time - interval
            for k in [k for k, t in seen.items() if t < low]:
                del seen[k]
                hashes.pop(k, None)
                self.touched.add(k)
        st["stream_time"] = stream_time
        self.duplicates += duplicates

    def extra_side(self, st: Any, task: int, entries: int) -> list[dict[str, Any]]:
        n, self.duplicates = self.duplicates, 0
        t = f"{self.guard.subtopology}_{task}"
        return [
            {"kind": SideKind.DUPLICATES, "processor": self.processor, "task": t, "count": n},
            *super().extra_side(st, task, entries),
        ]


#: an id with more records than this in one batch is decided record by record in Python;
#: the others are decided together, one round of array operations per record rank
_ROUNDS = 64
#: timestamps and intervals whose differences int64 holds without overflow
_SAFE = 1 << 61


def _decide(
    ts: np.ndarray[Any, Any],
    times: np.ndarray[Any, Any],
    codes: np.ndarray[Any, Any],
    active: np.ndarray[Any, Any],
    taken: np.ndarray[Any, Any],
    seen: dict[Any, int],
    distinct: list[Any],
    interval: int,
) -> tuple[dict[Any, int], dict[Any, int]]:
    """KIP-655's decision for each ``active`` record, in processing order: marks the
    forwarded ones in ``taken``; returns, per id whose entry the batch changes, the entry's
    timestamp and the position of the record that left it.

    A record with an id is a duplicate when the id's entry (``seen``, or the last record
    of the batch that stored one) is live at the record's stream time (``times``) and
    within ``interval`` of the record's timestamp; a forwarded record stores its
    timestamp when it is not older than the stream time less the interval."""
    pos = np.flatnonzero(active)
    order = pos[np.argsort(codes[pos], kind="stable")]
    sorted_codes = codes[order]
    starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
    counts = np.diff(np.r_[starts, len(order)])
    group_codes = sorted_codes[starts]
    ids = [distinct[c] for c in group_codes.tolist()]
    get = seen.get
    had = [get(i) for i in ids]
    # Python's integers beyond int64's safe range: every id record by record
    wide = (
        interval >= _SAFE
        or int(ts.min()) <= -_SAFE
        or int(ts.max()) >= _SAFE
        or int(times.min()) <= -_SAFE
        or any(h is not None and not -_SAFE < h < _SAFE for h in had)
    )
    prev_out: dict[Any, int] = {}
    last_out: dict[Any, int] = {}
    small = np.flatnonzero(counts <= _ROUNDS) if not wide else np.arange(0)
    if len(small):
        lows = times - interval
        g_start, g_count = starts[small], counts[small]
        sids = [ids[g] for g in small.tolist()]
        shad = [had[g] for g in small.tolist()]
        has = np.fromiter((h is not None for h in shad), dtype=bool, count=len(sids))
        prev = np.fromiter((0 if h is None else h for h in shad), dtype="int64", count=len(sids))
        last = np.full(len(sids), -1, dtype="int64")
        live = np.arange(len(sids))
        r = 0
        while len(live):
            j = order[g_start[live] + r]
            t, low, p, h = ts[j], lows[j], prev[live], has[live]
            dup = h & (p >= low) & (np.abs(p - t) <= interval)
            taken[j] = ~dup
            store = ~dup & (t >= low)
            hit = live[store]
            prev[hit] = t[store]
            has[hit] = True
            last[hit] = j[store]
            r += 1
            live = live[g_count[live] > r]
        for g in np.flatnonzero(last >= 0).tolist():
            prev_out[sids[g]] = int(prev[g])
            last_out[sids[g]] = int(last[g])
    big = np.flatnonzero(counts > _ROUNDS) if not wide else np.arange(len(starts))
    if len(big):
        ts_list, time_list = ts.tolist(), times.tolist()
        for g in big.tolist():
            ident, s0 = ids[g], int(starts[g])
            entry: int | None = had[g]
            at = -1
            for j in order[s0 : s0 + int(counts[g])].tolist():
                t, low = ts_list[j], time_list[j] - interval
                if entry is not None and entry >= low and -interval <= entry - t <= interval:
                    continue
                taken[j] = True
                if t >= low:
                    entry, at = t, j
            if entry is not None and at >= 0:
                prev_out[ident] = entry
                last_out[ident] = at
    return prev_out, last_out
