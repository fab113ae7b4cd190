"""A stateful operator driven directly, without Spark: a stand-in for Spark's state store
handle, and one task of an operator across micro-batches and restarts."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from kspark.testing.local import StateHandle
from kspark_server import localstore, placement, transport
from kspark_server.operators.base import TaskProcessor

#: Spark's ``StatefulProcessorHandle`` for one task, its state variables in a dict: the
#: in-process engine's own, so the operators' tests and the engine share one stand-in
Handle = StateHandle


#: A two-input record: side (0: the operator's first input, 1: its second), key, value,
#: timestamp
Rec = tuple[int, str | None, str | None, int]
#: An output record: key, value, timestamp
Out = tuple[Any, Any, int]


def frame(batch: list[tuple[int, Rec]]) -> pd.DataFrame:
    """A task's input rows, as the lowering makes them: the second input's values in
    ``ks_tvalue``; ``batch`` holds (position, record)."""
    rows = []
    for seq, (side, key, value, ts) in batch:
        rows.append(
            {
                "key": key,
                "value": None if side else value,
                "timestamp": ts,
                "headers": None,
                "topic": "right" if side else "left",
                "partition": 0,
                "offset": seq,
                "ks_seq": seq,
                "ks_sub": 0,
                "ks_side": None,
                "ks_tvalue": value if side else None,
                "ks_jside": side,
                "ks_hash": hash(key) % 1000 if key is not None else 42,
                "ks_task": 0,
            }
        )
    return pd.DataFrame(rows)


def packed(f: pd.DataFrame) -> pd.DataFrame:
    """``f`` as the operator receives it: packed by task (kspark_server.transport)."""
    rb = pa.RecordBatch.from_pandas(f, preserve_index=False)
    return pa.Table.from_batches(list(transport.pack_by_task([rb]))).to_pandas()


def close_local_stores() -> None:
    """Close every LMDB environment this process opened (each reserves address space)."""
    for store in list(localstore._registry().values()):
        store.close()


class Runner:
    """One task of an operator across batches; ``restart()`` starts a new processor on a
    new executor (an empty local store), which rebuilds from the durable state. Side rows
    are summed by kind in ``sides``."""

    #: outputs in the order of the input records that caused them (the sink's order for
    #: operators that emit each record's results before the next's); False keeps the
    #: operator's own emission order
    by_input_position = True

    def __init__(self, make: Any, tmp: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.make, self.tmp, self.mp = make, tmp, monkeypatch
        self.durable: dict[str, Any] = {}
        self.executors = itertools.count()
        self.sides: dict[str, int] = {}
        self.proc: TaskProcessor
        self.restart()

    def restart(self) -> None:
        close_local_stores()
        self.mp.setenv("KSPARK_LOCAL_STATE_DIR", str(self.tmp / f"exec-{next(self.executors)}"))
        self.proc = self.make()
        self.proc.init(Handle(self.durable))  # type: ignore[arg-type]

    def run(self, batch: list[tuple[int, Rec]]) -> list[Out]:
        """The batch's output records, in the order the sink writes them."""
        key = (placement.task_keys(1)[0],)
        rows: list[dict[str, Any]] = []
        for f in self.proc.handleInputRows(key, iter([packed(frame(batch))]), None):
            table = transport.unpack_table(f["ks_rows"].tolist())  # leaves packed too
            for r in [] if table is None else table.to_pylist():
                if r["ks_side"] is None:
                    rows.append(r)
                    continue
                side = json.loads(r["ks_side"])
                if side["kind"] != "store_entries":
                    self.sides[side["kind"]] = self.sides.get(side["kind"], 0) + side["count"]
        if self.by_input_position:
            rows.sort(key=lambda r: (r["ks_seq"], r["ks_sub"]))
        return [(r["key"], r["value"], int(r["timestamp"])) for r in rows]
