"""The stateful operators' lowering: all of an app's under ONE
``applyInPandasWithState`` (docs/design/grouped-runner.md, docs/design/sub-topologies.md).

Records reach an operator straight from the shuffle, as Arrow-backed frames, and leave it
as rows of the envelope's schema (no unpacking pass); the state lives in kspark's own
files in the checkpoint (``kspark_server.taskfiles``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from collections.abc import Callable
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import IntegerType, StructField, StructType

from kspark.compiler import stages as st
from kspark.compiler.bundle import shipped
from kspark.compiler.lowering.columns import schema
from kspark.compiler.lowering.constants import constant_column
from kspark.compiler.lowering.flat import flat_columns, flat_struct, flattened, nested
from kspark.compiler.lowering.stateful import restored, tasked_input
from kspark.compiler.resume import Resume
from kspark.errors import CompilationError
from kspark_server import envelope as env

__all__ = [
    "OPERATOR_COLUMN",
    "GroupedPart",
    "SharedLayout",
    "grouped_operator",
    "grouped_part",
    "grouped_sinks",
    "shared_layout",
]


@dataclasses.dataclass(frozen=True)
class GroupedPart:
    """One stateful operator's side of the query's ``applyInPandasWithState``: its tasked input, its function, the output columns it
    declares (without the constants) and the constants it puts back after."""

    stage: st.Stateful
    tasked: DataFrame
    fn: Any
    out: StructType
    constants: dict[str, Any]
    #: the struct columns of ``out`` that may leave the operator as flat columns
    #: (:mod:`kspark.compiler.lowering.flat`)
    flat_out: tuple[str, ...] = ()


def grouped_part(
    stage: st.Stateful,
    df_of: Callable[[st.Stage], DataFrame],
    resume: Resume | None,
    checkpoint: str | None,
    operator: int = 0,
) -> GroupedPart:
    """The side of ``stage``, the ``operator``-th stateful
    operator of its query: grouped by task, the records straight from the shuffle, the
    state in kspark's files under the checkpoint (docs/design/grouped-runner.md)."""
    from kspark_server.operators.grouped import GroupedOperator, output_struct
    from kspark_server.taskfiles import state_root
    from kspark_server.transport import operator_schema

    spec = stage.spec
    if checkpoint is None:
        raise CompilationError(
            f"{spec.processor}: a stateful operator keeps its state in the "
            "query's checkpoint, and this DataFrame was built without one: build it "
            "through StreamsApp",
            processor=spec.processor,
        )
    root = state_root(checkpoint)
    if "://" in root:
        raise CompilationError(
            f"{spec.processor}: a stateful operator writes its state files "
            f"with the executors' file system, and checkpoint {checkpoint} is not a local "
            "or shared path: use a path (or a file: URI) that every executor sees",
            processor=spec.processor,
        )
    with contextlib.suppress(OSError):
        # the checkpoint's state files' folder, made before any task writes to it
        os.makedirs(root, exist_ok=True)
    tasked, constants, constants_json = tasked_input(stage, df_of, operator)
    seeds = resume.task_seeds.get(spec.store) if resume is not None else None
    # struct columns cross the Python worker flat: pyspark converts a struct row by row
    flat_in = flat_columns(tasked.schema)
    nested_in = {f.name: f.dataType.jsonValue() for f in tasked.schema.fields if f.name in flat_in}
    tasked = flattened(tasked, flat_in)
    fn = GroupedOperator(spec, constants_json, tasked.schema.json(), root, seeds, nested_in)
    out = operator_schema(spec.output_schema, spec.packed.out)
    declared = output_struct(StructType([f for f in out.fields if f.name not in constants]))
    return GroupedPart(
        stage=stage,
        tasked=tasked,
        fn=fn,
        out=declared,
        constants=constants,
        flat_out=tuple(flat_columns(declared)),
    )


def grouped_operator(part: GroupedPart) -> DataFrame:
    """The output records of an app's one stateful operator, as the envelope's
    rows."""
    flat = list(part.flat_out)
    fn = part.fn.with_flat_output(flat)
    result = _apply(part.tasked, fn, flat_struct(part.out, flat))
    return _grouped_output(nested(result, part.out, flat), part)


def grouped_sinks(parts: list[GroupedPart], sinks: list[int]) -> DataFrame:
    """The output records of several stateful operators from ONE
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
        shipped(fn),
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
    return restored(result, part.stage, part.constants)
