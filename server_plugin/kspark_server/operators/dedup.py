"""KIP-655 deduplication (``KStream.deduplicate``), per task.

State: the task's stream time and, per id, the timestamp of the last forwarded record
(and its ``ks_hash``), expired through the local store's time index once stream time has
moved past the deduplication interval.
"""

from __future__ import annotations

from typing import Any

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
        self._batch_idents = self._idents(batch)
        return list({ident for ok, ident in self._batch_idents if ok and ident is not None})

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
        hashes: dict[Any, int] = st["hash"]
        stream_time = st["stream_time"]
        interval = self.interval
        duplicates = 0
        touched = self.touched
        for i, ((ok, ident), ts, h) in enumerate(
            zip(self._batch_idents, batch.ts, batch.hashes, strict=True)
        ):
            stream_time = ts if stream_time is None or ts > stream_time else stream_time
            if not ok:
                continue
            if ident is None:
                out.take(i)
                continue
            low = stream_time - interval
            prev = seen.get(ident)
            if prev is not None and prev >= low and abs(prev - ts) <= interval:
                duplicates += 1
                continue
            out.take(i)
            if ts >= low:
                seen[ident] = ts
                hashes[ident] = h
                touched.add(ident)
        if stream_time is not None:
            low = stream_time - interval
            for k in [k for k, t in seen.items() if t < low]:
                del seen[k]
                hashes.pop(k, None)
                touched.add(k)
        st["stream_time"] = stream_time
        self.duplicates += duplicates

    def extra_side(self, st: Any, task: int, entries: int) -> list[dict[str, Any]]:
        n, self.duplicates = self.duplicates, 0
        t = f"{self.guard.subtopology}_{task}"
        return [
            {"kind": SideKind.DUPLICATES, "processor": self.processor, "task": t, "count": n},
            {
                "kind": SideKind.STORE_ENTRIES,
                "processor": self.spec.store,
                "task": t,
                "count": entries,
            },
        ]
