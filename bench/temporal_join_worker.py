"""The temporal join's Python worker path for one task, in process: pyspark's Arrow ->
pandas hand-over, the operator's frames back to Arrow, the operator, its output frame and
pyspark's pandas -> Arrow conversion of it, each timed.

    PYTHONPATH=sdk:server_plugin python bench/temporal_join_worker.py [--payments N]

The task's rows are ``bench/temporal_join_operator.py``'s batch, in the columns the
lowering ships (the constants left out), cut into Arrow batches of
``spark.sql.execution.arrow.maxRecordsPerBatch`` (10,000) rows as the JVM sends them.
One core, no JVM; best CPU time of ``--repeat`` runs of each step.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))

import pandas as pd
import pyarrow as pa
import temporal_join_operator as tjo

from kspark_server import localstore, placement

#: The columns the lowering ships for the bench's join: the constants (partition,
#: headers, ks_seq, ks_sub) stay in the JVM.
SHIPPED = (
    "key",
    "value",
    "timestamp",
    "topic",
    "offset",
    "ks_side",
    "ks_tvalue",
    "ks_jside",
    "ks_hash",
    "ks_task",
)


class _State:
    """The group state pyspark hands the function: none committed yet."""

    exists = False
    get = None

    def update(self, value: Any) -> None:
        self.value = value


def best(fn: Callable[[], Any], repeat: int) -> tuple[float, Any]:
    took, out = float("inf"), None
    for _ in range(repeat):
        start = time.process_time()
        out = fn()
        took = min(took, time.process_time() - start)
    return took, out


def main() -> None:
    from pyspark.sql.conversion import ArrowBatchTransformer, PandasToArrowConversion
    from pyspark.sql.pandas.types import from_arrow_schema
    from pyspark.sql.types import StructField, StructType

    from kspark.compiler.lowering.constants import describe_constants
    from kspark_server.operators.grouped import GroupedOperator, output_struct
    from kspark_server.transport import operator_schema

    p = tjo.batch_arguments(argparse.ArgumentParser(description=__doc__))
    p.add_argument("--batch-rows", type=int, default=10_000)
    a = p.parse_args()
    full = tjo.batch(a.payments, a.keys, a.versions)
    key = placement.task_keys(1)[0]
    table = full.select(list(SHIPPED)).set_column(
        SHIPPED.index("ks_task"), "ks_task", pa.array([key] * full.num_rows, pa.int32())
    )
    batches = table.to_batches(max_chunksize=a.batch_rows)
    spark_schema = from_arrow_schema(table.schema)
    spec = tjo.spec()
    # the constants the lowering leaves out, by their places in the packed columns
    envelope = ["key", "value", "timestamp", "headers", "topic", "partition", "offset"]
    packed = [
        *envelope,
        "ks_seq",
        "ks_sub",
        "ks_side",
        "ks_tvalue",
        "ks_jside",
        "ks_hash",
        "ks_task",
    ]
    constants = {"partition": 0, "headers": [], "ks_seq": {"same_as": "offset"}, "ks_sub": 0}
    cj = describe_constants(constants, packed)
    out_struct = output_struct(
        StructType(
            [
                f
                for f in operator_schema(spec.output_schema, spec.packed.out).fields
                if f.name not in constants
            ]
        )
    )

    def to_pandas() -> list[Any]:
        frames = []
        for b in batches:
            series = ArrowBatchTransformer.to_pandas(
                b, timezone="UTC", struct_in_pandas="dict", ndarray_as_list=False
            )
            frames.append(pd.concat(series, axis=1))
        return frames

    t_in, frames = best(to_pandas, a.repeat)
    root = tempfile.mkdtemp(prefix="kspark-bench-")
    op_cpu: list[float] = []

    def operator() -> Any:
        run = os.path.join(root, str(len(op_cpu)))
        os.environ["KSPARK_LOCAL_STATE_DIR"] = os.path.join(run, "local")
        fn = GroupedOperator(spec, cj, spark_schema.json(), os.path.join(run, "files"))
        start = time.process_time()
        fn.table(frames)
        op_cpu.append(time.process_time() - start)
        got = list(fn((key,), iter(frames), _State()))
        for store in list(localstore._registry().values()):
            store.close()
        return got

    t_call, outs = best(operator, a.repeat)
    t_table = min(op_cpu)
    merged = outs[0]

    def back() -> Any:
        return PandasToArrowConversion.convert(
            [merged],
            StructType([StructField("_1", out_struct)]),
            timezone="UTC",
            safecheck=False,
            arrow_cast=True,
            assign_cols_by_name=True,
        )

    t_out, _ = best(back, a.repeat)
    n = table.num_rows
    print(
        f"one task: {a.payments:,} payments + {n - a.payments:,} table updates, {len(batches)} Arrow batches"
    )
    print(f"  Arrow -> pandas (pyspark's worker)           {t_in:6.3f} s CPU")
    print(f"  frames -> one Arrow table (GroupedOperator)   {t_table:6.3f} s CPU")
    print(f"  the operator's call, table included           {t_call:6.3f} s CPU")
    print(
        f"  output frame -> Arrow (pyspark's worker)      {t_out:6.3f} s CPU  ({len(merged):,} rows)"
    )
    for name in table.column_names:
        print(
            f"    column {name:10s} {table.column(name).type}  {table.column(name).nbytes / n:5.1f} B/row"
        )


if __name__ == "__main__":
    main()
