"""The Processor API's operator: a user's processor, run per task on the task engine.

Each micro-batch of a task makes a new processor (``spec.supplier()``), calls its
``init`` with a context, its ``process`` for each record in processing order, fires its
punctuators, and calls ``close``. Its stores (:mod:`kspark_server.procstores`) and its
punctuation schedule are the task's state (:mod:`kspark_server.taskstate`, kind
``processor``), saved with the batch as every operator's is, so they survive batches and
restarts.

Punctuation, per task:

- a stream-time punctuator is due at time 0 when scheduled, so it first fires after the
  first record (with a timestamp of 0 or more) is processed; it fires with the stream time
  after each record whose processing moves the stream time to or past its due time, once
  however many intervals passed, and is then due ``interval`` after its last due time
  (or after the stream time, when that is further: the missed intervals are skipped), as
  Kafka Streams' ``PunctuationSchedule`` does;
- a wall-clock punctuator is checked once per micro-batch of the task, after its records:
  it fires once when the wall clock (the system's; see :func:`wall_clock`) has reached
  its due time (first: ``interval`` after
  it was scheduled), and is then due ``interval`` later (the missed ones skipped).

A schedule is identified by its order among the ``schedule`` calls of ``init`` (each
batch's ``init`` schedules again); its due time and whether it was cancelled are kept in
the task state, so a new batch, or a restarted app, goes on where the last batch stopped.

Records forwarded by ``process`` take the input record's position (topic, partition,
offset, order), numbered in ``ks_sub``; records forwarded by a punctuator take the
position of the record after which it fired, without an offset.

A global store (``spec.global_store``) is whole in every task: its topic's records reach
every task (``ks_jside`` 1, key in ``ks_gkey``, value in ``ks_tvalue``), and each task
applies a micro-batch's updates, through the store's state-update processor, before the
batch's stream records. The processor reads the store and cannot write it. An update
that fails or is dropped is reported by task 0 alone (every task sees the same updates and
applies the same rule to them), so the handler sees it once.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import msgspec

from kspark_server import codec, stateenc
from kspark_server.operators.base import Batch, Emitter, TaskProcessor
from kspark_server.papi import (
    Cancellable,
    FixedKeyProcessorContext,
    FixedKeyRecord,
    ProcessorContext,
    PunctuationType,
    Record,
    RecordMetadata,
    StateStoreError,
)
from kspark_server.procstores import KVStore, ReadOnlyKVStore, Table, store_for
from kspark_server.spec import GlobalStoreSpec, ProcessorSpec

__all__ = ["UserProcessor", "system_clock_ms", "wall_clock"]

#: at most this many records forwarded per input record (``ks_sub`` numbers them)
_FANOUT = 1 << 20


def system_clock_ms() -> int:
    """The system's wall clock, in ms since the epoch."""
    return int(time.time() * 1000)


_clock: list[Callable[[], int]] = [system_clock_ms]


def _now() -> int:
    return _clock[-1]()


@contextmanager
def wall_clock(clock: Callable[[], int]) -> Iterator[None]:
    """Processors read ``clock`` (ms) as their wall clock while in this block: the
    scheduling and firing of wall-clock punctuators and ``current_system_time_ms``. The
    test driver's in-process engine runs its micro-batches with its own clock, which only
    ``advance_wall_clock_time`` moves, as Kafka Streams' test driver's mock clock."""
    _clock.append(clock)
    try:
        yield
    finally:
        _clock.pop()


class TaskTable(Table):
    """A table over a task state's ``entries`` and ``hash`` maps (the batch's changes)
    and the local store (the state before the batch): what the operator saves."""

    def __init__(
        self,
        entries: dict[Any, Any],
        hashes: dict[Any, int],
        touched: set[Any],
        local: Any,
        hash_now: Callable[[], int],
    ) -> None:
        self.entries, self.hashes, self.touched = entries, hashes, touched
        self.local = local
        self.hash_now = hash_now

    def get(self, sk: Any) -> Any:
        if sk in self.entries:
            return self.entries[sk]
        if sk in self.touched or self.local is None:
            return None  # removed in this batch
        (raw,) = self.local.get_many([stateenc.pack(sk)])
        if raw is None:
            return None
        entry, h = stateenc.unpack(raw)
        self.entries[sk], self.hashes[sk] = entry, h
        return entry

    def set(self, sk: Any, entry: Any) -> None:
        self.touched.add(sk)
        if entry is None:
            self.entries.pop(sk, None)
            self.hashes.pop(sk, None)
        else:
            self.entries[sk] = entry
            if sk not in self.hashes:
                self.hashes[sk] = self.hash_now()

    def scan(self, store: str) -> Iterator[tuple[Any, Any]]:
        out: dict[Any, Any] = {}
        if self.local is not None:
            unpack = stateenc.unpack
            for kb, eb in self.local.pairs():
                sk = unpack(kb)
                if sk[0] == store and sk not in self.touched:
                    out[sk] = unpack(eb)[0]
        for sk, e in self.entries.items():
            if sk[0] == store:
                out[sk] = e
        return iter(list(out.items()))


class _Schedule(Cancellable):
    __slots__ = ("cancelled", "due", "index", "interval", "owner", "punctuator", "type")

    def __init__(
        self, owner: _Run, index: int, interval: int, type_: PunctuationType, fn: Any
    ) -> None:
        self.owner, self.index, self.interval, self.type = owner, index, interval, type_
        self.punctuator = fn
        self.due = 0
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        self.owner.save_schedule(self)

    def advance(self, now: int) -> None:
        """The next due time after firing at ``now`` (Kafka Streams' ``next``)."""
        self.due = (
            self.due + self.interval if self.due + self.interval > now else now + self.interval
        )
        self.owner.save_schedule(self)


class _RunContext(ProcessorContext[Any, Any]):
    """What the contexts of a task's processors for one micro-batch (``_run``) share."""

    _run: _Run

    @property
    def application_id(self) -> str:
        return self._run.op.spec.application_id

    @property
    def task_id(self) -> str:
        return self._run.task_id

    def current_system_time_ms(self) -> int:
        return _now()


class _Context(_RunContext, FixedKeyProcessorContext[Any, Any]):
    """The context of one task's processor for one micro-batch."""

    def __init__(self, run: _Run) -> None:
        self._run = run

    def forward(self, record: Any, child_name: str | None = None) -> None:
        if child_name is not None:
            raise ValueError(
                f"{self._run.op.spec.processor}: forward(child_name={child_name!r}): a kspark "
                "processor has one downstream stream; leave child_name None and split the "
                "stream after the processor"
            )
        self._run.forward(record)

    def schedule(self, interval: timedelta, type: PunctuationType, punctuator: Any) -> Cancellable:
        return self._run.schedule(interval, type, punctuator)

    def get_state_store(self, name: str) -> Any:
        return self._run.store(name)

    def record_metadata(self) -> RecordMetadata | None:
        return self._run.metadata

    def current_stream_time_ms(self) -> int:
        t = self._run.st["stream_time"]
        return -1 if t is None else int(t)


class _Run:
    """One task's processor for one micro-batch."""

    def __init__(self, op: UserProcessor, st: Any, batch: Batch | None, task: int, out: Emitter):
        self.op, self.st, self.batch, self.out = op, st, batch, out
        self.task = task
        self.task_id = f"{op.guard.subtopology}_{task}"
        self.metadata: RecordMetadata | None = None
        self.schedules: list[_Schedule] = []
        self.stores: dict[str, Any] = {}
        #: the raw cells forwarded records start from, and the next ``ks_sub`` number
        self.base: dict[str, Any] = {}
        self.sub = 0
        self.hash_now = 0
        self.table = TaskTable(st["entries"], st["hash"], op.touched, op.local, self._hash)

    def _hash(self) -> int:
        return self.hash_now

    def save_schedule(self, s: _Schedule) -> None:
        self.st["punct"][str(s.index)] = [s.type.value, s.interval, s.due, s.cancelled]

    def schedule(self, interval: Any, type_: Any, fn: Any) -> Cancellable:
        where = self.op.spec.processor
        if not isinstance(interval, timedelta) or interval <= timedelta(0):
            raise ValueError(f"{where}: schedule needs a positive datetime.timedelta interval")
        if not isinstance(type_, PunctuationType):
            raise ValueError(f"{where}: schedule needs a PunctuationType, got {type_!r}")
        if not callable(fn):
            raise ValueError(f"{where}: the punctuator must be callable, got {fn!r}")
        ms = interval // timedelta(milliseconds=1)
        s = _Schedule(self, len(self.schedules), ms, type_, fn)
        kept = self.st["punct"].get(str(s.index))
        if kept is not None and kept[0] == type_.value and int(kept[1]) == ms:
            s.due, s.cancelled = int(kept[2]), bool(kept[3])
        else:
            now = _now()
            s.due = 0 if type_ is PunctuationType.STREAM_TIME else now + ms
            self.save_schedule(s)
        self.schedules.append(s)
        return s

    def store(self, name: str) -> Any:
        found = self.stores.get(name)
        if found is not None:
            return found
        gs = self.op.spec.global_store
        if gs is not None and name == gs.name:
            found = self.stores[name] = ReadOnlyKVStore(
                KVStore(name, self.table, gs.key, gs.value), self.op.spec.processor
            )
            return found
        spec = self.op.store_specs.get(name)
        if spec is None:
            connected = sorted(self.op.store_specs)
            raise StateStoreError(
                f"processor {self.op.spec.processor} has no access to state store {name!r}: "
                f"it is not connected to the processor (connected: {connected}); add the "
                "store with StreamsBuilder.add_state_store(...) and name it in "
                f"process(supplier, {name!r})"
            )
        found = self.stores[name] = store_for(
            spec.kind,
            name,
            self.table,
            spec.key,
            spec.value,
            self.st["observed"],
            history_retention_ms=spec.history_retention_ms,
            retention_ms=spec.retention_ms,
            retain_duplicates=spec.retain_duplicates,
        )
        return found

    def forward(self, record: Any) -> None:
        op = self.op
        if op.spec.fixed_key:
            if not isinstance(record, FixedKeyRecord):
                raise TypeError(
                    f"{op.spec.processor}: a FixedKeyProcessor forwards FixedKeyRecords "
                    f"(record.with_value(...)), got {type(record).__name__}"
                )
        elif not isinstance(record, Record):
            raise TypeError(
                f"{op.spec.processor}: forward takes a Record, got {type(record).__name__}"
            )
        out = dict(self.base)
        out["key"] = op.kenc(record.key)
        out["value"] = op.pack_out(op.venc(record.value))
        out["timestamp"] = int(record.timestamp)
        out["headers"] = [{"key": k, "value": v} for k, v in record.headers]
        out["ks_sub"] = self.sub
        self.sub += 1
        self.out.carry(out, out["value"])

    def punctuate(self, s: _Schedule, now: int) -> None:
        self.metadata = None
        try:
            s.punctuator(now)
        except Exception as exc:
            row = {
                "ks_task": self.task,
                "timestamp": now,
                "topic": None,
                "partition": None,
                "offset": None,
            }
            self.op.guard.on_error(self.op.spec.processor, (None, None), row, exc)
        s.advance(now)

    def stream_punctuate(self) -> None:
        t = self.st["stream_time"]
        if t is not None:
            self._punctuate_due(PunctuationType.STREAM_TIME, int(t))

    def wall_clock_punctuate(self) -> None:
        self._punctuate_due(PunctuationType.WALL_CLOCK_TIME, _now())

    def _punctuate_due(self, type_: PunctuationType, now: int) -> None:
        """The punctuations of ``type_`` due at ``now``, by due time, then in the order
        they were scheduled (one a punctuator cancels on the way does not run)."""
        due = [s for s in self.schedules if s.type is type_ and not s.cancelled and s.due <= now]
        for s in sorted(due, key=lambda s: (s.due, s.index)):
            if not s.cancelled:
                self.punctuate(s, now)


class _UpdateContext(_RunContext):
    """The context of a global store's state-update processor: its store, writable."""

    def __init__(self, run: _Run, spec: GlobalStoreSpec, store: KVStore) -> None:
        self._run, self._spec, self._store = run, spec, store
        self.metadata: RecordMetadata | None = None

    def forward(self, record: Any, child_name: str | None = None) -> None:
        raise StateStoreError(
            f"the state-update processor of global store {self._spec.name!r} forwards "
            "nothing: it only writes the store"
        )

    def schedule(self, interval: timedelta, type: PunctuationType, punctuator: Any) -> Cancellable:
        raise StateStoreError(
            f"the state-update processor of global store {self._spec.name!r} cannot schedule "
            "punctuators"
        )

    def get_state_store(self, name: str) -> Any:
        if name != self._spec.name:
            raise StateStoreError(
                f"the state-update processor of global store {self._spec.name!r} has no "
                f"access to state store {name!r}: it writes only its own store"
            )
        return self._store

    def record_metadata(self) -> RecordMetadata | None:
        return self.metadata

    def current_stream_time_ms(self) -> int:
        return -1


class UserProcessor(TaskProcessor):
    """The operator of :class:`~kspark_server.spec.ProcessorSpec`."""

    new_value = True
    spec: ProcessorSpec

    def setup(self) -> None:
        s = self.spec
        self.kdec = codec.decoder(s.input.key, plain=True)
        self.vdec = codec.decoder(s.input.value, plain=True)
        self.kenc = codec.encoder(s.output.key, "key")
        self.venc = codec.encoder(s.output.value, "value")
        self.store_specs = {d.name: d for d in s.stores}
        self.local: Any = None
        gs = s.global_store
        if gs is not None:
            self.gkdec = codec.decoder(gs.key, plain=True)
            self.gvdec = codec.decoder(gs.value, plain=True)
            self.unpack_tvalue: Any = msgspec.json.decode if s.packed.tvalue else (lambda x: x)

    def _open(self, task: int) -> Any:
        opened = super()._open(task)
        self.local = opened[0]
        return opened

    def keys(self, st: Any, batch: Batch) -> list[Any]:
        # the stores read through to the local store: nothing is loaded up front
        return []

    def process(self, st: Any, batch: Batch, task: int, out: Emitter) -> None:
        run = _Run(self, st, batch, task, out)
        spec, guard = self.spec, self.guard
        where = spec.processor
        processor = spec.supplier()
        try:
            processor.init(_Context(run))
        except Exception as exc:
            raise RuntimeError(
                f"processor {where} failed in init (task {run.task_id}): "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        jside = batch.col("ks_jside") if spec.global_store is not None else None
        if jside is not None:
            self._update_global(run, batch, jside)
        keys, values = batch.keys, batch.col("value")
        headers = batch.col("headers") if "headers" in batch.table.column_names else None
        topics = batch.col("topic")
        parts = batch.col("partition")
        offsets = batch.col("offset")
        seqs, subs = batch.col("ks_seq"), batch.col("ks_sub")
        hashes = batch.hashes
        names = [c for c in self.columns if c not in ("ks_side",)]
        make = FixedKeyRecord if spec.fixed_key else Record
        tss = batch.ts
        for i in range(batch.n):
            if jside is not None and jside[i] == 1:
                continue  # a global store's update, applied above
            ts = tss[i]
            run.base = {c: None for c in names if c not in ("key", "value", "timestamp", "headers")}
            run.base.update(topic=topics[i], partition=parts[i], offset=offsets[i], ks_seq=seqs[i])
            run.sub = int(subs[i] or 0) * _FANOUT
            run.hash_now = hashes[i]
            origin = "KEY"
            try:
                k = self.kdec(keys[i])
                origin = "VALUE"
                v = self.vdec(self.unpack_value(values[i]))
            except Exception as exc:
                guard.decode_failed(where, batch.row(i), exc, origin)
                k = None
            else:
                hs = tuple((h["key"], h["value"]) for h in (headers[i] or ())) if headers else ()
                run.metadata = RecordMetadata(topics[i], parts[i], offsets[i])
                try:
                    processor.process(make(k, v, ts, hs))
                except Exception as exc:
                    guard.on_error(where, (k, v), batch.row(i), exc)
            t = st["stream_time"]
            st["stream_time"] = ts if t is None or ts > t else t
            run.base["offset"] = None
            run.stream_punctuate()
        run.wall_clock_punctuate()
        try:
            processor.close()
        except Exception as exc:
            raise RuntimeError(
                f"processor {where} failed in close (task {run.task_id}): "
                f"{type(exc).__name__}: {exc}"
            ) from exc

    def _update_global(self, run: _Run, batch: Batch, jside: list[Any]) -> None:
        """Apply the batch's records of the global store's topic to the task's copy,
        through the state-update processor (by default: put, or delete on null)."""
        rows = [i for i in range(batch.n) if jside[i] == 1]
        gs = self.spec.global_store
        if not rows or gs is None:
            return
        where = gs.source or gs.name
        # every task applies every update; task 0 alone reports what fails or drops
        report = run.task == 0
        guard = self.guard
        store = KVStore(gs.name, run.table, gs.key, gs.value)
        context = _UpdateContext(run, gs, store)
        updater = gs.update_supplier() if gs.update_supplier is not None else None
        if updater is not None:
            try:
                updater.init(context)
            except Exception as exc:
                raise RuntimeError(
                    f"the state-update processor of global store {gs.name!r} failed in init "
                    f"(task {run.task_id}): {type(exc).__name__}: {exc}"
                ) from exc
        gkeys, tvalues, tss = batch.col("ks_gkey"), batch.col("ks_tvalue"), batch.ts
        topics, parts, offsets = batch.col("topic"), batch.col("partition"), batch.col("offset")
        headers = batch.col("headers") if "headers" in batch.table.column_names else None
        hashes = batch.hashes
        for i in rows:
            run.hash_now = hashes[i]
            origin = "KEY"
            try:
                k = self.gkdec(gkeys[i])
                origin = "VALUE"
                raw = tvalues[i]
                v = None if raw is None else self.gvdec(self.unpack_tvalue(raw))
            except Exception as exc:
                if report:
                    guard.decode_failed(where, batch.row(i), exc, origin)
                continue
            if updater is None:
                if k is None:
                    if report:
                        guard.drop(where, run.task_id, "null-key", batch.row(i))
                    continue
                store.put(k, v)  # a null value deletes the key
                continue
            hs = tuple((h["key"], h["value"]) for h in (headers[i] or ())) if headers else ()
            context.metadata = RecordMetadata(topics[i], parts[i], offsets[i])
            try:
                updater.process(Record(k, v, tss[i], hs))
            except Exception as exc:
                if report:
                    guard.on_error(where, (k, v), batch.row(i), exc)
        if updater is not None:
            try:
                updater.close()
            except Exception as exc:
                raise RuntimeError(
                    f"the state-update processor of global store {gs.name!r} failed in close "
                    f"(task {run.task_id}): {type(exc).__name__}: {exc}"
                ) from exc
