"""The base of kspark's stateful operators, run per task under ``applyInPandasWithState``
(:mod:`kspark_server.operators.grouped`).

Records are grouped by task (``ks_task``: a task key, :mod:`kspark_server.placement`,
derived from the hash of the key modulo the app's number of partitions), so one handler
call sees a task's whole micro-batch, and each task runs in its own Spark partition.

A task's state lives durably in kspark's own files in the checkpoint as a base and a log
of per-batch changes (:mod:`kspark_server.taskfiles`, :mod:`kspark_server.taskstate`,
MessagePack), and is worked on in an executor-local store (:mod:`kspark_server.localstore`):
a batch loads the entries of the keys its records touch, and writes back, to both, only
the keys it changed. So a batch costs what it touches, not the whole state.

The batch stays columnar: only the columns an operator reads (key, value, timestamp) become
Python objects, and output rows are taken from the input frame by position, with the
joined value as the one new column. A failing record's full envelope is read only when
the exception handler needs it (:class:`~kspark_server.records.RecordView`).

Within a task, records are taken in offset order per input partition, and across input
partitions by the smallest head timestamp, as Kafka Streams does.

Every state entry also keeps the Spark hash of its partitioning column (``ks_hash``), so a
rescale can move entries to ``pmod(hash, M)`` without knowing the key's Spark type
(:mod:`kspark_server.regroup`).

Each operator has its own module in this package; :mod:`kspark_server.operators.registry`
maps a spec's kind to its class.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import msgspec
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from kspark_server import (
    codec,
    handling,
    localstore,
    placement,
    stateenc,
    taskfiles,
    taskstate,
    timestamps,
    transport,
)
from kspark_server.chain import constant_widener
from kspark_server.envelope import SideKind, side_row
from kspark_server.operators.arrow import (
    as_table,
    headers_from_text,
    interleave,
    ints,
    make_table,
    order,
    records_table,
)
from kspark_server.records import ArrowColumns, ArrowRecord
from kspark_server.spec import StatefulSpec, check_spec

__all__ = ["Batch", "Emitter", "TaskProcessor", "identity"]


def identity(x: Any) -> Any:
    return x


class Batch:
    """A task's records of one micro-batch, in processing order, as Arrow columns.

    The table is not reordered (a copy of every column); columns are read through the
    order's positions, and output rows are taken from the table by position, so columns
    an operator does not read never become Python objects.
    """

    def __init__(
        self, frame: pa.Table | pd.DataFrame, columns: list[str], decoders: dict[str, Any]
    ) -> None:
        table = as_table(frame)
        self.table = table
        self.pos = order(table)
        self._pos = pa.array(self.pos)
        self.decoders = decoders
        self.cells = ArrowColumns(table, decoders)
        self.columns = columns
        self.n = table.num_rows
        #: the timestamps in processing order, as numpy (:attr:`ts` as Python ints)
        self.ts_array = ints(table, "timestamp", 0)[self.pos]

        self._lists: dict[str, list[Any]] = {}

    # made when an operator first reads them: a columnar operator never makes these lists
    # (not functools.cached_property: its lock cannot be pickled, and this module travels
    # to the workers by value)
    @property
    def ts(self) -> list[int]:
        if "ts" not in self._lists:
            self._lists["ts"] = self.ts_array.tolist()
        return self._lists["ts"]

    @property
    def keys(self) -> list[Any]:
        if "key" not in self._lists:
            self._lists["key"] = self.col("key")
        return self._lists["key"]

    @property
    def hash_array(self) -> np.ndarray[Any, Any]:
        """The records' ``ks_hash`` in processing order, as numpy."""
        hashes: np.ndarray[Any, Any] = ints(self.table, "ks_hash", 0)[self.pos]
        return hashes

    @property
    def hashes(self) -> list[int]:
        if "ks_hash" not in self._lists:
            self._lists["ks_hash"] = self.hash_array.tolist()
        return self._lists["ks_hash"]

    def distinct_keys(self) -> set[Any]:
        """The batch's non-null keys, each once, as the state keys them
        (:func:`kspark_server.codec.hashable`; a text key as it is)."""
        hashable = codec.hashable
        return {k if type(k) is str else hashable(k) for k in self.keys if k is not None}

    def arrow(self, name: str) -> pa.ChunkedArray:
        """Column ``name``'s cells in processing order, in Arrow."""
        return self.table.column(name).take(self._pos)

    def col(self, name: str) -> list[Any]:
        """Column ``name``'s cells in processing order, as Python objects (None for null)."""
        cells: list[Any] = self.arrow(name).to_pylist()
        return cells

    def walk(self, st: Any) -> Iterator[tuple[int, int, int]]:
        """Each record's ``(i, timestamp, position)`` in processing order, the task's stream
        time (``st["stream_time"]``) first advanced to the timestamp; the position is the
        largest source position (``ks_seq``) seen so far, which a :class:`QueueEmitter`'s
        outputs take."""
        seqs = self.col("ks_seq")
        position = 0
        for i, ts in enumerate(self.ts):
            position = max(position, int(seqs[i] or 0))
            now = st["stream_time"]
            if now is None or ts > now:
                st["stream_time"] = ts
            yield i, ts, position

    def first(self, name: str) -> Any:
        return self.table.column(name)[int(self.pos[0])].as_py()

    def take(self, idx: list[int]) -> pa.Table:
        """Rows ``idx`` (in processing order) of the table."""
        return self.table.take(pa.array(self.pos[np.asarray(idx, dtype="int64")]))

    def row(self, i: int) -> ArrowRecord:
        """Record ``i``, read only if the exception handler's context needs it."""
        return ArrowRecord(self.cells, int(self.pos[i]))


class Emitter:
    """Output rows: positions of the current batch (with an optional new value) and
    records carried over from earlier batches (the grace buffer), in emission order."""

    def __init__(self) -> None:
        self.idx: list[int] = []
        self.values: list[Any] = []
        self.carried: list[tuple[int, dict[str, Any]]] = []

    def take(self, i: int, value: Any = None) -> None:
        self.idx.append(i)
        self.values.append(value)

    def take_all(self, idx: list[int]) -> None:
        """Rows ``idx`` of the batch, in order, as they are."""
        self.idx.extend(idx)
        self.values.extend([None] * len(idx))

    def carry(self, record: dict[str, Any], value: Any) -> None:
        record = dict(record)
        record["value"] = value
        self.carried.append((len(self.idx) + len(self.carried), record))

    def new_columns(self) -> dict[str, list[Any]]:
        """The columns of the batch's rows that the operator replaces."""
        return {"value": self.values}

    def table(
        self,
        batch: Batch | None,
        columns: list[str],
        schema: pa.Schema | None,
        new_value: bool,
        where: str = "operator",
    ) -> pa.Table | None:
        """The output rows in ``schema`` (``columns`` if the schema is unknown)."""
        parts: list[tuple[list[int], pa.Table]] = []
        carried_at = [p for p, _ in self.carried]
        if self.idx and batch is not None:
            taken = batch.take(self.idx)
            given: dict[str, Any] = {c: taken.column(c) for c in taken.column_names}
            if new_value:
                given.update(self.new_columns())
            out = make_table(len(self.idx), columns, schema, given, where)
            if not self.carried:
                return out
            mine = np.setdiff1d(np.arange(len(self.idx) + len(self.carried)), carried_at).tolist()
            parts.append((mine, out))
        if self.carried:
            records = [r for _, r in self.carried]
            parts.append((carried_at, records_table(records, columns, schema, where)))
        if not parts:
            return None
        return parts[0][1] if len(parts) == 1 else interleave(parts)

    def frame(
        self, batch: Batch | None, columns: list[str], new_value: bool
    ) -> pd.DataFrame | None:
        """:meth:`table` as pandas, the schema inferred (unit tests read it so)."""
        t = self.table(batch, columns, None, new_value)
        if t is None:
            return None
        # object columns: a null stays None, an integer an int
        return pd.DataFrame(
            {c: pd.Series(t.column(c).to_pylist(), dtype=object) for c in t.column_names}
        )


class QueueEmitter(Emitter):
    """Output rows of the batch's records with a new value, timestamp and position.

    A changelog's order per key is its meaning, and the sink writes a batch's records in
    the order of their positions (``ks_seq``, ``ks_sub``), as a downstream operator takes
    the records of one topic partition: each output takes the largest source position
    seen so far in processing order and its emission number within the batch, and the
    task's outputs are one queue (topic: the processor, partition: the task), so whoever
    reads them keeps the order they were emitted in."""

    def __init__(self) -> None:
        super().__init__()
        self.times: list[int] = []
        self.seqs: list[int] = []
        self.queue: tuple[str, int] = ("", 0)

    def put_value(self, i: int, value: Any, ts: int, seq: int) -> None:
        self.take(i, value)
        self.times.append(ts)
        self.seqs.append(seq)

    def new_columns(self) -> dict[str, list[Any]]:
        n = len(self.seqs)
        return {
            "value": self.values,
            "timestamp": self.times,
            "ks_seq": self.seqs,
            "ks_sub": list(range(n)),
            "topic": [self.queue[0]] * n,
            "partition": [self.queue[1]] * n,
        }


class KeyedEmitter(QueueEmitter):
    """A :class:`QueueEmitter` whose outputs take a new key too."""

    def __init__(self) -> None:
        super().__init__()
        self.keys: list[Any] = []

    def put(self, i: int, key: Any, value: Any, ts: int, seq: int) -> None:
        self.keys.append(key)
        self.put_value(i, value, ts, seq)

    def new_columns(self) -> dict[str, list[Any]]:
        return {"key": self.keys, **super().new_columns()}


class TaskProcessor:
    """Base of per-task operators: open the task's local store, load the entries of the
    keys the batch touches, process the batch in order, write back what changed.

    The durable state is a base and a log of changes in the task's files
    (:mod:`kspark_server.taskfiles`, :mod:`kspark_server.taskstate`); the operator works on
    the executor-local copy (:mod:`kspark_server.localstore`), rebuilt from the durable
    state when its version differs. A batch therefore costs the keys it touches, not the
    whole state.

    Built on the worker by :class:`~kspark_server.operators.grouped.GroupedOperator`,
    which Spark runs: it hands over the task's files at the committed version
    (:meth:`attach`) and the records (:meth:`run_task`).
    """

    #: whether the operator replaces the value column (a join) or passes rows through
    new_value = False
    #: whether entries expire by their timestamp through the local store's time index
    time_indexed = False
    #: where :meth:`process` puts its output rows (an aggregation's has its own)
    emitter_class: type[Emitter] = Emitter

    spec: StatefulSpec

    def __init__(self, spec: StatefulSpec, constants_json: str = "") -> None:
        self.spec = check_spec(spec)
        self.processor = spec.processor
        self.columns = [f["name"] for f in _schema_fields(spec.output_schema)]
        #: the output records' Arrow schema (as :func:`transport.operator_schema` declares)
        self.out_schema = transport.operator_arrow_schema(spec.output_schema, spec.packed.out)
        self.kind = spec.kind
        self.versioned = spec.versioned
        #: keys whose entries the current batch changed (the processors add to it)
        self.touched: set[Any] = set()
        #: what opening the task's local store took: reused, caught up or rebuilt
        #: (:meth:`_open`), and the entries it wrote
        self.local_outcome: tuple[SideKind, int] = (SideKind.LOCAL_REUSED, 0)
        #: whether the store opened was a standby copy, promoted (:mod:`kspark_server.standby`)
        self.local_promoted = False
        #: check every logged change against the state it stands for ...
        self.check_log = spec.state.check_log
        # ... and log changes against small bases too, so that checks take the log path
        self.min_base = 0 if self.check_log else taskstate.MIN_BASE_BYTES
        self.chunk_bytes = spec.state.base_chunk_bytes
        self.guard = handling.Guard(spec.handling, handling.json_columns(spec))
        packed = spec.packed
        # msgspec parses JSON text about three times as fast as the json module
        self.unpack_value = msgspec.json.decode if packed.value else identity
        self.pack_out = json.dumps if packed.out else identity
        #: envelope columns left out of the records that cross into and out of the
        #: operator, the same for every record (``constants_json``, the compiler's
        #: description): their names, and the function that puts them back while the
        #: operator works
        self.widener: tuple[list[str], Any] = (
            constant_widener(constants_json) if constants_json else ([], None)
        )
        self.decoders: dict[str, Any] = {"headers": headers_from_text}
        if packed.value:
            self.decoders["value"] = msgspec.json.decode
        self.setup()

    def attach(self, files: taskfiles.TaskFiles) -> None:
        """Use the task's files at its committed version for the next batch: their base's
        chunks, their log of changes and their version."""
        self.files = files
        self.base, self.log, self.version = files.base, files.log, files.version

    def setup(self) -> None:
        """Build codecs; called once per worker."""

    def keys(self, st: Any, batch: Batch) -> list[Any]:
        """The state keys the batch may read or change (their entries are loaded): by
        default the batch's own keys."""
        return list(batch.distinct_keys())

    def process(self, st: Any, batch: Batch, task: int, out: Emitter) -> None:
        raise NotImplementedError

    def time_of(self, entry: Any) -> int:
        """An entry's time in the local store's time index (``time_indexed`` operators)."""
        raise NotImplementedError

    def expire_before(self, st: Any) -> int | None:
        """Entries whose index time is older than this are removed after the batch."""
        return None

    # -- the durable state and the local store ----------------------------------------

    def _open(self, task: int) -> tuple[localstore.TaskStore, str, list[int], bool]:
        """The task's local store at the durable state's version: (store, incarnation,
        [batches, base bytes, log bytes, log length, base chunks], whether the task has
        state).

        A store at the version is used as it is; one of the same incarnation that is
        behind, but not behind the batch the durable base was written at, applies the
        log's changes since its own batch; any other is rebuilt. :attr:`local_outcome`
        says which, and how many entries it wrote."""
        ver = self.version.get() if self.version.exists() else None
        if ver is None:  # a new task
            inc, sizes = uuid.uuid4().hex, [0, 0, 0, 0, 0]
        else:
            inc, sizes = str(ver[0]), [int(v or 0) for v in ver[1:]]
        root = self.spec.state.local_dir or localstore.root_dir()
        local = localstore.TaskStore.open(
            root, self.spec.store, inc, task, application_id=self.spec.state.application_id
        )
        self.local_outcome = (SideKind.LOCAL_REUSED, 0)
        # a standby copy (kspark_server.standby) becomes the task's own, version-checked
        # below like any local store
        self.local_promoted = localstore.promote(local)
        if ver is None:
            local.reset([], {}, (inc, 0))
            return local, inc, sizes, False
        batches, log_len = sizes[0], sizes[3]
        have = local.version
        if have is not None and self.files.ran_twice(have[1]):
            # the local store may hold the attempt of its batch that Spark did not keep
            # (two attempts on two executors, one commit kept): not the committed state
            have = None
        if have == (inc, batches):
            return local, inc, sizes, True
        index_of = None
        if self.time_indexed:
            time_of, unpack = self.time_of, stateenc.unpack

            def index_of(k: bytes, e: bytes) -> bytes:
                return localstore.time_key(time_of(unpack(e)), k)

        # the log holds one change per batch since the base's batch
        base_at = batches - log_len
        log = [t[0] for t in self.log.get()] if log_len else []
        if have is not None and have[0] == inc and base_at <= have[1] < batches:
            written = local.catch_up(log[have[1] - base_at :], (inc, batches), index_of)
            self.local_outcome = (SideKind.LOCAL_CAUGHT_UP, written)
        else:
            written = local.rebuild(self._chunks(sizes[4]), log, (inc, batches), index_of)
            self.local_outcome = (SideKind.LOCAL_REBUILT, written)
        return local, inc, sizes, True

    def _chunks(self, n: int) -> Iterator[bytes]:
        """The durable base's chunks, one at a time, chunk 0 first."""
        for i in range(n):
            got = self.base.getValue((i,))
            if got is None or got[0] is None:
                raise stateenc.StateFormatError(
                    f"{self.spec.processor}: chunk {i} of {n} of store {self.spec.store}'s "
                    "base is missing from the checkpoint"
                )
            yield got[0]

    def _partial(self, local: localstore.TaskStore, batch: Batch | None) -> Any:
        """The task state with the entries of the batch's keys only."""
        st = taskstate.empty(self.kind, self.versioned)
        taskstate.set_scalars(self.kind, self.versioned, st, local.scalars())
        keys = self.keys(st, batch) if batch is not None else []
        pack = stateenc.pack
        taskstate.fill(self.kind, self.versioned, st, keys, local.get_many([pack(k) for k in keys]))
        return st

    def _save(
        self,
        st: Any,
        local: localstore.TaskStore,
        inc: str,
        sizes: list[int],
        before: dict[Any, Any],
        has_base: bool,
    ) -> None:
        """Write the batch's changes to the local store and the durable state.

        ``has_base`` and ``sizes`` (from :meth:`_open`) say what the durable state holds, so
        the batch reads nothing more of it."""
        kind, versioned = self.kind, self.versioned
        touched = list(self.touched)
        pairs = taskstate.change_pairs(kind, versioned, st, touched)
        index: list[tuple[bytes | None, bytes | None]] = []
        if self.time_indexed:
            seen = taskstate.maps(kind, versioned, st)[0]
            for k, (kb, _) in zip(touched, pairs, strict=True):
                old, new = before.get(k), seen.get(k)
                if old != new:
                    index.append(
                        (
                            None if old is None else localstore.time_key(self.time_of([old]), kb),
                            None if new is None else localstore.time_key(self.time_of([new]), kb),
                        )
                    )
        sc = taskstate.scalars(kind, versioned, st)
        n = sizes[0] + 1
        expired = local.apply(
            pairs, sc, (inc, n), index=index, expire_before=self.expire_before(st)
        )
        pairs.extend((k, None) for k in expired)
        change = stateenc.encode_frame(sc, pairs)
        base_bytes, log_bytes, log_len = sizes[1], sizes[2] + len(change), sizes[3] + 1
        n_chunks = sizes[4]
        if not has_base or taskstate.should_compact(base_bytes, log_bytes, log_len, self.min_base):
            # the new base, chunk by chunk from the local store (never whole in memory)
            base_bytes, written = 0, 0
            for chunk in taskstate.iter_chunks(sc, local.pairs(), self.chunk_bytes):
                self.base.updateValue((written,), (chunk,))
                base_bytes += len(chunk)
                written += 1
            for i in range(written, n_chunks):  # the old base's extra chunks
                self.base.removeKey((i,))
            if sizes[3]:  # the log's length as of the last batch
                self.log.clear()
            n_chunks, log_bytes, log_len = written, 0, 0
        else:
            self.log.appendValue((change,))
        self.version.update((inc, n, base_bytes, log_bytes, log_len, n_chunks))
        if self.check_log:
            self._check(local)

    def _check(self, local: localstore.TaskStore) -> None:
        """Tests: the durable base and log read back as the local store's state."""
        ver = self.version.get()
        n = 0 if ver is None else int(ver[5])
        base = list(self._chunks(n))
        if self.base.containsKey((n,)):
            raise AssertionError(
                f"{self.spec.processor}: chunk {n} of a base of {n} chunks is left over "
                "(a new base with fewer chunks did not remove the old one's extra chunks)"
            )
        log = [t[0] for t in self.log.get()] if self.log.exists() else []
        s, pairs = taskstate.merge_pairs(base, log)
        if pairs != dict(local.pairs()) or s != local.scalars():
            raise AssertionError(
                f"{self.spec.processor}: the durable base and log do not reproduce the "
                "task state (a key the batch changed was not recorded)"
            )

    def run_task(self, key: Any, table: pa.Table) -> pa.Table | None:
        """One task's micro-batch: its records (``table``, the task's key ``key``) in, its
        output records and side rows out (None: none), the task's state vars updated."""
        constant_names, widen = self.widener
        if widen is not None:
            table = widen(table)
        is_side = pc.is_valid(table.column("ks_side"))
        n_side = pc.sum(is_side).as_py() or 0
        side_json = table.column("ks_side").filter(is_side).to_pylist() if n_side else []
        main = table.filter(pc.invert(is_side)) if n_side else table
        task = placement.task_of(int(key[0]))
        self.touched = set()
        local, inc, sizes, has_state = self._open(task)
        if main.num_rows and main.column("timestamp").null_count:
            # timestamp_policy="use-partition-time": the source left invalid ones null
            stream_time = local.scalars().get("stream_time")
            filled = timestamps.fill_partition_time(
                main.to_pandas(), stream_time, self.spec.processor
            )
            main = pa.Table.from_pandas(filled, preserve_index=False).cast(main.schema)
        batch = Batch(main, self.columns, self.decoders) if main.num_rows else None
        st = self._partial(local, batch)
        before = dict(taskstate.maps(self.kind, self.versioned, st)[0]) if self.time_indexed else {}
        # the entries as loaded, before this batch: the restore report of a restarted run
        # counts them (kspark.runtime.restore)
        loaded = local.count() + len(st.get("buffer") or []) if has_state else None
        out = self.emitter()
        if isinstance(out, QueueEmitter):  # its outputs are the task's one queue
            out.queue = (self.spec.processor, task)
        if batch is not None:
            self.process(st, batch, task, out)
        self._save(st, local, inc, sizes, before, has_state)
        first = f"{batch.first('ks_seq')}:{batch.first('ks_sub')}" if batch is not None else ""
        chunk = f"{self.spec.store}:{task}:{first}"
        extra = self.extra_side(st, task, local.count())
        if loaded is not None:
            extra.append(
                {
                    "kind": SideKind.LOADED_ENTRIES,
                    "processor": self.spec.store,
                    "task": f"{self.guard.subtopology}_{task}",
                    "count": loaded,
                }
            )
            outcome, written = self.local_outcome
            for kind in (outcome, SideKind.LOCAL_PROMOTED) if self.local_promoted else (outcome,):
                extra.append(
                    {
                        "kind": kind,
                        "processor": self.spec.store,
                        "task": f"{self.guard.subtopology}_{task}",
                        "count": written,
                    }
                )
        for e in extra:
            e["chunk"] = chunk
        side = side_json + [handling.side_json(s) for s in self.guard.side_rows(chunk) + extra]
        where = self.spec.processor
        result = out.table(batch, self.columns, self.out_schema, self.new_value, where)
        if side:
            side_table = make_table(
                len(side), self.columns, self.out_schema, {"ks_side": side}, where
            )
            result = side_table if result is None else pa.concat_tables([result, side_table])
        if result is None or not result.num_rows:
            return None
        if constant_names:
            result = result.drop_columns(constant_names)
        return result

    def extra_side(self, st: Any, task: int, entries: int) -> list[dict[str, Any]]:
        """The side rows of a task's batch besides its dead letters and drops: by default
        the count of the store's entries, to which operators add their own counts."""
        t = f"{self.guard.subtopology}_{task}"
        return [side_row(SideKind.STORE_ENTRIES, self.spec.store, t, entries)]

    def emitter(self) -> Emitter:
        """Where :meth:`process` puts its output rows: an :attr:`emitter_class`."""
        return self.emitter_class()

    def close(self) -> None:
        pass


def _schema_fields(schema_json: str) -> list[dict[str, Any]]:
    fields: list[dict[str, Any]] = json.loads(schema_json)["fields"]
    return fields
