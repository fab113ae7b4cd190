"""Aggregations of a grouped stream (``count``, ``reduce``, ``aggregate``), per task,
optionally over time windows, and with only each window's final result (``suppress``).

The operator is a :class:`~kspark_server.operators.base.TaskProcessor`, so its state follows the
per-task design of deduplication and joins: per-key entries in the executor-local store,
a batch loading only the entries of the keys its records touch, the durable base and log
of :mod:`kspark_server.taskstate`, the task chosen by the key's hash.
The state has the layout of a latest-value table (``table``, ``hash``, ``stream_time``),
so interactive queries, replicas and rescale read it as they read a table's.

Entries (the ``table`` map):

- not windowed: key -> ``[aggregate, timestamp]``;
- windowed: ``(key, window start)`` -> ``[start, aggregate, timestamp, key, context]``:
  the key as its column has it when that differs from the state's key (a record), and,
  when suppressed, the record context of the window's last update (``[topic,
  partition, offset, position, sub-position]``), which its final result carries;
- session windows: key -> ``[earliest end, sessions, key]``, each session ``[start, end,
  aggregate, timestamp]``, kept for gap plus grace after its end or the retention;
- sliding windows: key -> ``[index time, windows, key]``, each window ``[start, aggregate,
  timestamp, context]`` (see :mod:`kspark_server.operators.sliding`).

The aggregate is kept as it travels in its column (JSON text for a JSON-packed value
type), the timestamp is the largest of the records aggregated (Kafka Streams' result
timestamp).

Emission follows Kafka Streams with a record cache and a commit interval of one
micro-batch: a batch emits, for each key (or window) it changed, the latest value once,
in the order of each key's last update. With ``suppress`` (``Suppressed.until_window_closes``
or ``EmitStrategy.on_window_close()``), a window emits nothing until it closes (stream
time reaches its end plus grace; a sliding window's end is included, so passes it), then
its final value once.

Records follow Kafka Streams' rules: a record with a null key is dropped and counted in
the dropped records (not windowed: a null value too); a record older than its window's
end plus grace, by the task's stream time, is dropped from that window and counted once
per window it missed. ``reduce`` and ``aggregate`` call the user's function per record,
guarded by the processing exception handler.

The aggregation of a grouped table (``KTable.group_by``, ``spec.table``) takes
``Change(new, old)`` records from :mod:`kspark_server.operators.table_group_by`: it
subtracts ``old`` from the group's aggregate with the subtractor, then adds ``new``, as
Kafka Streams' ``KTableAggregate`` and ``KTableReduce`` do; not windowed.

A cogrouped aggregation (``spec.cogroup``, KIP-150) takes the records of several grouped
streams, each tagged with its input (``ks_input``) and its value in its own column: one
entry per key (or window, or session) for all of them, each record folded in by its own
input's aggregator, in the task's processing order across the inputs.

Examples
--------
>>> _window_key(("EUR", 60_000), [60_000, 3, 61_000, None, None], 60_000)
{'key': 'EUR', 'window': {'start': 60000, 'end': 120000}}
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from kspark_server import codec, stateenc
from kspark_server.operators.base import Batch, Emitter, TaskProcessor
from kspark_server.operators.sliding import SlidingBatch, closed_window
from kspark_server.spec import AggregateSpec, Change, JsonSpec, PrimSpec, RecordSpec
from kspark_server.windows import windows_for

__all__ = ["AggregateProcessor"]

_MISSING = object()


def _window_key(sk: Any, entry: list[Any], size: int) -> dict[str, Any]:
    """The output key cell of a windowed entry: ``Windowed`` as its struct."""
    key, start = sk
    if len(entry) > 3 and entry[3] is not None:
        key = entry[3]
    return {"key": key, "window": {"start": int(start), "end": int(start) + size}}


class _AggEmitter(Emitter):
    """Output rows of an aggregation: rows of the batch with a new key, value and
    timestamp, and final results of windows whose last update came in an earlier batch
    (suppress), built from the record context kept in their entries."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[Any] = []
        self.ts: list[int] = []
        self.replace_key = False

    def row(self, i: int, key: Any, value: Any, ts: int) -> None:
        self.take(i, value)
        self.keys.append(key)
        self.ts.append(ts)

    def new_columns(self) -> dict[str, list[Any]]:
        cols: dict[str, list[Any]] = {"value": self.values, "timestamp": self.ts}
        if self.replace_key:
            cols["key"] = self.keys
        return cols


class AggregateProcessor(TaskProcessor):
    """``count``, ``reduce`` and ``aggregate``, windowed or not (see the module)."""

    new_value = True
    #: whether ``count`` (not windowed, or tumbling) runs batch-wise in numpy; tests turn
    #: it off to check it against the record-by-record path
    vectorized = True
    spec: AggregateSpec

    def setup(self) -> None:
        s = self.spec
        self.op = s.op
        self.size = s.window_size_ms
        self.advance = s.window_advance_ms
        self.grace = s.grace_ms
        self.windowed = self.size > 0
        self.gap = s.session_gap_ms
        self.session = self.gap > 0
        self.suppress = s.suppress
        self.sliding = s.sliding
        self.retention = s.retention_ms
        #: sliding windows: a window stays while its start is at most this long before
        #: stream time minus grace (three time differences: a record that is not too late
        #: reads windows from two before its own time; or the retention)
        self.keep_for = max(3 * self.size, self.retention - self.grace - 1)
        #: session windows: a session stays while its end is at most this long before
        #: stream time (gap plus grace: it may still take records; or the retention)
        self.session_keep = max(self.gap + self.grace, self.retention - 1)
        #: a grouped table's changes: subtract the old value, then add the new
        self.table = s.table
        if self.table and isinstance(s.input.value, RecordSpec):
            # a Change's fields, each decoded on its own: a Change that travels as JSON
            # text leaves out a None field (Spark's to_json drops null fields)
            self.change_dec = codec.decoder(dict(s.input.value.fields)["new"], nested=True)
        # windows expire by their start, a key's sessions by their latest end, through the
        # local store's time index
        self.time_indexed = self.windowed or self.session
        self.int_values = _integral(s.input.value)
        self.int_keys = _integral(s.input.key)
        self.kdec = codec.decoder(s.input.key)
        # a record key's state key (a tuple) is not its column value: windows keep both
        self.keep_key = not isinstance(s.input.key, PrimSpec | JsonSpec)
        self.vdec = codec.decoder(s.input.value)
        #: a cogrouped aggregation: each input's value column, decoder and aggregator
        self.cogroup = [
            ("value" if j == 0 else f"ks_value{j}", codec.decoder(c.value), c.aggregator)
            for j, c in enumerate(s.cogroup)
        ]
        adec = codec.decoder(s.output.value)
        aenc = codec.encoder(s.output.value, "aggregate")
        if s.packed.out:
            self.adec: Any = lambda x: adec(json.loads(x))
            self.aenc: Any = lambda x: None if x is None else json.dumps(aenc(x))
        else:
            self.adec, self.aenc = adec, aenc
        self._local: Any = None

    def emitter(self) -> Emitter:
        out = _AggEmitter()
        out.replace_key = self.windowed or self.session
        return out

    # -- which entries a batch reads --------------------------------------------------

    def _partial(self, local: Any, batch: Batch | None) -> Any:
        self._local = local
        return super()._partial(local, batch)

    def _keys(self, batch: Batch) -> list[Any]:
        """The batch's keys; pandas holds an integer column with nulls as floats: read
        them back as ints."""
        if self.int_keys:
            return [k if k is None or type(k) is int else int(k) for k in batch.keys]
        return batch.keys

    def _values(self, batch: Batch) -> list[Any]:
        """The batch's values, integers as ints (see :meth:`_keys`); cogrouped: each as
        ``(input, value)``, whose aggregator takes it even when the value is null."""
        if self.cogroup:
            columns = [batch.col(c) for c, _, _ in self.cogroup]
            return [(j, columns[j][i]) for i, j in enumerate(batch.col("ks_input"))]
        values = batch.col("value")
        if self.int_values:
            return [v if v is None or type(v) is int else int(v) for v in values]
        return values

    def keys(self, st: Any, batch: Batch) -> list[Any]:
        found: set[Any] = set()
        keys = self._keys(batch)
        if not self.windowed or self.sliding:  # per key: its sessions or sliding windows
            found = {_hashable(k) for k in keys if k is not None}
            if self.session and self._local is not None and batch.n:
                # the keys with a session that leaves the store in this batch (each
                # entry's index time is its earliest session's end)
                t = st["stream_time"]
                last = max(batch.ts) if t is None else max(t, max(batch.ts))
                leaving = self._local.keys_before(last - self.session_keep)
                found.update(stateenc.unpack(k) for k in leaving)
            if self.sliding and self.suppress and self._local is not None and batch.n:
                # the keys with a window that closes in this batch (each entry's index
                # time is its earliest open window's start)
                t = st["stream_time"]
                last = max(batch.ts) if t is None else max(t, max(batch.ts))
                closing = self._local.keys_before(last - self.grace - self.size)
                found.update(stateenc.unpack(k) for k in closing)
            return list(found)
        size, advance = self.size, self.advance
        for k, ts in zip(keys, batch.ts, strict=True):
            if k is None:
                continue
            hk = _hashable(k)
            for start in windows_for(ts, size, advance):
                found.add((hk, start))
        if self.suppress and self._local is not None and batch.n:
            # the windows that close in this batch, wherever their last record came from:
            # each emits its final result now
            t = st["stream_time"]
            last = max(batch.ts) if t is None else max(t, max(batch.ts))
            closing = self._local.keys_before(last - self.grace - self.size + 1)
            found.update(stateenc.unpack(k) for k in closing)
        return list(found)

    def time_of(self, entry: Any) -> int:
        return int(entry[0][0])

    def expire_before(self, st: Any) -> int | None:
        t = st["stream_time"]
        if self.session and t is not None:
            # the batch has removed the sessions that end before this from the entries it
            # loaded (every entry whose earliest end is before it): what is left is only
            # an entry of a layout whose index time was its latest end, wholly past
            return int(t) - self.session_keep
        if not self.windowed or t is None:
            return None
        if self.sliding:
            # an entry's index time is its earliest open window's start (emitting on
            # close) or its latest window's start plus how long windows stay, less the
            # time difference: below this, every window of the entry is past use
            return int(t) - self.grace - self.size
        if self.retention:
            # closed windows stay for the store's retention, from their start
            return int(t) - self.retention + 1
        # a window [start, start + size) takes no record once stream time reaches its end
        # plus grace: then it is gone (retention = size + grace)
        return int(t) - self.grace - self.size + 1

    # -- the batch ----------------------------------------------------------------------

    def process(self, st: Any, batch: Batch, task: int, out: Emitter) -> None:
        assert isinstance(out, _AggEmitter)
        if self.cogroup:
            _own_values(batch, [c for c, _, _ in self.cogroup])
        if self.session:
            self._process_sessions(st, batch, task, out)
            return
        if self.sliding:
            # a module-level import, not one here: the operator shipped by value takes
            # SlidingBatch with it, and the workers need not have kspark_server installed
            SlidingBatch(self, st, batch, task, out).run()
            return
        table: dict[Any, Any] = st["table"]
        khash: dict[Any, int] = st["hash"]
        touched = self.touched
        task_id = f"{self.guard.subtopology}_{task}"
        drop = self.guard.drop
        processor = self.processor
        stream_time = prior = st["stream_time"]
        keys, values, tss, hashes = self._keys(batch), self._values(batch), batch.ts, batch.hashes
        # per changed key (or window): the position of its last update in this batch
        last: dict[Any, int] = {}
        objs: dict[Any, Any] = {}
        windowed, size, advance, grace = self.windowed, self.size, self.advance, self.grace
        ctx_cols = (
            [batch.col(c) for c in ("topic", "partition", "offset", "ks_seq", "ks_sub")]
            if self.suppress
            else None
        )
        fast = (
            self.vectorized
            and self.op == "count"
            and not self.table
            and not self.suppress
            and (not windowed or advance == size)
            and (batch.n == 0 or min(tss) >= 0)
        )
        if fast:
            stream_time = self._count_batch(st, batch, keys, values, last, task_id)
        for i in range(0 if fast else batch.n):
            ts = tss[i]
            if stream_time is None or ts > stream_time:
                stream_time = ts
            key = keys[i]
            value = values[i]
            if self.cogroup and value[1] is None and not windowed:
                value = None
            if key is None or (value is None and not windowed):
                # Kafka Streams skips (and counts) a record with a null key; a record with
                # a null value too, except in a windowed aggregation
                drop(processor, task_id, "null-key" if key is None else "null-value", batch.row(i))
                continue
            hk = _hashable(key)
            # the entries the record updates: its key's, or its windows' (with the window
            # start, the key's column value and, suppressed, the record context)
            targets: list[tuple[Any, Any]] = [] if windowed else [(hk, None)]
            dead_lettered = False
            for start in windows_for(ts, size, advance) if windowed else ():
                if start + size <= stream_time - grace:
                    # the window has closed: too late for it (counted once per window, as
                    # Kafka Streams does; dead-lettered once per record)
                    drop(processor, task_id, "late-record", None if dead_lettered else batch.row(i))
                    dead_lettered = True
                    continue
                ctx = None if ctx_cols is None else [c[i] for c in ctx_cols]
                kc = codec.plain(key) if self.keep_key else None
                targets.append(((hk, start), (start, kc, ctx)))
            for sk, window in targets:
                if self._update(sk, i, key, value, ts, window, table, objs, batch):
                    khash[sk] = hashes[i]
                    touched.add(sk)
                    last[sk] = i
        st["stream_time"] = stream_time
        if self.suppress:
            self._emit_closed(st, out, prior)
            return
        pos = 1 if windowed else 0
        for sk, i in sorted(last.items(), key=lambda kv: kv[1]):
            entry = table.get(sk)
            if entry is None:  # the aggregate became None: a tombstone
                out.row(i, _window_key(sk, [], size) if windowed else None, None, tss[i])
            else:
                out.row(
                    i,
                    _window_key(sk, entry, size) if windowed else None,
                    entry[pos],
                    int(entry[pos + 1]),
                )

    def _count_batch(
        self,
        st: Any,
        batch: Batch,
        keys: list[Any],
        values: list[Any],
        last: dict[Any, int],
        task_id: str,
    ) -> Any:
        """``count``, not windowed or over tumbling windows, for a whole batch at once: the
        same result as record by record (no user function runs), with the per-record work
        in numpy. Returns the new stream time."""
        n = batch.n
        ts = np.asarray(batch.ts, dtype="int64")
        prior = st["stream_time"]
        run = np.maximum.accumulate(ts) if n else ts
        if prior is not None and n:
            run = np.maximum(run, prior)
        stream_time = int(run[-1]) if n else prior
        key_ok = np.fromiter((k is not None for k in keys), dtype=bool, count=n)
        ok = key_ok.copy()
        if not self.windowed:
            ok &= np.fromiter((v is not None for v in values), dtype=bool, count=n)
        idx = np.flatnonzero(ok)
        null_keys = int(n - key_ok.sum())
        dropped = {"null-key": null_keys, "null-value": n - len(idx) - null_keys}
        if self.guard.dead_letter_dropped and len(idx) < n:
            # each record dropped for its null key or value to the dead-letter queue (which
            # counts it too), as the record-by-record path sends it
            for j in np.flatnonzero(~ok).tolist():
                reason = "null-key" if keys[j] is None else "null-value"
                self.guard.drop(self.processor, task_id, reason, batch.row(j))
            dropped = {}
        hks = [_hashable(keys[i]) for i in idx.tolist()]
        starts: list[int] = []
        if self.windowed:
            size = self.size
            all_starts = (ts[idx] // size) * size
            # by the stream time as it was at each record: too late for its window?
            late = all_starts + size <= run[idx] - self.grace
            if late.any():
                if self.guard.dead_letter_dropped:
                    # each late record to the dead-letter queue (which counts it too)
                    for j in idx[late].tolist():
                        self.guard.drop(self.processor, task_id, "late-record", batch.row(j))
                else:
                    dropped["late-record"] = int(late.sum())
                keep = np.flatnonzero(~late)
                idx, all_starts = idx[keep], all_starts[keep]
                hks = [hks[j] for j in keep.tolist()]
            starts = all_starts.tolist()
            sks: list[Any] = list(zip(hks, starts, strict=True))
        else:
            sks = hks
        for reason, count in dropped.items():
            if count:
                at = (self.processor, task_id, reason)
                self.guard.dropped[at] = self.guard.dropped.get(at, 0) + count
        if not sks:
            return stream_time
        pos: dict[Any, int] = {}
        codes = np.fromiter(
            (pos.setdefault(k, len(pos)) for k in sks), dtype="int64", count=len(sks)
        )
        m = len(pos)
        counts = np.bincount(codes, minlength=m).tolist()
        last_i = np.full(m, -1, dtype="int64")
        np.maximum.at(last_i, codes, idx)
        newest = np.full(m, np.iinfo("int64").min, dtype="int64")
        np.maximum.at(newest, codes, ts[idx])
        table, khash, touched, hashes = st["table"], st["hash"], self.touched, batch.hashes
        for sk, c, li, t in zip(pos, counts, last_i.tolist(), newest.tolist(), strict=True):
            entry = table.get(sk)
            if self.windowed:
                kc = codec.plain(keys[li]) if self.keep_key else None
                if entry is None:
                    table[sk] = [sk[1], c, t, kc, None]
                else:
                    table[sk] = [sk[1], int(entry[1]) + c, max(t, int(entry[2])), kc, None]
            elif entry is None:
                table[sk] = [c, t]
            else:
                table[sk] = [int(entry[0]) + c, max(t, int(entry[1]))]
            khash[sk] = hashes[li]
            touched.add(sk)
            last[sk] = li
        return stream_time

    def _process_sessions(self, st: Any, batch: Batch, task: int, out: _AggEmitter) -> None:
        """Session windows, as Kafka Streams' ``KStreamSessionWindowAggregate``: a record
        joins every session of its key within the gap, which merge into one.

        A key's entry is ``[earliest end, sessions, key]``, each session ``[start, end,
        aggregate, timestamp]`` (start and end both included), sorted by start.

        A record merges only with the sessions that can still take records (ending no
        more than gap plus grace before stream time); the store keeps the others for its
        retention, for queries only, so the retention never changes what is emitted. At
        the end of the batch, the sessions past the retention leave the entries loaded.
        """
        table: dict[Any, Any] = st["table"]
        khash: dict[Any, int] = st["hash"]
        task_id = f"{self.guard.subtopology}_{task}"
        gap, grace = self.gap, self.grace
        stream_time = st["stream_time"]
        keys, values, tss, hashes = self._keys(batch), self._values(batch), batch.ts, batch.hashes
        before = {(hk, int(sess[0]), int(sess[1])) for hk, e in table.items() for sess in e[1]}
        # (key, start, end) -> position of the record that last made or removed it
        changed: dict[Any, int] = {}
        expired: dict[Any, Any] = {}
        for i in range(batch.n):
            ts = tss[i]
            if stream_time is None or ts > stream_time:
                stream_time = ts
            key = keys[i]
            if key is None:
                self.guard.drop(self.processor, task_id, "null-key", batch.row(i))
                continue
            hk = _hashable(key)
            entry = table.get(hk)
            # a session that ended more than gap plus grace before stream time takes no
            # record (record by record, so whatever the micro-batches), though the store
            # may keep it for its retention
            alive = max(stream_time - grace - gap, ts - gap)
            sessions: list[Any] = [] if entry is None else list(entry[1])
            found = [x for x in sessions if int(x[1]) >= alive and int(x[0]) <= ts + gap]
            start = min([ts, *(int(x[0]) for x in found)])
            end = max([ts, *(int(x[1]) for x in found)])
            if end < stream_time - grace:
                # the merged session would have closed: too late
                self.guard.drop(self.processor, task_id, "late-record", batch.row(i))
                continue
            decode = None if self.op == "count" else self.adec
            ok, res = self._fold([x[2] for x in found], key, values[i], batch.row(i), decode)
            if not ok:
                continue
            obj, cell = res
            rest = [x for x in sessions if x not in found]
            for x in found:
                changed[(hk, int(x[0]), int(x[1]))] = i
            if obj is not None:
                newest = max([ts, *(int(x[3]) for x in found)])
                rest.append([start, end, cell, newest])
                changed[(hk, start, end)] = i
            rest.sort(key=lambda x: int(x[0]))
            kc = codec.plain(key) if self.keep_key else None
            if rest:
                table[hk] = [min(int(x[1]) for x in rest), rest, kc]
            else:
                table.pop(hk, None)
            khash[hk] = hashes[i]
            self.touched.add(hk)
        st["stream_time"] = stream_time
        if stream_time is not None:
            self._trim_sessions(table, int(stream_time) - self.session_keep, expired)
        now = {(hk, int(x[0]), int(x[1])): (x, e[2]) for hk, e in table.items() for x in e[1]}
        for sk, i in sorted(changed.items(), key=lambda kv: kv[1]):
            hk, start, end = sk
            got = now.get(sk)
            if got is None and sk in expired:
                got = (expired[sk], table.get(hk, [None, None, None])[2])
            if got is None and sk not in before:
                continue  # made and merged away within the batch: never seen outside
            kc = got[1] if got is not None else None
            wkey = {"key": hk if kc is None else kc, "window": {"start": start, "end": end}}
            if got is None:
                out.row(i, wkey, None, tss[i])
            else:
                out.row(i, wkey, got[0][2], int(got[0][3]))

    def _trim_sessions(self, table: dict[Any, Any], bound: int, expired: dict[Any, Any]) -> None:
        """Remove the sessions that end before ``bound`` from the entries loaded; each
        goes into ``expired`` (its last value stands: emitted if this batch made it)."""
        for hk, e in list(table.items()):
            if int(e[0]) >= bound:
                continue
            keep = []
            for x in e[1]:
                if int(x[1]) < bound:
                    expired[(hk, int(x[0]), int(x[1]))] = x
                else:
                    keep.append(x)
            if keep:
                table[hk] = [min(int(x[1]) for x in keep), keep, e[2]]
            else:
                del table[hk]
            self.touched.add(hk)

    def _fold(
        self, prior: list[Any], key: Any, value: Any, row: Any, decode: Any = None
    ) -> tuple[bool, Any]:
        """``(ok, (aggregate, cell))``: the aggregates ``prior`` (of the merged sessions,
        or the window's or key's one so far; cells, when ``decode`` reads them) with record
        ``(key, value)`` applied. Not ok if the user's function failed: the processing
        exception handler has had the record, with its key and value."""
        if self.op == "count":
            n = sum(int(x) for x in prior) + 1
            return True, (n, n)
        k = self.kdec(key)
        spec, aenc = self.spec, self.aenc
        aggregator = spec.aggregator
        if self.cogroup and value is not None:
            j, cell = value
            _, dec, aggregator = self.cogroup[j]
            v = None if cell is None else dec(cell)
        else:
            v = None if value is None else self.vdec(self.unpack_value(value))

        def run(kk: Any, vv: Any) -> tuple[Any, Any]:
            aggs = prior if decode is None else [decode(x) for x in prior]
            if self.op == "reduce":
                reducer = spec.reducer
                assert reducer is not None
                agg: Any = None
                for a in [*aggs, vv]:
                    agg = a if agg is None else reducer(agg, a)
            else:
                initializer, merger = spec.initializer, spec.merger
                assert initializer is not None and aggregator is not None
                if merger is None:  # a key's or window's aggregate
                    agg = aggs[0] if aggs else initializer()
                else:  # merged sessions: each aggregate merged into a new one
                    agg = initializer()
                    for a in aggs:
                        agg = merger(kk, agg, a)
                agg = aggregator(kk, vv, agg)
            return agg, aenc(agg)

        return self.guard.call(self.processor, run, (k, v), row)

    def _fold_change(self, prior: Any, key: Any, value: Any, row: Any) -> tuple[bool, Any]:
        """``(ok, (aggregate, cell))``: the aggregate ``prior`` (None: the group has none)
        with a grouped table's change applied as Kafka Streams' ``KTableAggregate`` and
        ``KTableReduce`` apply it: the old value subtracted first (only from an existing
        aggregate), then the new one added (to ``initializer()``, or for ``reduce`` taken
        as it is, when there is no aggregate). Not ok if the user's function failed."""
        k = self.kdec(key)
        cell, dec = self.unpack_value(value), self.change_dec
        change = Change(new=dec(cell.get("new")), old=dec(cell.get("old")))
        spec, aenc, op = self.spec, self.aenc, self.op

        def run(kk: Any, ch: Any) -> tuple[Any, Any]:
            agg = prior
            if op == "count":
                if ch.old is not None and agg is not None:
                    agg = int(agg) - 1
                if ch.new is not None:
                    agg = (0 if agg is None else int(agg)) + 1
                return agg, agg
            subtractor = spec.subtractor
            assert subtractor is not None
            if ch.old is not None and agg is not None:
                agg = subtractor(agg, ch.old) if op == "reduce" else subtractor(kk, ch.old, agg)
            if ch.new is not None:
                if op == "reduce":
                    reducer = spec.reducer
                    assert reducer is not None
                    agg = ch.new if agg is None else reducer(agg, ch.new)
                else:
                    initializer, adder = spec.initializer, spec.aggregator
                    assert initializer is not None and adder is not None
                    agg = adder(kk, ch.new, initializer() if agg is None else agg)
            return agg, aenc(agg)

        return self.guard.call(self.processor, run, (k, change), row)

    def _update(
        self,
        sk: Any,
        i: int,
        key: Any,
        value: Any,
        ts: int,
        window: tuple[int, Any, Any] | None,
        table: dict[Any, Any],
        objs: dict[Any, Any],
        batch: Batch,
    ) -> bool:
        """Apply record ``i`` to the entry ``sk``; False if the user's function failed
        (the handler has had the record)."""
        entry = table.get(sk)
        pos = 0 if window is None else 1
        obj = objs.get(sk, _MISSING)
        if obj is _MISSING:
            obj = None if entry is None else entry[pos]
            if obj is not None and self.op != "count":
                obj = self.adec(obj)
        if self.table:
            ok, res = self._fold_change(obj, key, value, batch.row(i))
        else:
            ok, res = self._fold([] if obj is None else [obj], key, value, batch.row(i))
        if not ok:
            return False
        obj, cell = res
        objs[sk] = obj
        if obj is None:
            # Kafka Streams stores a null aggregate as a delete
            table.pop(sk, None)
            return True
        newest = ts if entry is None else max(ts, int(entry[pos + 1]))
        if window is None:
            table[sk] = [cell, newest]
        else:
            start, kc, ctx = window
            table[sk] = [start, cell, newest, kc, ctx]
        return True

    def _emit_closed(self, st: Any, out: _AggEmitter, prior: Any) -> None:
        """Suppress: the final result of every window that stream time has closed in
        this batch (``prior`` the stream time before it), in the order of their ends,
        each then removed from the state unless the store retains closed windows."""
        table: dict[Any, Any] = st["table"]
        close = st["stream_time"] - self.grace
        low = None if prior is None else int(prior) - self.grace
        size = self.size
        done = sorted(
            (
                (int(e[0]) + size, int(e[4][3] or 0), int(e[4][4] or 0), sk)
                for sk, e in table.items()
                if int(e[0]) + size <= close and (low is None or int(e[0]) + size > low)
            ),
            key=lambda t: t[:3],
        )
        for _, _, _, sk in done:
            if self.retention:
                e = table[sk]
            else:
                e = table.pop(sk)
                self.touched.add(sk)
            out.carry(closed_window(_window_key(sk, e, size), e[2], e[4]), e[1])


class _CogroupRecord:
    """A cogrouped record as the exception handlers and the dead-letter queue see it: its
    ``value`` is its own input's column (the first input's is null for the others)."""

    __slots__ = ("_column", "_row")

    def __init__(self, row: Any, column: str) -> None:
        self._row, self._column = row, column

    def get(self, name: str, default: Any = None) -> Any:
        return self._row.get(self._column if name == "value" else name, default)

    def __getitem__(self, name: str) -> Any:
        return self._row[self._column if name == "value" else name]


def _own_values(batch: Batch, columns: list[str]) -> None:
    """Give ``batch``'s records, as :meth:`Batch.row` makes them, their own input's value."""
    inputs = batch.col("ks_input")
    row = batch.row

    def own(i: int) -> Any:
        return _CogroupRecord(row(i), columns[inputs[i]])

    batch.row = own  # type: ignore[method-assign]


def _hashable(key: Any) -> Any:
    """A key as the state holds it (a string as it is, the fast and common case)."""
    return key if type(key) is str else codec.hashable(key)


def _integral(t: Any) -> bool:
    return isinstance(t, PrimSpec) and t.spark in ("long", "integer", "short", "byte")
