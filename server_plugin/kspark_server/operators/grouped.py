"""The stateful operators' runner: a stateful operator under ``applyInPandasWithState``.

Spark hands the function each task's records of a micro-batch straight from the shuffle
(no packing pass before it) and the task's group state: the committed version of the
task's state, whose base and changes are kspark's own files in the checkpoint
(:mod:`kspark_server.taskfiles`), which the operator, a
:class:`~kspark_server.operators.base.TaskProcessor`, reads and writes. See
docs/design/grouped-runner.md.

The operator's output records leave it as rows of the envelope's schema (no packing, no
unpacking pass after it): each task's output is one pandas frame (:func:`output_frame`)
whose columns are views of the operator's Arrow columns, which pyspark's worker hands back
to Arrow without a Python object per value. One exception: the ``headers`` column travels
as JSON text (:data:`JSON_COLUMNS`), read back by ``from_json`` in the JVM, since pyspark
converts list columns row by row in Python.
"""

from __future__ import annotations

import base64
import json
import os
import signal
from collections.abc import Iterator
from typing import Any

import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
from pandas.arrays import ArrowExtensionArray

from kspark_server import placement, structcols, taskfiles, transport
from kspark_server.operators.base import TaskProcessor
from kspark_server.operators.registry import make_operator
from kspark_server.spec import StatefulSpec, check_spec

__all__ = ["JSON_COLUMNS", "GroupedOperator", "frame_table", "output_frame", "output_struct"]

#: Envelope columns that leave the operator as JSON text (``from_json`` reads them back in
#: the JVM), with their Arrow types.
JSON_COLUMNS: dict[str, pa.DataType] = {
    "headers": pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))
}


class _Dtype(pd.ArrowDtype):  # type: ignore[misc]
    """:class:`_Column`'s dtype: the arrays pandas builds for it (padding, concatenation)
    are :class:`_Column` too."""

    @classmethod
    def construct_array_type(cls) -> type[_Column]:
        return _Column

    @property
    def name(self) -> str:
        return f"{self.pyarrow_dtype}[kspark]"


class _Column(ArrowExtensionArray):  # type: ignore[misc]
    """An Arrow-backed pandas column that hands pyspark one Arrow array.

    pandas keeps an Arrow column as a chunked array and concatenates frames chunk by chunk
    (pyspark's worker concatenates the frames of a partition's groups and pads them with
    empty rows); pyspark builds its record batch from ``pa.Array.from_pandas``, which
    returns a plain Arrow-backed column's chunked array as it is, and fails on more than
    one chunk. This column gives one array, whatever its chunks.
    """

    def __init__(self, values: pa.Array | pa.ChunkedArray) -> None:
        super().__init__(values)
        self._dtype = _Dtype(self._pa_array.type)

    def __arrow_array__(self, type: pa.DataType | None = None) -> pa.Array:
        chunks = [c for c in self._pa_array.iterchunks() if len(c)]
        # one task's rows (the usual partition) and empty padding: no copy
        array = chunks[0] if len(chunks) == 1 else self._pa_array.combine_chunks()
        return array if type is None or array.type == type else array.cast(type)


def _has_map(t: pa.DataType) -> bool:
    if pa.types.is_map(t):
        return True
    if pa.types.is_struct(t):
        return any(_has_map(t.field(i).type) for i in range(t.num_fields))
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return _has_map(t.value_type)
    return False


def _python(v: Any, t: pa.DataType) -> Any:
    """A nested value as pyspark's converters take it: a map as a dict (Arrow gives its
    entries as pairs)."""
    if v is None:
        return None
    if pa.types.is_map(t):
        return {_python(k, t.key_type): _python(x, t.item_type) for k, x in v}
    if pa.types.is_struct(t):
        return {
            t.field(i).name: _python(v[t.field(i).name], t.field(i).type)
            for i in range(t.num_fields)
        }
    if pa.types.is_list(t) or pa.types.is_large_list(t):
        return [_python(x, t.value_type) for x in v]
    return v


def _headers_json(column: pa.ChunkedArray) -> pa.Array:
    """Headers as JSON text: ``[{"key": ..., "value": base64}]``, ``"[]"`` for none, null
    for null (Spark's ``from_json`` reads a binary field from base64). Records without
    headers cost no Python object."""
    column = column.combine_chunks() if isinstance(column, pa.ChunkedArray) else column
    lengths = pc.list_value_length(column)
    empty = pc.if_else(
        pc.is_valid(column), pa.scalar("[]", pa.string()), pa.scalar(None, pa.string())
    )
    if not pc.any(pc.greater(lengths, 0)).as_py():
        return empty
    texts = empty.to_pylist()
    for i in pc.indices_nonzero(pc.fill_null(pc.greater(lengths, 0), False)).to_pylist():
        texts[i] = json.dumps(
            [
                {
                    "key": h["key"],
                    "value": None if h["value"] is None else base64.b64encode(h["value"]).decode(),
                }
                for h in column[i].as_py()
            ]
        )
    return pa.array(texts, pa.string())


def output_frame(table: pa.Table) -> pd.DataFrame:
    """An operator's output records as the pandas frame ``applyInPandasWithState`` takes,
    which pyspark turns back into exactly ``table`` (its ``headers`` as JSON text).

    Flat columns are Arrow-backed (no copy, nulls and 64-bit integers as they are); other
    nested columns (a struct key) are Python values, which pyspark converts row by row.

    Example
    -------
    >>> t = pa.table({"key": pa.array([b"k", None]), "offset": pa.array([2**62, None])})
    >>> frame = output_frame(t)
    >>> pa.Table.from_pandas(frame).column("offset").to_pylist()
    [4611686018427387904, None]
    """
    columns: dict[str, pd.Series] = {}
    for name, col in zip(table.column_names, table.columns, strict=True):
        if name in JSON_COLUMNS:
            columns[name] = pd.Series(_Column(pa.chunked_array([_headers_json(col)])))
        elif pa.types.is_nested(col.type):
            values = col.to_pylist()
            if _has_map(col.type):
                values = [_python(v, col.type) for v in values]
            columns[name] = pd.Series(values, dtype=object)
        else:
            columns[name] = pd.Series(_Column(col))
    return pd.DataFrame(columns)


def frame_table(frames: list[pd.DataFrame], schema: Any) -> pa.Table:
    """What Spark reads from the frames an operator yields (:func:`output_frame`), in the
    declared Spark ``schema`` (:func:`output_struct`): pyspark's own conversion, as its
    ``applyInPandasWithState`` worker runs it, then the JSON columns read back. The
    in-process engine and tests use it."""
    from pyspark.sql.conversion import PandasToArrowConversion
    from pyspark.sql.types import StructField, StructType

    n = sum(len(f) for f in frames)
    merged = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    batch = PandasToArrowConversion.convert(
        [merged],
        StructType([StructField("_1", schema)]),
        timezone="UTC",
        safecheck=False,
        arrow_cast=True,
        assign_cols_by_name=True,
    )
    table = pa.Table.from_batches([pa.RecordBatch.from_struct_array(batch.column(0))])
    for name, type_ in JSON_COLUMNS.items():
        if name in table.column_names:
            values = [
                None
                if text is None
                else [
                    {
                        "key": h["key"],
                        "value": None if h["value"] is None else base64.b64decode(h["value"]),
                    }
                    for h in json.loads(text)
                ]
                for text in table.column(name).to_pylist()
            ]
            table = table.set_column(table.column_names.index(name), name, pa.array(values, type_))
    return table.slice(0, n)


def output_struct(schema: Any) -> Any:
    """The Spark schema an operator's frames declare (``outputStructType``): ``schema``
    with the :data:`JSON_COLUMNS` as strings."""
    from pyspark.sql.types import StringType, StructField, StructType

    return StructType(
        [
            StructField(f.name, StringType(), True) if f.name in JSON_COLUMNS else f
            for f in schema.fields
        ]
    )


class GroupedOperator:
    """The function ``applyInPandasWithState`` runs for a stateful ``spec``: each task's
    output records as one frame (:func:`output_frame`), in the operator's output schema
    without the constant columns (:func:`output_struct` declares it to Spark).

    ``constants_json`` describes the envelope columns left out of the records
    (:func:`kspark_server.chain.constant_widener`); ``input_schema_json`` is the records'
    Spark schema, in which their pandas frames are read back into Arrow; ``state_root``
    is the folder of the operators' files (:func:`kspark_server.taskfiles.state_root`);
    ``seeds`` (task -> group state) name the files a task of a rescaled checkpoint starts
    from until it commits a group state of its own (:mod:`kspark_server.regroup`).

    Struct columns cross the Python worker as flat columns (:mod:`kspark_server.structcols`):
    ``nested`` (name -> Spark type as JSON) the records' columns that arrive so, put back
    together before the operator; ``flat_out`` the output's columns that leave so
    (:meth:`with_flat_output`).
    """

    def __init__(
        self,
        spec: StatefulSpec,
        constants_json: str,
        input_schema_json: str,
        state_root: str,
        seeds: dict[int, tuple[Any, ...]] | None = None,
        nested: dict[str, Any] | None = None,
    ) -> None:
        self.spec = check_spec(spec)
        self.constants_json = constants_json
        self.input_schema_json = input_schema_json
        self.state_root = state_root
        self.seeds = dict(seeds or {})
        self.nested = dict(nested or {})
        self.flat_out: list[str] = []
        self._operator: TaskProcessor | None = None
        self._schema: pa.Schema | None = None
        self._nested_types: dict[str, pa.DataType] = {}

    def with_flat_output(self, columns: list[str]) -> GroupedOperator:
        """This function, its output's struct columns ``columns`` leaving as flat columns
        (:func:`kspark_server.structcols.unnest`)."""
        other = GroupedOperator(
            self.spec,
            self.constants_json,
            self.input_schema_json,
            self.state_root,
            self.seeds,
            self.nested,
        )
        other.flat_out = list(columns)
        return other

    def __getstate__(self) -> dict[str, Any]:
        # built on the worker
        return {**self.__dict__, "_operator": None, "_schema": None, "_nested_types": {}}

    def operator(self) -> TaskProcessor:
        """The operator, built on first use (on the worker)."""
        if self._operator is None:
            self._operator = make_operator(self.spec, self.constants_json)
        return self._operator

    def table(self, frames: list[Any]) -> pa.Table:
        """The task's records as one Arrow table in the input's schema (Arrow tables, as
        the in-process engine hands them, as they are)."""
        if all(isinstance(f, pa.Table) for f in frames):
            return frames[0] if len(frames) == 1 else pa.concat_tables(frames)
        if self._schema is None:
            self._schema = transport.arrow_schema(self.input_schema_json)
            if self.nested:
                fields = [
                    {"name": n, "type": t, "nullable": True, "metadata": {}}
                    for n, t in self.nested.items()
                ]
                nested = transport.arrow_schema(json.dumps({"type": "struct", "fields": fields}))
                self._nested_types = {f.name: f.type for f in nested}
        # frame by frame: pandas' concat of object columns checks every cell
        table = pa.concat_tables(
            [
                pa.Table.from_pandas(f, schema=self._schema, preserve_index=False, nthreads=1)
                for f in frames
            ]
        )
        return structcols.nest(table, self._nested_types) if self._nested_types else table

    def __call__(self, key: Any, rows: Iterator[Any], state: Any) -> Iterator[Any]:
        frames = [f for f in rows if len(f)]
        if not frames:
            return
        op = self.operator()
        task = placement.task_of(int(key[0]))
        committed = state.get if state.exists else self.seeds.get(task)
        files = taskfiles.TaskFiles(self.state_root, self.spec.store, task, committed)
        if files.just_compacted():
            # the files the committed base replaced, and failed attempts' files
            files.collect()
        op.attach(files)
        result = op.run_task(key, self.table(frames))
        if self.spec.state.kill_after_files == files.batch_of_write():
            # a test's fault: the task dies between its files and the batch's commit
            os.kill(os.getpid(), signal.SIGKILL)
        # the batch's files are written and fsynced: the version that names them commits
        # with the micro-batch
        state.update(files.committed())
        if result is not None:
            yield output_frame(
                structcols.unnest(result, self.flat_out) if self.flat_out else result
            )


class SubtopologyOperators:
    """The function of ONE ``applyInPandasWithState`` that runs several stateful operators
    (docs/design/sub-topologies.md): each group is one task of one operator (its task key
    is that operator's, :func:`kspark_server.placement.task_keys`), and its rows name the
    operator in ``ks_op``. The group goes to that operator's :class:`GroupedOperator`,
    with the operator's own column names (``inputs[i]``: the union's name to the
    operator's), and its output frame leaves in the union's output columns
    (``outputs[i]``: the operator's name to the union's; the others null).
    """

    def __init__(
        self,
        operators: list[GroupedOperator],
        inputs: list[dict[str, str]],
        outputs: list[dict[str, str]],
        output_schema_json: str,
    ) -> None:
        self.operators = operators
        self.inputs = inputs
        self.outputs = outputs
        self.output_schema_json = output_schema_json
        self._columns: list[str] | None = None

    def columns(self) -> list[str]:
        """The union's output columns, in the declared order."""
        if self._columns is None:
            fields = json.loads(self.output_schema_json)["fields"]
            self._columns = [f["name"] for f in fields]
        return self._columns

    def __call__(self, key: Any, rows: Iterator[Any], state: Any) -> Iterator[Any]:
        frames = [f for f in rows if len(f)]
        if not frames:
            return
        op = int(frames[0]["ks_op"].iloc[0])
        names = self.inputs[op]
        mine = [f[list(names)].rename(columns=names) for f in frames]
        outputs = self.outputs[op]
        for frame in self.operators[op](key, iter(mine), state):
            yield self.widened(frame, outputs, op)

    def widened(self, frame: pd.DataFrame, names: dict[str, str], op: int) -> pd.DataFrame:
        """An operator's output frame in the union's columns: its own renamed, the other
        operators' null (typed by pyspark's conversion), ``ks_op`` its number."""
        n = len(frame)
        renamed = frame.rename(columns=names)
        columns: dict[str, pd.Series] = {}
        for name in self.columns():
            if name == "ks_op":
                columns[name] = pd.Series(
                    _Column(pa.chunked_array([pa.array([op] * n, pa.int32())]))
                )
            elif name in renamed.columns:
                columns[name] = renamed[name]
            else:
                columns[name] = pd.Series([None] * n, dtype=object)
        return pd.DataFrame(columns)
