"""The stateful operators' inputs, grouped by task: each record's hash and task key, a
join's two inputs in one union, the values an operator reads as JSON text, the constant
columns left out; and their outputs with the constants back.

The operators run under ``applyInPandasWithState`` (:mod:`.grouped`): records reach an
operator straight from the shuffle, as Arrow-backed frames, and leave it as rows of the
envelope's schema; the state lives in kspark's own files in the checkpoint
(``kspark_server.taskfiles``, docs/design/grouped-runner.md).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from kspark.compiler import stages as st
from kspark.compiler.lowering.columns import dtype, schema
from kspark.compiler.lowering.constants import add_constants, describe_constants
from kspark.compiler.lowering.sources import read_constants
from kspark_server import envelope as env
from kspark_server.spec import Packed

__all__ = ["cogroup", "restored", "stateful_constants", "task_column", "tasked_input"]


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


def tasked_input(
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
    # columns that are the same for every record stay out of the Python worker; the
    # operator puts them back while it works
    constants = stateful_constants(stage)
    constants_json = ""
    if constants:
        constants_json = describe_constants(constants, _packed_columns(stage))
        tasked = tasked.drop(*constants)
    return tasked, constants, constants_json


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
    frames = []
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
        frames.append(df_of(part).select(*cols))
    return functools.reduce(lambda a, b: a.unionByName(b), frames)


def _json_values(stream: DataFrame, packed: Packed) -> DataFrame:
    """Values that the operator reads travel as JSON text, which msgspec parses fast;
    everything else (headers, a deduplicated value) crosses as Arrow columns, by
    reference."""
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


def restored(result: DataFrame, stage: st.Stateful, constants: dict[str, Any]) -> DataFrame:
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
