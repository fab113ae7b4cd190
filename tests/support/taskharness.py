"""A stateful operator driven directly, without Spark: one task's durable state (its files
and committed version, as ``applyInPandasWithState`` keeps them), and one task of an
operator across micro-batches and restarts."""

from __future__ import annotations

import itertools
import json
from typing import Any

import pandas as pd
import pyarrow as pa
import pytest

from kspark_server import localstore, placement, stateenc
from kspark_server.operators.base import TaskProcessor
from kspark_server.taskfiles import TaskFiles


class TaskState:
    """One task's durable state as the runner keeps it: its files under ``root`` (a
    checkpoint's ``kspark-state`` folder) and its committed version, which Spark's group
    state holds (:class:`kspark_server.operators.grouped.GroupedOperator` drives an
    operator the same way)."""

    def __init__(self, root: Any) -> None:
        self.root = str(root)
        #: the group state: the committed version, naming the task's files
        self.committed: tuple[Any, ...] | None = None

    def run(self, proc: TaskProcessor, key: tuple[int], rows: Any) -> pa.Table | None:
        """One batch of the task ``key``: ``rows`` (a pandas frame or an Arrow table) in,
        the operator's output records out; the new version committed."""
        table = (
            rows if isinstance(rows, pa.Table) else pa.Table.from_pandas(rows, preserve_index=False)
        )
        files = self.files(proc.spec.store, placement.task_of(int(key[0])))
        proc.attach(files)
        out = proc.run_task(key, table)
        self.committed = files.committed()
        return out

    def files(self, store: str, task: int = 0) -> TaskFiles:
        """The task's files of ``store`` at the committed version."""
        return TaskFiles(self.root, store, task, self.committed)

    def version(self) -> tuple[Any, ...] | None:
        """The committed version: incarnation, batches, base bytes, log bytes, log
        length, base chunks."""
        return None if self.committed is None else tuple(self.committed[:6])

    def log(self, store: str, task: int = 0) -> list[bytes]:
        """The committed log's changes, oldest first."""
        return [blob for (blob,) in self.files(store, task).log.get()]

    def chunks(self, store: str, task: int = 0) -> list[bytes]:
        """The committed base's chunks."""
        return list(self.files(store, task).chunks())

    def seed(self, store: str, task: int, chunks: list[bytes]) -> None:
        """Start the task from a base of ``chunks`` (as a rescale's new layout does)."""
        files = TaskFiles(self.root, store, task, None)
        for i, chunk in enumerate(chunks):
            stateenc.decode_frame(chunk)  # a frame, as the operator will read it
            files.base.updateValue((i,), (chunk,))
        files.version.update(("seeded", 0, sum(map(len, chunks)), 0, 0, len(chunks)))
        self.committed = files.committed()


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
        self.durable = TaskState(tmp / "checkpoint" / "kspark-state")
        self.executors = itertools.count()
        self.sides: dict[str, int] = {}
        self.proc: TaskProcessor
        self.restart()

    def restart(self) -> None:
        close_local_stores()
        self.mp.setenv("KSPARK_LOCAL_STATE_DIR", str(self.tmp / f"exec-{next(self.executors)}"))
        self.proc = self.make()

    def run(self, batch: list[tuple[int, Any]]) -> list[Out]:
        """The batch's output records, in the order the sink writes them; ``batch`` holds
        (position, record), the records as :meth:`input_rows` takes them."""
        key = (placement.task_keys(1)[0],)
        rows: list[dict[str, Any]] = []
        table = self.durable.run(self.proc, key, self.input_rows(batch))
        for r in [] if table is None else table.to_pylist():
            if r["ks_side"] is None:
                rows.append(r)
            else:
                self.count_side(json.loads(r["ks_side"]))
        if self.by_input_position:
            rows.sort(key=lambda r: (r["ks_seq"], r["ks_sub"]))
        return [self.output(r) for r in rows]

    # what an operator's own input and output rows need, in a subclass

    def input_rows(self, batch: list[tuple[int, Any]]) -> pd.DataFrame:
        """The task's input rows of ``batch``: two-input records (:data:`Rec`)."""
        return frame(batch)

    def count_side(self, side: dict[str, Any]) -> None:
        """Sums a side row's count into ``sides``, by kind (store entries aside)."""
        if side["kind"] != "store_entries":
            self.sides[side["kind"]] = self.sides.get(side["kind"], 0) + side["count"]

    def output(self, row: dict[str, Any]) -> Out:
        """The output record of an output row."""
        return (row["key"], row["value"], int(row["timestamp"]))
