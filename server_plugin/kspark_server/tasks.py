"""Stateful operators run per task with ``transformWithStateInPandas``.

Records are grouped by task (``ks_task``: a task key, :mod:`kspark_server.placement`,
derived from the hash of the key modulo the app's number of partitions), so one handler
call sees a task's whole micro-batch, and each task runs in its own Spark partition.

A task's state lives durably in Spark's state store as a base and a log of per-batch
changes (:mod:`kspark_server.taskstate`, MessagePack), and is worked on in an
executor-local store (:mod:`kspark_server.localstore`): a batch loads the entries of the
keys its records touch, and writes back, to both, only the keys it changed. So a batch
costs what it touches, not the whole state.

The batch stays columnar: only the columns an operator reads (key, value, timestamp) become
Python objects, and output rows are taken from the input frame by position, with the
joined value as the one new column. A failing record's full envelope is read only when
the exception handler needs it (:class:`FrameRow`).

Within a task, records are taken in offset order per input partition, and across input
partitions by the smallest head timestamp, as Kafka Streams does.

Every state entry also keeps the Spark hash of its partitioning column (``ks_hash``), so a
rescale can move entries to ``pmod(hash, M)`` without knowing the key's Spark type
(:mod:`kspark_server.rescale`).
"""

from __future__ import annotations

import base64
import json
import os
import uuid
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.streaming.stateful_processor import StatefulProcessor, StatefulProcessorHandle
from pyspark.sql.types import BinaryType, IntegerType, LongType, StringType, StructField, StructType

from kspark_server import (
    codec,
    handling,
    localstore,
    placement,
    stateenc,
    taskstate,
    timestamps,
    transport,
)
from kspark_server.chain import constant_widener
from kspark_server.envelope import SideKind
from kspark_server.spec import AggregateSpec, DedupSpec, JoinSpec, StatefulSpec, check_spec
from kspark_server.versioned import VersionedStore

if TYPE_CHECKING:
    import pandas as pd
else:

    class _Pandas:
        """pandas, imported on first use. Spark's driver-side planning runner of
        ``transformWithStateInPandas`` unpickles the operator at every query start and
        never needs pandas, whose import is a third of that runner's time (about 0.2 s)."""

        def __getattr__(self, name: str) -> Any:
            import pandas

            value = getattr(pandas, name)
            setattr(self, name, value)  # later reads are plain attribute reads
            return value

        def __reduce__(self) -> tuple[type, tuple[()]]:
            return (_Pandas, ())  # never the cached pandas objects

    pd = _Pandas()

#: what a join of one record returns when the exception handler took the record
_HANDLED = object()
_BLOB = StructType([StructField("blob", BinaryType(), True)])
#: The key of a base chunk in the ``<store>`` map state: its number.
_CHUNK = StructType([StructField("chunk", IntegerType(), True)])
_VERSION = StructType(
    [
        StructField("incarnation", StringType(), True),
        StructField("batches", LongType(), True),
        StructField("base_bytes", LongType(), True),
        StructField("log_bytes", LongType(), True),
        StructField("log_len", IntegerType(), True),
        StructField("base_chunks", IntegerType(), True),
    ]
)

#: The layout of the task state (:mod:`kspark_server.taskstate`); rescale and the state
#: reader check it. 6: MessagePack base in chunks and log, cached in an executor-local
#: store; 5 (a base of one value) is read by the readers and the rescale job that migrates
#: it; 4 and 3 (pickled) only by the rescale job.
STATE_FORMAT = taskstate.STATE_FORMAT


def _ints(table: pa.Table, name: str, fill: int) -> np.ndarray[Any, Any]:
    """An integer column as int64 numpy, nulls as ``fill`` (zeros if there is no column)."""
    if name not in table.column_names:
        return np.full(table.num_rows, fill, dtype="int64")
    col = pc.fill_null(table.column(name), fill)
    return np.asarray(col.to_numpy(), dtype="int64")


def order(frame: pa.Table | pd.DataFrame) -> np.ndarray[Any, Any]:
    """Positions of ``frame``'s rows in processing order: offset order within each
    (topic, partition); head-timestamp order across them, a table's head before a
    stream's at equal timestamps.

    The merge by head is done in numpy: a queue's record goes out once it is the queue's
    head and the smallest head, so it goes out with the largest merge key of the records
    before it in its queue (the key that held it back). Sorting by that running maximum
    (then by position in the queue) gives the merge's order without a per-record heap.
    """
    table = as_table(frame)
    n = table.num_rows
    seq = _ints(table, "ks_seq", 0)
    sub = _ints(table, "ks_sub", 0)
    topics = table.column("topic").combine_chunks().dictionary_encode()
    topic_code = np.asarray(pc.fill_null(topics.indices, -1).to_numpy(), dtype="int64")
    part = _ints(table, "partition", -1)
    queue = pd.factorize(topic_code * (1 << 32) + part, use_na_sentinel=False)[0]
    if n == 0 or int(queue.max()) == 0:
        return np.lexsort((sub, seq))
    ts = _ints(table, "timestamp", 0)
    # at equal timestamps, a table update goes before a stream record (0 before 1): the join
    # then sees the version valid from that time, as an as-of lookup (validFrom <= t) does
    side = 1 - _ints(table, "ks_jside", 0)
    by_key = np.lexsort((queue, sub, seq, side, ts))
    rank = np.empty(n, dtype="int64")
    rank[by_key] = np.arange(n, dtype="int64")
    by_queue = np.lexsort((sub, seq, queue))
    q = queue[by_queue].astype("int64") * n
    # the running maximum restarts at each queue: later queues' ranks are offset above
    held = np.maximum.accumulate(rank[by_queue] + q) - q
    return by_queue[np.lexsort((np.arange(n), held))]


def headers_from_text(text: Any) -> list[dict[str, Any]]:
    """Headers as the envelope has them (a list of ``{key, value}``, values bytes).

    Headers cross the operators as Arrow, in that form already; records that an older
    kspark kept in state (a join's grace buffer) hold them as JSON text, values base64.
    """
    if text is None:
        return []
    if not isinstance(text, str):
        return list(text)
    return [
        {
            "key": h.get("key"),
            "value": None if h.get("value") is None else base64.b64decode(h["value"]),
        }
        for h in json.loads(text)
    ]


class FrameRow:
    """One record of a task's Arrow table, read field by field only when asked (the
    exception handler's context needs the whole envelope; the happy path does not).
    Values and headers that travel as JSON text are read back as the objects they stand
    for."""

    __slots__ = ("_decoders", "_i", "_table")

    def __init__(self, table: pa.Table, i: int, decoders: dict[str, Any]) -> None:
        self._table, self._i, self._decoders = table, i, decoders

    def raw(self, name: str) -> Any:
        if name not in self._table.column_names:
            return None
        v = self._table.column(name)[self._i].as_py()
        return None if _isna(v) else codec.plain(v)

    def get(self, name: str, default: Any = None) -> Any:
        if name not in self._table.column_names:
            return default
        v = self.raw(name)
        dec = self._decoders.get(name)
        return dec(v) if dec is not None and v is not None else v

    def __getitem__(self, name: str) -> Any:
        return self.get(name)

    def to_dict(self, columns: list[str]) -> dict[str, Any]:
        """The raw cells (as they travel), for records kept in state."""
        return {c: self.raw(c) for c in columns}


class DictRow:
    """A record kept in state (raw cells), read like :class:`FrameRow`."""

    __slots__ = ("_decoders", "_record")

    def __init__(self, record: dict[str, Any], decoders: dict[str, Any]) -> None:
        self._record, self._decoders = record, decoders

    def get(self, name: str, default: Any = None) -> Any:
        if name not in self._record:
            return default
        v = self._record[name]
        dec = self._decoders.get(name)
        return dec(v) if dec is not None and v is not None else v

    def __getitem__(self, name: str) -> Any:
        return self.get(name)


def _identity(x: Any) -> Any:
    return x


def _isna(v: Any) -> bool:
    return v is None or (isinstance(v, float) and v != v) or v is pd.NA or v is pd.NaT


def as_table(frame: pa.Table | pd.DataFrame) -> pa.Table:
    """A task's records as an Arrow table (unit tests hand the operators pandas frames)."""
    if isinstance(frame, pa.Table):
        return frame
    return pa.Table.from_pandas(frame, preserve_index=False)


def _column(values: list[Any], field: pa.Field | None, where: str) -> pa.Array:
    """Python cells as an Arrow column of ``field``'s type (inferred if there is none)."""
    try:
        return pa.array(values, type=None if field is None else field.type, from_pandas=True)
    except (pa.ArrowException, OverflowError, TypeError, ValueError) as exc:
        raise ValueError(
            f"{where}: cannot write the operator's output column "
            f"{'?' if field is None else field.name}: {exc}"
        ) from exc


def make_table(
    n: int,
    names: list[str],
    schema: pa.Schema | None,
    given: dict[str, Any],
    where: str,
) -> pa.Table:
    """A table of ``n`` rows in the output ``schema`` (or ``names``): each column from
    ``given`` (an Arrow column, or a list of Python cells), or all null."""
    arrays: list[Any] = []
    fields = list(schema) if schema is not None else [None] * len(names)
    for name, field in zip(names, fields, strict=True):
        v = given.get(name)
        if v is None:
            arrays.append(pa.nulls(n, pa.null() if field is None else field.type))
        elif isinstance(v, list):
            arrays.append(_column(v, field, where))
        elif field is not None and v.type != field.type:
            arrays.append(v.cast(field.type))
        else:
            arrays.append(v)
    if schema is not None:
        return pa.Table.from_arrays(arrays, schema=schema)
    return pa.Table.from_arrays(arrays, names=names)


def records_table(
    records: list[dict[str, Any]], names: list[str], schema: pa.Schema | None, where: str
) -> pa.Table:
    """Records kept in state (raw cells, :meth:`FrameRow.to_dict`) as a table."""
    given = {c: [r.get(c) for r in records] for c in names}
    if "headers" in given:
        given["headers"] = [headers_from_text(h) for h in given["headers"]]
    return make_table(len(records), names, schema, given, where)


def interleave(tables: list[tuple[list[int], pa.Table]]) -> pa.Table:
    """Tables whose rows go to the given positions of the output, in position order."""
    where = np.concatenate([np.asarray(p, dtype="int64") for p, _ in tables])
    both = pa.concat_tables([t for _, t in tables])
    return both.take(pa.array(np.argsort(where, kind="stable")))


def _runs(codes: np.ndarray[Any, Any]) -> list[tuple[int, int, int]]:
    """(value, start, end) of each run of equal values in ``codes``."""
    if not len(codes):
        return []
    starts = np.flatnonzero(np.concatenate(([True], codes[1:] != codes[:-1])))
    ends = np.append(starts[1:], len(codes))
    return list(zip(codes[starts].tolist(), starts.tolist(), ends.tolist(), strict=True))


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
        self.columns = columns
        self.n = table.num_rows
        #: the timestamps in processing order, as numpy (:attr:`ts` as Python ints)
        self.ts_array = _ints(table, "timestamp", 0)[self.pos]

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
    def hashes(self) -> list[int]:
        if "ks_hash" not in self._lists:
            self._lists["ks_hash"] = _ints(self.table, "ks_hash", 0)[self.pos].tolist()
        return self._lists["ks_hash"]

    def col(self, name: str) -> list[Any]:
        """Column ``name``'s cells in processing order, as Python objects (None for null)."""
        cells: list[Any] = self.table.column(name).take(self._pos).to_pylist()
        return cells

    def first(self, name: str) -> Any:
        return self.table.column(name)[int(self.pos[0])].as_py()

    def take(self, idx: list[int]) -> pa.Table:
        """Rows ``idx`` (in processing order) of the table."""
        return self.table.take(pa.array(self.pos[np.asarray(idx, dtype="int64")]))

    def row(self, i: int) -> Any:
        """Record ``i`` as the mapping the exception handler's context is read from."""
        return FrameRow(self.table, int(self.pos[i]), self.decoders)


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


class TaskProcessor(StatefulProcessor):
    """Base of per-task operators: open the task's local store, load the entries of the
    keys the batch touches, process the batch in order, write back what changed.

    The durable state is a base and a log of changes in Spark's state store
    (:mod:`kspark_server.taskstate`); the operator works on the executor-local copy
    (:mod:`kspark_server.localstore`), rebuilt from the durable state when its version
    differs. A batch therefore costs the keys it touches, not the whole state.
    """

    #: whether the operator replaces the value column (a join) or passes rows through
    new_value = False
    #: whether entries expire by their timestamp through the local store's time index
    time_indexed = False

    spec: StatefulSpec
    #: envelope columns left out of the records that cross into and out of the operator,
    #: the same for every record (``kspark_server.chain.constant_widener``'s JSON; the
    #: compiler sets it): put back while the operator works, taken out of its output
    constants_json = ""

    def __init__(self, spec: StatefulSpec) -> None:
        self.spec = check_spec(spec)
        self.columns = [f["name"] for f in _schema_fields(spec.output_schema)]
        #: the output records' Arrow schema (as :func:`transport.operator_schema` declares)
        self.out_schema = transport.arrow_schema(spec.output_schema, spec.packed.out)

    def init(self, handle: StatefulProcessorHandle) -> None:
        store = self.spec.store
        self.base = handle.getMapState(store, _CHUNK, _BLOB)
        self.log = handle.getListState(taskstate.log_name(store), _BLOB)
        self.version = handle.getValueState(taskstate.version_name(store), _VERSION)
        self.kind = self.spec.kind
        self.versioned = self.spec.versioned
        #: keys whose entries the current batch changed (the processors add to it)
        self.touched: set[Any] = set()
        # tests set it: check every logged change against the state it stands for
        self.check_log = os.environ.get("KSPARK_CHECK_STATE_LOG") == "1"
        # ... and log changes against small bases too, so tests take the log path
        self.min_base = 0 if self.check_log else taskstate.MIN_BASE_BYTES
        #: the size of a base chunk (``$KSPARK_BASE_CHUNK_BYTES`` lowers it in tests)
        self.chunk_bytes = taskstate.chunk_bytes()
        self.guard = handling.Guard(self.spec.handling, handling.json_columns(self.spec))
        packed = self.spec.packed
        # msgspec parses JSON text about three times as fast as the json module
        self.unpack_value = msgspec.json.decode if packed.value else _identity
        self.pack_out = json.dumps if packed.out else _identity
        #: the constant columns' names and the function that puts them back, built once
        #: per worker rather than per task and batch
        self.widener: tuple[list[str], Any] = (
            constant_widener(self.constants_json) if self.constants_json else ([], None)
        )
        self.decoders: dict[str, Any] = {"headers": headers_from_text}
        if packed.value:
            self.decoders["value"] = msgspec.json.decode
        self.setup()

    def setup(self) -> None:
        """Build codecs; called once per worker."""

    def keys(self, st: Any, batch: Batch) -> list[Any]:
        """The state keys the batch may read or change (their entries are loaded)."""
        raise NotImplementedError

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
        state)."""
        ver = self.version.get() if self.version.exists() else None
        if ver is None:  # a new task
            inc, sizes = uuid.uuid4().hex, [0, 0, 0, 0, 0]
        else:
            inc, sizes = str(ver[0]), [int(v or 0) for v in ver[1:]]
        local = localstore.TaskStore.open(localstore.root_dir(), self.spec.store, inc, task)
        if ver is None:
            local.reset([], {}, (inc, 0))
        elif local.version != (inc, sizes[0]):
            log = [t[0] for t in self.log.get()] if sizes[3] else []
            index_of = None
            if self.time_indexed:
                time_of, unpack = self.time_of, stateenc.unpack

                def index_of(k: bytes, e: bytes) -> bytes:
                    return localstore.time_key(time_of(unpack(e)), k)

            local.rebuild(self._chunks(sizes[4]), log, (inc, sizes[0]), index_of)
        return local, inc, sizes, ver is not None

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
        the batch asks the state store nothing more: each question is a round trip to the
        JVM."""
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

    def handleInitialState(self, key: Any, initialState: pd.DataFrame, timerValues: Any) -> None:
        # a rescaled app starts from the old app's state, re-split by task (kspark rescale):
        # the task's base chunks, possibly over several calls
        numbers = (
            initialState["chunk"].tolist() if "chunk" in initialState else [0] * len(initialState)
        )
        rows = [
            (int(c), b)
            for c, b in zip(numbers, initialState["blob"].tolist(), strict=True)
            if b is not None
        ]
        if not rows:
            return
        ver = self.version.get() if self.version.exists() else None
        inc = uuid.uuid4().hex if ver is None else str(ver[0])
        n_chunks = 0 if ver is None else int(ver[5])
        base_bytes = 0 if ver is None else int(ver[2])
        for c, blob in rows:
            self.base.updateValue((c,), (blob,))
            n_chunks = max(n_chunks, c + 1)
            base_bytes += len(blob)
        # batch 0 of a new incarnation: no local store has it, so the first batch rebuilds
        self.version.update((inc, 0, base_bytes, 0, 0, n_chunks))

    def handleInputRows(
        self, key: Any, rows: Iterator[pd.DataFrame], timerValues: Any
    ) -> Iterator[pd.DataFrame]:
        # the task's records arrive packed (kspark_server.transport), and leave so
        table = transport.unpack_table(b for f in rows for b in f["ks_rows"].tolist())
        if table is None or not table.num_rows:
            return
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
        if result is not None and result.num_rows:
            if constant_names:
                result = result.drop_columns(constant_names)
            yield pd.DataFrame({"ks_rows": [transport.pack_table(result)]})

    def extra_side(self, st: Any, task: int, entries: int) -> list[dict[str, Any]]:
        return []

    def emitter(self) -> Emitter:
        """Where :meth:`process` puts its output rows (an aggregation's has its own)."""
        return Emitter()

    def close(self) -> None:
        pass


def _schema_fields(schema_json: str) -> list[dict[str, Any]]:
    import json

    fields: list[dict[str, Any]] = json.loads(schema_json)["fields"]
    return fields


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
        self.processor = s.processor
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
        self.unpack_table = msgspec.json.decode if s.packed.tvalue else _identity
        self.store_plain = not s.packed.tvalue
        self.expired_puts = 0

    def keys(self, st: Any, batch: Batch) -> list[Any]:
        # the batch's keys (both sides) and those of stream records buffered for grace
        hashable = codec.hashable
        column = batch.table.column("key")
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            found = set(pc.unique(column).drop_null().to_pylist())
        else:
            found = {k if type(k) is str else hashable(k) for k in batch.keys if k is not None}
        for r in st["buffer"]:
            k = r.get("key")
            if k is not None:
                found.add(k if type(k) is str else hashable(k))
        return list(found)

    def store(self, st: Any) -> VersionedStore:
        return VersionedStore(st["table"], self.retention)

    def _lookup(self, st: Any, store: VersionedStore | None, key: Any, ts: int) -> tuple[bool, Any]:
        """(join?, table value) for a stream record, by the KIP-914 rules."""
        if key is None:
            return self.left, None
        hk = codec.hashable(key)
        if store is not None:
            tv = store.value_at(hk, ts)
        else:
            tv = st["table"].get(hk)
        return (tv is not None or self.left), tv

    def _joined(self, key: Any, value: Any, tv: Any, row: Any) -> tuple[bool, Any]:
        origin = "KEY"
        try:  # as in process: a refused stored value goes to the deserialization handler
            k = self.skdec(key)
            origin = "VALUE"
            v = self.svdec(self.unpack_value(value))
            t = None if tv is None else self.tvdec(self.unpack_table(tv))
        except Exception as exc:
            self.guard.decode_failed(self.processor, row, exc, origin)
            return False, None
        args = (k, v, t) if self.with_key else (v, t)
        joiner, venc, pack = self.joiner, self.venc, self.pack_out
        return self.guard.call(
            self.processor, lambda *a: pack(venc(joiner(*a))), args, row, record=(k, v)
        )

    def _join_one(self, batch: Batch) -> Callable[[int, Any, Any, Any], Any]:
        """The join of one stream record of ``batch`` (its position, key, value and table
        value): the packed output value, or ``_HANDLED`` where the decoding or the joiner
        failed and the exception handler took the record. One closure per batch, shared
        by the record-by-record and the columnar paths."""
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
                guard.decode_failed(processor, batch.row(i), exc, origin)
                return _HANDLED
            try:
                return pack(venc(joiner(k, v, t) if with_key else joiner(v, t)))
            except Exception as exc:
                guard.on_error(processor, (k, v), batch.row(i), exc)
                return _HANDLED

        return join_one

    def process(self, st: Any, batch: Batch, task: int, out: Emitter) -> None:
        if self.versioned and not self.grace and self._process_asof(st, batch, task, out):
            return
        jside = batch.col("ks_jside")
        values = batch.col("value")
        tvalues = batch.col("ks_tvalue")
        keys, tss, hashes = batch.keys, batch.ts, batch.hashes
        store = self.store(st) if self.versioned else None
        table = st["table"]
        khash: dict[Any, int] = st["hash"]
        touched = self.touched
        grace = self.grace
        stream_time = st["stream_time"]
        hashable, plain, store_plain = codec.hashable, codec.plain, self.store_plain
        left = self.left
        join_one = self._join_one(batch)
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
                reason = "null-value" if values[i] is None else "null-key"
                self._drop(task, reason, batch, i)
            elif grace > 0 and ts + grace > stream_time:
                st["buffer"].append(batch.row(i).to_dict([*batch.columns, "ks_hash", "ks_task"]))
            else:
                # the hot path, inlined: _lookup and _joined without their call overhead
                if key is None:
                    tv = None
                elif store is not None:
                    tv = store.value_at(key if type(key) is str else hashable(key), ts)
                else:
                    tv = table.get(key if type(key) is str else hashable(key))
                if tv is None and not left:
                    if store is not None and not store.in_retention(ts):
                        # too old to look up: the inner join drops it, and says so
                        self._drop(task, "expired-stream-record", batch, i)
                    continue
                res = join_one(i, key, values[i], tv)
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
        side = _ints(table, "ks_jside", 0)[pos] == 1
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
        hashes = _ints(table, "ks_hash", 0)[pos[p[kept]]].tolist()
        khash: dict[Any, int] = st["hash"]
        for c, a, b in _runs(k_code):
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
        join_one = self._join_one(batch)
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
        limit = st["stream_time"] - self.grace
        ready = [r for r in st["buffer"] if int(r["timestamp"]) <= limit]
        if not ready:
            return
        st["buffer"] = [r for r in st["buffer"] if int(r["timestamp"]) > limit]
        ready.sort(key=lambda r: (int(r["timestamp"]), r["ks_seq"], r["ks_sub"]))
        for r in ready:
            ts = int(r["timestamp"])
            go, tv = self._lookup(st, store, r["key"], ts)
            if not go and store is not None and not store.in_retention(ts):
                row = DictRow(r, self.decoders)
                self.guard.drop(
                    self.processor,
                    f"{self.guard.subtopology}_{task}",
                    "expired-stream-record",
                    row,
                    (row.get("key"), r["value"]),
                )
            if go:
                ok, res = self._joined(r["key"], r["value"], tv, DictRow(r, self.decoders))
                if ok:
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
        t = f"{self.guard.subtopology}_{task}"
        rows = [
            {
                "kind": SideKind.STORE_ENTRIES,
                "processor": self.spec.store,
                "task": t,
                "count": entries,
            }
        ]
        if n:
            rows.append(
                {"kind": SideKind.EXPIRED_PUTS, "processor": self.processor, "task": t, "count": n}
            )
        return rows


def make_processor(spec: StatefulSpec) -> TaskProcessor:
    """The operator of ``spec``. (Aggregations and window joins build on this module, so
    they are imported here; this runs on the client, which pickles the processor.)"""
    if isinstance(check_spec(spec), DedupSpec):
        return DedupProcessor(spec)
    if isinstance(spec, AggregateSpec):
        from kspark_server.aggregate import AggregateProcessor

        return AggregateProcessor(spec)
    if spec.kind == "processor":
        from kspark_server.processor_op import UserProcessor

        return UserProcessor(spec)
    if spec.kind == "windowjoin":
        from kspark_server.windowjoin import WindowJoinProcessor

        return WindowJoinProcessor(spec)
    return JoinProcessor(spec)
