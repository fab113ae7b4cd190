"""``KTable.suppress(Suppressed.until_time_limit(...))``: a table's updates held back, per
task of the table's key, as Kafka Streams' ``KTableSuppressProcessor`` does over its
``InMemoryTimeOrderedKeyValueChangeBuffer``.

Records are taken in the task's processing order
(:func:`kspark_server.operators.arrow.order`); stream time is the largest timestamp the
task has seen, advanced record by record. For each update (a tombstone too):

1. the update goes into the buffer: a key not buffered takes the update's timestamp as
   its *buffer time*; a key already buffered keeps its buffer time (the oldest buffered
   update's) and its update is replaced by the new one, timestamp and headers included;
2. every buffered key whose buffer time is at most ``stream time - time limit`` is
   emitted, oldest buffer time first (then by the key's MessagePack bytes), with its
   latest update's value, timestamp and headers;
3. if the buffer then holds more than ``max_records`` keys or more than ``max_bytes``
   bytes, it emits its oldest keys until it fits (``emit``), or stops the app
   (``shut_down``) with :class:`SuppressionBufferFull`.

A time limit of zero therefore emits every update at once. Stream time only moves with
the records of the task, so a key waits until a later record of its task arrives.

A buffered update's size is its key's and value's MessagePack bytes, its headers' keys
and values, and 24 bytes for its buffer time, timestamp and offset.

An emitted record goes out as one queue per task (topic: the processor, partition: the
task), at the largest source position seen so far in the batch, numbered in emission
order, as the table-table join's results are, so that whoever reads it keeps its order.

State: per key, its buffered update (:data:`_BTIME`, ...) in the executor-local store,
with a time index of the buffer times; the scalars hold stream time and the buffer's
bytes. A batch loads the keys its records touch, the keys whose buffer time its last
stream time passes, and, for a bounded buffer, the oldest keys it might have to evict.
"""

from __future__ import annotations

import heapq
from typing import Any

from kspark_server import codec, stateenc
from kspark_server.localstore import TaskStore
from kspark_server.operators.base import Batch, Emitter, TaskProcessor
from kspark_server.spec import SuppressSpec

__all__ = ["SuppressProcessor", "SuppressionBufferFull", "record_size"]

# a buffered update: [buffer time, key (as it travels), value (as it travels), timestamp,
# headers, offset, size in bytes]
_BTIME, _KEY, _VALUE, _TS, _HEADERS, _OFFSET, _SIZE = range(7)
_LOW, _HIGH = -(1 << 63), (1 << 63) - 1
#: bytes of a buffered update besides its key, value and headers: buffer time,
#: timestamp and offset
FIXED_BYTES = 24


class SuppressionBufferFull(RuntimeError):
    """A suppression's buffer passed its bound with ``should_shut_down_when_full``."""


def record_size(key_bytes: bytes, value: Any, headers: Any) -> int:
    """The bytes a buffered update counts for (see the module).

    >>> record_size(stateenc.pack("k"), "v", [{"key": "h", "value": b"xy"}])
    31
    """
    size = FIXED_BYTES + len(key_bytes) + len(stateenc.pack(value))
    for h in headers or ():
        size += len(str(h.get("key") or "").encode()) + len(h.get("value") or b"")
    return size


def _clamp(t: int) -> int:
    return min(max(t, _LOW), _HIGH)


class _QueueEmitter(Emitter):
    """Carried records only: every output record comes from the buffer."""

    def __init__(self) -> None:
        super().__init__()
        self.emitted = 0


class SuppressProcessor(TaskProcessor):
    """Kafka Streams' ``KTableSuppressProcessor`` with a time limit (see the module)."""

    spec: SuppressSpec
    emitter_class = _QueueEmitter
    time_indexed = True

    def setup(self) -> None:
        s = self.spec
        self.limit = s.time_limit_ms
        self.max_records = s.max_records
        self.max_bytes = s.max_bytes
        self.shut_down = s.when_full == "shut_down"
        self._local: TaskStore | None = None
        self._count = 0

    def _partial(self, local: TaskStore, batch: Batch | None) -> Any:
        self._local = local
        self._count = local.count()
        return super()._partial(local, batch)

    def time_of(self, entry: Any) -> int:
        return int(entry[0][_BTIME])

    # -- which keys a batch loads ------------------------------------------------------

    def keys(self, st: Any, batch: Batch) -> list[Any]:
        found = batch.distinct_keys()
        local = self._local
        if local is None or not batch.n:
            return list(found)
        unpack = stateenc.unpack
        if st.get("bytes") is None:  # after a rescale: count this task's share again
            st["bytes"] = sum(int(unpack(e)[0][_SIZE]) for _, e in local.pairs())
        final = max(batch.ts)
        if st["stream_time"] is not None:
            final = max(final, st["stream_time"])
        # the keys whose buffer time the batch's last stream time passes
        found.update(unpack(kb) for kb in local.due(_clamp(final - self.limit + 1)))
        if self.max_records is not None or self.max_bytes is not None:
            found.update(self._evictable(st, batch, local, final))
        return list(found)

    def _evictable(self, st: Any, batch: Batch, local: TaskStore, final: int) -> set[Any]:
        """The oldest keys that a full buffer might evict during the batch.

        Every eviction takes the oldest key, so the keys the batch evicts from the earlier
        buffer are its oldest ones. A full buffer evicts no more keys than the batch adds,
        beyond what it held over its bounds already, nor more bytes, but one key; so
        the oldest keys up to that count and those bytes, and every key of the same
        buffer time as the last of them, are enough."""
        n = batch.n
        records = self._count
        held = st.get("bytes")
        over_records = 0 if self.max_records is None else max(0, records - self.max_records)
        need_records = n + over_records + 1
        need_bytes = -1
        if self.max_bytes is not None:
            values = batch.col("value")
            headers = batch.col("headers")
            pack, hashable = stateenc.pack, codec.hashable
            added = 0
            for i, k in enumerate(batch.keys):
                if k is not None:
                    hk = k if type(k) is str else hashable(k)
                    added += record_size(pack(hk), values[i], headers[i])
            over = 0 if held is None else max(0, int(held) - self.max_bytes)
            need_bytes = added + over
        limit = max(64, need_records)
        while True:
            oldest = local.oldest(limit)
            count, size, last = 0, 0, None
            got = local.get_many([kb for _, kb in oldest])
            for (t, _), raw in zip(oldest, got, strict=True):
                if raw is None:
                    continue
                if t <= final - self.limit:
                    continue  # due anyway
                count += 1
                size += int(stateenc.unpack(raw)[0][_SIZE])
                last = t
                if count >= need_records and size > need_bytes:
                    break
            else:
                if len(oldest) >= limit:  # more keys than read: read more
                    limit *= 4
                    continue
            break
        if last is None:
            return set()
        unpack = stateenc.unpack
        return {unpack(kb) for kb in local.due(_clamp(last + 1))}

    # -- the buffer --------------------------------------------------------------------

    def process(self, st: Any, batch: Batch, task: int, out: Emitter) -> None:
        assert isinstance(out, _QueueEmitter)
        table: dict[Any, list[Any]] = st["table"]
        khash: dict[Any, int] = st["hash"]
        touched = self.touched
        pack, hashable, plain = stateenc.pack, codec.hashable, codec.plain
        size_now: int = int(st["bytes"] or 0)
        count = self._count
        # the buffer's keys in memory, by (buffer time, key bytes); a key evicted and
        # buffered again may leave a stale item, skipped when met
        heap: list[tuple[int, bytes, Any]] = [(e[_BTIME], pack(hk), hk) for hk, e in table.items()]
        heapq.heapify(heap)
        values = batch.col("value")
        headers = batch.col("headers")
        offsets = batch.col("offset")
        keys, hashes = batch.keys, batch.hashes
        subtask = f"{self.guard.subtopology}_{task}"
        limit, max_records, max_bytes = self.limit, self.max_records, self.max_bytes

        def evict(position: int) -> None:
            nonlocal size_now, count
            while heap:
                bt, _, hk = heapq.heappop(heap)
                e = table.get(hk)
                if e is None or e[_BTIME] != bt:
                    continue
                del table[hk]
                khash.pop(hk, None)
                touched.add(hk)
                size_now -= int(e[_SIZE])
                count -= 1
                self._emit(out, e, position, task)
                return
            raise AssertionError(f"{self.processor}: the buffer's oldest key was not loaded")

        for i, ts, position in batch.walk(st):
            key = keys[i]
            if key is None:
                self.guard.drop(self.processor, subtask, "null-key", batch.row(i))
                continue
            hk = key if type(key) is str else hashable(key)
            value = values[i]
            if value is not None:
                value = plain(value)  # kept in state as it travels
            kb = pack(hk)
            size = record_size(kb, value, headers[i])
            old = table.get(hk)
            if old is None:
                bt = ts
                count += 1
                heapq.heappush(heap, (bt, kb, hk))
            else:
                bt = old[_BTIME]
                size_now -= int(old[_SIZE])
            table[hk] = [bt, plain(key), value, ts, headers[i], offsets[i], size]
            khash[hk] = hashes[i]
            touched.add(hk)
            size_now += size
            # the keys whose time has come
            expiry = st["stream_time"] - limit
            while heap and heap[0][0] <= expiry:
                top = heap[0]
                e = table.get(top[2])
                if e is None or e[_BTIME] != top[0]:
                    heapq.heappop(heap)
                    continue
                evict(position)
            over = (max_records is not None and count > max_records) or (
                max_bytes is not None and size_now > max_bytes
            )
            if over and self.shut_down:
                raise SuppressionBufferFull(
                    f"{self.processor}: the suppression buffer of task {subtask} exceeded "
                    f"its capacity: {count}/{_bound(max_records)} records and "
                    f"{size_now}/{_bound(max_bytes)} bytes, at the record with key "
                    f"{key!r} and timestamp {ts} (topic {batch.row(i).get('topic')}, offset "
                    f"{offsets[i]}); give the buffer more room "
                    "(BufferConfig.max_records / max_bytes / unbounded()), a shorter time "
                    "limit, or .emit_early_when_full() to emit its oldest updates early"
                )
            while over:
                evict(position)
                over = (max_records is not None and count > max_records) or (
                    max_bytes is not None and size_now > max_bytes
                )
        st["bytes"] = size_now

    def _emit(self, out: _QueueEmitter, e: list[Any], position: int, task: int) -> None:
        record = {
            "key": e[_KEY],
            "timestamp": e[_TS],
            "headers": e[_HEADERS],
            "topic": self.processor,
            "partition": task,
            "offset": e[_OFFSET],
            "ks_seq": position,
            "ks_sub": out.emitted,
            "ks_side": None,
        }
        out.emitted += 1
        out.carry(record, e[_VALUE])


def _bound(b: int | None) -> str:
    return "unbounded" if b is None else str(b)
