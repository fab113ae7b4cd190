"""The stream-table join (``KStream.join/left_join`` of a table), per task.

Stream records and table updates arrive in one input, the table's rows tagged
``ks_jside == 1`` with their value in ``ks_tvalue``, and are taken in the task's
processing order (:func:`kspark_server.operators.arrow.order`). A latest-value table keeps
``{key: value}``; a versioned table keeps, per key, the sorted version timestamps and their
values and joins as of the stream record's time (KIP-889/914), buffering stream records
for the grace period (KIP-923). Without grace, a versioned table's batch is joined
columnar (:func:`asof_lookup`).

A stream-global-table join runs here too (``JoinSpec.global_table``): every record's
table key is then in ``ks_gkey`` (a stream record's from its key selector,
:mod:`kspark_server.joinkeys`), the records are grouped by its task, and ``key`` is the
stream record's own key, which the joiner and the output get.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from kspark_server import codec
from kspark_server.envelope import SideKind, side_row
from kspark_server.operators.arrow import ints, runs
from kspark_server.operators.base import Batch, Emitter, TaskProcessor, identity
from kspark_server.records import DictRecord, RecordView
from kspark_server.spec import JoinSpec
from kspark_server.versioned import VersionedStore

__all__ = ["JoinProcessor", "asof_lookup"]

#: what a join of one record returns when the exception handler took the record
_HANDLED = object()


def _key_codes(batch: Batch) -> tuple[Any, list[Any]]:
    """A code per record's key, in processing order (-1: None), and the keys (as state
    keys) by code. String keys are coded by Arrow; others through
    :func:`kspark_server.codec.hashable`."""
    column = batch.table.column("key")
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
        enc = column.combine_chunks().dictionary_encode()
        codes = np.asarray(pc.fill_null(enc.indices, -1).to_numpy(), dtype="int64")
        names: list[Any] = enc.dictionary.to_pylist()
        return codes[batch.pos], names
    hashable = codec.hashable
    of: dict[Any, int] = {}
    codes = np.fromiter(
        (
            -1 if k is None else of.setdefault(k if type(k) is str else hashable(k), len(of))
            for k in batch.keys
        ),
        dtype="int64",
        count=batch.n,
    )
    return codes, list(of)


def asof_lookup(
    p_code: np.ndarray[Any, Any],
    p_pos: np.ndarray[Any, Any],
    p_ts: np.ndarray[Any, Any],
    p_val: list[Any],
    loaded: list[tuple[int, Any]],
    q_code: np.ndarray[Any, Any],
    q_pos: np.ndarray[Any, Any],
    q_ts: np.ndarray[Any, Any],
) -> list[Any]:
    """Each stream record's table value as of its time, for a whole batch at once.

    A stream record ``(q_code, q_pos, q_ts)`` (key code, position in processing order,
    time) sees the loaded versions (``loaded``: ``(code, [timestamps, values])``, by
    code) and the batch's versions put before it: ``p_*``, sorted by code and, within a
    code, by position and (the caller checks) time. Its value is the version with the
    largest time ``<= q_ts``; at equal times the batch's (a later put replaces an
    earlier one). None: no version, or a tombstone.
    """
    nq = len(q_code)
    if not nq:
        return []

    def last_at_or_before(codes: np.ndarray[Any, Any], times: np.ndarray[Any, Any]) -> Any:
        # for each stream record, the index of the last entry (sorted by code, time) of its
        # code with a time <= its own; -1 where there is none
        both_code = np.concatenate((codes, q_code))
        kind = np.concatenate((np.zeros(len(codes), bool), np.ones(nq, bool)))
        order = np.lexsort((kind, np.concatenate((times, q_ts)), both_code))
        before = np.cumsum(~kind[order]) - 1
        idx = np.empty(nq, dtype="int64")
        idx[order[kind[order]] - len(codes)] = before[kind[order]]
        first = np.searchsorted(codes, q_code, side="left")
        return np.where(idx >= first, idx, -1)

    # the batch's versions: the last put before the record in processing order, and the
    # last with a time <= its own; times rise with position within a code, so the earlier
    # of the two is the newest version it can see
    by_ts = last_at_or_before(p_code, p_ts)
    width = int(max(p_pos.max(initial=0), q_pos.max(initial=0))) + 1
    by_pos = np.searchsorted(p_code * width + p_pos, q_code * width + q_pos, side="left") - 1
    first = np.searchsorted(p_code, q_code, side="left")
    b = np.minimum(by_ts, np.where(by_pos >= first, by_pos, -1))
    l_code: list[int] = []
    l_ts: list[int] = []
    l_val: list[Any] = []
    for c, (tss, vals) in loaded:
        l_code.extend([c] * len(tss))
        l_ts.extend(tss)
        l_val.extend(vals)
    lc, lt = np.asarray(l_code, dtype="int64"), np.asarray(l_ts, dtype="int64")
    li = last_at_or_before(lc, lt) if len(lc) else np.full(nq, -1)
    bt = np.where(b >= 0, p_ts[np.maximum(b, 0)], 0) if len(p_ts) else np.zeros(nq, "int64")
    lt_at = np.where(li >= 0, lt[np.maximum(li, 0)], 0) if len(lt) else np.zeros(nq, "int64")
    # a batch version at the same time as a loaded one replaced it
    use_b = ((b >= 0) & ((li < 0) | (bt >= lt_at))).tolist()
    return [
        p_val[i] if u else (l_val[j] if j >= 0 else None)
        for u, i, j in zip(use_b, b.tolist(), li.tolist(), strict=True)
    ]


class JoinProcessor(TaskProcessor):
    """Stream-table join. Rows with ``ks_jside == 1`` are table updates, others stream records.

    Latest-value tables keep ``{key: value}``. Versioned tables keep, per key, the sorted
    version timestamps and their values (None for a tombstone) and join as of the stream
    record's timestamp (KIP-889/914), buffering stream records for the grace period (KIP-923).
    """

    new_value = True
    spec: JoinSpec

    def setup(self) -> None:
        s = self.spec
        self.left = s.left
        self.versioned = s.versioned
        self.retention = s.history_retention_ms
        self.grace = s.grace_ms
        # the batch's cells are plain Python (parsed JSON text, Arrow's to_pylist)
        self.skdec = codec.decoder(s.stream.key, plain=True)
        self.svdec = codec.decoder(s.stream.value, plain=True)
        self.tvdec = codec.decoder(s.table.value, plain=True)
        self.venc = codec.encoder(s.output.value, "value")
        self.joiner = s.joiner
        self.with_key = s.joiner_with_key
        # a JSON-packed table value is stored as its text, and parsed only when joined
        self.unpack_table = msgspec.json.decode if s.packed.tvalue else identity
        self.store_plain = not s.packed.tvalue
        self.expired_puts = 0
        # a global-table join looks records up by the table key in ks_gkey (a stream
        # record's from its key selector) and keeps the stream record's own key
        self.global_table = s.global_table
        self.key_column = "ks_gkey" if s.global_table else "key"

    def keys(self, st: Any, batch: Batch) -> list[Any]:
        # the batch's keys (both sides) and those of stream records buffered for grace
        hashable = codec.hashable
        column = batch.table.column(self.key_column)
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            found = set(pc.unique(column).drop_null().to_pylist())
        else:
            keys = batch.col(self.key_column) if self.global_table else batch.keys
            found = {k if type(k) is str else hashable(k) for k in keys if k is not None}
        for r in st["buffer"]:
            k = r.get("key")
            if k is not None:
                found.add(k if type(k) is str else hashable(k))
        return list(found)

    def store(self, st: Any) -> VersionedStore:
        return VersionedStore(st["table"], self.retention)

    @staticmethod
    def _lookup(table: dict[Any, Any], store: VersionedStore | None, key: Any, ts: int) -> Any:
        """A stream record's table value (None: none, or a tombstone), by the KIP-914
        rules: a versioned table's as of ``ts``, a latest-value table's latest."""
        if key is None:
            return None
        hk = key if type(key) is str else codec.hashable(key)
        return table.get(hk) if store is None else store.value_at(hk, ts)

    def _join_one(self, row_of: Callable[[int], RecordView]) -> Callable[[int, Any, Any, Any], Any]:
        """The join of one stream record (its position, key, value and table value): the
        packed output value, or ``_HANDLED`` where the decoding or the joiner failed and
        the exception handler took the record (``row_of(position)``). One closure per
        batch, shared by the record-by-record, the columnar and the grace buffer's paths."""
        joiner, with_key, guard, processor = self.joiner, self.with_key, self.guard, self.processor
        skdec, svdec, tvdec, venc = self.skdec, self.svdec, self.tvdec, self.venc
        pack, unpack_value, unpack_table = self.pack_out, self.unpack_value, self.unpack_table

        def join_one(i: int, key: Any, value: Any, tv: Any) -> Any:
            origin = "KEY"
            try:  # a class's constructor or validator may refuse a stored value
                k = skdec(key)
                origin = "VALUE"
                v = svdec(unpack_value(value))
                t = None if tv is None else tvdec(unpack_table(tv))
            except Exception as exc:
                guard.decode_failed(processor, row_of(i), exc, origin)
                return _HANDLED
            try:
                return pack(venc(joiner(k, v, t) if with_key else joiner(v, t)))
            except Exception as exc:
                guard.on_error(processor, (k, v), row_of(i), exc)
                return _HANDLED

        return join_one

    def process(self, st: Any, batch: Batch, task: int, out: Emitter) -> None:
        if self.versioned and not self.grace and self._process_asof(st, batch, task, out):
            return
        jside = batch.col("ks_jside")
        values = batch.col("value")
        tvalues = batch.col("ks_tvalue")
        tss, hashes = batch.ts, batch.hashes
        # the table keys; and the stream records' own keys, which the joiner and the
        # output get (the same column but in a global-table join)
        own = batch.keys
        keys = batch.col("ks_gkey") if self.global_table else own
        global_table = self.global_table
        store = self.store(st) if self.versioned else None
        table = st["table"]
        khash: dict[Any, int] = st["hash"]
        touched = self.touched
        grace = self.grace
        stream_time = st["stream_time"]
        hashable, plain, store_plain = codec.hashable, codec.plain, self.store_plain
        left = self.left
        join_one = self._join_one(batch.row)
        for i in range(batch.n):
            ts = tss[i]
            if stream_time is None or ts > stream_time:
                stream_time = ts
            key = keys[i]
            if jside[i] == 1:
                if key is None:
                    # as Kafka Streams' table source: a table update without a key is dropped
                    self._drop(task, "null-key", batch, i, table=True)
                    continue
                hk = key if type(key) is str else hashable(key)
                tv = tvalues[i]
                tv = None if tv is None else (plain(tv) if store_plain else tv)
                khash[hk] = hashes[i]
                touched.add(hk)
                if store is None:
                    if tv is None:
                        table.pop(hk, None)
                    else:
                        table[hk] = tv
                elif not store.put(hk, tv, ts):
                    self.expired_puts += 1
                    self._drop(task, "expired-put", batch, i, table=True)
            elif values[i] is None or (key is None and not left):
                # Kafka Streams' stream-table join drops a stream record with a null value,
                # and an inner join one with a null key, and counts it (since KIP-962 a left
                # join calls the joiner for a null key, with a null table value)
                if values[i] is not None:
                    reason = "null-join-key" if global_table else "null-key"
                else:
                    reason = "null-value"
                self._drop(task, reason, batch, i)
            elif global_table and key is None and own[i] is not None:
                # a left join against a global table drops a record whose key selector
                # gave None, unless the record's own key is null too (KIP-962), as
                # Kafka Streams' KStreamKTableJoinProcessor does
                self._drop(task, "null-join-key", batch, i)
            elif grace > 0 and ts + grace > stream_time:
                st["buffer"].append(batch.row(i).to_dict([*batch.columns, "ks_hash", "ks_task"]))
            else:
                tv = self._lookup(table, store, key, ts)
                if tv is None and not left:
                    if store is not None and not store.in_retention(ts):
                        # too old to look up: the inner join drops it, and says so
                        self._drop(task, "expired-stream-record", batch, i)
                    continue
                res = join_one(i, own[i], values[i], tv)
                if res is not _HANDLED:
                    out.take(i, res)
            if grace > 0 and st["buffer"]:
                st["stream_time"] = stream_time
                self._flush(st, store, out, task)
        st["stream_time"] = stream_time
        if store is not None:
            store.expire(touched)
            data = store.state["data"]
            if len(khash) > len(data):
                for hk in [hk for hk in khash if hk not in data]:
                    del khash[hk]
        elif len(khash) > len(table):
            for hk in [hk for hk in khash if hk not in table]:
                del khash[hk]

    def _process_asof(self, st: Any, batch: Batch, task: int, out: Emitter) -> bool:
        """:meth:`process` for a versioned table without grace, columnar: every stream
        record's table value is found at once (:func:`asof_lookup`), then the joiner runs
        over the stream records in order, then the batch's versions go into the state.

        Returns False, having changed nothing, for a batch this does not cover (a table
        update without a key or older than the history retention, or one key's updates
        out of time order): :meth:`process` then takes it record by record."""
        table, pos = batch.table, batch.pos
        side = ints(table, "ks_jside", 0)[pos] == 1
        ts = batch.ts_array
        code, names = _key_codes(batch)
        puts = np.flatnonzero(side)
        loaded_time = st["table"]["time"]
        lowest = np.iinfo(np.int64).min
        # the store's observed stream time after each record (table updates move it)
        time = np.maximum.accumulate(np.where(side, ts, lowest))
        if loaded_time is not None:
            time = np.maximum(time, int(loaded_time))
        known = time > lowest
        bound = np.where(known, time, 0) - self.retention
        # the batch's versions, by key, in processing order: their times must rise
        p = puts[np.argsort(code[puts], kind="stable")]
        p_code, p_ts = code[p], ts[p]
        same_key = p_code[1:] == p_code[:-1]
        if (
            np.any(code[puts] < 0)
            or np.any(known[puts] & (ts[puts] < bound[puts]))
            or np.any(same_key & (p_ts[1:] < p_ts[:-1]))
        ):
            return False
        p_val = table.column("ks_tvalue").take(pa.array(pos[p])).to_pylist()
        if self.store_plain:
            p_val = [None if v is None else codec.plain(v) for v in p_val]
        data = st["table"]["data"]
        loaded = [(c, data[k]) for c, k in enumerate(names) if data.get(k)]
        stream = np.flatnonzero(~side)
        too_old = known & (ts < bound)
        # a record older than the history retention finds nothing (VersionedStore.value_at)
        keyed = np.flatnonzero((code[stream] >= 0) & ~too_old[stream])
        q = stream[keyed]
        tvs: list[Any] = [None] * len(stream)
        found = asof_lookup(p_code, p, p_ts, p_val, loaded, code[q], q, ts[q])
        for j, tv in zip(keyed.tolist(), found, strict=True):
            tvs[j] = tv
        self._join_stream(batch, task, out, stream, tvs, too_old[stream])
        # the batch's versions into the state, as VersionedStore.put leaves them: a second
        # put at a time replaces the first
        last = np.ones(len(p), dtype=bool)
        last[:-1] = ~(same_key & (p_ts[1:] == p_ts[:-1]))
        kept = np.flatnonzero(last).tolist()
        k_ts, k_val = p_ts[kept].tolist(), [p_val[j] for j in kept]
        k_code = p_code[kept]
        hashes = ints(table, "ks_hash", 0)[pos[p[kept]]].tolist()
        khash: dict[Any, int] = st["hash"]
        for c, a, b in runs(k_code):
            k = names[c]
            new_ts, new_val = k_ts[a:b], k_val[a:b]
            khash[k] = hashes[b - 1]
            old = data.get(k)
            if old is None:
                data[k] = (new_ts, new_val)
            elif not old[0] or old[0][-1] < new_ts[0]:
                old[0].extend(new_ts)
                old[1].extend(new_val)
            else:
                merged = dict(zip(old[0], old[1], strict=True))
                merged.update(zip(new_ts, new_val, strict=True))
                old[0][:] = sorted(merged)
                old[1][:] = [merged[t] for t in old[0]]
        self.touched.update(names[c] for c in np.unique(k_code).tolist())
        if len(puts):
            top = int(ts[puts].max())
            st["table"]["time"] = top if loaded_time is None else max(top, int(loaded_time))
        top_ts = int(ts.max())
        was = st["stream_time"]
        st["stream_time"] = top_ts if was is None else max(top_ts, was)
        self.store(st).expire(self.touched)
        if len(khash) > len(data):
            for hk in [hk for hk in khash if hk not in data]:
                del khash[hk]
        return True

    def _join_stream(
        self,
        batch: Batch,
        task: int,
        out: Emitter,
        stream: np.ndarray[Any, Any],
        tvs: list[Any],
        too_old: np.ndarray[Any, Any],
    ) -> None:
        """The joiner over the stream records at positions ``stream`` (in order), each with
        its table value ``tvs[j]``; ``too_old[j]``: older than the history retention."""
        rows = pa.array(batch.pos[stream])
        keys = batch.table.column("key").take(rows).to_pylist()
        values = batch.table.column("value").take(rows).to_pylist()
        left = self.left
        join_one = self._join_one(batch.row)
        old = too_old.tolist()
        taken, results = out.idx.append, out.values.append
        for i, key, value, tv, expired in zip(stream.tolist(), keys, values, tvs, old, strict=True):
            if value is None or (key is None and not left):
                self._drop(task, "null-value" if value is None else "null-key", batch, i)
                continue
            if tv is None and not left:
                if expired:
                    self._drop(task, "expired-stream-record", batch, i)
                continue
            res = join_one(i, key, value, tv)
            if res is not _HANDLED:
                taken(i)
                results(res)

    def _flush(self, st: Any, store: VersionedStore | None, out: Emitter, task: int) -> None:
        """Join the buffered stream records that the grace period no longer holds back."""
        limit = st["stream_time"] - self.grace
        ready = [r for r in st["buffer"] if int(r["timestamp"]) <= limit]
        if not ready:
            return
        st["buffer"] = [r for r in st["buffer"] if int(r["timestamp"]) > limit]
        ready.sort(key=lambda r: (int(r["timestamp"]), r["ks_seq"], r["ks_sub"]))
        decoders = self.decoders

        def row_of(j: int) -> RecordView:
            return DictRecord(ready[j], decoders)

        join_one = self._join_one(row_of)
        for j, r in enumerate(ready):
            ts = int(r["timestamp"])
            tv = self._lookup(st["table"], store, r["key"], ts)
            if tv is None and not self.left:
                if store is not None and not store.in_retention(ts):
                    row = row_of(j)
                    self.guard.drop(
                        self.processor,
                        f"{self.guard.subtopology}_{task}",
                        "expired-stream-record",
                        row,
                        (row.get("key"), r["value"]),
                    )
                continue
            res = join_one(j, r["key"], r["value"], tv)
            if res is not _HANDLED:
                out.carry(r, res)

    def _drop(self, task: int, reason: str, batch: Batch, i: int, table: bool = False) -> None:
        """Count record ``i``, dropped for ``reason`` (and dead-letter it, if configured);
        a table update's value is its ``ks_tvalue``."""
        row = batch.row(i) if self.guard.dead_letter_dropped else None
        record = None
        if row is not None:
            record = (row.get("key"), row.get("ks_tvalue" if table else "value"))
        self.guard.drop(self.processor, f"{self.guard.subtopology}_{task}", reason, row, record)

    def extra_side(self, st: Any, task: int, entries: int) -> list[dict[str, Any]]:
        n, self.expired_puts = self.expired_puts, 0
        rows = super().extra_side(st, task, entries)
        if n:
            t = f"{self.guard.subtopology}_{task}"
            rows.append(side_row(SideKind.EXPIRED_PUTS, self.processor, t, n))
        return rows
