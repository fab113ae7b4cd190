"""Stateful operators run per task with ``transformWithStateInPandas``.

Records are grouped by task (``ks_task``, the hash of the key modulo the app's number of
partitions), so one handler call sees a task's whole micro-batch. The task's state is one
pickled value per store, loaded once and saved once per batch: this cuts the round trips to
the JVM that dominate per-key designs (see docs/performance.md).

Within a task, records are taken in offset order per input partition, and across input
partitions by the smallest head timestamp, as Kafka Streams does.
"""

from __future__ import annotations

import heapq
import pickle
from collections.abc import Iterator
from typing import Any

import pandas as pd
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, StructField, StructType

from kspark_server import codec, handling
from kspark_server.spec import check_spec
from kspark_server.versioned import VersionedStore

_BLOB = StructType([StructField("blob", BinaryType(), True)])


def ordered(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Offset order within each (topic, partition); head-timestamp order across them."""
    queues: dict[tuple[Any, Any], list[dict[str, Any]]] = {}
    for r in records:
        queues.setdefault((r["topic"], r["partition"]), []).append(r)
    if len(queues) == 1:
        (only,) = queues.values()
        return sorted(only, key=lambda r: (r["ks_seq"], r["ks_sub"]))
    heads: list[tuple[Any, ...]] = []
    lists = []
    for i, q in enumerate(queues.values()):
        q.sort(key=lambda r: (r["ks_seq"], r["ks_sub"]))
        lists.append(q)
        heads.append((q[0]["timestamp"], q[0]["ks_seq"], q[0]["ks_sub"], i, 0))
    heapq.heapify(heads)
    out = []
    while heads:
        _, _, _, i, j = heapq.heappop(heads)
        out.append(lists[i][j])
        if j + 1 < len(lists[i]):
            r = lists[i][j + 1]
            heapq.heappush(heads, (r["timestamp"], r["ks_seq"], r["ks_sub"], i, j + 1))
    return out


class TaskProcessor(StatefulProcessor):
    """Base of per-task operators: load state, process the batch in order, save state."""

    def __init__(self, spec: dict[str, Any]) -> None:
        self.spec = check_spec(spec)
        self.columns = [f["name"] for f in _schema_fields(spec["output_schema"])]

    def init(self, handle: StatefulProcessorHandle) -> None:
        self.state = handle.getValueState(self.spec["store"], _BLOB)
        self.guard = handling.Guard.from_spec(self.spec)
        self.setup()

    def setup(self) -> None:
        """Build codecs; called once per worker."""

    def initial(self) -> Any:
        raise NotImplementedError

    def process(self, st: Any, records: list[dict[str, Any]], task: int) -> list[dict[str, Any]]:
        raise NotImplementedError

    def handleInputRows(self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any) -> Iterator[pd.DataFrame]:
        frames = [f for f in rows if len(f)]
        if not frames:
            return
        pdf = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
        records = pdf.to_dict("records")
        side = [r for r in records if r.get("ks_side") is not None]
        main = [r for r in records if r.get("ks_side") is None]
        blob = self.state.get() if self.state.exists() else None
        st = pickle.loads(blob[0]) if blob is not None else self.initial()
        out = self.process(st, ordered(main), int(key[0])) if main else []
        self.state.update((pickle.dumps(st, protocol=pickle.HIGHEST_PROTOCOL),))
        chunk = f"{self.spec['store']}:{key[0]}:{min((r['ks_seq'], r['ks_sub']) for r in main) if main else ''}"
        extra = self.extra_side(st, int(key[0]))
        for e in extra:
            e["chunk"] = chunk
        side_rows = side + [
            {"ks_side": handling.side_json(s)} for s in self.guard.side_rows(chunk) + extra
        ]
        all_rows = out + [{c: r.get(c) for c in self.columns} for r in side_rows]
        if all_rows:
            yield pd.DataFrame(all_rows, columns=self.columns)

    def extra_side(self, st: Any, task: int) -> list[dict[str, Any]]:
        return []

    def close(self) -> None:
        pass


def _schema_fields(schema_json: str) -> list[dict[str, Any]]:
    import json

    fields: list[dict[str, Any]] = json.loads(schema_json)["fields"]
    return fields


def _passthrough(r: dict[str, Any], columns: list[str]) -> dict[str, Any]:
    return {c: r.get(c) for c in columns}


class DedupProcessor(TaskProcessor):
    """KIP-655 deduplication. State: the task's stream time and, per id, the timestamp of
    the last forwarded record. Only one entry per id can be live (see docs/operators)."""

    def setup(self) -> None:
        s = self.spec
        self.mode = s["mode"]
        self.interval = int(s["interval_ms"])
        self.processor = s["processor"]
        self.id_selector = s.get("id_selector")
        self.kdec = codec.decoder(s["input"]["key"])
        self.vdec = codec.decoder(s["input"]["value"])
        self.duplicates = 0

    def initial(self) -> Any:
        return {"stream_time": None, "seen": {}}

    def _ident(self, r: dict[str, Any]) -> tuple[bool, Any]:
        if self.mode == "by_id":
            return True, r.get("ks_id")
        key = r["key"]
        if self.mode == "by_key":
            return True, None if key is None else codec.hashable(key)
        assert self.id_selector is not None
        ok, ident = self.guard.call(
            self.processor, self.id_selector, (self.kdec(key), self.vdec(r["value"])), r
        )
        if not ok:
            return False, None
        if key is None or ident is None:
            return True, None
        return True, (codec.hashable(key), codec.hashable(ident))

    def process(self, st: Any, records: list[dict[str, Any]], task: int) -> list[dict[str, Any]]:
        seen: dict[Any, int] = st["seen"]
        stream_time = st["stream_time"]
        interval = self.interval
        out = []
        for r in records:
            ts = int(r["timestamp"])
            stream_time = ts if stream_time is None or ts > stream_time else stream_time
            ok, ident = self._ident(r)
            if not ok:
                continue
            if ident is None:
                out.append(_passthrough(r, self.columns))
                continue
            low = stream_time - interval
            prev = seen.get(ident)
            if prev is not None and prev >= low and abs(prev - ts) <= interval:
                self.duplicates += 1
                continue
            out.append(_passthrough(r, self.columns))
            if ts >= low:
                seen[ident] = ts
        if stream_time is not None:
            low = stream_time - interval
            expired = [k for k, t in seen.items() if t < low]
            for k in expired:
                del seen[k]
        st["stream_time"] = stream_time
        return out

    def extra_side(self, st: Any, task: int) -> list[dict[str, Any]]:
        n, self.duplicates = self.duplicates, 0
        t = f"{self.guard.subtopology}_{task}"
        return [
            {"kind": "duplicates", "processor": self.processor, "task": t, "count": n},
            {"kind": "store_entries", "processor": self.spec["store"], "task": t, "count": len(st["seen"])},
        ]


class JoinProcessor(TaskProcessor):
    """Stream-table join. Rows with ``ks_jside == 1`` are table updates, others stream records.

    Latest-value tables keep ``{key: value}``. Versioned tables keep, per key, the sorted
    version timestamps and their values (None for a tombstone) and join as of the stream
    record's timestamp (KIP-889/914), buffering stream records for the grace period (KIP-923).
    """

    def setup(self) -> None:
        s = self.spec
        self.processor = s["processor"]
        self.left = bool(s["left"])
        self.versioned = bool(s["versioned"])
        self.retention = int(s["history_retention_ms"])
        self.grace = int(s["grace_ms"])
        self.skdec = codec.decoder(s["stream"]["key"])
        self.svdec = codec.decoder(s["stream"]["value"])
        self.tvdec = codec.decoder(s["table"]["value"])
        self.venc = codec.encoder(s["output"]["value"], "value")
        self.joiner = s["joiner"]
        self.with_key = bool(s["joiner_with_key"])
        self.expired_puts = 0

    def initial(self) -> Any:
        # stream_time: the task's (both sides), for grace; the versioned store keeps its own
        # observed stream time (table side), for history retention
        table: Any = VersionedStore.empty_state() if self.versioned else {}
        return {"stream_time": None, "table": table, "buffer": []}

    def store(self, st: Any) -> VersionedStore:
        return VersionedStore(st["table"], self.retention)

    def _emit(self, r: dict[str, Any], tv: Any) -> dict[str, Any] | None:
        k = self.skdec(r["key"])
        v = self.svdec(r["value"])
        t = None if tv is None else self.tvdec(tv)
        args = (k, v, t) if self.with_key else (v, t)
        ok, res = self.guard.call(
            self.processor, lambda *a: self.venc(self.joiner(*a)), args, r, record=(k, v)
        )
        if not ok:
            return None
        o = _passthrough(r, self.columns)
        o["value"] = res
        return o

    def _join_stream(self, st: Any, r: dict[str, Any], out: list[dict[str, Any]]) -> None:
        key = r["key"]
        if key is None:
            if self.left:
                o = self._emit(r, None)
                if o is not None:
                    out.append(o)
            return
        hk = codec.hashable(key)
        if self.versioned:
            store = self.store(st)
            ts = int(r["timestamp"])
            if not store.in_retention(ts):
                if not self.left:
                    return
                tv = None
            else:
                found = store.get(hk, as_of=ts)
                tv = None if found is None else found.value
        else:
            tv = st["table"].get(hk)
        if tv is None and not self.left:
            return
        o = self._emit(r, tv)
        if o is not None:
            out.append(o)

    def _put(self, st: Any, r: dict[str, Any]) -> None:
        key = r["key"]
        if key is None:
            return
        hk = codec.hashable(key)
        value = r.get("ks_tvalue")
        value = None if value is None else codec.plain(value)
        table = st["table"]
        if not self.versioned:
            if value is None:
                table.pop(hk, None)
            else:
                table[hk] = value
            return
        if not self.store(st).put(hk, value, int(r["timestamp"])):
            self.expired_puts += 1

    def process(self, st: Any, records: list[dict[str, Any]], task: int) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        buffer: list[dict[str, Any]] = st["buffer"]
        for r in records:
            ts = int(r["timestamp"])
            if st["stream_time"] is None or ts > st["stream_time"]:
                st["stream_time"] = ts
            if r["ks_jside"] == 1:
                self._put(st, r)
            elif self.grace > 0 and ts + self.grace > st["stream_time"]:
                buffer.append(r)
            else:
                self._join_stream(st, r, out)
            if self.grace > 0 and buffer:
                self._flush(st, out)
        if self.versioned:
            self.store(st).expire()
        return out

    def _flush(self, st: Any, out: list[dict[str, Any]]) -> None:
        limit = st["stream_time"] - self.grace
        ready = [r for r in st["buffer"] if int(r["timestamp"]) <= limit]
        if not ready:
            return
        st["buffer"] = [r for r in st["buffer"] if int(r["timestamp"]) > limit]
        ready.sort(key=lambda r: (int(r["timestamp"]), r["ks_seq"], r["ks_sub"]))
        for r in ready:
            self._join_stream(st, r, out)

    def extra_side(self, st: Any, task: int) -> list[dict[str, Any]]:
        n, self.expired_puts = self.expired_puts, 0
        t = f"{self.guard.subtopology}_{task}"
        rows = [{"kind": "store_entries", "processor": self.spec["store"], "task": t, "count": len(st["table"]["data"] if self.versioned else st["table"])}]
        if n:
            rows.append({"kind": "expired_puts", "processor": self.processor, "task": t, "count": n})
        return rows


def make_processor(spec: dict[str, Any]) -> TaskProcessor:
    kind = check_spec(spec)["kind"]
    if kind == "dedup":
        return DedupProcessor(spec)
    if kind == "join":
        return JoinProcessor(spec)
    raise ValueError(f"no stateful operator for kind {kind!r}")
