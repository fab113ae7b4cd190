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
        self.processor = s.processor
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
            # a text key is its own state key: the batch's keys as they are, no flags
            self._batch_ok = None
            self._batch_ids = batch.keys
            distinct: list[Any] = pc.unique(batch.table.column("key")).drop_null().to_pylist()
            return distinct
        idents = self._idents(batch)
        self._batch_ok = [ok for ok, _ in idents]
        self._batch_ids = [ident for _, ident in idents]
        return list({ident for ok, ident in idents if ok and ident is not None})

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
            try:  # a class's constructor or validator may refuse a stored value
                args = (self.kdec(key), self.vdec(self.unpack_value(values[i])))
            except Exception as exc:
                self.guard.decode_failed(self.processor, batch.row(i), exc, "VALUE")
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
        stream_time = st["stream_time"]
        interval = self.interval
        oks = self._batch_ok
        # positions in processing order: the batch's records that are forwarded, and
        # those whose entry they leave in the state (the last one per id is the entry)
        taken: list[int] = []
        stored: dict[Any, int] = {}
        take, get = taken.append, seen.get
        for i, (ident, ts) in enumerate(zip(self._batch_ids, batch.ts, strict=True)):
            if stream_time is None or ts > stream_time:
                stream_time = ts
            if oks is not None and not oks[i]:
                continue
            if ident is None:
                take(i)
                continue
            low = stream_time - interval
            prev = get(ident)
            if prev is not None and prev >= low and -interval <= prev - ts <= interval:
                continue
            take(i)
            if ts >= low:
                seen[ident] = ts
                stored[ident] = i
        out.take_all(taken)
        duplicates = len(batch.ts) - len(taken)
        if oks is not None:
            duplicates -= oks.count(False)
        hashes: dict[Any, int] = st["hash"]
        if stored:
            at = np.fromiter(stored.values(), dtype="int64", count=len(stored))
            hashes.update(zip(stored, batch.hash_array[at].tolist(), strict=True))
            self.touched.update(stored)
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
