"""Stateful operators, grouped by task, under one of two runners.

``transform_with_state`` (the default): ``transformWithStateInPandas``; records cross
into the operator packed, one row per task and Arrow batch, and leave it packed too
(``kspark_server.transport``): Spark's runner would otherwise handle them row by row.

``apply_in_pandas``: ``applyInPandasWithState``; records reach the operator straight from
the shuffle, as Arrow-backed frames, and leave it as rows of the envelope's schema (no
unpacking pass); the state lives in kspark's own files in the checkpoint
(``kspark_server.taskfiles``, docs/design/grouped-runner.md).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable
from typing import Any

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.group import GroupedData
from pyspark.sql.types import IntegerType, StructField, StructType

from kspark.compiler import stages as st
from kspark.compiler.lowering.columns import dtype, flat_schema, schema
from kspark.compiler.lowering.constants import add_constants, constant_column, describe_constants
from kspark.compiler.lowering.sources import read_constants
from kspark.compiler.resume import Resume
from kspark.errors import CompilationError
from kspark_server import envelope as env
from kspark_server.spec import Packed

__all__ = [
    "GroupedPart",
    "cogroup",
    "grouped_operator",
    "grouped_part",
    "grouped_sinks",
    "shared_layout",
    "stateful",
    "task_column",
]


def task_column(column: str, n: int, operator: int = 0) -> Column:
    """The task key of a record: task ``pmod(hash, n)``'s group key, which Spark places in
    shuffle partition ``t``, one task per partition (:mod:`kspark_server.placement`); the
    ``operator``-th stateful operator of a query has keys of its own."""
    from kspark_server.placement import task_keys

    keys = ",".join(str(k) for k in task_keys(int(n), int(operator)))
    return F.expr(f"element_at(array({keys}), pmod(hash(`{column}`), {int(n)}) + 1)").cast("int")


def _hash(column: str) -> Column:
    """The Spark hash a task is derived from; state entries keep it, so that a rescale can
    re-split them as ``pmod(hash, M)``."""
    return F.expr(f"hash(`{column}`)")


def stateful(
    stage: st.Stateful,
    df_of: Callable[[st.Stage], DataFrame],
    spark: SparkSession,
    resume: Resume | None,
    checkpoint: str | None = None,
) -> DataFrame:
    """The operator of ``stage`` over its input (for a join, the stream and the table in
    one union), its output records in the envelope's columns, under the
    ``transform_with_state`` runner (the ``apply_in_pandas`` runner's operators are
    lowered together: :func:`grouped_part`, :func:`grouped_operators`)."""
    from kspark_server.operators.shipped import ShippedOperator
    from kspark_server.transport import OUTPUT_SCHEMA_DDL, PACKED_SCHEMA_DDL, pack_by_task

    spec = stage.spec
    tasked, constants, constants_json = _tasked(stage, df_of, 0)
    grouped = tasked.mapInArrow(pack_by_task, flat_schema(PACKED_SCHEMA_DDL)).groupBy("ks_task")
    result: DataFrame = grouped.transformWithStateInPandas(
        # the operator is built on the workers, from its spec
        statefulProcessor=ShippedOperator(spec, constants_json),
        outputStructType=flat_schema(OUTPUT_SCHEMA_DDL),
        outputMode="Append",
        timeMode="None",
        initialState=_initial_state(stage, spark, resume),
    )
    return _unpacked(result, stage, constants)


def _tasked(
    stage: st.Stateful, df_of: Callable[[st.Stage], DataFrame], operator: int
) -> tuple[DataFrame, dict[str, Any], str]:
    """The operator's input records with their hash and task key (``operator``'s keys,
    :func:`kspark_server.placement.task_keys`), without the constant columns; the
    constants and their description for the operator."""
    stream = _json_values(_joined_input(stage, df_of), stage.spec.packed)
    tasked = stream.withColumn("ks_hash", _hash(stage.task_column)).withColumn(
        "ks_task", task_column(stage.task_column, stage.num_partitions, operator)
    )
    if stage.broadcast_table:
        tasked = _broadcast_table(tasked, stage.num_partitions, operator)
    # columns that are the same for every record stay out of both Python passes
    # (docs/design/stateful-runner.md); the operator puts them back while it works
    constants = stateful_constants(stage)
    constants_json = ""
    if constants:
        constants_json = describe_constants(constants, _packed_columns(stage))
        tasked = tasked.drop(*constants)
    return tasked, constants, constants_json


@dataclasses.dataclass(frozen=True)
class GroupedPart:
    """One stateful operator's side of the ``apply_in_pandas`` runner's
    ``applyInPandasWithState``: its tasked input, its function, the output columns it
    declares (without the constants) and the constants it puts back after."""

    stage: st.Stateful
    tasked: DataFrame
    fn: Any
    out: StructType
    constants: dict[str, Any]


def grouped_part(
    stage: st.Stateful,
    df_of: Callable[[st.Stage], DataFrame],
    resume: Resume | None,
    checkpoint: str | None,
    operator: int = 0,
) -> GroupedPart:
    """The ``apply_in_pandas`` runner's side of ``stage``, the ``operator``-th stateful
    operator of its query: grouped by task, the records straight from the shuffle, the
    state in kspark's files under the checkpoint (docs/design/grouped-runner.md)."""
    from kspark_server.operators.grouped import GroupedOperator, output_struct
    from kspark_server.taskfiles import state_root
    from kspark_server.transport import operator_schema

    spec = stage.spec
    if checkpoint is None:
        raise CompilationError(
            f"{spec.processor}: stateful_runner='apply_in_pandas' keeps state in the "
            "query's checkpoint, and this DataFrame was built without one: build it "
            "through StreamsApp",
            processor=spec.processor,
        )
    root = state_root(checkpoint)
    if "://" in root:
        raise CompilationError(
            f"{spec.processor}: stateful_runner='apply_in_pandas' writes its state files "
            f"with the executors' file system, and checkpoint {checkpoint} is not a local "
            "or shared path: use a path (or a file: URI) that every executor sees",
            processor=spec.processor,
        )
    with contextlib.suppress(OSError):
        # marks the checkpoint as this runner's (StreamsApp checks it at a restart)
        os.makedirs(root, exist_ok=True)
    if resume is not None and spec.store in resume.initial_state:
        raise CompilationError(
            f"{spec.processor}: a rescaled checkpoint cannot start under "
            "stateful_runner='apply_in_pandas' yet; run it with the default runner "
            "('transform_with_state')",
            processor=spec.processor,
        )
    tasked, constants, constants_json = _tasked(stage, df_of, operator)
    seeds = resume.task_seeds.get(spec.store) if resume is not None else None
    fn = GroupedOperator(spec, constants_json, tasked.schema.json(), root, seeds)
    out = operator_schema(spec.output_schema, spec.packed.out)
    declared = output_struct(StructType([f for f in out.fields if f.name not in constants]))
    return GroupedPart(stage=stage, tasked=tasked, fn=fn, out=declared, constants=constants)


def grouped_operator(part: GroupedPart) -> DataFrame:
    """The output records of an app's one ``apply_in_pandas`` operator, as the envelope's
    rows."""
    return _grouped_output(_apply(part.tasked, part.fn, part.out), part)


def grouped_sinks(parts: list[GroupedPart], sinks: list[int]) -> DataFrame:
    """The output records of several ``apply_in_pandas`` operators from ONE
    ``applyInPandasWithState`` (Spark runs one per query), as rows of the sinks' union
    (:func:`kspark.compiler.lowering.sinks.union_sinks`): operator ``i``'s records are
    sink ``sinks[i]``'s, the internal topic that its readers read
    (docs/design/sub-topologies.md).

    The parts' inputs go in one union, grouped by a task key that names the operator and
    the task, and each group is handed to its operator. The operator's output is read
    along one path, one projection into the sinks' columns: a plan that read it twice
    would hold the operator twice, which Spark refuses."""
    from kspark_server.operators.grouped import JSON_COLUMNS, SubtopologyOperators

    ins = shared_layout([p.tasked.schema for p in parts])
    outs = shared_layout([p.out for p in parts])
    tasked: DataFrame | None = None
    for i, p in enumerate(parts):
        df = p.tasked.select(
            *[F.col(name).alias(ins.names[i][name]) for name in p.tasked.columns],
            F.lit(i).cast("int").alias(OPERATOR_COLUMN),
        )
        tasked = df if tasked is None else tasked.unionByName(df, allowMissingColumns=True)
    assert tasked is not None
    out = StructType([*outs.struct.fields, StructField(OPERATOR_COLUMN, IntegerType())])
    fn = SubtopologyOperators(
        [p.fn for p in parts],
        [{v: k for k, v in ins.names[i].items()} for i in range(len(parts))],
        outs.names,
        out.json(),
    )
    result = _apply(tasked, fn, out)
    op = F.col(OPERATOR_COLUMN)

    def column(i: int, name: str) -> Column:
        """Operator ``i``'s envelope column ``name`` as its output record has it."""
        p = parts[i]
        if name in p.constants:
            value = p.constants[name]
            if isinstance(value, dict):  # the same as another column
                return column(i, value["same_as"])
            return constant_column(name, value)
        spec = p.stage.spec
        c = F.col(outs.names[i][name])
        full = operator_schema_of(p)
        if name in JSON_COLUMNS:
            json_type: Any = full[name].dataType
            return F.from_json(c, json_type)
        if name == "value" and spec.packed.out:
            value_type: Any = schema(spec.output_schema)["value"].dataType
            return F.from_json(c, value_type)
        return c

    def per_operator(name: str, only: int | None = None) -> Column:
        picked: Column | None = None
        for i in range(len(parts)):
            if only is not None and i != only:
                continue
            c = column(i, name)
            picked = F.when(op == i, c) if picked is None else picked.when(op == i, c)
        assert picked is not None
        return picked

    return result.select(
        _sink_index(op, sinks),
        *[per_operator("key", i).alias(f"k{sinks[i]}") for i in range(len(parts))],
        *[per_operator("value", i).alias(f"v{sinks[i]}") for i in range(len(parts))],
        *[per_operator(name).alias(name) for name in env.TAIL],
    )


def _sink_index(op: Column, sinks: list[int]) -> Column:
    picked: Column | None = None
    for i, j in enumerate(sinks):
        picked = F.when(op == i, F.lit(j)) if picked is None else picked.when(op == i, F.lit(j))
    assert picked is not None
    return picked.alias("ks_sink")


def operator_schema_of(part: GroupedPart) -> StructType:
    """The operator's output records' Spark schema as they leave it."""
    from kspark_server.transport import operator_schema

    spec = part.stage.spec
    result: StructType = operator_schema(spec.output_schema, spec.packed.out)
    return result


def _apply(tasked: DataFrame, fn: Any, out: StructType) -> DataFrame:
    from pyspark.sql.streaming.state import GroupStateTimeout

    from kspark_server.taskfiles import GROUP_STATE_DDL

    result: DataFrame = tasked.groupBy("ks_task").applyInPandasWithState(
        fn,
        outputStructType=out,
        stateStructType=GROUP_STATE_DDL,
        outputMode="Append",
        timeoutConf=GroupStateTimeout.NoTimeout,
    )
    return result


#: The column that names a record's operator in a shared ``applyInPandasWithState``.
OPERATOR_COLUMN = "ks_op"


@dataclasses.dataclass(frozen=True)
class SharedLayout:
    """The columns of several operators' rows in one union: a column that every operator
    having it types alike is shared, others are each operator's own (``ks_o<i>_<name>``,
    as the sinks' ``k<i>``/``v<i>``). ``names[i]`` maps operator ``i``'s columns to the
    union's."""

    struct: StructType
    names: list[dict[str, str]]


def shared_layout(schemas: list[StructType]) -> SharedLayout:
    """The union's layout of ``schemas`` (:class:`SharedLayout`), all columns nullable.

    >>> from pyspark.sql.types import LongType, StringType
    >>> a = StructType([StructField("key", StringType()), StructField("offset", LongType())])
    >>> b = StructType([StructField("key", LongType()), StructField("offset", LongType())])
    >>> lay = shared_layout([a, b])
    >>> lay.struct.names, lay.names[1]
    (['ks_o0_key', 'offset', 'ks_o1_key'], {'key': 'ks_o1_key', 'offset': 'offset'})
    """
    types: dict[str, set[str]] = {}
    for sch in schemas:
        for f in sch.fields:
            types.setdefault(f.name, set()).add(f.dataType.json())
    fields: dict[str, StructField] = {}
    names: list[dict[str, str]] = []
    for i, sch in enumerate(schemas):
        mine: dict[str, str] = {}
        for f in sch.fields:
            name = f.name if len(types[f.name]) == 1 else f"ks_o{i}_{f.name}"
            mine[f.name] = name
            fields.setdefault(name, StructField(name, f.dataType, True))
        names.append(mine)
    return SharedLayout(StructType(list(fields.values())), names)


def _grouped_output(result: DataFrame, part: GroupedPart) -> DataFrame:
    """One operator's output records as the envelope's rows: the JSON columns read back
    and the constants put back."""
    from kspark_server.operators.grouped import JSON_COLUMNS
    from kspark_server.transport import operator_schema

    spec = part.stage.spec
    out = operator_schema(spec.output_schema, spec.packed.out)
    for name in JSON_COLUMNS:
        if name in out.names and name not in part.constants:
            result = result.withColumn(name, F.from_json(name, out[name].dataType))
    return _restored(result, part.stage, part.constants)


def _joined_input(stage: st.Stateful, df_of: Callable[[st.Stage], DataFrame]) -> DataFrame:
    """The operator's input: its stream, or for a stream-table join the union of the
    stream's records (``ks_jside`` 0) and the table's (1, the value in ``ks_tvalue``)."""
    stream = df_of(stage.stream)
    if stage.table is None:
        return stream
    table = df_of(stage.table)
    tvalue_t = dtype(stage.table.value_type.spark_json())
    svalue_t = dtype(stage.stream.value_type.spark_json())
    names = [name for name, _ in env.ENVELOPE]
    global_table = stage.task_column == "ks_gkey"
    gkey: list[Column | str] = ["ks_gkey"] if global_table else []
    if stage.broadcast_table:
        # a global store's key may be of another type than the stream's: it travels in
        # ks_gkey, as a global table's does
        gkey = [F.lit(None).cast(dtype(stage.table.key_type.spark_json())).alias("ks_gkey")]
    left = stream.select(
        *names,
        F.lit(None).cast(tvalue_t).alias("ks_tvalue"),
        F.lit(0).alias("ks_jside"),
        *gkey,
    )
    right = table.select(
        *[F.lit(None).cast(svalue_t).alias("value") if c == "value" else F.col(c) for c in names],
        F.col("value").alias("ks_tvalue"),
        F.lit(1).alias("ks_jside"),
    )
    if global_table or stage.broadcast_table:
        # the stream's records carry their table key (JoinKeyStage), the table's updates
        # are keyed by it; ``key`` is the stream's own key, whose type the table's need
        # not share (a table update's is null)
        skey_t = dtype(stage.stream.key_type.spark_json())
        right = right.withColumn("ks_gkey", F.col("key")).withColumn(
            "key", F.lit(None).cast(skey_t)
        )
    return left.unionByName(right)


def _broadcast_table(tasked: DataFrame, n: int, operator: int) -> DataFrame:
    """``tasked`` with each table record (``ks_jside`` 1) once for every task: a
    processor's global store is whole in each task. A side row of the table's read (a
    dead letter, a count) stays one row, so it is reported once."""
    from kspark_server.placement import task_keys

    every = F.array(*[F.lit(k) for k in task_keys(int(n), operator)])
    update = (F.col("ks_jside") == 1) & F.col("ks_side").isNull()
    return tasked.withColumn(
        "ks_task", F.explode(F.when(update, every).otherwise(F.array(F.col("ks_task"))))
    )


def cogroup(stage: st.Cogroup, df_of: Callable[[st.Stage], DataFrame]) -> DataFrame:
    """The cogrouped streams' records in one union: each tagged with its input
    (``ks_input``), input 0's value in ``value``, input ``j``'s in ``ks_value<j>``, the
    other value columns null (each input keeps its own value type)."""
    names = [name for name, _ in env.ENVELOPE]
    types = [dtype(p.value_type.spark_json()) for p in stage.parts]
    out: DataFrame | None = None
    for i, part in enumerate(stage.parts):
        cols = [
            F.lit(None).cast(types[0]).alias("value") if c == "value" and i else F.col(c)
            for c in names
        ]
        cols.append(F.lit(i).cast("int").alias("ks_input"))
        cols += [
            (F.col("value") if j == i else F.lit(None).cast(types[j])).alias(f"ks_value{j}")
            for j in range(1, len(stage.parts))
        ]
        df = df_of(part).select(*cols)
        out = df if out is None else out.unionByName(df)
    assert out is not None
    return out


def _json_values(stream: DataFrame, packed: Packed) -> DataFrame:
    """Values that the operator reads travel as JSON text, which msgspec parses fast;
    everything else (headers, a deduplicated value) crosses as Arrow columns, by
    reference (docs/design/stateful-runner.md)."""
    # null fields stay in the text: a record's decoder reads each of its fields
    keep_nulls = {"ignoreNullFields": "false"}
    if packed.value:
        stream = stream.withColumn("value", F.to_json("value", keep_nulls))
    if packed.tvalue:
        stream = stream.withColumn("ks_tvalue", F.to_json("ks_tvalue", keep_nulls))
    return stream


def _packed_columns(stage: st.Stateful) -> list[str]:
    """The packed columns in order: a source's envelope (and for a join the table's value
    and side), then the hash and the task; constants are described by their positions
    here (no schema round trip)."""
    order = [name for name, _ in env.ENVELOPE]
    if stage.table is not None:
        order += ["ks_tvalue", "ks_jside"]
    if stage.task_column == "ks_gkey" or stage.broadcast_table:
        order.append("ks_gkey")
    return [*order, "ks_hash", "ks_task"]


def _initial_state(
    stage: st.Stateful, spark: SparkSession, resume: Resume | None
) -> GroupedData | None:
    """The state a rescaled app's operator starts from, grouped by task; None to start
    from the checkpoint's own."""
    if resume is None or stage.spec.store not in resume.initial_state:
        return None
    warm = spark.read.parquet(resume.initial_state[stage.spec.store])
    # each row one chunk of a task's base
    return warm.select("ks_task", "chunk", "blob").groupBy("ks_task")


def _unpacked(result: DataFrame, stage: st.Stateful, constants: dict[str, Any]) -> DataFrame:
    """The operator's packed output as envelope rows, by a vectorised step
    (``kspark_server.transport``), with the constant columns back."""
    from kspark_server.transport import operator_schema, unpack_rows

    spec = stage.spec
    unpacked = operator_schema(spec.output_schema, spec.packed.out)
    result = result.mapInArrow(
        unpack_rows, StructType([f for f in unpacked.fields if f.name not in constants])
    )
    return _restored(result, stage, constants)


def _restored(result: DataFrame, stage: st.Stateful, constants: dict[str, Any]) -> DataFrame:
    """The operator's output records with the constant columns back and a JSON-packed
    value parsed."""
    from kspark_server.transport import operator_schema

    spec = stage.spec
    result = add_constants(result, operator_schema(spec.output_schema, spec.packed.out), constants)
    if spec.packed.out:
        # a struct, list or map (json_packable)
        value_type: Any = schema(spec.output_schema)["value"].dataType
        result = result.withColumn("value", F.from_json("value", value_type))
    return result


def stateful_constants(stage: st.Stateful) -> dict[str, Any]:
    """The constant envelope columns (:func:`.sources.read_constants`) that a stateful
    operator's input and output share: for deduplication and stream-table joins, whose
    output records are their stream's records, straight after a source (both sources for
    a join: the constants they agree on). None for the other operators, whose output
    records they make themselves."""
    if stage.spec.kind not in ("dedup", "join") or not isinstance(stage.stream, st.Read):
        return {}
    found = read_constants(stage.stream)
    if stage.table is not None:
        if not isinstance(stage.table, st.Read):
            return {}
        other = read_constants(stage.table)
        found = {k: v for k, v in found.items() if k in other and other[k] == v}
    return found
